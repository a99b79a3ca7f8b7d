//! Names whose inode lives on another MDT, for non-directories: a hard link made in a
//! directory of another MDT, a rename into one, and the removal of such a name. Each is a
//! cross-MDT operation with an intent on the MDT of the name being added or removed (see
//! [`crate::remote`] for the three steps); this module holds the prepare steps and the
//! other MDT's side: [`MdtRequest::AddLink`], [`MdtRequest::DropLink`] and
//! [`MdtRequest::InsertEntry`], each done once per (coordinator, operation) — the record
//! in `remote_ops` answers a resend — until the coordinator says [`MdtRequest::ForgetOps`].
//!
//! [`MdtRequest::AddLink`]: weft_proto::mdt::MdtRequest::AddLink
//! [`MdtRequest::DropLink`]: weft_proto::mdt::MdtRequest::DropLink
//! [`MdtRequest::InsertEntry`]: weft_proto::mdt::MdtRequest::InsertEntry
//! [`MdtRequest::ForgetOps`]: weft_proto::mdt::MdtRequest::ForgetOps

use crate::commit::Origin;
use crate::dir_moves::DirMove;
use crate::engine::{Effects, Engine, LINK_MAX, Tx};
use crate::error::{Fail, fail};
use crate::names::check_name;
use crate::namespace::{Caller, EntryAt, Renaming, load_dir};
use crate::perm::{self, MAY_EXEC, MAY_WRITE};
use crate::remote::{Intent, IntentKind, RemoteOp, new_op_id, pending, remote_op_key};
use crate::store::{self, Dirent, Inode};
use redb::ReadableTable;
use weft_proto::mdt::{Credentials, FileKind, MdtReply};
use weft_proto::{Errno, Fid, Timestamp};

/// A name another MDT gives an inode, the destination half of its rename: the fields of
/// [`MdtRequest::InsertEntry`] but the operation and the caller.
///
/// [`MdtRequest::InsertEntry`]: weft_proto::mdt::MdtRequest::InsertEntry
#[derive(Debug, Clone, Copy)]
pub(crate) struct IncomingEntry<'a> {
    /// The name, in a directory of this MDT.
    pub at: EntryAt<'a>,
    /// The inode it names.
    pub fid: Fid,
    /// That inode's type.
    pub kind: FileKind,
    /// `RENAME_NOREPLACE`: an existing name fails with EEXIST.
    pub noreplace: bool,
}

impl Engine {
    /// Whether `fid` lives on another MDT, by the FID location database.
    pub(crate) fn is_foreign(&self, fid: Fid) -> bool {
        self.cluster
            .mdt_of(fid)
            .is_some_and(|m| m != self.meta.index)
    }

    /// Step 1's end for every cross-MDT operation: the intent, written in this
    /// transaction, and the answer that hands it to the request path.
    pub(crate) fn start_intent(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        at: &EntryAt<'_>,
        kind: IntentKind,
        origin: &Origin,
    ) -> Result<MdtReply, Fail> {
        self.start_intent_as(tx, fx, new_op_id(), at, kind, origin)
    }

    /// [`Engine::start_intent`] with the operation id `op` (a directory move's, which
    /// holds the rename lock under that id).
    pub(crate) fn start_intent_as(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        op: u64,
        at: &EntryAt<'_>,
        kind: IntentKind,
        origin: &Origin,
    ) -> Result<MdtReply, Fail> {
        let intent = Intent {
            op,
            parent: at.parent,
            name: at.name.to_vec(),
            kind,
            client: origin.client,
            seq: origin.seq,
        };
        self.put_intent(tx, fx, &intent)?;
        Err(Fail::CrossMdt(Box::new(intent)))
    }

    /// An intent already on the name: the same client request goes on with it, anything
    /// else is refused with `errno`.
    pub(crate) fn existing_intent(
        tx: &Tx<'_>,
        parent: Fid,
        name: &[u8],
        origin: &Origin,
        errno: Errno,
    ) -> Result<(), Fail> {
        match pending(&tx.intents, parent, name)? {
            Some(i) if i.answers(origin) => Err(Fail::CrossMdt(Box::new(i))),
            Some(i) => Err(fail(
                i.refusal(errno),
                "a cross-MDT operation is changing that name",
            )),
            None => Ok(()),
        }
    }

    /// Step 1 of removing a name whose (non-directory) inode is on another MDT, from
    /// [`Engine::unlink`].
    pub(crate) fn prepare_remote_unlink(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        at: &EntryAt<'_>,
        de: &Dirent,
        dir: &Inode,
        who: &Caller<'_>,
    ) -> Result<MdtReply, Fail> {
        let Caller { cred, origin } = *who;
        Self::existing_intent(tx, at.parent, at.name, origin, Errno::Busy)?;
        perm::check(dir, cred, MAY_WRITE | MAY_EXEC)?;
        let kind = IntentKind::Unlink {
            fid: de.fid,
            sticky_owner: (dir.mode & perm::S_ISVTX != 0).then_some(dir.uid),
            cred: cred.clone(),
        };
        self.start_intent(tx, fx, at, kind, origin)
    }

    /// Step 1 of a hard link to an inode of another MDT, from [`Engine::link`].
    pub(crate) fn prepare_remote_link(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        fid: Fid,
        to: &EntryAt<'_>,
        who: &Caller<'_>,
    ) -> Result<MdtReply, Fail> {
        let EntryAt {
            parent: new_parent,
            name: new_name,
        } = *to;
        let Caller { cred, origin } = *who;
        Self::existing_intent(tx, new_parent, new_name, origin, Errno::Exist)?;
        let dir = load_dir(&tx.inodes, &tx.dir_stripes, new_parent, cred)?;
        check_name(new_name)?;
        if store::get_dirent(&tx.dirents, new_parent, new_name)?.is_some() {
            return Err(fail(Errno::Exist, "entry exists"));
        }
        perm::check(&dir, cred, MAY_WRITE | MAY_EXEC)?;
        self.start_intent(tx, fx, to, IntentKind::Link { fid }, origin)
    }

    /// Step 1 of renaming a non-directory into a directory of another MDT, from
    /// [`Engine::rename`]: this MDT holds the source name.
    pub(crate) fn prepare_remote_rename(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        r: &Renaming<'_>,
        who: &Caller<'_>,
        dm: Option<&DirMove>,
    ) -> Result<MdtReply, Fail> {
        let (src_parent, src_name) = (r.src.parent, r.src.name);
        let (dst_parent, dst_name) = (r.dst.parent, r.dst.name);
        let flags = r.flags;
        let Caller { cred, origin } = *who;
        let xdev = |why: &str| fail(Errno::XDev, why.to_string());
        Self::existing_intent(tx, src_parent, src_name, origin, Errno::Busy)?;
        let sdir = load_dir(&tx.inodes, &tx.dir_stripes, src_parent, cred)?;
        check_name(src_name)?;
        check_name(dst_name)?;
        let sde = store::get_dirent(&tx.dirents, src_parent, src_name)?
            .ok_or_else(|| fail(Errno::NoEnt, "no such entry"))?;
        if flags.exchange {
            return Err(xdev("RENAME_EXCHANGE across MDTs is not supported"));
        }
        let op = if sde.kind == FileKind::Directory {
            // A directory moves under the rename lock, with its new ancestors known.
            let dm = self.dir_move(dm, sde.fid, dst_parent)?;
            Self::check_dir_leaves(&sdir, dm, cred)?;
            dm.op
        } else {
            perm::check(&sdir, cred, MAY_WRITE | MAY_EXEC)?;
            match store::get_inode(&tx.inodes, sde.fid)? {
                Some(src) => perm::check_sticky(&sdir, &src, cred)?,
                // The owner is on another MDT: asked there (with a move's checks).
                None if sdir.mode & perm::S_ISVTX != 0 && cred.uid != 0 && cred.uid != sdir.uid => {
                    let dm = self.dir_move(dm, sde.fid, dst_parent)?;
                    perm::check_sticky(&sdir, &crate::dir_moves::inode_of(&dm.attr), cred)?;
                }
                None => {}
            }
            new_op_id()
        };
        let kind = IntentKind::Rename {
            dst_parent,
            dst_name: dst_name.to_vec(),
            fid: sde.fid,
            kind: sde.kind,
            noreplace: flags.noreplace,
            cred: cred.clone(),
        };
        self.start_intent_as(tx, fx, op, &r.src, kind, origin)
    }

    /// A rename here gave `name` to another inode; the non-directory `fid` of another MDT
    /// it named loses that link there (an intent, finished by the request path).
    pub(crate) fn defer_link_drop(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        at: &EntryAt<'_>,
        fid: Fid,
        origin: &Origin,
    ) -> Result<MdtReply, Fail> {
        self.start_intent(tx, fx, at, IntentKind::LinkDropped { fid }, origin)
    }

    /// Step 3 for a name removed (unlink done on the inode's MDT, or a rename's new name
    /// made there): removes the entry if it still names `fid`.
    pub(crate) fn remove_entry_of(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        parent: Fid,
        name: &[u8],
        fid: Fid,
    ) -> Result<(), Fail> {
        let still = store::get_dirent(&tx.dirents, parent, name)?;
        if still.is_some_and(|d| d.fid == fid) {
            tx.dirents
                .remove(store::dirent_key(parent, name).as_slice())?;
            touch_dir(self, tx, fx, parent)?;
        }
        Ok(())
    }

    /// Step 3 of a hard link: the new name.
    pub(crate) fn insert_entry_of(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        parent: Fid,
        name: &[u8],
        fid: Fid,
        kind: FileKind,
    ) -> Result<(), Fail> {
        let de = store::encode(&Dirent { fid, kind })?;
        tx.dirents
            .insert(store::dirent_key(parent, name).as_slice(), de.as_slice())?;
        touch_dir(self, tx, fx, parent)
    }

    fn op_done(tx: &Tx<'_>, rop: &RemoteOp) -> Result<bool, Fail> {
        Ok(tx.remote_ops.get(rop.key().as_slice())?.is_some())
    }

    fn mark_done(tx: &mut Tx<'_>, fx: &mut Effects, rop: &RemoteOp, fid: Fid) -> Result<(), Fail> {
        tx.remote_ops
            .insert(rop.key().as_slice(), fid.to_bytes().as_slice())?;
        fx.wrote = true;
        Ok(())
    }

    /// The other side of a hard link made on another MDT.
    pub(crate) fn add_link(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        rop: &RemoteOp,
        fid: Fid,
    ) -> Result<MdtReply, Fail> {
        let mut ino = store::get_inode(&tx.inodes, fid)?
            .ok_or_else(|| fail(Errno::NoEnt, format!("no inode {fid}")))?;
        if Self::op_done(tx, rop)? {
            return Ok(MdtReply::Attr(ino.attr(fid, self.handles().count(fid))));
        }
        if ino.is_dir() {
            return Err(fail(
                Errno::Perm,
                "hard links to directories are not allowed",
            ));
        }
        if ino.nlink == 0 {
            return Err(fail(Errno::NoEnt, "inode was unlinked"));
        }
        if ino.nlink >= LINK_MAX {
            return Err(fail(Errno::MLink, "too many links"));
        }
        // Mutations start here.
        ino.nlink += 1;
        ino.ctime = Timestamp::now();
        self.put_inode(tx, fx, fid, &ino)?;
        Self::mark_done(tx, fx, rop, fid)?;
        Ok(MdtReply::Attr(ino.attr(fid, self.handles().count(fid))))
    }

    /// The other side of removing a name (on another MDT) of a non-directory.
    pub(crate) fn drop_link(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        rop: &RemoteOp,
        fid: Fid,
        sticky_owner: Option<u32>,
        cred: &Credentials,
    ) -> Result<MdtReply, Fail> {
        if Self::op_done(tx, rop)? {
            return Ok(MdtReply::Ok);
        }
        let ino = store::get_inode(&tx.inodes, fid)?
            .ok_or_else(|| fail(Errno::NoEnt, format!("no inode {fid}")))?;
        if ino.is_dir() {
            return Err(fail(Errno::IsDir, "is a directory"));
        }
        if let Some(owner) = sticky_owner
            && cred.uid != 0
            && cred.uid != owner
            && cred.uid != ino.uid
        {
            return Err(fail(Errno::Perm, "sticky directory: not the owner"));
        }
        // Mutations start here.
        self.drop_one_link(tx, fx, fid, ino)?;
        Self::mark_done(tx, fx, rop, fid)?;
        Ok(MdtReply::Ok)
    }

    /// The destination half of a rename from another MDT: the name `e.at` now names
    /// `e.fid`, replacing a non-directory that was there (whose inode must be here).
    /// Answers `Entry` and changes nothing when the name names `e.fid` already.
    pub(crate) fn insert_entry(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        rop: &RemoteOp,
        e: &IncomingEntry<'_>,
        cred: &Credentials,
    ) -> Result<MdtReply, Fail> {
        let IncomingEntry {
            at: EntryAt { parent, name },
            fid,
            kind,
            noreplace,
        } = *e;
        if Self::op_done(tx, rop)? {
            return Ok(MdtReply::Ok);
        }
        let dir = load_dir(&tx.inodes, &tx.dir_stripes, parent, cred)?;
        check_name(name)?;
        if let Some(i) = pending(&tx.intents, parent, name)? {
            return Err(fail(
                i.refusal(Errno::Busy),
                "a cross-MDT operation is changing that name",
            ));
        }
        perm::check(&dir, cred, MAY_WRITE | MAY_EXEC)?;
        if kind == FileKind::Directory {
            return self.insert_dir_entry(tx, fx, rop, e, dir, cred);
        }
        // The name's present inode: here (loses its link now), or on another MDT (loses
        // it through an intent of this MDT, after this transaction).
        let victim = match store::get_dirent(&tx.dirents, parent, name)? {
            // Another name of the same inode: the rename does nothing (POSIX), and the
            // coordinator must keep the source name.
            Some(d) if d.fid == fid => return Ok(MdtReply::Entry { fid, kind }),
            Some(_) if noreplace => return Err(fail(Errno::Exist, "destination exists")),
            Some(d) if d.kind == FileKind::Directory => {
                return Err(fail(
                    Errno::IsDir,
                    "cannot replace a directory with a non-directory",
                ));
            }
            Some(d) => match store::get_inode(&tx.inodes, d.fid)? {
                Some(v) if v.is_dir() => {
                    return Err(fail(
                        Errno::IsDir,
                        "cannot replace a directory with a non-directory",
                    ));
                }
                Some(v) => {
                    perm::check_sticky(&dir, &v, cred)?;
                    Some((d.fid, Some(v)))
                }
                None if dir.mode & perm::S_ISVTX != 0 && cred.uid != 0 && cred.uid != dir.uid => {
                    return Err(fail(
                        Errno::XDev,
                        "sticky directory and an inode on another MDT",
                    ));
                }
                None => Some((d.fid, None)),
            },
            None => None,
        };
        // Mutations start here.
        let mut remote_victim = None;
        match victim {
            Some((vfid, Some(v))) => self.drop_one_link(tx, fx, vfid, v)?,
            Some((vfid, None)) => remote_victim = Some(vfid),
            None => {}
        }
        self.insert_entry_of(tx, fx, parent, name, fid, kind)?;
        Self::mark_done(tx, fx, rop, fid)?;
        if let Some(victim) = remote_victim {
            return self.defer_link_drop(tx, fx, &e.at, victim, &Origin::default());
        }
        Ok(MdtReply::Ok)
    }

    /// [`Engine::insert_entry`] of a directory moved here from another MDT (under the
    /// rename lock, which its coordinator holds): the name, a link of the new parent, the
    /// directory's ".." if its inode is here; an empty directory there is replaced.
    fn insert_dir_entry(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        rop: &RemoteOp,
        e: &IncomingEntry<'_>,
        mut dir: Inode,
        cred: &Credentials,
    ) -> Result<MdtReply, Fail> {
        let IncomingEntry {
            at: EntryAt { parent, name },
            fid,
            noreplace,
            ..
        } = *e;
        let victim = self.replaced_dir(tx, parent, name, fid, noreplace)?;
        if let Some((_, v)) = &victim {
            perm::check_sticky(&dir, v, cred)?;
        } else {
            dir.nlink = dir
                .nlink
                .checked_add(1)
                .ok_or_else(|| fail(Errno::MLink, "too many subdirectories"))?;
        }
        // Mutations start here.
        let now = Timestamp::now();
        if let Some((vfid, mut v)) = victim {
            v.nlink = 0;
            v.ctime = now;
            self.unlinked(tx, fx, vfid, &v)?;
        }
        if let Some(mut moved) = store::get_inode(&tx.inodes, fid)? {
            moved.parent = parent;
            moved.ctime = now;
            self.put_inode(tx, fx, fid, &moved)?;
        }
        self.put_inode(tx, fx, parent, &dir)?;
        self.insert_entry_of(tx, fx, parent, name, fid, FileKind::Directory)?;
        Self::mark_done(tx, fx, rop, fid)?;
        Ok(MdtReply::Ok)
    }

    /// Forgets the records of operations their coordinator has finished.
    pub(crate) fn forget_ops(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        from: u32,
        ops: &[u64],
    ) -> Result<MdtReply, Fail> {
        for &op in ops {
            tx.remote_ops.remove(remote_op_key(from, op).as_slice())?;
        }
        fx.wrote = true;
        Ok(MdtReply::Ok)
    }
}

/// A directory's entries changed: mtime and ctime.
fn touch_dir(engine: &mut Engine, tx: &mut Tx<'_>, fx: &mut Effects, fid: Fid) -> Result<(), Fail> {
    if let Some(mut dir) = store::get_inode(&tx.inodes, fid)? {
        let now = Timestamp::now();
        dir.mtime = now;
        dir.ctime = now;
        engine.put_inode(tx, fx, fid, &dir)?;
    }
    Ok(())
}
