//! The management service: the file system's configuration and every request that reads or
//! changes it.
//!
//! Changes are serialised by one async writer lock; each builds the next configuration on a
//! copy, bumps the version, writes it durably (off the reactor) and only then publishes it
//! and notifies subscribers, so nothing is ever announced that a restart could forget.
//! Heartbeats touch only in-memory liveness; a target's state flips (and is persisted) when
//! it goes silent for the heartbeat timeout or speaks again.

use crate::error::MgsError;
use crate::names::{
    check_address, check_param_name, check_param_value, check_pool_name, is_valid_fsname,
};
use crate::state::{self, Record, STATE_FILE};
use crate::subscribers::{ConfigSubscriber, Subscribers};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use uuid::Uuid;
use weft_durable::TMP_SUFFIX;
use weft_proto::fid::FIRST_GRANTED_SEQ;
use weft_proto::layout::DEFAULT_STRIPE_SIZE;
use weft_proto::mgs::{FldEntry, FsConfig, MgsReply, MgsRequest, TargetInfo, TargetState};
use weft_proto::{Errno, FidSeqRange, LayoutTemplate, TargetId, TargetKind, WireError, WireResult};
use weft_rpc::metric::{MetricDef, MetricKind, Stat};

/// Most sequences one [`MgsRequest::AllocSeq`] may ask for.
pub const MAX_SEQ_PER_GRANT: u32 = 1024;
/// Largest target index (four hex digits, as in Lustre's `OST001f`).
pub const MAX_TARGET_INDEX: u32 = 0xffff;
/// Most persistent parameters.
pub const MAX_PARAMS: usize = 16384;
/// Most pools.
pub const MAX_POOLS: usize = 1024;
/// Most failover addresses one target may list.
pub const MAX_FAILOVER_ADDRESSES: usize = 8;
/// Default time without a heartbeat after which a target is marked inactive.
pub const DEFAULT_HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(30);

/// Tunables of [`Mgs::open_with`].
#[derive(Debug, Clone)]
pub struct MgsOptions {
    /// A target not heard from for this long is marked [`TargetState::Inactive`].
    pub heartbeat_timeout: Duration,
}

impl Default for MgsOptions {
    fn default() -> Self {
        Self {
            heartbeat_timeout: DEFAULT_HEARTBEAT_TIMEOUT,
        }
    }
}

/// When a target was last heard from: a monotonic instant for the timeout, wall-clock
/// seconds for the configuration's `last_seen`.
#[derive(Debug, Clone, Copy)]
struct Liveness {
    heard: Instant,
    last_seen: u64,
}

impl Liveness {
    fn now() -> Self {
        Self {
            heard: Instant::now(),
            last_seen: unix_now(),
        }
    }
}

/// How a registration of a known target (same UUID) from a new address moved it.
enum Move {
    /// To one of the failover addresses it had listed.
    Failover { from: String },
    /// To an address it had not listed.
    Elsewhere { from: String },
}

impl Move {
    fn from(old: &TargetInfo, to: &str) -> Self {
        let from = old.address.clone();
        match old.failover.iter().any(|a| a == to) {
            true => Move::Failover { from },
            false => Move::Elsewhere { from },
        }
    }
}

/// The MGS's counters, as [`Mgs::stats`] reads them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MgsStats {
    /// Targets taken over by one of their failover servers (a registration of the same
    /// UUID from a listed failover address).
    pub target_failovers: u64,
    /// Targets that re-registered from an address they had not listed.
    pub target_moves: u64,
}

/// The figures of [`MgsStats`], for the Prometheus endpoint (`weft_mgs_*`).
pub const MGS_STATS: [Stat<MgsStats>; 2] = [
    Stat::new(
        MetricDef::new(
            "target_failovers",
            "Targets taken over by one of their failover servers.",
            MetricKind::Counter,
        ),
        |s| s.target_failovers,
    ),
    Stat::new(
        MetricDef::new(
            "target_moves",
            "Targets that re-registered from an address they had not listed.",
            MetricKind::Counter,
        ),
        |s| s.target_moves,
    ),
];

#[derive(Debug, Default)]
struct Counters {
    failovers: AtomicU64,
    moves: AtomicU64,
}

/// The management service of one file system.
pub struct Mgs {
    dir: PathBuf,
    uuid: Uuid,
    fsname: String,
    options: MgsOptions,
    /// The published state: what the last durable write holds.
    state: Mutex<Record>,
    /// Heartbeat times, in memory only.
    live: Mutex<HashMap<TargetId, Liveness>>,
    /// Serialises changes (held across the durable write).
    writer: tokio::sync::Mutex<()>,
    subscribers: Subscribers,
    counters: Counters,
    /// Keeps the directory's exclusive lock.
    _dir_lock: std::fs::File,
}

impl std::fmt::Debug for Mgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mgs")
            .field("dir", &self.dir)
            .field("fsname", &self.fsname)
            .finish_non_exhaustive()
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

pub(crate) fn err(errno: Errno, message: impl Into<String>) -> WireError {
    WireError::new(errno, message)
}

impl Mgs {
    /// Opens the MGS in `dir` with default options; see [`Mgs::open_with`].
    pub fn open(dir: &Path, fsname: Option<&str>) -> Result<Arc<Mgs>, MgsError> {
        Self::open_with(dir, fsname, MgsOptions::default())
    }

    /// Opens the MGS in `dir`. An empty (or missing) directory is formatted for `fsname`,
    /// which is then required; an existing one must belong to `fsname` when given.
    ///
    /// Does blocking I/O. When called inside a tokio runtime it also starts the task that
    /// marks silent targets inactive; it stops when the last `Arc<Mgs>` is dropped.
    pub fn open_with(
        dir: &Path,
        fsname: Option<&str>,
        options: MgsOptions,
    ) -> Result<Arc<Mgs>, MgsError> {
        if let Some(name) = fsname.filter(|n| !is_valid_fsname(n)) {
            return Err(MgsError::InvalidFsname(name.to_owned()));
        }
        let io = |source| MgsError::Io {
            path: dir.to_owned(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        let dir_lock = std::fs::File::open(dir).map_err(io)?;
        // Held for the service's lifetime: two MGSs on one directory would grant the same
        // sequences and overwrite each other's changes.
        rustix::fs::flock(
            &dir_lock,
            rustix::fs::FlockOperation::NonBlockingLockExclusive,
        )
        .map_err(|e| {
            if e == rustix::io::Errno::WOULDBLOCK {
                MgsError::Busy(dir.to_owned())
            } else {
                io(e.into())
            }
        })?;
        let record = match state::load(dir)? {
            Some(r) => {
                if let Some(name) = fsname.filter(|n| *n != r.config.fsname) {
                    return Err(MgsError::WrongFsname {
                        found: r.config.fsname,
                        requested: name.to_owned(),
                    });
                }
                r
            }
            None => format(dir, fsname)?,
        };
        // Every known target gets a full timeout from now to speak up again; `last_seen`
        // keeps saying when it was really last heard from.
        let live = record
            .config
            .targets
            .iter()
            .map(|t| {
                (
                    t.id,
                    Liveness {
                        heard: Instant::now(),
                        last_seen: t.last_seen,
                    },
                )
            })
            .collect();
        let mgs = Arc::new(Mgs {
            dir: dir.to_owned(),
            uuid: record.mgs_uuid,
            fsname: record.config.fsname.clone(),
            options,
            state: Mutex::new(record),
            live: Mutex::new(live),
            writer: tokio::sync::Mutex::new(()),
            subscribers: Subscribers::default(),
            counters: Counters::default(),
            _dir_lock: dir_lock,
        });
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(liveness_task(Arc::downgrade(&mgs)));
        }
        tracing::info!(dir = %dir.display(), fsname = %mgs.fsname, "MGS opened");
        Ok(mgs)
    }

    /// The MGS's UUID.
    pub fn uuid(&self) -> Uuid {
        self.uuid
    }

    /// The file system's name.
    pub fn fsname(&self) -> &str {
        &self.fsname
    }

    /// The data directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The heartbeat timeout in force.
    pub fn heartbeat_timeout(&self) -> Duration {
        self.options.heartbeat_timeout
    }

    /// The configuration as it is now, with the latest heartbeat times.
    pub fn config(&self) -> FsConfig {
        let mut config = self.state.lock().config.clone();
        let live = self.live.lock();
        for t in &mut config.targets {
            if let Some(l) = live.get(&t.id) {
                t.last_seen = t.last_seen.max(l.last_seen);
            }
        }
        config
    }

    /// Adds (or replaces) the subscriber of connection `conn_id`.
    pub fn subscribe(&self, conn_id: u64, subscriber: Arc<dyn ConfigSubscriber>) {
        self.subscribers.insert(conn_id, subscriber);
    }

    /// Whether connection `conn_id` has a subscriber.
    pub fn is_subscribed(&self, conn_id: u64) -> bool {
        self.subscribers.contains(conn_id)
    }

    /// Forgets the subscriber of connection `conn_id`.
    pub fn unsubscribe(&self, conn_id: u64) {
        self.subscribers.remove(conn_id);
    }

    /// How many subscribers there are.
    pub fn subscriber_count(&self) -> usize {
        self.subscribers.len()
    }

    /// Serves one request.
    pub async fn execute(&self, request: MgsRequest) -> WireResult<MgsReply> {
        match request {
            MgsRequest::Register {
                id,
                uuid,
                address,
                failover,
                replace,
            } => self.register(id, uuid, address, failover, replace).await,
            MgsRequest::Heartbeat { id, uuid } => self.heartbeat(id, uuid).await,
            MgsRequest::GetConfig => Ok(MgsReply::Config(self.config())),
            MgsRequest::GetConfigIfNewer { have } => {
                let version = self.state.lock().config.version;
                Ok(match version != have {
                    true => MgsReply::Config(self.config()),
                    false => MgsReply::Ok,
                })
            }
            MgsRequest::AllocSeq { mdt, count } => self.alloc_seq(mdt, count).await,
            MgsRequest::SetParam { name, value } => self.set_param(name, value).await,
            MgsRequest::PoolNew { pool } => self.pool_new(pool).await,
            MgsRequest::PoolAdd { pool, osts } => self.pool_add(pool, osts).await,
            MgsRequest::PoolRemove { pool, osts } => self.pool_remove(pool, osts).await,
            MgsRequest::PoolDestroy { pool } => self.pool_destroy(pool).await,
            MgsRequest::SetDefaultLayout { template } => self.set_default_layout(template).await,
            MgsRequest::RepoCreate { spec, dir } => self.repo_create(spec, dir).await,
            MgsRequest::RepoDelete { id } => self.repo_delete(id).await,
            MgsRequest::RepoTiering { id, tiering } => self.repo_tiering(id, tiering).await,
            MgsRequest::RepoUpdate { id, change } => self.repo_update(id, change).await,
            MgsRequest::TaskStart { repo, kind, path } => self.task_start(repo, kind, path).await,
            MgsRequest::TaskReport {
                id,
                done,
                failed,
                bytes,
                checkpoint,
                state,
            } => {
                let report = repos::Report {
                    done,
                    failed,
                    bytes,
                    checkpoint,
                    state,
                };
                self.task_report(id, report).await
            }
            MgsRequest::TaskList => Ok(MgsReply::Tasks(self.state.lock().tasks.clone())),
        }
    }

    /// Marks targets silent for longer than the heartbeat timeout inactive; returns how
    /// many changed. Runs periodically on its own; public for tests and tools.
    pub async fn check_liveness(&self) -> WireResult<usize> {
        let timeout = self.options.heartbeat_timeout;
        let silent = |rec: &Record, live: &mut HashMap<TargetId, Liveness>| -> Vec<TargetId> {
            rec.config
                .targets
                .iter()
                .filter(|t| t.state == TargetState::Active)
                .filter(|t| {
                    live.entry(t.id)
                        .or_insert_with(Liveness::now)
                        .heard
                        .elapsed()
                        > timeout
                })
                .map(|t| t.id)
                .collect()
        };
        let any = !silent(&self.state.lock(), &mut self.live.lock()).is_empty();
        if !any {
            return Ok(0);
        }
        self.mutate(|rec| {
            // Decide again under the writer lock: a heartbeat may have arrived meanwhile.
            let ids = silent(rec, &mut self.live.lock());
            for t in rec.config.targets.iter_mut().filter(|t| ids.contains(&t.id)) {
                tracing::warn!(target = %t.id, address = %t.address, "no heartbeat within {timeout:?}: marking inactive");
                t.state = TargetState::Inactive;
            }
            Ok((!ids.is_empty(), ids.len()))
        })
        .await
    }

    /// Registers target `id`, or moves it. The rule: a target is its UUID, written when
    /// it was formatted and kept in its data directory. A registration with the recorded
    /// UUID is accepted from any address and makes that address the target's (with the
    /// failover addresses it names): only a process holding the target's storage knows
    /// the UUID, and only one process at a time holds it (the OST directory's `flock`),
    /// so the latest registration is the server that has the storage. Refusing addresses
    /// outside the recorded list would only forbid moving a target without a failover
    /// list (an OSS restarted on another port or host), which has always worked. Another
    /// UUID under the same index is refused unless `replace` is set (a reformatted target).
    /// A move to one of the recorded failover addresses counts as a failover
    /// (`target_failovers`), any other move as `target_moves`.
    async fn register(
        &self,
        id: TargetId,
        uuid: Uuid,
        address: String,
        failover: Vec<String>,
        replace: bool,
    ) -> WireResult<MgsReply> {
        if id.kind == TargetKind::Mgs {
            return Err(err(Errno::Inval, "the MGS does not register with itself"));
        }
        if id.index > MAX_TARGET_INDEX {
            return Err(err(
                Errno::Inval,
                format!(
                    "target index {} is above the maximum {MAX_TARGET_INDEX}",
                    id.index
                ),
            ));
        }
        check_address(&address)?;
        if failover.len() > MAX_FAILOVER_ADDRESSES {
            return Err(err(
                Errno::Inval,
                format!(
                    "{} failover addresses; at most {MAX_FAILOVER_ADDRESSES}",
                    failover.len()
                ),
            ));
        }
        for a in &failover {
            check_address(a)?;
        }
        // The target's own address is not a failover of itself, and each is tried once.
        let mut others: Vec<String> = Vec::with_capacity(failover.len());
        for a in failover {
            if a != address && !others.contains(&a) {
                others.push(a);
            }
        }
        let failover = others;
        let now = unix_now();
        let moved = self
            .mutate(|rec| {
                let targets = &mut rec.config.targets;
                let fresh = TargetInfo {
                    id,
                    uuid,
                    address: address.clone(),
                    state: TargetState::Active,
                    last_seen: now,
                    failover: failover.clone(),
                };
                match targets.iter_mut().find(|t| t.id == id) {
                    Some(t) if t.uuid == uuid || replace => {
                        let changed = t.uuid != uuid
                            || t.address != address
                            || t.failover != failover
                            || t.state != TargetState::Active;
                        if t.uuid != uuid {
                            tracing::warn!(target = %id, old = %t.uuid, new = %uuid, "target replaced");
                        }
                        let moved = (t.uuid == uuid && t.address != address)
                            .then(|| Move::from(t, &address));
                        *t = fresh;
                        Ok((changed, moved))
                    }
                    Some(t) => Err(err(
                        Errno::Exist,
                        format!(
                            "{id} is already registered with UUID {} at {}; this target has UUID {uuid} \
                             (a reformatted target must register with replace)",
                            t.uuid, t.address
                        ),
                    )),
                    None => {
                        let pos = targets.partition_point(|t| t.id < id);
                        targets.insert(pos, fresh);
                        tracing::info!(target = %id, %uuid, "target registered");
                        Ok((true, None))
                    }
                }
            })
            .await?;
        match moved {
            Some(Move::Failover { from }) => {
                self.counters.failovers.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(target = %id, %from, to = %address, "target failed over to its failover server");
            }
            Some(Move::Elsewhere { from }) => {
                self.counters.moves.fetch_add(1, Ordering::Relaxed);
                tracing::info!(target = %id, %from, to = %address, "target moved to an address it did not list");
            }
            None => {}
        }
        self.live.lock().insert(id, Liveness::now());
        Ok(MgsReply::Registered(self.config()))
    }

    /// The MGS's counters since it started.
    pub fn stats(&self) -> MgsStats {
        MgsStats {
            target_failovers: self.counters.failovers.load(Ordering::Relaxed),
            target_moves: self.counters.moves.load(Ordering::Relaxed),
        }
    }

    async fn heartbeat(&self, id: TargetId, uuid: Uuid) -> WireResult<MgsReply> {
        let active = {
            let rec = self.state.lock();
            let t = rec
                .config
                .target(id)
                .ok_or_else(|| err(Errno::NoEnt, format!("{id} is not registered")))?;
            if t.uuid != uuid {
                return Err(err(
                    Errno::Stale,
                    format!(
                        "{id} is registered with UUID {}, not {uuid}: it was replaced",
                        t.uuid
                    ),
                ));
            }
            t.state == TargetState::Active
        };
        self.live.lock().insert(id, Liveness::now());
        if !active {
            self.mutate(|rec| {
                let t = rec
                    .config
                    .targets
                    .iter_mut()
                    .find(|t| t.id == id && t.uuid == uuid);
                match t {
                    Some(t) if t.state != TargetState::Active => {
                        tracing::info!(target = %id, "heard again: marking active");
                        t.state = TargetState::Active;
                        t.last_seen = unix_now();
                        Ok((true, ()))
                    }
                    _ => Ok((false, ())),
                }
            })
            .await?;
        }
        Ok(MgsReply::Ok)
    }

    async fn alloc_seq(&self, mdt: u32, count: u32) -> WireResult<MgsReply> {
        if !(1..=MAX_SEQ_PER_GRANT).contains(&count) {
            return Err(err(
                Errno::Inval,
                format!("sequence count {count} is not in 1..={MAX_SEQ_PER_GRANT}"),
            ));
        }
        if mdt > MAX_TARGET_INDEX {
            return Err(err(
                Errno::Inval,
                format!("MDT index {mdt} is above the maximum {MAX_TARGET_INDEX}"),
            ));
        }
        let range = self
            .mutate(|rec| {
                let start = rec.next_seq;
                let end = start
                    .checked_add(u64::from(count))
                    .ok_or_else(|| err(Errno::Overflow, "FID sequence space exhausted"))?;
                rec.next_seq = end;
                let fld = &mut rec.config.fld;
                match fld
                    .iter_mut()
                    .find(|e| e.mdt == mdt && e.range.end == start)
                {
                    Some(e) => e.range.end = end,
                    None => fld.push(FldEntry {
                        range: FidSeqRange { start, end },
                        mdt,
                    }),
                }
                Ok((true, FidSeqRange { start, end }))
            })
            .await?;
        tracing::info!(
            mdt,
            start = range.start,
            end = range.end,
            "granted FID sequences"
        );
        Ok(MgsReply::Seq(range))
    }

    async fn set_param(&self, name: String, value: Option<String>) -> WireResult<MgsReply> {
        check_param_name(&name)?;
        if let Some(v) = &value {
            check_param_value(v)?;
        }
        self.mutate(|rec| {
            let params = &mut rec.config.params;
            match value {
                None => Ok((params.remove(&name).is_some(), ())),
                Some(v) => {
                    if params.get(&name) == Some(&v) {
                        return Ok((false, ()));
                    }
                    if !params.contains_key(&name) && params.len() >= MAX_PARAMS {
                        return Err(err(
                            Errno::NoSpc,
                            format!("too many parameters (at most {MAX_PARAMS})"),
                        ));
                    }
                    params.insert(name, v);
                    Ok((true, ()))
                }
            }
        })
        .await?;
        Ok(MgsReply::Ok)
    }

    async fn pool_new(&self, pool: String) -> WireResult<MgsReply> {
        check_pool_name(&pool)?;
        self.mutate(|rec| {
            let pools = &mut rec.config.pools;
            if pools.contains_key(&pool) {
                return Err(err(Errno::Exist, format!("pool {pool} already exists")));
            }
            if pools.len() >= MAX_POOLS {
                return Err(err(
                    Errno::NoSpc,
                    format!("too many pools (at most {MAX_POOLS})"),
                ));
            }
            pools.insert(pool, Vec::new());
            Ok((true, ()))
        })
        .await?;
        Ok(MgsReply::Ok)
    }

    async fn pool_add(&self, pool: String, osts: Vec<u32>) -> WireResult<MgsReply> {
        check_pool_name(&pool)?;
        self.mutate(|rec| {
            let config = &mut rec.config;
            if let Some(missing) = osts
                .iter()
                .find(|i| config.target(TargetId::ost(**i)).is_none())
            {
                return Err(err(
                    Errno::NoEnt,
                    format!("{} is not registered", TargetId::ost(*missing)),
                ));
            }
            let members = config.pools.get_mut(&pool).ok_or_else(|| no_pool(&pool))?;
            let before = members.len();
            members.extend_from_slice(&osts);
            members.sort_unstable();
            members.dedup();
            Ok((members.len() != before, ()))
        })
        .await?;
        Ok(MgsReply::Ok)
    }

    async fn pool_remove(&self, pool: String, osts: Vec<u32>) -> WireResult<MgsReply> {
        check_pool_name(&pool)?;
        self.mutate(|rec| {
            let members = rec
                .config
                .pools
                .get_mut(&pool)
                .ok_or_else(|| no_pool(&pool))?;
            if let Some(missing) = osts.iter().find(|i| !members.contains(i)) {
                return Err(err(
                    Errno::NoEnt,
                    format!("{} is not in pool {pool}", TargetId::ost(*missing)),
                ));
            }
            let before = members.len();
            members.retain(|i| !osts.contains(i));
            Ok((members.len() != before, ()))
        })
        .await?;
        Ok(MgsReply::Ok)
    }

    async fn pool_destroy(&self, pool: String) -> WireResult<MgsReply> {
        check_pool_name(&pool)?;
        self.mutate(|rec| {
            let members = rec.config.pools.get(&pool).ok_or_else(|| no_pool(&pool))?;
            if !members.is_empty() {
                return Err(err(
                    Errno::NotEmpty,
                    format!(
                        "pool {pool} still has {} OSTs; remove them first",
                        members.len()
                    ),
                ));
            }
            rec.config.pools.remove(&pool);
            Ok((true, ()))
        })
        .await?;
        Ok(MgsReply::Ok)
    }

    async fn set_default_layout(&self, template: LayoutTemplate) -> WireResult<MgsReply> {
        template
            .validate()
            .map_err(|e| err(Errno::Inval, format!("default layout refused: {e}")))?;
        for c in &template.components {
            if let Some(pool) = &c.pool {
                check_pool_name(pool)?;
            }
        }
        self.mutate(|rec| {
            let changed = rec.config.default_layout != template;
            rec.config.default_layout = template;
            Ok((changed, ()))
        })
        .await?;
        Ok(MgsReply::Ok)
    }

    /// Applies `change` to a copy of the state; if it reports a change, bumps the version,
    /// persists durably, publishes, and notifies subscribers. Nothing is published when the
    /// change fails or cannot be persisted.
    pub(crate) async fn mutate<R>(
        &self,
        change: impl FnOnce(&mut Record) -> WireResult<(bool, R)>,
    ) -> WireResult<R> {
        let _writer = self.writer.lock().await;
        let mut next = self.state.lock().clone();
        let (changed, out) = change(&mut next)?;
        if !changed {
            return Ok(out);
        }
        next.config.version += 1;
        {
            // Persist the latest heartbeat times along with the change.
            let live = self.live.lock();
            for t in &mut next.config.targets {
                if let Some(l) = live.get(&t.id) {
                    t.last_seen = t.last_seen.max(l.last_seen);
                }
            }
        }
        let bytes =
            state::encode(&next).map_err(|e| err(Errno::Io, format!("encoding MGS state: {e}")))?;
        let path = self.dir.join(STATE_FILE);
        tokio::task::spawn_blocking(move || weft_durable::write_durably(&path, &bytes))
            .await
            .map_err(|e| err(Errno::Io, format!("MGS state write task failed: {e}")))?
            .map_err(|e| {
                tracing::error!(error = %e, "cannot persist the MGS state; change refused");
                err(Errno::Io, format!("persisting MGS state: {e}"))
            })?;
        let version = next.config.version;
        *self.state.lock() = next;
        drop(_writer);
        self.subscribers.notify(version);
        Ok(out)
    }
}

fn no_pool(pool: &str) -> WireError {
    err(Errno::NoEnt, format!("pool {pool} does not exist"))
}

/// Periodically marks silent targets inactive, until the MGS is dropped.
async fn liveness_task(mgs: Weak<Mgs>) {
    let period = match mgs.upgrade() {
        Some(m) => (m.options.heartbeat_timeout / 4).max(Duration::from_millis(10)),
        None => return,
    };
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(m) = mgs.upgrade() else { return };
        if let Err(e) = m.check_liveness().await {
            tracing::warn!(error = %e, "liveness check failed");
        }
    }
}

/// Creates the state of a new file system in an empty directory.
fn format(dir: &Path, fsname: Option<&str>) -> Result<Record, MgsError> {
    let fsname = fsname.ok_or_else(|| MgsError::NeedFsname(dir.to_owned()))?;
    for entry in std::fs::read_dir(dir).map_err(|source| MgsError::Io {
        path: dir.to_owned(),
        source,
    })? {
        let entry = entry.map_err(|source| MgsError::Io {
            path: dir.to_owned(),
            source,
        })?;
        // A temporary file of an interrupted first write is the only thing allowed.
        if !entry.file_name().to_string_lossy().ends_with(TMP_SUFFIX) {
            return Err(MgsError::NotEmpty(dir.to_owned()));
        }
    }
    let record = Record {
        mgs_uuid: Uuid::new_v4(),
        next_seq: FIRST_GRANTED_SEQ,
        config: FsConfig {
            fsname: fsname.to_owned(),
            fs_uuid: Uuid::new_v4(),
            version: 1,
            targets: Vec::new(),
            params: Default::default(),
            pools: Default::default(),
            fld: Vec::new(),
            default_layout: LayoutTemplate::raid0(1, DEFAULT_STRIPE_SIZE, -1),
            repos: Vec::new(),
        },
        tasks: Vec::new(),
        next_repo: 1,
    };
    state::store(dir, &record).map_err(|source| MgsError::Io {
        path: dir.join(STATE_FILE),
        source,
    })?;
    tracing::info!(dir = %dir.display(), fsname, fs_uuid = %record.config.fs_uuid, "created file system configuration");
    Ok(record)
}

mod repos;
#[cfg(test)]
mod tests;
