//! Open handles: which connection holds which inode open. Kept in memory only: handles die
//! with the process. After a restart clients open their files again (open replay), and
//! orphans that nobody reopened within the grace period are destroyed. Handle ids start at
//! a random base per process, so a handle id of a previous run is never taken for one of
//! this run: a client holding one gets EBADF and opens its file again.
//!
//! Only the commit thread changes the table (opens, closes and unlinks are serialized there,
//! so an unlink always sees every open that precedes it); readers take the lock briefly to
//! report open counts.

use std::collections::{BTreeSet, HashMap};
use uuid::Uuid;
use weft_proto::Fid;
use weft_proto::mdt::AccessMode;

/// One open handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Handle {
    /// The open inode.
    pub fid: Fid,
    /// How it was opened.
    pub access: AccessMode,
    /// An unlinked inode this handle keeps alive: the file's layout as it was when the
    /// handle opened, moved there by a layout swap (`weft migrate`). The client behind the
    /// handle may still read those objects, so they are destroyed only after it closes.
    pub pins: Option<Fid>,
}

/// Every open handle, by (connection id, handle id).
#[derive(Debug, Default)]
pub struct Handles {
    next_id: u64,
    by_key: HashMap<(u64, u64), Handle>,
    by_conn: HashMap<u64, BTreeSet<u64>>,
    counts: HashMap<Fid, u32>,
    /// Handles of connections that broke, by id: their client and park number. They still
    /// count as open until taken back or dropped.
    parked: HashMap<u64, (Uuid, u64, Handle)>,
    parks: u64,
}

/// How to undo a change when the transaction it belonged to fails to commit.
#[derive(Debug, Clone)]
pub enum Undo {
    /// A handle was added.
    Opened(u64, u64),
    /// A handle was removed.
    Closed(u64, u64, Handle),
    /// A handle started pinning an inode.
    Pinned(u64, u64),
    /// A parked handle (by id) started pinning an inode.
    PinnedParked(u64),
}

impl Handles {
    /// An empty table whose handle ids follow `base`.
    pub fn starting_at(base: u64) -> Self {
        Self {
            next_id: base,
            ..Self::default()
        }
    }

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
        if let Some(p) = handle.pins {
            *self.counts.entry(p).or_insert(0) += 1;
        }
    }

    fn uncount(&mut self, fid: Fid) {
        if let Some(n) = self.counts.get_mut(&fid) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.counts.remove(&fid);
            }
        }
    }

    /// Makes every handle open on `fid` that pins nothing yet pin `pinned` (a layout swap
    /// moved the layout those handles read to `pinned`); returns the undo records.
    pub fn pin_readers(&mut self, fid: Fid, pinned: Fid) -> Vec<Undo> {
        let keys: Vec<(u64, u64)> = self
            .by_key
            .iter()
            .filter(|(_, h)| h.fid == fid && h.pins.is_none())
            .map(|(k, _)| *k)
            .collect();
        for k in &keys {
            if let Some(h) = self.by_key.get_mut(k) {
                h.pins = Some(pinned);
            }
            *self.counts.entry(pinned).or_insert(0) += 1;
        }
        // A parked handle taken back later reads the old layout too.
        let parked: Vec<u64> = self
            .parked
            .iter()
            .filter(|(_, (_, _, h))| h.fid == fid && h.pins.is_none())
            .map(|(id, _)| *id)
            .collect();
        for id in &parked {
            if let Some((_, _, h)) = self.parked.get_mut(id) {
                h.pins = Some(pinned);
            }
            *self.counts.entry(pinned).or_insert(0) += 1;
        }
        keys.into_iter()
            .map(|(c, i)| Undo::Pinned(c, i))
            .chain(parked.into_iter().map(Undo::PinnedParked))
            .collect()
    }

    /// Whether any handle, parked ones included (their client may take them back and
    /// write), has `fid` open for writing.
    pub fn has_writer(&self, fid: Fid) -> bool {
        self.by_key
            .values()
            .chain(self.parked.values().map(|(_, _, h)| h))
            .any(|h| h.fid == fid && h.access != AccessMode::Read)
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
        self.uncount(h.fid);
        if let Some(p) = h.pins {
            self.uncount(p);
        }
        Some(h)
    }

    /// Parks every handle of connection `conn` (which broke) for client `client` to take
    /// back from a new connection; returns the park number. A nil client cannot come back:
    /// nothing is parked.
    pub fn park(&mut self, conn: u64, client: Uuid) -> u64 {
        self.parks += 1;
        if client.is_nil() {
            return self.parks;
        }
        for id in self.of_conn(conn) {
            if let Some(h) = self.by_key.remove(&(conn, id)) {
                self.parked.insert(id, (client, self.parks, h));
            }
        }
        self.by_conn.remove(&conn);
        self.parks
    }

    /// The most recent park number.
    pub fn last_park(&self) -> u64 {
        self.parks
    }

    /// Makes parked handle `id` of `client` a handle of connection `conn` again.
    pub fn adopt(&mut self, conn: u64, client: Uuid, id: u64) {
        if client.is_nil() || self.parked.get(&id).is_none_or(|(c, _, _)| *c != client) {
            return;
        }
        if let Some((_, _, h)) = self.parked.remove(&id) {
            self.by_key.insert((conn, id), h);
            self.by_conn.entry(conn).or_default().insert(id);
        }
    }

    /// Takes the handles of `client` parked at or before park number `upto` out of the
    /// parked set, as handles of connection `conn` (to be closed).
    pub fn unpark_expired(&mut self, client: Uuid, upto: u64, conn: u64) -> Vec<u64> {
        let ids: Vec<u64> = self
            .parked
            .iter()
            .filter(|(_, (c, n, _))| *c == client && *n <= upto)
            .map(|(id, _)| *id)
            .collect();
        for id in &ids {
            if let Some((_, _, h)) = self.parked.remove(id) {
                self.by_key.insert((conn, *id), h);
                self.by_conn.entry(conn).or_default().insert(*id);
            }
        }
        ids
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

    /// How many handles are open in all (parked ones included).
    pub fn len(&self) -> usize {
        self.by_key.len() + self.parked.len()
    }

    /// Reverts changes, newest first.
    pub fn undo(&mut self, log: Vec<Undo>) {
        for u in log.into_iter().rev() {
            match u {
                Undo::Opened(conn, id) => {
                    self.close(conn, id);
                }
                Undo::Closed(conn, id, h) => self.insert(conn, id, h),
                Undo::Pinned(conn, id) => {
                    if let Some(p) = self.by_key.get_mut(&(conn, id)).and_then(|h| h.pins.take()) {
                        self.uncount(p);
                    }
                }
                Undo::PinnedParked(id) => {
                    if let Some(p) = self.parked.get_mut(&id).and_then(|(_, _, h)| h.pins.take()) {
                        self.uncount(p);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fid(oid: u32) -> Fid {
        Fid {
            seq: 0x200,
            oid,
            ver: 0,
        }
    }

    fn handle(oid: u32, access: AccessMode) -> Handle {
        Handle {
            fid: fid(oid),
            access,
            pins: None,
        }
    }

    #[test]
    fn parked_handles_count_as_writers_and_are_pinned_by_a_swap() {
        let (writer, reader) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let mut h = Handles::default();
        let w = h.open(1, handle(7, AccessMode::ReadWrite));
        let r = h.open(2, handle(7, AccessMode::Read));
        h.park(1, writer);
        h.park(2, reader);
        assert!(
            h.has_writer(fid(7)),
            "a parked writer may come back and write"
        );

        // A swap pins the old layout for the parked reader; undoing it unpins.
        let undo = h.pin_readers(fid(7), fid(99));
        assert_eq!(
            h.count(fid(99)),
            2,
            "both parked handles read the old layout"
        );
        h.undo(undo);
        assert_eq!(h.count(fid(99)), 0);

        let _undo = h.pin_readers(fid(7), fid(99));
        h.adopt(3, reader, r);
        assert_eq!(h.get(3, r).and_then(|x| x.pins), Some(fid(99)));
        h.adopt(4, writer, w);
        let closed = h.close(4, w).unwrap();
        assert_eq!(closed.pins, Some(fid(99)));
        assert!(!h.has_writer(fid(7)));
        h.close(3, r);
        assert_eq!(h.count(fid(99)), 0);
        assert_eq!(h.count(fid(7)), 0);
        assert_eq!(h.len(), 0);
    }
}
