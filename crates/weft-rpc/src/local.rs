//! In-process connections. When a client connects to a server that listens in the same
//! process (every role of `weft up` shares one), the call skips the byte stream: the
//! request's encoded body goes straight to the target's [`Service`] and its reply comes
//! straight back, on the caller's task. A socket round trip costs two writes, two reads, an
//! epoll wake-up on each side and two hand-offs between tasks (and a checksum and a copy of
//! every bulk payload each way); this costs none of them.
//!
//! What stays the same as over a socket: the handshake's checks (file system name,
//! protocol version, target), bodies encoded and decoded with the same codecs, the
//! service's statistics, callbacks from the server (delivered by a task of the link, like
//! the socket reader's), `disconnected` when the client goes, and a request that outlives
//! its caller (timed out, cancelled) still running to its end on the server. What differs:
//! the server's per-connection memory budgets do not apply, because the payloads are
//! already in this process's memory and the caller is this process.
//!
//! Which calls take this path is configuration, not ambient state: servers are listed in a
//! [`LocalServers`] handed to them in [`crate::ServerOptions::local_servers`], and clients
//! call directly the servers listed in their transport's
//! [`crate::Transport::local_servers`] ([`crate::transport::Tcp::with_local`]). There is no
//! process-wide list: a client whose transport names none always uses the socket.

use crate::callback::{CallbackHandler, CallbackSender};
use crate::conn::{Endpoint, Reply, WRITE_QUEUE};
use crate::error::RpcError;
use crate::service::{BoxFuture, Peer, Service};
use bytes::Bytes;
use parking_lot::Mutex;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use weft_proto::frame::{BULK_ALIGN, aligned_vec};
use weft_proto::{ConnectReply, ConnectRequest, WireResult};

/// A list of servers of this process that clients holding the same list call directly,
/// by listen address. Whoever starts servers and clients together (`weft up`) makes one,
/// hands it to its servers ([`crate::ServerOptions::local_servers`]) and to the transport
/// of its clients ([`crate::Transport::local_servers`], [`crate::transport::Tcp`]); a
/// client whose transport holds none always uses the socket. Servers are forgotten once
/// stopped and dropped.
#[derive(Clone, Default)]
pub struct LocalServers {
    list: Arc<Mutex<Vec<Listed>>>,
}

/// A listed server: where it listens, and the server while it runs.
type Listed = (SocketAddr, Weak<dyn InProcessServer>);

/// A server of this process as its in-process clients reach it (the server implements
/// it; this module does not know the server's insides).
pub(crate) trait InProcessServer: Send + Sync {
    /// Whether it is stopping: no new link, and the links it had are closed.
    fn is_stopping(&self) -> bool;
    /// The handshake of `hello`, as over a socket: the reply and the service of the
    /// target it names.
    fn handshake(&self, hello: &ConnectRequest) -> WireResult<(ConnectReply, Arc<dyn Service>)>;
    /// The id of a new connection (unique within the server).
    fn next_conn_id(&self) -> u64;
}

impl std::fmt::Debug for LocalServers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let addrs: Vec<SocketAddr> = self.list.lock().iter().map(|(a, _)| *a).collect();
        f.debug_struct("LocalServers")
            .field("addrs", &addrs)
            .finish()
    }
}

impl LocalServers {
    /// An empty list.
    pub fn new() -> Self {
        Self::default()
    }

    /// Lists a server that listens on `addr`.
    pub(crate) fn register(&self, addr: SocketAddr, server: &Arc<dyn InProcessServer>) {
        let mut list = self.list.lock();
        list.retain(|(_, s)| s.strong_count() > 0);
        list.push((addr, Arc::downgrade(server)));
    }

    /// The running server listed here that `addr` (an `IP:PORT`; names are not resolved)
    /// reaches, if any, with `addr` parsed. A server listening on the unspecified address
    /// answers loopback ones.
    pub(crate) fn find(&self, addr: &str) -> Option<(Arc<dyn InProcessServer>, SocketAddr)> {
        let asked: SocketAddr = addr.parse().ok()?;
        self.list.lock().iter().find_map(|(bound, server)| {
            let reaches = *bound == asked
                || (bound.ip().is_unspecified()
                    && bound.port() == asked.port()
                    && asked.ip().is_loopback());
            let server = server.upgrade().filter(|_| reaches)?;
            (!server.is_stopping()).then_some((server, asked))
        })
    }
}

/// A client's in-process connection to one target.
pub(crate) struct LocalLink {
    server: Arc<dyn InProcessServer>,
    service: Arc<dyn Service>,
    peer: Arc<Peer>,
    /// Where the server's callbacks to this client are queued (the peer's callback sender
    /// holds it too); closing it tells the server's requests the client is gone.
    callbacks: Arc<Endpoint>,
    callback_task: JoinHandle<()>,
}

impl LocalLink {
    /// Performs the handshake of `hello` with `server` (reached at `addr`), as the socket
    /// handshake does.
    pub(crate) fn connect(
        server: Arc<dyn InProcessServer>,
        addr: SocketAddr,
        hello: &ConnectRequest,
        handler: Option<Arc<dyn CallbackHandler>>,
    ) -> Result<(Self, ConnectReply), RpcError> {
        let (reply, service) = server.handshake(hello).map_err(RpcError::Handshake)?;
        let (tx, rx) = mpsc::channel(WRITE_QUEUE);
        let callbacks = Arc::new(Endpoint::new(
            tx,
            format!("in-process client of {}", hello.target),
        ));
        let peer = Arc::new(Peer {
            client_uuid: hello.client_uuid,
            addr,
            callbacks: CallbackSender::new(callbacks.clone()),
            conn_id: server.next_conn_id(),
            in_process: true,
            auth: crate::peer::PeerAuth::InProcess,
        });
        let callback_task = tokio::spawn(deliver_callbacks(rx, handler));
        tracing::debug!(target = %hello.target, client = %hello.client_uuid, "in-process client connected");
        let link = Self {
            server,
            service,
            peer,
            callbacks,
            callback_task,
        };
        Ok((link, reply))
    }

    /// Whether the link is gone: the server stopped.
    pub(crate) fn is_closed(&self) -> bool {
        self.callbacks.is_closed() || self.server.is_stopping()
    }

    /// Serves one request and returns its reply.
    pub(crate) async fn request(
        &self,
        opcode: u16,
        body: Vec<u8>,
        bulk: Bytes,
        timeout: Duration,
    ) -> Result<Reply, RpcError> {
        if self.is_closed() {
            return Err(RpcError::Closed);
        }
        // The server's work knows the caller's context only from the request's header, as
        // behind a socket (a request it sends on is its own).
        let work = crate::service::answer_raw(
            self.service.clone(),
            self.peer.clone(),
            opcode,
            Bytes::from(body),
            page_aligned(bulk),
        );
        let (body, bulk) = tokio::time::timeout(timeout, RunToEnd(Some(Box::pin(work))))
            .await
            .map_err(|_| RpcError::TimedOut(timeout))?;
        Ok(Reply {
            body: Bytes::from(body),
            bulk,
            bulk_error: None,
        })
    }
}

/// `bulk` starting on a [`BULK_ALIGN`] boundary, as bulk read from a socket does (an OST
/// writes such buffers with `O_DIRECT`); copied only if it does not already.
fn page_aligned(bulk: Bytes) -> Bytes {
    if bulk.is_empty() || (bulk.as_ptr() as usize).is_multiple_of(BULK_ALIGN) {
        return bulk;
    }
    let (mut buf, pad) = aligned_vec(bulk.len());
    buf.extend_from_slice(&bulk);
    Bytes::from(buf).slice(pad..)
}

impl Drop for LocalLink {
    fn drop(&mut self) {
        self.callbacks.close();
        self.callback_task.abort();
        self.service.disconnected(&self.peer);
    }
}

/// Hands the server's callbacks to the client's handler, in order, as the socket reader
/// does (nobody waits for their answers: they are notifications).
async fn deliver_callbacks(
    mut rx: mpsc::Receiver<crate::conn::OutFrame>,
    handler: Option<Arc<dyn CallbackHandler>>,
) {
    while let Some(frame) = rx.recv().await {
        let (Some(handler), Ok(header)) = (&handler, frame.header()) else {
            continue;
        };
        if header.is_callback() && !header.is_reply() {
            handler.on_callback(header.opcode, frame.body());
        }
    }
}

/// Polls a server's work on the caller's task; if the caller lets go before the end (a
/// timeout, a cancelled request), the rest runs on a task of its own, as a request behind
/// a socket runs whether or not anybody waits for its reply.
struct RunToEnd<T: Send + 'static>(Option<BoxFuture<'static, T>>);

impl<T: Send + 'static> Future for RunToEnd<T> {
    type Output = T;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let Some(work) = self.0.as_mut() else {
            return Poll::Pending;
        };
        let out = std::task::ready!(work.as_mut().poll(cx));
        self.0 = None;
        Poll::Ready(out)
    }
}

impl<T: Send + 'static> Drop for RunToEnd<T> {
    fn drop(&mut self) {
        if let Some(work) = self.0.take()
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            rt.spawn(work);
        }
    }
}
