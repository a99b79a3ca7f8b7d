//! The client library's error type.

use weft_proto::{Errno, TargetId, WireError};
use weft_rpc::RpcError;

/// Why a client operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The request failed in transport or on the server.
    // The cause is part of the message (not `source()`), so chains print it once.
    #[error("{target}: {error}")]
    Rpc {
        /// The target asked.
        target: TargetId,
        /// What went wrong.
        error: RpcError,
    },
    /// The server answered with a reply of the wrong kind.
    #[error("{target}: unexpected reply to {op}")]
    UnexpectedReply {
        /// The target asked.
        target: TargetId,
        /// The operation.
        op: &'static str,
    },
    /// The configuration names no such target.
    #[error("{0} is not in the file system's configuration")]
    UnknownTarget(TargetId),
    /// Bad input from the caller.
    #[error("{0}")]
    Invalid(String),
    /// The operation failed with an errno decided by the client library (or kept from an
    /// earlier asynchronous failure, like a write-back error reported at close).
    #[error("{0}")]
    Remote(WireError),
}

impl ClientError {
    /// The errno an application should see.
    pub fn errno(&self) -> Errno {
        match self {
            ClientError::Rpc { error, .. } => error.errno(),
            ClientError::UnexpectedReply { .. } => Errno::Proto,
            ClientError::UnknownTarget(_) => Errno::Io,
            ClientError::Invalid(_) => Errno::Inval,
            ClientError::Remote(e) => e.errno,
        }
    }

    /// The server's error, if the server answered with one.
    pub fn remote(&self) -> Option<&WireError> {
        match self {
            ClientError::Rpc {
                error: RpcError::Remote(e),
                ..
            }
            | ClientError::Remote(e) => Some(e),
            _ => None,
        }
    }
}

impl From<ClientError> for WireError {
    fn from(e: ClientError) -> Self {
        match e {
            ClientError::Rpc {
                error: RpcError::Remote(w),
                ..
            }
            | ClientError::Remote(w) => w,
            other => WireError::new(other.errno(), other.to_string()),
        }
    }
}
