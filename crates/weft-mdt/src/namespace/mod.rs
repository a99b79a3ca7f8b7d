//! The namespace operations that change state, run by the commit thread inside a batch's
//! write transaction, plus the checks the read path shares.
//!
//! Errno choices follow Linux on ext4, including the order in which checks happen (search
//! permission on the parent, then the entry's existence, then write permission, ...).
//!
//! This module holds what the operations share (loading inodes, directories and entries,
//! the reply of a create); each kind of operation has its own module: `create`, `link`
//! (link, unlink, rmdir), `rename`, `attr` (setattr, setlayout), `xattr` and `open`
//! (opens, closes and size merges that change the store).

use crate::engine::{Effects, Engine, LINK_MAX, Tx};
use crate::error::{Fail, fail};
use crate::handles::{Handle, Undo};
use crate::names::check_name;
use crate::perm::{self, MAY_EXEC, MAY_READ, MAY_WRITE, S_ISGID, S_ISUID, S_IXGRP};
use crate::placement;
use crate::store::{self, Dirent, Inode, Readable};
use redb::ReadableTable;
use weft_proto::mdt::{
    AccessMode, Credentials, FileKind, MdtReply, NewFile, OpenFlags, RenameFlags, SetAttr, TimeSet,
    XattrMode,
};
use weft_proto::{
    Errno, Fid, Layout, LayoutTemplate, SYMLINK_MAX, Timestamp, WireError, XATTR_NAME_MAX,
    XATTR_VALUE_MAX,
};

mod attr;
mod create;
mod link;
mod open;
mod rename;
mod xattr;

pub(crate) use create::NewDir;
pub(crate) use open::HandleSizes;
pub(crate) use open::check_open;
pub(crate) use rename::Renaming;
pub(crate) use xattr::NewXattr;
pub(crate) use xattr::{xattr_ns, xattr_permission};

/// The size a directory reports (as ext4's one-block directories).
pub const DIR_SIZE: u64 = 4096;
/// Longest list of extended attribute names (Linux's `XATTR_LIST_MAX`).
pub const XATTR_LIST_MAX: usize = 65536;

/// Where an entry is (or is to be): a name in a directory.
#[derive(Debug, Clone, Copy)]
pub(crate) struct EntryAt<'a> {
    /// The directory holding the name.
    pub parent: Fid,
    /// The name.
    pub name: &'a [u8],
}

/// Who asks for a change of the namespace: the caller's credentials, and the client
/// request it came in (which a cross-MDT operation already on the name may answer).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Caller<'a> {
    /// The caller's identity, for permission checks.
    pub cred: &'a Credentials,
    /// The client request.
    pub origin: &'a crate::commit::Origin,
}

/// Loads an inode named by FID; a FID that does not exist is a stale handle.
pub(crate) fn load(inodes: &impl Readable, fid: Fid) -> Result<Inode, Fail> {
    store::get_inode(inodes, fid)?.ok_or_else(|| fail(Errno::Stale, format!("no inode {fid}")))
}

/// Loads a directory for a name operation: it must exist (ESTALE), be a directory
/// (ENOTDIR), still be linked (ENOENT, as Linux for a removed directory), hold its names
/// itself (EREMOTE for a striped directory's master: the names are in its shards) and be
/// searchable by the caller (EACCES).
pub(crate) fn load_dir(
    inodes: &impl Readable,
    stripes: &impl Readable,
    fid: Fid,
    cred: &Credentials,
) -> Result<Inode, Fail> {
    let dir = load(inodes, fid)?;
    if !dir.is_dir() {
        return Err(fail(Errno::NotDir, format!("{fid} is not a directory")));
    }
    if dir.nlink == 0 {
        return Err(fail(Errno::NoEnt, format!("directory {fid} was removed")));
    }
    not_striped(stripes, fid)?;
    perm::check(&dir, cred, MAY_EXEC)?;
    Ok(dir)
}

/// EREMOTE when `fid` is a striped directory's master (its names are in the shards).
pub(crate) fn not_striped(stripes: &impl Readable, fid: Fid) -> Result<(), Fail> {
    if store::get_stripes(stripes, fid)?.is_some() {
        return Err(fail(
            Errno::Remote,
            format!("{fid} is a striped directory: ask its shards"),
        ));
    }
    Ok(())
}

/// Looks up an entry that must exist (ENOENT), with its inode.
pub(crate) fn load_entry(
    inodes: &impl Readable,
    dirents: &impl Readable,
    parent: Fid,
    name: &[u8],
) -> Result<(Dirent, Inode), Fail> {
    let de = store::get_dirent(dirents, parent, name)?
        .ok_or_else(|| fail(Errno::NoEnt, "no such entry"))?;
    let ino = store::get_inode(inodes, de.fid)?.ok_or_else(|| {
        fail(
            Errno::XDev,
            format!("the entry's inode {} is on another MDT", de.fid),
        )
    })?;
    Ok((de, ino))
}

/// Whether a name is in use: an entry, or a cross-MDT operation making or removing one.
pub(super) fn name_taken(tx: &Tx<'_>, parent: Fid, name: &[u8]) -> Result<bool, Fail> {
    Ok(store::get_dirent(&tx.dirents, parent, name)?.is_some()
        || crate::remote::pending(&tx.intents, parent, name)?.is_some())
}

/// The reply to a create: attributes, layout and maybe a handle.
pub(super) struct Created<'a> {
    fid: Fid,
    ino: Inode,
    handle: Option<u64>,
    /// False when an existing file was opened instead.
    made: bool,
    /// The directory holding the name, as the create left it.
    parent: (Fid, &'a Inode),
}

impl Engine {
    pub(super) fn created_reply(&self, c: Created<'_>) -> MdtReply {
        let (parent, dir) = c.parent;
        let (open, dir_open) = {
            let mut h = self.handles();
            (h.count(c.fid), h.open_count(parent))
        };
        MdtReply::Created {
            attr: c.ino.attr(c.fid, open),
            layout: c.ino.layout,
            handle: c.handle,
            created: c.made,
            parent: Some(Box::new(dir.attr(parent, dir_open))),
        }
    }

    pub(super) fn attr_reply(&self, fid: Fid, ino: &Inode) -> MdtReply {
        MdtReply::Attr(ino.attr(fid, self.handles().count(fid)))
    }
}
