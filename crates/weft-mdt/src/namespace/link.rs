//! Adding and removing names of existing inodes: hard links, unlink and rmdir.

use super::*;

impl Engine {
    /// A new name `to` for `fid`.
    pub(crate) fn link(
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
        let cred = who.cred;
        let Some(mut ino) = store::get_inode(&tx.inodes, fid)? else {
            if self.is_foreign(fid) {
                return self.prepare_remote_link(tx, fx, fid, to, who);
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

    /// Removes the name `at` (a directory's when `rmdir`).
    pub(crate) fn unlink(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        at: &EntryAt<'_>,
        rmdir: bool,
        who: &Caller<'_>,
    ) -> Result<MdtReply, Fail> {
        let EntryAt { parent, name } = *at;
        let Caller { cred, origin } = *who;
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
                    self.prepare_remote_rmdir(tx, fx, at, &de, &dir, who)
                }
                (true, _) => Err(fail(Errno::NotDir, "not a directory")),
                (false, FileKind::Directory) => Err(fail(Errno::IsDir, "is a directory")),
                (false, _) => self.prepare_remote_unlink(tx, fx, at, &de, &dir, who),
            };
        };
        perm::check(&dir, cred, MAY_WRITE | MAY_EXEC)?;
        perm::check_sticky(&dir, &victim, cred)?;
        if rmdir {
            if !victim.is_dir() {
                return Err(fail(Errno::NotDir, "not a directory"));
            }
            if let Some(stripes) = store::get_stripes(&tx.dir_stripes, de.fid)? {
                return self.prepare_rmdir_striped(tx, fx, at, de.fid, stripes, origin);
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
}
