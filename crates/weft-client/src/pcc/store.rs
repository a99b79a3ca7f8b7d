//! The cache's local directory and its index. The index is the directory itself, so it
//! survives a remount without a file to keep consistent:
//! - `ro/SEQ-OID-VER.DATAVERSION.SIZE`: a whole read-only copy of a file, as of the MDT's
//!   data version in its name; written under `tmp/`, synced and renamed in only when
//!   complete, so a copy with the size its name gives is whole;
//! - `rw/SEQ-OID-VER`: a file created into a read-write cache, not yet (wholly) copied into
//!   the file system; whatever is here at start is copied back;
//! - `owner`: the cache's id (a UUID made at its first use), which the MDT records as the
//!   owner of the files this cache holds for read-write; a later mount with the same
//!   directory is the same owner.
//!
//! In memory: read-only entries in least-recently-used order with their bytes (bounded by
//! the capacity: the oldest go first) and read-write entries with their state.

use lru::LruCache;
use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use weft_proto::Fid;

/// A read-only copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RoEntry {
    /// The data version the copy holds.
    pub version: u64,
    /// Its bytes.
    pub size: u64,
}

/// Where a read-write file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RwState {
    /// Written here (handles may be open), not yet copied into the file system.
    Dirty,
    /// Being copied into the file system.
    Copying,
}

/// A read-write file and this client's handles open on it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RwEntry {
    pub state: RwState,
    pub opens: u32,
}

/// The file name part of a FID.
pub(crate) fn fid_name(fid: Fid) -> String {
    format!("{:x}-{:x}-{:x}", fid.seq, fid.oid, fid.ver)
}

fn parse_fid(s: &str) -> Option<Fid> {
    let mut it = s.split('-');
    let seq = u64::from_str_radix(it.next()?, 16).ok()?;
    let oid = u32::from_str_radix(it.next()?, 16).ok()?;
    let ver = u32::from_str_radix(it.next()?, 16).ok()?;
    it.next().is_none().then_some(Fid { seq, oid, ver })
}

/// Parses a read-only copy's name.
fn parse_ro(name: &str) -> Option<(Fid, RoEntry)> {
    let mut it = name.split('.');
    let fid = parse_fid(it.next()?)?;
    let version = it.next()?.parse().ok()?;
    let size = it.next()?.parse().ok()?;
    it.next()
        .is_none()
        .then_some((fid, RoEntry { version, size }))
}

/// The id kept in `dir/owner`, made (durably) if there is none yet.
fn owner_id(dir: &Path) -> io::Result<String> {
    let path = dir.join("owner");
    match std::fs::read_to_string(&path) {
        Ok(id) if uuid::Uuid::parse_str(id.trim()).is_ok() => return Ok(id.trim().to_string()),
        Ok(_) => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{} does not hold a cache id", path.display()),
            ));
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let id = uuid::Uuid::new_v4().to_string();
    let tmp = dir.join("tmp").join("owner");
    let mut f = std::fs::File::create(&tmp)?;
    io::Write::write_all(&mut f, id.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, &path)?;
    weft_durable::sync_dir(dir)?;
    Ok(id)
}

/// The local directory and what it holds.
pub(crate) struct Store {
    dir: PathBuf,
    owner: String,
    capacity: u64,
    ro: LruCache<Fid, RoEntry>,
    /// Bytes of the read-only copies, plus those being copied in.
    used: u64,
    rw: HashMap<Fid, RwEntry>,
}

impl Store {
    /// Opens (creating its subdirectories) the cache in `dir`, bounded by `capacity` bytes
    /// of read-only copies; drops unfinished copies and copies that are not whole.
    pub fn open(dir: &Path, capacity: u64) -> io::Result<Self> {
        for sub in ["ro", "rw", "tmp"] {
            std::fs::create_dir_all(dir.join(sub))?;
        }
        for e in std::fs::read_dir(dir.join("tmp"))?.flatten() {
            let _ = std::fs::remove_file(e.path());
        }
        let mut found = Vec::new();
        for e in std::fs::read_dir(dir.join("ro"))?.flatten() {
            let name = e.file_name();
            let meta = e.metadata()?;
            match name.to_str().and_then(parse_ro) {
                Some((fid, entry)) if meta.len() == entry.size => {
                    let used = meta.modified().unwrap_or(std::time::UNIX_EPOCH);
                    found.push((used, fid, entry));
                }
                _ => {
                    tracing::warn!(path = %e.path().display(), "dropping a damaged PCC copy");
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
        found.sort_by_key(|(t, _, _)| *t);
        let mut store = Self {
            dir: dir.to_path_buf(),
            owner: owner_id(dir)?,
            capacity,
            ro: LruCache::unbounded(),
            used: 0,
            rw: HashMap::new(),
        };
        for (_, fid, entry) in found {
            store.used += entry.size;
            if let Some(old) = store.ro.put(fid, entry) {
                // Two copies of one file: keep the newer-used one's entry, drop the other.
                store.used -= old.size;
                let _ = std::fs::remove_file(store.ro_path(fid, &old));
            }
        }
        for e in std::fs::read_dir(dir.join("rw"))?.flatten() {
            if let Some(fid) = e.file_name().to_str().and_then(parse_fid) {
                store.rw.insert(
                    fid,
                    RwEntry {
                        state: RwState::Dirty,
                        opens: 0,
                    },
                );
            }
        }
        Ok(store)
    }

    /// The cache directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The cache's owner id.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// Largest bytes of read-only copies.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Bytes of read-only copies (and of copies being made).
    pub fn used(&self) -> u64 {
        self.used
    }

    /// Number of read-only copies and of read-write files.
    pub fn counts(&self) -> (usize, usize) {
        (self.ro.len(), self.rw.len())
    }

    /// Where the read-only copy `entry` of `fid` is.
    pub fn ro_path(&self, fid: Fid, entry: &RoEntry) -> PathBuf {
        self.dir.join("ro").join(format!(
            "{}.{}.{}",
            fid_name(fid),
            entry.version,
            entry.size
        ))
    }

    /// Where the read-write file `fid` is.
    pub fn rw_path(&self, fid: Fid) -> PathBuf {
        self.dir.join("rw").join(fid_name(fid))
    }

    /// A fresh temporary path for a copy of `fid` being made.
    pub fn tmp_path(&self, fid: Fid) -> PathBuf {
        self.dir.join("tmp").join(format!(
            "{}.{}",
            fid_name(fid),
            uuid::Uuid::new_v4().simple()
        ))
    }

    /// The read-only copy of `fid`, marked used now.
    pub fn ro_use(&mut self, fid: Fid) -> Option<RoEntry> {
        self.ro.get(&fid).copied()
    }

    /// The read-only copy of `fid`, without marking it used.
    pub fn ro_peek(&self, fid: Fid) -> Option<RoEntry> {
        self.ro.peek(&fid).copied()
    }

    /// Forgets the read-only copy of `fid`; returns its path, to be removed.
    pub fn ro_remove(&mut self, fid: Fid) -> Option<PathBuf> {
        let e = self.ro.pop(&fid)?;
        self.used -= e.size;
        Some(self.ro_path(fid, &e))
    }

    /// Makes room for a copy of `size` bytes, evicting the least recently used copies.
    /// Returns the paths of the evicted copies (to be removed) and whether the bytes are
    /// now reserved (not when the copy is larger than the cache, or copies still being
    /// made hold the rest).
    pub fn reserve(&mut self, size: u64) -> (Vec<PathBuf>, bool) {
        let mut evicted = Vec::new();
        if size > self.capacity {
            return (evicted, false);
        }
        while self.used + size > self.capacity {
            let Some((fid, e)) = self.ro.pop_lru() else {
                return (evicted, false);
            };
            self.used -= e.size;
            evicted.push(self.ro_path(fid, &e));
        }
        self.used += size;
        (evicted, true)
    }

    /// Gives back a reservation of `size` bytes that was not used.
    pub fn unreserve(&mut self, size: u64) {
        self.used = self.used.saturating_sub(size);
    }

    /// Records a finished copy (its bytes were reserved); returns the path of a copy it
    /// replaces, to be removed.
    pub fn ro_insert(&mut self, fid: Fid, entry: RoEntry) -> Option<PathBuf> {
        let old = self.ro.put(fid, entry)?;
        self.used -= old.size;
        (old != entry).then(|| self.ro_path(fid, &old))
    }

    /// The read-write entry of `fid`.
    pub fn rw(&mut self, fid: Fid) -> Option<&mut RwEntry> {
        self.rw.get_mut(&fid)
    }

    /// The read-write entry of `fid`, to read.
    pub fn rw_peek(&self, fid: Fid) -> Option<RwEntry> {
        self.rw.get(&fid).copied()
    }

    /// Records a new read-write file with one handle open.
    pub fn rw_insert(&mut self, fid: Fid) {
        self.rw.insert(
            fid,
            RwEntry {
                state: RwState::Dirty,
                opens: 1,
            },
        );
    }

    /// Forgets a read-write file (copied back, or gone from the file system).
    pub fn rw_remove(&mut self, fid: Fid) {
        self.rw.remove(&fid);
    }

    /// Read-write files waiting for a copy-back with no handle open.
    pub fn rw_orphans(&self) -> Vec<Fid> {
        self.rw
            .iter()
            .filter(|(_, e)| e.state == RwState::Dirty && e.opens == 0)
            .map(|(f, _)| *f)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::pcc::test_fid as fid;

    fn put(s: &mut Store, oid: u32, size: u64) {
        let (evicted, ok) = s.reserve(size);
        assert!(ok);
        for p in evicted {
            std::fs::remove_file(p).unwrap();
        }
        let e = RoEntry { version: 3, size };
        std::fs::write(s.ro_path(fid(oid), &e), vec![7u8; size as usize]).unwrap();
        assert_eq!(s.ro_insert(fid(oid), e), None);
    }

    #[test]
    fn least_recently_used_copies_go_first_and_the_index_survives_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(dir.path(), 300).unwrap();
        put(&mut s, 1, 100);
        put(&mut s, 2, 100);
        put(&mut s, 3, 100);
        assert!(s.ro_use(fid(1)).is_some());
        put(&mut s, 4, 100);
        assert_eq!(s.ro_peek(fid(2)), None, "the least recently used copy went");
        assert!(s.ro_peek(fid(1)).is_some());
        assert_eq!(s.used(), 300);
        assert_eq!(
            s.reserve(301),
            (Vec::new(), false),
            "larger than the whole cache"
        );
        // A copy left unfinished, a damaged one and a read-write file.
        std::fs::write(dir.path().join("tmp/x"), b"partial").unwrap();
        std::fs::write(
            dir.path()
                .join("ro")
                .join(format!("{}.3.999", fid_name(fid(9)))),
            b"short",
        )
        .unwrap();
        std::fs::write(s.rw_path(fid(5)), b"rw").unwrap();
        let owner = s.owner().to_string();
        drop(s);
        let s = Store::open(dir.path(), 300).unwrap();
        assert_eq!(s.owner(), owner, "the same directory is the same owner");
        assert_eq!(s.counts(), (3, 1));
        assert_eq!(s.used(), 300);
        assert_eq!(s.rw_orphans(), vec![fid(5)]);
        assert_eq!(
            std::fs::read_dir(dir.path().join("tmp")).unwrap().count(),
            0
        );
        assert_eq!(
            s.ro_peek(fid(4)),
            Some(RoEntry {
                version: 3,
                size: 100
            })
        );
    }

    #[test]
    fn names_round_trip() {
        let f = Fid {
            seq: 0x2_0000_0401,
            oid: 0xffff_ffff,
            ver: 2,
        };
        assert_eq!(parse_fid(&fid_name(f)), Some(f));
        let e = RoEntry {
            version: 12,
            size: 4096,
        };
        assert_eq!(parse_ro(&format!("{}.12.4096", fid_name(f))), Some((f, e)));
        assert_eq!(parse_ro("junk"), None);
    }
}
