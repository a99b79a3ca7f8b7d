//! What a data directory keeps of data versions: the reservation's end in
//! `dv_reserve.json` (written with the durable recipe), and each object's current version
//! in its `user.weft.dv` extended attribute.

use crate::dataversion::FIRST_VERSION;
use crate::error::OstError;
use crate::identity::FORMAT_VERSION;
use crate::store::{StoreError, StoreResult};
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io;
use std::path::Path;
use weft_durable::write_durably;

/// File recording the end of the reserved block of versions.
pub const RESERVE_FILE: &str = "dv_reserve.json";
/// The extended attribute holding an object's data version (8 bytes, little-endian).
pub const DV_XATTR: &str = "user.weft.dv";

#[derive(Debug, Serialize, Deserialize)]
struct Reserve {
    format_version: u32,
    /// Every version handed out so far is below this.
    reserved_end: u64,
}

/// Writes the initial reservation of a freshly formatted directory.
pub(crate) fn format_reserve(dir: &Path) -> Result<(), OstError> {
    store_reserve(dir, FIRST_VERSION).map_err(OstError::from)
}

/// Reads the recorded end of the reservation of the data directory `dir`.
pub(crate) fn load_reserve(dir: &Path) -> StoreResult<u64> {
    let path = dir.join(RESERVE_FILE);
    let what = || path.display().to_string();
    let bytes = std::fs::read(&path).map_err(|e| StoreError::io(what(), e))?;
    let r: Reserve = serde_json::from_slice(&bytes).map_err(|e| StoreError::Corrupt {
        what: what(),
        reason: e.to_string(),
    })?;
    if r.format_version != FORMAT_VERSION {
        return Err(StoreError::Corrupt {
            what: what(),
            reason: format!(
                "unsupported format version {} (this build reads {FORMAT_VERSION})",
                r.format_version
            ),
        });
    }
    Ok(r.reserved_end)
}

/// Records a new end of the reservation durably.
pub(crate) fn store_reserve(dir: &Path, reserved_end: u64) -> StoreResult<()> {
    let path = dir.join(RESERVE_FILE);
    let r = Reserve {
        format_version: FORMAT_VERSION,
        reserved_end,
    };
    let bytes = serde_json::to_vec(&r).map_err(|e| StoreError::Corrupt {
        what: path.display().to_string(),
        reason: e.to_string(),
    })?;
    write_durably(&path, &bytes).map_err(|e| StoreError::io(path.display().to_string(), e))
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
