//! Dispatching requests: reads to the read path, lock requests to the lock table, changes
//! to the commit thread (inline when alone), with the rounds a change may need (a FID
//! sequence from the MGS, the rename lock for a directory move, a cross-MDT intent).

use super::*;

impl Mdt {
    /// Handles one request from connection `conn_id` (handles and locks belong to that
    /// connection). Lock requests are answered for an anonymous client; the RPC handler
    /// passes the connection's identity through [`LockTable::execute`] instead.
    pub async fn execute(&self, conn_id: u64, req: MdtRequest) -> WireResult<MdtReply> {
        self.execute_from(conn_id, Origin::default(), req).await
    }

    /// Like [`Mdt::execute`] for a request from a known client: a numbered change's reply
    /// is recorded with it and a resend of the same number answered from that record (see
    /// [`weft_rpc::RequestContext`]); handles the client opened on a connection that broke are
    /// its own again.
    pub async fn execute_from(
        &self,
        conn_id: u64,
        origin: Origin,
        req: MdtRequest,
    ) -> WireResult<MdtReply> {
        self.counters.requests.fetch_add(1, Ordering::Relaxed);
        let class = req.class();
        if class == RequestClass::Change
            && !self.shutting_down()
            && let Some(r) = crate::fast::try_run(&self.db, &self.handles, conn_id, &req)
        {
            self.counters.fast_ops.fetch_add(1, Ordering::Relaxed);
            return r.map_err(fail_to_wire);
        }
        match (class, req) {
            (RequestClass::Read, MdtRequest::FsckInodes { after, max }) => {
                let db = self.db.clone();
                self.blocking(move || crate::fsck::inodes(&db, after, max))
                    .await
            }
            (RequestClass::Read, MdtRequest::FsckEntries { after, max }) => {
                let db = self.db.clone();
                self.blocking(move || crate::fsck::entries(&db, after.as_deref(), max))
                    .await
            }
            (RequestClass::Read, req) => self.read(req).await,
            (RequestClass::Lock, req) => {
                let anonymous = Caller {
                    conn: conn_id,
                    client: Uuid::nil(),
                    closed: &|| false,
                };
                self.locks.execute(&anonymous, req).await
            }
            (RequestClass::Sync, _) => self.write(conn_id, WriteOp::Sync).await,
            (RequestClass::Hsm, MdtRequest::HsmRestore { fid, start, end }) => {
                self.hsm_restore(fid, start, end).await
            }
            (RequestClass::Hsm, MdtRequest::HsmPccWait { fid, wait_ms }) => {
                self.hsm_pcc_wait(fid, wait_ms).await
            }
            (RequestClass::Hsm, MdtRequest::HsmTieringWants { wants }) => {
                if wants.len() > weft_proto::hsm::TIERING_WANTS_MAX {
                    return Err(WireError::new(
                        Errno::Inval,
                        format!("{} tiering wants: more than one per OST", wants.len()),
                    ));
                }
                Ok(MdtReply::TieringStuck(self.cluster.tiering_wants(&wants)))
            }
            (RequestClass::Hsm, MdtRequest::HsmAction { fid }) => {
                Ok(MdtReply::HsmAction(self.hsm.action(fid)))
            }
            (RequestClass::Hsm, _) => Err(WireError::new(Errno::Proto, "not an HSM request")),
            (RequestClass::Change, req) => {
                let detach = matches!(req, MdtRequest::HsmPccRw { attach: false, .. });
                let r = self.write(conn_id, WriteOp::Req(req, origin)).await;
                if detach && r.is_ok() {
                    self.pcc_detached();
                }
                r
            }
        }
    }

    /// Forgets a connection: releases its locks, closes its handles (which may destroy
    /// orphans). Does not wait.
    pub fn disconnect(&self, conn_id: u64) {
        self.locks.disconnect(conn_id);
        if let Some(s) = self.sender.lock().as_ref() {
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
        let Some(sender) = self.sender.lock().clone() else {
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
            let upto = handles.lock().last_park();
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

    pub(crate) async fn read(&self, req: MdtRequest) -> WireResult<MdtReply> {
        // Point reads (one inode, one entry, one xattr) run inline: they are served from
        // redb's page cache in microseconds, and handing them to a blocking thread cost more
        // than the read itself (two thread switches per request: measured with
        // `weft bench-mdt`: docs/perf.md, "Inline point reads"). Scans (readdir) and
        // statfs, which may touch many pages or the disk, go to a blocking thread.
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

    pub(crate) async fn blocking(
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
        self.sender.lock().is_none()
    }

    pub(crate) fn shut() -> WireError {
        WireError::new(Errno::Io, "MDT is shutting down")
    }

    pub(crate) async fn submit(&self, conn: u64, op: WriteOp) -> WireResult<Outcome> {
        let (reply, rx) = oneshot::channel();
        let sender = self.sender.lock().clone().ok_or_else(Self::shut)?;
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
        if let Some(s) = self.sender.lock().as_ref() {
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

    pub(crate) async fn write(&self, conn: u64, op: WriteOp) -> WireResult<MdtReply> {
        // The rename lock this request took for a directory move, if it still holds it.
        let mut lock_op = None;
        let r = self.write_rounds(conn, op, &mut lock_op).await;
        if let Some(op) = lock_op {
            self.release_rename_lock(op);
        }
        r
    }

    pub(crate) async fn write_rounds(
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

    /// Gets a new FID sequence from the MGS unless another task just did.
    pub(crate) async fn refill_seq(&self) -> WireResult<()> {
        let _one_at_a_time = self.seq_lock.lock().await;
        // Whoever held the lock before may have fetched a sequence already.
        if self.counters.fids_left.load(Ordering::Relaxed) > 0 {
            return Ok(());
        }
        if let Outcome::Done(Ok(_)) = self.submit(0, WriteOp::HasFids).await? {
            return Ok(());
        }
        let range = self.cluster.alloc_seq(1).await.map_err(|e| {
            // The MGS unreachable for a moment: the client sends the request again.
            WireError::new(Errno::InProgress, format!("FID sequence grant failed: {e}"))
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
