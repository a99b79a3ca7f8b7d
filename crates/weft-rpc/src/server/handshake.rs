//! A connection's handshake: authentication by the cluster key (when the server has one),
//! then the connect request that binds the connection to a target's service.

use super::{Router, Shared};
use crate::auth::{self, ClusterKey, Side};
use crate::conn::{self, Endpoint, InFrame, OutFrame};
use crate::service::{PeerAuth, Service, encode_reply};
use crate::stream::BoxRead;
use bytes::Bytes;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tokio::io::BufReader;
use weft_proto::frame::FLAG_REPLY;
use weft_proto::handshake::{
    AuthChallenge, AuthHello, AuthProof, AuthRole, FEATURES_SUPPORTED, opcode,
};
use weft_proto::{ConnectReply, ConnectRequest, Errno, PROTOCOL_VERSION, WireError, WireResult};
/// Reads the first frame of a connection (no flags allowed).
async fn read_first(r: &mut BufReader<BoxRead>) -> Result<InFrame, String> {
    let header = conn::read_header(r)
        .await
        .map_err(|e| e.to_string())?
        .ok_or("closed before handshake")?;
    if header.flags != 0 {
        return Err(format!("handshake frame with flags {:#x}", header.flags));
    }
    conn::read_payload(r, header)
        .await
        .map_err(|e| e.to_string())
}

/// Sends the answer to a handshake frame.
async fn answer_handshake<T: serde::Serialize>(
    endpoint: &Endpoint,
    frame: &InFrame,
    reply: &WireResult<T>,
) -> Result<(), String> {
    let out = OutFrame::new(
        frame.header.opcode,
        FLAG_REPLY,
        frame.header.xid,
        encode_reply(reply),
        Bytes::new(),
    )
    .map_err(|e| e.to_string())?;
    endpoint.send(out).await.map_err(|e| e.to_string())
}

/// Refuses a connection's authentication: counts it, logs it with the peer's address and
/// answers the one refusal text (when there is a frame to answer).
async fn refuse(
    endpoint: &Endpoint,
    frame: Option<&InFrame>,
    addr: SocketAddr,
    why: &str,
) -> String {
    auth::COUNTERS.refused.fetch_add(1, Ordering::Relaxed);
    tracing::warn!(peer = %addr, why, "authentication refused");
    if let Some(frame) = frame {
        let refusal: WireResult<()> = Err(WireError::new(Errno::Access, auth::REFUSED));
        let _ = answer_handshake(endpoint, frame, &refusal).await;
    }
    format!("authentication refused: {why}")
}

/// Runs the server's side of authentication from the peer's hello: answers with the
/// server's nonce and proof, checks the peer's proof. Returns the hello (which the connect
/// request must agree with) and the role proved.
async fn authenticate(
    r: &mut BufReader<BoxRead>,
    endpoint: &Endpoint,
    key: &ClusterKey,
    first: &InFrame,
    addr: SocketAddr,
) -> Result<(AuthHello, AuthRole), String> {
    let Ok(hello) = weft_proto::decode::<AuthHello>(&first.body) else {
        return Err(refuse(endpoint, Some(first), addr, "malformed hello").await);
    };
    let Some(secret) = key.secret(hello.role) else {
        return Err(refuse(endpoint, Some(first), addr, "role has no key here").await);
    };
    let nonce = auth::nonce();
    let challenge = AuthChallenge {
        nonce,
        proof: auth::proof(secret, Side::Server, &hello, &nonce),
    };
    answer_handshake(endpoint, first, &Ok(challenge)).await?;
    let frame = match read_first(r).await {
        Ok(f) if f.header.opcode == opcode::AUTH_PROOF => f,
        Ok(f) => return Err(refuse(endpoint, Some(&f), addr, "no proof").await),
        Err(e) => return Err(refuse(endpoint, None, addr, &format!("left: {e}")).await),
    };
    let proved = weft_proto::decode::<AuthProof>(&frame.body)
        .is_ok_and(|p| auth::verify(secret, Side::Peer, &hello, &nonce, &p.proof));
    if !proved {
        return Err(refuse(endpoint, Some(&frame), addr, "wrong proof").await);
    }
    answer_handshake(endpoint, &frame, &Ok(())).await?;
    auth::COUNTERS.accepted.fetch_add(1, Ordering::Relaxed);
    let role = hello.role;
    Ok((hello, role))
}

/// Authenticates the peer if the server has a key, then reads and answers the connect
/// request. Errors are returned to the peer, then the connection closes.
pub(super) async fn handshake(
    r: &mut BufReader<BoxRead>,
    endpoint: &Endpoint,
    shared: &Shared,
    addr: SocketAddr,
) -> Result<(Arc<dyn Service>, ConnectRequest, PeerAuth), String> {
    let first = read_first(r).await?;
    let (frame, proved) = match (&shared.opts.key, first.header.opcode) {
        (Some(key), opcode::AUTH_HELLO) => {
            let proved = authenticate(r, endpoint, key, &first, addr).await?;
            (read_first(r).await?, Some(proved))
        }
        (Some(_), opcode::CONNECT) => {
            let why = "no authentication (the peer has no cluster key)";
            return Err(refuse(endpoint, Some(&first), addr, why).await);
        }
        (None, opcode::AUTH_HELLO) => {
            let refusal: WireResult<()> = Err(WireError::new(
                Errno::Proto,
                "this server runs without authentication (started without --key)",
            ));
            answer_handshake(endpoint, &first, &refusal).await?;
            return Err("authentication offered to a server without a key".into());
        }
        _ => (first, None),
    };
    if frame.header.opcode != opcode::CONNECT {
        return Err(format!(
            "first request has opcode {}, not connect",
            frame.header.opcode
        ));
    }
    let accepted = match weft_proto::decode::<ConnectRequest>(&frame.body) {
        Ok(hello) if proved.as_ref().is_some_and(|(a, _)| !agrees(a, &hello)) => {
            Err(WireError::new(
                Errno::Access,
                "connect request differs from the authenticated hello",
            ))
        }
        Ok(hello) => {
            handshake_reply(&shared.router, &hello).map(|(reply, service)| (reply, service, hello))
        }
        Err(e) => Err(WireError::new(
            Errno::Proto,
            format!("malformed connect request: {e}"),
        )),
    };
    let reply: WireResult<ConnectReply> = accepted
        .as_ref()
        .map(|(reply, _, hello)| ConnectReply {
            evicted: shared.take_eviction(hello.target, hello.client_uuid),
            evict_timeout_ms: shared.opts.evict_timeout.map_or(0, |t| {
                u64::try_from(t.as_millis()).unwrap_or(u64::MAX).max(1)
            }),
            ..reply.clone()
        })
        .map_err(Clone::clone);
    answer_handshake(endpoint, &frame, &reply).await?;
    let auth = match proved {
        None => PeerAuth::Open,
        Some((_, AuthRole::Client)) => PeerAuth::Client,
        Some((_, AuthRole::Server)) => PeerAuth::Server,
    };
    accepted
        .map(|(_, service, hello)| (service, hello, auth))
        .map_err(|e| e.to_string())
}

/// Whether a connect request names what the authenticated hello did.
fn agrees(hello: &AuthHello, connect: &ConnectRequest) -> bool {
    hello.fsname == connect.fsname
        && hello.client_uuid == connect.client_uuid
        && hello.protocol_version == connect.protocol_version
}

/// The answer to a connect request and the service it binds the connection to, or why
/// it is refused.
pub(crate) fn handshake_reply(
    router: &Router,
    hello: &ConnectRequest,
) -> WireResult<(ConnectReply, Arc<dyn Service>)> {
    let service = router.accept(hello)?;
    let reply = ConnectReply {
        target_uuid: service.uuid(),
        features: hello.features & FEATURES_SUPPORTED,
        protocol_version: PROTOCOL_VERSION,
        evicted: false,
        evict_timeout_ms: 0,
    };
    Ok((reply, service))
}
