//! A connected peer's requests: read within the memory budgets, served concurrently and
//! answered, until the peer leaves, misbehaves or stays silent past the eviction timeout.

use super::{BUDGET_UNIT, Ended, Shared};
use crate::conn::{self, Endpoint, InFrame, OutFrame};
use crate::service::{Service, answer_raw, encode_reply};
use crate::stream::BoxRead;
use bytes::Bytes;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::BufReader;
use tokio::sync::Semaphore;
use weft_proto::frame::FLAG_REPLY;
use weft_proto::{Errno, WireError};
/// Waits until the peer has sent something (or closed): false if it stays silent for
/// `limit`. Looks once more, briefly, before saying so: a server that was itself stopped
/// (SIGSTOP, a VM pause) finds its timer expired and its peers' pings waiting in the
/// socket, and must not evict them for its own silence.
async fn heard_within(r: &mut BufReader<BoxRead>, limit: Duration) -> bool {
    use tokio::io::AsyncBufReadExt;
    if !r.buffer().is_empty() {
        // The next frame is here already (pipelined requests): no timer needed.
        return true;
    }
    for wait in [limit, Duration::from_secs(1)] {
        if tokio::time::timeout(wait, r.fill_buf()).await.is_ok() {
            return true;
        }
    }
    false
}

/// Serves requests until the peer leaves, misbehaves or stays silent past the eviction
/// timeout.
pub(super) async fn request_loop(
    r: &mut BufReader<BoxRead>,
    endpoint: &Arc<Endpoint>,
    service: &Arc<dyn Service>,
    peer: &Arc<crate::peer::Peer>,
    shared: &Shared,
) -> Ended {
    let conn_budget = Arc::new(Semaphore::new(shared.opts.conn_budget_bytes / BUDGET_UNIT));
    let conn_requests = Arc::new(Semaphore::new(shared.opts.conn_max_requests));
    loop {
        if let Some(limit) = shared.opts.evict_timeout
            && !heard_within(r, limit).await
        {
            return Ended::Silent(limit);
        }
        let header = match conn::read_header(r).await {
            Ok(Some(h)) => h,
            Ok(None) => return Ended::Left,
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                return Ended::Misbehaved(e.to_string());
            }
            Err(e) => {
                tracing::debug!(peer = %peer.addr, error = %e, "connection lost");
                return Ended::Left;
            }
        };
        if header.is_reply() {
            if !header.is_callback() {
                return Ended::Misbehaved("reply frame from a client".into());
            }
            match conn::read_payload(r, header).await {
                Ok(frame) => endpoint.complete(frame),
                Err(e) => return Ended::Misbehaved(e.to_string()),
            }
            continue;
        }
        if header.is_callback() {
            return Ended::Misbehaved("callback request from a client".into());
        }
        // Reserve memory for the payload before reading it: a flood of large requests
        // waits here, and TCP pushes back on the sender.
        let units = 1 + (header.body_len as usize + header.bulk_len as usize) / BUDGET_UNIT;
        let units = u32::try_from(units).unwrap_or(u32::MAX);
        let (Ok(p1), Ok(p2), Ok(p3)) = (
            conn_requests.clone().acquire_owned().await,
            conn_budget.clone().acquire_many_owned(units).await,
            shared.total_budget.clone().acquire_many_owned(units).await,
        ) else {
            return Ended::Misbehaved("budget closed".into());
        };
        let frame = match conn::read_payload(r, header).await {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                return Ended::Misbehaved(e.to_string());
            }
            Err(_) => return Ended::Left,
        };
        let (service, peer, endpoint) = (service.clone(), peer.clone(), endpoint.clone());
        tokio::spawn(async move {
            let reply = answer(service, peer, frame).await;
            if let Ok(out) = reply {
                let _ = endpoint.send(out).await;
            }
            drop((p1, p2, p3));
        });
    }
}

async fn answer(
    service: Arc<dyn Service>,
    peer: Arc<crate::peer::Peer>,
    frame: InFrame,
) -> Result<OutFrame, weft_proto::FrameError> {
    let h = frame.header;
    let (body, bulk) = if let Some(e) = frame.bulk_error {
        (
            encode_reply::<()>(&Err(WireError::new(Errno::Io, e.to_string()))),
            Bytes::new(),
        )
    } else {
        answer_raw(service, peer, h.opcode, frame.body, frame.bulk).await
    };
    OutFrame::new(h.opcode, FLAG_REPLY, h.xid, body, bulk)
}
