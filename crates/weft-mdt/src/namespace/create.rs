//! Creating inodes: files (with their layout, and opened when asked), directories and
//! symlinks.

use super::open::OpenAs;
use super::*;

/// A directory to create: the fields of [`weft_proto::mdt::MdtRequest::Mkdir`] but the
/// caller.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NewDir<'a> {
    /// Its name, in the directory to create it in.
    pub at: EntryAt<'a>,
    /// Permission bits.
    pub mode: u32,
}

impl Engine {
    /// Layout for a new regular file in `dir`.
    pub(super) fn new_layout(
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

    /// Creates a non-directory (and opens it for connection `conn` if asked).
    pub(crate) fn create(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        conn: u64,
        new: &NewFile<'_>,
        cred: &Credentials,
    ) -> Result<MdtReply, Fail> {
        let NewFile {
            parent,
            name,
            mode,
            rdev,
            exclusive,
            layout,
            open,
        } = *new;
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
                    let how = OpenAs {
                        flags,
                        cred,
                        check_access: true,
                    };
                    Some(self.open_inode(tx, fx, conn, de.fid, &mut ino, &how)?)
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
            Some(flags) => {
                let how = OpenAs {
                    flags,
                    cred,
                    check_access: false,
                };
                Some(self.open_inode(tx, fx, conn, fid, &mut ino, &how)?)
            }
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
        new: &NewDir<'_>,
        cred: &Credentials,
    ) -> Result<MdtReply, Fail> {
        let NewDir {
            at: EntryAt { parent, name },
            mode,
        } = *new;
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
}
