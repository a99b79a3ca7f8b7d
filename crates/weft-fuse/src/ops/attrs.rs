//! Names and attributes: lookup (with the statahead shortcut), getattr (with the
//! attributes a change of this mount left), setattr, access, readlink and statfs.

use super::{Entry, Ops, check_name};
use crate::errno::{Failed, FsResult};
use std::sync::Arc;
use std::time::Duration;
use weft_proto::mdt::{Attr, Credentials, FileKind, SetAttr, StatFs};

impl Ops {
    /// How long a statahead entry may be used: what the kernel would cache a lookup for.
    /// Zero (statahead off) without `default_permissions`, since an answer from statahead
    /// skips the MDT's search-permission check, which the kernel then makes instead.
    fn statahead_age(&self) -> Duration {
        if self.opts.default_permissions {
            self.opts.entry_timeout.min(self.opts.attr_timeout)
        } else {
            Duration::ZERO
        }
    }

    /// `name` in `parent` from a statahead scan, with a kernel reference taken, if a scan
    /// holds it (answered on the reading thread). What comes from there never needs
    /// [`Ops::local_view`]'s adjustment: a scan keeps no open regular file, and this mount
    /// opening one (which it must do before writing) voids its entry.
    pub fn lookup_ahead(&self, parent: u64, name: &[u8]) -> Option<Entry> {
        let age = self.statahead_age();
        if age.is_zero() {
            return None;
        }
        let pfid = self.inodes.fid(parent)?;
        let attr = self.client.lookup_ahead(pfid, name, age)?;
        let ino = self.inodes.reference(attr.fid, Some(parent));
        Some(Entry { ino, attr })
    }

    /// Counts a lookup in `parent` that went to the MDT toward a statahead scan.
    fn note_lookup(&self, parent: u64, cred: &Credentials) {
        let age = self.statahead_age();
        if let (false, Some(pfid)) = (age.is_zero(), self.inodes.fid(parent)) {
            self.client.note_lookup(pfid, cred, age);
        }
    }

    /// Looks `name` up in directory `parent` and takes a kernel reference on it.
    pub async fn lookup(&self, parent: u64, name: &[u8], cred: &Credentials) -> FsResult<Entry> {
        check_name(name)?;
        let pfid = self.fid(parent)?;
        // The MDT resolves names only; `.` and `..` are the client's.
        let attr = match name {
            b"." => self.client.getattr(pfid).await?,
            b".." => {
                let up = self
                    .inodes
                    .parent(parent)
                    .and_then(|p| self.inodes.fid(p))
                    .ok_or(Failed::code(libc::ENOENT))?;
                self.client.getattr(up).await?
            }
            _ => self.client.lookup(pfid, name, cred).await?,
        };
        let entry = self.entry(attr, Some(parent)).await;
        self.note_lookup(parent, cred);
        Ok(entry)
    }

    /// Directory `ino`'s attributes as a create or unlink this mount just made in it left
    /// them (see [`weft_client::changes`]), answered on the reading thread: the kernel
    /// drops a directory's attributes after every change in it and asks again at the next
    /// path walk.
    pub fn changed_dir(&self, ino: u64) -> Option<Attr> {
        let ttl = self.opts.attr_timeout;
        if ttl.is_zero() {
            return None;
        }
        let fid = self.inodes.fid(ino)?;
        let changes = self.client.cluster().changes();
        changes
            .take_dir(fid, ttl)
            .filter(|a| a.kind == FileKind::Directory)
    }

    /// `ino`'s attributes as this mount shows them.
    pub async fn getattr(&self, ino: u64) -> FsResult<Attr> {
        let fid = self.fid(ino)?;
        let attr = self.client.getattr(fid).await?;
        Ok(self.local_view(ino, attr).await)
    }

    /// Changes `ino`'s attributes (`fh`: the handle of an `ftruncate`, if any).
    pub async fn setattr(
        &self,
        ino: u64,
        mut set: SetAttr,
        fh: Option<u64>,
        cred: Credentials,
    ) -> FsResult<Attr> {
        let fid = self.fid(ino)?;
        let mut cred = cred;
        if let (Some(mode), true) = (set.mode, cred.uid != 0) {
            // The kernel clears setuid/setgid after a write by a non-owner with a chmod in
            // the writer's name; the MDT would refuse it (EPERM), so it is made as root.
            let now = self.client.getattr(fid).await?;
            if kills_suid(Perms::of(&now), mode, &cred) {
                cred = Credentials::root();
            }
        }
        if set.atime.is_some() || set.mtime.is_some() {
            // Writes of this mount not yet recorded on the MDT would stamp the times at
            // their flush, after (and over) the times set here (`cp -p`, `touch -d`).
            for f in self.files.writers_of(ino) {
                f.file.flush_in(self.context()).await?;
            }
        }
        let mut truncated = false;
        if let Some(size) = set.size {
            let handle = match fh {
                Some(fh) => self.file(fh).ok().filter(|f| f.writable),
                None => None,
            };
            // Every other handle of this mount (a process may keep many, and a descriptor
            // closed while still mapped is released only at munmap): the truncate must
            // cut the bytes a writable one buffered, and what they know of the objects'
            // blocks no longer holds (the size they share follows the truncate).
            let others: Vec<_> = self
                .files
                .of_inode(ino)
                .into_iter()
                .filter(|f| !handle.as_ref().is_some_and(|h| Arc::ptr_eq(h, f)))
                .collect();
            for f in others.iter().filter(|f| f.writable) {
                f.file.write_back_in(self.context()).await;
            }
            if let Some(f) = &handle {
                // An open writable handle (ftruncate): the kernel checked the access.
                f.file.truncate_in(self.context(), size).await?;
            } else {
                self.client
                    .setattr(
                        fid,
                        SetAttr {
                            size: Some(size),
                            ..Default::default()
                        },
                        &cred,
                    )
                    .await?;
            }
            set.size = None;
            for f in &others {
                f.file.size_changed(size).await;
            }
            self.inodes.page_cache_changed(ino);
            truncated = true;
        }
        let attr = if set == SetAttr::default() {
            debug_assert!(truncated);
            self.client.getattr(fid).await?
        } else {
            self.client.setattr(fid, set, &cred).await?
        };
        Ok(self.local_view(ino, attr).await)
    }

    /// `access(2)` on `ino` for `mask` (`R_OK`/`W_OK`/`X_OK` bits); asked only without
    /// `default_permissions`: the same mode-bit rule as the MDT's.
    pub async fn access(&self, ino: u64, mask: u32, cred: &Credentials) -> FsResult<()> {
        let a = self.client.getattr(self.fid(ino)?).await?;
        if mask == 0 || may(cred, Perms::of(&a), mask) {
            Ok(())
        } else {
            Err(Failed::code(libc::EACCES))
        }
    }

    /// The target of symlink `ino`.
    pub async fn readlink(&self, ino: u64) -> FsResult<Vec<u8>> {
        Ok(self.client.readlink(self.fid(ino)?).await?)
    }

    /// The file system's usage, as the kernel takes it (see [`kernel_statfs`]).
    pub async fn statfs(&self) -> FsResult<StatFs> {
        Ok(kernel_statfs(self.client.statfs().await?))
    }
}

/// What a permission check reads of an inode's attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Perms {
    /// The inode's type.
    pub kind: FileKind,
    /// Its mode bits.
    pub mode: u32,
    /// Its owner.
    pub uid: u32,
    /// Its group.
    pub gid: u32,
}

impl Perms {
    /// The permissions of `a`.
    pub fn of(a: &Attr) -> Self {
        Self {
            kind: a.kind,
            mode: a.mode,
            uid: a.uid,
            gid: a.gid,
        }
    }
}

/// Whether a chmod to `mode` of a file now at `now`, by `cred`, is the kernel clearing
/// setuid/setgid after a write by a non-owner: it only clears those bits.
pub fn kills_suid(now: Perms, mode: u32, cred: &Credentials) -> bool {
    let kept = now.mode & 0o7777;
    let cleared = kept & !mode & 0o6000;
    now.uid != cred.uid && cleared != 0 && mode & 0o7777 == kept & !cleared
}

/// Whether `cred` may access `a` for `mask` (`R_OK`/`W_OK`/`X_OK` bits), by mode bits.
pub fn may(cred: &Credentials, a: Perms, mask: u32) -> bool {
    if cred.uid == 0 {
        // Root may do anything, but execute only where some execute bit is set.
        return mask & 1 == 0 || a.kind == FileKind::Directory || a.mode & 0o111 != 0;
    }
    let bits = if cred.uid == a.uid {
        (a.mode >> 6) & 7
    } else if cred.in_group(a.gid) {
        (a.mode >> 3) & 7
    } else {
        a.mode & 7
    };
    bits & mask == mask
}

/// Usage as the kernel is told it: blocks of at least 512 bytes (also the fragment size)
/// and names of up to [`weft_proto::NAME_MAX`] bytes.
pub fn kernel_statfs(st: StatFs) -> StatFs {
    StatFs {
        bsize: st.bsize.max(512),
        namelen: weft_proto::NAME_MAX as u32,
        ..st
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn perms(kind: FileKind, mode: u32, uid: u32, gid: u32) -> Perms {
        Perms {
            kind,
            mode,
            uid,
            gid,
        }
    }

    fn user(uid: u32, gid: u32, groups: &[u32]) -> Credentials {
        Credentials {
            uid,
            gid,
            groups: groups.to_vec(),
        }
    }

    #[test]
    fn mode_bits_decide_access() {
        let f = perms(FileKind::Regular, 0o640, 10, 20);
        assert!(may(&user(10, 99, &[]), f, 6));
        assert!(!may(&user(10, 99, &[]), f, 1));
        assert!(may(&user(11, 20, &[]), f, 4));
        assert!(may(&user(11, 5, &[20]), f, 4), "supplementary group");
        assert!(!may(&user(11, 20, &[]), f, 2));
        assert!(!may(&user(12, 5, &[]), f, 4));
        // Root: anything but executing a file without an execute bit.
        let root = Credentials::root();
        assert!(may(&root, f, 6));
        assert!(!may(&root, f, 1));
        assert!(may(&root, perms(FileKind::Regular, 0o001, 1, 1), 1));
        assert!(may(&root, perms(FileKind::Directory, 0o000, 1, 1), 1));
    }

    #[test]
    fn only_a_chmod_that_just_clears_setuid_of_anothers_file_is_made_as_root() {
        let f = perms(FileKind::Regular, 0o6755, 10, 20);
        let writer = user(11, 20, &[]);
        assert!(kills_suid(f, 0o0755, &writer));
        assert!(kills_suid(f, 0o4755, &writer), "setgid only");
        assert!(!kills_suid(f, 0o0700, &writer), "other bits change too");
        assert!(!kills_suid(f, 0o6755, &writer), "nothing cleared");
        assert!(!kills_suid(f, 0o0755, &user(10, 20, &[])), "the owner");
    }

    #[test]
    fn statfs_blocks_are_at_least_512_bytes() {
        let st = StatFs {
            bsize: 0,
            blocks: 9,
            ..Default::default()
        };
        let k = kernel_statfs(st);
        assert_eq!((k.bsize, k.blocks), (512, 9));
        assert_eq!(k.namelen, weft_proto::NAME_MAX as u32);
        assert_eq!(kernel_statfs(StatFs { bsize: 4096, ..k }).bsize, 4096);
    }
}
