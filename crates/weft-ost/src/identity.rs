//! The target's identity file, `target.json`: which file system, kind and index a data
//! directory belongs to, so a directory is never served under another name.

use crate::error::OstError;
use serde::{Deserialize, Serialize};
use std::io;
use std::path::Path;
use uuid::Uuid;
use weft_durable::write_durably;

/// File name of the identity, in the data directory.
pub const IDENTITY_FILE: &str = "target.json";
/// Version of the on-disk format this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// The `kind` recorded for an object storage target.
pub const KIND_OST: &str = "ost";

/// What `target.json` holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    /// On-disk format version of the whole directory.
    pub format_version: u32,
    /// The file system this target belongs to.
    pub fsname: String,
    /// `"ost"` here; other target kinds use the same file with their own kind.
    pub kind: String,
    /// The target's index among OSTs.
    pub index: u32,
    /// Fixed when the directory is formatted.
    pub uuid: Uuid,
}

/// Checks a file system name: 1 to 8 characters of `[A-Za-z0-9_-]` (Lustre's limit of 8).
pub fn validate_fsname(name: &str) -> Result<(), OstError> {
    let ok = (1..=8).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(OstError::InvalidFsname(name.to_owned()))
    }
}

impl Identity {
    /// Reads the identity of `dir`; `None` when the directory has none.
    pub(crate) fn load(dir: &Path) -> Result<Option<Identity>, OstError> {
        let path = dir.join(IDENTITY_FILE);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(OstError::io(path, e)),
        };
        // Read the version first so a newer format is reported as such, not as corruption.
        #[derive(Deserialize)]
        struct Versioned {
            format_version: u32,
        }
        let v: Versioned = serde_json::from_slice(&bytes).map_err(|e| OstError::Corrupt {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        if v.format_version != FORMAT_VERSION {
            return Err(OstError::FormatVersion {
                path,
                found: v.format_version,
                supported: FORMAT_VERSION,
            });
        }
        let id: Identity = serde_json::from_slice(&bytes).map_err(|e| OstError::Corrupt {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        Ok(Some(id))
    }

    /// Writes the identity of `dir` durably.
    pub(crate) fn store(&self, dir: &Path) -> Result<(), OstError> {
        let path = dir.join(IDENTITY_FILE);
        let mut bytes = serde_json::to_vec_pretty(self).map_err(|e| OstError::Corrupt {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        bytes.push(b'\n');
        write_durably(&path, &bytes).map_err(|e| OstError::io(path, e))
    }

    /// Refuses an identity that is not the OST asked for.
    pub(crate) fn check(&self, fsname: &str, index: u32) -> Result<(), OstError> {
        if self.kind != KIND_OST {
            return Err(OstError::WrongKind {
                found: self.kind.clone(),
            });
        }
        if self.fsname != fsname {
            return Err(OstError::WrongFsname {
                found: self.fsname.clone(),
                requested: fsname.to_owned(),
            });
        }
        if self.index != index {
            return Err(OstError::WrongIndex {
                found: self.index,
                requested: index,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fsname_rules() {
        assert!(validate_fsname("weft").is_ok());
        assert!(validate_fsname("a-b_C9").is_ok());
        assert!(validate_fsname("").is_err());
        assert!(validate_fsname("ninechars").is_err());
        assert!(validate_fsname("a/b").is_err());
        assert!(validate_fsname("é").is_err());
    }

    #[test]
    fn newer_format_is_reported_not_called_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(IDENTITY_FILE), br#"{"format_version": 9}"#).unwrap();
        assert!(matches!(
            Identity::load(dir.path()),
            Err(OstError::FormatVersion { found: 9, .. })
        ));
        std::fs::write(dir.path().join(IDENTITY_FILE), b"{not json").unwrap();
        assert!(matches!(
            Identity::load(dir.path()),
            Err(OstError::Corrupt { .. })
        ));
    }
}
