//! Renames within this MDT (`rename(2)` with `RENAME_NOREPLACE` and `RENAME_EXCHANGE`).

use super::*;

/// A rename: the names of [`weft_proto::mdt::MdtRequest::Rename`] and its flags (the
/// caller apart).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Renaming<'a> {
    /// The name that moves.
    pub src: EntryAt<'a>,
    /// The name it gets.
    pub dst: EntryAt<'a>,
    /// `RENAME_NOREPLACE` and `RENAME_EXCHANGE`.
    pub flags: RenameFlags,
}

impl Engine {
    /// `rename(2)`; `dm` is the directory move it runs under (held rename lock), if any.
    pub(crate) fn rename(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        r: &Renaming<'_>,
        who: &Caller<'_>,
        dm: Option<&crate::dir_moves::DirMove>,
    ) -> Result<MdtReply, Fail> {
        let (src_parent, src_name) = (r.src.parent, r.src.name);
        let (dst_parent, dst_name) = (r.dst.parent, r.dst.name);
        let flags = r.flags;
        let Caller { cred, origin } = *who;
        if flags.exchange && flags.noreplace {
            return Err(fail(Errno::Inval, "RENAME_EXCHANGE with RENAME_NOREPLACE"));
        }
        if self.is_foreign(dst_parent) {
            return self.prepare_remote_rename(tx, fx, r, who, dm);
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
            let src = crate::remote::RenameSource { de: sde, dir: sdir };
            return self.rename_remote_entry(tx, fx, r, src, who, dm);
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
            return self.defer_link_drop(tx, fx, &r.dst, victim, origin);
        }
        Ok(MdtReply::Ok)
    }
}
