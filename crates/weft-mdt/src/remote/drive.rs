//! Step 2 of a cross-MDT operation (request path): the driver asks the other MDTs, each
//! request idempotent there, then hands their answer to step 3; at start it finishes every
//! intent a previous run left.

use super::*;
use crate::cluster::PeerError;
use crate::commit::{Outcome, WriteOp};
use crate::error::StoreError;
use crate::mdt::{Mdt, fail_to_wire};
use redb::ReadableDatabase;
use std::sync::Arc;
use std::time::Duration;
use weft_proto::mdt::{DirStripes, MdtRequest};
use weft_proto::{Message, WireResult};

impl Mdt {
    /// Steps 2 and 3 of a cross-MDT operation ([`crate::remote`]), by one driver at a
    /// time ([`crate::drivers`]): a driver that waited for another finds the intent
    /// finished and answers from its recorded reply, without asking the other MDTs again.
    pub(crate) async fn drive_intent(&self, intent: Intent) -> WireResult<MdtReply> {
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
    pub(crate) async fn drive_claimed_intent(&self, intent: Intent) -> WireResult<MdtReply> {
        crate::failpoints::hit(crate::failpoints::CROSS_MDT_BEFORE_REMOTE);
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
        crate::failpoints::hit(crate::failpoints::CROSS_MDT_BEFORE_FINISH);
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
    pub(crate) async fn remove_remote_dir(
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
    pub(crate) async fn remove_shards(
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
        let mut backoff =
            weft_rpc::Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
        loop {
            match self.cluster.mdt_call(target, req.clone()).await {
                Ok(reply) => return Ok(Ok(reply)),
                Err(PeerError::Refused(e)) => return Ok(Err(e)),
                Err(PeerError::Unreachable(e)) => {
                    if self.shutting_down() {
                        return Err(Self::shut());
                    }
                    tracing::warn!(mdt = target, error = %e, op = req.op_name(), "cross-MDT step waits for its MDT");
                    backoff.wait().await;
                }
            }
        }
    }

    /// Finishes the cross-MDT operations a previous run left half done.
    pub(crate) async fn finish_intents(self: Arc<Self>) {
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
}
