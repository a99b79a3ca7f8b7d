//! The connection handshake, both ends, driven by an arbitrary peer.
//!
//! **Server side.** A real [`weft_rpc::Server`] listens on loopback (one for the whole run,
//! serving an OST and the MGS target with a handler that refuses every request), once
//! without a cluster key and once with one. Each input opens a connection and sends what
//! it says: raw bytes (the framing itself), or frames the harness builds with valid
//! checksums from the input's opcodes, flags and bodies, optionally after the harness has
//! passed the HMAC challenge-response with the right key (so the fuzzer reaches the connect
//! request and the request loop of an authenticated connection), then half-closes. The
//! server's replies are read to the end: the server must close the connection within a
//! bound (a connection left open after its peer left is a hang).
//!
//! **Client side.** [`weft_rpc::Connection::connect`] over an in-memory transport whose
//! other end answers each frame the client sends with the next reply the input describes
//! (right or wrong xid, flags, bodies, callbacks), optionally with a valid server proof
//! for a client holding a key; after a connect that succeeds, a ping and a stats call. Time
//! is paused (tokio's clock advances only when nothing can run), so every timeout fires
//! without wall-clock waits.
//!
//! Nothing may panic, hang or allocate beyond the frame limits.

#![no_main]

use bytes::Bytes;
use hmac::{Hmac, KeyInit, Mac};
use libfuzzer_sys::fuzz_target;
use sha2::Sha256;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::runtime::Runtime;
use uuid::Uuid;
use weft_proto::frame::{FLAG_CALLBACK, FLAG_REPLY, FrameHeader};
use weft_proto::handshake::{
    AUTH_LEN, AuthChallenge, AuthHello, AuthProof, AuthRole, ConnectReply, opcode,
};
use weft_proto::ost::OstRequest;
use weft_proto::{ConnectRequest, Errno, PROTOCOL_VERSION, TargetId, WireError, WireResult};
use weft_rpc::transport::{BoxRead, BoxWrite, Connecting};
use weft_rpc::{
    ClientOptions, ClusterKey, Connection, Handler, Peer, Router, Server, ServerOptions, Transport,
    TypedService,
};

const FSNAME: &str = "fuzzfs";
/// The server key of the run (a fixed one: proofs must be computable by the harness).
const SERVER_KEY: &str =
    "weft-server-key 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n";
/// Longest a server may take to close a connection whose peer half-closed.
const SERVER_BOUND: Duration = Duration::from_secs(20);

/// Refuses every request (the handshake is what is fuzzed; the request loop still runs).
struct Refuse;

impl Handler for Refuse {
    type Request = OstRequest;
    type Reply = ();

    async fn handle(
        &self,
        _peer: &Peer,
        _request: OstRequest,
        _bulk: Bytes,
    ) -> WireResult<((), Bytes)> {
        Err(WireError::new(Errno::NoSys, "fuzz"))
    }
}

struct Servers {
    rt: Runtime,
    open: SocketAddr,
    keyed: SocketAddr,
    key: Arc<ClusterKey>,
    _servers: Vec<Server>,
}

fn key() -> ClusterKey {
    ClusterKey::parse(SERVER_KEY).unwrap_or_else(|e| panic!("the fixed key: {e}"))
}

fn servers() -> &'static Servers {
    static S: OnceLock<Servers> = OnceLock::new();
    S.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("runtime: {e}"));
        let key = Arc::new(key());
        let (servers, open, keyed) = rt.block_on(async {
            let mut out = Vec::new();
            let mut addrs = Vec::new();
            for k in [None, Some(key.clone())] {
                let router = Router::new(FSNAME);
                router.add(TypedService::new(
                    TargetId::ost(0),
                    Uuid::from_u128(1),
                    Arc::new(Refuse),
                ));
                router.add(TypedService::new(
                    TargetId::MGS,
                    Uuid::from_u128(2),
                    Arc::new(Refuse),
                ));
                let opts = ServerOptions {
                    handshake_timeout: Duration::from_secs(5),
                    key: k,
                    conn_budget_bytes: 8 << 20,
                    total_budget_bytes: 64 << 20,
                    conn_max_requests: 16,
                    ..ServerOptions::default()
                };
                let s = Server::bind("127.0.0.1:0", router, opts)
                    .await
                    .unwrap_or_else(|e| panic!("bind: {e}"));
                addrs.push(s.local_addr());
                out.push(s);
            }
            (out, addrs[0], addrs[1])
        });
        Servers {
            rt,
            open,
            keyed,
            key,
            _servers: servers,
        }
    })
}

/// Reads the input a piece at a time; runs out into zeros.
struct Input<'a>(&'a [u8]);

impl<'a> Input<'a> {
    fn byte(&mut self) -> u8 {
        let (b, rest) = self.0.split_first().map_or((0, &[][..]), |(b, r)| (*b, r));
        self.0 = rest;
        b
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.byte(), self.byte()])
    }
    fn take(&mut self, n: usize) -> &'a [u8] {
        let n = n.min(self.0.len());
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        a
    }
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// HMAC-SHA256 over length-prefixed parts, as `weft_rpc::auth` computes it.
fn mac(key: &[u8], parts: &[&[u8]]) -> [u8; AUTH_LEN] {
    let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(key).unwrap_or_else(|_| unreachable!());
    for p in parts {
        m.update(&(p.len() as u64).to_be_bytes());
        m.update(p);
    }
    m.finalize().into_bytes().into()
}

/// The secret a peer of `role` proves (the client key is derived from the server key).
fn secret(key: &ClusterKey, role: AuthRole) -> [u8; AUTH_LEN] {
    let text = match role {
        AuthRole::Server => key.to_text(),
        AuthRole::Client => key.client_text(),
    };
    let hex = text.split_whitespace().nth(1).unwrap_or_default();
    let mut out = [0u8; AUTH_LEN];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap_or_default();
    }
    out
}

/// A proof as `weft_rpc::auth::proof` makes it (`server`: the server's label).
fn proof(
    secret: &[u8; AUTH_LEN],
    server: bool,
    hello: &AuthHello,
    server_nonce: &[u8; AUTH_LEN],
) -> [u8; AUTH_LEN] {
    let label: &[u8] = if server {
        b"weft auth v1 server proof"
    } else {
        b"weft auth v1 peer proof"
    };
    let role: &[u8] = match hello.role {
        AuthRole::Client => b"client",
        AuthRole::Server => b"server",
    };
    mac(
        secret,
        &[
            label,
            role,
            hello.fsname.as_bytes(),
            hello.client_uuid.as_bytes(),
            &hello.protocol_version.to_be_bytes(),
            &hello.nonce,
            server_nonce,
        ],
    )
}

/// A frame with valid checksums.
fn frame(op: u16, flags: u16, xid: u64, body: &[u8], bulk: &[u8]) -> Vec<u8> {
    let Ok(h) = FrameHeader::new(op, flags, xid, body, bulk) else {
        return Vec::new();
    };
    let mut out = h.encode().to_vec();
    out.extend_from_slice(body);
    out.extend_from_slice(bulk);
    out
}

/// The opcodes worth trying most: the handshake's, then any.
fn pick_opcode(input: &mut Input<'_>) -> u16 {
    match input.byte() % 8 {
        0 | 1 => opcode::CONNECT,
        2 => opcode::AUTH_HELLO,
        3 => opcode::AUTH_PROOF,
        4 => opcode::PING,
        5 => opcode::STATS,
        _ => input.u16(),
    }
}

/// A connect request the server accepts, mostly.
fn connect_request(input: &mut Input<'_>, hello: Option<&AuthHello>) -> Vec<u8> {
    let c = ConnectRequest {
        fsname: hello.map_or(FSNAME.into(), |h| h.fsname.clone()),
        client_uuid: hello.map_or(Uuid::from_u128(7), |h| h.client_uuid),
        protocol_version: hello.map_or(PROTOCOL_VERSION, |h| h.protocol_version),
        features: u64::from(input.byte()),
        target: if input.byte() & 1 == 0 {
            TargetId::ost(0)
        } else {
            TargetId::MGS
        },
    };
    weft_proto::encode(&c).unwrap_or_default()
}

/// Frames described by the rest of the input: opcode, flags, xid, a body that is raw
/// input or a well-formed connect request, and a short bulk.
fn frames_from(input: &mut Input<'_>, hello: Option<&AuthHello>) -> Vec<u8> {
    let mut out = Vec::new();
    for xid in 1..=16u64 {
        if input.is_empty() {
            break;
        }
        let op = pick_opcode(input);
        let ctl = input.byte();
        let flags = if ctl & 0x80 != 0 {
            u16::from(ctl & 0x07)
        } else {
            0
        };
        let body = if op == opcode::CONNECT && ctl & 0x40 == 0 {
            connect_request(input, hello)
        } else {
            let n = usize::from(input.u16() % 512);
            input.take(n).to_vec()
        };
        let bulk = if ctl & 0x20 != 0 {
            input.take(usize::from(input_len(ctl))).to_vec()
        } else {
            Vec::new()
        };
        out.extend(frame(op, flags, xid, &body, &bulk));
    }
    out
}

/// The bulk length a frame's control byte asks for (at most 31 bytes).
fn input_len(ctl: u8) -> u8 {
    ctl & 0x1f
}

/// Reads every frame the server sends until it closes (the caller bounds the wait).
async fn drain(r: &mut tokio::net::tcp::OwnedReadHalf) -> Vec<weft_rpc::conn::InFrame> {
    let mut frames = Vec::new();
    loop {
        match weft_rpc::conn::read_header(&mut *r).await {
            Ok(Some(h)) => match weft_rpc::conn::read_payload(&mut *r, h).await {
                Ok(f) => frames.push(f),
                Err(_) => break,
            },
            _ => break,
        }
    }
    // Whatever follows a bad frame, up to the close.
    let mut sink = [0u8; 4096];
    while matches!(r.read(&mut sink).await, Ok(n) if n > 0) {}
    frames
}

/// Reads one reply frame (for the harness's own authentication).
async fn one_frame(r: &mut tokio::net::tcp::OwnedReadHalf) -> Option<weft_rpc::conn::InFrame> {
    let h = weft_rpc::conn::read_header(&mut *r).await.ok()??;
    weft_rpc::conn::read_payload(&mut *r, h).await.ok()
}

async fn server_side(s: &Servers, mode: u8, input: &mut Input<'_>) {
    let keyed = mode & 0x02 != 0;
    let addr = if keyed { s.keyed } else { s.open };
    let Ok(stream) = tokio::net::TcpStream::connect(addr).await else {
        return;
    };
    let (mut r, mut w) = stream.into_split();
    let mut hello_sent = None;
    if mode & 0x04 != 0 {
        // The harness authenticates, right or (as the input says) subtly wrong.
        let ctl = input.byte();
        let role = if ctl & 1 == 0 {
            AuthRole::Client
        } else {
            AuthRole::Server
        };
        let mut nonce = [0u8; AUTH_LEN];
        nonce[..8].copy_from_slice(&u64::from(input.u16()).to_le_bytes());
        let hello = AuthHello {
            role,
            fsname: if ctl & 2 == 0 {
                FSNAME.into()
            } else {
                String::from_utf8_lossy(input.take(12)).into_owned()
            },
            client_uuid: Uuid::from_u128(u128::from(input.byte())),
            protocol_version: if ctl & 4 == 0 {
                PROTOCOL_VERSION
            } else {
                u32::from(input.byte())
            },
            nonce,
        };
        let body = weft_proto::encode(&hello).unwrap_or_default();
        if w.write_all(&frame(opcode::AUTH_HELLO, 0, 1, &body, &[]))
            .await
            .is_err()
        {
            return;
        }
        let Some(reply) = one_frame(&mut r).await else {
            return;
        };
        let Ok(Ok(challenge)) = weft_proto::decode::<WireResult<AuthChallenge>>(&reply.body) else {
            let _ = w.shutdown().await;
            drain(&mut r).await;
            return;
        };
        let secret = secret(&s.key, role);
        // The server's proof must be the one the key makes.
        assert_eq!(
            challenge.proof,
            proof(&secret, true, &hello, &challenge.nonce),
            "the server's proof is not the key's"
        );
        let mut p = proof(&secret, false, &hello, &challenge.nonce);
        if ctl & 8 != 0 {
            p[usize::from(input.byte()) % AUTH_LEN] ^= 1 | input.byte();
        }
        let body = weft_proto::encode(&AuthProof { proof: p }).unwrap_or_default();
        if w.write_all(&frame(opcode::AUTH_PROOF, 0, 2, &body, &[]))
            .await
            .is_err()
        {
            return;
        }
        let Some(reply) = one_frame(&mut r).await else {
            return;
        };
        let accepted = matches!(
            weft_proto::decode::<WireResult<()>>(&reply.body),
            Ok(Ok(()))
        );
        let right = ctl & 8 == 0 || p == proof(&secret, false, &hello, &challenge.nonce);
        assert_eq!(accepted, right, "a proof was judged wrongly");
        hello_sent = Some(hello);
    }
    let bytes = if mode & 0x08 != 0 {
        // Raw bytes: the framing itself.
        input.take(usize::MAX).to_vec()
    } else {
        frames_from(input, hello_sent.as_ref())
    };
    let _ = w.write_all(&bytes).await;
    let _ = w.shutdown().await;
    drain(&mut r).await;
}

/// The in-memory transport of the client side: each connect hands out the client's end
/// of a fresh duplex pipe and passes the other end to the harness.
struct Pipe(
    parking_lot::Mutex<Option<tokio::io::DuplexStream>>,
    Option<Arc<ClusterKey>>,
);

impl Transport for Pipe {
    fn connect<'a>(&'a self, _addr: &'a str) -> Connecting<'a> {
        let (ours, theirs) = tokio::io::duplex(64 << 10);
        *self.0.lock() = Some(theirs);
        let (r, w) = tokio::io::split(ours);
        Box::pin(async move {
            Ok((
                Box::new(r) as BoxRead,
                Box::new(w) as BoxWrite,
                SocketAddr::from(([127, 0, 0, 1], 1)),
            ))
        })
    }

    fn key(&self) -> Option<Arc<ClusterKey>> {
        self.1.clone()
    }
}

struct Callbacks;

impl weft_rpc::CallbackHandler for Callbacks {
    fn on_callback(&self, _opcode: u16, body: &[u8]) {
        let _ = weft_proto::decode::<weft_proto::mgs::MgsCallback>(body);
    }
}

/// Answers the client's frames as the input says, until the input or the client ends.
async fn fake_server(
    mut pipe: tokio::io::DuplexStream,
    data: Vec<u8>,
    key: Option<Arc<ClusterKey>>,
) {
    let mut input = Input(&data);
    for _ in 0..16 {
        let Ok(Some(h)) = weft_rpc::conn::read_header(&mut pipe).await else {
            return;
        };
        let Ok(req) = weft_rpc::conn::read_payload(&mut pipe, h).await else {
            return;
        };
        if input.is_empty() {
            return;
        }
        let ctl = input.byte();
        let xid = if ctl & 1 == 0 {
            req.header.xid
        } else {
            req.header.xid ^ u64::from(input.byte())
        };
        let flags = match ctl >> 1 & 3 {
            0 | 1 => FLAG_REPLY,
            2 => FLAG_CALLBACK,
            _ => u16::from(input.byte()),
        };
        let body = match (req.header.opcode, ctl >> 3 & 3) {
            // A valid challenge from a server holding the key.
            (opcode::AUTH_HELLO, 0) => match (&key, weft_proto::decode::<AuthHello>(&req.body)) {
                (Some(k), Ok(hello)) => {
                    let mut nonce = [0u8; AUTH_LEN];
                    nonce[0] = input.byte();
                    let c = AuthChallenge {
                        nonce,
                        proof: proof(&secret(k, hello.role), true, &hello, &nonce),
                    };
                    weft_proto::encode(&WireResult::Ok(c)).unwrap_or_default()
                }
                _ => Vec::new(),
            },
            (opcode::AUTH_PROOF, 0) => weft_proto::encode(&WireResult::Ok(())).unwrap_or_default(),
            (opcode::CONNECT, 0) => weft_proto::encode(&WireResult::Ok(ConnectReply {
                target_uuid: Uuid::from_u128(3),
                features: u64::from(input.byte()),
                protocol_version: PROTOCOL_VERSION,
                evicted: input.byte() & 1 != 0,
                evict_timeout_ms: u64::from(input.byte()) * 100,
            }))
            .unwrap_or_default(),
            _ => {
                let n = usize::from(input.u16() % 512);
                input.take(n).to_vec()
            }
        };
        let mut out = if ctl & 0x20 != 0 {
            let n = usize::from(input.byte());
            input.take(n).to_vec()
        } else {
            frame(req.header.opcode, flags, xid, &body, &[])
        };
        if ctl & 0x40 != 0 {
            // A callback before the reply.
            let n = usize::from(input.byte());
            let cb = frame(150, FLAG_CALLBACK, 99, input.take(n), &[]);
            out.splice(0..0, cb);
        }
        if pipe.write_all(&out).await.is_err() {
            return;
        }
        if ctl & 0x80 != 0 {
            // Leave: the client must notice the close.
            return;
        }
    }
}

fn client_rt() -> &'static Runtime {
    static RT: OnceLock<Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap_or_else(|e| panic!("runtime: {e}"))
    })
}

async fn client_side(mode: u8, data: &[u8]) {
    let key = match mode >> 2 & 3 {
        0 | 1 => None,
        2 => Some(Arc::new(key())),
        _ => ClusterKey::parse(&key().client_text()).ok().map(Arc::new),
    };
    let transport = Pipe(parking_lot::Mutex::new(None), key.clone());
    let hello = ConnectRequest {
        fsname: FSNAME.into(),
        client_uuid: Uuid::from_u128(7),
        protocol_version: PROTOCOL_VERSION,
        features: weft_proto::handshake::FEATURES_SUPPORTED,
        target: TargetId::ost(0),
    };
    let opts = ClientOptions {
        connect_timeout: Duration::from_secs(5),
        request_timeout: Duration::from_secs(5),
    };
    // The fake server starts once the transport has made the pipe (inside connect).
    let data = data.to_vec();
    let server_key = key.as_ref().map(|_| Arc::new(self::key()));
    let connect = Connection::connect(
        &transport,
        "fuzz:1",
        &hello,
        Some(Arc::new(Callbacks)),
        &opts,
    );
    tokio::pin!(connect);
    let mut server = None;
    let conn = loop {
        tokio::select! {
            c = &mut connect => break c,
            _ = tokio::task::yield_now(), if server.is_none() => {
                if let Some(pipe) = transport.0.lock().take() {
                    server = Some(tokio::spawn(fake_server(pipe, data.clone(), server_key.clone())));
                }
            }
        }
    };
    if let Ok(conn) = conn {
        let _ = conn.ping().await;
        let _ = conn.stats().await;
        drop(conn);
    }
    if let Some(s) = server {
        s.abort();
        let _ = s.await;
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input(data);
    let mode = input.byte();
    if mode & 1 == 0 {
        let s = servers();
        let done = s.rt.block_on(async {
            tokio::time::timeout(SERVER_BOUND, server_side(s, mode, &mut input)).await
        });
        assert!(
            done.is_ok(),
            "the server did not close a connection its peer left"
        );
    } else {
        client_rt().block_on(async {
            // Paused time: this bound costs no wall-clock time unless the client spins.
            let done =
                tokio::time::timeout(Duration::from_secs(600), client_side(mode, input.0)).await;
            assert!(done.is_ok(), "the client's handshake did not end");
        });
    }
});
