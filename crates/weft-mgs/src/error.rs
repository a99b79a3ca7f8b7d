//! Why the management service could not be opened.

use std::io;
use std::path::PathBuf;

/// Why an MGS could not be opened or formatted.
#[derive(Debug, thiserror::Error)]
pub enum MgsError {
    /// A file or directory could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// What was being accessed.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// First start on an empty directory without a file system name.
    #[error("{0}: no MGS configuration here yet; a file system name is needed to create one")]
    NeedFsname(PathBuf),
    /// The file system name is not 1 to 8 characters of `[A-Za-z0-9_-]`.
    #[error("invalid file system name {0:?}: use 1 to 8 characters of A-Z a-z 0-9 _ -")]
    InvalidFsname(String),
    /// The directory holds another file system's configuration.
    #[error("data directory belongs to file system {found:?}, not {requested:?}")]
    WrongFsname {
        /// The file system recorded in the directory.
        found: String,
        /// The file system asked for.
        requested: String,
    },
    /// The directory holds files but no MGS state: formatting it could destroy data.
    #[error("{0}: directory is not empty and holds no MGS configuration; refusing to format it")]
    NotEmpty(PathBuf),
    /// Another process (or another open in this one) is serving the directory.
    #[error("{0}: the MGS data directory is already in use by another process")]
    Busy(PathBuf),
    /// The state file is damaged (bad header, checksum, or content).
    #[error("{path}: corrupt MGS state: {reason}")]
    Corrupt {
        /// The state file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The state file was written by another (newer) format.
    #[error("{path}: unsupported MGS state format version {found} (this build reads {supported})")]
    FormatVersion {
        /// The state file.
        path: PathBuf,
        /// The version found.
        found: u32,
        /// The version this build understands.
        supported: u32,
    },
}
