//! Changing attributes: `setattr` (chmod, chown, utimes, truncate) and a file's layout
//! (`setlayout`).

use super::*;

impl Engine {
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
            if size != 0 && ino.hsm_flags & weft_proto::hsm::HSM_RELEASED != 0 {
                // Its bytes are in the archive: a client restores it (HsmRestore) first.
                return Err(fail(
                    Errno::Busy,
                    "the file is released: restore it before changing its size",
                ));
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
                    // Nothing is left to restore of a released file cut to 0 bytes.
                    ino.hsm_flags &= !weft_proto::hsm::HSM_RELEASED;
                }
                crate::hsm::data_changed(&mut ino);
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
}

pub(super) fn time_of(t: TimeSet, now: Timestamp) -> Timestamp {
    match t {
        TimeSet::Now => now,
        TimeSet::At(ts) => ts,
    }
}

/// Clears set-user-id, and set-group-id when group execute is set (Linux's kill-priv).
pub(super) fn kill_suid(mode: u32) -> u32 {
    let mut m = mode & !S_ISUID;
    if m & S_IXGRP != 0 {
        m &= !S_ISGID;
    }
    m
}
