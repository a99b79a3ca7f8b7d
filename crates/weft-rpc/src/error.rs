//! Errors of the transport, and how each maps to an errno.

use weft_proto::{CodecError, Errno, FrameError, WireError};

/// Why an RPC failed.
#[derive(Debug, thiserror::Error)]
pub enum RpcError {
    /// The connection could not be made or broke.
    #[error("connection to {addr}: {source}")]
    Io {
        /// The peer's address.
        addr: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The peer sent a frame that failed validation.
    #[error("bad frame: {0}")]
    Frame(#[from] FrameError),
    /// A body could not be encoded or decoded.
    #[error(transparent)]
    Codec(#[from] CodecError),
    /// The server handled the request and answered with an error.
    #[error("{0}")]
    Remote(WireError),
    /// The connection closed before the reply arrived.
    #[error("connection closed")]
    Closed,
    /// No reply within the deadline.
    #[error("request timed out after {0:?}")]
    TimedOut(std::time::Duration),
    /// The handshake was refused or answered unexpectedly.
    #[error("handshake refused: {0}")]
    Handshake(WireError),
    /// Not sent: the request carries what this node cached before a server evicted it
    /// (its [`crate::RequestContext::epoch`] is older than the node's
    /// [`crate::ClientSession`]), and that must never reach a server.
    #[error(
        "this node was evicted by a server since the file was opened: its cached changes are dropped"
    )]
    Evicted,
}

impl RpcError {
    /// The errno an application should see for this failure.
    pub fn errno(&self) -> Errno {
        match self {
            RpcError::Remote(e) | RpcError::Handshake(e) => e.errno,
            RpcError::TimedOut(_) => Errno::TimedOut,
            RpcError::Io { .. } | RpcError::Closed | RpcError::Frame(_) | RpcError::Evicted => {
                Errno::Io
            }
            RpcError::Codec(_) => Errno::Proto,
        }
    }

    /// Whether the failure was of the connection (worth reconnecting) rather than the request.
    pub fn is_connection_error(&self) -> bool {
        matches!(
            self,
            RpcError::Io { .. } | RpcError::Closed | RpcError::Frame(_) | RpcError::TimedOut(_)
        )
    }

    /// Whether the handshake was refused because the server is still starting: it listens
    /// before it serves its targets, so for a moment after a restart it refuses a target
    /// it does not serve yet (ENOENT) or, before it knows its file system, every one
    /// (EAGAIN). A client waiting out a restart connects again.
    pub fn is_not_served_yet(&self) -> bool {
        matches!(self, RpcError::Handshake(w) if matches!(w.errno, Errno::NoEnt | Errno::Again))
    }

    /// Whether a request that failed this way may be sent again once the server is back: a
    /// broken connection, or a restarting server that does not serve its target yet. The
    /// one rule of every resend loop of the client.
    pub fn is_worth_resending(&self) -> bool {
        self.is_connection_error() || self.is_not_served_yet()
    }
}

impl From<RpcError> for WireError {
    fn from(e: RpcError) -> Self {
        match e {
            RpcError::Remote(w) => w,
            other => WireError::new(other.errno(), other.to_string()),
        }
    }
}
