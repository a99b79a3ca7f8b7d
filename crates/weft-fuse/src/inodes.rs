//! Inode numbers for FIDs, and the kernel's lookup counts on them.
//!
//! FUSE names inodes by 64-bit numbers; weftfs names them by FIDs. The root is inode 1.
//! Every other FID of a granted sequence maps to a number computed from the FID alone
//! ([`flatten`]), so `st_ino` of a file is the same on every mount and after the kernel
//! forgets it. A FID outside that range (none today) gets a number from a counter, above
//! 2^63 so it never meets a computed one, for as long as the kernel remembers it.
//!
//! The table counts the kernel's references (a reply carrying an entry adds one, `forget`
//! subtracts what the kernel says) and keeps per-inode facts the adapter needs: the
//! directory an inode was last found in (for `..`) and the data version its kernel page
//! cache was filled at (for `FOPEN_KEEP_CACHE`).

use parking_lot::Mutex;
use std::collections::HashMap;
use weft_proto::Fid;

/// The FUSE root inode number.
pub const ROOT_INO: u64 = 1;

/// Sequences at or above this base (and below base + 2^31) flatten into inode numbers.
const SEQ_BASE: u64 = 0x2_0000_0000;
/// Counter-allocated inode numbers start here, above every flattened number.
const FALLBACK_BASE: u64 = 1 << 63;

/// The computed inode number of `fid`, if it has one.
pub fn flatten(fid: Fid) -> Option<u64> {
    if fid == Fid::ROOT {
        return Some(ROOT_INO);
    }
    let off = fid.seq.checked_sub(SEQ_BASE)?;
    // Offset 0 is left out so that no FID flattens to 0 or 1.
    if off == 0 || off >= (1 << 31) || fid.ver != 0 {
        return None;
    }
    Some((off << 32) | u64::from(fid.oid))
}

/// The FID of a computed inode number.
pub fn unflatten(ino: u64) -> Option<Fid> {
    if ino == ROOT_INO {
        return Some(Fid::ROOT);
    }
    let off = ino >> 32;
    if off == 0 || ino >= FALLBACK_BASE {
        return None;
    }
    Some(Fid {
        seq: SEQ_BASE + off,
        oid: (ino & 0xffff_ffff) as u32,
        ver: 0,
    })
}

#[derive(Debug, Clone)]
struct Entry {
    fid: Fid,
    /// References the kernel holds (lookups minus forgets).
    nlookup: u64,
    /// The directory this inode was last found in.
    parent: Option<u64>,
    /// The data version the kernel's page cache holds, if it may hold pages.
    cached_version: Option<u64>,
}

#[derive(Default)]
struct Inner {
    by_ino: HashMap<u64, Entry>,
    /// Counter-allocated numbers of FIDs that do not flatten.
    fallback: HashMap<Fid, u64>,
    next_fallback: u64,
}

/// The inode table of one mount.
#[derive(Default)]
pub struct InodeTable {
    inner: Mutex<Inner>,
}

impl InodeTable {
    /// An empty table (the root needs no entry: it is never forgotten).
    pub fn new() -> Self {
        Self::default()
    }

    /// The inode number of `fid`, without taking a reference.
    pub fn ino_of(&self, fid: Fid) -> u64 {
        if let Some(ino) = flatten(fid) {
            return ino;
        }
        let mut g = self.inner.lock();
        if let Some(&ino) = g.fallback.get(&fid) {
            return ino;
        }
        let ino = FALLBACK_BASE + g.next_fallback;
        g.next_fallback += 1;
        g.fallback.insert(fid, ino);
        ino
    }

    /// Takes one kernel reference on `fid` (found in directory `parent`) and returns its
    /// inode number. Call it before the reply that hands the entry to the kernel.
    pub fn reference(&self, fid: Fid, parent: Option<u64>) -> u64 {
        let ino = self.ino_of(fid);
        if ino == ROOT_INO {
            return ino;
        }
        let mut g = self.inner.lock();
        let e = g.by_ino.entry(ino).or_insert(Entry {
            fid,
            nlookup: 0,
            parent: None,
            cached_version: None,
        });
        e.nlookup = e.nlookup.saturating_add(1);
        if parent.is_some() {
            e.parent = parent;
        }
        ino
    }

    /// Drops `n` kernel references; the entry goes when none are left.
    pub fn forget(&self, ino: u64, n: u64) {
        let mut g = self.inner.lock();
        let gone = match g.by_ino.get_mut(&ino) {
            Some(e) => {
                e.nlookup = e.nlookup.saturating_sub(n);
                (e.nlookup == 0).then_some(e.fid)
            }
            None => None,
        };
        if let Some(fid) = gone {
            g.by_ino.remove(&ino);
            g.fallback.remove(&fid);
        }
    }

    /// The FID of inode `ino`, if it names one.
    pub fn fid(&self, ino: u64) -> Option<Fid> {
        if let Some(fid) = unflatten(ino) {
            return Some(fid);
        }
        self.inner.lock().by_ino.get(&ino).map(|e| e.fid)
    }

    /// The directory `ino` was last found in (the root for the root).
    pub fn parent(&self, ino: u64) -> Option<u64> {
        if ino == ROOT_INO {
            return Some(ROOT_INO);
        }
        self.inner.lock().by_ino.get(&ino).and_then(|e| e.parent)
    }

    /// Records that the kernel page cache of `ino` now holds data of `version`, and returns
    /// whether it held that same version before (so the kernel may keep it).
    pub fn page_cache_valid(&self, ino: u64, version: u64) -> bool {
        let mut g = self.inner.lock();
        match g.by_ino.get_mut(&ino) {
            Some(e) => e.cached_version.replace(version) == Some(version),
            None => false,
        }
    }

    /// Forgets what the kernel page cache of `ino` holds (after this mount changed it).
    pub fn page_cache_changed(&self, ino: u64) {
        if let Some(e) = self.inner.lock().by_ino.get_mut(&ino) {
            e.cached_version = None;
        }
    }

    /// Number of inodes the kernel holds references on (for tests and statistics).
    pub fn len(&self) -> usize {
        self.inner.lock().by_ino.len()
    }

    /// Whether the kernel holds no references.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flatten_round_trips_and_never_yields_0_or_1_except_for_the_root() {
        assert_eq!(flatten(Fid::ROOT), Some(ROOT_INO));
        assert_eq!(unflatten(ROOT_INO), Some(Fid::ROOT));
        for (seq, oid) in [
            (0x2_0000_0400, 1),
            (0x2_0000_0401, u32::MAX),
            (0x2_7fff_ffff, 7),
        ] {
            let fid = Fid { seq, oid, ver: 0 };
            let ino = flatten(fid).unwrap_or(0);
            assert!(ino > 1 && ino < FALLBACK_BASE);
            assert_eq!(unflatten(ino), Some(fid));
        }
        assert_eq!(
            flatten(Fid {
                seq: SEQ_BASE,
                oid: 1,
                ver: 0
            }),
            None
        );
        assert_eq!(
            flatten(Fid {
                seq: 5,
                oid: 1,
                ver: 0
            }),
            None
        );
    }

    #[test]
    fn fallback_numbers_live_until_forgotten() {
        let t = InodeTable::new();
        let odd = Fid {
            seq: 5,
            oid: 9,
            ver: 0,
        };
        let ino = t.reference(odd, Some(ROOT_INO));
        assert!(ino >= FALLBACK_BASE);
        assert_eq!(t.reference(odd, None), ino);
        assert_eq!(t.fid(ino), Some(odd));
        assert_eq!(t.parent(ino), Some(ROOT_INO));
        t.forget(ino, 1);
        assert_eq!(t.fid(ino), Some(odd));
        t.forget(ino, 1);
        assert_eq!(t.fid(ino), None);
        assert!(t.is_empty());
    }

    #[test]
    fn page_cache_is_kept_only_for_the_same_data_version() {
        let t = InodeTable::new();
        let fid = Fid {
            seq: 0x2_0000_0400,
            oid: 3,
            ver: 0,
        };
        let ino = t.reference(fid, None);
        assert!(!t.page_cache_valid(ino, 4));
        assert!(t.page_cache_valid(ino, 4));
        assert!(!t.page_cache_valid(ino, 5));
        t.page_cache_changed(ino);
        assert!(!t.page_cache_valid(ino, 5));
    }
}
