//! Data versions: an OST-wide counter that never goes backwards, even across crashes.
//!
//! Versions are handed out from a block reserved durably in `dv_reserve.json`: before any
//! version of a block is used, the block's end is on disk, so after a crash the counter
//! resumes at the recorded end, above everything handed out before. Each object carries its
//! current version in the `user.weft.dv` extended attribute.
//!
//! The value an object was given before the target last started (below the *floor*) is not
//! trusted: a crash may have kept new data but lost the attribute update, or the reverse.
//! Such an object gets a fresh version the first time it is looked at, so a client that
//! cached data under an old version always sees a change after a crash.

use crate::error::OstError;
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use weft_durable::write_durably;

/// File recording the end of the reserved block of versions.
pub const RESERVE_FILE: &str = "dv_reserve.json";
/// The extended attribute holding an object's data version (8 bytes, little-endian).
pub const DV_XATTR: &str = "user.weft.dv";
/// How many versions one durable reservation covers.
pub const RESERVE_BLOCK: u64 = 1_000_000;
/// The first version ever handed out (0 means "no object").
const FIRST_VERSION: u64 = 1;

#[derive(Debug, Serialize, Deserialize)]
struct Reserve {
    format_version: u32,
    /// Every version handed out so far is below this.
    reserved_end: u64,
}

#[derive(Debug)]
struct Counter {
    next: u64,
    reserved_end: u64,
}

/// The OST-wide version allocator.
#[derive(Debug)]
pub(crate) struct DataVersions {
    path: PathBuf,
    /// Versions below this were handed out before this start and are not trusted.
    floor: u64,
    counter: Mutex<Counter>,
}

impl DataVersions {
    /// Writes the initial reservation of a freshly formatted target.
    pub(crate) fn format(dir: &Path) -> Result<(), OstError> {
        store(&dir.join(RESERVE_FILE), FIRST_VERSION)
    }

    /// Loads the reservation and reserves the first block of this run.
    pub(crate) fn open(dir: &Path) -> Result<Self, OstError> {
        let path = dir.join(RESERVE_FILE);
        let bytes = std::fs::read(&path).map_err(|e| OstError::io(&path, e))?;
        let r: Reserve = serde_json::from_slice(&bytes).map_err(|e| OstError::Corrupt {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        if r.format_version != crate::identity::FORMAT_VERSION {
            return Err(OstError::FormatVersion {
                path,
                found: r.format_version,
                supported: crate::identity::FORMAT_VERSION,
            });
        }
        let floor = r.reserved_end.max(FIRST_VERSION);
        let reserved_end = floor
            .checked_add(RESERVE_BLOCK)
            .ok_or_else(|| OstError::Corrupt {
                path: path.clone(),
                reason: "data version counter exhausted".into(),
            })?;
        store(&path, reserved_end)?;
        Ok(Self {
            path,
            floor,
            counter: Mutex::new(Counter {
                next: floor,
                reserved_end,
            }),
        })
    }

    /// Hands out a new version, greater than every version handed out before.
    pub(crate) fn next(&self) -> io::Result<u64> {
        let mut c = self.counter.lock().unwrap_or_else(|e| e.into_inner());
        if c.next >= c.reserved_end {
            let end = c
                .next
                .checked_add(RESERVE_BLOCK)
                .ok_or_else(|| io::Error::other("data version counter exhausted"))?;
            store(&self.path, end).map_err(|e| io::Error::other(e.to_string()))?;
            c.reserved_end = end;
        }
        let v = c.next;
        c.next += 1;
        Ok(v)
    }

    /// Whether `v` was handed out during this run (and so can be trusted).
    pub(crate) fn is_current(&self, v: u64) -> bool {
        v >= self.floor
    }
}

fn store(path: &Path, reserved_end: u64) -> Result<(), OstError> {
    let r = Reserve {
        format_version: crate::identity::FORMAT_VERSION,
        reserved_end,
    };
    let bytes = serde_json::to_vec(&r).map_err(|e| OstError::Corrupt {
        path: path.into(),
        reason: e.to_string(),
    })?;
    write_durably(path, &bytes).map_err(|e| OstError::io(path, e))
}

/// Reads an object's version attribute; `None` when it has none (or a malformed one).
pub(crate) fn get_xattr(file: &File) -> io::Result<Option<u64>> {
    let mut buf = [0u8; 8];
    match rustix::fs::fgetxattr(file, DV_XATTR, &mut buf) {
        Ok(8) => Ok(Some(u64::from_le_bytes(buf))),
        Ok(_) => Ok(None),
        Err(e) if e == rustix::io::Errno::NODATA || e == rustix::io::Errno::RANGE => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Sets an object's version attribute.
pub(crate) fn set_xattr(file: &File, v: u64) -> io::Result<()> {
    rustix::fs::fsetxattr(
        file,
        DV_XATTR,
        &v.to_le_bytes(),
        rustix::fs::XattrFlags::empty(),
    )?;
    Ok(())
}

/// Checks at format time that the file system keeps user extended attributes.
pub(crate) fn probe_xattrs(dir: &Path) -> Result<(), OstError> {
    let path = dir.join(".xattr_probe");
    let result = (|| -> io::Result<()> {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)?;
        set_xattr(&f, 42)?;
        match get_xattr(&f)? {
            Some(42) => Ok(()),
            _ => Err(io::Error::other("attribute did not read back")),
        }
    })();
    let _ = std::fs::remove_file(&path);
    result.map_err(|source| OstError::XattrUnsupported { path, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_resume_above_everything_handed_out() {
        let dir = tempfile::tempdir().unwrap();
        DataVersions::format(dir.path()).unwrap();
        let a = DataVersions::open(dir.path()).unwrap();
        let mut last = 0;
        for _ in 0..10 {
            let v = a.next().unwrap();
            assert!(v > last);
            last = v;
        }
        assert!(a.is_current(last));
        // A crash: no clean shutdown, the next run must still start above `last`.
        drop(a);
        let b = DataVersions::open(dir.path()).unwrap();
        let v = b.next().unwrap();
        assert!(v > last);
        assert!(!b.is_current(last));
    }

    #[test]
    fn crossing_a_block_reserves_the_next_durably() {
        let dir = tempfile::tempdir().unwrap();
        DataVersions::format(dir.path()).unwrap();
        let a = DataVersions::open(dir.path()).unwrap();
        {
            let mut c = a.counter.lock().unwrap();
            c.next = c.reserved_end;
        }
        let v = a.next().unwrap();
        drop(a);
        let b = DataVersions::open(dir.path()).unwrap();
        assert!(b.next().unwrap() > v);
    }
}
