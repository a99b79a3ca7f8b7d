//! The weftfs transport: framed, multiplexed RPC with server-to-client callbacks.
//!
//! Owns connections and their lifetimes, request ids, flow control and per-operation
//! statistics. It does not own what a message means: services implement [`Handler`] for
//! their request type and the [`Router`] hands each connection to the service of the target
//! named in its connect handshake. The byte stream comes from a [`Transport`] (TCP today), so
//! an RDMA transport can be added without touching services or clients. A client and a
//! server in one process skip the stream altogether ([`local`]).

pub mod abort;
pub mod auth;
pub mod backoff;
pub mod callback;
pub mod client;
pub mod conn;
pub mod context;
pub mod error;
pub mod local;
pub mod metric;
pub mod nodemap;
pub mod peer;
pub mod server;
pub mod service;
pub mod session;
pub mod stats;
pub mod stream;
pub mod tls;
pub mod transport;

#[cfg(test)]
mod test_support;

pub use abort::AbortOnDrop;
pub use auth::ClusterKey;
pub use backoff::Backoff;
pub use callback::{CallbackHandler, CallbackSender};
pub use client::{ClientOptions, Connection, Reconnecting};
pub use context::{RequestContext, sanitize_jobid};
pub use error::RpcError;
pub use local::LocalServers;
pub use server::{Router, Server, ServerOptions};
pub use service::{Handler, Peer, PeerAuth, Service, TypedService};
pub use session::ClientSession;
pub use stats::OpStatsTable;
pub use tls::{Tls, TlsError, TlsFiles};
pub use transport::{EnvError, Tcp, TcpTransport, Transport};
