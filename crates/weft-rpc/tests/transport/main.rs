//! The transport against a real TCP server on loopback: concurrency, bulk integrity,
//! callbacks, handshake refusals and hostile input.

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

#[tokio::test]
async fn many_concurrent_requests_share_one_connection() {
    let (_server, addr) = start().await;
    let conn = Arc::new(connect(&addr, None).await);
    let mut tasks = Vec::new();
    for i in 0..200u32 {
        let conn = conn.clone();
        tasks.push(tokio::spawn(async move {
            // Replies arrive out of order (different sleeps); each must match its request.
            if i % 10 == 0 {
                let (s, _): (String, Bytes) = conn
                    .call(&EchoRequest::Sleep(u64::from(i % 30)), Bytes::new())
                    .await
                    .unwrap();
                assert_eq!(s, format!("slept {}", i % 30));
            } else {
                let (s, _): (String, Bytes) = conn
                    .call(&EchoRequest::Echo(i.to_string()), Bytes::new())
                    .await
                    .unwrap();
                assert_eq!(s, i.to_string());
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let stats = conn.stats().await.unwrap();
    let total: u64 = stats.ops.iter().map(|o| o.count).sum();
    assert_eq!(total, 200);
}

#[tokio::test]
async fn bulk_data_arrives_intact_both_ways() {
    let (_server, addr) = start().await;
    let conn = connect(&addr, None).await;
    let data: Vec<u8> = (0..(8 << 20))
        .map(|i: u32| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let (_, back): (String, Bytes) = conn
        .call(&EchoRequest::Reverse, Bytes::from(data.clone()))
        .await
        .unwrap();
    let mut expect = data;
    expect.reverse();
    assert_eq!(back.len(), expect.len());
    assert!(back == expect);
}

#[tokio::test]
async fn remote_errors_carry_their_errno() {
    let (_server, addr) = start().await;
    let conn = connect(&addr, None).await;
    let err = conn
        .call::<_, String>(&EchoRequest::Echo("fail".into()), Bytes::new())
        .await
        .unwrap_err();
    assert_eq!(err.errno(), Errno::NoEnt);
    // The connection still works afterwards.
    conn.ping().await.unwrap();
}

#[derive(Default)]
struct CountCallbacks(AtomicUsize);
impl CallbackHandler for CountCallbacks {
    fn on_callback(&self, opcode: u16, _body: &[u8]) {
        assert_eq!(opcode, 900);
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[tokio::test]
async fn server_callbacks_reach_the_client_on_the_same_connection() {
    let (_server, addr) = start().await;
    let counter = Arc::new(CountCallbacks::default());
    let conn = connect(&addr, Some(counter.clone())).await;
    let _: (String, Bytes) = conn
        .call(&EchoRequest::Notify(5), Bytes::new())
        .await
        .unwrap();
    for _ in 0..100 {
        if counter.0.load(Ordering::SeqCst) == 5 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "callbacks did not arrive: {}",
        counter.0.load(Ordering::SeqCst)
    );
}

#[tokio::test]
async fn wrong_fsname_unknown_target_and_old_protocol_are_refused_clearly() {
    let (_server, addr) = start().await;
    let err = refused(&addr, &hello("other", TargetId::ost(0))).await;
    assert!(
        matches!(&err, RpcError::Handshake(e) if e.errno == Errno::Inval && e.message.contains("mismatch")),
        "{err}"
    );
    let err = refused(&addr, &hello(FS, TargetId::mdt(3))).await;
    assert!(
        matches!(&err, RpcError::Handshake(e) if e.errno == Errno::NoEnt),
        "{err}"
    );
    let mut old = hello(FS, TargetId::ost(0));
    old.protocol_version = 99;
    let err = refused(&addr, &old).await;
    assert!(
        matches!(&err, RpcError::Handshake(e) if e.errno == Errno::Proto),
        "{err}"
    );
}

#[tokio::test]
async fn unknown_opcodes_and_malformed_bodies_get_errors_and_the_connection_lives_on() {
    let (_server, addr) = start().await;
    let conn = connect(&addr, None).await;
    for (op, body) in [
        (4242u16, vec![1, 2, 3]),
        (900, vec![0xff; 40]),
        (
            901,
            weft_proto::encode(&EchoRequest::Echo("x".into())).unwrap(),
        ),
    ] {
        let frame = conn.call_raw(op, body, Bytes::new()).await.unwrap();
        let reply: WireResult<String> = weft_proto::decode(&frame.body).unwrap();
        assert_eq!(reply.unwrap_err().errno, Errno::Proto);
    }
    let (s, _): (String, Bytes) = conn
        .call(&EchoRequest::Echo("still here".into()), Bytes::new())
        .await
        .unwrap();
    assert_eq!(s, "still here");
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

#[tokio::test]
async fn hostile_frames_close_only_their_connection() {
    let (_server, addr) = start().await;
    let good = connect(&addr, None).await;

    // Random bytes instead of a handshake.
    let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
    s.write_all(&[0x42; 100]).await.unwrap();
    expect_closed(s).await;

    // A header announcing a body far over the limit: refused before any allocation.
    let mut s = raw_handshake(&addr).await;
    let mut h = FrameHeader::new(900, 0, 2, b"", b"").unwrap();
    h.body_len = MAX_BODY * 4;
    s.write_all(&h.encode()).await.unwrap();
    expect_closed(s).await;

    // A valid header whose body never comes: the client vanishes mid-request.
    let mut s = raw_handshake(&addr).await;
    let body = weft_proto::encode(&EchoRequest::Echo("half".into())).unwrap();
    let h = FrameHeader::new(900, 0, 2, &body, &[]).unwrap();
    s.write_all(&h.encode()).await.unwrap();
    s.write_all(&body[..2]).await.unwrap();
    drop(s);

    // A damaged bulk payload fails that request with EIO and nothing else.
    let mut s = raw_handshake(&addr).await;
    let body = weft_proto::encode(&EchoRequest::Reverse).unwrap();
    let h = FrameHeader::new(901, 0, 3, &body, b"abcdef").unwrap();
    s.write_all(&h.encode()).await.unwrap();
    s.write_all(&body).await.unwrap();
    s.write_all(b"abcdeX").await.unwrap();
    let mut hdr = [0u8; HEADER_LEN];
    s.read_exact(&mut hdr).await.unwrap();
    let rh = FrameHeader::decode(&hdr).unwrap();
    let mut rbody = vec![0u8; rh.body_len as usize];
    s.read_exact(&mut rbody).await.unwrap();
    let reply: WireResult<String> = weft_proto::decode(&rbody).unwrap();
    assert_eq!(reply.unwrap_err().errno, Errno::Io);

    // Through all of it, the well-behaved client is served.
    let (s, _): (String, Bytes) = good
        .call(&EchoRequest::Echo("fine".into()), Bytes::new())
        .await
        .unwrap();
    assert_eq!(s, "fine");
}

#[tokio::test]
async fn calls_fail_promptly_when_the_server_goes_away() {
    let (server, addr) = start().await;
    let conn = Arc::new(connect(&addr, None).await);
    let c2 = conn.clone();
    let slow = tokio::spawn(async move {
        c2.call::<_, String>(&EchoRequest::Sleep(10_000), Bytes::new())
            .await
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    server.shutdown().await;
    let err = tokio::time::timeout(Duration::from_secs(5), slow)
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    assert_eq!(err.errno(), Errno::Io);
    assert!(conn.is_closed());
}

#[tokio::test]
async fn only_servers_that_opt_in_are_called_in_process() {
    let (_plain, plain_addr) = start().await;
    assert!(!connect(&plain_addr, None).await.is_in_process());
    let (_server, addr) = start_in_process().await;
    let conn = connect(&addr, None).await;
    assert!(conn.is_in_process());
    // A transport that may change the bytes on their way always uses the stream.
    struct Plain;
    impl weft_rpc::Transport for Plain {
        fn connect<'a>(
            &'a self,
            addr: &'a str,
        ) -> weft_rpc::service::BoxFuture<
            'a,
            std::io::Result<(
                weft_rpc::transport::BoxRead,
                weft_rpc::transport::BoxWrite,
                std::net::SocketAddr,
            )>,
        > {
            TcpTransport.connect(addr)
        }
    }
    let streamed = Connection::connect(
        &Plain,
        &addr,
        &hello(FS, TargetId::ost(0)),
        None,
        &ClientOptions::default(),
    )
    .await
    .unwrap();
    assert!(!streamed.is_in_process());
    assert_eq!(echo(&streamed, "streamed").await, "streamed");
}

/// What the echo service answers to `s` on `conn`.
async fn echo(conn: &Connection, s: &str) -> String {
    let (echo, _): (String, Bytes) = conn
        .call(&EchoRequest::Echo(s.into()), Bytes::new())
        .await
        .unwrap();
    echo
}

#[tokio::test]
async fn in_process_calls_carry_bodies_bulk_errors_and_statistics() {
    let (_server, addr) = start_in_process().await;
    let conn = connect(&addr, None).await;
    let bulk = Bytes::from((0..300_000u32).map(|i| i as u8).collect::<Vec<u8>>());
    let (echo, back): (String, Bytes) = conn
        .call(&EchoRequest::Echo("hi".into()), bulk.clone())
        .await
        .unwrap();
    assert_eq!((echo.as_str(), &back), ("hi", &bulk));
    // The server gets bulk on a page boundary, as from a socket, even from an unaligned
    // slice (the echo hands back the very buffer it got).
    let unaligned = bulk.slice(1..);
    let (_, back): (String, Bytes) = conn
        .call(&EchoRequest::Echo("hi".into()), unaligned.clone())
        .await
        .unwrap();
    assert_eq!(back, unaligned);
    assert!((back.as_ptr() as usize).is_multiple_of(weft_proto::frame::BULK_ALIGN));
    let (_, reversed): (String, Bytes) = conn
        .call(&EchoRequest::Reverse, Bytes::from_static(b"abc"))
        .await
        .unwrap();
    assert_eq!(&reversed[..], b"cba");
    let err = conn
        .call::<_, String>(&EchoRequest::Echo("fail".into()), Bytes::new())
        .await
        .unwrap_err();
    assert!(
        matches!(err, RpcError::Remote(ref e) if e.errno == Errno::NoEnt),
        "{err:?}"
    );
    conn.ping().await.unwrap();
    let stats = conn.stats().await.unwrap();
    let echo = stats.ops.iter().find(|o| o.name == "echo").unwrap();
    assert_eq!((echo.count, echo.errors), (3, 1));
    assert_eq!(echo.bulk_bytes, 2 * (2 * bulk.len() as u64 - 1));
}

#[tokio::test]
async fn in_process_handshakes_are_checked_like_socket_ones() {
    let (_server, addr) = start_in_process().await;
    let e = refused(&addr, &hello("otherfs", TargetId::ost(0))).await;
    assert!(
        matches!(e, RpcError::Handshake(ref w) if w.errno == Errno::Inval),
        "{e:?}"
    );
    let e = refused(&addr, &hello(FS, TargetId::ost(7))).await;
    assert!(
        matches!(e, RpcError::Handshake(ref w) if w.errno == Errno::NoEnt),
        "{e:?}"
    );
    let mut old = hello(FS, TargetId::ost(0));
    old.protocol_version = PROTOCOL_VERSION + 1;
    let e = refused(&addr, &old).await;
    assert!(
        matches!(e, RpcError::Handshake(ref w) if w.errno == Errno::Proto),
        "{e:?}"
    );
}

#[tokio::test]
async fn callbacks_reach_an_in_process_client() {
    let (_server, addr) = start_in_process().await;
    let counter = Arc::new(CountCallbacks::default());
    let conn = connect(&addr, Some(counter.clone())).await;
    assert!(conn.is_in_process());
    let _: (String, Bytes) = conn
        .call(&EchoRequest::Notify(5), Bytes::new())
        .await
        .unwrap();
    for _ in 0..200 {
        if counter.0.load(Ordering::SeqCst) == 5 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "{} callbacks of 5 arrived",
        counter.0.load(Ordering::SeqCst)
    );
}

#[tokio::test]
async fn an_in_process_request_its_caller_gave_up_on_runs_to_its_end() {
    let (_server, addr) = start_in_process().await;
    let conn = connect(&addr, None).await;
    let e = conn
        .call_with_timeout::<_, String>(
            &EchoRequest::Sleep(300),
            Bytes::new(),
            Duration::from_millis(20),
        )
        .await
        .unwrap_err();
    assert!(matches!(e, RpcError::TimedOut(_)), "{e:?}");
    // The server counts a request when it ends: the abandoned sleep still ends.
    for _ in 0..100 {
        let stats = conn.stats().await.unwrap();
        if stats.ops.iter().any(|o| o.name == "sleep" && o.count == 1) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the abandoned request never finished");
}

#[tokio::test]
async fn in_process_connections_close_when_their_server_stops() {
    let (server, addr) = start_in_process().await;
    let conn = connect(&addr, None).await;
    assert!(conn.is_in_process());
    server.shutdown().await;
    assert!(conn.is_closed());
    let e = conn
        .call::<_, String>(&EchoRequest::Echo("late".into()), Bytes::new())
        .await
        .unwrap_err();
    assert!(matches!(e, RpcError::Closed), "{e:?}");
    // Nothing listens any more: a new connection goes to the socket and is refused.
    let e = refused(&addr, &hello(FS, TargetId::ost(0))).await;
    assert!(matches!(e, RpcError::Io { .. }), "{e:?}");
}

#[tokio::test]
async fn the_in_process_path_is_taken_only_through_the_list_given_to_both_ends() {
    use weft_rpc::{LocalServers, Tcp};
    let local = LocalServers::new();
    let (_server, addr) = start_with(ServerOptions {
        local_servers: Some(local.clone()),
        ..ServerOptions::default()
    })
    .await;
    let direct = connect_through(&Tcp::with_local(local), &addr, None).await;
    assert!(direct.is_in_process());
    // Sockets when asked for, through another list, or with plain TCP.
    for transport in [
        Box::new(Tcp::sockets()) as Box<dyn weft_rpc::Transport>,
        Box::new(Tcp::with_local(LocalServers::new())),
        Box::new(TcpTransport),
    ] {
        let conn = connect_through(transport.as_ref(), &addr, None).await;
        assert!(!conn.is_in_process());
        assert_eq!(echo(&conn, "s").await, "s");
    }
    assert_eq!(echo(&direct, "d").await, "d");
}

/// The job id and resend numbers a caller passes to `call_in` reach the handler through
/// the request's header, over a socket and in-process alike, with no task-local state;
/// the plain `call` sends none.
#[tokio::test]
async fn the_callers_context_reaches_the_handler() {
    let (_sock_server, sock_addr) = start().await;
    let (_local_server, local_addr) = start_in_process().await;
    let ctx = RequestContext::new()
        .for_job(Some("train.7".into()))
        .numbered(42, 40);
    for addr in [&sock_addr, &local_addr] {
        let conn = connect(addr, None).await;
        let (seen, _): (String, _) = conn
            .call_in(&ctx, &EchoRequest::Context, Bytes::new())
            .await
            .unwrap();
        assert_eq!(seen, r#"Some("train.7") 42 40"#, "{addr}");
        let (seen, _): (String, _) = conn
            .call(&EchoRequest::Context, Bytes::new())
            .await
            .unwrap();
        assert_eq!(seen, "None 0 0", "{addr}");
    }
}

/// Eviction (see `weft_rpc::session`): a connected client pings, so a server with a short
/// eviction timeout keeps it however long it idles; a peer that stays silent is evicted
/// (its connection closed, the target counting it), and its node's next connection is told
/// so, once; a `Reconnecting` told so refuses, before sending, a request carrying content
/// of the epoch before the eviction, and sends everything else.
#[tokio::test]
async fn silent_peers_are_evicted_and_their_node_refuses_its_older_content() {
    let (_server, addr) = start_with(ServerOptions {
        evict_timeout: Some(Duration::from_millis(400)),
        ..ServerOptions::default()
    })
    .await;
    let live = connect(&addr, None).await;
    assert_eq!(live.connect_reply().evict_timeout_ms, 400);
    assert!(!live.connect_reply().evicted);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(echo(&live, "idle but alive").await, "idle but alive");

    let mut node = hello(FS, TargetId::ost(0));
    let silent = raw_handshake_as(&addr, &node).await;
    expect_closed_within(silent, Duration::from_secs(5)).await;
    let evictions = |s: &weft_proto::handshake::ServiceStats| {
        s.counters
            .iter()
            .find(|c| c.name == "evictions")
            .map(|c| c.value)
    };
    assert_eq!(evictions(&live.stats().await.unwrap()), Some(1));

    let session = Arc::new(weft_rpc::ClientSession::new());
    let before = RequestContext::new().in_epoch(session.epoch());
    let back = weft_rpc::Reconnecting::new(
        Arc::new(transport()),
        addr.clone(),
        node.clone(),
        None,
        ClientOptions::default(),
    )
    .with_session(session.clone());
    let stale: Result<(String, Bytes), _> = back
        .call_in(&before, &EchoRequest::Echo("stale".into()), Bytes::new())
        .await;
    assert!(matches!(stale, Err(RpcError::Evicted)), "{stale:?}");
    assert_eq!(session.epoch(), 1);
    let fresh = RequestContext::new().in_epoch(session.epoch());
    let (s, _): (String, _) = back
        .call_in(&fresh, &EchoRequest::Echo("fresh".into()), Bytes::new())
        .await
        .unwrap();
    assert_eq!(s, "fresh");
    let (s, _): (String, _) = back
        .call(&EchoRequest::Echo("unbound".into()), Bytes::new())
        .await
        .unwrap();
    assert_eq!(s, "unbound");

    // Told once: the node's next connection starts clean; another node never was.
    let again = Connection::connect(&transport(), &addr, &node, None, &ClientOptions::default())
        .await
        .unwrap();
    assert!(!again.connect_reply().evicted);
    node.client_uuid = Uuid::new_v4();
    let other = Connection::connect(&transport(), &addr, &node, None, &ClientOptions::default())
        .await
        .unwrap();
    assert!(!other.connect_reply().evicted);
}

/// Failover: a target served from several addresses. A new connection tries them in turn
/// from the one that answered last, so a client whose server died reaches the failover
/// server without being told; a dead address is skipped, and a new list resets the order.
#[tokio::test]
async fn a_reconnecting_client_tries_each_address_of_its_target() {
    let dead = {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap().to_string()
    };
    let (first, first_addr) = start().await;
    let (_second, second_addr) = start().await;
    let conn = Reconnecting::new(
        Arc::new(transport()),
        dead.clone(),
        hello(FS, TargetId::ost(0)),
        None,
        ClientOptions::default(),
    );
    conn.set_addresses(vec![dead.clone(), first_addr.clone(), second_addr.clone()]);
    let echo = || async {
        conn.call::<_, String>(&EchoRequest::Echo("hi".into()), Bytes::new())
            .await
            .map(|(s, _)| s)
    };
    assert_eq!(echo().await.unwrap(), "hi");
    assert_eq!(conn.address(), first_addr, "the dead address is skipped");
    assert_eq!(
        conn.addresses(),
        vec![first_addr.clone(), second_addr.clone(), dead.clone()]
    );

    // The server dies: a call on the broken connection fails in a way worth resending (if
    // the connection was not seen closed before it), the next one reaches the other server.
    first.shutdown().await;
    if let Err(e) = echo().await {
        assert!(e.is_worth_resending(), "{e}");
    }
    assert_eq!(echo().await.unwrap(), "hi");
    assert_eq!(conn.address(), second_addr);

    // A new list (a configuration naming another order) starts from its first address.
    conn.set_addresses(vec![dead.clone(), second_addr.clone()]);
    assert_eq!(conn.address(), dead);
    // The same list again changes nothing.
    conn.set_addresses(vec![dead.clone(), second_addr.clone()]);
    assert_eq!(conn.addresses(), vec![dead.clone(), second_addr.clone()]);

    // A refusal another server could not cure ends the search at once.
    let wrong = Reconnecting::new(
        Arc::new(transport()),
        second_addr.clone(),
        hello("other", TargetId::ost(0)),
        None,
        ClientOptions::default(),
    );
    wrong.set_addresses(vec![second_addr.clone(), dead.clone()]);
    let err = wrong.connection().await.err().unwrap();
    assert!(matches!(err, RpcError::Handshake(_)), "{err}");
    assert_eq!(wrong.address(), second_addr);
}

/// A silent connection of a node that has another connection open to the same target is
/// one the node gave up (its side died in a partition), not the node gone silent: it is
/// closed like a broken connection, not counted as an eviction, and the node is not told.
#[tokio::test]
async fn a_silent_connection_of_a_node_connected_again_is_not_an_eviction() {
    let (_server, addr) = start_with(ServerOptions {
        evict_timeout: Some(Duration::from_millis(400)),
        ..ServerOptions::default()
    })
    .await;
    let node = hello(FS, TargetId::ost(0));
    let live = Connection::connect(&transport(), &addr, &node, None, &ClientOptions::default())
        .await
        .unwrap();
    let given_up = raw_handshake_as(&addr, &node).await;
    expect_closed_within(given_up, Duration::from_secs(5)).await;
    let stats = live.stats().await.unwrap();
    let evictions = stats.counters.iter().find(|c| c.name == "evictions");
    assert_eq!(evictions.map(|c| c.value), Some(0));
    assert_eq!(echo(&live, "still here").await, "still here");
    let again = Connection::connect(&transport(), &addr, &node, None, &ClientOptions::default())
        .await
        .unwrap();
    assert!(!again.connect_reply().evicted);
}
