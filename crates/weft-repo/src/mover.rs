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

use crate::store::RepoStore;
use buffers::BufferPool;
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{GetOptions, GetRange};
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use weft_client::io::IoEngine;
#[cfg(test)]
use weft_client::io::ObjectTargets;
use weft_client::{ClientParams, Cluster};
use weft_proto::hsm::{Repo, RepoSpec, RestoreChunk};
use weft_proto::{Errno, ObjectId, WireError};
use weft_rpc::RequestContext;
use weft_rpc::metric::{MetricDef, MetricKind, Stat};

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

/// What a [`Mover`] has done since it was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MoverStats {
    /// Chunks restored (copied and synced).
    pub chunks: u64,
    /// Chunks that failed.
    pub chunk_errors: u64,
    /// Bytes fetched from stores.
    pub bytes_fetched: u64,
    /// Bytes written to OSTs.
    pub bytes_written: u64,
    /// Sub-range fetches attempted again after a transient store error.
    pub retries: u64,
    /// Fetches refused because the object changed since it was imported.
    pub stale: u64,
    /// Chunks that waited for room under a tiering high mark.
    pub room_waits: u64,
    /// Chunk parts handed to the server of their OSTs, which copied them (an MDS's mover).
    pub handed_off: u64,
}

/// Every figure of [`MoverStats`], as the MDT it restores for reports them
/// (`get_param mdt.*.mover.*`; Prometheus `weft_mdt_mover_*`).
pub const MOVER_STATS: [Stat<MoverStats>; 8] = [
    Stat::new(
        counter("mover.chunks", "Restore chunks copied and synced.").exported_as("mover_chunks"),
        |s| s.chunks,
    ),
    Stat::new(
        counter("mover.chunk_errors", "Restore chunks that failed.")
            .exported_as("mover_chunk_errors"),
        |s| s.chunk_errors,
    ),
    Stat::new(
        counter("mover.bytes_fetched", "Bytes fetched from stores.")
            .exported_as("mover_fetched_bytes"),
        |s| s.bytes_fetched,
    ),
    Stat::new(
        counter("mover.bytes_written", "Bytes written to OSTs by restores.")
            .exported_as("mover_written_bytes"),
        |s| s.bytes_written,
    ),
    Stat::new(
        counter(
            "mover.retries",
            "Fetches attempted again after a transient store error.",
        )
        .exported_as("mover_retries"),
        |s| s.retries,
    ),
    Stat::new(
        counter(
            "mover.stale",
            "Fetches refused because the object changed since its import.",
        )
        .exported_as("mover_stale"),
        |s| s.stale,
    ),
    Stat::new(
        counter(
            "mover.room_waits",
            "Restore chunks that waited for room under a tiering high mark.",
        )
        .exported_as("mover_room_waits"),
        |s| s.room_waits,
    ),
    Stat::new(
        counter(
            "mover.handed_off",
            "Restore chunk parts handed to the server of their OSTs, which copied them.",
        )
        .exported_as("mover_handed_off"),
        |s| s.handed_off,
    ),
];

/// A counter's declaration.
pub(crate) const fn counter(name: &'static str, help: &'static str) -> MetricDef {
    MetricDef::new(name, help, MetricKind::Counter)
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

/// Why fetching one sub-range failed.
enum FetchError {
    /// Worth another attempt (the store failed, the body was cut short).
    Transient(String),
    /// Final (the object is gone or changed, access refused).
    Final(WireError),
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

    /// What the mover has done so far.
    pub fn stats(&self) -> MoverStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        MoverStats {
            chunks: get(&c.chunks),
            chunk_errors: get(&c.chunk_errors),
            bytes_fetched: get(&c.bytes_fetched),
            bytes_written: get(&c.bytes_written),
            retries: get(&c.retries),
            stale: get(&c.stale),
            room_waits: get(&c.room_waits),
            handed_off: get(&c.handed_off),
        }
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

    /// The chunk of `pieces` split by the server of their OSTs (see [`by_server`]); the
    /// part of a server that refused a chunk within [`REFUSED_FOR`] is this mover's to
    /// copy (no server).
    fn parts_by_server(
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
    async fn hand_off(
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

    /// Copies the chunk (already checked), or only its bytes on OSTs `only`, from its store
    /// into the OST objects, then syncs every object written; answers the bytes copied.
    async fn copy(&self, chunk: &RestoreChunk, only: Option<&[u32]>) -> Result<u64, WireError> {
        let RestoreChunk {
            fid,
            layout,
            repo,
            archive,
            start,
            end,
        } = chunk;
        let (fid, repo, start, end) = (*fid, *repo, *start, *end);
        let spans = match only {
            None => vec![(start, end)],
            Some(osts) => {
                let pieces = weft_client::layout::map_range(layout, fid, start, end - start)
                    .map_err(|e| WireError::new(Errno::Inval, format!("file {fid}: {e}")))?;
                spans_on(&pieces, osts)
            }
        };
        let store = self.store(repo).await?;
        let key = Path::parse(&archive.key).map_err(|e| {
            WireError::new(
                Errno::Inval,
                format!("{:?} is not an object key: {e}", archive.key),
            )
        })?;
        let touched: Mutex<HashSet<(u32, ObjectId)>> = Mutex::new(HashSet::new());
        let bytes: u64 = spans.iter().map(|(a, b)| b - a).sum();
        let sub = self.config.sub_range;
        let ranges = spans.into_iter().flat_map(|(start, end)| {
            (0..(end - start).div_ceil(sub)).map(move |i| {
                let a = start + i * sub;
                Ok::<_, WireError>((a, a.saturating_add(sub).min(end)))
            })
        });
        let (store, key, touched) = (&store, &key, &touched);
        futures::stream::iter(ranges)
            .try_for_each_concurrent(self.config.in_flight, |(a, b)| async move {
                let pieces = weft_client::layout::map_range(layout, fid, a, b - a)
                    .map_err(|e| WireError::new(Errno::Inval, format!("file {fid}: {e}")))?;
                let data = self.fetch(store, key, archive, a, b).await?;
                self.io
                    .write(&RequestContext::new(), &pieces, &data, false)
                    .await
                    .map_err(WireError::from)?;
                self.counters
                    .bytes_written
                    .fetch_add(data.len() as u64, Ordering::Relaxed);
                touched
                    .lock()
                    .extend(pieces.iter().map(|p| (p.ost, p.object)));
                Ok(())
            })
            .await?;
        // OST writes are durable only once synced.
        let objects: Vec<(u32, ObjectId)> = touched.lock().drain().collect();
        futures::stream::iter(objects)
            .map(Ok::<_, WireError>)
            .try_for_each_concurrent(self.config.in_flight, |(ost, object)| async move {
                self.io
                    .sync(&RequestContext::new(), ost, object)
                    .await
                    .map_err(WireError::from)
            })
            .await?;
        Ok(bytes)
    }

    /// Repository `id`'s tiering policy, if any.
    fn tiering(&self, id: u32) -> Option<weft_proto::hsm::TieringPolicy> {
        match &self.repos {
            Repos::Cluster(c) => c.config().repo(id).and_then(|r| r.tiering),
            #[cfg(test)]
            Repos::Fixed(_) => None,
        }
    }

    /// Repository `id`'s store, opened (again, if its spec changed) as needed.
    async fn store(&self, id: u32) -> Result<RepoStore, WireError> {
        let Some(repo) = self.repos.find(id).await else {
            self.stores.lock().remove(&id);
            return Err(WireError::new(
                Errno::NoEnt,
                format!("repository {id} does not exist (any more)"),
            ));
        };
        let mut stores = self.stores.lock();
        if let Some((spec, store)) = stores.get(&id)
            && *spec == repo.spec
        {
            return Ok(store.clone());
        }
        let store =
            RepoStore::open(&repo.spec).map_err(|e| WireError::new(e.errno(), e.to_string()))?;
        stores.insert(id, (repo.spec, store.clone()));
        Ok(store)
    }

    /// Bytes `[a, b)` of the object, retried with backoff while the failure is transient.
    async fn fetch(
        &self,
        store: &RepoStore,
        key: &Path,
        archive: &weft_proto::hsm::ArchiveRef,
        a: u64,
        b: u64,
    ) -> Result<Bytes, WireError> {
        let mut delay = self.config.backoff;
        let mut attempt = 1;
        loop {
            match self.fetch_once(store, key, archive, a, b).await {
                Ok(data) => return Ok(data),
                Err(FetchError::Final(e)) => return Err(e),
                Err(FetchError::Transient(msg)) if attempt < self.config.attempts => {
                    tracing::debug!(url = store.url(), key = %key, a, b, attempt, error = %msg, "fetch failed; trying again");
                    self.counters.retries.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(delay).await;
                    delay = delay.saturating_mul(2);
                    attempt += 1;
                }
                Err(FetchError::Transient(msg)) => {
                    return Err(WireError::new(
                        Errno::Io,
                        format!(
                            "{}: fetching bytes {a}..{b} of {key} failed {attempt} times: {msg}",
                            store.url()
                        ),
                    ));
                }
            }
        }
    }

    async fn fetch_once(
        &self,
        store: &RepoStore,
        key: &Path,
        archive: &weft_proto::hsm::ArchiveRef,
        a: u64,
        b: u64,
    ) -> Result<Bytes, FetchError> {
        let opts = GetOptions {
            if_match: archive.etag.as_deref().map(quoted),
            range: Some(GetRange::Bounded(a..b)),
            ..Default::default()
        };
        let stale = |why: String| {
            self.counters.stale.fetch_add(1, Ordering::Relaxed);
            FetchError::Final(WireError::new(
                Errno::Stale,
                format!(
                    "{}: object {key} changed since it was imported ({why})",
                    store.url()
                ),
            ))
        };
        let got = match store.store().get_opts(key, opts).await {
            Ok(got) => got,
            Err(e) => return Err(classify(store, key, &e, stale)),
        };
        if let (Some(want), Some(have)) = (&archive.etag, &got.meta.e_tag)
            && etag_core(want) != etag_core(have)
        {
            return Err(stale(format!("entity tag {have}, not {want}")));
        }
        if got.meta.size != archive.size {
            return Err(stale(format!(
                "{} bytes, not {}",
                got.meta.size, archive.size
            )));
        }
        if got.range != (a..b) {
            return Err(FetchError::Transient(format!(
                "asked for bytes {a}..{b}, the store answers {:?}",
                got.range
            )));
        }
        // Into a page-aligned buffer, which the OST writes with `O_DIRECT` as it is: an
        // in-process call to an OST (the OSS's mover, `weft up`) would otherwise copy the
        // bytes once more to align them.
        let want = usize::try_from(b - a).map_err(|_| {
            FetchError::Final(WireError::new(
                Errno::Inval,
                format!("a range of {} bytes", b - a),
            ))
        })?;
        let (mut buf, pad) = self.buffers.take(want);
        let mut body = got.into_stream();
        while let Some(part) = body.next().await {
            let part = match part {
                Ok(p) => p,
                Err(e) => return Err(classify(store, key, &e, stale)),
            };
            self.counters
                .bytes_fetched
                .fetch_add(part.len() as u64, Ordering::Relaxed);
            if buf.len() - pad + part.len() > want {
                return Err(FetchError::Transient(format!(
                    "asked for {want} bytes at {a}, got more"
                )));
            }
            buf.extend_from_slice(&part);
        }
        if buf.len() - pad != want {
            return Err(FetchError::Transient(format!(
                "asked for {want} bytes at {a}, got {}",
                buf.len() - pad
            )));
        }
        Ok(self.buffers.freeze(buf, pad))
    }
}

/// The OSTs of `pieces` grouped by the address of their server (`address_of`, from the
/// MGS configuration; `None`: an OST unknown there), in the order the pieces name them.
fn by_server<'a>(
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

/// The file ranges of the pieces on OSTs `osts`, in file order, adjacent ones joined.
fn spans_on(pieces: &[weft_client::layout::Piece], osts: &[u32]) -> Vec<(u64, u64)> {
    let mut spans: Vec<(u64, u64)> = pieces
        .iter()
        .filter(|p| osts.contains(&p.ost))
        .map(|p| (p.file_offset, p.file_offset + p.len))
        .collect();
    spans.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(spans.len());
    for (a, b) in spans {
        match out.last_mut() {
            Some(last) if last.1 == a => last.1 = b,
            _ => out.push((a, b)),
        }
    }
    out
}

/// Whether an object store error is worth another attempt, as the error to answer.
fn classify(
    store: &RepoStore,
    key: &Path,
    e: &object_store::Error,
    stale: impl FnOnce(String) -> FetchError,
) -> FetchError {
    use object_store::Error as E;
    match e {
        E::Precondition { .. } => stale("its entity tag differs".into()),
        E::NotFound { .. } => FetchError::Final(WireError::new(
            Errno::NoEnt,
            format!("{}: object {key} is gone from the store", store.url()),
        )),
        E::PermissionDenied { .. }
        | E::Unauthenticated { .. }
        | E::InvalidPath { .. }
        | E::NotSupported { .. }
        | E::NotImplemented { .. }
        | E::NotModified { .. }
        | E::UnknownConfigurationKey { .. } => {
            let r = crate::RepoError::store(store.url(), e);
            FetchError::Final(WireError::new(r.errno(), r.to_string()))
        }
        _ => FetchError::Transient(e.to_string()),
    }
}

/// An entity tag without its weak marker and quotes.
fn etag_core(tag: &str) -> &str {
    tag.trim().trim_start_matches("W/").trim_matches('"')
}

/// An entity tag as `If-Match` wants it (quoted).
fn quoted(tag: &str) -> String {
    let t = tag.trim();
    if t.starts_with('"') || t.starts_with("W/") {
        t.to_string()
    } else {
        format!("\"{t}\"")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::{ObjectStoreExt, PutPayload};
    use weft_client::io::fake::MemObjects;
    use weft_proto::Fid;
    use weft_proto::hsm::{ArchiveRef, RepoPolicy};
    use weft_proto::layout::{EOF, Layout, LayoutComponent};
    use weft_proto::time::Timestamp;

    const FID: Fid = Fid {
        seq: 0x200000400,
        oid: 7,
        ver: 0,
    };

    fn layout(stripe: u64, osts: u32) -> Layout {
        Layout {
            generation: 1,
            components: vec![LayoutComponent {
                id: 1,
                start: 0,
                end: EOF,
                stripe_size: stripe,
                stripe_count: osts as i32,
                pool: None,
                osts: (0..osts).collect(),
                object_fid: None,
                compress: Default::default(),
            }],
        }
    }

    fn repo(dir: &std::path::Path) -> Repo {
        Repo {
            id: 1,
            spec: RepoSpec {
                path: "/data".into(),
                url: format!("file://{}", dir.display()),
                endpoint: None,
                region: None,
                path_style: false,
                import_policy: RepoPolicy::default(),
                export_policy: RepoPolicy::default(),
                import_metadata: false,
                events: None,
                chunk_size: 1 << 30,
            },
            dir: Fid::ROOT,
            created: Timestamp::default(),
            tiering: None,
        }
    }

    fn config() -> MoverConfig {
        MoverConfig {
            sub_range: 10_000,
            in_flight: 3,
            attempts: 2,
            backoff: Duration::from_millis(1),
            ost_retry: Duration::from_millis(10),
            role: MoverRole::Mds,
        }
    }

    /// The bytes the file holds, read back from the objects through the layout.
    fn file_bytes(mem: &MemObjects, layout: &Layout, len: u64) -> Vec<u8> {
        let pieces = weft_client::layout::map_range(layout, FID, 0, len).unwrap();
        let mut out = Vec::new();
        for p in pieces {
            let obj = mem.object(p.ost, p.object).unwrap_or_default();
            let (s, e) = (p.object_offset as usize, (p.object_offset + p.len) as usize);
            let mut part = obj
                .get(s.min(obj.len())..e.min(obj.len()))
                .unwrap_or(&[])
                .to_vec();
            part.resize(p.len as usize, 0);
            out.extend(part);
        }
        out
    }

    async fn setup(data: &[u8]) -> (tempfile::TempDir, MemObjects, Mover, ArchiveRef) {
        let dir = tempfile::tempdir().unwrap();
        let r = repo(dir.path());
        let store = RepoStore::open(&r.spec).unwrap();
        let key = Path::from("obj");
        store
            .store()
            .put(&key, PutPayload::from(data.to_vec()))
            .await
            .unwrap();
        let meta = store.store().head(&key).await.unwrap();
        let archive = ArchiveRef {
            key: "obj".into(),
            etag: meta.e_tag.clone(),
            size: data.len() as u64,
            modified: Timestamp::default(),
        };
        let mem = MemObjects::new();
        let mover = Mover::for_tests(vec![r], Arc::new(mem.clone()), config());
        (dir, mem, mover, archive)
    }

    fn chunk(layout: &Layout, archive: &ArchiveRef, start: u64, end: u64) -> RestoreChunk {
        RestoreChunk {
            fid: FID,
            layout: layout.clone(),
            repo: 1,
            archive: archive.clone(),
            start,
            end,
        }
    }

    #[tokio::test]
    async fn chunks_land_where_the_layout_puts_them() {
        let data: Vec<u8> = (0..123_457u32).map(|i| (i * 31 % 251) as u8).collect();
        let (_dir, mem, mover, archive) = setup(&data).await;
        let l = layout(16 << 10, 3);
        let n = data.len() as u64;
        mover
            .restore_chunk(chunk(&l, &archive, 40_000, 90_001))
            .await
            .unwrap();
        mover
            .restore_chunk(chunk(&l, &archive, 0, 40_000))
            .await
            .unwrap();
        mover
            .restore_chunk(chunk(&l, &archive, 90_001, n))
            .await
            .unwrap();
        assert_eq!(file_bytes(&mem, &l, n), data);
        let s = mover.stats();
        assert_eq!((s.chunks, s.chunk_errors), (3, 0));
        assert_eq!((s.bytes_fetched, s.bytes_written), (n, n));
        assert!(
            !mem.calls_of(weft_client::io::Op::Sync).is_empty(),
            "objects synced"
        );
    }

    #[tokio::test]
    async fn changed_missing_and_unknown_are_refused() {
        let data = vec![7u8; 50_000];
        let (dir, mem, mover, archive) = setup(&data).await;
        let l = layout(16 << 10, 2);
        let mut other = archive.clone();
        other.etag = Some("\"not-the-tag\"".into());
        let e = mover
            .restore_chunk(chunk(&l, &other, 0, 50_000))
            .await
            .unwrap_err();
        assert_eq!(e.errno, Errno::Stale, "{e:?}");
        let mut smaller = archive.clone();
        smaller.size = 60_000;
        smaller.etag = None;
        let e = mover
            .restore_chunk(chunk(&l, &smaller, 0, 10))
            .await
            .unwrap_err();
        assert_eq!(e.errno, Errno::Stale, "{e:?}");
        let mut gone = archive.clone();
        gone.key = "nothing-here".into();
        gone.etag = None;
        let e = mover
            .restore_chunk(chunk(&l, &gone, 0, 10))
            .await
            .unwrap_err();
        assert_eq!(e.errno, Errno::NoEnt, "{e:?}");
        let mut c = chunk(&l, &archive, 0, 10);
        c.repo = 9;
        let e = mover.restore_chunk(c).await.unwrap_err();
        assert_eq!(e.errno, Errno::NoEnt, "{e:?}");
        let e = mover
            .restore_chunk(chunk(&l, &archive, 10, 50_001))
            .await
            .unwrap_err();
        assert_eq!(e.errno, Errno::Inval, "{e:?}");
        assert!(
            mem.calls_of(weft_client::io::Op::Write).is_empty(),
            "nothing written"
        );
        drop(dir);
    }

    #[test]
    fn a_chunk_splits_by_the_servers_of_its_osts() {
        // OSTs 0 and 1 on server a, 2 on b, 3 unknown.
        let address = |ost: u32| match ost {
            0 | 1 => Some("a"),
            2 => Some("b"),
            _ => None,
        };
        let l = layout(1 << 20, 4);
        let pieces = |start: u64, end: u64| {
            weft_client::layout::map_range(&l, FID, start, end - start).unwrap()
        };
        // Within stripe 1 (OST 1); across stripes 0 and 1 (both on a).
        assert_eq!(
            by_server(&pieces(1 << 20, 2 << 20), address),
            [(Some("a"), vec![1])]
        );
        assert_eq!(
            by_server(&pieces(100, (2 << 20) - 1), address),
            [(Some("a"), vec![0, 1])]
        );
        // Two rounds of the stripes: a, b and the unknown OST, each once.
        assert_eq!(
            by_server(&pieces(0, 8 << 20), address),
            [
                (Some("a"), vec![0, 1]),
                (Some("b"), vec![2]),
                (None, vec![3])
            ]
        );
        assert_eq!(by_server(&[], address), []);
        // The file ranges of a server's OSTs, adjacent stripes joined.
        let p = pieces(100, (8 << 20) - 5);
        assert_eq!(spans_on(&p, &[0, 1]), [(100, 2 << 20), (4 << 20, 6 << 20)]);
        assert_eq!(
            spans_on(&p, &[3]),
            [(3 << 20, 4 << 20), (7 << 20, (8 << 20) - 5)]
        );
        assert_eq!(spans_on(&p, &[0, 1, 2, 3]), [(100, (8 << 20) - 5)]);
        assert_eq!(spans_on(&p, &[9]), []);
    }

    #[tokio::test]
    async fn parts_on_some_osts_fill_only_their_stripes() {
        let data: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let (_dir, mem, mover, archive) = setup(&data).await;
        let l = layout(16 << 10, 3);
        let n = data.len() as u64;
        mover
            .restore_part(chunk(&l, &archive, 0, n), &[1])
            .await
            .unwrap();
        let s = mover.stats();
        let on_1: u64 = weft_client::layout::map_range(&l, FID, 0, n)
            .unwrap()
            .iter()
            .filter(|p| p.ost == 1)
            .map(|p| p.len)
            .sum();
        assert_eq!((s.bytes_fetched, s.bytes_written), (on_1, on_1));
        assert!(
            mem.calls_of(weft_client::io::Op::Write)
                .iter()
                .all(|c| c.ost == 1),
            "only OST 1 written"
        );
        mover
            .restore_part(chunk(&l, &archive, 0, n), &[0, 2])
            .await
            .unwrap();
        assert_eq!(file_bytes(&mem, &l, n), data);
        assert_eq!(mover.stats().bytes_fetched, n);
        // A chunk too large for a part is refused before anything is listed.
        let mut big = chunk(&l, &archive, 0, n);
        big.end = MAX_PART_CHUNK + 1;
        let e = mover.restore_part(big, &[0]).await.unwrap_err();
        assert_eq!(e.errno, Errno::Inval);
    }

    #[test]
    fn entity_tags_compare_without_quotes() {
        assert_eq!(etag_core("\"abc\""), "abc");
        assert_eq!(etag_core("W/\"abc\""), "abc");
        assert_eq!(quoted("abc"), "\"abc\"");
        assert_eq!(quoted("\"abc\""), "\"abc\"");
    }
}
