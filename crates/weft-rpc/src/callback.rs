//! Callbacks: requests a server sends a connected client on the client's own connection
//! (configuration changes, lock revocations), the sending side ([`CallbackSender`], held
//! in each [`crate::Peer`]) and the receiving one ([`CallbackHandler`]).

use crate::conn::{self, Endpoint, OutFrame};
use crate::error::RpcError;
use bytes::Bytes;
use std::sync::Arc;
use weft_proto::Message;
use weft_proto::frame::FLAG_CALLBACK;

/// Receives callbacks (server-to-client requests). Must not block: hand work to a task.
pub trait CallbackHandler: Send + Sync + 'static {
    /// One callback with its opcode and encoded body.
    fn on_callback(&self, opcode: u16, body: &[u8]);
}

/// Sends callbacks from a server to one connected client.
#[derive(Clone)]
pub struct CallbackSender {
    endpoint: Arc<Endpoint>,
}

impl std::fmt::Debug for CallbackSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CallbackSender({})", self.endpoint.peer)
    }
}

impl CallbackSender {
    pub(crate) fn new(endpoint: Arc<Endpoint>) -> Self {
        Self { endpoint }
    }

    /// Sends a callback without waiting for the client's answer. Fails at once if the
    /// connection is closed or its send queue is full (a client that does not read).
    pub fn notify<M: Message>(&self, msg: &M) -> Result<(), RpcError> {
        let (op, body) = conn::encode_callback(msg)?;
        let frame = OutFrame::new(
            op,
            FLAG_CALLBACK,
            self.endpoint.next_xid(),
            body,
            Bytes::new(),
        )?;
        self.endpoint.try_send(frame)
    }

    /// Whether the client is gone.
    pub fn is_closed(&self) -> bool {
        self.endpoint.is_closed()
    }
}
