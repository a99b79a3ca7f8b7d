//! What this client changes in the namespace, tracked so that what it read before can be
//! trusted after: counters that move at the start and at the end of every request that may
//! change names or attributes, the entries (directory and name) those requests change,
//! and the attributes of the directories its changes were made in, as the MDT returned
//! them with the change.
//!
//! The directory attributes answer the kernel's GETATTR of a directory right after a
//! create or unlink in it (the kernel drops the directory's attributes after every change
//! there, and needs them again for the next path walk): one round trip fewer per file
//! created or removed. They are used once, only while no other change of this client that
//! could alter that directory's attributes started or ended since, and within the age the
//! caller allows (the mount's attribute timeout: what a kernel-cached copy could be as old
//! as).
//!
//! Which changes could alter an inode's attributes is tracked per `Scope`: a request names
//! the inodes whose attributes it may change (a create, the directory it creates in; a
//! setattr, its inode), and each such inode's slot of `SLOTS` (1024) counters moves at its
//! start and end. Requests that may change an inode they do not name (an rmdir or a
//! rename: the entry may be a directory) move one more counter that every kept attribute
//! depends on. So writers working in different directories do not void each other's
//! directory attributes, as one global count would; two inodes sharing a slot only make
//! the rule stricter.
//!
//! Statahead (see [`crate::statahead`]) keeps the attributes of a directory's entries
//! from a listing: an entry stays usable while neither its inode (its slot) nor the entry
//! itself changed through this client since the listing's page was asked for. Entries are
//! tracked exactly (directory and name, with the sequence at which a change of them last
//! started or ended, at most `MAX_NAMES` of them before the older half is forgotten), so a
//! process removing a directory's files one by one does not void the rest of the listing.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use weft_proto::Fid;
use weft_proto::mdt::Attr;

/// Directories whose attributes are kept at most; more are simply not kept.
const MAX_DIRS: usize = 256;

/// Counters inodes are spread over by [`slot`]: enough that the directories a few
/// hundred writers work in rarely share one (8 KiB per client).
const SLOTS: usize = 1024;

/// Entries whose last change is remembered; past this, the older half are forgotten (and
/// what was read before their changes is no longer trusted).
const MAX_NAMES: usize = 1 << 16;

/// The inodes whose attributes one change may alter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    /// These inodes only (at most two: a link names the file and the new parent).
    Inodes([Option<Fid>; 2]),
    /// Possibly any inode.
    All,
}

impl Scope {
    /// One inode.
    pub(crate) fn one(fid: Fid) -> Self {
        Scope::Inodes([Some(fid), None])
    }

    /// No directory: a change of regular files only.
    pub(crate) const NO_DIRECTORY: Scope = Scope::Inodes([None, None]);

    /// The slots of the inodes it names, each once.
    fn slots(&self) -> [Option<usize>; 2] {
        match self {
            Scope::All => [None, None],
            Scope::Inodes([a, b]) => {
                let (a, b) = (a.map(slot), b.map(slot));
                [a, b.filter(|b| Some(*b) != a)]
            }
        }
    }
}

/// The counter slot of `fid`: FIDs of one MDT differ in their low object-id bits, so
/// every bit is mixed in (splitmix64's finalizer).
fn slot(fid: Fid) -> usize {
    fn mix(mut z: u64) -> u64 {
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    let h = mix(fid.seq ^ mix(u64::from(fid.oid) << 32 | u64::from(fid.ver)));
    (h % SLOTS as u64) as usize
}

/// The change counters, the entries changed and the directories' attributes (see the
/// module docs).
pub struct Changes {
    /// Moves at the start and end of every change of [`Scope::All`].
    any: AtomicU64,
    slots: Box<[AtomicU64]>,
    names: Mutex<NameLog>,
    dirs: Mutex<HashMap<Fid, ChangedDir>>,
}

impl Default for Changes {
    fn default() -> Self {
        Self {
            any: AtomicU64::new(0),
            slots: (0..SLOTS).map(|_| AtomicU64::new(0)).collect(),
            names: Mutex::default(),
            dirs: Mutex::default(),
        }
    }
}

/// The entries this client changed: for each directory and name, the sequence number at
/// which a change of it last started or ended.
#[derive(Default)]
struct NameLog {
    /// The last sequence number given.
    seq: u64,
    /// Changes up to this sequence number were forgotten (see [`MAX_NAMES`]).
    floor: u64,
    len: usize,
    moved: HashMap<Fid, HashMap<Box<[u8]>, u64>>,
}

impl NameLog {
    fn moved(&mut self, dir: Fid, name: &[u8]) {
        self.seq += 1;
        if self.len >= MAX_NAMES {
            // Each entry holds a distinct sequence number: at most half are newer.
            let cut = self.seq.saturating_sub((MAX_NAMES / 2) as u64);
            self.moved.retain(|_, names| {
                names.retain(|_, at| *at > cut);
                !names.is_empty()
            });
            self.len = self.moved.values().map(HashMap::len).sum();
            self.floor = cut;
        }
        let names = self.moved.entry(dir).or_default();
        if names.insert(name.into(), self.seq).is_none() {
            self.len += 1;
        }
    }

    /// Whether `dir`'s entry `name` is known not to have changed after sequence `seen`.
    fn unchanged_since(&self, dir: Fid, name: &[u8], seen: u64) -> bool {
        seen >= self.floor
            && self
                .moved
                .get(&dir)
                .and_then(|names| names.get(name))
                .is_none_or(|&at| at <= seen)
    }
}

/// Where every counter stood at one moment (before a listing's page was asked for): what
/// was read after it is current unless a counter it depends on moved since.
pub(crate) struct Snapshot {
    slots: Box<[u64]>,
    any: u64,
    names: u64,
}

impl Snapshot {
    /// What an entry read after this snapshot, whose inode is `fid`, depends on.
    pub(crate) fn entry(&self, fid: Fid) -> EntryStamp {
        let s = slot(fid);
        EntryStamp {
            slot: (s, self.slots[s]),
            any: self.any,
            names: self.names,
        }
    }
}

/// The counters one directory entry read from a listing depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EntryStamp {
    /// Its inode's slot and the slot's value.
    slot: (usize, u64),
    any: u64,
    /// The entry sequence number.
    names: u64,
}

/// Where a directory's counters stood: its slot's and [`Changes::any`]'s.
type Stamp = (u64, u64);

struct ChangedDir {
    attr: Attr,
    /// The counters at which they are current: as they stood right after their change
    /// ended.
    stamp: Stamp,
    at: Instant,
}

/// A change in flight: moves the counts again when dropped, whichever way it ends.
pub(crate) struct Change<'a> {
    changes: &'a Changes,
    any: bool,
    /// The entry it changes (directory and name), if it names one.
    entry: Option<(Fid, Box<[u8]>)>,
    /// The slots it moves, with each one's value right after this change's start.
    slots: [Option<(usize, u64)>; 2],
    /// [`Changes::any`] right after this change's start.
    began_any: u64,
}

impl Drop for Change<'_> {
    fn drop(&mut self) {
        let c = self.changes;
        if let Some((dir, name)) = &self.entry {
            c.names.lock().moved(*dir, name);
        }
        if self.any {
            c.any.fetch_add(1, Ordering::AcqRel);
        }
        for (i, _) in self.slots.iter().flatten() {
            c.slots[*i].fetch_add(1, Ordering::AcqRel);
        }
    }
}

impl Change<'_> {
    /// Keeps `dir`, the attributes of the directory this change was made in as the MDT
    /// returned them, if the change named that directory and no other change of this
    /// client that could alter it started or ended meanwhile (otherwise they may already
    /// be out of date, or about to be).
    pub(crate) fn made_in(&self, dir: &Attr) {
        let s = slot(dir.fid);
        let Some((_, began)) = self.slots.iter().flatten().find(|(i, _)| *i == s) else {
            return;
        };
        let mut dirs = self.changes.dirs.lock();
        if self.changes.stamp(s) != (*began, self.began_any) {
            return;
        }
        if dirs.len() >= MAX_DIRS {
            dirs.clear();
        }
        dirs.insert(
            dir.fid,
            ChangedDir {
                attr: dir.clone(),
                stamp: (began + 1, self.began_any),
                at: Instant::now(),
            },
        );
    }
}

impl Changes {
    /// Where every counter stands now.
    pub(crate) fn snapshot(&self) -> Snapshot {
        // The entry sequence first: a change that starts while the slots are read has
        // moved it already, or moves it after this and is seen as later.
        let names = self.names.lock().seq;
        Snapshot {
            any: self.any.load(Ordering::Acquire),
            slots: self
                .slots
                .iter()
                .map(|s| s.load(Ordering::Acquire))
                .collect(),
            names,
        }
    }

    /// Whether an entry `name` of directory `dir` read with `stamp` is still current as
    /// far as this client's changes go: no change of its inode, of that entry or of
    /// [`Scope::All`] started or ended since.
    pub(crate) fn entry_unchanged(&self, dir: Fid, name: &[u8], stamp: &EntryStamp) -> bool {
        let (s, v) = stamp.slot;
        self.stamp(s) == (v, stamp.any) && self.names.lock().unchanged_since(dir, name, stamp.names)
    }

    fn stamp(&self, slot: usize) -> Stamp {
        (
            self.slots[slot].load(Ordering::Acquire),
            self.any.load(Ordering::Acquire),
        )
    }

    /// Starts a change of the inodes in `scope`.
    #[cfg(test)]
    pub(crate) fn begin(&self, scope: Scope) -> Change<'_> {
        self.begin_entry(scope, None)
    }

    /// Starts a change of the inodes in `scope` and of `entry` (a directory and a name:
    /// the one a create makes or an unlink removes).
    pub(crate) fn begin_entry(&self, scope: Scope, entry: Option<(Fid, &[u8])>) -> Change<'_> {
        let entry = entry.map(|(dir, name)| {
            self.names.lock().moved(dir, name);
            (dir, Box::from(name))
        });
        let any = scope == Scope::All;
        if any {
            self.any.fetch_add(1, Ordering::AcqRel);
        }
        let slots = scope
            .slots()
            .map(|s| s.map(|i| (i, self.slots[i].fetch_add(1, Ordering::AcqRel) + 1)));
        Change {
            changes: self,
            any,
            entry,
            slots,
            began_any: self.any.load(Ordering::Acquire),
        }
    }

    /// The attributes of directory `fid` as this client's last change in it left them,
    /// taken (so used once): only if no change of this client that could alter them
    /// started or ended since, and they are at most `max_age` old.
    pub fn take_dir(&self, fid: Fid, max_age: Duration) -> Option<Attr> {
        let mut dirs = self.dirs.lock();
        let d = dirs.remove(&fid)?;
        (d.stamp == self.stamp(slot(fid)) && d.at.elapsed() <= max_age).then_some(d.attr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_attrs::{attr, fid};
    use weft_proto::mdt::FileKind;

    fn dir(oid: u32, nlink: u32) -> Attr {
        Attr {
            nlink,
            ..attr(fid(oid), FileKind::Directory)
        }
    }

    /// A change in directory `oid`, as a create there is scoped.
    fn in_dir(c: &Changes, oid: u32) -> Change<'_> {
        c.begin(Scope::one(fid(oid)))
    }

    /// Two directories whose slots differ.
    fn two_dirs() -> (u32, u32) {
        let a = 1;
        let b = (2..).find(|&b| slot(fid(b)) != slot(fid(a))).unwrap_or(2);
        (a, b)
    }

    const AGE: Duration = Duration::from_secs(60);

    #[test]
    fn a_directory_changed_alone_is_answered_once() {
        let c = Changes::default();
        {
            let change = in_dir(&c, 1);
            change.made_in(&dir(1, 3));
        }
        assert_eq!(c.take_dir(dir(1, 0).fid, AGE).map(|a| a.nlink), Some(3));
        assert_eq!(c.take_dir(dir(1, 0).fid, AGE), None, "used once");
    }

    #[test]
    fn another_change_of_the_directory_voids_it() {
        let c = Changes::default();
        // A later change in the same directory.
        {
            let change = in_dir(&c, 1);
            change.made_in(&dir(1, 3));
        }
        drop(in_dir(&c, 1));
        assert_eq!(c.take_dir(dir(1, 0).fid, AGE), None);

        // Two changes in one directory that overlapped: neither is kept.
        let first = in_dir(&c, 2);
        let second = in_dir(&c, 2);
        first.made_in(&dir(2, 3));
        drop(first);
        second.made_in(&dir(2, 4));
        drop(second);
        assert_eq!(c.take_dir(dir(2, 0).fid, AGE), None);

        // A change that may touch any inode (an rmdir, a rename) voids every directory,
        // and keeps nothing itself.
        {
            let change = in_dir(&c, 3);
            change.made_in(&dir(3, 3));
        }
        {
            let change = c.begin(Scope::All);
            change.made_in(&dir(4, 3));
        }
        assert_eq!(c.take_dir(dir(3, 0).fid, AGE), None);
        assert_eq!(c.take_dir(dir(4, 0).fid, AGE), None);

        // A change that did not name the directory keeps nothing of it.
        let elsewhere = (6..).find(|&o| slot(fid(o)) != slot(fid(5))).unwrap_or(6);
        {
            let change = c.begin(Scope::one(fid(elsewhere)));
            change.made_in(&dir(5, 3));
        }
        assert_eq!(c.take_dir(dir(5, 0).fid, AGE), None);

        // Too old for the caller.
        {
            let change = in_dir(&c, 7);
            change.made_in(&dir(7, 3));
        }
        assert_eq!(c.take_dir(dir(7, 0).fid, Duration::ZERO), None);
    }

    #[test]
    fn changes_in_other_directories_leave_it_alone() {
        let c = Changes::default();
        let (a, b) = two_dirs();
        // Writers in two directories, overlapping: each keeps its own directory's attributes.
        let in_a = in_dir(&c, a);
        let in_b = in_dir(&c, b);
        in_a.made_in(&dir(a, 3));
        in_b.made_in(&dir(b, 4));
        drop(in_a);
        drop(in_b);
        drop(in_dir(&c, b));
        assert_eq!(c.take_dir(dir(a, 0).fid, AGE).map(|x| x.nlink), Some(3));
        assert_eq!(
            c.take_dir(dir(b, 0).fid, AGE),
            None,
            "b changed again since"
        );
    }

    #[test]
    fn a_link_scopes_both_inodes() {
        let (a, b) = two_dirs();
        let s = Scope::Inodes([Some(fid(a)), Some(fid(b))]);
        assert_eq!(s.slots(), [Some(slot(fid(a))), Some(slot(fid(b)))]);
        assert_eq!(Scope::Inodes([Some(fid(a)), Some(fid(a))]).slots()[1], None);
        assert_eq!(Scope::All.slots(), [None, None]);
        assert!((0..10_000).all(|o| slot(fid(o)) < SLOTS));
    }

    #[test]
    fn consecutive_directories_spread_over_the_slots() {
        // Directories made one after another differ in their low object-id bits only.
        let used: std::collections::HashSet<usize> = (2..22).map(|o| slot(fid(o))).collect();
        assert!(used.len() >= 18, "20 directories in {} slots", used.len());
    }

    #[test]
    fn entries_are_tracked_exactly_and_the_older_half_forgotten_past_the_bound() {
        let c = Changes::default();
        let before = c.snapshot().entry(fid(9));
        drop(c.begin_entry(Scope::one(fid(1)), Some((fid(1), b"a"))));
        assert!(!c.entry_unchanged(fid(1), b"a", &before));
        assert!(c.entry_unchanged(fid(1), b"b", &before));
        assert!(
            c.entry_unchanged(fid(2), b"a", &before),
            "same name, other directory"
        );
        let after = c.snapshot().entry(fid(9));
        assert!(c.entry_unchanged(fid(1), b"a", &after));
        // Past MAX_NAMES entries, the older half is forgotten: what was read before them
        // is not trusted, what was read after still is, and newer changes still count.
        let mut log = NameLog::default();
        log.moved(fid(1), b"a");
        let early = log.seq;
        for i in 0..MAX_NAMES {
            log.moved(fid(3), format!("n{i}").as_bytes());
        }
        assert!(log.len <= MAX_NAMES / 2 + 1);
        assert!(!log.unchanged_since(fid(1), b"z", early));
        let late = log.seq - 10;
        assert!(log.unchanged_since(fid(1), b"z", late));
        let last = format!("n{}", MAX_NAMES - 1);
        assert!(!log.unchanged_since(fid(3), last.as_bytes(), late));
        assert!(log.unchanged_since(fid(1), b"a", log.seq));
    }
}
