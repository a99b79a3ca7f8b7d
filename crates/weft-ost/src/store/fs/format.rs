//! Formatting a data directory: the object subdirectories, the version reservation and,
//! last, the identity, so that its presence means the format completed; and the probe
//! that the file system keeps user extended attributes.

use super::meta::{RESERVE_FILE, format_reserve, get_xattr, set_xattr};
use crate::error::OstError;
use crate::identity::{FORMAT_VERSION, Identity, KIND_OST};
use crate::object::{OBJECTS_DIR, SUBDIRS, subdir_name};
use std::io;
use std::path::Path;
use uuid::Uuid;
use weft_durable::{TMP_SUFFIX, sync_dir};

/// Leftover of the xattr probe of an interrupted format.
const PROBE_FILE: &str = ".xattr_probe";

/// Formats an empty directory as OST `index` of file system `fsname`.
pub(crate) fn format(dir: &Path, fsname: &str, index: u32) -> Result<Identity, OstError> {
    let objects = dir.join(OBJECTS_DIR);
    // Only what an interrupted format leaves behind may be there.
    for entry in std::fs::read_dir(dir).map_err(|e| OstError::io(dir, e))? {
        let entry = entry.map_err(|e| OstError::io(dir, e))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let leftover = name == OBJECTS_DIR
            || name == RESERVE_FILE
            || name == PROBE_FILE
            || name.ends_with(TMP_SUFFIX);
        if !leftover {
            return Err(OstError::NotEmpty(dir.to_owned()));
        }
    }
    probe_xattrs(dir)?;
    std::fs::create_dir_all(&objects).map_err(|e| OstError::io(&objects, e))?;
    for i in 0..SUBDIRS {
        let sub = objects.join(subdir_name(i));
        match std::fs::create_dir(&sub) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                // An interrupted format: its subdirectories must still be empty.
                let mut entries = std::fs::read_dir(&sub).map_err(|e| OstError::io(&sub, e))?;
                if entries.next().is_some() {
                    return Err(OstError::NotEmpty(dir.to_owned()));
                }
            }
            Err(e) => return Err(OstError::io(&sub, e)),
        }
    }
    sync_dir(&objects).map_err(|e| OstError::io(&objects, e))?;
    format_reserve(dir)?;
    let identity = Identity {
        format_version: FORMAT_VERSION,
        fsname: fsname.to_owned(),
        kind: KIND_OST.to_owned(),
        index,
        uuid: Uuid::new_v4(),
    };
    identity.store(dir)?;
    tracing::info!(dir = %dir.display(), fsname, index, "formatted OST");
    Ok(identity)
}

/// Checks at format time that the file system keeps user extended attributes.
fn probe_xattrs(dir: &Path) -> Result<(), OstError> {
    let path = dir.join(PROBE_FILE);
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
