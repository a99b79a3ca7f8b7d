//! The parallel I/O engine: turns layout pieces into OST RPCs, at most
//! `osc.*.max_rpcs_in_flight` per OST and at most `osc.*.max_pages_per_rpc` each, all OSTs
//! at once; resends an RPC whose connection broke or whose bulk arrived damaged.
//!
//! The engine reaches objects through the [`ObjectIo`] seam (`object`): the cluster's
//! [`OstClient`](crate::OstClient)s in a mounted client, the in-memory [`fake`] or its
//! [`failing`] twin in tests. The buffers a read returns are [`Parts`] (`parts`).

use crate::budget::Budget;
use crate::cluster::Cluster;
use crate::error::ClientError;
use crate::layout::Piece;
use crate::params::{ClientParams, Param};
use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::OwnedSemaphorePermit;
use weft_proto::Compression;
use weft_proto::ost::ObjectAttr;
use weft_rpc::{Backoff, RequestContext};

pub mod failing;
pub mod fake;
mod object;
mod parts;

pub use object::{ObjectIo, ObjectTargets, Op};
pub use parts::Parts;

/// Sends data RPCs to OSTs in parallel.
pub struct IoEngine {
    /// Where objects are read and written.
    targets: Arc<dyn ObjectTargets>,
    params: Arc<ClientParams>,
    /// Each OST's in-flight limit, following `max_rpcs_in_flight`.
    limits: Mutex<HashMap<u32, Arc<Budget>>>,
    /// How long an RPC is resent on a broken connection before it fails with EIO.
    retry_for: Duration,
    /// Grant this client holds on each OST and has not yet spent on buffered data.
    grants: tokio::sync::Mutex<HashMap<u32, u64>>,
}

/// Grant asked for at a time, so small writes do not each cost a round trip.
pub const GRANT_CHUNK: u64 = 64 << 20;

/// Whether an RPC failure is worth resending: the connection broke, the bulk arrived
/// damaged, or the OSS is restarting and does not serve the OST yet. Errors the server
/// answered a request with are final.
fn retryable(e: &ClientError) -> bool {
    match e {
        ClientError::Rpc { error, .. } => error.is_worth_resending(),
        _ => false,
    }
}

impl IoEngine {
    /// An engine over `cluster`'s OST clients.
    pub fn new(cluster: Arc<Cluster>, params: Arc<ClientParams>, retry_for: Duration) -> Self {
        Self::with_targets(cluster, params, retry_for)
    }

    /// An engine over `targets` (a cluster's OST clients, or a fake).
    pub fn with_targets(
        targets: Arc<dyn ObjectTargets>,
        params: Arc<ClientParams>,
        retry_for: Duration,
    ) -> Self {
        Self {
            targets,
            params,
            limits: Mutex::new(HashMap::new()),
            retry_for,
            grants: tokio::sync::Mutex::new(HashMap::new()),
        }
    }

    async fn permit(&self, ost: u32) -> Result<OwnedSemaphorePermit, ClientError> {
        let want = self.params.get(Param::MaxRpcsInFlight);
        let limit = {
            let mut limits = self.limits.lock();
            limits
                .entry(ost)
                .or_insert_with(|| Arc::new(Budget::new(want)))
                .clone()
        };
        limit.follow(want);
        limit
            .semaphore()
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| ClientError::Invalid("I/O engine closed".into()))
    }

    /// Runs `op` against OST `ost`, resending while the failure is retryable and the retry
    /// window lasts.
    async fn with_retry<T, F, Fut>(
        &self,
        ctx: &RequestContext,
        ost: u32,
        op: F,
    ) -> Result<T, ClientError>
    where
        F: Fn(Arc<dyn ObjectIo>) -> Fut,
        Fut: std::future::Future<Output = Result<T, ClientError>>,
    {
        let start = Instant::now();
        let mut backoff = Backoff::new(Duration::from_millis(20), Duration::from_secs(1));
        loop {
            let client = self.targets.target(ost, ctx)?;
            match op(client).await {
                Err(e) if retryable(&e) && start.elapsed() + backoff.peek() < self.retry_for => {
                    tracing::debug!(ost, error = %e, "resending OST request");
                    backoff.wait().await;
                }
                other => return other,
            }
        }
    }

    /// Reserves space on every OST the pieces land on before their data is buffered, asking
    /// for more grant where needed. Fails with ENOSPC when an OST cannot promise the space,
    /// so a buffered write never meets ENOSPC only when it is flushed.
    pub async fn reserve(&self, ctx: &RequestContext, pieces: &[Piece]) -> Result<(), ClientError> {
        let mut need: HashMap<u32, u64> = HashMap::new();
        for p in pieces {
            *need.entry(p.ost).or_insert(0) += p.len;
        }
        let mut grants = self.grants.lock().await;
        for (&ost, &bytes) in &need {
            let have = grants.get(&ost).copied().unwrap_or(0);
            if have < bytes {
                let want = (bytes - have).max(GRANT_CHUNK);
                let got = self
                    .with_retry(ctx, ost, |c| async move { c.grant(want).await })
                    .await?;
                grants.insert(ost, have + got);
            }
            let have = grants.get(&ost).copied().unwrap_or(0);
            if have < bytes {
                return Err(ClientError::Remote(weft_proto::WireError::new(
                    weft_proto::Errno::NoSpc,
                    format!("OST{ost:04x} cannot promise {bytes} bytes of space"),
                )));
            }
        }
        for (ost, bytes) in need {
            if let Some(h) = grants.get_mut(&ost) {
                *h -= bytes;
            }
        }
        Ok(())
    }

    /// Spends grant already held for `pieces`, without asking any OST for more; false (and
    /// nothing spent) when some OST's grant does not cover its share or is in use.
    pub fn try_reserve(&self, pieces: &[Piece]) -> bool {
        let Ok(mut grants) = self.grants.try_lock() else {
            return false;
        };
        let mut need: HashMap<u32, u64> = HashMap::new();
        for p in pieces {
            *need.entry(p.ost).or_insert(0) += p.len;
        }
        if need
            .iter()
            .any(|(ost, &bytes)| grants.get(ost).copied().unwrap_or(0) < bytes)
        {
            return false;
        }
        for (ost, bytes) in need {
            if let Some(h) = grants.get_mut(&ost) {
                *h -= bytes;
            }
        }
        true
    }

    /// Turns pieces into RPC-sized pieces: pieces that follow each other both in the file
    /// and in one object (a file of one stripe, or stripes of one object met in a row) are
    /// joined first, so RPCs are `max_pages_per_rpc` long whatever the stripe size, and no
    /// bytes are copied (an RPC's bytes stay one contiguous range of the caller's buffer).
    fn rpcs(&self, pieces: &[Piece]) -> Vec<Piece> {
        let max = self.params.rpc_bytes().max(crate::params::PAGE_SIZE);
        rpc_pieces(pieces, max)
    }

    /// Reads the pieces (all OSTs at once) into one buffer of their total length; bytes an
    /// object does not have (holes, past its end) read as zeros.
    pub async fn read(
        self: &Arc<Self>,
        ctx: &RequestContext,
        pieces: &[Piece],
    ) -> Result<Bytes, ClientError> {
        Ok(self.read_parts(ctx, pieces).await?.concat())
    }

    /// [`read`](Self::read), keeping each RPC's buffer as it came: cutting cache pages out
    /// of them costs no copy.
    pub async fn read_parts(
        self: &Arc<Self>,
        ctx: &RequestContext,
        pieces: &[Piece],
    ) -> Result<Parts, ClientError> {
        let rpcs = self.rpcs(pieces);
        // Each RPC is its own task, so checksums and copies run on every core.
        let tasks: Vec<_> = rpcs
            .iter()
            .map(|&p| {
                let (engine, ctx) = (self.clone(), ctx.clone());
                tokio::spawn(async move {
                    let _permit = engine.permit(p.ost).await?;
                    let len = u32::try_from(p.len)
                        .map_err(|_| ClientError::Invalid("RPC too large".into()))?;
                    let (data, _) = engine
                        .with_retry(&ctx, p.ost, |c| async move {
                            c.read(p.object, p.object_offset, len).await
                        })
                        .await?;
                    Ok::<_, ClientError>(data)
                })
            })
            .collect();
        let parts: Vec<Result<Bytes, ClientError>> = futures::future::join_all(tasks)
            .await
            .into_iter()
            .map(|r| r.map_err(join_error).and_then(|x| x))
            .collect();
        let mut out = Parts::default();
        for (p, part) in rpcs.iter().zip(parts) {
            let data = part?;
            if data.len() as u64 == p.len {
                out.push(data);
            } else {
                // Short (the object ends early): the rest reads as zeros.
                let mut padded = BytesMut::with_capacity(p.len as usize);
                padded.extend_from_slice(&data[..data.len().min(p.len as usize)]);
                padded.resize(p.len as usize, 0);
                out.push(padded.freeze());
            }
        }
        Ok(out)
    }

    /// Writes `data` (the concatenation of the pieces' bytes, in order) to the objects, all
    /// OSTs at once. Returns each RPC's OST, object, and the object's attributes after it.
    pub async fn write(
        self: &Arc<Self>,
        ctx: &RequestContext,
        pieces: &[Piece],
        data: &Bytes,
        sync: bool,
    ) -> Result<Vec<(u32, weft_proto::ObjectId, ObjectAttr)>, ClientError> {
        let rpcs = self.rpcs(pieces);
        let base = pieces.first().map_or(0, |p| p.file_offset);
        let mut tasks = Vec::with_capacity(rpcs.len());
        for p in rpcs {
            // Pieces cover `data` contiguously from `base`: slice without copying.
            let start = usize::try_from(p.file_offset - base)
                .map_err(|_| ClientError::Invalid("range".into()))?;
            let end = start + p.len as usize;
            if end > data.len() {
                return Err(ClientError::Invalid("write pieces exceed the data".into()));
            }
            let chunk = data.slice(start..end);
            let (engine, ctx) = (self.clone(), ctx.clone());
            tasks.push(tokio::spawn(async move {
                let _permit = engine.permit(p.ost).await?;
                let attr = engine
                    .with_retry(&ctx, p.ost, |c| {
                        let chunk = chunk.clone();
                        async move {
                            c.write(p.object, p.object_offset, chunk, sync, p.compress)
                                .await
                        }
                    })
                    .await?;
                Ok((p.ost, p.object, attr))
            }));
        }
        futures::future::join_all(tasks)
            .await
            .into_iter()
            .map(|r| r.map_err(join_error).and_then(|x| x))
            .collect()
    }

    /// The attributes of an object (for glimpse), resent like data RPCs.
    pub async fn getattr(
        &self,
        ctx: &RequestContext,
        ost: u32,
        object: weft_proto::ObjectId,
    ) -> Result<ObjectAttr, ClientError> {
        self.with_retry(ctx, ost, |c| async move { c.getattr(object).await })
            .await
    }

    /// Sets an object's size (creating it, compressed as `compress` says, if missing).
    pub async fn punch(
        &self,
        ctx: &RequestContext,
        ost: u32,
        object: weft_proto::ObjectId,
        size: u64,
        compress: Compression,
    ) -> Result<ObjectAttr, ClientError> {
        self.with_retry(ctx, ost, |c| async move {
            c.punch(object, size, compress).await
        })
        .await
    }

    /// Deallocates `[offset, offset + len)` of an object, keeping its size.
    pub async fn punch_range(
        &self,
        ctx: &RequestContext,
        ost: u32,
        object: weft_proto::ObjectId,
        offset: u64,
        len: u64,
    ) -> Result<ObjectAttr, ClientError> {
        self.with_retry(ctx, ost, |c| async move {
            c.punch_range(object, offset, len).await
        })
        .await
    }

    /// Where an object's next data (or, with `hole`, next hole) at or after `offset`
    /// starts; `None`: no data there.
    pub async fn seek(
        &self,
        ctx: &RequestContext,
        ost: u32,
        object: weft_proto::ObjectId,
        offset: u64,
        hole: bool,
    ) -> Result<Option<u64>, ClientError> {
        self.with_retry(
            ctx,
            ost,
            |c| async move { c.seek(object, offset, hole).await },
        )
        .await
    }

    /// Makes an object durable.
    pub async fn sync(
        &self,
        ctx: &RequestContext,
        ost: u32,
        object: weft_proto::ObjectId,
    ) -> Result<(), ClientError> {
        self.with_retry(ctx, ost, |c| async move { c.sync(Some(object)).await })
            .await
    }
}

/// [`IoEngine::rpcs`] with RPCs of at most `max` bytes.
fn rpc_pieces(pieces: &[Piece], max: u64) -> Vec<Piece> {
    let mut joined: Vec<Piece> = Vec::with_capacity(pieces.len());
    for p in pieces {
        match joined.last_mut() {
            Some(last)
                if last.ost == p.ost
                    && last.object == p.object
                    && last.object_offset + last.len == p.object_offset
                    && last.file_offset + last.len == p.file_offset =>
            {
                last.len += p.len;
            }
            _ => joined.push(*p),
        }
    }
    let mut out = Vec::with_capacity(joined.len());
    for p in &joined {
        let mut done = 0;
        while done < p.len {
            let n = (p.len - done).min(max);
            out.push(Piece {
                object_offset: p.object_offset + done,
                file_offset: p.file_offset + done,
                len: n,
                ..*p
            });
            done += n;
        }
    }
    out
}

fn join_error(e: tokio::task::JoinError) -> ClientError {
    ClientError::Invalid(format!("I/O task failed: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// RPCs cover the range in file order, put every byte where the layout says, are
        /// at most `max` long, and a one-stripe file needs no more RPCs than its length
        /// does (stripe boundaries do not cut them).
        #[test]
        fn rpcs_join_contiguous_pieces_and_keep_the_mapping(
            stripe_kib in 1u64..8,
            count in 1u32..5,
            max_kib in 1u64..40,
            offset in 0u64..200_000,
            len in 0u64..300_000,
        ) {
            let layout = crate::test_attrs::striped(stripe_kib * 4096, count);
            let pieces =
                crate::layout::map_range(&layout, weft_proto::Fid::ROOT, offset, len).unwrap();
            let max = max_kib * 4096;
            let rpcs = rpc_pieces(&pieces, max);
            prop_assert_eq!(rpcs.iter().map(|p| p.len).sum::<u64>(), len);
            let mut at = offset;
            for r in &rpcs {
                prop_assert!(r.len > 0 && r.len <= max);
                prop_assert_eq!(r.file_offset, at);
                at += r.len;
                for d in [0, r.len - 1] {
                    let x = r.file_offset + d;
                    let p = pieces
                        .iter()
                        .find(|p| p.file_offset <= x && x < p.file_offset + p.len)
                        .unwrap();
                    prop_assert_eq!((r.ost, r.object), (p.ost, p.object));
                    prop_assert_eq!(r.object_offset + d, p.object_offset + (x - p.file_offset));
                }
            }
            if count == 1 {
                prop_assert_eq!(rpcs.len() as u64, len.div_ceil(max));
            }
        }
    }
}
