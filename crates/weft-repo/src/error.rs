//! Why a repository operation failed.

use weft_proto::Errno;

/// A repository operation's failure. Messages name the store by its URL and the object by
/// its key; they never carry credentials.
#[derive(Debug, thiserror::Error)]
pub enum RepoError {
    /// The spec cannot name a store (bad URL, unknown scheme, bad endpoint).
    #[error("{0}")]
    Spec(String),
    /// The store refused or failed a request (after its retries).
    #[error("{url}: {message}")]
    Store {
        /// The repository's URL.
        url: String,
        /// What failed (the object store's error, credentials stripped).
        message: String,
        /// The errno a file-system caller sees.
        errno: Errno,
    },
    /// The file system refused or failed a request.
    #[error(transparent)]
    Client(#[from] weft_client::ClientError),
}

impl RepoError {
    /// The errno a file-system caller sees for this failure.
    pub fn errno(&self) -> Errno {
        match self {
            RepoError::Spec(_) => Errno::Inval,
            RepoError::Store { errno, .. } => *errno,
            RepoError::Client(e) => e.errno(),
        }
    }

    /// A store error for `url` from an object store error: ENOENT for a missing object or
    /// bucket, EACCES for refused credentials, EIO otherwise.
    pub fn store(url: &str, e: &object_store::Error) -> Self {
        let errno = match e {
            object_store::Error::NotFound { .. } => Errno::NoEnt,
            object_store::Error::PermissionDenied { .. }
            | object_store::Error::Unauthenticated { .. } => Errno::Access,
            _ => Errno::Io,
        };
        RepoError::Store {
            url: url.to_string(),
            message: e.to_string(),
            errno,
        }
    }
}
