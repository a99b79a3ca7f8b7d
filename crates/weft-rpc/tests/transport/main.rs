//! The transport against a real TCP server on loopback: concurrency, bulk integrity,
//! callbacks, handshake refusals and hostile input.
//!
//! This file holds the echo service the tests run and their helpers; the tests are in
//! `socket.rs` (over TCP), `in_process.rs` (servers called directly) and
//! `eviction.rs` (silent peers, failover addresses).

#![allow(clippy::unwrap_used, clippy::expect_used)]
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use uuid::Uuid;
use weft_proto::frame::{FrameHeader, HEADER_LEN, MAX_BODY};
use weft_proto::handshake::opcode;
use weft_proto::{
    ConnectRequest, Errno, Message, PROTOCOL_VERSION, TargetId, WireError, WireResult,
};
use weft_rpc::service::Peer;
use weft_rpc::{
    CallbackHandler, ClientOptions, Connection, Handler, Reconnecting, RequestContext, Router,
    RpcError, Server, ServerOptions, TcpTransport, TypedService,
};

#[derive(Debug, Serialize, Deserialize)]
enum EchoRequest {
    Echo(String),
    Reverse,
    Sleep(u64),
    Notify(u32),
    /// Answered with the request's context as the handler sees it.
    Context,
}

impl Message for EchoRequest {
    fn opcode(&self) -> u16 {
        match self {
            EchoRequest::Echo(_) => 900,
            EchoRequest::Reverse => 901,
            EchoRequest::Sleep(_) => 902,
            EchoRequest::Notify(_) => 903,
            EchoRequest::Context => 904,
        }
    }
    fn op_name(&self) -> &'static str {
        match self {
            EchoRequest::Echo(_) => "echo",
            EchoRequest::Reverse => "reverse",
            EchoRequest::Sleep(_) => "sleep",
            EchoRequest::Notify(_) => "notify",
            EchoRequest::Context => "context",
        }
    }
}

struct Echo;

impl Handler for Echo {
    type Request = EchoRequest;
    type Reply = String;

    async fn handle_in(
        &self,
        ctx: &RequestContext,
        peer: &Peer,
        request: EchoRequest,
        bulk: Bytes,
    ) -> WireResult<(String, Bytes)> {
        match request {
            EchoRequest::Context => Ok((
                format!("{:?} {} {}", ctx.jobid(), ctx.seq, ctx.acked),
                Bytes::new(),
            )),
            request => self.handle(peer, request, bulk).await,
        }
    }

    async fn handle(
        &self,
        peer: &Peer,
        request: EchoRequest,
        bulk: Bytes,
    ) -> WireResult<(String, Bytes)> {
        match request {
            EchoRequest::Echo(s) if s == "fail" => {
                Err(WireError::new(Errno::NoEnt, "asked to fail"))
            }
            EchoRequest::Echo(s) => Ok((s, bulk)),
            EchoRequest::Reverse => {
                let mut v = bulk.to_vec();
                v.reverse();
                Ok((String::new(), Bytes::from(v)))
            }
            EchoRequest::Sleep(ms) => {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                Ok((format!("slept {ms}"), Bytes::new()))
            }
            EchoRequest::Context => Err(WireError::new(Errno::Inval, "context without context")),
            EchoRequest::Notify(n) => {
                for i in 0..n {
                    peer.callbacks
                        .notify(&EchoRequest::Echo(format!("cb{i}")))
                        .map_err(WireError::from)?;
                }
                Ok((String::new(), Bytes::new()))
            }
        }
    }
}

const FS: &str = "testfs";

async fn start() -> (Server, String) {
    start_with(ServerOptions::default()).await
}

async fn start_with(opts: ServerOptions) -> (Server, String) {
    let router = Router::new(FS);
    router.add(TypedService::new(
        TargetId::ost(0),
        Uuid::new_v4(),
        Arc::new(Echo),
    ));
    let server = Server::bind("127.0.0.1:0", router, opts).await.unwrap();
    let addr = server.local_addr().to_string();
    (server, addr)
}

/// The servers of these tests that their clients call directly ([`start_in_process`]).
static LOCAL: std::sync::LazyLock<weft_rpc::LocalServers> =
    std::sync::LazyLock::new(weft_rpc::LocalServers::new);

/// The transport of these tests' clients: TCP, calling the servers in [`LOCAL`] directly.
fn transport() -> weft_rpc::Tcp {
    weft_rpc::Tcp::with_local(LOCAL.clone())
}

/// A server that clients of this process call directly.
async fn start_in_process() -> (Server, String) {
    start_with(ServerOptions {
        local_servers: Some(LOCAL.clone()),
        ..ServerOptions::default()
    })
    .await
}

fn hello(fsname: &str, target: TargetId) -> ConnectRequest {
    ConnectRequest {
        fsname: fsname.into(),
        client_uuid: Uuid::new_v4(),
        protocol_version: PROTOCOL_VERSION,
        features: u64::MAX,
        target,
    }
}

async fn connect(addr: &str, cb: Option<Arc<dyn CallbackHandler>>) -> Connection {
    connect_through(&transport(), addr, cb).await
}

/// Connects to `addr` through `transport`.
async fn connect_through(
    transport: &dyn weft_rpc::Transport,
    addr: &str,
    cb: Option<Arc<dyn CallbackHandler>>,
) -> Connection {
    Connection::connect(
        transport,
        addr,
        &hello(FS, TargetId::ost(0)),
        cb,
        &ClientOptions::default(),
    )
    .await
    .unwrap()
}

/// The error of a connection to `addr` with `hello` that must fail.
async fn refused(addr: &str, hello: &ConnectRequest) -> RpcError {
    Connection::connect(&transport(), addr, hello, None, &ClientOptions::default())
        .await
        .err()
        .unwrap()
}

#[derive(Default)]
struct CountCallbacks(AtomicUsize);
impl CallbackHandler for CountCallbacks {
    fn on_callback(&self, opcode: u16, _body: &[u8]) {
        assert_eq!(opcode, 900);
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

async fn raw_handshake(addr: &str) -> tokio::net::TcpStream {
    raw_handshake_as(addr, &hello(FS, TargetId::ost(0))).await
}

/// Connects a raw socket with `hello` and reads the answer: a peer that sends only what
/// the test writes (no pings).
async fn raw_handshake_as(addr: &str, hello: &ConnectRequest) -> tokio::net::TcpStream {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let body = weft_proto::encode(hello).unwrap();
    let h = FrameHeader::new(opcode::CONNECT, 0, 1, &body, &[]).unwrap();
    s.write_all(&h.encode()).await.unwrap();
    s.write_all(&body).await.unwrap();
    let mut hdr = [0u8; HEADER_LEN];
    s.read_exact(&mut hdr).await.unwrap();
    let h = FrameHeader::decode(&hdr).unwrap();
    let mut body = vec![0u8; h.body_len as usize];
    s.read_exact(&mut body).await.unwrap();
    s
}

/// Reads until the server closes the stream; fails if it does not within two seconds.
async fn expect_closed(s: tokio::net::TcpStream) {
    expect_closed_within(s, Duration::from_secs(2)).await;
}

/// Reads until the server closes the stream; fails if it does not within `limit`.
async fn expect_closed_within(mut s: tokio::net::TcpStream, limit: Duration) {
    let mut buf = [0u8; 1024];
    let closed = tokio::time::timeout(limit, async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => continue,
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "server kept a hostile connection open");
}

/// What the echo service answers to `s` on `conn`.
async fn echo(conn: &Connection, s: &str) -> String {
    let (echo, _): (String, Bytes) = conn
        .call(&EchoRequest::Echo(s.into()), Bytes::new())
        .await
        .unwrap();
    echo
}

mod eviction;
mod in_process;
mod socket;
