//! The data mover: copies byte ranges of archived objects from a repository's store into
//! a file's OST objects (the copy half of an HSM restore; the MDT's `ClusterView::
//! restore_chunk` is the contract). It owns the stores it opened (one per repository,
//! reopened when the repository's spec changes), the ranged GETs (sub-ranges fetched in
//! parallel, a bounded number in flight, so memory stays bounded whatever the chunk), the
//! check that the object is still the one imported (its entity tag and size), retries of a
//! failing store, the OST writes and the syncs that make them durable, its counters, and
//! the page-aligned buffers GETs are collected into, reused (`mover/buffers.rs`).
//!
//! A mover runs in the MDS (the MDT's `ClusterView::restore_chunk`) and in each OSS
//! ([`MoverRole`]). The MDS's waits for room under a tiering high mark, then splits a chunk
//! by the server of its OSTs and hands each server its part (`OstRequest::Restore`), whose
//! mover fetches only the bytes of those OSTs and writes them in-process
//! ([`Mover::restore_part`]): the data crosses no socket between the store and the disk
//! but the store's. The part of a server without a mover (`weft oss --no-data-mover`, or
//! one that cannot reach the store) is copied by the MDS's mover itself.
//!
//! Servers are trusted: their writes spend no grant (an OST admits a write from a
//! connection without grant while unpromised space covers it, as for any first write).

mod buffers;
mod copy;
mod fetch;
mod handoff;
mod stats;
#[cfg(test)]
mod tests;

pub use stats::{MOVER_STATS, MoverStats};

use crate::store::RepoStore;
use buffers::BufferPool;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use weft_client::io::IoEngine;
#[cfg(test)]
use weft_client::io::ObjectTargets;
use weft_client::{ClientParams, Cluster};
use weft_proto::hsm::{Repo, RepoSpec, RestoreChunk};
use weft_proto::{Errno, WireError};

/// Bytes one ranged GET asks for.
pub const SUB_RANGE: u64 = 8 << 20;
/// Ranged GETs of one chunk in flight at once (with [`SUB_RANGE`], at most 64 MiB of one
/// chunk's data in memory).
pub const IN_FLIGHT: usize = 8;
/// Attempts of one sub-range against a failing store (each after the store's own retries,
/// [`crate::store::STORE_RETRIES`]).
pub const ATTEMPTS: u32 = 3;
/// The wait before the second attempt; it doubles for each further one.
pub const BACKOFF: Duration = Duration::from_millis(100);
/// How long an OST write or sync is resent over a broken connection.
pub const OST_RETRY: Duration = Duration::from_secs(30);
/// How long the MDS's mover copies chunks itself for a server that refused one (no data
/// mover there, or no access to the store) before it hands that server chunks again.
pub const REFUSED_FOR: Duration = Duration::from_secs(60);

/// The largest chunk [`Mover::restore_part`] takes (the MDT's restore units are 32 MiB):
/// its pieces are listed at once.
pub const MAX_PART_CHUNK: u64 = 1 << 30;

/// Where a [`Mover`] runs, which decides what it does with a chunk (see the module header).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoverRole {
    /// In an MDS: waits for room under tiering marks, hands each server the part of a
    /// chunk on its OSTs, copies what none takes.
    Mds,
    /// In an OSS: copies what an MDS hands it (which has waited for room already).
    Oss,
}

/// How a [`Mover`] fetches and retries (the defaults are the constants above).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoverConfig {
    /// Bytes one ranged GET asks for (at least 1).
    pub sub_range: u64,
    /// Ranged GETs of one chunk in flight at once (at least 1).
    pub in_flight: usize,
    /// Attempts of one sub-range (at least 1).
    pub attempts: u32,
    /// The wait before the second attempt, doubling after.
    pub backoff: Duration,
    /// How long an OST write or sync is resent over a broken connection.
    pub ost_retry: Duration,
    /// Where the mover runs.
    pub role: MoverRole,
}

impl Default for MoverConfig {
    fn default() -> Self {
        Self {
            sub_range: SUB_RANGE,
            in_flight: IN_FLIGHT,
            attempts: ATTEMPTS,
            backoff: BACKOFF,
            ost_retry: OST_RETRY,
            role: MoverRole::Mds,
        }
    }
}

#[derive(Default)]
struct Counters {
    chunks: AtomicU64,
    chunk_errors: AtomicU64,
    bytes_fetched: AtomicU64,
    bytes_written: AtomicU64,
    retries: AtomicU64,
    stale: AtomicU64,
    room_waits: AtomicU64,
    handed_off: AtomicU64,
}

/// Where the mover finds repositories: the cluster's configuration (refreshed from the MGS
/// when a repository is not in it yet), or a fixed list (unit tests).
enum Repos {
    Cluster(Arc<Cluster>),
    #[cfg(test)]
    Fixed(Vec<Repo>),
}

impl Repos {
    async fn find(&self, id: u32) -> Option<Repo> {
        match self {
            Repos::Cluster(c) => {
                if let Some(r) = c.config().repo(id) {
                    return Some(r.clone());
                }
                // Made since the configuration was last fetched?
                match c.refresh().await {
                    Ok(config) => config.repo(id).cloned(),
                    Err(e) => {
                        tracing::debug!(repo = id, error = %e, "could not refresh the configuration");
                        None
                    }
                }
            }
            #[cfg(test)]
            Repos::Fixed(v) => v.iter().find(|r| r.id == id).cloned(),
        }
    }
}

/// The data mover of one MDS (see the module header).
pub struct Mover {
    repos: Repos,
    io: Arc<IoEngine>,
    config: MoverConfig,
    /// Opened stores by repository id, with the spec each was opened from.
    stores: Mutex<HashMap<u32, (RepoSpec, RepoStore)>>,
    /// Servers (addresses) that refused a chunk handed to them, and when.
    refused: Mutex<HashMap<String, std::time::Instant>>,
    /// The buffers GETs are collected into, reused (see `buffers`).
    buffers: Arc<BufferPool>,
    counters: Counters,
}

impl Mover {
    /// A mover over `cluster` (the MDS's view: its MGS configuration lists the
    /// repositories, its OST clients carry the writes), with the default [`MoverConfig`].
    pub fn new(cluster: Arc<Cluster>) -> Arc<Mover> {
        Self::with_config(cluster, MoverConfig::default())
    }

    /// The mover of an OSS ([`MoverRole::Oss`]) over `cluster` (the OSS's: its MGS
    /// configuration lists the repositories, and its own OSTs are written in-process).
    pub fn for_oss(cluster: Arc<Cluster>) -> Arc<Mover> {
        let config = MoverConfig {
            role: MoverRole::Oss,
            ..MoverConfig::default()
        };
        Self::with_config(cluster, config)
    }

    /// Like [`Mover::new`], with `config`.
    pub fn with_config(cluster: Arc<Cluster>, config: MoverConfig) -> Arc<Mover> {
        let params = Arc::new(ClientParams::new("mover"));
        let io = Arc::new(IoEngine::new(cluster.clone(), params, config.ost_retry));
        Arc::new(Self::from_parts(Repos::Cluster(cluster), io, config))
    }

    fn from_parts(repos: Repos, io: Arc<IoEngine>, config: MoverConfig) -> Self {
        let config = MoverConfig {
            sub_range: config.sub_range.max(1),
            in_flight: config.in_flight.max(1),
            attempts: config.attempts.max(1),
            ..config
        };
        Self {
            repos,
            io,
            config,
            stores: Mutex::new(HashMap::new()),
            refused: Mutex::new(HashMap::new()),
            buffers: BufferPool::new(usize::try_from(config.sub_range).unwrap_or(usize::MAX)),
            counters: Counters::default(),
        }
    }

    #[cfg(test)]
    fn for_tests(repos: Vec<Repo>, targets: Arc<dyn ObjectTargets>, config: MoverConfig) -> Self {
        let params = Arc::new(ClientParams::new("mover"));
        let io = Arc::new(IoEngine::with_targets(targets, params, config.ost_retry));
        Self::from_parts(Repos::Fixed(repos), io, config)
    }

    /// Copies bytes `[chunk.start, chunk.end)` of `chunk.archive` from repository
    /// `chunk.repo` into file `chunk.fid`'s OST objects as `chunk.layout` places them, and
    /// syncs every object written before it returns. Errors: ENOENT for a repository or
    /// object that is gone, ESTALE for an object that changed since it was imported, EIO
    /// for a store that still fails after [`MoverConfig::attempts`], EINVAL for a range
    /// outside the object or a layout that does not cover it.
    pub async fn restore_chunk(&self, chunk: RestoreChunk) -> Result<(), WireError> {
        self.restore_counted(chunk, None).await.map(|_| ())
    }

    /// [`Mover::restore_chunk`] of only the bytes the layout puts on OSTs `osts` (what an
    /// MDS hands an OSS of a chunk spread over several servers; empty: every byte); answers
    /// the bytes copied. A chunk of more than [`MAX_PART_CHUNK`] bytes is EINVAL here.
    pub async fn restore_part(&self, chunk: RestoreChunk, osts: &[u32]) -> Result<u64, WireError> {
        if chunk.end.saturating_sub(chunk.start) > MAX_PART_CHUNK {
            return Err(WireError::new(
                Errno::Inval,
                format!(
                    "a restore chunk of {} bytes is over the {MAX_PART_CHUNK} a server takes",
                    chunk.end.saturating_sub(chunk.start)
                ),
            ));
        }
        let only = (!osts.is_empty()).then_some(osts);
        self.restore_counted(chunk, only).await
    }

    async fn restore_counted(
        &self,
        chunk: RestoreChunk,
        only: Option<&[u32]>,
    ) -> Result<u64, WireError> {
        let (fid, start, end) = (chunk.fid, chunk.start, chunk.end);
        let r = self.restore(chunk, only).await;
        match &r {
            Ok(_) => {
                self.counters.chunks.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(%fid, start, end, "restored");
            }
            Err(e) => {
                self.counters.chunk_errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%fid, start, end, errno = ?e.errno, error = %e.message, "restore failed");
            }
        }
        r
    }

    /// Answers the bytes this mover or the servers it handed parts to copied.
    async fn restore(&self, chunk: RestoreChunk, only: Option<&[u32]>) -> Result<u64, WireError> {
        let (fid, start, end) = (chunk.fid, chunk.start, chunk.end);
        if start > end || end > chunk.archive.size {
            return Err(WireError::new(
                Errno::Inval,
                format!(
                    "restore range {start}..{end} is outside object {:?} of {} bytes",
                    chunk.archive.key, chunk.archive.size
                ),
            ));
        }
        if start == end {
            return Ok(0);
        }
        // An OSS's mover copies what it is handed (the MDS waited for room).
        let cluster = match &self.repos {
            Repos::Cluster(c) if self.config.role == MoverRole::Mds && only.is_none() => c,
            _ => return self.copy(&chunk, only).await,
        };
        let pieces = weft_client::layout::map_range(&chunk.layout, fid, start, end - start)
            .map_err(|e| WireError::new(Errno::Inval, format!("file {fid}: {e}")))?;
        // Tiering: wait for room under the high mark on the OSTs this chunk fills (here,
        // for the parts handed off too: the MDS's gate is the one the agent answers).
        let _room = match self.tiering(chunk.repo) {
            Some(policy) => {
                let mut need: HashMap<u32, u64> = HashMap::new();
                for p in &pieces {
                    *need.entry(p.ost).or_default() += p.len;
                }
                let (room, waited) = crate::tiering::admit(cluster, &policy, need).await;
                if waited {
                    self.counters.room_waits.fetch_add(1, Ordering::Relaxed);
                }
                Some(room)
            }
            None => None,
        };
        // Each server's part to that server, at once; what none takes, copied here.
        let parts = self.parts_by_server(cluster, &pieces);
        let whole = parts.len() == 1;
        let chunk = &chunk;
        futures::future::try_join_all(parts.into_iter().map(|(server, osts)| async move {
            if let Some(server) = server
                && let Some(done) = self.hand_off(cluster, &server, chunk, &osts, whole).await
            {
                return done;
            }
            self.copy(chunk, (!whole).then_some(&osts)).await
        }))
        .await
        .map(|copied| copied.iter().sum())
    }

    /// Repository `id`'s tiering policy, if any.
    fn tiering(&self, id: u32) -> Option<weft_proto::hsm::TieringPolicy> {
        match &self.repos {
            Repos::Cluster(c) => c.config().repo(id).and_then(|r| r.tiering),
            #[cfg(test)]
            Repos::Fixed(_) => None,
        }
    }
}
