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

/// Longest wait between retransmissions of a segment on a cluster socket (Linux's
/// `TCP_RTO_MAX_MS`, 6.15 and later; the kernel's default is 120 s). With exponential
/// backoff a request sent during a 28 s partition was retransmitted 51 s after it was
/// first sent, so the peer saw it 23 s after the link came back (found by the fault
/// campaign); bounded at 1 s, a healed link carries it again within a second.
const RTO_MAX_MS: libc::c_int = 1000;
/// `TCP_RTO_MAX_MS` from linux/tcp.h (the libc crate does not have it yet).
const TCP_RTO_MAX_MS: libc::c_int = 44;

/// How long sent data may stay unacknowledged before the kernel gives a cluster socket up
/// (`TCP_USER_TIMEOUT`). With retransmissions bounded at 1 s, the kernel's own limit
/// (`tcp_retries2`) is reached after about 13 s: a longer partition killed every
/// connection with a ping or request in flight, and a client that then stayed idle
/// towards that server never reconnected, so the server, hearing nothing, evicted it
/// ([`crate::session`]). A connection now outlives any partition shorter than the
/// eviction timeout (default 90 s): its retransmitted ping gets through once the link is
/// back. Requests still time out on their own deadlines.
const USER_TIMEOUT_MS: libc::c_int = 300_000;

/// Sets one `IPPROTO_TCP` option of `socket` to `value` (a failure is logged: the
/// kernel's default stays).
fn set_tcp_option(socket: &impl std::os::fd::AsRawFd, option: libc::c_int, value: libc::c_int) {
    // SAFETY: setsockopt on a socket this process owns, with a pointer to a c_int that
    // lives across the call and its exact size; it reads nothing else. Neither rustix nor
    // socket2 offers `TCP_RTO_MAX_MS`.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_TCP,
            option,
            (&raw const value).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        tracing::debug!(option, error = %io::Error::last_os_error(), "TCP option not set");
    }
}

/// Sets [`RTO_MAX_MS`] (older kernels, ENOPROTOOPT, keep their default) and
/// [`USER_TIMEOUT_MS`] on `socket`.
pub(crate) fn bound_retransmissions(socket: &impl std::os::fd::AsRawFd) {
    set_tcp_option(socket, TCP_RTO_MAX_MS, RTO_MAX_MS);
    set_tcp_option(socket, libc::TCP_USER_TIMEOUT, USER_TIMEOUT_MS);
}

/// Opens a TCP connection with `TCP_NODELAY` (requests are small and latency-bound; bulk
/// is written whole) and bounded retransmission backoff ([`bound_retransmissions`]), within
/// TLS if `tls` is given (see [`crate::tls`]).
async fn tcp_connect(addr: &str, tls: Option<&Tls>) -> io::Result<(BoxRead, BoxWrite, SocketAddr)> {
    let stream = tokio::net::TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    bound_retransmissions(&stream);
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    /// TCP option `option` of `socket`; `None` on a kernel without it.
    fn tcp_option(socket: &impl AsRawFd, option: libc::c_int) -> Option<libc::c_int> {
        let mut value: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: getsockopt on our own socket into a c_int and its length, both alive
        // across the call.
        let rc = unsafe {
            libc::getsockopt(
                socket.as_raw_fd(),
                libc::IPPROTO_TCP,
                option,
                (&raw mut value).cast(),
                &mut len,
            )
        };
        (rc == 0).then_some(value)
    }

    #[test]
    fn cluster_sockets_retransmit_at_least_every_second_and_outlive_short_partitions() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let socket = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let before = tcp_option(&socket, TCP_RTO_MAX_MS);
        bound_retransmissions(&socket);
        assert_eq!(
            tcp_option(&socket, libc::TCP_USER_TIMEOUT),
            Some(USER_TIMEOUT_MS),
            "a partition shorter than the eviction timeout must not kill the connection"
        );
        match before {
            // Linux 6.15 and later: 120 s by default, 1 s on our sockets.
            Some(default) => {
                assert!(default > RTO_MAX_MS, "{default}");
                assert_eq!(tcp_option(&socket, TCP_RTO_MAX_MS), Some(RTO_MAX_MS));
            }
            // An older kernel: nothing to set, and nothing fails.
            None => eprintln!("this kernel has no TCP_RTO_MAX_MS"),
        }
    }
}
