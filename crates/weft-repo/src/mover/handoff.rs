//! Handing the parts of a chunk to the servers of their OSTs, whose movers copy them
//! in-process (an MDS's mover), and remembering the servers that refused.

use super::{Mover, REFUSED_FOR};
use std::sync::atomic::Ordering;
use weft_client::Cluster;
use weft_proto::hsm::RestoreChunk;
use weft_proto::{Errno, WireError};

impl Mover {
    /// The chunk of `pieces` split by the server of their OSTs (see [`by_server`]); the
    /// part of a server that refused a chunk within [`REFUSED_FOR`] is this mover's to
    /// copy (no server).
    pub(super) fn parts_by_server(
        &self,
        cluster: &Cluster,
        pieces: &[weft_client::layout::Piece],
    ) -> Vec<(Option<String>, Vec<u32>)> {
        let config = cluster.config();
        let parts = by_server(pieces, |ost| {
            config
                .target(weft_proto::TargetId::ost(ost))
                .map(|t| t.address.as_str())
        });
        let mut refused = self.refused.lock();
        let mut out: Vec<(Option<String>, Vec<u32>)> = Vec::with_capacity(parts.len());
        let mut here: Vec<u32> = Vec::new();
        for (server, osts) in parts {
            let server = server.filter(|s| match refused.get(*s) {
                Some(when) if when.elapsed() < REFUSED_FOR => false,
                Some(_) => {
                    refused.remove(*s);
                    true
                }
                None => true,
            });
            match server {
                Some(s) => out.push((Some(s.to_string()), osts)),
                None => here.extend(osts),
            }
        }
        if !here.is_empty() {
            here.sort_unstable();
            out.push((None, here));
        }
        out
    }

    /// Hands `chunk` to `server` to copy: its part on OSTs `osts` (served there), or all of
    /// it when `whole`; answers the bytes of the part. `None` when it did not and this
    /// mover is to copy that part itself: the server has no mover or no access to the store
    /// (then it is left alone for [`REFUSED_FOR`]), or could not be reached (the copy's own
    /// writes wait for it, or for its failover server).
    pub(super) async fn hand_off(
        &self,
        cluster: &Cluster,
        server: &str,
        chunk: &RestoreChunk,
        osts: &[u32],
        whole: bool,
    ) -> Option<Result<u64, WireError>> {
        let client = cluster.ost(*osts.first()?).ok()?;
        let (fid, start, end) = (chunk.fid, chunk.start, chunk.end);
        let only = if whole { Vec::new() } else { osts.to_vec() };
        let e = match client.restore(chunk.clone(), only).await {
            Ok(bytes) => {
                self.counters.handed_off.fetch_add(1, Ordering::Relaxed);
                return Some(Ok(bytes));
            }
            Err(e) => e,
        };
        match e.remote() {
            Some(w) if matches!(w.errno, Errno::NoSys | Errno::Access | Errno::Perm) => {
                tracing::info!(server, errno = ?w.errno, error = %w.message,
                    "the server of the chunk's OSTs does not restore: this MDS copies its parts for {REFUSED_FOR:?}");
                self.refused
                    .lock()
                    .insert(server.to_string(), std::time::Instant::now());
                None
            }
            Some(w) => Some(Err(w.clone())),
            None => {
                tracing::debug!(server, %fid, start, end, error = %e, "handing the chunk off failed: copying it here");
                None
            }
        }
    }
}

/// The OSTs of `pieces` grouped by the address of their server (`address_of`, from the
/// MGS configuration; `None`: an OST unknown there), in the order the pieces name them.
pub(super) fn by_server<'a>(
    pieces: &[weft_client::layout::Piece],
    address_of: impl Fn(u32) -> Option<&'a str>,
) -> Vec<(Option<&'a str>, Vec<u32>)> {
    let mut out: Vec<(Option<&'a str>, Vec<u32>)> = Vec::new();
    for p in pieces {
        let server = address_of(p.ost);
        match out.iter_mut().find(|(s, _)| *s == server) {
            Some((_, osts)) if osts.contains(&p.ost) => {}
            Some((_, osts)) => osts.push(p.ost),
            None => out.push((server, vec![p.ost])),
        }
    }
    out
}
