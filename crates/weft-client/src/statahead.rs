//! Statahead: the attributes of a directory's entries, read ahead of the lookups that
//! will ask for them (Lustre's llite statahead).
//!
//! A process that stats many files of one directory (`ls -l` through a kernel that
//! skips readdirplus, `du`, `find -size`, a data loader checking its file list, mdtest)
//! would otherwise pay one MDT round trip per name. Once [`TRIGGER`] lookups of one
//! directory have gone to the MDT within the freshness bound, the client reads the whole
//! directory with attributes (readdirplus pages, at most `llite.*.statahead_max` entries)
//! in the background, and lookups of the names it holds are answered without the MDT.
//! When that scan answered at least [`TRIGGER`] lookups, the first lookup that goes to the
//! MDT after it went stale starts the next one.
//!
//! # Freshness
//! An entry is used only within `max_age` of the moment its page was requested: the same
//! bound as a dentry and attributes a FUSE kernel caches from a lookup made at that
//! moment, with the mount's entry and attribute timeouts as `max_age`. And only while no
//! change of this client since that moment could have altered it (see
//! [`crate::changes`]): none of its inode (a setattr, an open, a link), none of the entry
//! itself (an unlink or a create of that name) and none that could touch any inode (a
//! rename, an rmdir). So a process that removes a directory's files one by one, looking
//! each up first, keeps using the listing for the names it has not reached. Files with
//! more than one link are not kept: an unlink of another of their names changes their
//! link count without naming them. An entry is used once; the kernel caches it from
//! there. A name missing from the cache goes to the MDT (no negative answer comes from
//! here), so a name created elsewhere is found at once. Regular files open somewhere are
//! not kept: their size must come from the OSTs (glimpse).
//!
//! # Bounds
//! At most [`MAX_DIRS`] directories' scans are held at once, each with at most
//! `statahead_max` entries and all together with at most [`HELD_PER_MAX`] times that;
//! stale directories are forgotten when a new one is counted.

use crate::Client;
use crate::changes::{Changes, EntryStamp, Snapshot};
use crate::params::Param;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use weft_proto::Fid;
use weft_proto::mdt::{Attr, Credentials, FileKind};

/// Lookups of one directory sent to the MDT (within `max_age` of each other) that start a
/// scan of it.
pub const TRIGGER: u32 = 8;
/// Directories whose scans are held (running, or fresh) at once.
pub const MAX_DIRS: usize = 256;
/// Entries held over all directories, in units of `statahead_max`.
pub const HELD_PER_MAX: usize = 4;
/// Directories whose lookups are counted at once.
const MAX_TRACKED: usize = 1024;
/// Entries asked for per readdir page.
const PAGE: u32 = 1024;

/// Counters of `llite.*.statahead_stats`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct StataheadStats {
    /// Lookups answered from the cache.
    pub hits: u64,
    /// Directory scans started.
    pub scans: u64,
    /// Entries the scans brought in.
    pub entries: u64,
    /// Released files restored ahead of their opens ([`crate::restore_ahead`]).
    pub restores_ahead: u64,
}

/// The statahead state of one client.
#[derive(Default)]
pub struct Statahead {
    dirs: Mutex<HashMap<Fid, DirAhead>>,
    hits: AtomicU64,
    scans: AtomicU64,
    entries: AtomicU64,
}

/// One directory: lookups counted toward a scan, and what the last scan brought.
struct DirAhead {
    /// Lookups of names found that went to the MDT since `window`.
    lookups: u32,
    window: Instant,
    /// The current scan, if one was started.
    scan: Option<Scan>,
}

struct Scan {
    /// When the scan started; it is not repeated before `max_age` has passed.
    started: Instant,
    running: bool,
    /// Lookups it answered.
    hits: u32,
    /// Name to attributes, when the page holding them was requested and what they depend
    /// on among this client's changes.
    entries: HashMap<Vec<u8>, (Attr, Instant, EntryStamp)>,
}

impl Scan {
    fn usable(&self, max_age: Duration) -> bool {
        self.running || self.started.elapsed() < max_age
    }
}

impl Statahead {
    /// The counters.
    pub fn stats(&self) -> StataheadStats {
        StataheadStats {
            hits: self.hits.load(Ordering::Relaxed),
            scans: self.scans.load(Ordering::Relaxed),
            entries: self.entries.load(Ordering::Relaxed),
            restores_ahead: 0,
        }
    }

    /// Takes `name`'s attributes if a scan of `parent` holds them, fresh.
    fn take(&self, parent: Fid, name: &[u8], changes: &Changes, max_age: Duration) -> Option<Attr> {
        let mut dirs = self.dirs.lock();
        let scan = dirs.get_mut(&parent)?.scan.as_mut()?;
        if !scan.usable(max_age) {
            scan.entries = HashMap::new();
            return None;
        }
        let (attr, asked, stamp) = scan.entries.remove(name)?;
        if asked.elapsed() >= max_age || !changes.entry_unchanged(parent, name, &stamp) {
            return None;
        }
        scan.hits = scan.hits.saturating_add(1);
        self.hits.fetch_add(1, Ordering::Relaxed);
        Some(attr)
    }

    /// Counts a lookup of a name of `parent` that went to the MDT and found it; whether a
    /// scan starts now.
    fn note(&self, parent: Fid, max_age: Duration) -> bool {
        let mut dirs = self.dirs.lock();
        let now = Instant::now();
        if !dirs.contains_key(&parent) {
            // Forget directories whose lookups and scans are all stale.
            for d in dirs.values_mut() {
                if let Some(s) = d.scan.as_mut().filter(|s| !s.usable(max_age)) {
                    s.entries = HashMap::new();
                }
            }
            dirs.retain(|_, d| {
                now.duration_since(d.window) < max_age
                    || d.scan.as_ref().is_some_and(|s| s.usable(max_age))
            });
            if dirs.len() >= MAX_TRACKED {
                return false;
            }
        }
        let d = dirs.entry(parent).or_insert(DirAhead {
            lookups: 0,
            window: now,
            scan: None,
        });
        if now.duration_since(d.window) >= max_age {
            d.lookups = 0;
            d.window = now;
        }
        d.lookups += 1;
        // One scan per directory per `max_age`, even if changes voided its entries: a
        // directory being changed through this client would otherwise be read again and
        // again.
        let busy = d.scan.as_ref().is_some_and(|s| s.usable(max_age));
        // A directory whose last scan answered lookups is read again at the first lookup
        // after it went stale: the process is still walking it.
        let trigger = match &d.scan {
            Some(s) if s.hits >= TRIGGER => 1,
            _ => TRIGGER,
        };
        if d.lookups < trigger || busy {
            return false;
        }
        let scanned = dirs
            .values()
            .filter(|d| d.scan.as_ref().is_some_and(|s| s.usable(max_age)))
            .count();
        if scanned >= MAX_DIRS {
            return false;
        }
        let Some(d) = dirs.get_mut(&parent) else {
            return false;
        };
        d.lookups = 0;
        d.scan = Some(Scan {
            started: now,
            running: true,
            hits: 0,
            entries: HashMap::new(),
        });
        self.scans.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Adds a page of entries to `parent`'s scan, asked for at `asked`, right after the
    /// client's changes stood at `before`; whether the scan should go on.
    fn fill(
        &self,
        parent: Fid,
        page: Vec<weft_proto::mdt::DirEntry>,
        asked: Instant,
        before: &Snapshot,
        max_entries: usize,
    ) -> bool {
        let mut dirs = self.dirs.lock();
        let held: usize = dirs
            .values()
            .filter_map(|d| d.scan.as_ref())
            .map(|s| s.entries.len())
            .sum();
        let mut room = (max_entries.saturating_mul(HELD_PER_MAX)).saturating_sub(held);
        let Some(scan) = dirs.get_mut(&parent).and_then(|d| d.scan.as_mut()) else {
            return false;
        };
        for e in page {
            let Some(attr) = e.attr else { continue };
            let open = attr.kind == FileKind::Regular && attr.open_count > 0;
            if open || (attr.kind != FileKind::Directory && attr.nlink > 1) {
                continue;
            }
            if scan.entries.len() >= max_entries || room == 0 {
                return false;
            }
            let stamp = before.entry(attr.fid);
            scan.entries.insert(e.name, (attr, asked, stamp));
            room -= 1;
            self.entries.fetch_add(1, Ordering::Relaxed);
        }
        true
    }

    /// Marks `parent`'s scan finished.
    fn finish(&self, parent: Fid) {
        if let Some(scan) = self
            .dirs
            .lock()
            .get_mut(&parent)
            .and_then(|d| d.scan.as_mut())
        {
            scan.running = false;
        }
    }
}

impl Client {
    /// The attributes of `name` in directory `parent` if a statahead scan holds them, read
    /// less than `max_age` ago and not changed through this client since (see the
    /// [module docs](crate::statahead)). No MDT is asked, so no permission is checked: the
    /// caller must have checked search permission on `parent` (a FUSE mount with
    /// `default_permissions` has).
    pub fn lookup_ahead(&self, parent: Fid, name: &[u8], max_age: Duration) -> Option<Attr> {
        if self.params().get(Param::StataheadMax) == 0 {
            return None;
        }
        let attr = self
            .statahead
            .take(parent, name, self.cluster().changes(), max_age)?;
        self.restore_ahead.note(parent, &attr);
        Some(attr)
    }

    /// Notes that a lookup in `parent` went to the MDT and found the name; after
    /// [`TRIGGER`] of them within `max_age`, reads the directory ahead in the background
    /// with `cred`'s rights.
    pub fn note_lookup(self: &Arc<Self>, parent: Fid, cred: &Credentials, max_age: Duration) {
        let max_entries = self.params().get(Param::StataheadMax);
        if max_entries == 0 {
            return;
        }
        if !self.statahead.note(parent, max_age) {
            return;
        }
        let client = self.clone();
        let cred = cred.clone();
        let max_entries = usize::try_from(max_entries).unwrap_or(usize::MAX);
        tokio::spawn(async move {
            let mut after = 0;
            loop {
                let before = client.cluster().changes().snapshot();
                let asked = Instant::now();
                let page = client.readdir(parent, after, PAGE, true, &cred).await;
                let (entries, eof) = match page {
                    Ok(p) => p,
                    Err(e) => {
                        tracing::debug!(%parent, error = %e, "statahead scan stopped");
                        break;
                    }
                };
                let next = entries.last().map(|e| e.cookie);
                let more = client
                    .statahead
                    .fill(parent, entries, asked, &before, max_entries);
                match next {
                    Some(c) if more && !eof => after = c,
                    _ => break,
                }
            }
            client.statahead.finish(parent);
        });
    }

    /// The statahead counters (`llite.*.statahead_stats`).
    pub fn statahead_stats(&self) -> StataheadStats {
        StataheadStats {
            restores_ahead: self.restore_ahead.asked(),
            ..self.statahead.stats()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::changes::Scope;
    use crate::test_attrs::{attr, fid};
    use weft_proto::mdt::DirEntry;

    fn entry(name: &str, oid: u32, kind: FileKind, open_count: u32, nlink: u32) -> DirEntry {
        DirEntry {
            name: name.as_bytes().to_vec(),
            fid: fid(oid),
            kind,
            cookie: 1,
            attr: Some(Attr {
                open_count,
                nlink,
                ..attr(fid(oid), kind)
            }),
        }
    }

    /// A regular file, closed, with one link.
    fn file(name: &str, oid: u32) -> DirEntry {
        entry(name, oid, FileKind::Regular, 0, 1)
    }

    const DIR: Fid = Fid::ROOT;
    const AGE: Duration = Duration::from_secs(60);

    fn started(s: &Statahead) {
        for i in 1..TRIGGER {
            assert!(!s.note(DIR, AGE), "lookup {i} started a scan");
        }
        assert!(s.note(DIR, AGE));
    }

    #[test]
    fn a_scan_starts_after_enough_lookups_and_once() {
        let s = Statahead::default();
        started(&s);
        for _ in 0..3 * TRIGGER {
            assert!(!s.note(DIR, AGE), "a second scan while one runs");
        }
        s.finish(DIR);
        // A finished scan stays fresh for `max_age`: no new one (a directory being
        // changed is not read over and over).
        assert!(!(0..2 * TRIGGER).any(|_| s.note(DIR, AGE)));
        assert_eq!(s.stats().scans, 1);
        // Once `max_age` has passed, lookups start another.
        std::thread::sleep(Duration::from_millis(5));
        let short = Duration::from_millis(1);
        assert!((0..TRIGGER).any(|_| s.note(DIR, short)));
        assert_eq!(s.stats().scans, 2);
    }

    #[test]
    fn a_stale_scan_that_answered_lookups_is_repeated_at_the_next_lookup() {
        let s = Statahead::default();
        let c = Changes::default();
        let short = Duration::from_millis(20);
        for _ in 1..TRIGGER {
            assert!(!s.note(DIR, short));
        }
        assert!(s.note(DIR, short));
        let page: Vec<_> = (0..TRIGGER)
            .map(|i| file(&format!("f{i}"), 10 + i))
            .collect();
        assert!(s.fill(DIR, page, Instant::now(), &c.snapshot(), 100));
        s.finish(DIR);
        for i in 0..TRIGGER {
            assert!(s.take(DIR, format!("f{i}").as_bytes(), &c, short).is_some());
        }
        std::thread::sleep(2 * short);
        assert!(s.note(DIR, short), "the walk goes on: scan again at once");
        // A scan that answered nothing waits for TRIGGER lookups again.
        s.finish(DIR);
        std::thread::sleep(2 * short);
        assert!(!s.note(DIR, short));
        assert!((1..TRIGGER).any(|_| s.note(DIR, short)));
    }

    #[test]
    fn entries_are_taken_once_and_only_while_this_client_left_them_alone() {
        let s = Statahead::default();
        let c = Changes::default();
        started(&s);
        let page = vec![
            file("a", 10),
            file("b", 11),
            file("c", 12),
            file("d", 13),
            file("e", 14),
            entry("open", 15, FileKind::Regular, 1, 1),
            entry("linked", 16, FileKind::Regular, 0, 2),
            entry("dir", 17, FileKind::Directory, 0, 3),
        ];
        assert!(s.fill(DIR, page, Instant::now(), &c.snapshot(), 100));
        s.finish(DIR);
        assert!(s.take(DIR, b"a", &c, AGE).is_some());
        assert!(s.take(DIR, b"a", &c, AGE).is_none(), "taken twice");
        assert!(
            s.take(DIR, b"open", &c, AGE).is_none(),
            "an open file needs a glimpse"
        );
        assert!(
            s.take(DIR, b"linked", &c, AGE).is_none(),
            "an unlink of another name changes its link count"
        );
        assert!(
            s.take(DIR, b"dir", &c, AGE).is_some(),
            "directories are kept"
        );
        assert!(s.take(DIR, b"missing", &c, AGE).is_none());

        // A change of b's inode (a chmod) voids b; the unlink of c voids c; neither
        // touches d.
        drop(c.begin(Scope::one(fid(11))));
        drop(c.begin_entry(Scope::one(DIR), Some((DIR, b"c"))));
        assert!(s.take(DIR, b"b", &c, AGE).is_none());
        assert!(s.take(DIR, b"c", &c, AGE).is_none());
        assert!(s.take(DIR, b"d", &c, AGE).is_some());
        // A change that may touch any inode (a rename) voids what is left.
        drop(c.begin(Scope::All));
        assert!(s.take(DIR, b"e", &c, AGE).is_none());
        assert_eq!(s.stats().hits, 3);
    }

    #[test]
    fn a_page_asked_for_while_a_change_was_in_flight_is_void_for_it_once_it_ends() {
        let s = Statahead::default();
        let c = Changes::default();
        started(&s);
        let unlink = c.begin_entry(Scope::one(DIR), Some((DIR, b"x")));
        let chmod = c.begin(Scope::one(fid(21)));
        let before = c.snapshot();
        let page = vec![file("x", 20), file("y", 21), file("z", 22)];
        assert!(s.fill(DIR, page, Instant::now(), &before, 100));
        drop(unlink);
        drop(chmod);
        assert!(s.take(DIR, b"x", &c, AGE).is_none());
        assert!(s.take(DIR, b"y", &c, AGE).is_none());
        assert!(s.take(DIR, b"z", &c, AGE).is_some());

        // A change that started after the snapshot, before the page came back.
        started_again(&s);
        let before = c.snapshot();
        drop(c.begin_entry(Scope::one(DIR), Some((DIR, b"p"))));
        assert!(s.fill(
            DIR,
            vec![file("p", 30), file("q", 31)],
            Instant::now(),
            &before,
            100
        ));
        assert!(s.take(DIR, b"p", &c, AGE).is_none());
        assert!(s.take(DIR, b"q", &c, AGE).is_some());
    }

    /// Starts a new scan of DIR once the last one is no longer fresh.
    fn started_again(s: &Statahead) {
        s.finish(DIR);
        std::thread::sleep(Duration::from_millis(3));
        let short = Duration::from_millis(1);
        assert!((0..TRIGGER).any(|_| s.note(DIR, short)));
    }

    #[test]
    fn a_scan_starts_while_the_client_removes_the_names_it_looks_up() {
        let s = Statahead::default();
        let c = Changes::default();
        // An unlink loop: a lookup that found the name, then its unlink.
        let mut scanned = false;
        for i in 0..TRIGGER {
            scanned |= s.note(DIR, AGE);
            drop(c.begin_entry(Scope::one(DIR), Some((DIR, format!("f{i}").as_bytes()))));
        }
        assert!(scanned);
    }

    #[test]
    fn old_pages_are_not_used() {
        let s = Statahead::default();
        let c = Changes::default();
        started(&s);
        let old = Instant::now() - Duration::from_secs(2);
        assert!(s.fill(DIR, vec![file("old", 10)], old, &c.snapshot(), 100));
        assert!(s.take(DIR, b"old", &c, Duration::from_secs(1)).is_none());
    }

    #[test]
    fn a_scan_keeps_at_most_max_entries_and_directories_are_bounded() {
        let s = Statahead::default();
        let c = Changes::default();
        started(&s);
        let page: Vec<_> = (0..10).map(|i| file(&format!("f{i}"), 10 + i)).collect();
        assert!(
            !s.fill(DIR, page, Instant::now(), &c.snapshot(), 4),
            "went on past the limit"
        );
        assert_eq!(s.stats().entries, 4);
        // All directories together hold at most HELD_PER_MAX times the limit.
        let other = fid(5);
        assert!((0..TRIGGER).any(|_| s.note(other, AGE)));
        // A limit of 4 / HELD_PER_MAX leaves no room: DIR holds 4 already.
        let max = 4 / HELD_PER_MAX;
        let page = vec![file("g", 30)];
        assert!(!s.fill(other, page, Instant::now(), &c.snapshot(), max));
        assert_eq!(s.stats().entries, 4);
        // Running scans are kept: no directory beyond MAX_DIRS starts one.
        let mut started_dirs = 2;
        for d in 1..=(2 * MAX_DIRS as u64) {
            let dir = fid(d as u32 + 10);
            if (0..TRIGGER).any(|_| s.note(dir, AGE)) {
                started_dirs += 1;
            }
        }
        assert_eq!(started_dirs, MAX_DIRS);
    }
}
