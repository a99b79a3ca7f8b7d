//! What a target implements to serve requests: [`Handler`] for typed messages, and the
//! object-safe [`Service`] the router dispatches to.

pub use crate::peer::{Peer, PeerAuth};
use crate::stats::{JobStatsTable, OpStatsTable};
use bytes::Bytes;
use serde::Serialize;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;
use uuid::Uuid;
use weft_proto::handshake::{ServiceStats, opcode};
use weft_proto::{Errno, Message, TargetId, WireError, WireResult};

/// A boxed, sendable future.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A target's request handler for one message type.
///
/// The transport has already checked the frame (bounds, checksums) and decoded the body;
/// the handler returns its reply and reply bulk, or a [`WireError`] carrying the errno.
pub trait Handler: Send + Sync + 'static {
    /// The request message type.
    type Request: Message + Send + 'static;
    /// The reply message type.
    type Reply: Serialize + Send + 'static;

    /// Handles one request with its bulk payload.
    fn handle(
        &self,
        peer: &Peer,
        request: Self::Request,
        bulk: Bytes,
    ) -> impl Future<Output = WireResult<(Self::Reply, Bytes)>> + Send;

    /// Handles one request in its context (job id and resend numbers from the request's
    /// header): what the service calls. The default calls [`Handler::handle`], for handlers
    /// that need no context.
    fn handle_in(
        &self,
        ctx: &crate::RequestContext,
        peer: &Peer,
        request: Self::Request,
        bulk: Bytes,
    ) -> impl Future<Output = WireResult<(Self::Reply, Bytes)>> + Send {
        let _ = ctx;
        self.handle(peer, request, bulk)
    }

    /// Called once when a peer's connection to this target closes.
    fn disconnected(&self, _peer: &Peer) {}

    /// Called once, instead of [`Handler::disconnected`], when the server evicts the peer
    /// (silent past the eviction timeout, see [`crate::session`]): what it held is to be
    /// released at once, not kept for its return. The default treats it as a disconnect.
    fn evicted(&self, peer: &Peer) {
        self.disconnected(peer);
    }

    /// Counters particular to this target, reported with its operation statistics.
    fn counters(&self) -> Vec<weft_proto::handshake::Counter> {
        Vec::new()
    }
}

/// A request as it leaves the transport: opcode, raw body and bulk.
#[derive(Debug)]
pub struct RawRequest {
    /// Opcode from the frame header.
    pub opcode: u16,
    /// Encoded body.
    pub body: Bytes,
    /// Bulk payload, checksum already verified.
    pub bulk: Bytes,
}

/// A reply ready for the transport: encoded `WireResult` body and bulk.
#[derive(Debug)]
pub struct RawReply {
    /// Encoded `WireResult<Reply>`.
    pub body: Vec<u8>,
    /// Bulk payload.
    pub bulk: Bytes,
}

/// The object-safe face of a target, as the [`crate::Router`] sees it.
pub trait Service: Send + Sync + 'static {
    /// Which target this is.
    fn target(&self) -> TargetId;
    /// The target's UUID, returned in the handshake.
    fn uuid(&self) -> Uuid;
    /// Handles one raw request.
    fn dispatch(
        self: Arc<Self>,
        peer: Arc<Peer>,
        request: RawRequest,
    ) -> BoxFuture<'static, RawReply>;
    /// A snapshot of per-operation statistics.
    fn stats(&self) -> ServiceStats;
    /// Called once when a peer's connection closes.
    fn disconnected(&self, peer: &Peer);
    /// Called once, instead of [`Service::disconnected`], when the peer is evicted.
    fn evicted(&self, peer: &Peer);
}

/// Adapts a typed [`Handler`] to [`Service`]: decodes bodies, checks opcodes, counts
/// operations and latencies, encodes replies.
pub struct TypedService<H> {
    target: TargetId,
    uuid: Uuid,
    handler: Arc<H>,
    stats: OpStatsTable,
    jobs: JobStatsTable,
    /// Peers evicted from this target.
    evictions: std::sync::atomic::AtomicU64,
}

impl<H: Handler> TypedService<H> {
    /// Wraps `handler` as the service of `target`.
    pub fn new(target: TargetId, uuid: Uuid, handler: Arc<H>) -> Arc<Self> {
        Arc::new(Self {
            target,
            uuid,
            handler,
            stats: OpStatsTable::default(),
            jobs: JobStatsTable::default(),
            evictions: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// The wrapped handler.
    pub fn handler(&self) -> &Arc<H> {
        &self.handler
    }
}

/// Encodes a reply; a reply too large to encode becomes an error reply instead.
pub fn encode_reply<T: Serialize>(result: &WireResult<T>) -> Vec<u8> {
    match weft_proto::encode(result) {
        Ok(body) => body,
        Err(e) => {
            let err: WireResult<()> = Err(WireError::new(
                Errno::Overflow,
                format!("reply not encodable: {e}"),
            ));
            // A bare error always encodes: it is a few dozen bytes.
            weft_proto::encode(&err).unwrap_or_default()
        }
    }
}

impl<H: Handler> Service for TypedService<H> {
    fn target(&self) -> TargetId {
        self.target
    }

    fn uuid(&self) -> Uuid {
        self.uuid
    }

    fn dispatch(
        self: Arc<Self>,
        peer: Arc<Peer>,
        request: RawRequest,
    ) -> BoxFuture<'static, RawReply> {
        Box::pin(async move {
            let start = Instant::now();
            let bulk_in = request.bulk.len() as u64;
            let decoded: Result<(weft_proto::RequestHeader, H::Request), _> =
                weft_proto::decode(&request.body);
            let mut jobid = None;
            let (name, result) = match decoded {
                Err(e) => (
                    "malformed",
                    Err(WireError::new(Errno::Proto, e.to_string())),
                ),
                Ok((_, msg)) if msg.opcode() != request.opcode => (
                    "malformed",
                    Err(WireError::new(
                        Errno::Proto,
                        format!(
                            "header opcode {} does not match body opcode {}",
                            request.opcode,
                            msg.opcode()
                        ),
                    )),
                ),
                Ok((_, msg)) if msg.server_only() && !peer.auth.is_server() => {
                    crate::auth::COUNTERS
                        .server_only_refused
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    tracing::warn!(peer = %peer.addr, target = %self.target, op = msg.op_name(), "server-only request from a client refused");
                    (
                        msg.op_name(),
                        Err(WireError::new(
                            Errno::Perm,
                            format!("{} is reserved for servers", msg.op_name()),
                        )),
                    )
                }
                Ok((header, mut msg)) => {
                    let name = msg.op_name();
                    match crate::nodemap::check(&peer, &mut msg) {
                        Err(e) => (name, Err(e)),
                        Ok(()) => {
                            let ctx = crate::RequestContext::from_header(&header);
                            jobid = header.jobid;
                            let handled = self.handler.handle_in(&ctx, &peer, msg, request.bulk);
                            (name, handled.await)
                        }
                    }
                }
            };
            let failed = result.is_err();
            let (body, bulk) = match result {
                Ok((reply, bulk)) => (encode_reply::<H::Reply>(&Ok(reply)), bulk),
                Err(e) => {
                    tracing::debug!(target = %self.target, op = name, error = %e, "request failed");
                    (encode_reply::<H::Reply>(&Err(e)), Bytes::new())
                }
            };
            let elapsed = start.elapsed();
            let bulk_bytes = bulk_in + bulk.len() as u64;
            self.stats.record(name, elapsed, failed, bulk_bytes);
            if let Some(job) = jobid {
                self.jobs.record(&job, name, elapsed, failed, bulk_bytes);
            }
            RawReply { body, bulk }
        })
    }

    fn stats(&self) -> ServiceStats {
        ServiceStats {
            target: Some(self.target),
            ops: self.stats.snapshot(),
            counters: {
                let mut c = self.handler.counters();
                c.push(weft_proto::handshake::Counter {
                    name: "job_cleanup_interval".into(),
                    value: crate::stats::job_cleanup_interval(),
                });
                c.push(weft_proto::handshake::Counter {
                    name: "evictions".into(),
                    value: self.evictions.load(std::sync::atomic::Ordering::Relaxed),
                });
                c
            },
            jobs: self.jobs.snapshot(),
        }
    }

    fn disconnected(&self, peer: &Peer) {
        self.handler.disconnected(peer);
    }

    fn evicted(&self, peer: &Peer) {
        self.evictions
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.handler.evicted(peer);
    }
}

/// Serves one request of a connected peer: the transport's own opcodes here, the rest by
/// the service. Returns the encoded reply body and the reply bulk.
pub(crate) async fn answer_raw(
    service: Arc<dyn Service>,
    peer: Arc<Peer>,
    op: u16,
    body: Bytes,
    bulk: Bytes,
) -> (Vec<u8>, Bytes) {
    match op {
        opcode::PING => (encode_reply(&Ok(())), Bytes::new()),
        opcode::STATS => (encode_reply(&Ok(service.stats())), Bytes::new()),
        opcode::CONNECT => (
            encode_reply::<()>(&Err(WireError::new(Errno::Proto, "already connected"))),
            Bytes::new(),
        ),
        op => {
            let reply = service
                .dispatch(
                    peer,
                    RawRequest {
                        opcode: op,
                        body,
                        bulk,
                    },
                )
                .await;
            (reply.body, reply.bulk)
        }
    }
}
