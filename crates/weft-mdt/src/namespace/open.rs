//! Opens and closes that go through the commit thread (`O_TRUNC`, a size to record),
//! size merges, and closing the handles of a connection that went away.

use super::attr::kill_suid;
use super::*;

/// How a handle is opened: its flags, by whom, and whether the caller's access is checked
/// (not for a file the same request created).
#[derive(Debug, Clone, Copy)]
pub(super) struct OpenAs<'a> {
    /// The open flags.
    pub flags: OpenFlags,
    /// The caller.
    pub cred: &'a Credentials,
    /// Check the caller's permissions.
    pub check_access: bool,
}

/// A handle and what its client saw of the file: the fields of
/// [`weft_proto::mdt::MdtRequest::Close`] and [`weft_proto::mdt::MdtRequest::SizeMerge`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct HandleSizes {
    /// The open handle.
    pub handle: u64,
    /// The size the client saw, if it knows one.
    pub size: Option<u64>,
    /// The blocks the client saw, if it knows them.
    pub blocks: Option<u64>,
    /// Whether it wrote through the handle.
    pub modified: bool,
}

impl HandleSizes {
    /// A handle closed with nothing seen (its connection went away).
    fn nothing_seen(handle: u64) -> Self {
        HandleSizes {
            handle,
            size: None,
            blocks: None,
            modified: false,
        }
    }
}

impl Engine {
    /// Registers a handle after checking access; truncates for `O_TRUNC`.
    pub(super) fn open_inode(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        conn: u64,
        fid: Fid,
        ino: &mut Inode,
        how: &OpenAs<'_>,
    ) -> Result<u64, Fail> {
        let OpenAs {
            flags,
            cred,
            check_access,
        } = *how;
        check_open(ino, flags, cred, check_access)?;
        // Mutations start here.
        if flags.truncate && ino.kind == FileKind::Regular && ino.size != 0 {
            let now = Timestamp::now();
            ino.size = 0;
            ino.blocks = 0;
            ino.data_version += 1;
            // Nothing is left to restore of a released file cut to 0 bytes.
            ino.hsm_flags &= !weft_proto::hsm::HSM_RELEASED;
            crate::hsm::data_changed(ino);
            ino.mtime = now;
            ino.ctime = now;
            if cred.uid != 0 {
                ino.mode = kill_suid(ino.mode);
            }
            self.put_inode(tx, fx, fid, ino)?;
        }
        let id = self.handles().open(
            conn,
            Handle {
                fid,
                access: flags.access,
                pins: None,
            },
        );
        fx.undo.push(Undo::Opened(conn, id));
        Ok(id)
    }

    pub(crate) fn open(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        conn: u64,
        fid: Fid,
        flags: OpenFlags,
        cred: &Credentials,
    ) -> Result<MdtReply, Fail> {
        let mut ino = load(&tx.inodes, fid)?;
        let how = OpenAs {
            flags,
            cred,
            check_access: true,
        };
        let handle = self.open_inode(tx, fx, conn, fid, &mut ino, &how)?;
        let attr = ino.attr(fid, self.handles().count(fid));
        Ok(MdtReply::Opened {
            handle,
            attr,
            layout: ino.layout,
        })
    }

    /// Closes a handle of connection `conn`, merging what its client saw.
    pub(crate) fn close(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        conn: u64,
        seen: &HandleSizes,
    ) -> Result<MdtReply, Fail> {
        let handle = seen.handle;
        let h = self
            .handles()
            .close(conn, handle)
            .ok_or_else(|| fail(Errno::BadF, "no such handle"))?;
        fx.undo.push(Undo::Closed(conn, handle, h));
        if let Some(p) = h.pins {
            self.destroy_if_unused(tx, fx, p)?;
        }
        let Some(mut ino) = store::get_inode(&tx.inodes, h.fid)? else {
            return Ok(MdtReply::Ok);
        };
        let changed = merge_size(&mut ino, seen);
        if ino.nlink == 0 && self.handles().count(h.fid) == 0 {
            self.destroy_inode(tx, fx, h.fid, &ino)?;
        } else if changed {
            self.put_inode(tx, fx, h.fid, &ino)?;
        }
        Ok(MdtReply::Ok)
    }

    /// Merges what a writer observed into the inode of an open handle, keeping it open.
    pub(crate) fn size_merge(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        conn: u64,
        seen: &HandleSizes,
    ) -> Result<MdtReply, Fail> {
        let h = self
            .handles()
            .get(conn, seen.handle)
            .ok_or_else(|| fail(Errno::BadF, "no such handle"))?;
        let Some(mut ino) = store::get_inode(&tx.inodes, h.fid)? else {
            return Ok(MdtReply::Ok);
        };
        if merge_size(&mut ino, seen) {
            self.put_inode(tx, fx, h.fid, &ino)?;
        }
        Ok(MdtReply::Ok)
    }

    /// Closes the handles `client` left parked at or before park number `upto`: it did not
    /// reconnect in time.
    pub(crate) fn drop_parked(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        client: uuid::Uuid,
        upto: u64,
    ) -> Result<MdtReply, Fail> {
        // Closed under a connection id no client has (ids start at 1).
        const EXPIRED: u64 = 0;
        let ids = self.handles().unpark_expired(client, upto, EXPIRED);
        for id in ids {
            match self.close(tx, fx, EXPIRED, &HandleSizes::nothing_seen(id)) {
                Ok(_) | Err(Fail::Wire(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(MdtReply::Ok)
    }

    /// Closes every handle of a connection that went away.
    pub(crate) fn drop_conn(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        conn: u64,
    ) -> Result<MdtReply, Fail> {
        let ids = self.handles().of_conn(conn);
        for id in ids {
            match self.close(tx, fx, conn, &HandleSizes::nothing_seen(id)) {
                Ok(_) | Err(Fail::Wire(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(MdtReply::Ok)
    }
}

/// Max-merges a writer's size and blocks into an inode and, if it wrote, bumps the times
/// and the data version. Returns whether the inode changed.
pub(super) fn merge_size(ino: &mut Inode, seen: &HandleSizes) -> bool {
    let HandleSizes {
        size,
        blocks,
        modified,
        ..
    } = *seen;
    let mut changed = false;
    let mut data_changed = modified;
    if let Some(s) = size.filter(|&s| s > ino.size) {
        ino.size = s;
        changed = true;
        data_changed = true;
    }
    if let Some(b) = blocks.filter(|&b| b > ino.blocks) {
        ino.blocks = b;
        changed = true;
    }
    if modified {
        let now = Timestamp::now();
        ino.mtime = now;
        ino.ctime = now;
        ino.written = true;
        changed = true;
    }
    if data_changed {
        ino.data_version += 1;
        crate::hsm::data_changed(ino);
        changed = true;
    }
    changed
}

/// What an open of `ino` with `flags` must pass before it changes anything: not a symlink,
/// directories read-only, and (with `check_access`) the caller's permissions.
pub(crate) fn check_open(
    ino: &Inode,
    flags: OpenFlags,
    cred: &Credentials,
    check_access: bool,
) -> Result<(), Fail> {
    if ino.kind == FileKind::Symlink {
        return Err(fail(Errno::Loop, "cannot open a symlink"));
    }
    if ino.is_dir() && (flags.access != AccessMode::Read || flags.truncate) {
        return Err(fail(Errno::IsDir, "directories open read-only"));
    }
    if check_access {
        let mut mask = match flags.access {
            AccessMode::Read => MAY_READ,
            AccessMode::Write => MAY_WRITE,
            AccessMode::ReadWrite => MAY_READ | MAY_WRITE,
        };
        if flags.truncate {
            mask |= MAY_WRITE;
        }
        perm::check(ino, cred, mask)?;
    }
    Ok(())
}
