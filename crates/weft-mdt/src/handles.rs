//! Open handles: which connection holds which inode open. Kept in memory only: handles die
//! with the process. After a restart clients open their files again (open replay), and
//! orphans that nobody reopened within the grace period are destroyed. Handle ids start at
//! a random base per process, so a handle id of a previous run is never taken for one of
//! this run: a client holding one gets EBADF and opens its file again.
//!
//! The commit thread changes the table (opens, closes and unlinks are serialized there, so
//! an unlink always sees every open that precedes it); readers take the lock briefly to
//! report open counts. Opens that change nothing stored, and closes that record nothing,
//! may skip the commit thread (`crate::fast`): every inode whose handles the commit thread
//! looks at or changes is *touched* until its batch has committed, and a fast open or close
//! of a touched inode, or one that overlapped the end of a batch, goes through the commit
//! thread after all. So a fast open either precedes an unlink's look at the handles (which
//! then sees it and keeps the inode as an orphan) or read the inode from a snapshot taken
//! after the unlink committed.

use std::collections::{BTreeSet, HashMap, HashSet};
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
    /// Inodes whose handles the batch being applied looked at or changed.
    touched: HashSet<Fid>,
    /// Batches ended (committed or failed): see [`Handles::end_batch`].
    batches: u64,
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
        let id = self.new_id();
        self.insert(conn, id, handle);
        id
    }

    fn new_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Registers a handle opened outside the commit thread on an inode read from a snapshot
    /// taken after [`batches`](Self::batches) was `seen`; `None` (nothing registered) if a
    /// batch ended since or the batch being applied touched the inode: the open must then
    /// go through the commit thread.
    pub fn open_untouched(&mut self, conn: u64, handle: Handle, seen: u64) -> Option<u64> {
        if self.batches != seen || self.touched.contains(&handle.fid) {
            return None;
        }
        let id = self.new_id();
        self.add(conn, id, handle);
        Some(id)
    }

    /// Removes handle `id` of `conn` outside the commit thread, given whether its inode was
    /// still linked in a snapshot taken after [`batches`](Self::batches) was `seen`: only if
    /// nothing stored changes (it pins no old layout, and it is not the last handle of an
    /// unlinked inode) and, as for [`open_untouched`](Self::open_untouched), no batch ended
    /// since nor touched the inode. `None`: the close must go through the commit thread.
    pub fn close_untouched(&mut self, conn: u64, id: u64, linked: bool, seen: u64) -> Option<()> {
        let h = *self.by_key.get(&(conn, id))?;
        if self.batches != seen
            || self.touched.contains(&h.fid)
            || h.pins.is_some()
            || (!linked && self.open_count(h.fid) <= 1)
        {
            return None;
        }
        self.remove(conn, id).map(|_| ())
    }

    /// How many batches have ended.
    pub fn batches(&self) -> u64 {
        self.batches
    }

    /// The commit thread's batch has committed (or failed and been undone): its inodes are
    /// no longer touched.
    pub fn end_batch(&mut self) {
        self.touched.clear();
        self.batches += 1;
    }

    fn insert(&mut self, conn: u64, id: u64, handle: Handle) {
        self.touched.insert(handle.fid);
        self.add(conn, id, handle);
    }

    fn add(&mut self, conn: u64, id: u64, handle: Handle) {
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
        self.touched.insert(fid);
        self.touched.insert(pinned);
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
    pub fn has_writer(&mut self, fid: Fid) -> bool {
        self.touched.insert(fid);
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
        let h = self.remove(conn, id)?;
        self.touched.insert(h.fid);
        Some(h)
    }

    fn remove(&mut self, conn: u64, id: u64) -> Option<Handle> {
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

    /// How many handles keep `fid` open, for the commit thread (which may act on the
    /// answer: the inode counts as touched).
    pub fn count(&mut self, fid: Fid) -> u32 {
        self.touched.insert(fid);
        self.open_count(fid)
    }

    /// How many handles keep `fid` open, for a report.
    pub fn open_count(&self, fid: Fid) -> u32 {
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
    fn fast_opens_and_closes_give_way_to_the_commit_thread() {
        let read = |oid| handle(oid, AccessMode::Read);
        let mut h = Handles::default();
        let seen = h.batches();
        let a = h.open_untouched(1, read(7), seen).unwrap();
        assert_eq!(h.open_count(fid(7)), 1);

        // The commit thread looks at the inode's handles (an unlink choosing between
        // destroying it and keeping an orphan): until its batch ends, fast opens and
        // closes of that inode go through the commit thread, others do not.
        assert_eq!(h.count(fid(7)), 1);
        assert_eq!(h.open_untouched(1, read(7), seen), None);
        assert_eq!(h.close_untouched(1, a, true, seen), None);
        let other = h.open_untouched(1, read(8), seen).unwrap();
        assert_eq!(h.close_untouched(1, other, true, seen), Some(()));

        // A batch ended after the snapshot was read: the snapshot may predate it.
        h.end_batch();
        assert_eq!(h.open_untouched(1, read(7), seen), None);
        let seen = h.batches();

        // The last close of an unlinked inode destroys it: not a fast close.
        assert_eq!(h.close_untouched(1, a, false, seen), None);
        let b = h.open_untouched(1, read(7), seen).unwrap();
        assert_eq!(h.close_untouched(1, a, false, seen), Some(()));
        assert_eq!(h.close_untouched(1, b, false, seen), None);
        assert_eq!(h.close_untouched(2, b, true, seen), None, "not conn 2's");
        assert_eq!(h.close_untouched(1, b, true, seen), Some(()));
        assert_eq!(h.len(), 0);

        // A handle pinning an old layout (after a swap) closes through the commit thread.
        let c = h.open_untouched(1, read(7), seen).unwrap();
        h.pin_readers(fid(7), fid(99));
        h.end_batch();
        assert_eq!(h.close_untouched(1, c, true, h.batches()), None);
        // What else the commit thread does with the inode's handles counts as a look.
        for change in [
            |h: &mut Handles| {
                h.open(3, handle(7, AccessMode::Read));
            },
            |h: &mut Handles| {
                h.has_writer(fid(7));
            },
            |h: &mut Handles| {
                h.close(1, h.of_conn(1)[0]);
            },
        ] {
            h.end_batch();
            let seen = h.batches();
            change(&mut h);
            assert_eq!(h.open_untouched(1, read(7), seen), None);
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
