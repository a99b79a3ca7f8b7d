//! Byte-stream transports. TCP is the first; the trait leaves room for RDMA.

use crate::service::BoxFuture;
use std::io;
use std::net::SocketAddr;
use tokio::io::{AsyncRead, AsyncWrite};

/// The reading half of a connection.
pub type BoxRead = Box<dyn AsyncRead + Send + Unpin>;
/// The writing half of a connection.
pub type BoxWrite = Box<dyn AsyncWrite + Send + Unpin>;

/// A way to open connections to `HOST:PORT` addresses.
pub trait Transport: Send + Sync + 'static {
    /// Connects to `addr`, returning both halves and the peer's resolved address.
    fn connect<'a>(
        &'a self,
        addr: &'a str,
    ) -> BoxFuture<'a, io::Result<(BoxRead, BoxWrite, SocketAddr)>>;

    /// Whether a connection to a server of this process may skip the byte stream and call
    /// the target directly (see [`crate::local`]). Transports that change the bytes on
    /// their way (tests that damage frames) keep the default, false.
    fn in_process(&self) -> bool {
        false
    }
}

/// TCP with `TCP_NODELAY` (requests are small and latency-bound; bulk is written whole).
#[derive(Debug, Default, Clone, Copy)]
pub struct TcpTransport;

impl Transport for TcpTransport {
    fn connect<'a>(
        &'a self,
        addr: &'a str,
    ) -> BoxFuture<'a, io::Result<(BoxRead, BoxWrite, SocketAddr)>> {
        Box::pin(async move {
            let stream = tokio::net::TcpStream::connect(addr).await?;
            stream.set_nodelay(true)?;
            let peer = stream.peer_addr()?;
            let (r, w) = stream.into_split();
            Ok((Box::new(r) as BoxRead, Box::new(w) as BoxWrite, peer))
        })
    }

    fn in_process(&self) -> bool {
        true
    }
}
