//! The mount's handle tables: the numbers handed to the kernel for open files and open
//! directories ([`HandleIds`]), the table from a number to what it names
//! ([`HandleTable`]), and what an open file of the mount holds ([`OpenFile`]).
//!
//! Files and directories share one counter, so a number names at most one of either for
//! the life of the mount (the kernel hands it back in every request on that handle).

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Hands out handle numbers, from 1 up, never twice.
#[derive(Debug)]
pub struct HandleIds(AtomicU64);

impl Default for HandleIds {
    fn default() -> Self {
        Self(AtomicU64::new(1))
    }
}

impl HandleIds {
    /// The next unused handle number.
    pub fn next(&self) -> u64 {
        self.0.fetch_add(1, Ordering::Relaxed)
    }
}

/// Open handles by number.
#[derive(Debug)]
pub struct HandleTable<T> {
    map: Mutex<HashMap<u64, Arc<T>>>,
}

impl<T> Default for HandleTable<T> {
    fn default() -> Self {
        Self {
            map: Mutex::new(HashMap::new()),
        }
    }
}

impl<T> HandleTable<T> {
    /// Registers `value` under handle `fh`.
    pub fn insert(&self, fh: u64, value: T) {
        self.map.lock().insert(fh, Arc::new(value));
    }

    /// What handle `fh` names, if it is open.
    pub fn get(&self, fh: u64) -> Option<Arc<T>> {
        self.map.lock().get(&fh).cloned()
    }

    /// Closes handle `fh`; returns what it named.
    pub fn remove(&self, fh: u64) -> Option<Arc<T>> {
        self.map.lock().remove(&fh)
    }

    /// Every open handle for which `keep` holds.
    pub fn matching(&self, keep: impl Fn(&Arc<T>) -> bool) -> Vec<Arc<T>> {
        self.map
            .lock()
            .values()
            .filter(|v| keep(v))
            .cloned()
            .collect()
    }

    /// Whether `test` holds for some open handle.
    pub fn any(&self, test: impl Fn(&Arc<T>) -> bool) -> bool {
        self.map.lock().values().any(test)
    }
}

/// An open file of the mount (`F` is the library's [`weft_client::File`]; tests use a
/// stand-in).
#[derive(Debug)]
pub struct OpenFile<F = weft_client::File> {
    /// The inode the file was opened at.
    pub ino: u64,
    /// The library's handle.
    pub file: F,
    /// Whether it was opened for writing.
    pub writable: bool,
    /// Set when a write through this handle returns: the handle may hold bytes that
    /// reads through the file's other handles must see (cleared when they are written
    /// back for such a read).
    pub wrote: AtomicBool,
    /// The job id of the process that opened the file: FLUSH and RELEASE are counted for
    /// it, as the data they write back is that job's.
    pub jobid: Option<Arc<str>>,
}

impl<F> OpenFile<F> {
    /// A handle of `ino` that has written nothing yet.
    pub fn new(ino: u64, file: F, writable: bool, jobid: Option<Arc<str>>) -> Self {
        Self {
            ino,
            file,
            writable,
            wrote: AtomicBool::new(false),
            jobid,
        }
    }

    /// Notes that a write through this handle returned.
    pub fn note_write(&self) {
        self.wrote.store(true, Ordering::Release);
    }

    /// Whether this handle wrote since last asked, clearing the note.
    pub fn take_wrote(&self) -> bool {
        self.wrote.swap(false, Ordering::AcqRel)
    }
}

impl<F> HandleTable<OpenFile<F>> {
    /// Every handle of `ino` open in this mount, read-only ones included.
    pub fn of_inode(&self, ino: u64) -> Vec<Arc<OpenFile<F>>> {
        self.matching(|f| f.ino == ino)
    }

    /// The writable handles of `ino` open in this mount.
    pub fn writers_of(&self, ino: u64) -> Vec<Arc<OpenFile<F>>> {
        self.matching(|f| f.ino == ino && f.writable)
    }

    /// Whether another handle of `f`'s inode in this mount wrote since its bytes were last
    /// written back (a read must then go the slow way, which writes them back first).
    pub fn others_wrote(&self, f: &Arc<OpenFile<F>>) -> bool {
        self.any(|w| {
            w.ino == f.ino && w.writable && !Arc::ptr_eq(w, f) && w.wrote.load(Ordering::Acquire)
        })
    }

    /// The job id of the process that opened `fh` (none for an unknown handle).
    pub fn jobid(&self, fh: u64) -> Option<Arc<str>> {
        self.map.lock().get(&fh).and_then(|f| f.jobid.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_start_at_one_and_never_repeat() {
        let ids = HandleIds::default();
        assert_eq!(ids.next(), 1);
        assert_eq!(ids.next(), 2);
        assert_eq!(ids.next(), 3);
    }

    #[test]
    fn handles_are_found_until_removed() {
        let t = HandleTable::default();
        t.insert(1, "a");
        t.insert(2, "b");
        assert_eq!(t.get(1).as_deref(), Some(&"a"));
        assert_eq!(t.remove(1).as_deref(), Some(&"a"));
        assert!(t.get(1).is_none());
        assert!(t.remove(1).is_none());
        assert_eq!(t.get(2).as_deref(), Some(&"b"));
        assert!(t.any(|v| **v == "b"));
        assert!(!t.any(|v| **v == "a"));
        assert_eq!(t.matching(|_| true).len(), 1);
    }

    #[test]
    fn writers_and_their_writes_are_told_apart_per_inode() {
        let t = HandleTable::default();
        t.insert(1, OpenFile::new(7, (), false, Some(Arc::from("job"))));
        t.insert(2, OpenFile::new(7, (), true, None));
        t.insert(3, OpenFile::new(7, (), true, None));
        t.insert(4, OpenFile::new(8, (), true, None));
        assert_eq!(t.of_inode(7).len(), 3);
        assert_eq!(t.writers_of(7).len(), 2);
        assert_eq!(t.writers_of(9).len(), 0);
        assert_eq!(t.jobid(1).as_deref(), Some("job"));
        assert_eq!(t.jobid(2), None);
        assert_eq!(t.jobid(99), None);

        let (reader, w2, w3, other) = (
            t.get(1).unwrap(),
            t.get(2).unwrap(),
            t.get(3).unwrap(),
            t.get(4).unwrap(),
        );
        assert!(!t.others_wrote(&reader));
        w2.note_write();
        assert!(t.others_wrote(&reader));
        assert!(t.others_wrote(&w3));
        assert!(!t.others_wrote(&w2), "its own writes do not count");
        assert!(!t.others_wrote(&other), "nor those of another inode");
        assert!(w2.take_wrote());
        assert!(!w2.take_wrote());
        assert!(!t.others_wrote(&reader));
    }
}
