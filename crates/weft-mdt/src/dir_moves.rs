//! Directories moved to another parent on a file system of several MDTs.
//!
//! A rename that moves a directory to another parent must never make it its own
//! ancestor. One MDT can tell that only when the destination's whole ancestor chain is
//! stored on it, and only if no other MDT moves a directory meanwhile. So on a file system
//! of several MDTs every such rename runs under the file system's **rename lock** (as in
//! Lustre): a durable record on MDT0 naming the operation that holds it
//! ([`MdtRequest::RenameLock`]). The commit thread hands the rename back
//! ([`Fail::NeedDirMove`]); the request path takes the lock, walks the destination's
//! ancestors across MDTs ([`MdtRequest::DirParent`]), reads the moved directory's owner
//! and mode from its MDT, and submits the rename again with that [`DirMove`]. While the
//! lock is held no other directory changes parent, so the chain stays true until the
//! rename is done; it is released then, or, when the rename needed an intent, once the
//! intent is finished (after a crash, by the next run: the lock is durable and outlives
//! both processes). At start an MDT releases a lock its previous run took for an operation
//! that left no intent ([`RenameLockAction::ReleaseStale`]).
//!
//! What changes where, by where the three parties live (the MDT of the source name,
//! which the client asks, coordinates):
//! - all here: one transaction (`Engine::rename`);
//! - the destination directory here, the moved directory's inode elsewhere: the entries
//!   and link counts change here in one transaction that also writes an intent
//!   ([`IntentKind::DirMoved`]), whose remote step sets the directory's ".." on its MDT
//!   ([`MdtRequest::SetParent`]);
//! - the destination on another MDT: an intent ([`IntentKind::Rename`] of a directory);
//!   [`MdtRequest::InsertEntry`] there adds the name and the parent's link (and sets ".."
//!   if the inode is there), `SetParent` goes to the inode's MDT if that is a third one,
//!   and the finish removes the source name and link here (and sets ".." if the inode is
//!   here).
//!
//! Limits: RENAME_EXCHANGE of names on two MDTs, and replacing a directory whose inode is
//! on another MDT than its name (or a striped one) by a directory from another parent,
//! answer EXDEV.
//!
//! [`MdtRequest::RenameLock`]: weft_proto::mdt::MdtRequest::RenameLock
//! [`MdtRequest::DirParent`]: weft_proto::mdt::MdtRequest::DirParent
//! [`MdtRequest::SetParent`]: weft_proto::mdt::MdtRequest::SetParent
//! [`MdtRequest::InsertEntry`]: weft_proto::mdt::MdtRequest::InsertEntry
//! [`RenameLockAction::ReleaseStale`]: weft_proto::mdt::RenameLockAction::ReleaseStale
//! [`IntentKind::DirMoved`]: crate::remote::IntentKind::DirMoved
//! [`IntentKind::Rename`]: crate::remote::IntentKind::Rename

use crate::cluster::PeerError;
use crate::commit::{Origin, Outcome, WriteOp};
use crate::engine::{Effects, Engine, Tx};
use crate::error::{Fail, fail};
use crate::mdt::Mdt;
use crate::namespace::{Caller, Renaming, load_dir};
use crate::perm::{self, MAY_EXEC, MAY_WRITE};
use crate::remote::{IntentKind, RenameSource, new_op_id};
use crate::store::{self, Inode};
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};
use weft_proto::mdt::{Attr, Credentials, FileKind, MdtReply, MdtRequest, RenameLockAction};
use weft_proto::{Errno, Fid, Timestamp, WireError, WireResult};
use weft_rpc::Backoff;

/// Longest a directory rename waits for the rename lock before answering EBUSY.
const LOCK_WAIT: Duration = Duration::from_secs(30);
/// Deepest destination the ancestor walk follows (the MDT's own limit is larger; a chain
/// this deep is refused with ELOOP rather than walked across MDTs forever).
const MAX_WALK: usize = 4096;
/// The key of the one record of the rename-lock table.
const LOCK_KEY: &[u8] = b"lock";

/// What the request path learned, under the rename lock, for a rename that moves a
/// directory to another parent (or that needs the owner of an inode stored on another MDT
/// for the sticky-bit rule).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DirMove {
    /// The rename lock's operation (and the intent's, if the rename needs one).
    pub op: u64,
    /// The directory moved (or the inode whose owner is needed).
    pub dir: Fid,
    /// Its attributes, read from its MDT.
    pub attr: Attr,
    /// The destination directory, then its ancestors up to the root.
    pub ancestors: Vec<Fid>,
}

/// Who holds the rename lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Holder {
    from: u32,
    op: u64,
    run: u64,
}

impl crate::store::Record for Holder {}

/// An inode carrying the owner and mode of `attr`, for permission checks of an inode
/// stored on another MDT.
pub(crate) fn inode_of(attr: &Attr) -> Inode {
    Inode::new(attr.kind, attr.mode, attr.uid, attr.gid, attr.ctime)
}

impl Engine {
    /// Whether the file system has several MDTs (directory moves then need the lock).
    pub(crate) fn several_mdts(&self) -> bool {
        self.cluster.mdts().len() > 1
    }

    /// The checked [`DirMove`] for moving `dir` into `dst_parent`, or the request to get
    /// one. A directory never moves into itself or below itself (EINVAL).
    pub(crate) fn dir_move<'a>(
        &self,
        dm: Option<&'a DirMove>,
        dir: Fid,
        dst_parent: Fid,
    ) -> Result<&'a DirMove, Fail> {
        match dm {
            Some(dm) if dm.dir == dir && dm.ancestors.first() == Some(&dst_parent) => {
                if dm.ancestors.contains(&dir) {
                    return Err(fail(Errno::Inval, "cannot move a directory into itself"));
                }
                Ok(dm)
            }
            // First time, or the names changed since the request path looked.
            _ => Err(Fail::NeedDirMove { dir, dst_parent }),
        }
    }

    /// The permission checks of moving directory `src` (not stored here: `dm.attr`) out
    /// of `sdir`: write and search on the parent, the sticky-bit rule, and write on the
    /// directory itself (its ".." changes).
    pub(crate) fn check_dir_leaves(
        sdir: &Inode,
        dm: &DirMove,
        cred: &Credentials,
    ) -> Result<(), Fail> {
        let src = inode_of(&dm.attr);
        perm::check(sdir, cred, MAY_WRITE | MAY_EXEC)?;
        perm::check_sticky(sdir, &src, cred)?;
        perm::check(&src, cred, MAY_WRITE)?;
        Ok(())
    }

    /// MDT0's side of [`MdtRequest::RenameLock`].
    pub(crate) fn rename_lock(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        from: u32,
        op: u64,
        run: u64,
        action: &RenameLockAction,
    ) -> Result<MdtReply, Fail> {
        if self.meta.index != 0 {
            return Err(fail(Errno::Inval, "MDT0 holds the rename lock"));
        }
        let held: Option<Holder> = store::get(&tx.rename_lock, "rename_lock", LOCK_KEY)?;
        let me = Holder { from, op, run };
        let release = match (action, held) {
            (RenameLockAction::Take, None) => {
                let v = store::encode(&me)?;
                tx.rename_lock.insert(LOCK_KEY, v.as_slice())?;
                fx.wrote = true;
                return Ok(MdtReply::Ok);
            }
            (RenameLockAction::Take, Some(h)) if h.from == from && h.op == op => {
                return Ok(MdtReply::Ok);
            }
            (RenameLockAction::Take, Some(h)) => {
                return Err(fail(
                    Errno::Busy,
                    format!("MDT{} is moving a directory", h.from),
                ));
            }
            (RenameLockAction::Release, Some(h)) => h.from == from && h.op == op,
            (RenameLockAction::ReleaseStale { keep }, Some(h)) => {
                h.from == from && h.run != run && !keep.contains(&h.op)
            }
            (_, None) => false,
        };
        if release {
            tx.rename_lock.remove(LOCK_KEY)?;
            fx.wrote = true;
        }
        Ok(MdtReply::Ok)
    }

    /// The inode's side of a directory moved by another MDT ([`MdtRequest::SetParent`]).
    pub(crate) fn set_parent(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        fid: Fid,
        old_parent: Fid,
        new_parent: Fid,
    ) -> Result<MdtReply, Fail> {
        let mut ino = crate::namespace::load(&tx.inodes, fid)?;
        if !ino.is_dir() {
            return Err(fail(Errno::NotDir, "not a directory"));
        }
        if ino.parent == new_parent {
            return Ok(MdtReply::Ok);
        }
        if ino.parent != old_parent {
            return Err(fail(
                Errno::NoEnt,
                "the directory is not in the parent it moves from",
            ));
        }
        ino.parent = new_parent;
        ino.ctime = Timestamp::now();
        self.put_inode(tx, fx, fid, &ino)?;
        Ok(MdtReply::Ok)
    }

    /// A rename moving a directory whose inode is on another MDT between two directories
    /// of this MDT: the entries and link counts change here, and an intent sets the
    /// directory's ".." on its MDT.
    pub(crate) fn move_remote_dir_here(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        r: &Renaming<'_>,
        src: RenameSource,
        who: &Caller<'_>,
        dm: Option<&DirMove>,
    ) -> Result<MdtReply, Fail> {
        let (src_parent, src_name) = (r.src.parent, r.src.name);
        let (dst_parent, dst_name) = (r.dst.parent, r.dst.name);
        let flags = r.flags;
        let RenameSource { de: sde, dir: sdir } = src;
        let Caller { cred, origin } = *who;
        let noreplace = flags.noreplace;
        let dm = self.dir_move(dm, sde.fid, dst_parent)?;
        let ddir = load_dir(&tx.inodes, &tx.dir_stripes, dst_parent, cred)?;
        let victim = self.replaced_dir(tx, dst_parent, dst_name, sde.fid, noreplace)?;
        Self::check_dir_leaves(&sdir, dm, cred)?;
        perm::check(&ddir, cred, MAY_WRITE | MAY_EXEC)?;
        if let Some((_, v)) = &victim {
            perm::check_sticky(&ddir, v, cred)?;
        }
        let mut sdir = sdir;
        let mut ddir = ddir;
        sdir.nlink = sdir.nlink.saturating_sub(1).max(2);
        if victim.is_none() {
            ddir.nlink = ddir
                .nlink
                .checked_add(1)
                .ok_or_else(|| fail(Errno::MLink, "too many subdirectories"))?;
        }
        // Mutations start here.
        if let Some((vfid, mut v)) = victim {
            v.nlink = 0;
            v.ctime = Timestamp::now();
            self.unlinked(tx, fx, vfid, &v)?;
        }
        let v = store::encode(&sde)?;
        tx.dirents.insert(
            store::dirent_key(dst_parent, dst_name).as_slice(),
            v.as_slice(),
        )?;
        tx.dirents
            .remove(store::dirent_key(src_parent, src_name).as_slice())?;
        let now = Timestamp::now();
        for (fid, dir) in [(src_parent, &mut sdir), (dst_parent, &mut ddir)] {
            dir.mtime = now;
            dir.ctime = now;
            self.put_inode(tx, fx, fid, dir)?;
        }
        let kind = IntentKind::DirMoved {
            fid: sde.fid,
            old_parent: src_parent,
        };
        self.start_intent_as(tx, fx, dm.op, &r.dst, kind, origin)
    }

    /// The directory a directory moved into (`dst_parent`, `name`) replaces, if any: only
    /// an empty directory stored here may be replaced; `(FID, inode)` of it.
    pub(crate) fn replaced_dir(
        &self,
        tx: &Tx<'_>,
        dst_parent: Fid,
        name: &[u8],
        moved: Fid,
        noreplace: bool,
    ) -> Result<Option<(Fid, Inode)>, Fail> {
        let Some(d) = store::get_dirent(&tx.dirents, dst_parent, name)? else {
            return Ok(None);
        };
        if d.fid == moved {
            return Err(fail(Errno::Busy, "the directory is there already"));
        }
        if noreplace {
            return Err(fail(Errno::Exist, "destination exists"));
        }
        if d.kind != FileKind::Directory {
            return Err(fail(
                Errno::NotDir,
                "cannot replace a non-directory with a directory",
            ));
        }
        let Some(v) = store::get_inode(&tx.inodes, d.fid)? else {
            return Err(fail(
                Errno::XDev,
                "replacing a directory stored on another MDT by a directory from another parent",
            ));
        };
        if store::get_stripes(&tx.dir_stripes, d.fid)?.is_some() {
            return Err(fail(
                Errno::XDev,
                "replacing a striped directory is not supported yet",
            ));
        }
        if !store::dir_is_empty(&tx.dirents, d.fid)? || crate::remote::any_in(&tx.intents, d.fid)? {
            return Err(fail(Errno::NotEmpty, "destination directory not empty"));
        }
        Ok(Some((d.fid, v)))
    }
}

impl IntentKind {
    /// Whether the operation holds the rename lock until it is finished.
    pub(crate) fn holds_rename_lock(&self) -> bool {
        matches!(
            self,
            IntentKind::DirMoved { .. }
                | IntentKind::Rename {
                    kind: FileKind::Directory,
                    ..
                }
        )
    }
}

impl Mdt {
    /// Sends a rename-lock request to MDT0 (this MDT's own commit thread if it is MDT0)
    /// until it answers.
    async fn rename_lock_call(
        &self,
        op: u64,
        action: RenameLockAction,
    ) -> WireResult<Result<MdtReply, WireError>> {
        let req = MdtRequest::RenameLock {
            from: self.index(),
            op,
            run: self.run(),
            action,
        };
        if self.index() != 0 {
            return self.peer(Some(0), req).await;
        }
        match self.submit(0, WriteOp::Req(req, Origin::default())).await? {
            Outcome::Done(r) => Ok(r),
            _ => Err(WireError::new(Errno::Io, "rename lock not applied")),
        }
    }

    /// Takes the rename lock for operation `op`, waiting while another holds it.
    async fn take_rename_lock(&self, op: u64) -> WireResult<()> {
        let start = Instant::now();
        let mut backoff = Backoff::new(Duration::from_millis(1), Duration::from_millis(20));
        loop {
            match self.rename_lock_call(op, RenameLockAction::Take).await? {
                Ok(_) => return Ok(()),
                Err(e) if e.errno == Errno::Busy && start.elapsed() < LOCK_WAIT => {
                    backoff.wait().await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Releases the rename lock of operation `op` without waiting: MDT0 may be away, and
    /// the lock stays held there until it hears this (sent again until it does, or, if
    /// this process stops first, released by its next run).
    pub(crate) fn release_rename_lock(&self, op: u64) {
        let req = MdtRequest::RenameLock {
            from: self.index(),
            op,
            run: self.run(),
            action: RenameLockAction::Release,
        };
        if self.index() == 0 {
            // Queued on this MDT's own commit thread; durable with its batch.
            self.submit_detached(WriteOp::Req(req, Origin::default()));
            return;
        }
        let cluster = self.cluster();
        tokio::spawn(async move {
            let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(5));
            loop {
                match cluster.mdt_call(0, req.clone()).await {
                    Ok(_) => return,
                    Err(PeerError::Refused(e)) => {
                        tracing::warn!(op, error = %e, "rename lock not released");
                        return;
                    }
                    Err(PeerError::Unreachable(_)) => backoff.wait().await,
                }
            }
        });
    }

    /// At start: releases a rename lock an earlier run took for an operation that left no
    /// intent (`keep` lists those that did; they release it when finished).
    pub(crate) async fn release_stale_rename_lock(&self, keep: Vec<u64>) {
        if let Ok(Err(e)) = self
            .rename_lock_call(0, RenameLockAction::ReleaseStale { keep })
            .await
        {
            tracing::warn!(error = %e, "stale rename lock not released");
        }
    }

    /// Runs the read-only `req` about `fid` on the MDT holding it: this one's store, or
    /// that MDT until it answers. A refusal is an error.
    pub(crate) async fn read_at(&self, fid: Fid, req: MdtRequest) -> WireResult<MdtReply> {
        match self.cluster().mdt_of(fid) {
            Some(m) if m != self.index() => self.peer(Some(m), req).await?,
            _ => self.read(req).await,
        }
    }

    /// Takes the rename lock for a new operation and learns what moving `dir` into
    /// `dst_parent` needs. On an error the lock is released again.
    pub(crate) async fn prepare_dir_move(&self, dir: Fid, dst_parent: Fid) -> WireResult<DirMove> {
        let op = new_op_id();
        self.take_rename_lock(op).await?;
        // A crash here leaves the lock with no intent: the next run releases it.
        crate::failpoints::hit(crate::failpoints::DIR_MOVE_LOCKED);
        let learned = async {
            let mut ancestors = Vec::new();
            let mut cur = dst_parent;
            loop {
                if ancestors.len() >= MAX_WALK {
                    return Err(WireError::new(Errno::Loop, "destination too deep"));
                }
                ancestors.push(cur);
                if cur == Fid::ROOT {
                    break;
                }
                let parent = match self
                    .read_at(cur, MdtRequest::DirParent { fid: cur })
                    .await?
                {
                    MdtReply::DirParent { parent, .. } => parent,
                    other => return Err(unexpected("a parent lookup", &other)),
                };
                if parent == cur {
                    break;
                }
                cur = parent;
            }
            let attr = match self.read_at(dir, MdtRequest::GetAttr { fid: dir }).await? {
                MdtReply::Attr(a) => a,
                other => return Err(unexpected("a getattr", &other)),
            };
            Ok(DirMove {
                op,
                dir,
                attr,
                ancestors,
            })
        }
        .await;
        if learned.is_err() {
            self.release_rename_lock(op);
        }
        learned
    }
}

/// The error for an MDT's answer of the wrong kind.
pub(crate) fn unexpected(what: &str, reply: &MdtReply) -> WireError {
    WireError::new(
        Errno::Proto,
        format!("unexpected answer to {what}: {reply:?}"),
    )
}
