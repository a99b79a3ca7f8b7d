//! Errors of opening a target ([`OstError`]). Errors of object operations are the store's
//! ([`crate::store::StoreError`], mapped to wire errors in `store/error.rs`) or wire errors
//! the target decides itself (limits, space).

use crate::store::StoreError;
use std::io;
use std::path::PathBuf;

/// Why an OST could not be opened or formatted.
#[derive(Debug, thiserror::Error)]
pub enum OstError {
    /// A file or directory of the target could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// What was being accessed.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// The directory holds files but no OST identity: formatting it could destroy data.
    #[error("{0}: directory is not empty and holds no weftfs target; refusing to format it")]
    NotEmpty(PathBuf),
    /// The identity file exists but cannot be understood.
    #[error("{path}: corrupt target identity: {reason}")]
    Corrupt {
        /// The identity file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The identity was written by a newer (or unknown) format.
    #[error("{path}: unsupported target format version {found} (this build reads {supported})")]
    FormatVersion {
        /// The identity file.
        path: PathBuf,
        /// The version found.
        found: u32,
        /// The version this build understands.
        supported: u32,
    },
    /// The directory belongs to another file system.
    #[error("data directory belongs to file system {found:?}, not {requested:?}")]
    WrongFsname {
        /// The file system recorded in the directory.
        found: String,
        /// The file system asked for.
        requested: String,
    },
    /// The directory holds another kind of target (an MDT, say).
    #[error("data directory holds a {found} target, not an ost")]
    WrongKind {
        /// The kind recorded in the directory.
        found: String,
    },
    /// The directory holds an OST with another index.
    #[error("data directory holds OST index {found}, not {requested}")]
    WrongIndex {
        /// The index recorded in the directory.
        found: u32,
        /// The index asked for.
        requested: u32,
    },
    /// Another process (or another open in this one) is serving the directory.
    #[error("{0}: the target is already in use by another process")]
    Busy(PathBuf),
    /// The file system name is not 1 to 8 characters of `[A-Za-z0-9_-]`.
    #[error("invalid file system name {0:?}: use 1 to 8 characters of A-Z a-z 0-9 _ -")]
    InvalidFsname(String),
    /// The index is above the largest target index.
    #[error("OST index {0} is above the maximum {max}", max = crate::MAX_TARGET_INDEX)]
    InvalidIndex(u32),
    /// The data directory's file system does not store user extended attributes, which hold
    /// each object's data version.
    #[error(
        "{path}: the file system does not support user extended attributes ({source}); weftfs OSTs need them"
    )]
    XattrUnsupported {
        /// The probed file.
        path: PathBuf,
        /// The error of the probe.
        source: io::Error,
    },
    /// The store failed while the target was being opened (reading its data version
    /// reservation, say).
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl OstError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: io::Error) -> Self {
        OstError::Io {
            path: path.into(),
            source,
        }
    }
}
