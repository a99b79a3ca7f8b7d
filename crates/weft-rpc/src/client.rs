//! The client end of a connection: handshake, concurrent calls matched by xid, callbacks
//! from the server, and a reconnecting wrapper.

use crate::callback::CallbackHandler;
use crate::conn::{self, Endpoint, OutFrame, READ_BUFFER, Reply};
use crate::error::RpcError;
use crate::local::LocalLink;
use crate::session::ClientSession;
use crate::stream::BoxRead;
use crate::transport::Transport;
use bytes::Bytes;
use serde::de::DeserializeOwned;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::BufReader;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use weft_proto::frame::{FLAG_CALLBACK, FLAG_REPLY};
use weft_proto::handshake::{ServiceStats, opcode};
use weft_proto::{ConnectReply, ConnectRequest, Message, WireResult};

/// Timeouts of a client connection.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// How long to wait for the TCP connection and the handshake.
    pub connect_timeout: Duration,
    /// How long to wait for any reply.
    pub request_timeout: Duration,
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(60),
        }
    }
}

/// The connecting side of authentication (see [`crate::auth`]): says which key it proves,
/// checks the server's proof, then proves its own. Any failure of either proof is the one
/// refusal, [`crate::auth::REFUSED`].
async fn authenticate(
    endpoint: &Endpoint,
    key: &crate::ClusterKey,
    connect: &ConnectRequest,
    timeout: Duration,
) -> Result<(), RpcError> {
    use crate::auth::{self, Side};
    use weft_proto::handshake::{AuthChallenge, AuthHello, AuthProof};
    let refused = || {
        RpcError::Handshake(weft_proto::WireError::new(
            weft_proto::Errno::Access,
            auth::REFUSED,
        ))
    };
    let role = key.role();
    let secret = key.secret(role).ok_or_else(refused)?;
    let hello = AuthHello {
        role,
        fsname: connect.fsname.clone(),
        client_uuid: connect.client_uuid,
        protocol_version: connect.protocol_version,
        nonce: auth::nonce(),
    };
    let body = weft_proto::encode(&hello)?;
    let frame = endpoint
        .request(opcode::AUTH_HELLO, 0, body, Bytes::new(), timeout)
        .await?;
    let challenge: WireResult<AuthChallenge> = weft_proto::decode(&frame.body)?;
    let challenge = challenge.map_err(RpcError::Handshake)?;
    if !auth::verify(
        secret,
        Side::Server,
        &hello,
        &challenge.nonce,
        &challenge.proof,
    ) {
        return Err(refused());
    }
    let proof = AuthProof {
        proof: auth::proof(secret, Side::Peer, &hello, &challenge.nonce),
    };
    let body = weft_proto::encode(&proof)?;
    let frame = endpoint
        .request(opcode::AUTH_PROOF, 0, body, Bytes::new(), timeout)
        .await?;
    let answer: WireResult<()> = weft_proto::decode(&frame.body)?;
    answer.map_err(RpcError::Handshake)
}

/// A connection to one target, bound by the handshake. Cheap to share: calls from many
/// tasks run concurrently over it, each matched to its reply by xid.
pub struct Connection {
    link: Link,
    reply: ConnectReply,
    opts: ClientOptions,
}

/// How a connection reaches its server.
enum Link {
    /// A byte stream, with its reader and writer tasks.
    Stream {
        endpoint: Arc<Endpoint>,
        /// Reader, writer and (if the server evicts silent peers) pinger.
        tasks: Vec<JoinHandle<()>>,
    },
    /// A server of this process, called directly.
    InProcess(LocalLink),
}

impl Drop for Link {
    fn drop(&mut self) {
        if let Link::Stream { endpoint, tasks } = self {
            endpoint.close_now();
            for t in tasks.iter() {
                t.abort();
            }
        }
    }
}

impl Connection {
    /// Connects to `addr` and performs the handshake in `hello`.
    pub async fn connect(
        transport: &dyn Transport,
        addr: &str,
        hello: &ConnectRequest,
        callbacks: Option<Arc<dyn CallbackHandler>>,
        opts: &ClientOptions,
    ) -> Result<Self, RpcError> {
        if let Some((server, asked)) = transport.local_servers().and_then(|l| l.find(addr)) {
            let (link, reply) = LocalLink::connect(server, asked, hello, callbacks)?;
            return Ok(Connection {
                link: Link::InProcess(link),
                reply,
                opts: opts.clone(),
            });
        }
        let io_err = |source| RpcError::Io {
            addr: addr.to_string(),
            source,
        };
        let (r, w, _) = tokio::time::timeout(opts.connect_timeout, transport.connect(addr))
            .await
            .map_err(|_| RpcError::TimedOut(opts.connect_timeout))?
            .map_err(io_err)?;
        let (tx, rx) = mpsc::channel(conn::WRITE_QUEUE);
        let side = conn::write_side(w);
        let endpoint = Arc::new(Endpoint::on_socket(
            tx,
            side.clone(),
            format!("{addr} ({})", hello.target),
        ));
        let writer = {
            let ep = endpoint.clone();
            tokio::spawn(async move {
                if let Err(e) = conn::writer_loop(side, rx).await {
                    tracing::debug!(peer = %ep.peer, error = %e, "write side closed");
                }
                ep.close();
            })
        };
        let reader = tokio::spawn(reader_loop(
            BufReader::with_capacity(READ_BUFFER, r),
            endpoint.clone(),
            callbacks,
        ));
        let mut link = Link::Stream {
            endpoint: endpoint.clone(),
            tasks: vec![reader, writer],
        };
        if let Some(key) = transport.key() {
            authenticate(&endpoint, &key, hello, opts.connect_timeout).await?;
        }
        let body = weft_proto::encode(hello)?;
        let frame = endpoint
            .request(opcode::CONNECT, 0, body, Bytes::new(), opts.connect_timeout)
            .await?;
        let result: WireResult<ConnectReply> = weft_proto::decode(&frame.body)?;
        let reply = result.map_err(RpcError::Handshake)?;
        if let (Some(every), Link::Stream { tasks, .. }) =
            (ping_interval(reply.evict_timeout_ms), &mut link)
        {
            tasks.push(tokio::spawn(ping_loop(endpoint.clone(), every)));
        }
        Ok(Connection {
            link,
            reply,
            opts: opts.clone(),
        })
    }

    /// Whether the connection calls a server of this process directly.
    pub fn is_in_process(&self) -> bool {
        matches!(self.link, Link::InProcess(_))
    }

    /// Sends one request and waits for its reply.
    async fn request(
        &self,
        opcode: u16,
        body: Vec<u8>,
        bulk: Bytes,
        timeout: Duration,
    ) -> Result<Reply, RpcError> {
        match &self.link {
            Link::Stream { endpoint, .. } => endpoint
                .request(opcode, 0, body, bulk, timeout)
                .await
                .map(Reply::from),
            Link::InProcess(link) => link.request(opcode, body, bulk, timeout).await,
        }
    }

    /// The server's handshake answer.
    pub fn connect_reply(&self) -> &ConnectReply {
        &self.reply
    }

    /// Whether the connection is gone (every call on it fails).
    pub fn is_closed(&self) -> bool {
        match &self.link {
            Link::Stream { endpoint, .. } => endpoint.is_closed(),
            Link::InProcess(link) => link.is_closed(),
        }
    }

    /// Sends a request with bulk data in the default context ([`crate::RequestContext::new`]:
    /// no job, not numbered) and waits for the reply and its bulk.
    pub async fn call<Req: Message, Rep: DeserializeOwned>(
        &self,
        req: &Req,
        bulk: Bytes,
    ) -> Result<(Rep, Bytes), RpcError> {
        self.call_in(&crate::RequestContext::new(), req, bulk).await
    }

    /// Like [`Connection::call`] with its own deadline instead of the connection's
    /// `request_timeout`: for requests the server answers only when something happens
    /// (a blocking lock), which may be much later. `Duration::MAX` waits for as long as
    /// the connection lives.
    pub async fn call_with_timeout<Req: Message, Rep: DeserializeOwned>(
        &self,
        req: &Req,
        bulk: Bytes,
        timeout: Duration,
    ) -> Result<(Rep, Bytes), RpcError> {
        self.call_with_timeout_in(&crate::RequestContext::new(), req, bulk, timeout)
            .await
    }

    /// Sends a request in context `ctx` (its job id and resend numbers travel in the
    /// request's header) and waits for the reply until the connection's `request_timeout`
    /// or `ctx`'s deadline, whichever comes first.
    pub async fn call_in<Req: Message, Rep: DeserializeOwned>(
        &self,
        ctx: &crate::RequestContext,
        req: &Req,
        bulk: Bytes,
    ) -> Result<(Rep, Bytes), RpcError> {
        let timeout = ctx.timeout(self.opts.request_timeout);
        self.call_with_timeout_in(ctx, req, bulk, timeout).await
    }

    /// [`Connection::call_in`] waiting for `timeout` (or until `ctx`'s deadline, if that
    /// comes sooner).
    pub async fn call_with_timeout_in<Req: Message, Rep: DeserializeOwned>(
        &self,
        ctx: &crate::RequestContext,
        req: &Req,
        bulk: Bytes,
        timeout: Duration,
    ) -> Result<(Rep, Bytes), RpcError> {
        let (op, body) = conn::encode_request_in(ctx, req)?;
        let frame = self.request(op, body, bulk, ctx.timeout(timeout)).await?;
        conn::decode_reply(frame)
    }

    /// Round trip with no work on the server.
    pub async fn ping(&self) -> Result<(), RpcError> {
        let frame = self
            .request(
                opcode::PING,
                Vec::new(),
                Bytes::new(),
                self.opts.request_timeout,
            )
            .await?;
        conn::decode_reply::<()>(frame).map(|_| ())
    }

    /// The target's per-operation statistics.
    pub async fn stats(&self) -> Result<ServiceStats, RpcError> {
        let frame = self
            .request(
                opcode::STATS,
                Vec::new(),
                Bytes::new(),
                self.opts.request_timeout,
            )
            .await?;
        conn::decode_reply(frame).map(|(s, _)| s)
    }

    /// Sends raw bytes as a request body with any opcode (for tests of server robustness).
    pub async fn call_raw(
        &self,
        opcode: u16,
        body: Vec<u8>,
        bulk: Bytes,
    ) -> Result<Reply, RpcError> {
        self.request(opcode, body, bulk, self.opts.request_timeout)
            .await
    }
}

/// How often a client pings a server that evicts peers silent for `evict_timeout_ms`
/// (none if it never does): four times within the timeout, so a lost or late ping or two
/// never gets a live node evicted.
fn ping_interval(evict_timeout_ms: u64) -> Option<Duration> {
    (evict_timeout_ms > 0).then(|| Duration::from_millis((evict_timeout_ms / 4).max(50)))
}

/// Pings the server every `every` for as long as the connection lives, so that it hears
/// from this node even while no request is in flight (Lustre's pinger). One ping at a
/// time; a ping left unanswered is not an error here (a busy or stopped server answers
/// later), requests find a broken connection themselves.
async fn ping_loop(ep: Arc<Endpoint>, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        if ep.is_closed() {
            return;
        }
        if let Err(e) = ep
            .request(opcode::PING, 0, Vec::new(), Bytes::new(), every * 4)
            .await
        {
            tracing::debug!(peer = %ep.peer, error = %e, "ping not answered");
        }
    }
}

async fn reader_loop(
    mut r: BufReader<BoxRead>,
    ep: Arc<Endpoint>,
    callbacks: Option<Arc<dyn CallbackHandler>>,
) {
    loop {
        let header = match conn::read_header(&mut r).await {
            Ok(Some(h)) => h,
            Ok(None) => break,
            Err(e) => {
                tracing::debug!(peer = %ep.peer, error = %e, "read side closed");
                break;
            }
        };
        let frame = match conn::read_payload(&mut r, header).await {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(peer = %ep.peer, error = %e, "bad frame from server; closing");
                break;
            }
        };
        if header.is_reply() && !header.is_callback() {
            ep.complete(frame);
        } else if header.is_callback() && !header.is_reply() {
            if let Some(cb) = &callbacks {
                cb.on_callback(header.opcode, &frame.body);
            }
            let body = crate::service::encode_reply::<()>(&Ok(()));
            if let Ok(reply) = OutFrame::new(
                header.opcode,
                FLAG_REPLY | FLAG_CALLBACK,
                header.xid,
                body,
                Bytes::new(),
            ) {
                let _ = ep.try_send(reply);
            }
        } else {
            tracing::warn!(peer = %ep.peer, flags = header.flags, "unexpected frame from server; closing");
            break;
        }
    }
    ep.close();
}

/// A connection that is opened on first use and opened again after it breaks. Requests
/// that fail on a broken connection return the error; callers decide whether to resend.
///
/// A target may be served from several addresses (its server and the failover servers
/// that take it over when that one dies): a new connection tries them in turn from the
/// one that last answered, so a client follows a failover as soon as the new server
/// serves, without waiting for the MGS to announce the move.
///
/// A connect reply saying the target evicted this node moves the node's
/// [`ClientSession`] to a new epoch; from then on a request whose context carries an older
/// epoch fails with [`RpcError::Evicted`] without being sent (see [`crate::session`]).
pub struct Reconnecting {
    transport: Arc<dyn Transport>,
    addrs: parking_lot::RwLock<Addresses>,
    hello: ConnectRequest,
    callbacks: Option<Arc<dyn CallbackHandler>>,
    opts: ClientOptions,
    session: Arc<ClientSession>,
    current: tokio::sync::Mutex<Option<Arc<Connection>>>,
}

/// The addresses a target may be served from, and which to try first.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Addresses {
    /// Never empty: the configuration's address first, then its failover addresses.
    list: Vec<String>,
    /// Index in `list` of the address to try first: the one that answered last.
    first: usize,
}

impl Reconnecting {
    /// A lazily opened connection to `addr`.
    pub fn new(
        transport: Arc<dyn Transport>,
        addr: String,
        hello: ConnectRequest,
        callbacks: Option<Arc<dyn CallbackHandler>>,
        opts: ClientOptions,
    ) -> Self {
        Self {
            transport,
            addrs: parking_lot::RwLock::new(Addresses {
                list: vec![addr],
                first: 0,
            }),
            hello,
            callbacks,
            opts,
            session: Arc::default(),
            current: tokio::sync::Mutex::new(None),
        }
    }

    /// The same, sharing `session` (the node's other connections') instead of one of its
    /// own.
    pub fn with_session(self, session: Arc<ClientSession>) -> Self {
        Self { session, ..self }
    }

    /// The session this connection's evictions are recorded in.
    pub fn session(&self) -> &Arc<ClientSession> {
        &self.session
    }

    /// Points future connections at a new address (the target moved), and only there.
    pub fn set_address(&self, addr: String) {
        self.set_addresses(vec![addr]);
    }

    /// Points future connections at `addrs`, tried in that order (the target's address,
    /// then its failover addresses); nothing changes when the list is the one held. An
    /// empty list is ignored.
    pub fn set_addresses(&self, addrs: Vec<String>) {
        if addrs.is_empty() {
            return;
        }
        let mut cur = self.addrs.write();
        if cur.list != addrs {
            *cur = Addresses {
                list: addrs,
                first: 0,
            };
        }
    }

    /// The options connections are made with.
    pub fn options(&self) -> &ClientOptions {
        &self.opts
    }

    /// The address connections go to first.
    pub fn address(&self) -> String {
        let a = self.addrs.read();
        a.list.get(a.first).cloned().unwrap_or_default()
    }

    /// Every address connections may go to, in the order they are tried.
    pub fn addresses(&self) -> Vec<String> {
        let a = self.addrs.read();
        let n = a.list.len();
        (0..n).map(|i| a.list[(a.first + i) % n].clone()).collect()
    }

    /// The open connection, connecting if there is none: to each address in turn, from
    /// the one that answered last, until one serves the target. A failure that another
    /// server could not cure (a refused key, a wrong file system) ends the search; when
    /// every address failed, the last failure is returned.
    pub async fn connection(&self) -> Result<Arc<Connection>, RpcError> {
        let mut cur = self.current.lock().await;
        if let Some(c) = cur.as_ref().filter(|c| !c.is_closed()) {
            return Ok(c.clone());
        }
        let tried = self.addrs.read().clone();
        let n = tried.list.len();
        let mut failure = None;
        for i in 0..n {
            let at = (tried.first + i) % n;
            let addr = &tried.list[at];
            match Connection::connect(
                &*self.transport,
                addr,
                &self.hello,
                self.callbacks.clone(),
                &self.opts,
            )
            .await
            {
                Ok(c) => {
                    let c = Arc::new(c);
                    if c.connect_reply().evicted {
                        let epoch = self.session.evicted();
                        tracing::warn!(
                            target = %self.hello.target,
                            server = %addr,
                            epoch,
                            "this node was evicted by the server (silent past its timeout): changes cached before are dropped, files opened before fail with EIO"
                        );
                    }
                    if i > 0 {
                        tracing::info!(target = %self.hello.target, %addr, "connected to a failover address");
                        let mut a = self.addrs.write();
                        // Unless the list changed meanwhile (a newer configuration).
                        if a.list == tried.list {
                            a.first = at;
                        }
                    }
                    *cur = Some(c.clone());
                    return Ok(c);
                }
                Err(e) if e.is_worth_resending() && i + 1 < n => {
                    tracing::debug!(target = %self.hello.target, %addr, error = %e, "trying the next address");
                    failure = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(failure.unwrap_or(RpcError::Closed))
    }

    /// The open connection for a request in `ctx`: refused if the request carries content
    /// of an epoch before an eviction — checked after connecting, so that the connection
    /// whose handshake announced the eviction never carries such a request.
    async fn connection_for(
        &self,
        ctx: &crate::RequestContext,
    ) -> Result<Arc<Connection>, RpcError> {
        let c = self.connection().await?;
        if !self.session.admits(ctx.epoch) {
            return Err(RpcError::Evicted);
        }
        Ok(c)
    }

    /// Calls over the current connection in the default context (see
    /// [`Connection::call`]); a connection failure drops it so the next call reconnects.
    pub async fn call<Req: Message, Rep: DeserializeOwned>(
        &self,
        req: &Req,
        bulk: Bytes,
    ) -> Result<(Rep, Bytes), RpcError> {
        self.call_in(&crate::RequestContext::new(), req, bulk).await
    }

    /// [`Reconnecting::call`] with its own deadline (see [`Connection::call_with_timeout`]).
    pub async fn call_with_timeout<Req: Message, Rep: DeserializeOwned>(
        &self,
        req: &Req,
        bulk: Bytes,
        timeout: Duration,
    ) -> Result<(Rep, Bytes), RpcError> {
        let c = self.connection().await?;
        let r = c.call_with_timeout(req, bulk, timeout).await;
        self.forget_if_broken(&c, &r).await;
        r
    }

    /// [`Reconnecting::call`] in context `ctx` (see [`Connection::call_in`]).
    pub async fn call_in<Req: Message, Rep: DeserializeOwned>(
        &self,
        ctx: &crate::RequestContext,
        req: &Req,
        bulk: Bytes,
    ) -> Result<(Rep, Bytes), RpcError> {
        let c = self.connection_for(ctx).await?;
        let r = c.call_in(ctx, req, bulk).await;
        self.forget_if_broken(&c, &r).await;
        r
    }

    /// [`Reconnecting::call_in`] waiting for `timeout`, except that a call to a server of
    /// this process has no deadline: it cannot be lost on the way and runs to its end on
    /// the server even if its caller stops waiting, so giving up on it would only leave the
    /// caller unsure whether it happened. Also says whether the call went in-process: such
    /// a call is never to be sent again (its server keeps no record to answer a resend
    /// with).
    pub async fn call_noting_in_process<Req: Message, Rep: DeserializeOwned>(
        &self,
        ctx: &crate::RequestContext,
        req: &Req,
        bulk: Bytes,
        timeout: Duration,
    ) -> (bool, Result<(Rep, Bytes), RpcError>) {
        let c = match self.connection_for(ctx).await {
            Ok(c) => c,
            Err(e) => return (false, Err(e)),
        };
        let in_process = c.is_in_process();
        let (timeout, ctx) = if in_process {
            let ctx = crate::RequestContext {
                deadline: None,
                ..ctx.clone()
            };
            (Duration::MAX, ctx)
        } else {
            (timeout, ctx.clone())
        };
        let r = c.call_with_timeout_in(&ctx, req, bulk, timeout).await;
        self.forget_if_broken(&c, &r).await;
        (in_process, r)
    }

    /// Drops connection `c` after a connection failure, so that the next call reconnects.
    async fn forget_if_broken<T>(&self, c: &Arc<Connection>, r: &Result<T, RpcError>) {
        if r.as_ref().is_err_and(RpcError::is_connection_error) {
            let mut cur = self.current.lock().await;
            if cur.as_ref().is_some_and(|x| Arc::ptr_eq(x, c)) {
                *cur = None;
            }
        }
    }
}
