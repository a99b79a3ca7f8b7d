//! Errors of the MDT: opening and formatting failures ([`MdtError`]), store failures
//! ([`StoreError`]) and the internal outcome of one namespace operation (`Fail`).

use weft_proto::{Errno, WireError};

/// A failure of the store: the database engine or a record that does not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The database engine reported an error (I/O, corruption it detected, ...).
    #[error("database: {0}")]
    Db(String),
    /// A record failed to decode.
    #[error("corrupt record in table {table}: {message}")]
    Corrupt {
        /// The table holding the record.
        table: &'static str,
        /// What was wrong.
        message: String,
    },
    /// A record carries a version this code does not know.
    #[error("record version {0} is not supported")]
    Version(u8),
}

macro_rules! store_from {
    ($($t:ty),*) => {
        $(impl From<$t> for StoreError {
            fn from(e: $t) -> Self {
                StoreError::Db(e.to_string())
            }
        })*
    };
}
store_from!(
    redb::StorageError,
    redb::TableError,
    redb::TransactionError,
    redb::CommitError,
    redb::DatabaseError,
    redb::SetDurabilityError
);

/// Why an MDT could not be opened or served.
#[derive(Debug, thiserror::Error)]
pub enum MdtError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The data directory could not be created or inspected.
    #[error("data directory {path}: {source}")]
    Io {
        /// The directory.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Another server (process) has the MDT open: its store is locked. A failover MDS
    /// waits for it; any other is refused.
    #[error("{path} is served by another process")]
    Busy {
        /// The directory.
        path: String,
    },
    /// The directory holds an MDT of another file system.
    #[error("{path} holds an MDT of file system {found:?}, not {expected:?}")]
    WrongFsname {
        /// The directory.
        path: String,
        /// The file system it was formatted for.
        found: String,
        /// The file system asked for.
        expected: String,
    },
    /// The directory holds another MDT index.
    #[error("{path} holds MDT index {found}, not {expected}")]
    WrongIndex {
        /// The directory.
        path: String,
        /// The index it was formatted as.
        found: u32,
        /// The index asked for.
        expected: u32,
    },
    /// The store was written by a newer, unknown format.
    #[error("{path} has format version {found}; this build reads up to {supported}")]
    FormatVersion {
        /// The directory.
        path: String,
        /// The version found.
        found: u32,
        /// The newest version this build knows.
        supported: u32,
    },
    /// The options are unusable.
    #[error("invalid options: {0}")]
    Options(String),
}

/// The outcome of one namespace operation that did not succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fail {
    /// A POSIX error found while validating, before anything was changed.
    Wire(WireError),
    /// The store failed; the shared transaction may hold partial writes and must be dropped.
    Store(StoreError),
    /// The operation needs a new FID and the MDT has no sequence left: fetch one and retry.
    NeedSeq,
    /// A cross-MDT operation was prepared (its intent is written in this transaction): the
    /// request path asks the other MDT, then finishes it (see [`crate::remote`]).
    CrossMdt(Box<crate::remote::Intent>),
    /// A directory moves to another parent on a file system of several MDTs: the request
    /// path takes the rename lock, learns the destination's ancestors and hands the
    /// operation back with them (see [`crate::dir_moves`]).
    NeedDirMove {
        /// The directory moved.
        dir: weft_proto::Fid,
        /// Its new parent.
        dst_parent: weft_proto::Fid,
    },
}

impl From<WireError> for Fail {
    fn from(e: WireError) -> Self {
        Fail::Wire(e)
    }
}

impl From<Errno> for Fail {
    fn from(e: Errno) -> Self {
        Fail::Wire(WireError::from(e))
    }
}

impl From<redb::StorageError> for Fail {
    fn from(e: redb::StorageError) -> Self {
        Fail::Store(e.into())
    }
}

impl From<StoreError> for Fail {
    fn from(e: StoreError) -> Self {
        Fail::Store(e)
    }
}

/// Shorthand for a failure with an errno and a message.
pub(crate) fn fail(errno: Errno, message: impl Into<String>) -> Fail {
    Fail::Wire(WireError::new(errno, message))
}

/// The error a store failure shows to a client.
pub(crate) fn store_to_wire(e: &StoreError) -> WireError {
    WireError::new(Errno::Io, format!("metadata store: {e}"))
}
