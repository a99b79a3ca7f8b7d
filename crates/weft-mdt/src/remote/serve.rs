//! The other MDT's side of a remote directory: creating and removing the directory inode
//! a coordinator asks for (idempotent, keyed by the coordinator's operation), and sealing
//! a striped directory's shard before it is removed.

use super::*;

/// A directory inode a coordinator asks for: the fields of
/// [`weft_proto::mdt::MdtRequest::CreateRemoteDir`] but its operation.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RemoteDir<'a> {
    /// The directory (on the coordinator) that names it, its "..".
    pub parent: Fid,
    /// Permission bits, decided by the coordinator.
    pub mode: u32,
    /// The owner.
    pub uid: u32,
    /// The group.
    pub gid: u32,
    /// The default layout of files made in it.
    pub default_layout: Option<&'a LayoutTemplate>,
    /// Its default for new subdirectories.
    pub dir_default: Option<&'a DirDefault>,
}

impl Engine {
    /// The other side of a remote mkdir: creates the directory inode for the coordinator's
    /// operation, or answers the one created for it before.
    pub(crate) fn create_remote_dir(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        rop: &RemoteOp,
        new: &RemoteDir<'_>,
    ) -> Result<MdtReply, Fail> {
        let key = rop.key();
        if let Some(v) = tx.remote_ops.get(key.as_slice())? {
            let fid = fid_of(v.value())?;
            let ino = crate::namespace::load(&tx.inodes, fid)?;
            return Ok(MdtReply::Attr(ino.attr(fid, self.handles().count(fid))));
        }
        if let Some(t) = new.default_layout {
            t.validate()
                .map_err(|e| fail(Errno::Inval, e.to_string()))?;
        }
        if !self.fid_available() {
            return Err(Fail::NeedSeq);
        }
        // Mutations start here.
        let fid = self.alloc_fid()?;
        let mut ino = Inode::new(
            FileKind::Directory,
            new.mode,
            new.uid,
            new.gid,
            Timestamp::now(),
        );
        ino.nlink = 2;
        ino.size = DIR_SIZE;
        ino.blocks = DIR_SIZE / 512;
        ino.parent = new.parent;
        ino.default_layout = new.default_layout.cloned();
        self.put_inode(tx, fx, fid, &ino)?;
        if new.dir_default.is_some() {
            self.put_dir_default(tx, fx, fid, new.dir_default)?;
        }
        tx.remote_ops
            .insert(key.as_slice(), fid.to_bytes().as_slice())?;
        tx.remote_dirs
            .insert(fid.to_bytes().as_slice(), key.as_slice())?;
        self.meta.dirs += 1;
        Ok(MdtReply::Attr(ino.attr(fid, 0)))
    }

    /// The other side of removing a remote directory: removes the inode if it is empty.
    pub(crate) fn remove_remote_dir(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        fid: Fid,
        parent: Fid,
        sticky_owner: Option<u32>,
        cred: &Credentials,
    ) -> Result<MdtReply, Fail> {
        let Some(mut ino) = store::get_inode(&tx.inodes, fid)? else {
            return Err(fail(Errno::NoEnt, "the directory is gone"));
        };
        if !ino.is_dir() {
            return Err(fail(Errno::NotDir, "not a directory"));
        }
        if ino.parent != parent {
            // Named in `parent` by a move from another MDT whose ".." is set last, or not
            // there at all: not removed, and not "removed already" either (ENOENT: the
            // coordinator would drop the name and leave the directory orphaned).
            return Err(fail(
                Errno::Busy,
                "the directory is not (yet) in that parent",
            ));
        }
        if let Some(owner) = sticky_owner
            && cred.uid != 0
            && cred.uid != owner
            && cred.uid != ino.uid
        {
            return Err(fail(
                Errno::Perm,
                "sticky directory: not the owner of the entry",
            ));
        }
        if !store::dir_is_empty(&tx.dirents, fid)? {
            return Err(fail(Errno::NotEmpty, "directory not empty"));
        }
        // Mutations start here. A striped directory's master goes with its stripes record
        // (its coordinator removed the shards first).
        if let Some(v) = tx.remote_dirs.remove(fid.to_bytes().as_slice())? {
            let key = v.value().to_vec();
            tx.remote_ops.remove(key.as_slice())?;
        }
        tx.dir_stripes.remove(fid.to_bytes().as_slice())?;
        ino.nlink = 0;
        ino.ctime = Timestamp::now();
        self.unlinked(tx, fx, fid, &ino)?;
        Ok(MdtReply::Ok)
    }

    /// Seals an empty directory shard for removal (it refuses new entries: a directory
    /// with no links is a removed one) or unseals it.
    pub(crate) fn seal_dir(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        fid: Fid,
        seal: bool,
    ) -> Result<MdtReply, Fail> {
        let Some(mut ino) = store::get_inode(&tx.inodes, fid)? else {
            return Err(fail(Errno::NoEnt, "the directory is gone"));
        };
        if !ino.is_dir() {
            return Err(fail(Errno::NotDir, "not a directory"));
        }
        match (seal, ino.nlink) {
            (true, 0) | (false, 2..) => return Ok(MdtReply::Ok),
            (true, _) if !store::dir_is_empty(&tx.dirents, fid)? => {
                return Err(fail(Errno::NotEmpty, "directory not empty"));
            }
            (true, _) => ino.nlink = 0,
            (false, _) => ino.nlink = 2,
        }
        self.put_inode(tx, fx, fid, &ino)?;
        Ok(MdtReply::Ok)
    }
}

pub(super) fn fid_of(bytes: &[u8]) -> Result<Fid, Fail> {
    let b: [u8; 16] = bytes.try_into().map_err(|_| {
        Fail::Store(crate::error::StoreError::Corrupt {
            table: "remote_ops",
            message: "a FID of the wrong length".into(),
        })
    })?;
    Ok(Fid::from_bytes(b))
}
