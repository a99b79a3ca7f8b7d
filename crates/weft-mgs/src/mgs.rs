//! The management service: the file system's configuration and every request that reads or
//! changes it.
//!
//! Changes are serialised by one async writer lock; each builds the next configuration on a
//! copy, bumps the version, writes it durably (off the reactor) and only then publishes it
//! and notifies subscribers, so nothing is ever announced that a restart could forget.
//! Heartbeats touch only in-memory liveness; a target's state flips (and is persisted) when
//! it goes silent for the heartbeat timeout or speaks again.

use crate::error::MgsError;
use crate::names::{check_param_name, check_param_value, check_pool_name, is_valid_fsname};
use crate::state::{self, Record, STATE_FILE};
use crate::subscribers::{ConfigSubscriber, Subscribers};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use targets::liveness_task;
use uuid::Uuid;
use weft_durable::TMP_SUFFIX;
use weft_proto::fid::FIRST_GRANTED_SEQ;
use weft_proto::layout::DEFAULT_STRIPE_SIZE;
use weft_proto::mgs::{FldEntry, FsConfig, MgsReply, MgsRequest};
use weft_proto::{Errno, FidSeqRange, LayoutTemplate, TargetId, WireError, WireResult};
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
    /// A target not heard from for this long is marked
    /// [`TargetState::Inactive`](weft_proto::mgs::TargetState::Inactive).
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

    /// The MGS's counters since it started.
    pub fn stats(&self) -> MgsStats {
        MgsStats {
            target_failovers: self.counters.failovers.load(Ordering::Relaxed),
            target_moves: self.counters.moves.load(Ordering::Relaxed),
        }
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

mod pools;
mod repos;
mod targets;
#[cfg(test)]
mod tests;
