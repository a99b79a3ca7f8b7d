//! Opening an MDT: formatting a new store or checking an existing one, replaying the redo
//! log, creating the root on MDT0 and starting the commit thread.

use super::*;

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
        Self::open_on(dir, opts, cluster, |path| Database::create(path))
    }

    /// Like [`Mdt::open`] with the store on `backend` instead of the file [`DB_FILE`] in
    /// `dir` (which still holds the redo log). Tests use it to make the store fail (see
    /// [`crate::failing_backend`]).
    pub fn open_with_backend(
        dir: &Path,
        opts: MdtOptions,
        cluster: Arc<dyn ClusterView>,
        backend: impl redb::StorageBackend,
    ) -> Result<Arc<Mdt>, MdtError> {
        Self::open_on(dir, opts, cluster, |_| {
            redb::Builder::new().create_with_backend(backend)
        })
    }

    /// [`Mdt::open`] with the database made by `create` from the store file's path.
    fn open_on(
        dir: &Path,
        opts: MdtOptions,
        cluster: Arc<dyn ClusterView>,
        create: impl FnOnce(&Path) -> Result<Database, redb::DatabaseError>,
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
        crate::failpoints::arm_from_env();
        let path = dir.join(DB_FILE);
        // The store's file lock (redb's `flock`) is the MDT's fence: taken before anything
        // is read or written, dropped by the kernel when its holder dies.
        let db = Arc::new(create(&path).map_err(|e| match e {
            redb::DatabaseError::DatabaseAlreadyOpen => MdtError::Busy {
                path: dir.display().to_string(),
            },
            e => MdtError::from(StoreError::from(e)),
        })?);
        let shown = dir.display().to_string();

        let txn = db.begin_write().map_err(StoreError::from)?;
        // Every table exists from the start: write transactions open only those they touch
        // (`redo::WTable`), and reads of a table never written would fail.
        for &(_, def) in crate::redo::TABLES {
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
        let (mut meta, fresh) = match existing {
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
                    released: Some(Vec::new()),
                },
                true,
            ),
        };
        if meta.released.is_none() {
            // A store from before the counts: count once, kept from now on.
            let counts = count_released(&txn)?;
            tracing::info!(archives = counts.len(), "counted the released files");
            meta.released = Some(counts);
        }
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
        Ok(Arc::new_cyclic(|me| Mdt {
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
            hsm: crate::hsm::Coordinator::new(opts.hsm),
            me: me.clone(),
        }))
    }
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> MdtError + '_ {
    move |source| MdtError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// The released counts of every inode in the store (see [`Meta::released`]).
fn count_released(txn: &redb::WriteTransaction) -> Result<Vec<store::ReleasedCount>, StoreError> {
    use redb::ReadableTable;
    let t = txn.open_table(store::INODES).map_err(StoreError::from)?;
    let mut counts = Vec::new();
    for entry in t.iter().map_err(StoreError::from)? {
        let (_, v) = entry.map_err(StoreError::from)?;
        // A damaged record counts nothing here; it is an error where it is read.
        match store::decode::<store::InodeAttrs>("inodes", v.value()) {
            Ok(a) => store::move_share(&mut counts, None, a.released_share()),
            Err(e) => tracing::warn!(error = %e, "an inode record not counted"),
        }
    }
    Ok(counts)
}
