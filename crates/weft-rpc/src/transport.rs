//! Byte-stream transports. TCP is the first; the trait leaves room for RDMA. A transport
//! also says which servers of this process its connections call directly instead
//! ([`Transport::local_servers`]).

use crate::auth::{ClusterKey, KeyError};
use crate::local::LocalServers;
use crate::service::BoxFuture;
use crate::tls::{Tls, TlsError, TlsFiles};
use std::ffi::OsString;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

pub use crate::stream::{BoxRead, BoxWrite};

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
/// is written whole) and bounded retransmission backoff ([`crate::stream::bound_retransmissions`]), within
/// TLS if `tls` is given (see [`crate::tls`]).
async fn tcp_connect(addr: &str, tls: Option<&Tls>) -> io::Result<(BoxRead, BoxWrite, SocketAddr)> {
    let stream = tokio::net::TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    crate::stream::bound_retransmissions(&stream);
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

    /// Every connection over a socket, proving the key and speaking the TLS that the
    /// environment names ([`KEY_VAR`], [`TLS_CA_VAR`], [`TLS_CERT_VAR`], [`TLS_KEY_VAR`]),
    /// if it does: how programs without flags (administration tools, the Python module)
    /// secure their connections.
    pub fn from_env() -> Result<Self, EnvError> {
        Self::from_vars(|name| std::env::var_os(name))
    }

    /// [`Tcp::from_env`] with the variables looked up by `var` (a harness's own list of
    /// the variables it gives its servers). Empty values count as unset.
    pub fn from_vars(var: impl Fn(&str) -> Option<OsString>) -> Result<Self, EnvError> {
        let path = |name: &str| var(name).filter(|v| !v.is_empty()).map(PathBuf::from);
        let key = match path(KEY_VAR) {
            Some(p) => Some(Arc::new(ClusterKey::load(&p)?)),
            None => None,
        };
        let tls = match path(TLS_CA_VAR) {
            Some(ca) => Some(Arc::new(Tls::load(&TlsFiles {
                ca,
                cert: path(TLS_CERT_VAR),
                key: path(TLS_KEY_VAR),
            })?)),
            None => None,
        };
        Ok(Self::sockets().with_key(key).with_tls(tls))
    }
}

/// The variable naming a cluster key file (see [`crate::auth`]).
pub const KEY_VAR: &str = "WEFT_KEY";
/// The variable naming the cluster CA's certificate: turns TLS on (see [`crate::tls`]).
pub const TLS_CA_VAR: &str = "WEFT_TLS_CA";
/// The variable naming this node's certificate.
pub const TLS_CERT_VAR: &str = "WEFT_TLS_CERT";
/// The variable naming this node's private key.
pub const TLS_KEY_VAR: &str = "WEFT_TLS_KEY";

/// Why the files the environment names do not secure connections.
#[derive(Debug, thiserror::Error)]
pub enum EnvError {
    /// The key file of [`KEY_VAR`].
    #[error("{KEY_VAR}: {0}")]
    Key(#[from] KeyError),
    /// The files of the `WEFT_TLS_*` variables.
    #[error("WEFT_TLS_*: {0}")]
    Tls(#[from] TlsError),
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
