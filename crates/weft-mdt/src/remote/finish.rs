//! Step 3 of a cross-MDT operation (commit thread): apply the other MDT's answer to the
//! names here, record the client's reply and delete the intent, in one transaction.

use super::*;

impl Engine {
    /// Step 3: applies the other MDT's answer to the intent `op` on (parent, name) and
    /// deletes it. An intent already finished (by a concurrent driver) answers from the
    /// recorded reply.
    pub(crate) fn finish_intent(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        intent: &Intent,
        outcome: &Result<MdtReply, WireError>,
    ) -> Result<MdtReply, Fail> {
        if let (IntentKind::Migrate { new: None, .. }, Ok(MdtReply::Attr(new))) =
            (&intent.kind, outcome)
        {
            return self.migrate_switch(tx, fx, intent, new);
        }
        let stored = pending(&tx.intents, intent.parent, &intent.name)?;
        if stored.as_ref().map(|i| i.op) != Some(intent.op) {
            let origin = Origin {
                client: intent.client,
                seq: intent.seq,
                acked: 0,
                resendable: true,
            };
            if intent.seq != 0
                && let Some(reply) = replies::recorded(tx, &origin)?
            {
                return Ok(reply);
            }
            return Err(fail(Errno::NoEnt, "the operation was finished already"));
        }
        tx.intents
            .remove(intent_key(intent.parent, &intent.name).as_slice())?;
        fx.wrote = true;
        let reply = match (&intent.kind, outcome) {
            (_, Err(e)) if !is_done(&intent.kind, e) => return Err(Fail::Wire(e.clone())),
            (IntentKind::Mkdir { .. }, Ok(MdtReply::Attr(attr))) => {
                self.link_remote_dir(tx, fx, intent, attr.fid)?;
                MdtReply::Attr(attr.clone())
            }
            (IntentKind::Rmdir { fid, .. }, _) => {
                self.unlink_remote_dir(tx, fx, intent, *fid)?;
                MdtReply::Ok
            }
            (
                IntentKind::MkdirStriped {
                    master,
                    shard0,
                    mode,
                    uid,
                    gid,
                    default_layout,
                    dir_default,
                    ..
                },
                Ok(MdtReply::DirStripes(Some(stripes))),
            ) => {
                let now = Timestamp::now();
                let new_dir = |parent: Fid| {
                    let mut ino = Inode::new(FileKind::Directory, *mode, *uid, *gid, now);
                    ino.nlink = 2;
                    ino.size = DIR_SIZE;
                    ino.blocks = DIR_SIZE / 512;
                    ino.parent = parent;
                    ino.default_layout.clone_from(default_layout);
                    ino
                };
                let ino = new_dir(intent.parent);
                self.put_inode(tx, fx, *master, &ino)?;
                self.put_inode(tx, fx, *shard0, &new_dir(*master))?;
                if dir_default.is_some() {
                    self.put_dir_default(tx, fx, *master, dir_default.as_ref())?;
                    self.put_dir_default(tx, fx, *shard0, dir_default.as_ref())?;
                }
                let v = store::encode(stripes)?;
                tx.dir_stripes
                    .insert(master.to_bytes().as_slice(), v.as_slice())?;
                self.meta.dirs += 2;
                self.link_remote_dir(tx, fx, intent, *master)?;
                MdtReply::Attr(ino.attr(*master, 0))
            }
            (IntentKind::RmdirStriped { master, .. }, _) => {
                self.unlink_remote_dir(tx, fx, intent, *master)?;
                tx.dir_stripes.remove(master.to_bytes().as_slice())?;
                if let Some(mut ino) = store::get_inode(&tx.inodes, *master)? {
                    ino.nlink = 0;
                    ino.ctime = Timestamp::now();
                    self.unlinked(tx, fx, *master, &ino)?;
                }
                MdtReply::Ok
            }
            (IntentKind::Unlink { fid, .. }, _) => {
                self.remove_entry_of(tx, fx, intent.parent, &intent.name, *fid)?;
                MdtReply::Ok
            }
            // The destination was another name of the same inode: nothing to do.
            (IntentKind::Rename { .. }, Ok(MdtReply::Entry { .. })) => MdtReply::Ok,
            (
                IntentKind::Rename {
                    fid,
                    kind,
                    dst_parent,
                    ..
                },
                Ok(_),
            ) => {
                self.remove_entry_of(tx, fx, intent.parent, &intent.name, *fid)?;
                if *kind == FileKind::Directory {
                    self.dir_moved_away(tx, fx, intent.parent, *fid, *dst_parent)?;
                }
                MdtReply::Ok
            }
            (IntentKind::LinkDropped { .. } | IntentKind::DirMoved { .. }, _) => MdtReply::Ok,
            (IntentKind::Migrate { new: Some(new), .. }, _) => MdtReply::Attr(new.clone()),
            (IntentKind::Link { fid }, Ok(MdtReply::Attr(attr))) => {
                self.insert_entry_of(tx, fx, intent.parent, &intent.name, *fid, attr.kind)?;
                MdtReply::Attr(attr.clone())
            }
            (
                IntentKind::Mkdir { .. }
                | IntentKind::MkdirStriped { .. }
                | IntentKind::Link { .. }
                | IntentKind::Rename { .. }
                | IntentKind::Migrate { new: None, .. },
                other,
            ) => {
                return Err(fail(
                    Errno::Proto,
                    format!("unexpected answer to a remote mkdir: {other:?}"),
                ));
            }
        };
        if intent.seq != 0 {
            let origin = Origin {
                client: intent.client,
                seq: intent.seq,
                acked: 0,
                resendable: true,
            };
            replies::record(&self.counters, tx, &origin, &reply)?;
        }
        Ok(reply)
    }

    /// Step 3 of moving directory `fid` from `parent` here to another MDT: the parent
    /// loses its link, and the directory's ".." changes if its inode is here.
    pub(super) fn dir_moved_away(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        parent: Fid,
        fid: Fid,
        dst_parent: Fid,
    ) -> Result<(), Fail> {
        if let Some(mut dir) = store::get_inode(&tx.inodes, parent)? {
            dir.nlink = dir.nlink.saturating_sub(1).max(2);
            self.put_inode(tx, fx, parent, &dir)?;
        }
        if let Some(mut moved) = store::get_inode(&tx.inodes, fid)?
            && moved.parent == parent
        {
            moved.parent = dst_parent;
            moved.ctime = Timestamp::now();
            self.put_inode(tx, fx, fid, &moved)?;
        }
        Ok(())
    }

    pub(super) fn link_remote_dir(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        intent: &Intent,
        fid: Fid,
    ) -> Result<(), Fail> {
        let mut dir = crate::namespace::load(&tx.inodes, intent.parent)?;
        let now = Timestamp::now();
        let de = store::encode(&Dirent {
            fid,
            kind: FileKind::Directory,
        })?;
        tx.dirents.insert(
            store::dirent_key(intent.parent, &intent.name).as_slice(),
            de.as_slice(),
        )?;
        dir.nlink = dir.nlink.saturating_add(1);
        dir.mtime = now;
        dir.ctime = now;
        self.put_inode(tx, fx, intent.parent, &dir)?;
        Ok(())
    }

    pub(super) fn unlink_remote_dir(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        intent: &Intent,
        fid: Fid,
    ) -> Result<(), Fail> {
        let key = store::dirent_key(intent.parent, &intent.name);
        let still = store::get_dirent(&tx.dirents, intent.parent, &intent.name)?;
        if still.is_some_and(|d| d.fid == fid) {
            tx.dirents.remove(key.as_slice())?;
            if let Some(mut dir) = store::get_inode(&tx.inodes, intent.parent)? {
                let now = Timestamp::now();
                dir.nlink = dir.nlink.saturating_sub(1).max(2);
                dir.mtime = now;
                dir.ctime = now;
                self.put_inode(tx, fx, intent.parent, &dir)?;
            }
        }
        Ok(())
    }
}

/// Whether the other MDT's error still means the step happened: removing a directory that
/// is gone already (a resend after a crash) is done.
pub(super) fn is_done(kind: &IntentKind, e: &WireError) -> bool {
    match kind {
        IntentKind::Rmdir { .. } | IntentKind::Unlink { .. } => e.errno == Errno::NoEnt,
        // The rename is done whatever the other MDT says (the link may be gone already).
        IntentKind::LinkDropped { .. } => true,
        // The entries moved already; the ".." of a directory that is not where it was is
        // left to `weft fsck` (under the rename lock nothing else moves it).
        IntentKind::DirMoved { .. } => true,
        // The name is the new directory's already.
        IntentKind::Migrate { new: Some(_), .. } => true,
        _ => false,
    }
}
