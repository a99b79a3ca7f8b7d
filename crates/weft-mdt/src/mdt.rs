//! The metadata target: opening (and formatting) its store, dispatching requests to the
//! read path or the commit thread, background work and shutdown.

use crate::cluster::{ClusterView, PeerError};
use crate::commit::{self, CommitConfig, Committer, Msg, Origin, Outcome, Pending, WriteOp};
use crate::destroy::{self, DestroyConfig};
use crate::engine::{Counters, Effects, Engine, Tx, lock};
use crate::error::{Fail, MdtError, StoreError, store_to_wire};
use crate::handles::Handles;
use crate::locks::{Caller, LockLimits, LockTable};
use crate::namespace::DIR_SIZE;
use crate::placement::Placement;
use crate::reads;
use crate::redo::RedoLog;
use crate::remote::{Intent, IntentKind};
pub use crate::stats::MdtStats;
use crate::store::{self, FORMAT_VERSION, Inode, Meta};
use redb::{Database, Durability, ReadableDatabase, ReadableTableMetadata};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, mpsc, oneshot};
use uuid::Uuid;
use weft_proto::Message;
use weft_proto::mdt::{Credentials, DirStripes, FileKind, MdtReply, MdtRequest};
use weft_proto::{Errno, Fid, Timestamp, WireError, WireResult};

/// Object ids per FID sequence in production (every oid from 1 to `u32::MAX`).
pub const SEQ_WIDTH: u32 = u32::MAX;
/// The name of the store file in the data directory.
pub const DB_FILE: &str = "mdt.redb";

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
            handle_grace: Duration::from_secs(60),
            commit_interval: crate::redo::COMMIT_INTERVAL,
        }
    }
}

type CommitThread = std::thread::JoinHandle<()>;

/// One metadata target: a shard of the namespace with its durable store.
pub struct Mdt {
    dir: PathBuf,
    index: u32,
    fsname: String,
    uuid: Uuid,
    db: Arc<Database>,
    cluster: Arc<dyn ClusterView>,
    handles: Arc<Mutex<Handles>>,
    counters: Arc<Counters>,
    sender: Mutex<Option<mpsc::UnboundedSender<Msg>>>,
    thread: Mutex<Option<CommitThread>>,
    /// The commit thread's state, which requests may commit through themselves.
    committer: Arc<Committer>,
    seq_lock: tokio::sync::Mutex<()>,
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
    drivers: crate::drivers::Drivers,
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

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> MdtError + '_ {
    move |source| MdtError::Io {
        path: path.display().to_string(),
        source,
    }
}

impl Mdt {
    /// Opens the MDT stored in `dir`, formatting it if the directory holds none. MDT0 gets
    /// the root directory. Orphans left by a previous run are destroyed (their handles died
    /// with it). Starts the commit thread; call [`Mdt::start_background`] from a tokio
    /// runtime to start object destruction.
    ///
    /// This does blocking disk I/O: call it at startup or from `spawn_blocking`.
    pub fn open(
        dir: &Path,
        opts: MdtOptions,
        cluster: Arc<dyn ClusterView>,
    ) -> Result<Arc<Mdt>, MdtError> {
        if opts.fsname.is_empty() || opts.fsname.len() > 255 {
            return Err(MdtError::Options("fsname must be 1 to 255 bytes".into()));
        }
        if opts.seq_width == 0 || opts.max_batch == 0 || opts.commit_interval.is_zero() {
            return Err(MdtError::Options(
                "seq_width, max_batch and commit_interval must be positive".into(),
            ));
        }
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        let path = dir.join(DB_FILE);
        let db = Arc::new(Database::create(&path).map_err(StoreError::from)?);
        let shown = dir.display().to_string();

        let txn = db.begin_write().map_err(StoreError::from)?;
        // Every table exists from the start: write transactions open only those they touch
        // (`redo::WTable`), and reads of a table never written would fail.
        for def in crate::redo::TABLES {
            txn.open_table(def).map_err(StoreError::from)?;
        }
        // Commits a crash of the process left in the redo log only (see `redo`).
        let (redo, replayed) = RedoLog::recover(dir, &txn)?;
        if replayed > 0 {
            tracing::info!(commits = replayed, "replayed the redo log");
        }
        let existing = {
            let t = txn.open_table(store::META).map_err(StoreError::from)?;
            store::get_meta(&t)?
        };
        let now = Timestamp::now();
        let (meta, fresh) = match existing {
            Some(m) => {
                if m.format_version > FORMAT_VERSION {
                    return Err(MdtError::FormatVersion {
                        path: shown,
                        found: m.format_version,
                        supported: FORMAT_VERSION,
                    });
                }
                if m.fsname != opts.fsname {
                    return Err(MdtError::WrongFsname {
                        path: shown,
                        found: m.fsname,
                        expected: opts.fsname,
                    });
                }
                if m.index != opts.index {
                    return Err(MdtError::WrongIndex {
                        path: shown,
                        found: m.index,
                        expected: opts.index,
                    });
                }
                (m, false)
            }
            None => (
                Meta {
                    format_version: FORMAT_VERSION,
                    fsname: opts.fsname.clone(),
                    index: opts.index,
                    uuid: Uuid::new_v4(),
                    cur_seq: 0,
                    next_oid: 1,
                    free_seqs: Vec::new(),
                    next_destroy: 1,
                    dirs: 0,
                    files: 0,
                },
                true,
            ),
        };
        let counters = Arc::new(Counters::default());
        // Ids of this run never meet those of a previous one (see `handles`); the top bits
        // stay clear so the counter cannot wrap.
        let base = uuid::Uuid::new_v4().as_u64_pair().0 >> 2;
        let handles = Arc::new(Mutex::new(Handles::starting_at(base)));
        let seed = u64::from(now.nsec) ^ (now.sec as u64).rotate_left(32) ^ u64::from(opts.index);
        let mut engine = Engine {
            db: db.clone(),
            meta,
            cluster: cluster.clone(),
            placement: Placement::new(seed),
            handles: handles.clone(),
            seq_width: u64::from(opts.seq_width),
            counters: counters.clone(),
            redo,
        };
        if !fresh {
            // FIDs handed out after the last durable commit are lost with it if the
            // machine lost power, and clients may have written objects for them: never
            // hand out FIDs of this sequence again.
            engine.abandon_seq();
        }
        {
            let mut tx = Tx::open(&txn)?;
            let mut fx = Effects::default();
            if fresh && opts.index == 0 {
                let mut root = Inode::new(FileKind::Directory, 0o755, 0, 0, now);
                root.nlink = 2;
                root.size = DIR_SIZE;
                root.blocks = DIR_SIZE / 512;
                root.parent = Fid::ROOT;
                engine.put_inode(&mut tx, &mut fx, Fid::ROOT, &root)?;
                engine.meta.dirs = 1;
            }
            let expired = crate::replies::expire(&mut tx)?;
            if expired > 0 {
                tracing::debug!(expired, "dropped old reply records");
            }
        }
        {
            let mut t = txn.open_table(store::META).map_err(StoreError::from)?;
            let v = store::encode(&engine.meta)?;
            t.insert(store::META_KEY, v.as_slice())
                .map_err(StoreError::from)?;
        }
        let mut txn = txn;
        txn.set_durability(Durability::Immediate)
            .map_err(StoreError::from)?;
        txn.commit().map_err(StoreError::from)?;
        engine.redo.clear();
        counters
            .durable_destroys
            .store(engine.meta.next_destroy, Ordering::Release);
        engine.publish();

        let uuid = engine.meta.uuid;
        let (sender, rx) = mpsc::unbounded_channel();
        let destroy_wake = Arc::new(Notify::new());
        let committer = Committer::new(engine, destroy_wake.clone());
        let for_thread = committer.clone();
        let cfg = CommitConfig {
            max_batch: opts.max_batch,
        };
        let thread = std::thread::Builder::new()
            .name(format!("mdt{}-commit", opts.index))
            .spawn(move || {
                if let Some(ack) = commit::run(for_thread, rx, cfg) {
                    let _ = ack.send(());
                }
            })
            .map_err(io_err(dir))?;
        Ok(Arc::new(Mdt {
            dir: dir.to_path_buf(),
            index: opts.index,
            fsname: opts.fsname,
            uuid,
            db,
            cluster,
            handles,
            counters,
            sender: Mutex::new(Some(sender)),
            committer,
            thread: Mutex::new(Some(thread)),
            seq_lock: tokio::sync::Mutex::new(()),
            destroy_wake,
            destroy_cfg: opts.destroy,
            tasks: Mutex::new(Vec::new()),
            locks: Arc::new(LockTable::new(opts.locks)),
            handle_grace: opts.handle_grace,
            commit_interval: opts.commit_interval,
            run: crate::remote::new_op_id(),
            drivers: Default::default(),
        }))
    }

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

    /// Starts the background work (object destruction from the destroy log). Call once,
    /// from inside a tokio runtime.
    pub fn start_background(self: &Arc<Self>) {
        let task = tokio::spawn(destroy::run(
            Arc::downgrade(self),
            self.destroy_wake.clone(),
            self.destroy_cfg,
        ));
        lock(&self.tasks).push(task);
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
        lock(&self.tasks).push(reap);
        let finish = tokio::spawn(self.clone().finish_intents());
        lock(&self.tasks).push(finish);
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
        lock(&self.tasks).push(seq);
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
        lock(&self.tasks).push(interval);
    }

    /// Stops background tasks and the commit thread after it has committed and answered
    /// everything queued. Later write requests fail with EIO; handles are forgotten (not
    /// closed), as if the process stopped. Drop every `Arc<Mdt>` afterwards to release the
    /// store so it can be opened again.
    pub async fn shutdown(&self) {
        let tasks = std::mem::take(&mut *lock(&self.tasks));
        for t in tasks {
            t.abort();
            let _ = t.await;
        }
        let sender = lock(&self.sender).take();
        if let Some(s) = sender {
            let (ack, rx) = oneshot::channel();
            if s.send(Msg::Shutdown(ack)).is_ok() {
                let _ = rx.await;
            }
        }
        let thread = lock(&self.thread).take();
        if let Some(t) = thread {
            let _ = tokio::task::spawn_blocking(move || t.join()).await;
        }
    }

    /// The file-lock table (in memory; see [`crate::locks`]).
    pub fn locks(&self) -> &LockTable {
        &self.locks
    }

    /// Handles one request from connection `conn_id` (handles and locks belong to that
    /// connection). Lock requests are answered for an anonymous client; the RPC handler
    /// passes the connection's identity through [`LockTable::execute`] instead.
    pub async fn execute(&self, conn_id: u64, req: MdtRequest) -> WireResult<MdtReply> {
        self.execute_from(conn_id, Origin::default(), req).await
    }

    /// Like [`Mdt::execute`] for a request from a known client: a numbered change's reply
    /// is recorded with it and a resend of the same number answered from that record (see
    /// [`weft_rpc::resend`]); handles the client opened on a connection that broke are
    /// its own again.
    pub async fn execute_from(
        &self,
        conn_id: u64,
        origin: Origin,
        req: MdtRequest,
    ) -> WireResult<MdtReply> {
        self.counters.requests.fetch_add(1, Ordering::Relaxed);
        if LockTable::handles(&req) {
            let caller = Caller {
                conn: conn_id,
                client: Uuid::nil(),
                closed: &|| false,
            };
            return self.locks.execute(&caller, req).await;
        }
        if !self.shutting_down()
            && let Some(r) = crate::fast::try_run(&self.db, &self.handles, conn_id, &req)
        {
            self.counters.fast_ops.fetch_add(1, Ordering::Relaxed);
            return r.map_err(fail_to_wire);
        }
        match req {
            MdtRequest::Lookup { .. }
            | MdtRequest::GetAttr { .. }
            | MdtRequest::ReadLink { .. }
            | MdtRequest::ReadDir { .. }
            | MdtRequest::ScanDir { .. }
            | MdtRequest::GetXattr { .. }
            | MdtRequest::ListXattr { .. }
            | MdtRequest::StatFs
            | MdtRequest::GetDirStripes { .. }
            | MdtRequest::GetDirDefault { .. }
            | MdtRequest::DirParent { .. }
            | MdtRequest::GetLayout { .. } => self.read(req).await,
            MdtRequest::FsckInodes { after, max } => {
                let db = self.db.clone();
                self.blocking(move || crate::fsck::inodes(&db, after, max))
                    .await
            }
            MdtRequest::FsckEntries { after, max } => {
                let db = self.db.clone();
                self.blocking(move || crate::fsck::entries(&db, after.as_deref(), max))
                    .await
            }
            MdtRequest::Sync => self.write(conn_id, WriteOp::Sync).await,
            _ => self.write(conn_id, WriteOp::Req(req, origin)).await,
        }
    }

    /// Forgets a connection: releases its locks, closes its handles (which may destroy
    /// orphans). Does not wait.
    pub fn disconnect(&self, conn_id: u64) {
        self.locks.disconnect(conn_id);
        if let Some(s) = lock(&self.sender).as_ref() {
            let _ = s.send(Msg::Op(Pending {
                conn: conn_id,
                op: WriteOp::DropConn,
                reply: None,
            }));
        }
    }

    /// A connection of client node `client` broke: its handles and locks are kept for the
    /// client to use again from its next connection (it resends what was in flight) for
    /// `handle_grace`, then closed and released; its lock waits are dropped (the client
    /// sends them again). A nil client gets [`Mdt::disconnect`].
    pub fn disconnect_client(&self, conn_id: u64, client: Uuid) {
        if client.is_nil() {
            return self.disconnect(conn_id);
        }
        let Some(sender) = lock(&self.sender).clone() else {
            return self.locks.disconnect(conn_id);
        };
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return self.disconnect(conn_id);
        };
        let (locks, grace) = (self.locks.clone(), self.handle_grace);
        let park = locks.park(conn_id, client);
        rt.spawn(async move {
            tokio::time::sleep(grace).await;
            locks.expire(client, park);
        });
        let handles = self.handles.clone();
        rt.spawn(async move {
            // Parked after every request of the connection already queued.
            let (reply, parked) = oneshot::channel();
            let park = Pending {
                conn: conn_id,
                op: WriteOp::ParkConn(client),
                reply: Some(reply),
            };
            if sender.send(Msg::Op(park)).is_err() || parked.await.is_err() {
                return;
            }
            let upto = lock(&handles).last_park();
            tokio::time::sleep(grace).await;
            let _ = sender.send(Msg::Op(Pending {
                conn: 0,
                op: WriteOp::DropParked(client, upto),
                reply: None,
            }));
        });
    }

    /// Releases a connection's locks, closes its handles and waits until that is durable.
    pub async fn disconnect_and_wait(&self, conn_id: u64) -> WireResult<()> {
        self.locks.disconnect(conn_id);
        self.write(conn_id, WriteOp::DropConn).await.map(|_| ())
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
            open_handles: lock(&self.handles).len() as u64,
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
        }
    }

    pub(crate) async fn read(&self, req: MdtRequest) -> WireResult<MdtReply> {
        // Point reads (one inode, one entry, one xattr) run inline: they are served from
        // redb's page cache in microseconds, and handing them to a blocking thread cost more
        // than the read itself (two thread switches per request: measured with
        // `weft bench-mdt`, stats went from ~33k/s to the figure in ARCHITECTURE.md). Scans
        // (readdir) and statfs, which may touch many pages or the disk, go to a blocking
        // thread.
        if !matches!(
            req,
            MdtRequest::ReadDir { .. } | MdtRequest::ScanDir { .. } | MdtRequest::StatFs
        ) {
            return reads::run(&self.db, &self.dir, &self.handles, &req).map_err(fail_to_wire);
        }
        let db = self.db.clone();
        let handles = self.handles.clone();
        let dir = self.dir.clone();
        let r = tokio::task::spawn_blocking(move || reads::run(&db, &dir, &handles, &req))
            .await
            .map_err(|e| WireError::new(Errno::Io, format!("read task failed: {e}")))?;
        r.map_err(fail_to_wire)
    }

    async fn blocking(
        &self,
        f: impl FnOnce() -> Result<MdtReply, Fail> + Send + 'static,
    ) -> WireResult<MdtReply> {
        tokio::task::spawn_blocking(f)
            .await
            .map_err(|e| WireError::new(Errno::Io, format!("read task failed: {e}")))?
            .map_err(fail_to_wire)
    }

    /// Whether [`Mdt::shutdown`] has begun (writes are refused from then on).
    pub(crate) fn shutting_down(&self) -> bool {
        lock(&self.sender).is_none()
    }

    fn shut() -> WireError {
        WireError::new(Errno::Io, "MDT is shutting down")
    }

    pub(crate) async fn submit(&self, conn: u64, op: WriteOp) -> WireResult<Outcome> {
        let (reply, rx) = oneshot::channel();
        let sender = lock(&self.sender).clone().ok_or_else(Self::shut)?;
        let p = Pending {
            conn,
            op,
            reply: Some(reply),
        };
        let (_submitted, alone) = self.committer.submitted();
        let queued = if alone {
            self.committer.try_inline(p)
        } else {
            Some(p)
        };
        if let Some(p) = queued {
            sender.send(Msg::Op(p)).map_err(|_| Self::shut())?;
        }
        rx.await.map_err(|_| Self::shut())
    }

    /// Queues an internal write without waiting for it.
    pub(crate) fn submit_detached(&self, op: WriteOp) {
        if let Some(s) = lock(&self.sender).as_ref() {
            let _ = s.send(Msg::Op(Pending {
                conn: 0,
                op,
                reply: None,
            }));
        }
    }

    /// Runs an internal write and waits for it to be durable.
    pub(crate) async fn submit_internal(&self, op: WriteOp) -> WireResult<()> {
        self.write(0, op).await.map(|_| ())
    }

    async fn write(&self, conn: u64, op: WriteOp) -> WireResult<MdtReply> {
        // The rename lock this request took for a directory move, if it still holds it.
        let mut lock_op = None;
        let r = self.write_rounds(conn, op, &mut lock_op).await;
        if let Some(op) = lock_op {
            self.release_rename_lock(op);
        }
        r
    }

    async fn write_rounds(
        &self,
        conn: u64,
        mut op: WriteOp,
        lock_op: &mut Option<u64>,
    ) -> WireResult<MdtReply> {
        // A few rounds: each grant holds at least one whole sequence, and a directory move
        // comes back for the rename lock (again only if its names changed meanwhile).
        let mut why = "could not obtain a FID sequence";
        for _ in 0..6 {
            match self.submit(conn, op).await? {
                Outcome::Done(r) => return r,
                Outcome::CrossMdt(intent) => {
                    // An intent that holds the lock releases it once it is finished.
                    if intent.kind.holds_rename_lock() && *lock_op == Some(intent.op) {
                        *lock_op = None;
                    }
                    return self.drive_intent(*intent).await;
                }
                Outcome::NeedSeq(back) => {
                    op = back;
                    self.refill_seq().await?;
                }
                Outcome::NeedDirMove {
                    op: back,
                    dir,
                    dst_parent,
                } => {
                    if let Some(held) = lock_op.take() {
                        self.release_rename_lock(held);
                    }
                    let dm = self.prepare_dir_move(dir, dst_parent).await?;
                    *lock_op = Some(dm.op);
                    op = back.with_dir_move(dm);
                    why = "the names of a directory move kept changing";
                }
            }
        }
        let errno = if lock_op.is_some() {
            Errno::Busy
        } else {
            Errno::NoSpc
        };
        Err(WireError::new(errno, why))
    }

    /// Steps 2 and 3 of a cross-MDT operation ([`crate::remote`]), by one driver at a
    /// time ([`crate::drivers`]): a driver that waited for another finds the intent
    /// finished and answers from its recorded reply, without asking the other MDTs again.
    async fn drive_intent(&self, intent: Intent) -> WireResult<MdtReply> {
        let _driving = self.drivers.claim(intent.op).await;
        let stored = (|| -> Result<Option<Intent>, Fail> {
            let r = self.db.begin_read().map_err(StoreError::from)?;
            let t = r.open_table(store::INTENTS).map_err(StoreError::from)?;
            crate::remote::pending(&t, intent.parent, &intent.name)
        })()
        .map_err(fail_to_wire)?;
        if let Some(stored) = stored.filter(|i| i.op == intent.op) {
            // As stored: a migration may be in its second phase already.
            return self.drive_claimed_intent(stored).await;
        }
        let done = Err(WireError::new(Errno::NoEnt, "finished by another driver"));
        match self
            .submit(0, WriteOp::FinishIntent(Box::new(intent), Box::new(done)))
            .await?
        {
            Outcome::Done(r) => r,
            _ => Err(WireError::new(
                Errno::Io,
                "cross-MDT operation not finished",
            )),
        }
    }

    /// Steps 2 and 3 for the driver of a stored intent: asks the other MDTs (their side
    /// is idempotent, so an unknown outcome is simply asked again), then finishes the
    /// intent with the answer.
    async fn drive_claimed_intent(&self, intent: Intent) -> WireResult<MdtReply> {
        failpoint("cross_mdt.before_remote");
        let root = || Credentials {
            uid: 0,
            gid: 0,
            groups: Vec::new(),
        };
        let outcome = match &intent.kind {
            IntentKind::Mkdir {
                mdt,
                mode,
                uid,
                gid,
                default_layout,
                dir_default,
            } => {
                let req = MdtRequest::CreateRemoteDir {
                    from: self.index,
                    op: intent.op,
                    parent: intent.parent,
                    mode: *mode,
                    uid: *uid,
                    gid: *gid,
                    default_layout: default_layout.clone(),
                    dir_default: *dir_default,
                };
                self.peer(Some(*mdt), req).await?
            }
            IntentKind::Rmdir {
                fid,
                sticky_owner,
                cred,
            } => {
                self.remove_remote_dir(intent.parent, *fid, *sticky_owner, cred)
                    .await?
            }
            IntentKind::MkdirStriped {
                master,
                shard0,
                mdts,
                hash,
                mode,
                uid,
                gid,
                default_layout,
                dir_default,
            } => {
                let mut shards = vec![*shard0];
                let mut refused = None;
                for (i, mdt) in mdts.iter().enumerate() {
                    let req = MdtRequest::CreateRemoteDir {
                        from: self.index,
                        op: intent.op.wrapping_add(i as u64 + 1),
                        parent: *master,
                        mode: *mode,
                        uid: *uid,
                        gid: *gid,
                        default_layout: default_layout.clone(),
                        dir_default: *dir_default,
                    };
                    match self.peer(Some(*mdt), req).await? {
                        Ok(MdtReply::Attr(a)) => shards.push(a.fid),
                        Ok(other) => {
                            refused = Some(WireError::new(
                                Errno::Proto,
                                format!("unexpected answer to a shard create: {other:?}"),
                            ));
                            break;
                        }
                        Err(e) => {
                            refused = Some(e);
                            break;
                        }
                    }
                }
                match refused {
                    None => Ok(MdtReply::DirStripes(Some(DirStripes {
                        hash: *hash,
                        shards,
                    }))),
                    Some(e) => {
                        // Take back the shards made before the refusal.
                        for fid in shards.into_iter().skip(1) {
                            let req = MdtRequest::RemoveRemoteDir {
                                fid,
                                parent: *master,
                                sticky_owner: None,
                                cred: root(),
                            };
                            let _ = self.peer(self.cluster.mdt_of(fid), req).await?;
                        }
                        Err(e)
                    }
                }
            }
            IntentKind::Unlink {
                fid,
                sticky_owner,
                cred,
            } => {
                let req = MdtRequest::DropLink {
                    from: self.index,
                    op: intent.op,
                    fid: *fid,
                    sticky_owner: *sticky_owner,
                    cred: cred.clone(),
                };
                self.peer(self.cluster.mdt_of(*fid), req).await?
            }
            IntentKind::LinkDropped { fid } => {
                let req = MdtRequest::DropLink {
                    from: self.index,
                    op: intent.op,
                    fid: *fid,
                    sticky_owner: None,
                    cred: root(),
                };
                self.peer(self.cluster.mdt_of(*fid), req).await?
            }
            IntentKind::Link { fid } => {
                let req = MdtRequest::AddLink {
                    from: self.index,
                    op: intent.op,
                    fid: *fid,
                };
                self.peer(self.cluster.mdt_of(*fid), req).await?
            }
            IntentKind::Rename {
                dst_parent,
                dst_name,
                fid,
                kind,
                noreplace,
                cred,
            } => {
                let req = MdtRequest::InsertEntry {
                    from: self.index,
                    op: intent.op,
                    parent: *dst_parent,
                    name: dst_name.clone(),
                    fid: *fid,
                    kind: *kind,
                    noreplace: *noreplace,
                    cred: cred.clone(),
                };
                let inserted = self.peer(self.cluster.mdt_of(*dst_parent), req).await?;
                let home = self.cluster.mdt_of(*fid);
                if inserted.is_ok()
                    && *kind == FileKind::Directory
                    && home != Some(self.index)
                    && home != self.cluster.mdt_of(*dst_parent)
                {
                    // The directory's inode is on a third MDT: its ".." moves there.
                    self.set_parent(*fid, intent.parent, *dst_parent).await?;
                }
                inserted
            }
            IntentKind::DirMoved { fid, old_parent } => {
                self.set_parent(*fid, *old_parent, intent.parent).await?;
                Ok(MdtReply::Ok)
            }
            IntentKind::Migrate {
                dir,
                mdt,
                new: None,
            } => {
                self.migrate_copy(intent.op, intent.parent, *dir, *mdt)
                    .await?
            }
            IntentKind::Migrate {
                dir, new: Some(_), ..
            } => self.migrate_drop(*dir).await?,
            IntentKind::RmdirStriped { master, shards } => {
                self.remove_shards(*master, shards).await?
            }
        };
        failpoint("cross_mdt.before_finish");
        let forget = intent.kind.recorded_ops(intent.op);
        let peer = match &intent.kind {
            IntentKind::Unlink { fid, .. }
            | IntentKind::Link { fid }
            | IntentKind::LinkDropped { fid } => self.cluster.mdt_of(*fid),
            IntentKind::Rename { dst_parent, .. } => self.cluster.mdt_of(*dst_parent),
            _ => None,
        };
        let lock_op = intent.kind.holds_rename_lock().then_some(intent.op);
        let reply = match self
            .submit(
                0,
                WriteOp::FinishIntent(Box::new(intent), Box::new(outcome)),
            )
            .await?
        {
            Outcome::Done(r) => r,
            // A migration's next phase (this driver keeps its claim).
            Outcome::CrossMdt(next) => Box::pin(self.drive_claimed_intent(*next)).await,
            Outcome::NeedSeq(_) | Outcome::NeedDirMove { .. } => Err(WireError::new(
                Errno::Io,
                "cross-MDT operation not finished",
            )),
        };
        // The intent is gone (finished now or before): the directory move it made is
        // complete, and others may move directories again.
        if let Some(op) = lock_op {
            self.release_rename_lock(op);
        }
        // The intent is gone for good: the other MDT may drop its record (best effort; a
        // record left behind costs a few bytes and nothing else).
        if let Some(peer) = peer
            && !forget.is_empty()
            && reply.is_ok()
        {
            let cluster = self.cluster.clone();
            let req = MdtRequest::ForgetOps {
                from: self.index,
                ops: forget,
            };
            tokio::spawn(async move {
                let _ = cluster.mdt_call(peer, req).await;
            });
        }
        reply
    }

    /// Step 2 of removing the directory `fid` named in `parent` here, whose inode is on
    /// another MDT. A striped directory (whose name moved here from its master's MDT) has
    /// its shards removed first, as [`Mdt::remove_shards`] does, after the sticky-bit rule
    /// is checked against the master's owner; its master goes last, so that a crash in
    /// between finds the shards again in its stripes record.
    async fn remove_remote_dir(
        &self,
        parent: Fid,
        fid: Fid,
        sticky_owner: Option<u32>,
        cred: &Credentials,
    ) -> WireResult<Result<MdtReply, WireError>> {
        let home = self.cluster.mdt_of(fid);
        let stripes = match self.peer(home, MdtRequest::GetDirStripes { fid }).await? {
            Ok(MdtReply::DirStripes(s)) => s,
            // Gone (removed by an earlier run): the removal below answers ENOENT.
            Ok(_) | Err(_) => None,
        };
        if let Some(stripes) = stripes {
            // Not touching a shard of a directory whose move here is not finished (its ".."
            // still names the old parent): EBUSY, as RemoveRemoteDir answers. Nothing can
            // move it meanwhile: the intent on its name refuses renames.
            match self.peer(home, MdtRequest::DirParent { fid }).await? {
                Ok(MdtReply::DirParent { parent: p, .. }) if p == parent => {}
                Ok(_) => {
                    return Ok(Err(WireError::new(
                        Errno::Busy,
                        "the directory is still moving into that parent",
                    )));
                }
                Err(e) => return Ok(Err(e)),
            }
            if let Some(owner) = sticky_owner
                && cred.uid != 0
                && cred.uid != owner
            {
                match self.peer(home, MdtRequest::GetAttr { fid }).await? {
                    Ok(MdtReply::Attr(a)) if a.uid == cred.uid => {}
                    Ok(_) => {
                        return Ok(Err(WireError::new(
                            Errno::Perm,
                            "sticky directory: not the owner of the entry",
                        )));
                    }
                    Err(e) => return Ok(Err(e)),
                }
            }
            if let Err(e) = self.remove_shards(fid, &stripes.shards).await? {
                return Ok(Err(e));
            }
        }
        let req = MdtRequest::RemoveRemoteDir {
            fid,
            parent,
            sticky_owner,
            cred: cred.clone(),
        };
        self.peer(home, req).await
    }

    /// Removes the shards of striped directory `master`: seals every one (sealed shards
    /// take no new names), then removes them all if every one was empty, else unseals
    /// them (ENOTEMPTY). A shard already gone means an earlier run got as far as removing:
    /// carry on removing.
    async fn remove_shards(
        &self,
        master: Fid,
        shards: &[Fid],
    ) -> WireResult<Result<MdtReply, WireError>> {
        let mut busy = None;
        let mut gone = false;
        for &fid in shards {
            let req = MdtRequest::SealDir { fid, seal: true };
            match self.peer(self.cluster.mdt_of(fid), req).await? {
                Ok(_) => {}
                Err(e) if e.errno == Errno::NoEnt => gone = true,
                Err(e) => busy = Some(e),
            }
        }
        if let Some(e) = busy
            && !gone
        {
            for &fid in shards {
                let req = MdtRequest::SealDir { fid, seal: false };
                let _ = self.peer(self.cluster.mdt_of(fid), req).await?;
            }
            return Ok(Err(e));
        }
        let mut result = Ok(MdtReply::Ok);
        for &fid in shards {
            let req = MdtRequest::RemoveRemoteDir {
                fid,
                parent: master,
                sticky_owner: None,
                cred: Credentials::root(),
            };
            match self.peer(self.cluster.mdt_of(fid), req).await? {
                Err(e) if e.errno != Errno::NoEnt => {
                    tracing::error!(%fid, error = %e, "a sealed shard could not be removed");
                    result = Err(e);
                }
                _ => {}
            }
        }
        Ok(result)
    }

    /// Sets the ".." of directory `fid`, moved by a rename, on its MDT. Whatever that MDT
    /// answers, the move is done: a refusal is logged for `weft fsck` to find.
    pub(crate) async fn set_parent(
        &self,
        fid: Fid,
        old_parent: Fid,
        new_parent: Fid,
    ) -> WireResult<()> {
        let req = MdtRequest::SetParent {
            fid,
            old_parent,
            new_parent,
        };
        if let Err(e) = self.peer(self.cluster.mdt_of(fid), req).await? {
            tracing::error!(%fid, error = %e, "a moved directory's parent could not be set");
        }
        Ok(())
    }

    /// Sends `req` to MDT `target` until it answers: `Ok` holds its answer (a reply or its
    /// refusal); `Err` means this MDT is shutting down (the intent stays for the next run).
    pub(crate) async fn peer(
        &self,
        target: Option<u32>,
        req: MdtRequest,
    ) -> WireResult<Result<MdtReply, WireError>> {
        let Some(target) = target else {
            return Ok(Err(WireError::new(
                Errno::Io,
                "the FID location database names no MDT for that FID",
            )));
        };
        let mut delay = Duration::from_millis(100);
        loop {
            match self.cluster.mdt_call(target, req.clone()).await {
                Ok(reply) => return Ok(Ok(reply)),
                Err(PeerError::Refused(e)) => return Ok(Err(e)),
                Err(PeerError::Unreachable(e)) => {
                    if self.shutting_down() {
                        return Err(Self::shut());
                    }
                    tracing::warn!(mdt = target, error = %e, op = req.op_name(), "cross-MDT step waits for its MDT");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(5));
                }
            }
        }
    }

    /// Finishes the cross-MDT operations a previous run left half done.
    async fn finish_intents(self: Arc<Self>) {
        let found = (|| -> Result<Vec<Intent>, Fail> {
            let r = self.db.begin_read().map_err(StoreError::from)?;
            let t = r.open_table(store::INTENTS).map_err(StoreError::from)?;
            crate::remote::all(&t)
        })();
        let intents = match found {
            Ok(i) => i,
            Err(e) => {
                tracing::error!(error = %fail_to_wire(e), "cannot read cross-MDT intents");
                return;
            }
        };
        if !intents.is_empty() {
            tracing::info!(
                count = intents.len(),
                "finishing cross-MDT operations of the previous run"
            );
        }
        // A rename lock the previous run took is released unless an intent still holds it
        // (which releases it when finished).
        let keep = intents
            .iter()
            .filter(|i| i.kind.holds_rename_lock())
            .map(|i| i.op)
            .collect();
        if self.cluster.mdts().len() > 1 {
            let me = self.clone();
            tokio::spawn(async move { me.release_stale_rename_lock(keep).await });
        }
        let mut runs = tokio::task::JoinSet::new();
        for i in intents {
            let me = self.clone();
            runs.spawn(async move {
                let op = i.op;
                if let Err(e) = me.drive_intent(i).await {
                    tracing::info!(op, error = %e, "cross-MDT operation of the previous run ended");
                }
            });
        }
        while runs.join_next().await.is_some() {}
    }

    /// Gets a new FID sequence from the MGS unless another task just did.
    async fn refill_seq(&self) -> WireResult<()> {
        let _one_at_a_time = self.seq_lock.lock().await;
        // Whoever held the lock before may have fetched a sequence already.
        if self.counters.fids_left.load(Ordering::Relaxed) > 0 {
            return Ok(());
        }
        if let Outcome::Done(Ok(_)) = self.submit(0, WriteOp::HasFids).await? {
            return Ok(());
        }
        let range =
            self.cluster.alloc_seq(1).await.map_err(|e| {
                WireError::new(Errno::Again, format!("FID sequence grant failed: {e}"))
            })?;
        tracing::info!(
            start = range.start,
            end = range.end,
            "granted FID sequences"
        );
        match self.submit(0, WriteOp::GrantSeq(range)).await? {
            Outcome::Done(r) => r.map(|_| ()),
            Outcome::NeedSeq(_) | Outcome::CrossMdt(_) | Outcome::NeedDirMove { .. } => {
                Err(WireError::new(Errno::Io, "sequence grant not applied"))
            }
        }
    }
}

pub(crate) fn fail_to_wire(f: Fail) -> WireError {
    match f {
        Fail::Wire(e) => e,
        Fail::Store(e) => store_to_wire(&e),
        Fail::NeedSeq => WireError::new(Errno::Io, "no FID sequence"),
        Fail::CrossMdt(_) => WireError::new(Errno::Io, "a cross-MDT operation in a read"),
        Fail::NeedDirMove { .. } => WireError::new(Errno::Io, "a directory move in a read"),
    }
}

/// Fault injection for crash tests: when the environment variable `WEFT_FAILPOINT` names
/// `point`, the process aborts there (as a `kill -9` at that instant would stop it).
pub(crate) fn failpoint(point: &str) {
    static ARMED: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let armed = ARMED.get_or_init(|| std::env::var("WEFT_FAILPOINT").ok());
    if armed.as_deref() == Some(point) {
        tracing::error!(point, "failpoint reached: aborting");
        std::process::abort();
    }
}
