//! Restore-ahead: released (HSM) files of a directory restored in the background ahead of
//! a reader's opens (`llite.*.restore_ahead`).
//!
//! A file imported from a data repository is released: its data is in the object store
//! until a read restores it, and a store answers each GET after tens of milliseconds
//! whatever its size. A data loader's first epoch over small files would wait for one such
//! round trip per file and reader thread. So when this client opens a released file, it
//! also asks the MDT (`HsmRestore` of the whole file) for the next released files of the
//! file's directory, in name order, at most `restore_ahead` past the opened one and at
//! most `restore_ahead` at once; any access order that goes through a directory's files in
//! name order (a sorted walk, several directories in turn) keeps that many store round
//! trips in flight. A shuffled reader gets files it will read later in the epoch.
//!
//! - **Trigger**: an open, not a lookup: `ls -l` or `du` of a linked directory loads
//!   nothing. The opened file's directory is the one a lookup of this client found it in
//!   ([`RestoreAhead::note`]); a file reached otherwise restores nothing ahead.
//! - **Listing**: the first open of a released file of a directory lists it (readdirplus
//!   pages, at most `llite.*.statahead_max` entries) with the opener's rights and keeps
//!   the released regular files of at most [`MAX_SIZE`] bytes, sorted by name (the order
//!   of a sorted walk: the MDT lists in hash order), for [`TTL`]. The
//!   list is a hint: a file loaded or removed since is a restore answered at once or an
//!   error nobody waits for (the file's own read asks again and reports it).
//! - **Bounds**: [`MAX_DIRS`] directories listed at once, [`MAX_NOTED`] files' directories
//!   remembered; restores ahead in flight at most `restore_ahead`.
//! - **Not under tiering**: files of a repository with a tiering policy (the client's
//!   configuration from the MGS says which) are not restored ahead. A load ahead would
//!   wait for room under the high mark like a reader's own, and when the tiering agent
//!   finds nothing to release (everything loaded is being loaded ahead) the restores go on
//!   past the mark; and a file system smaller than its bucket has no room to load ahead.

use crate::Client;
use crate::params::Param;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use weft_proto::Fid;
use weft_proto::hsm::HSM_RELEASED;
use weft_proto::mdt::{Attr, Credentials, FileKind};

/// The largest released file restored ahead: a large file is loaded in parallel units
/// once it is read, and loading one nobody reads costs its whole size. With
/// `restore_ahead` 64, at most 1 GiB is being loaded ahead at once.
pub const MAX_SIZE: u64 = 16 << 20;
/// How long a directory's listing is used.
pub const TTL: Duration = Duration::from_secs(30);
/// Directories whose listings are kept at once (the oldest goes first).
pub const MAX_DIRS: usize = 256;
/// Released files whose directory is remembered (all are forgotten when full).
pub const MAX_NOTED: usize = 65_536;
/// Entries asked for per readdir page.
const PAGE: u32 = 1024;

/// Whether `attr` is a file restore-ahead loads.
fn wanted(attr: &Attr) -> bool {
    attr.kind == FileKind::Regular && attr.hsm_flags & HSM_RELEASED != 0 && attr.size <= MAX_SIZE
}

/// The restore-ahead state of one client.
#[derive(Default)]
pub struct RestoreAhead {
    state: Mutex<State>,
    /// Restores ahead asked for, and running now.
    asked: AtomicU64,
    running: AtomicU64,
}

#[derive(Default)]
struct State {
    /// Released files looked up through this client, and the directory of each.
    parents: HashMap<Fid, Fid>,
    dirs: HashMap<Fid, Listing>,
}

/// The released files of one directory, in listing order.
struct Listing {
    started: Instant,
    /// Still being read: no window yet; what was listed so far, by name.
    listing: bool,
    names: Vec<(Vec<u8>, Fid)>,
    /// The files in name order, and the position of each.
    files: Vec<Fid>,
    at: HashMap<Fid, usize>,
    /// Files before this position were asked for (or passed).
    restored_to: usize,
}

/// What an open asks of [`RestoreAhead::opened`].
#[derive(Debug, PartialEq, Eq)]
enum Next {
    /// Nothing to do.
    Nothing,
    /// List directory `0` first.
    List(Fid),
    /// Restore these files.
    Restore(Vec<Fid>),
}

impl RestoreAhead {
    /// Restores ahead asked for so far.
    pub fn asked(&self) -> u64 {
        self.asked.load(Ordering::Relaxed)
    }

    /// Notes that a lookup in `parent` found `attr`: a released file's directory is kept
    /// for its open.
    pub(crate) fn note(&self, parent: Fid, attr: &Attr) {
        if !wanted(attr) {
            return;
        }
        let mut s = self.state.lock();
        if s.parents.len() >= MAX_NOTED {
            s.parents.clear();
        }
        s.parents.insert(attr.fid, parent);
    }

    /// What the open of `fid` asks for: a listing of its directory, or up to `room` files
    /// after it, at most `ahead` past it, not asked for before.
    fn opened(&self, fid: Fid, ahead: usize, room: usize) -> Next {
        let mut s = self.state.lock();
        let Some(&parent) = s.parents.get(&fid) else {
            return Next::Nothing;
        };
        let fresh = s
            .dirs
            .get(&parent)
            .is_some_and(|l| l.started.elapsed() < TTL);
        if !fresh {
            if s.dirs.len() >= MAX_DIRS
                && let Some(oldest) = s
                    .dirs
                    .iter()
                    .min_by_key(|(_, l)| l.started)
                    .map(|(d, _)| *d)
            {
                s.dirs.remove(&oldest);
            }
            s.dirs.insert(
                parent,
                Listing {
                    started: Instant::now(),
                    listing: true,
                    names: Vec::new(),
                    files: Vec::new(),
                    at: HashMap::new(),
                    restored_to: 0,
                },
            );
            return Next::List(parent);
        }
        let Some(l) = s.dirs.get_mut(&parent).filter(|l| !l.listing) else {
            return Next::Nothing;
        };
        let Some(&at) = l.at.get(&fid) else {
            return Next::Nothing;
        };
        let from = l.restored_to.max(at + 1);
        let to = at
            .saturating_add(1 + ahead)
            .min(l.files.len())
            .min(from.saturating_add(room));
        if from >= to {
            return Next::Nothing;
        }
        l.restored_to = to;
        Next::Restore(l.files[from..to].to_vec())
    }

    /// Adds a page of `parent`'s listing; `opened`, the file whose open asked for it, keeps
    /// its place even if its reader loaded it meanwhile (its window starts there).
    fn listed(
        &self,
        parent: Fid,
        opened: Fid,
        page: impl IntoIterator<Item = (Vec<u8>, Attr)>,
        max: usize,
    ) -> bool {
        let mut s = self.state.lock();
        let Some(l) = s.dirs.get_mut(&parent) else {
            return false;
        };
        for (name, attr) in page {
            if !wanted(&attr) && attr.fid != opened {
                continue;
            }
            if l.names.len() >= max {
                return false;
            }
            l.names.push((name, attr.fid));
        }
        true
    }

    /// Marks `parent`'s listing finished: its files in name order.
    fn finished(&self, parent: Fid) {
        if let Some(l) = self.state.lock().dirs.get_mut(&parent) {
            let mut names = std::mem::take(&mut l.names);
            names.sort_unstable();
            l.files = names.into_iter().map(|(_, fid)| fid).collect();
            l.at = l.files.iter().enumerate().map(|(i, f)| (*f, i)).collect();
            l.listing = false;
        }
    }
}

impl Client {
    /// Restores ahead of this open of `fid`, a released file (see the
    /// [module docs](crate::restore_ahead)), listing its directory with `cred`'s rights
    /// first if needed.
    pub(crate) fn restore_ahead(self: &Arc<Self>, fid: Fid, repo: u32, cred: &Credentials) {
        let ahead = self.params().get(Param::RestoreAhead);
        if ahead == 0 || self.tiered(repo) {
            return;
        }
        let running = self.restore_ahead.running.load(Ordering::Relaxed);
        let room = usize::try_from(ahead.saturating_sub(running)).unwrap_or(usize::MAX);
        if room == 0 {
            return;
        }
        let ahead = usize::try_from(ahead).unwrap_or(usize::MAX);
        match self.restore_ahead.opened(fid, ahead, room) {
            Next::Nothing => {}
            Next::Restore(fids) => self.restore_in_background(fids),
            Next::List(parent) => {
                let client = self.clone();
                let cred = cred.clone();
                let max = usize::try_from(self.params().get(Param::StataheadMax).max(1))
                    .unwrap_or(usize::MAX);
                tokio::spawn(async move {
                    client.list_released(parent, fid, &cred, max).await;
                    // The open that asked for the listing gets its window now.
                    client.restore_ahead(fid, repo, &cred);
                });
            }
        }
    }

    /// Whether repository `repo` has a tiering policy.
    fn tiered(&self, repo: u32) -> bool {
        self.cluster()
            .config()
            .repos
            .iter()
            .any(|r| r.id == repo && r.tiering.is_some())
    }

    /// Reads `parent`'s released files into its listing.
    async fn list_released(&self, parent: Fid, opened: Fid, cred: &Credentials, max: usize) {
        let mut after = 0;
        loop {
            let (entries, eof) = match self.readdir(parent, after, PAGE, true, cred).await {
                Ok(p) => p,
                Err(e) => {
                    tracing::debug!(%parent, error = %e, "restore-ahead listing stopped");
                    break;
                }
            };
            let next = entries.last().map(|e| e.cookie);
            let more = self.restore_ahead.listed(
                parent,
                opened,
                entries.into_iter().filter_map(|e| Some((e.name, e.attr?))),
                max,
            );
            match next {
                Some(c) if more && !eof => after = c,
                _ => break,
            }
        }
        self.restore_ahead.finished(parent);
    }

    fn restore_in_background(self: &Arc<Self>, fids: Vec<Fid>) {
        for fid in fids {
            self.restore_ahead.running.fetch_add(1, Ordering::Relaxed);
            self.restore_ahead.asked.fetch_add(1, Ordering::Relaxed);
            let client = self.clone();
            tokio::spawn(async move {
                if let Err(e) = client.hsm_restore(fid, 0, u64::MAX).await {
                    // Its own read asks again and reports the error.
                    tracing::debug!(%fid, error = %e, "restore ahead failed");
                }
                client.restore_ahead.running.fetch_sub(1, Ordering::Relaxed);
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_attrs::{attr, fid};
    use weft_proto::hsm::{HSM_ARCHIVED, HSM_EXISTS};

    const DIR: Fid = Fid::ROOT;

    fn released(oid: u32, size: u64) -> Attr {
        Attr {
            hsm_flags: HSM_EXISTS | HSM_ARCHIVED | HSM_RELEASED,
            size,
            ..attr(fid(oid), FileKind::Regular)
        }
    }

    fn fids(r: std::ops::Range<u32>) -> Next {
        Next::Restore(r.map(fid).collect())
    }

    /// Named `f{oid}`.
    fn named(a: Attr) -> (Vec<u8>, Attr) {
        (format!("f{}", a.fid.oid).into_bytes(), a)
    }

    /// A listing of DIR, in hash order (reversed here): a loaded file, ten released ones
    /// (10..20) with a huge one (`f15a`) among them, each looked up through the client.
    fn listed(r: &RestoreAhead) {
        let mut page = vec![named(attr(fid(9), FileKind::Regular))];
        page.extend((10..20).map(|i| named(released(i, 128 << 10))));
        page.push((b"f15a".to_vec(), released(50, MAX_SIZE + 1)));
        page.reverse();
        for (_, a) in &page {
            r.note(DIR, a);
        }
        assert_eq!(r.opened(fid(10), 3, 16), Next::List(DIR));
        // Asked again while the listing runs: nothing.
        assert_eq!(r.opened(fid(10), 3, 16), Next::Nothing);
        // 10 was loaded by its reader before the listing: it keeps its place.
        for e in &mut page {
            if e.1.fid == fid(10) {
                e.1 = attr(fid(10), FileKind::Regular);
            }
        }
        assert!(r.listed(DIR, fid(10), page, 100));
        r.finished(DIR);
    }

    #[test]
    fn opens_restore_the_next_released_files_of_the_listing_once() {
        let r = RestoreAhead::default();
        listed(&r);
        // Opening 10 asks for the three after it; the huge file is left to its reader.
        assert_eq!(r.opened(fid(10), 3, 16), fids(11..14));
        // 11 and 12 were asked for already: only 14 is new.
        assert_eq!(r.opened(fid(11), 3, 16), fids(14..15));
        assert_eq!(r.opened(fid(12), 3, 16), fids(15..16));
        // A jump ahead goes on from the file opened.
        assert_eq!(r.opened(fid(16), 3, 16), fids(17..20));
        // The end of the listing, files not listed, not released, or never looked up.
        assert_eq!(r.opened(fid(19), 3, 16), Next::Nothing);
        assert_eq!(r.opened(fid(9), 3, 16), Next::Nothing);
        assert_eq!(r.opened(fid(50), 3, 16), Next::Nothing);
        assert_eq!(r.opened(fid(99), 3, 16), Next::Nothing);
    }

    #[test]
    fn room_bounds_one_open_and_the_rest_comes_with_the_next() {
        let r = RestoreAhead::default();
        listed(&r);
        assert_eq!(r.opened(fid(10), 8, 2), fids(11..13));
        assert_eq!(r.opened(fid(11), 8, 2), fids(13..15));
        assert_eq!(r.opened(fid(12), 8, 0), Next::Nothing);
    }

    #[test]
    fn listings_are_bounded() {
        let r = RestoreAhead::default();
        // A listing keeps at most `max` files.
        r.note(DIR, &released(10, 1));
        assert_eq!(r.opened(fid(10), 3, 16), Next::List(DIR));
        let page = (10..20).map(|i| named(released(i, 1)));
        assert!(!r.listed(DIR, fid(10), page, 4));
        r.finished(DIR);
        assert_eq!(r.opened(fid(10), 8, 16), fids(11..14));
        // At most MAX_DIRS directories: the oldest listing goes.
        for d in 0..MAX_DIRS as u32 {
            let f = released(1000 + d, 1);
            r.note(fid(100_000 + d), &f);
            assert_eq!(r.opened(f.fid, 1, 1), Next::List(fid(100_000 + d)));
        }
        assert_eq!(r.state.lock().dirs.len(), MAX_DIRS);
        assert!(!r.state.lock().dirs.contains_key(&DIR));
    }
}
