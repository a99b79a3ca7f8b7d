//! The metadata target: its options and state, background work, statistics and
//! shutdown. Opening is in `open`, request dispatch in `dispatch`, and the cross-MDT
//! intent driver in `crate::remote` (`drive`).

use crate::cluster::ClusterView;
use crate::commit::{self, CommitConfig, Committer, Msg, Origin, Outcome, Pending, WriteOp};
use crate::destroy::{self, DestroyConfig};
use crate::engine::{Counters, Effects, Engine, Tx};
use crate::error::{Fail, MdtError, StoreError, store_to_wire};
use crate::handles::Handles;
use crate::locks::{Caller, LockLimits, LockTable};
use crate::namespace::DIR_SIZE;
use crate::placement::Placement;
use crate::reads;
use crate::redo::RedoLog;
pub use crate::stats::MdtStats;
use crate::store::{self, FORMAT_VERSION, Inode, Meta};
use parking_lot::Mutex;
use redb::{Database, Durability, ReadableDatabase, ReadableTableMetadata};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::{Notify, mpsc, oneshot};
use uuid::Uuid;
use weft_proto::mdt::{FileKind, MdtReply, MdtRequest, RequestClass};
use weft_proto::{Errno, Fid, Timestamp, WireError, WireResult};

mod dispatch;
mod open;

pub(crate) use dispatch::fail_to_wire;

/// Object ids per FID sequence in production (every oid from 1 to `u32::MAX`).
pub const SEQ_WIDTH: u32 = u32::MAX;
/// The name of the store file in the data directory.
pub const DB_FILE: &str = "mdt.redb";

/// How long, by default, a client whose connection broke keeps its handles and locks
/// ([`MdtOptions::handle_grace`]).
pub const HANDLE_GRACE: Duration = Duration::from_secs(60);

/// How to open an MDT.
#[derive(Debug, Clone)]
pub struct MdtOptions {
    /// The MDT's index (MDT0 holds the root directory).
    pub index: u32,
    /// The file system's name; a store formatted for another name is refused.
    pub fsname: String,
    /// Object ids used per FID sequence before asking for a new one ([`SEQ_WIDTH`]; tests
    /// lower it to exercise sequence changes).
    pub seq_width: u32,
    /// Most operations committed in one transaction.
    pub max_batch: usize,
    /// Tuning of the object-destroy worker.
    pub destroy: DestroyConfig,
    /// Limits of the file-lock table.
    pub locks: LockLimits,
    /// How long the handles of a connection that broke wait for their client to reconnect
    /// and use them again before they are closed (unlinked files they hold are destroyed
    /// then).
    pub handle_grace: Duration,
    /// Longest time a change committed without an fsync waits for one (see
    /// [`crate::redo`]); a client's `fsync` does not wait for it.
    pub commit_interval: Duration,
    /// Tuning of the HSM coordinator's restores (see [`crate::hsm`]).
    pub hsm: crate::hsm::HsmConfig,
}

impl Default for MdtOptions {
    fn default() -> Self {
        Self {
            index: 0,
            fsname: "weft".into(),
            seq_width: SEQ_WIDTH,
            max_batch: 4096,
            destroy: DestroyConfig::default(),
            locks: LockLimits::default(),
            handle_grace: HANDLE_GRACE,
            commit_interval: crate::redo::COMMIT_INTERVAL,
            hsm: crate::hsm::HsmConfig::default(),
        }
    }
}

type CommitThread = std::thread::JoinHandle<()>;

/// One metadata target: a shard of the namespace with its durable store.
pub struct Mdt {
    dir: PathBuf,
    pub(crate) index: u32,
    fsname: String,
    uuid: Uuid,
    pub(crate) db: Arc<Database>,
    pub(crate) cluster: Arc<dyn ClusterView>,
    pub(crate) handles: Arc<Mutex<Handles>>,
    pub(crate) counters: Arc<Counters>,
    sender: Mutex<Option<mpsc::UnboundedSender<Msg>>>,
    thread: Mutex<Option<CommitThread>>,
    /// The commit thread's state, which requests may commit through themselves.
    committer: Arc<Committer>,
    pub(crate) seq_lock: tokio::sync::Mutex<()>,
    destroy_wake: Arc<Notify>,
    destroy_cfg: DestroyConfig,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    locks: Arc<LockTable>,
    handle_grace: Duration,
    commit_interval: Duration,
    /// Random per process start: tells this run's rename-lock operations from an earlier
    /// run's (see [`crate::dir_moves`]).
    run: u64,
    /// The intents being driven: one driver at a time each.
    pub(crate) drivers: crate::drivers::Drivers,
    /// The HSM coordinator's restore jobs (see [`crate::hsm`]).
    pub(crate) hsm: crate::hsm::Coordinator,
    /// This MDT, for tasks it starts that must outlive a request (restore jobs).
    pub(crate) me: std::sync::Weak<Mdt>,
}

impl std::fmt::Debug for Mdt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mdt")
            .field("dir", &self.dir)
            .field("index", &self.index)
            .field("fsname", &self.fsname)
            .field("uuid", &self.uuid)
            .finish_non_exhaustive()
    }
}

impl Mdt {
    /// The target's UUID, fixed when it was formatted.
    pub fn uuid(&self) -> Uuid {
        self.uuid
    }

    /// The MDT's index.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The file system's name.
    pub fn fsname(&self) -> &str {
        &self.fsname
    }

    /// The data directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Requests started so far (see [`crate::engine::Counters::requests`]).
    pub(crate) fn requests_started(&self) -> u64 {
        self.counters.requests.load(Ordering::Relaxed)
    }

    /// Destroy-log records below this sequence are durable (see [`crate::destroy`]).
    pub(crate) fn durable_destroys(&self) -> u64 {
        self.counters.durable_destroys.load(Ordering::Acquire)
    }

    pub(crate) fn db(&self) -> Arc<Database> {
        self.db.clone()
    }

    /// This process run's id (see [`crate::dir_moves`]).
    pub(crate) fn run(&self) -> u64 {
        self.run
    }

    pub(crate) fn cluster(&self) -> Arc<dyn ClusterView> {
        self.cluster.clone()
    }

    /// Its released files and their bytes per archive id (ascending, none at zero), as of
    /// the last commit: `released.ID.files` and `released.ID.bytes` in its counters.
    pub fn released(&self) -> Vec<crate::store::ReleasedCount> {
        self.counters.released.lock().clone()
    }

    /// The counters its cluster view reports ([`ClusterView::counters`]).
    pub fn view_counters(&self) -> Vec<weft_proto::handshake::Counter> {
        self.cluster.counters()
    }

    /// Starts the background work (object destruction from the destroy log). Call once,
    /// from inside a tokio runtime.
    pub fn start_background(self: &Arc<Self>) {
        let task = tokio::spawn(destroy::run(
            Arc::downgrade(self),
            self.destroy_wake.clone(),
            self.destroy_cfg,
        ));
        self.tasks.lock().push(task);
        // Orphans of the previous run (files unlinked while open) wait for their clients
        // to open them again (open replay) for as long as a broken connection's handles
        // wait; those still unopened then are destroyed.
        let (me, grace) = (Arc::downgrade(self), self.handle_grace);
        let reap = tokio::spawn(async move {
            tokio::time::sleep(grace).await;
            if let Some(mdt) = me.upgrade() {
                match mdt.submit_internal(WriteOp::ReapOrphans).await {
                    Ok(()) => {}
                    Err(e) => tracing::warn!(error = %e, "reaping orphans failed"),
                }
            }
        });
        self.tasks.lock().push(reap);
        let finish = tokio::spawn(self.clone().finish_intents());
        self.tasks.lock().push(finish);
        // Take a FID sequence now rather than at the first create: the MGS announces the
        // grant (the FID location database) to every client long before a FID of it is
        // handed out, so no client meets a FID it cannot route.
        let me = Arc::downgrade(self);
        let seq = tokio::spawn(async move {
            if let Some(mdt) = me.upgrade()
                && let Err(e) = mdt.refill_seq().await
            {
                tracing::warn!(error = %e, "no FID sequence at start; will ask again when needed");
            }
        });
        self.tasks.lock().push(seq);
        // Changes committed without an fsync are made durable within the interval.
        let (me, every) = (Arc::downgrade(self), self.commit_interval);
        let interval = tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(mdt) = me.upgrade() else { return };
                if mdt.counters.deferred.load(Ordering::Relaxed) > 0
                    && let Err(e) = mdt.submit_internal(WriteOp::Sync).await
                {
                    tracing::warn!(error = %e, "periodic durable commit failed");
                }
            }
        });
        self.tasks.lock().push(interval);
    }

    /// Stops background tasks and the commit thread after it has committed and answered
    /// everything queued. Later write requests fail with EIO; handles are forgotten (not
    /// closed), as if the process stopped. Drop every `Arc<Mdt>` afterwards to release the
    /// store so it can be opened again.
    pub async fn shutdown(&self) {
        self.hsm.shutdown().await;
        let tasks = std::mem::take(&mut *self.tasks.lock());
        for t in tasks {
            t.abort();
            let _ = t.await;
        }
        let sender = self.sender.lock().take();
        if let Some(s) = sender {
            let (ack, rx) = oneshot::channel();
            if s.send(Msg::Shutdown(ack)).is_ok() {
                let _ = rx.await;
            }
        }
        let thread = self.thread.lock().take();
        if let Some(t) = thread {
            let _ = tokio::task::spawn_blocking(move || t.join()).await;
        }
    }

    /// The commit thread's state, for tests that hand it a batch of their making.
    #[cfg(test)]
    pub(crate) fn committer(&self) -> &Committer {
        &self.committer
    }

    /// The ids of the handles connection `conn` holds open, for tests.
    #[cfg(test)]
    pub(crate) fn handles_of(&self, conn: u64) -> Vec<u64> {
        self.handles.lock().of_conn(conn)
    }

    /// The file-lock table (in memory; see [`crate::locks`]).
    pub fn locks(&self) -> &LockTable {
        &self.locks
    }

    /// Counters for monitoring.
    pub fn stats(&self) -> MdtStats {
        let (orphans, pending_destroys) = (|| -> Result<(u64, u64), StoreError> {
            let r = self.db.begin_read()?;
            let o = r.open_table(store::ORPHANS)?.len()?;
            let d = r.open_table(store::DESTROY_LOG)?.len()?;
            Ok((o, d))
        })()
        .unwrap_or_default();
        let locks = self.locks.stats();
        MdtStats {
            dirs: self.counters.dirs.load(Ordering::Relaxed),
            files: self.counters.files.load(Ordering::Relaxed),
            orphans,
            pending_destroys,
            open_handles: self.handles.lock().len() as u64,
            commits: self.counters.commits.load(Ordering::Relaxed),
            write_ops: self.counters.ops.load(Ordering::Relaxed),
            fast_ops: self.counters.fast_ops.load(Ordering::Relaxed),
            reply_records: self.counters.reply_records.load(Ordering::Relaxed),
            durable_commits: self.counters.durable_commits.load(Ordering::Relaxed),
            locks_held: locks.held,
            lock_waiters: locks.waiting,
            lock_grants: locks.grants,
            lock_waits: locks.waits,
            lock_conflicts: locks.conflicts,
            lock_deadlocks: locks.deadlocks,
            hsm_import_entries: self.counters.hsm_import_entries.load(Ordering::Relaxed),
            hsm_imported: self.counters.hsm_imported.load(Ordering::Relaxed),
            hsm_restores_started: self.counters.hsm_restores_started.load(Ordering::Relaxed),
            hsm_restores_done: self.counters.hsm_restores_done.load(Ordering::Relaxed),
            hsm_restores_failed: self.counters.hsm_restores_failed.load(Ordering::Relaxed),
            hsm_restore_bytes: self.counters.hsm_restore_bytes.load(Ordering::Relaxed),
        }
    }
}
