//! The namespace operations that change state, run by the commit thread inside a batch's
//! write transaction, plus the checks the read path shares.
//!
//! Errno choices follow Linux on ext4, including the order in which checks happen (search
//! permission on the parent, then the entry's existence, then write permission, ...).

use crate::engine::{Effects, Engine, LINK_MAX, Tx};
use crate::error::{Fail, fail};
use crate::handles::{Handle, Undo};
use crate::names::check_name;
use crate::perm::{self, MAY_EXEC, MAY_READ, MAY_WRITE, S_ISGID, S_ISUID, S_IXGRP};
use crate::placement;
use crate::store::{self, Dirent, Inode, Readable};
use redb::ReadableTable;
use weft_proto::mdt::{
    AccessMode, Credentials, FileKind, MdtReply, OpenFlags, RenameFlags, SetAttr, TimeSet,
    XattrMode,
};
use weft_proto::{
    Errno, Fid, Layout, LayoutTemplate, SYMLINK_MAX, Timestamp, WireError, XATTR_NAME_MAX,
    XATTR_VALUE_MAX,
};

/// The size a directory reports (as ext4's one-block directories).
pub const DIR_SIZE: u64 = 4096;
/// Longest list of extended attribute names (Linux's `XATTR_LIST_MAX`).
pub const XATTR_LIST_MAX: usize = 65536;

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
fn name_taken(tx: &Tx<'_>, parent: Fid, name: &[u8]) -> Result<bool, Fail> {
    Ok(store::get_dirent(&tx.dirents, parent, name)?.is_some()
        || crate::remote::pending(&tx.intents, parent, name)?.is_some())
}

/// Which namespace an extended attribute name is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum XattrNs {
    User,
    Trusted,
    Security,
}

/// Checks an attribute name (ERANGE for empty or too long, EOPNOTSUPP for an unknown
/// namespace, EINVAL for a bare prefix) and returns its namespace.
pub(crate) fn xattr_ns(name: &[u8]) -> Result<XattrNs, WireError> {
    if name.is_empty() || name.len() > XATTR_NAME_MAX {
        return Err(WireError::new(
            Errno::Range,
            "bad extended attribute name length",
        ));
    }
    if name.contains(&0) {
        return Err(WireError::new(Errno::Inval, "NUL in attribute name"));
    }
    let (ns, rest) = if let Some(r) = name.strip_prefix(b"user.") {
        (XattrNs::User, r)
    } else if let Some(r) = name.strip_prefix(b"trusted.") {
        (XattrNs::Trusted, r)
    } else if let Some(r) = name.strip_prefix(b"security.") {
        (XattrNs::Security, r)
    } else {
        return Err(WireError::new(
            Errno::NotSup,
            "unsupported attribute namespace",
        ));
    };
    if rest.is_empty() {
        return Err(WireError::new(
            Errno::Inval,
            "attribute name is only a prefix",
        ));
    }
    Ok(ns)
}

/// Linux's `xattr_permission`.
pub(crate) fn xattr_permission(
    ino: &Inode,
    cred: &Credentials,
    ns: XattrNs,
    write: bool,
) -> Result<(), WireError> {
    let refused = |what: &str| {
        if write {
            WireError::new(Errno::Perm, what.to_string())
        } else {
            WireError::new(Errno::NoData, what.to_string())
        }
    };
    match ns {
        XattrNs::Security => Ok(()),
        XattrNs::Trusted if cred.uid != 0 => Err(refused("trusted.* is for root")),
        XattrNs::Trusted => Ok(()),
        XattrNs::User => {
            if !matches!(ino.kind, FileKind::Regular | FileKind::Directory) {
                return Err(refused("user.* only on files and directories"));
            }
            if write
                && ino.is_dir()
                && ino.mode & perm::S_ISVTX != 0
                && !perm::owner_or_root(ino, cred)
            {
                return Err(WireError::new(Errno::Perm, "sticky directory"));
            }
            perm::check(ino, cred, if write { MAY_WRITE } else { MAY_READ })
        }
    }
}

fn time_of(t: TimeSet, now: Timestamp) -> Timestamp {
    match t {
        TimeSet::Now => now,
        TimeSet::At(ts) => ts,
    }
}

/// Clears set-user-id, and set-group-id when group execute is set (Linux's kill-priv).
fn kill_suid(mode: u32) -> u32 {
    let mut m = mode & !S_ISUID;
    if m & S_IXGRP != 0 {
        m &= !S_ISGID;
    }
    m
}

/// The reply to a create: attributes, layout and maybe a handle.
struct Created<'a> {
    fid: Fid,
    ino: Inode,
    handle: Option<u64>,
    /// False when an existing file was opened instead.
    made: bool,
    /// The directory holding the name, as the create left it.
    parent: (Fid, &'a Inode),
}

impl Engine {
    fn created_reply(&self, c: Created<'_>) -> MdtReply {
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

    fn attr_reply(&self, fid: Fid, ino: &Inode) -> MdtReply {
        MdtReply::Attr(ino.attr(fid, self.handles().count(fid)))
    }

    /// Layout for a new regular file in `dir`.
    fn new_layout(
        &mut self,
        tx: &Tx<'_>,
        dir: &Inode,
        dir_fid: Fid,
        req: Option<&LayoutTemplate>,
        first_id: u32,
        generation: u32,
    ) -> Result<Layout, Fail> {
        let empty = LayoutTemplate::default();
        let root_default = if dir_fid != Fid::ROOT {
            match store::get_inode(&tx.inodes, Fid::ROOT)? {
                Some(root) => root.default_layout,
                // The root is on MDT0: its default as last fetched from there.
                None => self.cluster.root_default(),
            }
        } else {
            None
        };
        let fs_default = self.cluster.default_layout();
        let chain = [
            req.unwrap_or(&empty),
            dir.default_layout.as_ref().unwrap_or(&empty),
            root_default.as_ref().unwrap_or(&empty),
            &fs_default,
        ];
        let template = placement::resolve(&chain);
        let osts = self.cluster.osts();
        let cluster = self.cluster.clone();
        let pool = move |name: &str| cluster.pool(name);
        Ok(self
            .placement
            .instantiate(&template, &osts, &pool, first_id, generation)?)
    }

    /// Registers a handle after checking access; truncates for `O_TRUNC`.
    #[allow(clippy::too_many_arguments)]
    fn open_inode(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        conn: u64,
        fid: Fid,
        ino: &mut Inode,
        flags: OpenFlags,
        cred: &Credentials,
        check_access: bool,
    ) -> Result<u64, Fail> {
        check_open(ino, flags, cred, check_access)?;
        // Mutations start here.
        if flags.truncate && ino.kind == FileKind::Regular && ino.size != 0 {
            let now = Timestamp::now();
            ino.size = 0;
            ino.blocks = 0;
            ino.data_version += 1;
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

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn create(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        conn: u64,
        parent: Fid,
        name: &[u8],
        mode: u32,
        rdev: u64,
        exclusive: bool,
        layout: Option<&LayoutTemplate>,
        open: Option<OpenFlags>,
        cred: &Credentials,
    ) -> Result<MdtReply, Fail> {
        let kind = if mode & 0o170000 == 0 {
            FileKind::Regular
        } else {
            FileKind::from_mode(mode).ok_or_else(|| fail(Errno::Inval, "unknown file type"))?
        };
        if matches!(kind, FileKind::Directory | FileKind::Symlink) {
            return Err(fail(Errno::Inval, "use mkdir or symlink"));
        }
        let mut dir = load_dir(&tx.inodes, &tx.dir_stripes, parent, cred)?;
        check_name(name)?;
        if crate::remote::pending(&tx.intents, parent, name)?.is_some() {
            // A directory is being made or removed under that name on another MDT.
            let errno = if exclusive || kind != FileKind::Regular {
                Errno::Exist
            } else {
                Errno::IsDir
            };
            return Err(fail(errno, "entry exists"));
        }
        if let Some(de) = store::get_dirent(&tx.dirents, parent, name)? {
            if exclusive || kind != FileKind::Regular {
                return Err(fail(Errno::Exist, "entry exists"));
            }
            let Some(mut ino) = store::get_inode(&tx.inodes, de.fid)? else {
                // On another MDT: the client opens it by FID there.
                return Err(fail(Errno::Exist, "entry exists (on another MDT)"));
            };
            if ino.is_dir() {
                return Err(fail(Errno::IsDir, "entry is a directory"));
            }
            let handle = match open {
                Some(flags) => {
                    Some(self.open_inode(tx, fx, conn, de.fid, &mut ino, flags, cred, true)?)
                }
                None => None,
            };
            return Ok(self.created_reply(Created {
                fid: de.fid,
                ino,
                handle,
                made: false,
                parent: (parent, &dir),
            }));
        }
        perm::check(&dir, cred, MAY_WRITE | MAY_EXEC)?;
        if matches!(kind, FileKind::CharDevice | FileKind::BlockDevice) && cred.uid != 0 {
            return Err(fail(Errno::Perm, "only root makes device nodes"));
        }
        if let Some(t) = layout {
            t.validate()
                .map_err(|e| fail(Errno::Inval, e.to_string()))?;
        }
        if !self.fid_available() {
            return Err(Fail::NeedSeq);
        }
        let new_layout = if kind == FileKind::Regular {
            Some(self.new_layout(tx, &dir, parent, layout, 1, 1)?)
        } else {
            None
        };
        // Mutations start here.
        let now = Timestamp::now();
        let fid = self.alloc_fid()?;
        let (uid, gid, perm_bits) = perm::new_owner(&dir, cred, kind, mode);
        let mut ino = Inode::new(kind, perm_bits, uid, gid, now);
        ino.parent = parent;
        ino.layout = new_layout;
        if matches!(kind, FileKind::CharDevice | FileKind::BlockDevice) {
            ino.rdev = rdev;
        }
        self.put_inode(tx, fx, fid, &ino)?;
        let de = store::encode(&Dirent { fid, kind })?;
        tx.dirents
            .insert(store::dirent_key(parent, name).as_slice(), de.as_slice())?;
        dir.mtime = now;
        dir.ctime = now;
        self.put_inode(tx, fx, parent, &dir)?;
        self.meta.files += 1;
        let handle = match open {
            Some(flags) => Some(self.open_inode(tx, fx, conn, fid, &mut ino, flags, cred, false)?),
            None => None,
        };
        Ok(self.created_reply(Created {
            fid,
            ino,
            handle,
            made: true,
            parent: (parent, &dir),
        }))
    }

    pub(crate) fn mkdir(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        parent: Fid,
        name: &[u8],
        mode: u32,
        cred: &Credentials,
    ) -> Result<MdtReply, Fail> {
        let mut dir = load_dir(&tx.inodes, &tx.dir_stripes, parent, cred)?;
        check_name(name)?;
        if name_taken(tx, parent, name)? {
            return Err(fail(Errno::Exist, "entry exists"));
        }
        perm::check(&dir, cred, MAY_WRITE | MAY_EXEC)?;
        let nlink = dir
            .nlink
            .checked_add(1)
            .ok_or_else(|| fail(Errno::MLink, "too many subdirectories"))?;
        if !self.fid_available() {
            return Err(Fail::NeedSeq);
        }
        // Mutations start here.
        let now = Timestamp::now();
        let fid = self.alloc_fid()?;
        let (uid, gid, bits) = perm::new_owner(&dir, cred, FileKind::Directory, mode & 0o1777);
        let mut ino = Inode::new(FileKind::Directory, bits, uid, gid, now);
        ino.nlink = 2;
        ino.size = DIR_SIZE;
        ino.blocks = DIR_SIZE / 512;
        ino.parent = parent;
        // A directory's default layout is inherited by new subdirectories (as in Lustre);
        // the root's is not copied: it applies to every directory without one of its own,
        // through the inheritance chain, and may change later.
        if parent != Fid::ROOT {
            ino.default_layout.clone_from(&dir.default_layout);
        }
        self.put_inode(tx, fx, fid, &ino)?;
        let de = store::encode(&Dirent {
            fid,
            kind: FileKind::Directory,
        })?;
        tx.dirents
            .insert(store::dirent_key(parent, name).as_slice(), de.as_slice())?;
        dir.nlink = nlink;
        dir.mtime = now;
        dir.ctime = now;
        self.put_inode(tx, fx, parent, &dir)?;
        self.meta.dirs += 1;
        Ok(self.attr_reply(fid, &ino))
    }

    pub(crate) fn symlink(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        parent: Fid,
        name: &[u8],
        target: &[u8],
        cred: &Credentials,
    ) -> Result<MdtReply, Fail> {
        if target.is_empty() {
            return Err(fail(Errno::NoEnt, "empty symlink target"));
        }
        if target.len() > SYMLINK_MAX {
            return Err(fail(Errno::NameTooLong, "symlink target too long"));
        }
        if target.contains(&0) {
            return Err(fail(Errno::Inval, "NUL in symlink target"));
        }
        let mut dir = load_dir(&tx.inodes, &tx.dir_stripes, parent, cred)?;
        check_name(name)?;
        if name_taken(tx, parent, name)? {
            return Err(fail(Errno::Exist, "entry exists"));
        }
        perm::check(&dir, cred, MAY_WRITE | MAY_EXEC)?;
        if !self.fid_available() {
            return Err(Fail::NeedSeq);
        }
        // Mutations start here.
        let now = Timestamp::now();
        let fid = self.alloc_fid()?;
        let (uid, gid, _) = perm::new_owner(&dir, cred, FileKind::Symlink, 0o777);
        let mut ino = Inode::new(FileKind::Symlink, 0o777, uid, gid, now);
        ino.size = target.len() as u64;
        ino.symlink = target.to_vec();
        ino.parent = parent;
        self.put_inode(tx, fx, fid, &ino)?;
        let de = store::encode(&Dirent {
            fid,
            kind: FileKind::Symlink,
        })?;
        tx.dirents
            .insert(store::dirent_key(parent, name).as_slice(), de.as_slice())?;
        dir.mtime = now;
        dir.ctime = now;
        self.put_inode(tx, fx, parent, &dir)?;
        self.meta.files += 1;
        Ok(self.attr_reply(fid, &ino))
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn link(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        fid: Fid,
        new_parent: Fid,
        new_name: &[u8],
        cred: &Credentials,
        origin: &crate::commit::Origin,
    ) -> Result<MdtReply, Fail> {
        let Some(mut ino) = store::get_inode(&tx.inodes, fid)? else {
            if self.is_foreign(fid) {
                return self.prepare_remote_link(tx, fx, fid, new_parent, new_name, cred, origin);
            }
            return Err(fail(Errno::NoEnt, format!("no inode {fid}")));
        };
        let mut dir = load_dir(&tx.inodes, &tx.dir_stripes, new_parent, cred)?;
        check_name(new_name)?;
        if name_taken(tx, new_parent, new_name)? {
            return Err(fail(Errno::Exist, "entry exists"));
        }
        perm::check(&dir, cred, MAY_WRITE | MAY_EXEC)?;
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
        let now = Timestamp::now();
        ino.nlink += 1;
        ino.ctime = now;
        self.put_inode(tx, fx, fid, &ino)?;
        let de = store::encode(&Dirent {
            fid,
            kind: ino.kind,
        })?;
        tx.dirents.insert(
            store::dirent_key(new_parent, new_name).as_slice(),
            de.as_slice(),
        )?;
        dir.mtime = now;
        dir.ctime = now;
        self.put_inode(tx, fx, new_parent, &dir)?;
        Ok(self.attr_reply(fid, &ino))
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn unlink(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        parent: Fid,
        name: &[u8],
        cred: &Credentials,
        rmdir: bool,
        origin: &crate::commit::Origin,
    ) -> Result<MdtReply, Fail> {
        let mut dir = load_dir(&tx.inodes, &tx.dir_stripes, parent, cred)?;
        check_name(name)?;
        let de = store::get_dirent(&tx.dirents, parent, name)?
            .ok_or_else(|| fail(Errno::NoEnt, "no such entry"))?;
        if let Some(i) = crate::remote::pending(&tx.intents, parent, name)?
            && !i.answers(origin)
        {
            return Err(fail(
                i.refusal(Errno::Busy),
                "a cross-MDT operation is changing that name",
            ));
        }
        let Some(mut victim) = store::get_inode(&tx.inodes, de.fid)? else {
            // The inode is on another MDT: only directories are (remote directories).
            return match (rmdir, de.kind) {
                (true, FileKind::Directory) => {
                    self.prepare_remote_rmdir(tx, fx, parent, name, &de, &dir, cred, origin)
                }
                (true, _) => Err(fail(Errno::NotDir, "not a directory")),
                (false, FileKind::Directory) => Err(fail(Errno::IsDir, "is a directory")),
                (false, _) => {
                    self.prepare_remote_unlink(tx, fx, parent, name, &de, &dir, cred, origin)
                }
            };
        };
        perm::check(&dir, cred, MAY_WRITE | MAY_EXEC)?;
        perm::check_sticky(&dir, &victim, cred)?;
        if rmdir {
            if !victim.is_dir() {
                return Err(fail(Errno::NotDir, "not a directory"));
            }
            if let Some(stripes) = store::get_stripes(&tx.dir_stripes, de.fid)? {
                return self.prepare_rmdir_striped(tx, fx, parent, name, de.fid, stripes, origin);
            }
            if !store::dir_is_empty(&tx.dirents, de.fid)?
                || crate::remote::any_in(&tx.intents, de.fid)?
            {
                return Err(fail(Errno::NotEmpty, "directory not empty"));
            }
        } else if victim.is_dir() {
            return Err(fail(Errno::IsDir, "is a directory"));
        }
        // Mutations start here.
        let now = Timestamp::now();
        tx.dirents
            .remove(store::dirent_key(parent, name).as_slice())?;
        if rmdir {
            dir.nlink = dir.nlink.saturating_sub(1);
            victim.nlink = 0;
        } else {
            victim.nlink = victim.nlink.saturating_sub(1);
        }
        dir.mtime = now;
        dir.ctime = now;
        self.put_inode(tx, fx, parent, &dir)?;
        victim.ctime = now;
        if victim.nlink == 0 {
            self.unlinked(tx, fx, de.fid, &victim)?;
        } else {
            self.put_inode(tx, fx, de.fid, &victim)?;
        }
        Ok(MdtReply::Removed {
            parent: dir.attr(parent, self.handles().open_count(parent)),
        })
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn rename(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        src_parent: Fid,
        src_name: &[u8],
        dst_parent: Fid,
        dst_name: &[u8],
        flags: RenameFlags,
        cred: &Credentials,
        origin: &crate::commit::Origin,
        dm: Option<&crate::dir_moves::DirMove>,
    ) -> Result<MdtReply, Fail> {
        if flags.exchange && flags.noreplace {
            return Err(fail(Errno::Inval, "RENAME_EXCHANGE with RENAME_NOREPLACE"));
        }
        if self.is_foreign(dst_parent) {
            return self.prepare_remote_rename(
                tx, fx, src_parent, src_name, dst_parent, dst_name, flags, cred, origin, dm,
            );
        }
        let same_dir = src_parent == dst_parent;
        let sdir = load_dir(&tx.inodes, &tx.dir_stripes, src_parent, cred)?;
        let ddir = if same_dir {
            sdir.clone()
        } else {
            load_dir(&tx.inodes, &tx.dir_stripes, dst_parent, cred)?
        };
        check_name(src_name)?;
        check_name(dst_name)?;
        if let Some(i) = crate::remote::pending(&tx.intents, dst_parent, dst_name)?
            && i.answers(origin)
        {
            // A resend of this rename, which left a link to drop on another MDT.
            return Err(Fail::CrossMdt(Box::new(i)));
        }
        if let Some(i) = crate::remote::pending(&tx.intents, src_parent, src_name)?
            .or(crate::remote::pending(&tx.intents, dst_parent, dst_name)?)
        {
            return Err(fail(
                i.refusal(Errno::Busy),
                "a directory is being made or removed there",
            ));
        }
        let sde = store::get_dirent(&tx.dirents, src_parent, src_name)?
            .ok_or_else(|| fail(Errno::NoEnt, "no such entry"))?;
        if store::get_inode(&tx.inodes, sde.fid)?.is_none() {
            return self.rename_remote_entry(
                tx, fx, src_parent, src_name, dst_parent, dst_name, sde, sdir, flags, cred, origin,
                dm,
            );
        }
        let (sde, mut src) = load_entry(&tx.inodes, &tx.dirents, src_parent, src_name)?;
        // A destination naming a non-directory of another MDT is replaced like a local one;
        // that inode loses its link on its own MDT afterwards (an intent).
        let mut remote_victim = None;
        let dst = match store::get_dirent(&tx.dirents, dst_parent, dst_name)? {
            Some(d)
                if d.kind != FileKind::Directory
                    && !flags.exchange
                    && !flags.noreplace
                    && store::get_inode(&tx.inodes, d.fid)?.is_none() =>
            {
                if d.fid == sde.fid {
                    return Ok(MdtReply::Ok);
                }
                if src.is_dir() {
                    return Err(fail(
                        Errno::NotDir,
                        "cannot replace a non-directory with a directory",
                    ));
                }
                if ddir.mode & perm::S_ISVTX != 0 && cred.uid != 0 && cred.uid != ddir.uid {
                    return Err(fail(
                        Errno::XDev,
                        "sticky directory and an inode on another MDT",
                    ));
                }
                remote_victim = Some(d.fid);
                None
            }
            Some(_) => Some(load_entry(&tx.inodes, &tx.dirents, dst_parent, dst_name)?),
            None => None,
        };
        if flags.noreplace && dst.is_some() {
            return Err(fail(Errno::Exist, "destination exists"));
        }
        if flags.exchange && dst.is_none() {
            return Err(fail(Errno::NoEnt, "nothing to exchange with"));
        }
        let src_is_dir = src.is_dir();
        // Never make a directory its own ancestor. With several MDTs the destination's
        // ancestors may live elsewhere and another MDT may move one: the check runs under
        // the file system's rename lock (`dir_moves`).
        if src_is_dir && !same_dir {
            if self.several_mdts() {
                self.dir_move(dm, sde.fid, dst_parent)?;
            } else if self.is_ancestor_or_self(&tx.inodes, sde.fid, dst_parent)? {
                return Err(fail(Errno::Inval, "cannot move a directory into itself"));
            }
        }
        if let Some((dde, dino)) = &dst {
            // An exchange moves the destination directory to the source's parent: with
            // several MDTs, under the rename lock too (when the source is a directory, the
            // lock is held already and the check below runs under it).
            if flags.exchange && dino.is_dir() && !src_is_dir && !same_dir && self.several_mdts() {
                self.dir_move(dm, dde.fid, src_parent)?;
            }
            // A replaced directory that is an ancestor of the source is not empty, which
            // the emptiness check below says when its ancestors are on another MDT.
            let ancestor = dino.is_dir()
                && match self.is_ancestor_or_self(&tx.inodes, dde.fid, src_parent) {
                    Err(Fail::Wire(e)) if e.errno == Errno::XDev && !flags.exchange => false,
                    r => r?,
                };
            if ancestor {
                let errno = if flags.exchange {
                    Errno::Inval
                } else {
                    Errno::NotEmpty
                };
                return Err(fail(errno, "destination is an ancestor of the source"));
            }
            if dde.fid == sde.fid {
                // Two names of one inode: POSIX says do nothing and succeed.
                return Ok(MdtReply::Ok);
            }
        }
        perm::check(&sdir, cred, MAY_WRITE | MAY_EXEC)?;
        perm::check_sticky(&sdir, &src, cred)?;
        match &dst {
            Some((_, dino)) => {
                perm::check(&ddir, cred, MAY_WRITE | MAY_EXEC)?;
                perm::check_sticky(&ddir, dino, cred)?;
                if !flags.exchange {
                    if src_is_dir && !dino.is_dir() {
                        return Err(fail(
                            Errno::NotDir,
                            "cannot replace a non-directory with a directory",
                        ));
                    }
                    if !src_is_dir && dino.is_dir() {
                        return Err(fail(
                            Errno::IsDir,
                            "cannot replace a directory with a non-directory",
                        ));
                    }
                }
            }
            None => perm::check(&ddir, cred, MAY_WRITE | MAY_EXEC)?,
        }
        if !same_dir {
            // Moving a directory rewrites its "..": that needs write permission on it.
            if src_is_dir {
                perm::check(&src, cred, MAY_WRITE)?;
            }
            match &dst {
                Some((_, dino)) if flags.exchange && dino.is_dir() => {
                    perm::check(dino, cred, MAY_WRITE)?;
                }
                _ => {}
            }
        }
        let replaced_dir = dst.as_ref().filter(|(_, d)| !flags.exchange && d.is_dir());
        if let Some((dde, _)) = replaced_dir
            && store::get_stripes(&tx.dir_stripes, dde.fid)?.is_some()
        {
            // Its shards on other MDTs would have to go too.
            return Err(fail(
                Errno::XDev,
                "replacing a striped directory is not supported yet",
            ));
        }
        let replaced_nonempty = match replaced_dir {
            Some((dde, _)) => {
                !store::dir_is_empty(&tx.dirents, dde.fid)?
                    || crate::remote::any_in(&tx.intents, dde.fid)?
            }
            None => false,
        };
        if replaced_nonempty {
            return Err(fail(Errno::NotEmpty, "destination directory not empty"));
        }
        // Link-count changes of the parents.
        let dst_is_dir = dst.as_ref().is_some_and(|(_, d)| d.is_dir());
        let (mut sdelta, mut ddelta) = (0i64, 0i64);
        if flags.exchange {
            if !same_dir && src_is_dir != dst_is_dir {
                let d = if src_is_dir { 1 } else { -1 };
                ddelta += d;
                sdelta -= d;
            }
        } else {
            if src_is_dir && !same_dir {
                sdelta -= 1;
                ddelta += 1;
            }
            if dst_is_dir {
                ddelta -= 1;
            }
        }
        let apply = |n: u32, d: i64| -> Result<u32, Fail> {
            u32::try_from(i64::from(n) + d)
                .map_err(|_| fail(Errno::MLink, "link count out of range"))
        };
        let (mut sdir, mut ddir) = (sdir, ddir);
        if same_dir {
            sdir.nlink = apply(sdir.nlink, sdelta + ddelta)?;
        } else {
            sdir.nlink = apply(sdir.nlink, sdelta)?;
            ddir.nlink = apply(ddir.nlink, ddelta)?;
        }
        // Mutations start here.
        let now = Timestamp::now();
        let skey = store::dirent_key(src_parent, src_name);
        let dkey = store::dirent_key(dst_parent, dst_name);
        let src_de = store::encode(&Dirent {
            fid: sde.fid,
            kind: src.kind,
        })?;
        tx.dirents.insert(dkey.as_slice(), src_de.as_slice())?;
        match dst {
            Some((dde, mut dino)) if flags.exchange => {
                let dst_de = store::encode(&Dirent {
                    fid: dde.fid,
                    kind: dino.kind,
                })?;
                tx.dirents.insert(skey.as_slice(), dst_de.as_slice())?;
                if dino.is_dir() {
                    dino.parent = src_parent;
                }
                dino.ctime = now;
                self.put_inode(tx, fx, dde.fid, &dino)?;
            }
            Some((dde, mut dino)) => {
                tx.dirents.remove(skey.as_slice())?;
                dino.nlink = if dino.is_dir() {
                    0
                } else {
                    dino.nlink.saturating_sub(1)
                };
                dino.ctime = now;
                if dino.nlink == 0 {
                    self.unlinked(tx, fx, dde.fid, &dino)?;
                } else {
                    self.put_inode(tx, fx, dde.fid, &dino)?;
                }
            }
            None => {
                tx.dirents.remove(skey.as_slice())?;
            }
        }
        if src_is_dir {
            src.parent = dst_parent;
        }
        src.ctime = now;
        self.put_inode(tx, fx, sde.fid, &src)?;
        sdir.mtime = now;
        sdir.ctime = now;
        self.put_inode(tx, fx, src_parent, &sdir)?;
        if !same_dir {
            ddir.mtime = now;
            ddir.ctime = now;
            self.put_inode(tx, fx, dst_parent, &ddir)?;
        }
        if let Some(victim) = remote_victim {
            return self.defer_link_drop(tx, fx, dst_parent, dst_name, victim, origin);
        }
        Ok(MdtReply::Ok)
    }

    pub(crate) fn setattr(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        fid: Fid,
        set: &SetAttr,
        cred: &Credentials,
    ) -> Result<MdtReply, Fail> {
        let mut ino = load(&tx.inodes, fid)?;
        if let Some(size) = set.size {
            if ino.is_dir() {
                return Err(fail(Errno::IsDir, "cannot truncate a directory"));
            }
            if ino.kind != FileKind::Regular {
                return Err(fail(Errno::Inval, "only regular files have a size to set"));
            }
            perm::check(&ino, cred, MAY_WRITE)?;
            if size > i64::MAX as u64 {
                return Err(fail(Errno::FBig, "size too large"));
            }
        }
        let uid_ok = |uid: u32| cred.uid == 0 || (cred.uid == ino.uid && uid == ino.uid);
        if !set.uid.is_none_or(uid_ok) {
            return Err(fail(Errno::Perm, "only root changes a file's owner"));
        }
        if let Some(gid) = set.gid {
            let ok =
                cred.uid == 0 || (cred.uid == ino.uid && (cred.in_group(gid) || gid == ino.gid));
            if !ok {
                return Err(fail(Errno::Perm, "not allowed to change the group"));
            }
        }
        if set.mode.is_some() && !perm::owner_or_root(&ino, cred) {
            return Err(fail(Errno::Perm, "only the owner changes the mode"));
        }
        let explicit =
            matches!(set.atime, Some(TimeSet::At(_))) || matches!(set.mtime, Some(TimeSet::At(_)));
        if explicit {
            if !perm::owner_or_root(&ino, cred) {
                return Err(fail(Errno::Perm, "only the owner sets explicit times"));
            }
        } else if (set.atime.is_some() || set.mtime.is_some())
            && !perm::owner_or_root(&ino, cred)
            && !perm::permits(&ino, cred, MAY_WRITE)
        {
            return Err(fail(
                Errno::Access,
                "setting times to now needs write permission",
            ));
        }
        let bad_time = |t: TimeSet| matches!(t, TimeSet::At(ts) if ts.nsec >= 1_000_000_000);
        if [set.atime, set.mtime].into_iter().flatten().any(bad_time) {
            return Err(fail(Errno::Inval, "nanoseconds out of range"));
        }
        let changed = set.mode.is_some()
            || set.uid.is_some()
            || set.gid.is_some()
            || set.size.is_some()
            || set.atime.is_some()
            || set.mtime.is_some();
        if !changed {
            return Ok(self.attr_reply(fid, &ino));
        }
        // Mutations start here.
        let now = Timestamp::now();
        if let Some(size) = set.size {
            if size != ino.size {
                ino.size = size;
                ino.data_version += 1;
                if size == 0 {
                    ino.blocks = 0;
                }
            }
            ino.mtime = now;
            if cred.uid != 0 {
                ino.mode = kill_suid(ino.mode);
            }
        }
        if let Some(uid) = set.uid {
            ino.uid = uid;
        }
        if let Some(gid) = set.gid {
            ino.gid = gid;
        }
        if (set.uid.is_some() || set.gid.is_some()) && !ino.is_dir() {
            ino.mode = kill_suid(ino.mode);
        }
        if let Some(mode) = set.mode {
            let mut m = mode & 0o7777;
            if cred.uid != 0 && !cred.in_group(ino.gid) {
                m &= !S_ISGID;
            }
            ino.mode = m;
        }
        if let Some(t) = set.atime {
            ino.atime = time_of(t, now);
        }
        if let Some(t) = set.mtime {
            ino.mtime = time_of(t, now);
        }
        ino.ctime = now;
        self.put_inode(tx, fx, fid, &ino)?;
        Ok(self.attr_reply(fid, &ino))
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn setxattr(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        fid: Fid,
        name: &[u8],
        value: &[u8],
        mode: XattrMode,
        cred: &Credentials,
    ) -> Result<MdtReply, Fail> {
        let mut ino = load(&tx.inodes, fid)?;
        let ns = xattr_ns(name)?;
        if value.len() > XATTR_VALUE_MAX {
            // Linux says E2BIG, which the wire errno set lacks; ERANGE is the closest.
            return Err(fail(Errno::Range, "extended attribute value too large"));
        }
        xattr_permission(&ino, cred, ns, true)?;
        let key = store::xattr_key(fid, name);
        let exists = tx.xattrs.get(key.as_slice())?.is_some();
        match mode {
            XattrMode::Create if exists => return Err(fail(Errno::Exist, "attribute exists")),
            XattrMode::Replace if !exists => return Err(fail(Errno::NoData, "no such attribute")),
            _ => {}
        }
        // Mutations start here.
        let mut v = Vec::with_capacity(value.len() + 1);
        v.push(store::RECORD_VERSION);
        v.extend_from_slice(value);
        tx.xattrs.insert(key.as_slice(), v.as_slice())?;
        ino.ctime = Timestamp::now();
        self.put_inode(tx, fx, fid, &ino)?;
        Ok(MdtReply::Ok)
    }

    pub(crate) fn removexattr(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        fid: Fid,
        name: &[u8],
        cred: &Credentials,
    ) -> Result<MdtReply, Fail> {
        let mut ino = load(&tx.inodes, fid)?;
        let ns = xattr_ns(name)?;
        xattr_permission(&ino, cred, ns, true)?;
        let key = store::xattr_key(fid, name);
        if tx.xattrs.get(key.as_slice())?.is_none() {
            return Err(fail(Errno::NoData, "no such attribute"));
        }
        // Mutations start here.
        tx.xattrs.remove(key.as_slice())?;
        ino.ctime = Timestamp::now();
        self.put_inode(tx, fx, fid, &ino)?;
        Ok(MdtReply::Ok)
    }

    pub(crate) fn setlayout(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        fid: Fid,
        template: Option<&LayoutTemplate>,
        cred: &Credentials,
    ) -> Result<MdtReply, Fail> {
        let mut ino = load(&tx.inodes, fid)?;
        if !perm::owner_or_root(&ino, cred) {
            return Err(fail(Errno::Perm, "only the owner sets a layout"));
        }
        if let Some(t) = template {
            t.validate()
                .map_err(|e| fail(Errno::Inval, e.to_string()))?;
        }
        match ino.kind {
            FileKind::Directory => {
                // Mutations start here.
                ino.default_layout = template.cloned();
                ino.ctime = Timestamp::now();
                self.put_inode(tx, fx, fid, &ino)?;
                Ok(MdtReply::Template(ino.default_layout))
            }
            FileKind::Regular => {
                let Some(t) = template else {
                    return Err(fail(Errno::Inval, "a file's layout cannot be removed"));
                };
                if ino.size != 0 || ino.blocks != 0 || ino.written {
                    return Err(fail(Errno::Exist, "file has data: its layout is fixed"));
                }
                let (first_id, generation, old) = match &ino.layout {
                    Some(l) => (
                        l.components
                            .iter()
                            .map(|c| c.id)
                            .max()
                            .unwrap_or(0)
                            .saturating_add(1),
                        l.generation.saturating_add(1),
                        l.objects(fid).collect(),
                    ),
                    None => (1, 1, Vec::new()),
                };
                let dir = Inode::new(FileKind::Directory, 0, 0, 0, Timestamp::default());
                let layout = self.new_layout(tx, &dir, Fid::ROOT, Some(t), first_id, generation)?;
                // Mutations start here. Objects of the old layout may exist if a client
                // created them without writing: destroy them too.
                self.log_destroy(tx, fx, fid, old)?;
                ino.layout = Some(layout);
                ino.ctime = Timestamp::now();
                self.put_inode(tx, fx, fid, &ino)?;
                Ok(MdtReply::Layout(ino.layout))
            }
            _ => Err(fail(
                Errno::Inval,
                "only files and directories have layouts",
            )),
        }
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
        let handle = self.open_inode(tx, fx, conn, fid, &mut ino, flags, cred, true)?;
        let attr = ino.attr(fid, self.handles().count(fid));
        Ok(MdtReply::Opened {
            handle,
            attr,
            layout: ino.layout,
        })
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn close(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        conn: u64,
        handle: u64,
        size: Option<u64>,
        blocks: Option<u64>,
        modified: bool,
    ) -> Result<MdtReply, Fail> {
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
        let changed = merge_size(&mut ino, size, blocks, modified);
        if ino.nlink == 0 && self.handles().count(h.fid) == 0 {
            self.destroy_inode(tx, fx, h.fid, &ino)?;
        } else if changed {
            self.put_inode(tx, fx, h.fid, &ino)?;
        }
        Ok(MdtReply::Ok)
    }

    /// Merges what a writer observed into the inode of an open handle, keeping it open.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn size_merge(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        conn: u64,
        handle: u64,
        size: Option<u64>,
        blocks: Option<u64>,
        modified: bool,
    ) -> Result<MdtReply, Fail> {
        let h = self
            .handles()
            .get(conn, handle)
            .ok_or_else(|| fail(Errno::BadF, "no such handle"))?;
        let Some(mut ino) = store::get_inode(&tx.inodes, h.fid)? else {
            return Ok(MdtReply::Ok);
        };
        if merge_size(&mut ino, size, blocks, modified) {
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
            match self.close(tx, fx, EXPIRED, id, None, None, false) {
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
            match self.close(tx, fx, conn, id, None, None, false) {
                Ok(_) | Err(Fail::Wire(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(MdtReply::Ok)
    }
}

/// Max-merges a writer's size and blocks into an inode and, if it wrote, bumps the times
/// and the data version. Returns whether the inode changed.
fn merge_size(ino: &mut Inode, size: Option<u64>, blocks: Option<u64>, modified: bool) -> bool {
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
