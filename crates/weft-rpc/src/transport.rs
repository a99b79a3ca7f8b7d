//! Byte-stream transports. TCP is the first; the trait leaves room for RDMA. A transport
//! also says which servers of this process its connections call directly instead
//! ([`Transport::local_servers`]).

use crate::auth::ClusterKey;
use crate::local::LocalServers;
use crate::service::BoxFuture;
use crate::tls::Tls;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite};

/// The reading half of a connection.
pub type BoxRead = Box<dyn AsyncRead + Send + Unpin>;
/// The writing half of a connection.
pub type BoxWrite = Box<dyn AsyncWrite + Send + Unpin>;

/// A connection being opened: both halves and the peer's resolved address.
pub type Connecting<'a> = BoxFuture<'a, io::Result<(BoxRead, BoxWrite, SocketAddr)>>;

/// A way to open connections to `HOST:PORT` addresses.
pub trait Transport: Send + Sync + 'static {
    /// Connects to `addr`, returning both halves and the peer's resolved address.
    fn connect<'a>(&'a self, addr: &'a str) -> Connecting<'a>;

    /// The servers of this process that connections call directly, skipping the byte
    /// stream (see [`crate::local`]); `None`: every connection uses the stream. Transports
    /// that change the bytes on their way (tests that damage frames) keep the default.
    fn local_servers(&self) -> Option<LocalServers> {
        None
    }

    /// The cluster key connections prove before their handshake (see [`crate::auth`]);
    /// `None`: they do not authenticate (servers without a key accept them).
    fn key(&self) -> Option<Arc<ClusterKey>> {
        None
    }
}

/// Opens a TCP connection with `TCP_NODELAY` (requests are small and latency-bound; bulk
/// is written whole), within TLS if `tls` is given (see [`crate::tls`]).
async fn tcp_connect(addr: &str, tls: Option<&Tls>) -> io::Result<(BoxRead, BoxWrite, SocketAddr)> {
    let stream = tokio::net::TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let peer = stream.peer_addr()?;
    if let Some(tls) = tls {
        let name = crate::tls::server_name(addr)?;
        let stream = tls.connector().connect(name, stream).await?;
        let (r, w) = tokio::io::split(stream);
        return Ok((Box::new(r) as BoxRead, Box::new(w) as BoxWrite, peer));
    }
    let (r, w) = stream.into_split();
    Ok((Box::new(r) as BoxRead, Box::new(w) as BoxWrite, peer))
}

/// TCP, every connection over a socket, proving no key ([`Tcp`] calls servers of this
/// process directly and proves a key).
#[derive(Debug, Default, Clone, Copy)]
pub struct TcpTransport;

impl Transport for TcpTransport {
    fn connect<'a>(&'a self, addr: &'a str) -> Connecting<'a> {
        Box::pin(tcp_connect(addr, None))
    }
}

/// TCP, calling the servers of a given [`LocalServers`] list directly, or none, proving a
/// cluster key if given one, within TLS if given a configuration.
#[derive(Debug, Default, Clone)]
pub struct Tcp {
    local: Option<LocalServers>,
    key: Option<Arc<ClusterKey>>,
    tls: Option<Arc<Tls>>,
}

impl Tcp {
    /// Every connection over a socket.
    pub fn sockets() -> Self {
        Self::new(None)
    }

    /// Servers listed in `local` called directly, the others over a socket.
    pub fn with_local(local: LocalServers) -> Self {
        Self::new(Some(local))
    }

    /// Servers listed in `local`, if any, called directly.
    pub fn new(local: Option<LocalServers>) -> Self {
        Self {
            local,
            key: None,
            tls: None,
        }
    }

    /// The same, proving `key` on every connection over a socket (`None`: none).
    pub fn with_key(mut self, key: Option<Arc<ClusterKey>>) -> Self {
        self.key = key;
        self
    }

    /// The same, every connection over a socket within TLS (`None`: plain TCP).
    pub fn with_tls(mut self, tls: Option<Arc<Tls>>) -> Self {
        self.tls = tls;
        self
    }
}

impl Transport for Tcp {
    fn connect<'a>(&'a self, addr: &'a str) -> Connecting<'a> {
        Box::pin(tcp_connect(addr, self.tls.as_deref()))
    }

    fn local_servers(&self) -> Option<LocalServers> {
        self.local.clone()
    }

    fn key(&self) -> Option<Arc<ClusterKey>> {
        self.key.clone()
    }
}
