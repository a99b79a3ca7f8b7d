//! The server end: accepts connections, binds each to a target by its handshake, reads
//! requests within memory budgets and runs them concurrently.

mod handshake;
mod requests;

use crate::auth::{self, ClusterKey};
use crate::callback::CallbackSender;
use crate::conn::{self, Endpoint, READ_BUFFER};
use crate::local::{InProcessServer, LocalServers};
use crate::service::Service;
use crate::stream::BoxRead;
use crate::tls::Tls;
use handshake::handshake;
use parking_lot::RwLock;
use requests::request_loop;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::io::BufReader;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::JoinHandle;
use weft_proto::{
    ConnectReply, ConnectRequest, Errno, PROTOCOL_VERSION, TargetId, WireError, WireResult,
};

/// Limits that keep a server's memory bounded whatever its clients send.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Bytes of request bodies and bulk one connection may have in flight.
    pub conn_budget_bytes: usize,
    /// Bytes of request bodies and bulk all connections together may have in flight.
    pub total_budget_bytes: usize,
    /// Requests one connection may have in flight.
    pub conn_max_requests: usize,
    /// How long a new connection may take to send its handshake.
    pub handshake_timeout: Duration,
    /// The list of in-process servers to join: clients whose transport holds the same
    /// list call this server's targets directly (see [`crate::local`]).
    pub local_servers: Option<LocalServers>,
    /// The cluster key every connection over a socket must prove before its handshake
    /// (see [`crate::auth`]); `None`: no authentication, every peer trusted.
    pub key: Option<Arc<ClusterKey>>,
    /// TLS on every connection over a socket, with client certificates required (see
    /// [`crate::tls`]); it must have a server side ([`Tls::for_server`]). `None`: plain TCP.
    pub tls: Option<Arc<Tls>>,
    /// How long a connected peer may stay silent (no request, no ping) before it is
    /// evicted: its connection dropped and its state released at once
    /// ([`crate::Service::evicted`]) instead of kept for its return, and its next
    /// connection told so (see [`crate::session`]). `None`: never. Peers ping four times
    /// within it; in-process peers are never evicted.
    pub evict_timeout: Option<Duration>,
}

/// The default [`ServerOptions::evict_timeout`]: longer than a server restart or a short
/// network outage, which must be a pause (the fault campaign's are up to 30 s), and than
/// the 60 s a broken connection's handles and locks wait for their client.
pub const DEFAULT_EVICT_TIMEOUT: Duration = Duration::from_secs(90);

/// Evicted nodes remembered per server for their return, at most (the oldest are
/// forgotten first: a node that returns after that many others were evicted is not told).
const EVICTED_REMEMBERED: usize = 65_536;

impl Default for ServerOptions {
    fn default() -> Self {
        Self {
            conn_budget_bytes: 256 << 20,
            total_budget_bytes: 2 << 30,
            conn_max_requests: 1024,
            handshake_timeout: Duration::from_secs(10),
            local_servers: None,
            key: None,
            tls: None,
            evict_timeout: Some(DEFAULT_EVICT_TIMEOUT),
        }
    }
}

/// Budget accounting unit: requests reserve `1 + bytes / UNIT` permits.
const BUDGET_UNIT: usize = 4096;

/// Which service serves which target, and the file system name connections must name.
#[derive(Default)]
pub struct Router {
    fsname: RwLock<String>,
    services: RwLock<HashMap<TargetId, Arc<dyn Service>>>,
}

impl Router {
    /// An empty router for file system `fsname` (empty until known: connections get EAGAIN).
    pub fn new(fsname: impl Into<String>) -> Arc<Self> {
        Arc::new(Self {
            fsname: RwLock::new(fsname.into()),
            services: RwLock::default(),
        })
    }

    /// Sets the file system name (learned from the MGS after the listener started).
    pub fn set_fsname(&self, fsname: &str) {
        *self.fsname.write() = fsname.to_string();
    }

    /// The file system name.
    pub fn fsname(&self) -> String {
        self.fsname.read().clone()
    }

    /// Adds (or replaces) the service of a target.
    pub fn add(&self, service: Arc<dyn Service>) {
        self.services.write().insert(service.target(), service);
    }

    /// Removes a target's service; its existing connections keep working until they close.
    pub fn remove(&self, target: TargetId) {
        self.services.write().remove(&target);
    }

    /// The service of `target`.
    pub fn get(&self, target: TargetId) -> Option<Arc<dyn Service>> {
        self.services.read().get(&target).cloned()
    }

    /// Every target served.
    pub fn targets(&self) -> Vec<TargetId> {
        let mut t: Vec<_> = self.services.read().keys().copied().collect();
        t.sort();
        t
    }

    fn accept(&self, hello: &ConnectRequest) -> WireResult<Arc<dyn Service>> {
        if hello.protocol_version != PROTOCOL_VERSION {
            return Err(WireError::new(
                Errno::Proto,
                format!(
                    "protocol version {} is not supported (server speaks {PROTOCOL_VERSION})",
                    hello.protocol_version
                ),
            ));
        }
        let fsname = self.fsname();
        if fsname.is_empty() {
            return Err(WireError::new(Errno::Again, "server is starting"));
        }
        // A server starting up does not know the file system's name yet: it learns it from
        // the MGS, so the MGS alone accepts an empty name.
        let learning = hello.fsname.is_empty() && hello.target.kind == weft_proto::TargetKind::Mgs;
        if hello.fsname != fsname && !learning {
            return Err(WireError::new(
                Errno::Inval,
                format!(
                    "file system name mismatch: asked for '{}', this server serves '{fsname}'",
                    hello.fsname
                ),
            ));
        }
        self.get(hello.target).ok_or_else(|| {
            WireError::new(
                Errno::NoEnt,
                format!("target {} is not served here", hello.target),
            )
        })
    }
}

/// A listening server. Dropping it stops accepting; [`Server::shutdown`] also closes every
/// connection.
pub struct Server {
    local_addr: SocketAddr,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

/// What a server's connections (socket or in-process) share.
pub(crate) struct Shared {
    pub(crate) router: Arc<Router>,
    opts: ServerOptions,
    total_budget: Arc<Semaphore>,
    pub(crate) next_conn_id: AtomicU64,
    stop: watch::Receiver<bool>,
    /// Nodes evicted from a target and not connected to it since, with when.
    evicted: parking_lot::Mutex<HashMap<(TargetId, uuid::Uuid), std::time::Instant>>,
    /// Socket connections open per target and node.
    live: parking_lot::Mutex<HashMap<(TargetId, uuid::Uuid), usize>>,
}

/// Counts one socket connection of a node to a target in [`Shared::live`] while it lives.
struct LiveConnection<'a> {
    shared: &'a Shared,
    key: (TargetId, uuid::Uuid),
}

impl<'a> LiveConnection<'a> {
    fn new(shared: &'a Shared, target: TargetId, node: uuid::Uuid) -> Self {
        *shared.live.lock().entry((target, node)).or_insert(0) += 1;
        Self {
            shared,
            key: (target, node),
        }
    }

    /// Whether the node has another connection to the target open: it is alive, and this
    /// one is a connection it gave up (its side died in a partition) rather than the node
    /// gone silent.
    fn has_sibling(&self) -> bool {
        self.shared
            .live
            .lock()
            .get(&self.key)
            .is_some_and(|&n| n > 1)
    }
}

impl Drop for LiveConnection<'_> {
    fn drop(&mut self) {
        let mut live = self.shared.live.lock();
        if let Some(n) = live.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                live.remove(&self.key);
            }
        }
    }
}

impl Shared {
    /// Whether the server is shutting down.
    pub(crate) fn is_stopping(&self) -> bool {
        *self.stop.borrow()
    }

    /// Remembers that `node` was evicted from `target`, to tell its next connection.
    fn remember_eviction(&self, target: TargetId, node: uuid::Uuid) {
        let mut evicted = self.evicted.lock();
        if evicted.len() >= EVICTED_REMEMBERED
            && let Some(oldest) = evicted.iter().min_by_key(|(_, at)| **at).map(|(k, _)| *k)
        {
            evicted.remove(&oldest);
        }
        evicted.insert((target, node), std::time::Instant::now());
    }

    /// Whether `node` was evicted from `target` since its last connection (and forgets it:
    /// the node is told once).
    fn take_eviction(&self, target: TargetId, node: uuid::Uuid) -> bool {
        self.evicted.lock().remove(&(target, node)).is_some()
    }
}

impl InProcessServer for Shared {
    fn is_stopping(&self) -> bool {
        Shared::is_stopping(self)
    }

    fn handshake(&self, hello: &ConnectRequest) -> WireResult<(ConnectReply, Arc<dyn Service>)> {
        handshake::handshake_reply(&self.router, hello)
    }

    fn next_conn_id(&self) -> u64 {
        self.next_conn_id.fetch_add(1, Ordering::Relaxed)
    }
}

impl Server {
    /// Binds `addr` and starts serving the router's targets.
    pub async fn bind(
        addr: &str,
        router: Arc<Router>,
        opts: ServerOptions,
    ) -> std::io::Result<Self> {
        if opts.tls.as_ref().is_some_and(|t| t.acceptor().is_none()) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                crate::tls::TlsError::NoServerCert.to_string(),
            ));
        }
        let listener = TcpListener::bind(addr).await?;
        Ok(Self::serve(listener, router, opts))
    }

    /// Serves on an already bound listener.
    pub fn serve(listener: TcpListener, router: Arc<Router>, opts: ServerOptions) -> Self {
        let local_addr = listener
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
        let (stop_tx, stop_rx) = watch::channel(false);
        let shared = Arc::new(Shared {
            router,
            total_budget: Arc::new(Semaphore::new(opts.total_budget_bytes / BUDGET_UNIT)),
            opts,
            next_conn_id: AtomicU64::new(1),
            stop: stop_rx,
            evicted: parking_lot::Mutex::default(),
            live: parking_lot::Mutex::default(),
        });
        if let Some(local) = &shared.opts.local_servers {
            let reached: Arc<dyn InProcessServer> = shared.clone();
            local.register(local_addr, &reached);
        }
        let task = tokio::spawn(accept_loop(listener, shared));
        Self {
            local_addr,
            stop: stop_tx,
            task: Some(task),
        }
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops accepting and closes every connection.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let mut stop = shared.stop.clone();
    let mut conns = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, addr)) => {
                    let _ = stream.set_nodelay(true);
                    crate::stream::bound_retransmissions(&stream);
                    match shared.opts.tls.clone() {
                        Some(tls) => {
                            conns.spawn(serve_tls_connection(stream, addr, tls, shared.clone()));
                        }
                        None => {
                            let (r, w) = stream.into_split();
                            conns.spawn(serve_connection(Box::new(r), Box::new(w), addr, shared.clone()));
                        }
                    }
                }
                Err(e) => {
                    // Out of file descriptors and similar: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    conns.shutdown().await;
}

/// Runs the TLS handshake (within the handshake timeout), then serves the connection
/// inside it. A peer that fails it — no certificate, one of another CA, not TLS at all —
/// is counted as refused ([`auth::COUNTERS`]) and closed.
async fn serve_tls_connection(
    stream: tokio::net::TcpStream,
    addr: SocketAddr,
    tls: Arc<Tls>,
    shared: Arc<Shared>,
) {
    let Some(acceptor) = tls.acceptor() else {
        return;
    };
    let mut stop = shared.stop.clone();
    let accepted = tokio::select! {
        _ = stop.changed() => return,
        a = tokio::time::timeout(shared.opts.handshake_timeout, acceptor.accept(stream)) => a,
    };
    match accepted {
        Ok(Ok(stream)) => {
            let (r, w) = tokio::io::split(stream);
            serve_connection(Box::new(r), Box::new(w), addr, shared).await;
        }
        Ok(Err(e)) => {
            auth::COUNTERS.tls_refused.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(peer = %addr, error = %e, "TLS handshake refused");
        }
        Err(_) => {
            auth::COUNTERS.tls_refused.fetch_add(1, Ordering::Relaxed);
            tracing::info!(peer = %addr, "no TLS handshake within the timeout; closing");
        }
    }
}

async fn serve_connection(
    r: BoxRead,
    w: crate::stream::BoxWrite,
    addr: SocketAddr,
    shared: Arc<Shared>,
) {
    let (tx, rx) = mpsc::channel(conn::WRITE_QUEUE);
    let side = conn::write_side(w);
    let endpoint = Arc::new(Endpoint::on_socket(tx, side.clone(), addr.to_string()));
    // A connection task cancelled by shutdown takes its writer down too; the socket closes
    // with the endpoint (`Endpoint::close`) or the last of its holders.
    // However this function ends (also cancelled), the socket closes with it, even while
    // requests in flight or the service's records of the peer still hold the endpoint.
    let _close = CloseOnDrop(side.clone());
    let mut writer = crate::AbortOnDrop(tokio::spawn(conn::writer_loop(side, rx)));
    let mut r = BufReader::with_capacity(READ_BUFFER, r);
    let mut stop = shared.stop.clone();
    let conn_id = shared.next_conn_id.fetch_add(1, Ordering::Relaxed);

    let handshake = tokio::select! {
        _ = stop.changed() => None,
        h = tokio::time::timeout(shared.opts.handshake_timeout, handshake(&mut r, &endpoint, &shared, addr)) => match h {
            Ok(Ok(pair)) => Some(pair),
            Ok(Err(reason)) => {
                tracing::info!(peer = %addr, %reason, "connection refused");
                None
            }
            Err(_) => {
                tracing::info!(peer = %addr, "no handshake within the timeout; closing");
                None
            }
        },
    };
    if let Some((service, hello, auth)) = handshake {
        let peer = Arc::new(crate::peer::Peer {
            client_uuid: hello.client_uuid,
            addr,
            callbacks: CallbackSender::new(endpoint.clone()),
            conn_id,
            in_process: false,
            auth,
        });
        tracing::debug!(peer = %addr, target = %hello.target, client = %hello.client_uuid, "connected");
        let live = LiveConnection::new(&shared, hello.target, hello.client_uuid);
        let ended = tokio::select! {
            _ = stop.changed() => Ended::Left,
            ended = request_loop(&mut r, &endpoint, &service, &peer, &shared) => ended,
        };
        // Closed first, so that a request still in flight can tell (through its peer's
        // callback sender) that the connection is gone and leave no state behind after
        // `disconnected` has cleaned up.
        endpoint.close();
        match ended {
            Ended::Left => service.disconnected(&peer),
            Ended::Misbehaved(reason) => {
                tracing::warn!(peer = %addr, target = %hello.target, %reason, "closing connection");
                service.disconnected(&peer);
            }
            Ended::Silent(_) if live.has_sibling() => {
                tracing::info!(
                    peer = %addr,
                    target = %hello.target,
                    client = %hello.client_uuid,
                    "closing a silent connection of a client connected again: not an eviction"
                );
                service.disconnected(&peer);
            }
            Ended::Silent(after) => {
                tracing::warn!(
                    peer = %addr,
                    target = %hello.target,
                    client = %hello.client_uuid,
                    silent_s = after.as_secs_f64(),
                    "evicting a client silent past the eviction timeout: its locks, handles and grants are released"
                );
                // The MGS holds nothing a node could lose: its peers are only told of
                // evictions by targets that held their state.
                if hello.target.kind != weft_proto::TargetKind::Mgs {
                    shared.remember_eviction(hello.target, hello.client_uuid);
                }
                service.evicted(&peer);
            }
        }
    }
    endpoint.close();
    drop(endpoint);
    // The writer ends once every sender (endpoint, in-flight tasks) is gone; unless the
    // server is stopping, give queued replies a moment to drain (the socket closes when
    // they are written, see `Endpoint::close`, or when this function ends).
    if !*shared.stop.borrow() {
        let _ = tokio::time::timeout(Duration::from_secs(5), &mut writer.0).await;
    }
}

/// Closes a connection's socket when dropped.
struct CloseOnDrop(conn::SharedWriteSide);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        conn::close_socket(&self.0);
    }
}

/// How a connection's request loop ended.
enum Ended {
    /// The peer closed it, it broke, or the server is stopping.
    Left,
    /// The peer broke the protocol.
    Misbehaved(String),
    /// The peer said nothing for this long, past the eviction timeout.
    Silent(Duration),
}
