//! Step 1 of a cross-MDT operation (commit thread): validate as the local operation would
//! and write its intent; also the mkdirs that choose a remote or striped directory.

use super::*;
use crate::namespace::{Caller, EntryAt, NewDir, Renaming};

/// The source of a rename whose inode is on another MDT, as loaded here: its entry and
/// the directory holding it.
#[derive(Debug)]
pub(crate) struct RenameSource {
    /// The source name's entry.
    pub de: Dirent,
    /// The directory holding it.
    pub dir: Inode,
}

impl Engine {
    /// Step 1 of a remote mkdir: validates like [`Engine::mkdir`] and stores the intent.
    /// Answers `Fail::CrossMdt` for the request path to carry on.
    pub(crate) fn prepare_mkdir_on(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        new: &NewDir<'_>,
        mdt: u32,
        who: &Caller<'_>,
    ) -> Result<MdtReply, Fail> {
        let NewDir {
            at: EntryAt { parent, name },
            mode,
        } = *new;
        let Caller { cred, origin } = *who;
        if mdt == self.meta.index {
            return self.mkdir(tx, fx, new, cred);
        }
        Self::existing_intent(tx, parent, name, origin, Errno::Exist)?;
        let dir = load_dir(&tx.inodes, &tx.dir_stripes, parent, cred)?;
        check_name(name)?;
        if store::get_dirent(&tx.dirents, parent, name)?.is_some() {
            return Err(fail(Errno::Exist, "entry exists"));
        }
        perm::check(&dir, cred, MAY_WRITE | MAY_EXEC)?;
        if dir.nlink.checked_add(1).is_none() {
            return Err(fail(Errno::MLink, "too many subdirectories"));
        }
        if !self.cluster.has_mdt(mdt) {
            return Err(fail(Errno::Inval, format!("there is no MDT {mdt}")));
        }
        let (uid, gid, bits) = perm::new_owner(&dir, cred, FileKind::Directory, mode & 0o1777);
        // The new directory inherits the parent's default layout, as a local mkdir does.
        let kind = IntentKind::Mkdir {
            mdt,
            mode: bits,
            uid,
            gid,
            default_layout: child_default_layout(parent, &dir),
            dir_default: store::get_dir_default(&tx.dir_defaults, parent)?,
        };
        self.start_intent(tx, fx, &new.at, kind, origin)
    }

    /// Step 1 of removing a remote directory (from [`Engine::unlink`] when the entry's
    /// inode is not here): permission checks that need only the parent, then the intent.
    pub(crate) fn prepare_remote_rmdir(
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
        let kind = IntentKind::Rmdir {
            fid: de.fid,
            sticky_owner: (dir.mode & perm::S_ISVTX != 0).then_some(dir.uid),
            cred: cred.clone(),
        };
        self.start_intent(tx, fx, at, kind, origin)
    }

    pub(crate) fn put_intent(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        intent: &Intent,
    ) -> Result<(), Fail> {
        let v = store::encode(intent)?;
        tx.intents.insert(
            intent_key(intent.parent, &intent.name).as_slice(),
            v.as_slice(),
        )?;
        fx.wrote = true;
        Ok(())
    }

    /// Step 1 of a striped mkdir: validates like [`Engine::mkdir`], picks the MDTs (this
    /// one, then the next ones in index order) and the local FIDs, stores the intent.
    pub(crate) fn prepare_mkdir_striped(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        new: &NewDir<'_>,
        count: u32,
        hash: DirHash,
        who: &Caller<'_>,
    ) -> Result<MdtReply, Fail> {
        let NewDir {
            at: EntryAt { parent, name },
            mode,
        } = *new;
        let Caller { cred, origin } = *who;
        if count == 0 || count > MAX_DIR_STRIPES {
            return Err(fail(
                Errno::Inval,
                format!("a striped directory has 1 to {MAX_DIR_STRIPES} shards"),
            ));
        }
        if count == 1 {
            return self.mkdir(tx, fx, new, cred);
        }
        Self::existing_intent(tx, parent, name, origin, Errno::Exist)?;
        let dir = load_dir(&tx.inodes, &tx.dir_stripes, parent, cred)?;
        check_name(name)?;
        if store::get_dirent(&tx.dirents, parent, name)?.is_some() {
            return Err(fail(Errno::Exist, "entry exists"));
        }
        perm::check(&dir, cred, MAY_WRITE | MAY_EXEC)?;
        if dir.nlink.checked_add(1).is_none() {
            return Err(fail(Errno::MLink, "too many subdirectories"));
        }
        let mut all = self.cluster.mdts();
        all.sort_unstable();
        all.dedup();
        let Some(me) = all.iter().position(|&m| m == self.meta.index) else {
            return Err(fail(Errno::Io, "this MDT is not in the configuration yet"));
        };
        if (count as usize) > all.len() {
            return Err(fail(
                Errno::Inval,
                format!(
                    "{count} shards asked, the file system has {} MDTs",
                    all.len()
                ),
            ));
        }
        let mdts: Vec<u32> = (1..count as usize)
            .map(|i| all[(me + i) % all.len()])
            .collect();
        if !self.fid_available() {
            return Err(Fail::NeedSeq);
        }
        // Mutations start here. Two FIDs: a sequence holds billions, so the check above
        // leaves room for both unless it ends exactly here.
        let master = self.alloc_fid()?;
        let shard0 = self.alloc_fid()?;
        let (uid, gid, bits) = perm::new_owner(&dir, cred, FileKind::Directory, mode & 0o1777);
        let kind = IntentKind::MkdirStriped {
            master,
            shard0,
            mdts,
            hash,
            mode: bits,
            uid,
            gid,
            default_layout: child_default_layout(parent, &dir),
            dir_default: store::get_dir_default(&tx.dir_defaults, parent)?,
        };
        self.start_intent(tx, fx, &new.at, kind, origin)
    }

    /// A mkdir as clients send it: under a directory with a default for new
    /// subdirectories (`weft setdirstripe -D`), a striped one with that count, which keeps
    /// the default; else a plain one, which keeps it too.
    pub(crate) fn mkdir_inheriting(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        new: &NewDir<'_>,
        who: &Caller<'_>,
    ) -> Result<MdtReply, Fail> {
        // A default wider than the file system stripes over every MDT.
        let mdts = (self.cluster.mdts().len() as u32).max(1);
        match store::get_dir_default(&tx.dir_defaults, new.at.parent)? {
            Some(d) if d.count.min(mdts) > 1 => {
                self.prepare_mkdir_striped(tx, fx, new, d.count.min(mdts), d.hash, who)
            }
            Some(d) => {
                let reply = self.mkdir(tx, fx, new, who.cred)?;
                if let MdtReply::Attr(a) = &reply {
                    self.put_dir_default(tx, fx, a.fid, Some(&d))?;
                }
                Ok(reply)
            }
            None => self.mkdir(tx, fx, new, who.cred),
        }
    }

    /// Sets or removes a directory's default for new subdirectories (its owner or root).
    pub(crate) fn set_dir_default(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        fid: Fid,
        default: Option<&DirDefault>,
        cred: &Credentials,
    ) -> Result<MdtReply, Fail> {
        let ino = crate::namespace::load(&tx.inodes, fid)?;
        if !ino.is_dir() {
            return Err(fail(Errno::NotDir, "not a directory"));
        }
        if cred.uid != 0 && cred.uid != ino.uid {
            return Err(fail(
                Errno::Perm,
                "only the owner sets a directory's default",
            ));
        }
        if let Some(d) = default
            && (d.count == 0 || d.count > MAX_DIR_STRIPES)
        {
            return Err(fail(
                Errno::Inval,
                format!("a default of 1 to {MAX_DIR_STRIPES} shards"),
            ));
        }
        self.put_dir_default(tx, fx, fid, default)?;
        Ok(MdtReply::Ok)
    }

    /// Step 1 of removing a striped directory whose master is here (from
    /// [`Engine::unlink`], permissions checked): the intent.
    pub(crate) fn prepare_rmdir_striped(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        at: &EntryAt<'_>,
        master: Fid,
        stripes: DirStripes,
        origin: &Origin,
    ) -> Result<MdtReply, Fail> {
        Self::existing_intent(tx, at.parent, at.name, origin, Errno::Busy)?;
        let kind = IntentKind::RmdirStriped {
            master,
            shards: stripes.shards,
        };
        self.start_intent(tx, fx, at, kind, origin)
    }

    /// A rename on this MDT whose source entry names an inode of another MDT: only entries
    /// move (and a replaced local non-directory loses a link). A remote directory moved to
    /// another directory changes its ".." there too ([`Engine::move_remote_dir_here`]);
    /// replacing a directory with one of another MDT, or an exchange, answers EXDEV.
    pub(crate) fn rename_remote_entry(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        r: &Renaming<'_>,
        src: RenameSource,
        who: &Caller<'_>,
        dm: Option<&crate::dir_moves::DirMove>,
    ) -> Result<MdtReply, Fail> {
        let (src_parent, src_name) = (r.src.parent, r.src.name);
        let (dst_parent, dst_name) = (r.dst.parent, r.dst.name);
        let flags = r.flags;
        let cred = who.cred;
        let xdev = |why: &str| fail(Errno::XDev, why.to_string());
        let same_dir = src_parent == dst_parent;
        if flags.exchange {
            return Err(xdev("RENAME_EXCHANGE of an inode on another MDT"));
        }
        if src.de.kind == FileKind::Directory && !same_dir {
            return self.move_remote_dir_here(tx, fx, r, src, who, dm);
        }
        let RenameSource { de: sde, dir: sdir } = src;
        let ddir = if same_dir {
            None
        } else {
            Some(load_dir(&tx.inodes, &tx.dir_stripes, dst_parent, cred)?)
        };
        let victim = match store::get_dirent(&tx.dirents, dst_parent, dst_name)? {
            Some(d) if d.fid == sde.fid => return Ok(MdtReply::Ok),
            Some(_) if flags.noreplace => return Err(fail(Errno::Exist, "destination exists")),
            Some(d) => match store::get_inode(&tx.inodes, d.fid)? {
                Some(v) if v.is_dir() && sde.kind == FileKind::Directory => {
                    return Err(xdev("replacing a directory with a remote directory"));
                }
                Some(v) if v.is_dir() => {
                    return Err(fail(
                        Errno::IsDir,
                        "cannot replace a directory with a non-directory",
                    ));
                }
                Some(_) if sde.kind == FileKind::Directory => {
                    return Err(fail(
                        Errno::NotDir,
                        "cannot replace a non-directory with a directory",
                    ));
                }
                Some(v) if sde.kind != FileKind::Directory => Some((d.fid, Some(v))),
                None if sde.kind != FileKind::Directory && d.kind != FileKind::Directory => {
                    Some((d.fid, None))
                }
                _ => return Err(xdev("the replaced entry is on another MDT")),
            },
            None => None,
        };
        perm::check(&sdir, cred, MAY_WRITE | MAY_EXEC)?;
        let target_dir = ddir.as_ref().unwrap_or(&sdir);
        if let Some(d) = &ddir {
            perm::check(d, cred, MAY_WRITE | MAY_EXEC)?;
        }
        match &victim {
            Some((_, Some(v))) => perm::check_sticky(target_dir, v, cred)?,
            Some((_, None))
                if target_dir.mode & perm::S_ISVTX != 0
                    && cred.uid != 0
                    && cred.uid != target_dir.uid =>
            {
                return Err(xdev("sticky directory and an inode on another MDT"));
            }
            _ => {}
        }
        // The sticky-bit rule needs the entry's owner, which only the other MDT knows: it
        // comes with a directory move's checks (the rename lock, harmless here).
        if sdir.mode & perm::S_ISVTX != 0 && cred.uid != 0 && cred.uid != sdir.uid {
            let dm = self.dir_move(dm, sde.fid, dst_parent)?;
            perm::check_sticky(&sdir, &crate::dir_moves::inode_of(&dm.attr), cred)?;
        }
        // Mutations start here.
        let mut remote_victim = None;
        match victim {
            Some((vfid, Some(v))) => self.drop_one_link(tx, fx, vfid, v)?,
            Some((vfid, None)) => remote_victim = Some(vfid),
            None => {}
        }
        let v = store::encode(&sde)?;
        tx.dirents.insert(
            store::dirent_key(dst_parent, dst_name).as_slice(),
            v.as_slice(),
        )?;
        tx.dirents
            .remove(store::dirent_key(src_parent, src_name).as_slice())?;
        let now = Timestamp::now();
        let mut sdir = sdir;
        sdir.mtime = now;
        sdir.ctime = now;
        self.put_inode(tx, fx, src_parent, &sdir)?;
        if let Some(mut d) = ddir {
            d.mtime = now;
            d.ctime = now;
            self.put_inode(tx, fx, dst_parent, &d)?;
        }
        if let Some(victim) = remote_victim {
            return self.defer_link_drop(tx, fx, &r.dst, victim, who.origin);
        }
        Ok(MdtReply::Ok)
    }
}

/// The default layout a new directory in `dir` copies: its parent's, except the root's,
/// which applies through the inheritance chain (fetched from MDT0) as for a local mkdir.
pub(super) fn child_default_layout(parent: Fid, dir: &Inode) -> Option<LayoutTemplate> {
    if parent == Fid::ROOT {
        None
    } else {
        dir.default_layout.clone()
    }
}
