//! Open handles: which connection holds which inode open. Kept in memory only: handles die
//! with the process, and on restart orphans left behind are destroyed.
//!
//! Only the commit thread changes the table (opens, closes and unlinks are serialized there,
//! so an unlink always sees every open that precedes it); readers take the lock briefly to
//! report open counts.

use std::collections::{BTreeSet, HashMap};
use weft_proto::Fid;
use weft_proto::mdt::AccessMode;

/// One open handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Handle {
    /// The open inode.
    pub fid: Fid,
    /// How it was opened.
    pub access: AccessMode,
}

/// Every open handle, by (connection id, handle id).
#[derive(Debug, Default)]
pub struct Handles {
    next_id: u64,
    by_key: HashMap<(u64, u64), Handle>,
    by_conn: HashMap<u64, BTreeSet<u64>>,
    counts: HashMap<Fid, u32>,
}

/// How to undo a change when the transaction it belonged to fails to commit.
#[derive(Debug, Clone)]
pub enum Undo {
    /// A handle was added.
    Opened(u64, u64),
    /// A handle was removed.
    Closed(u64, u64, Handle),
}

impl Handles {
    /// Registers a handle and returns its id.
    pub fn open(&mut self, conn: u64, handle: Handle) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        self.insert(conn, id, handle);
        id
    }

    fn insert(&mut self, conn: u64, id: u64, handle: Handle) {
        self.by_key.insert((conn, id), handle);
        self.by_conn.entry(conn).or_default().insert(id);
        *self.counts.entry(handle.fid).or_insert(0) += 1;
    }

    /// The handle `id` of connection `conn`.
    pub fn get(&self, conn: u64, id: u64) -> Option<Handle> {
        self.by_key.get(&(conn, id)).copied()
    }

    /// Removes a handle of connection `conn`.
    pub fn close(&mut self, conn: u64, id: u64) -> Option<Handle> {
        let h = self.by_key.remove(&(conn, id))?;
        if let Some(ids) = self.by_conn.get_mut(&conn) {
            ids.remove(&id);
            if ids.is_empty() {
                self.by_conn.remove(&conn);
            }
        }
        if let Some(n) = self.counts.get_mut(&h.fid) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.counts.remove(&h.fid);
            }
        }
        Some(h)
    }

    /// The handle ids of connection `conn`.
    pub fn of_conn(&self, conn: u64) -> Vec<u64> {
        self.by_conn
            .get(&conn)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default()
    }

    /// How many handles keep `fid` open.
    pub fn count(&self, fid: Fid) -> u32 {
        self.counts.get(&fid).copied().unwrap_or(0)
    }

    /// How many handles are open in all.
    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    /// Reverts changes, newest first.
    pub fn undo(&mut self, log: Vec<Undo>) {
        for u in log.into_iter().rev() {
            match u {
                Undo::Opened(conn, id) => {
                    self.close(conn, id);
                }
                Undo::Closed(conn, id, h) => self.insert(conn, id, h),
            }
        }
    }
}
