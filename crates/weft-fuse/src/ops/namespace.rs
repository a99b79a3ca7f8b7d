//! Changes to the namespace: mknod, mkdir, unlink, rmdir, symlink, rename and link, and
//! the rules the mount applies before sending them (name lengths, the umask, which
//! `renameat2` flags it takes).

use super::{Entry, Ops, check_name};
use crate::errno::{Failed, FsResult};
use weft_proto::mdt::{Credentials, RenameFlags};

/// The mode of a new inode: `mode` without the `umask` bits. Without `FUSE_DONT_MASK` the
/// kernel already applied the umask; applying it again changes nothing, and keeps the
/// rule true if that capability is ever asked for.
pub fn masked(mode: u32, umask: u32) -> u32 {
    mode & !(umask & 0o777)
}

/// The `renameat2` flags the MDT takes, from the kernel's bits: `RENAME_WHITEOUT` and
/// `RENAME_NOREPLACE` with `RENAME_EXCHANGE` are EINVAL.
pub fn rename_flags(bits: u32) -> FsResult<RenameFlags> {
    let has = |flag: u32| bits & flag != 0;
    let (noreplace, exchange) = (has(libc::RENAME_NOREPLACE), has(libc::RENAME_EXCHANGE));
    if has(libc::RENAME_WHITEOUT) || (noreplace && exchange) {
        return Err(Failed::code(libc::EINVAL));
    }
    Ok(RenameFlags {
        noreplace,
        exchange,
    })
}

impl Ops {
    /// Makes a special file (or a regular one) `name` in `parent`.
    pub async fn mknod(
        &self,
        parent: u64,
        name: &[u8],
        mode: u32,
        rdev: u32,
        cred: &Credentials,
    ) -> FsResult<Entry> {
        check_name(name)?;
        let pfid = self.fid(parent)?;
        let a = self
            .client
            .mknod(pfid, name, mode, u64::from(rdev), cred)
            .await?;
        Ok(self.entry(a, Some(parent)).await)
    }

    /// Makes directory `name` in `parent`.
    pub async fn mkdir(
        &self,
        parent: u64,
        name: &[u8],
        mode: u32,
        cred: &Credentials,
    ) -> FsResult<Entry> {
        check_name(name)?;
        let pfid = self.fid(parent)?;
        let a = self.client.mkdir(pfid, name, mode & 0o7777, cred).await?;
        Ok(self.entry(a, Some(parent)).await)
    }

    /// Removes the non-directory `name` from `parent`.
    pub async fn unlink(&self, parent: u64, name: &[u8], cred: &Credentials) -> FsResult<()> {
        check_name(name)?;
        Ok(self.client.unlink(self.fid(parent)?, name, cred).await?)
    }

    /// Removes the empty directory `name` from `parent`.
    pub async fn rmdir(&self, parent: u64, name: &[u8], cred: &Credentials) -> FsResult<()> {
        check_name(name)?;
        Ok(self.client.rmdir(self.fid(parent)?, name, cred).await?)
    }

    /// Makes symlink `name` in `parent` pointing at `target`.
    pub async fn symlink(
        &self,
        parent: u64,
        name: &[u8],
        target: &[u8],
        cred: &Credentials,
    ) -> FsResult<Entry> {
        check_name(name)?;
        if target.len() > weft_proto::SYMLINK_MAX {
            return Err(Failed::code(libc::ENAMETOOLONG));
        }
        let a = self
            .client
            .symlink(self.fid(parent)?, name, target, cred)
            .await?;
        Ok(self.entry(a, Some(parent)).await)
    }

    /// Renames `name` in `parent` to `newname` in `newparent` (`flags`: the kernel's
    /// `renameat2` bits).
    pub async fn rename(
        &self,
        parent: u64,
        name: &[u8],
        newparent: u64,
        newname: &[u8],
        flags: u32,
        cred: &Credentials,
    ) -> FsResult<()> {
        check_name(name)?;
        check_name(newname)?;
        let f = rename_flags(flags)?;
        let (src, dst) = (self.fid(parent)?, self.fid(newparent)?);
        Ok(self.client.rename(src, name, dst, newname, f, cred).await?)
    }

    /// Makes `newname` in `newparent` a hard link to `ino`.
    pub async fn link(
        &self,
        ino: u64,
        newparent: u64,
        newname: &[u8],
        cred: &Credentials,
    ) -> FsResult<Entry> {
        check_name(newname)?;
        let a = self
            .client
            .link(self.fid(ino)?, self.fid(newparent)?, newname, cred)
            .await?;
        Ok(self.entry(a, Some(newparent)).await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_umask_takes_permission_bits_only() {
        assert_eq!(masked(0o100666, 0o022), 0o100644);
        assert_eq!(masked(0o4777, 0o7077), 0o4700);
    }

    #[test]
    fn rename_flags_are_checked() {
        assert_eq!(rename_flags(0), Ok(RenameFlags::default()));
        let r = rename_flags(libc::RENAME_NOREPLACE).unwrap();
        assert!(r.noreplace && !r.exchange);
        let r = rename_flags(libc::RENAME_EXCHANGE).unwrap();
        assert!(!r.noreplace && r.exchange);
        for bad in [
            libc::RENAME_WHITEOUT,
            libc::RENAME_NOREPLACE | libc::RENAME_EXCHANGE,
        ] {
            assert_eq!(rename_flags(bad).map_err(Failed::errno), Err(libc::EINVAL));
        }
    }
}
