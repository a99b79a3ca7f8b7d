//! The typed error of object storage ([`StoreError`]) and how it becomes the wire error a
//! client sees (one mapping, for every store).

use std::io;
use weft_proto::{Errno, ObjectId, WireError};

/// Result of a store call.
pub type StoreResult<T> = Result<T, StoreError>;

/// Why a store call failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The object does not exist (and the call does not create it).
    #[error("object {0} does not exist")]
    NotFound(ObjectId),
    /// The storage failed: a system call, a device, a remote store.
    #[error("{what}: {source}")]
    Io {
        /// What was being done, to which object.
        what: String,
        /// The underlying error (its OS code, when it has one, decides the errno).
        #[source]
        source: io::Error,
    },
    /// A write stored only part of its data.
    #[error("{what}: stored {written} of {len} bytes")]
    ShortWrite {
        /// What was being written.
        what: String,
        /// Bytes stored.
        written: u64,
        /// Bytes asked for.
        len: u64,
    },
    /// Stored metadata of the target cannot be understood.
    #[error("{what}: {reason}")]
    Corrupt {
        /// What was read.
        what: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl StoreError {
    /// An I/O error while doing `what`.
    pub fn io(what: impl Into<String>, source: io::Error) -> Self {
        StoreError::Io {
            what: what.into(),
            source,
        }
    }

    /// The errno a client gets for this error.
    pub fn errno(&self) -> Errno {
        match self {
            StoreError::NotFound(_) => Errno::NoEnt,
            StoreError::Io { source, .. } => io_errno(source),
            StoreError::ShortWrite { .. } | StoreError::Corrupt { .. } => Errno::Io,
        }
    }
}

/// The errno of an I/O error: the ones a client can act on, EIO for the rest.
fn io_errno(e: &io::Error) -> Errno {
    match rustix::io::Errno::from_io_error(e) {
        Some(rustix::io::Errno::NOSPC) => Errno::NoSpc,
        Some(rustix::io::Errno::FBIG) => Errno::FBig,
        Some(rustix::io::Errno::DQUOT) => Errno::DQuot,
        Some(rustix::io::Errno::INVAL) => Errno::Inval,
        _ => Errno::Io,
    }
}

/// The one place a store error becomes a wire error; the message is kept for logs.
impl From<StoreError> for WireError {
    fn from(e: StoreError) -> Self {
        WireError::new(e.errno(), e.to_string())
    }
}
