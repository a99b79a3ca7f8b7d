//! Who a request came from: the connected peer as its handshake and authentication left
//! it, as every service and the client classes see it.

use crate::callback::CallbackSender;
use std::net::SocketAddr;
use uuid::Uuid;

/// The connected peer a request came from.
#[derive(Debug, Clone)]
pub struct Peer {
    /// The peer's node UUID from its handshake.
    pub client_uuid: Uuid,
    /// Its network address.
    pub addr: SocketAddr,
    /// Sends callbacks to the peer on the same connection.
    pub callbacks: CallbackSender,
    /// Identifies this connection (unique within the server process).
    pub conn_id: u64,
    /// The peer calls from this process, directly (see [`crate::local`]): nothing it
    /// sends is lost on the way, so a caller that goes by
    /// [`crate::Reconnecting::call_noting_in_process`] never sends a request twice.
    pub in_process: bool,
    /// What the connection proved at its start.
    pub auth: PeerAuth,
}

/// What a connection proved at its start (see [`crate::auth`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerAuth {
    /// The server runs without a key: every peer is trusted, as before keys existed.
    Open,
    /// The peer proved the client key.
    Client,
    /// The peer proved the server key.
    Server,
    /// The peer is in this process (`weft up`): it holds whatever key the process holds.
    InProcess,
}

impl PeerAuth {
    /// Whether the peer may send requests reserved for servers.
    pub fn is_server(self) -> bool {
        !matches!(self, PeerAuth::Client)
    }
}
