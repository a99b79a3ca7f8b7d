//! Lock requests: `getlk`, `setlk` (a blocked `F_SETLKW` waits here, in a task, until
//! granted or its caller gets a signal) and the release of an owner's locks at close, on
//! top of the translations and owner notes of [`crate::locks`] (which also says why
//! every lock is sent as POSIX).

use super::Ops;
use crate::errno::{Failed, FsResult};
use crate::locks::{from_kernel_end, interrupted, kernel_type, lock_type, to_kernel_end};
use weft_proto::mdt::{FileLock, LockHolder, LockKind};

/// A lock as the kernel asks about or for it: a range, an `F_*LCK` type, and the owner
/// and pid it is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelLock {
    /// First byte.
    pub start: u64,
    /// Last byte (the kernel's `OFFSET_MAX`: to the end of the file).
    pub end: u64,
    /// `F_RDLCK`, `F_WRLCK` or `F_UNLCK`.
    pub typ: i32,
    /// The owner (a process's files table for `fcntl`, an open file description for
    /// `flock`).
    pub owner: u64,
    /// The process the lock is shown as held by.
    pub pid: u32,
}

impl KernelLock {
    /// The MDT's form of the lock (EINVAL for an unknown type).
    pub fn to_mdt(self) -> FsResult<FileLock> {
        Ok(FileLock {
            kind: LockKind::Posix,
            typ: lock_type(self.typ).ok_or(Failed::code(libc::EINVAL))?,
            start: self.start,
            end: from_kernel_end(self.end),
            owner: self.owner,
            pid: self.pid,
        })
    }

    /// The answer to a `getlk` for this lock: the conflicting lock `holder` has, or this
    /// range as `F_UNLCK` if none conflicts.
    pub fn answer(self, holder: Option<LockHolder>) -> KernelLock {
        match holder {
            None => KernelLock {
                typ: libc::F_UNLCK,
                pid: 0,
                ..self
            },
            Some(h) => KernelLock {
                start: h.start,
                end: to_kernel_end(h.end),
                typ: kernel_type(h.typ),
                pid: h.pid,
                ..self
            },
        }
    }
}

impl Ops {
    /// The lock that would conflict with `lock` on `ino` (see [`KernelLock::answer`]).
    pub async fn getlk(&self, ino: u64, lock: KernelLock) -> FsResult<KernelLock> {
        let want = lock.to_mdt()?;
        let holder = self.client.getlk(self.fid(ino)?, want).await?;
        Ok(lock.answer(holder))
    }

    /// Takes (or, with `F_UNLCK`, releases) `lock` on `ino`; with `sleep`, waits for it
    /// until granted or thread `tid` (the caller) gets a signal.
    pub async fn setlk(&self, ino: u64, lock: KernelLock, sleep: bool, tid: u32) -> FsResult<()> {
        let want = lock.to_mdt()?;
        let fid = self.fid(ino)?;
        // Noted before asking, so that a close racing with the grant releases it.
        self.locks.add(ino, lock.owner);
        if sleep {
            self.client.setlkw(fid, want, interrupted(tid)).await?;
        } else {
            self.client.setlk(fid, want).await?;
        }
        // Again after a grant: a close by another thread of the owner while this one
        // waited has taken the note away, and the new lock needs it.
        self.locks.add(ino, lock.owner);
        Ok(())
    }

    /// Releases `owner`'s locks on `ino` if this mount ever locked it for that owner.
    /// A failure is logged, not returned: it does not make the close fail, and it means
    /// the connection to the MDT broke, which released the locks there anyway.
    pub(super) async fn release_locks(&self, ino: u64, owner: u64) {
        if self.locks.take(ino, owner) {
            self.release_remote_locks(ino, owner).await;
        }
    }

    /// Releases on the MDT the POSIX locks `owner` may hold on `ino` (already forgotten
    /// here with `locks.take`).
    pub(super) async fn release_remote_locks(&self, ino: u64, owner: u64) {
        let Some(fid) = self.inodes.fid(ino) else {
            return;
        };
        if let Err(e) = self.client.release_locks(fid, LockKind::Posix, owner).await {
            tracing::warn!(%fid, error = %e, "releasing locks at close failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_proto::mdt::{LOCK_TO_EOF, LockType};

    fn lock(typ: i32) -> KernelLock {
        KernelLock {
            start: 10,
            end: i64::MAX as u64,
            typ,
            owner: 77,
            pid: 5,
        }
    }

    #[test]
    fn kernel_locks_become_posix_locks_to_the_end() {
        let l = lock(libc::F_WRLCK).to_mdt().unwrap();
        assert_eq!(l.kind, LockKind::Posix);
        assert_eq!(l.typ, LockType::Write);
        assert_eq!((l.start, l.end, l.owner, l.pid), (10, LOCK_TO_EOF, 77, 5));
        assert_eq!(lock(42).to_mdt().map_err(Failed::errno), Err(libc::EINVAL));
    }

    #[test]
    fn getlk_answers_with_the_holder_or_unlocked() {
        let asked = lock(libc::F_RDLCK);
        let free = asked.answer(None);
        assert_eq!(
            (free.start, free.end, free.typ, free.pid),
            (10, i64::MAX as u64, libc::F_UNLCK, 0)
        );
        let holder = LockHolder {
            typ: LockType::Write,
            start: 0,
            end: LOCK_TO_EOF,
            pid: 9,
            client: uuid::Uuid::nil(),
            owner: 3,
        };
        let held = asked.answer(Some(holder));
        assert_eq!(
            (held.start, held.end, held.typ, held.pid),
            (0, i64::MAX as u64, libc::F_WRLCK, 9)
        );
    }
}
