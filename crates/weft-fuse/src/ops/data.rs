//! File data: read and write (each with the shortcut answered on the reading thread),
//! flush at close, fallocate and lseek's `SEEK_DATA`/`SEEK_HOLE`.
//!
//! Within the mount every `write(2)` that returned is seen by every later read: a read
//! first writes back what the file's other handles buffered since (see
//! [`super::handles::OpenFile::wrote`]).

use super::Ops;
use crate::errno::{Failed, FsResult};
use bytes::Bytes;
use std::sync::Arc;

/// The kinds of `fallocate(2)` the mount serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Falloc {
    /// Mode 0: the size grows as `posix_fallocate` promises (no space is reserved: the
    /// OSTs allocate on write).
    Grow,
    /// `FALLOC_FL_KEEP_SIZE` alone: nothing to do.
    KeepSize,
    /// `FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE`, or `FALLOC_FL_ZERO_RANGE |
    /// FALLOC_FL_KEEP_SIZE`: the range is deallocated (it reads as zeros either way).
    Punch,
    /// `FALLOC_FL_ZERO_RANGE`: deallocated, and the size grows to the range's end.
    ZeroGrow,
}

impl Falloc {
    /// The kind of fallocate `mode` asks for (EOPNOTSUPP for any other).
    pub fn of_mode(mode: i32) -> FsResult<Self> {
        const PUNCH: i32 = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        const ZERO: i32 = libc::FALLOC_FL_ZERO_RANGE;
        const ZERO_KEEP: i32 = libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE;
        match mode {
            0 => Ok(Falloc::Grow),
            libc::FALLOC_FL_KEEP_SIZE => Ok(Falloc::KeepSize),
            PUNCH | ZERO_KEEP => Ok(Falloc::Punch),
            ZERO => Ok(Falloc::ZeroGrow),
            _ => Err(Failed::code(libc::EOPNOTSUPP)),
        }
    }

    /// Whether the range must first look as every handle of this mount sees the file.
    fn reads_range(self) -> bool {
        matches!(self, Falloc::Punch | Falloc::ZeroGrow)
    }
}

/// The start and direction of an lseek the kernel passes on: `SEEK_DATA` (false) or
/// `SEEK_HOLE` (true) from a non-negative offset; EINVAL for any other `whence` (the
/// kernel moves the offset itself for those), ENXIO for a negative offset.
pub fn seek_request(offset: i64, whence: i32) -> FsResult<(u64, bool)> {
    let hole = match whence {
        libc::SEEK_DATA => false,
        libc::SEEK_HOLE => true,
        _ => return Err(Failed::code(libc::EINVAL)),
    };
    let offset = u64::try_from(offset).map_err(|_| Failed::code(libc::ENXIO))?;
    Ok((offset, hole))
}

/// What a FLUSH still has to do after [`Ops::flush_at_once`] found it could not be
/// answered at once.
#[derive(Debug, Clone, Copy)]
pub struct PendingFlush {
    may_hold_locks: bool,
}

impl Ops {
    /// A sequential read of pages the client already holds, answered on the reading
    /// thread (inside the runtime's context): `None` if the read has to wait. `jobid`
    /// tells the caller's job id, asked only if the read is tried.
    pub fn read_cached(
        &self,
        fh: u64,
        offset: u64,
        size: u32,
        jobid: impl FnOnce() -> Option<Arc<str>>,
    ) -> Option<Bytes> {
        let f = self.files.get(fh)?;
        if self.files.others_wrote(&f) {
            return None;
        }
        let ctx = self.context().clone().for_job(jobid());
        f.file.try_read_cached_in(&ctx, offset, u64::from(size))
    }

    /// Reads `size` bytes of `fh` at `offset`.
    pub async fn read(&self, fh: u64, offset: u64, size: u32) -> FsResult<Bytes> {
        let f = self.file(fh)?;
        self.write_back_others(&f).await;
        Ok(f.file
            .read_at_in(self.context(), offset, u64::from(size))
            .await?)
    }

    /// A write that extends what handle `fh` buffers, copied in on the reading thread
    /// (inside the runtime's context): the bytes written, or `None` if it has to wait.
    /// `jobid` tells the caller's job id, asked only if the write is tried.
    pub fn write_buffered(
        &self,
        fh: u64,
        offset: u64,
        data: &[u8],
        jobid: impl FnOnce() -> Option<Arc<str>>,
    ) -> Option<u32> {
        let f = self.files.get(fh)?;
        let len = u32::try_from(data.len()).ok()?;
        let ctx = self.context().clone().for_job(jobid());
        if f.file.try_write_buffered_in(&ctx, offset, data) {
            f.note_write();
            Some(len)
        } else {
            None
        }
    }

    /// Writes `data` to `fh` at `offset`; returns the bytes written.
    pub async fn write(&self, fh: u64, offset: u64, data: &[u8]) -> FsResult<u32> {
        let f = self.file(fh)?;
        let len = u32::try_from(data.len()).map_err(|_| Failed::code(libc::EINVAL))?;
        f.file.write_at_in(self.context(), offset, data).await?;
        f.note_write();
        Ok(len)
    }

    /// The start of `close(2)` of a descriptor of handle `fh` of `ino` by `lock_owner`:
    /// `None` if nothing is left to do (a file only read, or written and flushed already,
    /// and no lock to release), answered on the reading thread.
    ///
    /// Written data must be visible to the next open anywhere (close-to-open) and write
    /// errors must reach the closing process, so buffered data goes out now; durability
    /// is fsync's business. Closing any descriptor of a file also drops the process's
    /// POSIX locks on it; the kernel leaves that to the mount when locks are remote.
    pub fn flush_at_once(&self, ino: u64, fh: u64, lock_owner: u64) -> Option<PendingFlush> {
        let may_hold_locks = self.locks.take(ino, lock_owner);
        if !may_hold_locks
            && let Some(f) = self.files.get(fh)
            && (!f.writable || f.file.nothing_to_flush())
        {
            return None;
        }
        Some(PendingFlush { may_hold_locks })
    }

    /// The rest of a flush [`Ops::flush_at_once`] did not finish.
    pub async fn flush(
        &self,
        ino: u64,
        fh: u64,
        lock_owner: u64,
        pending: PendingFlush,
    ) -> FsResult<()> {
        if pending.may_hold_locks {
            self.release_remote_locks(ino, lock_owner).await;
        }
        let f = self.file(fh)?;
        if f.writable {
            f.file.flush_in(self.context()).await?;
        }
        Ok(())
    }

    /// `fallocate(2)` of `length` bytes at `offset` through `fh` with `mode`.
    pub async fn fallocate(&self, fh: u64, offset: u64, length: u64, mode: i32) -> FsResult<()> {
        let f = self.file(fh)?;
        let end = offset
            .checked_add(length)
            .ok_or(Failed::code(libc::EFBIG))?;
        let kind = Falloc::of_mode(mode);
        if kind.is_ok_and(Falloc::reads_range) {
            // The range, as every handle of this mount sees the file.
            self.write_back_others(&f).await;
        }
        match kind? {
            Falloc::Grow => {}
            Falloc::KeepSize => return Ok(()),
            Falloc::Punch => return Ok(f.file.punch_in(self.context(), offset, length).await?),
            Falloc::ZeroGrow => f.file.punch_in(self.context(), offset, length).await?,
        }
        if end > f.file.size().await {
            f.file.truncate_in(self.context(), end).await?;
        }
        Ok(())
    }

    /// The next data (or hole, with `hole`) of `fh` at or after `offset` (ENXIO if none).
    pub async fn seek(&self, fh: u64, offset: u64, hole: bool) -> FsResult<i64> {
        let f = self.file(fh)?;
        self.write_back_others(&f).await;
        let found = f
            .file
            .seek_hole_or_data_in(self.context(), offset, hole)
            .await?;
        found
            .and_then(|at| i64::try_from(at).ok())
            .ok_or(Failed::code(libc::ENXIO))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fallocate_modes_are_sorted() {
        use libc::{FALLOC_FL_KEEP_SIZE as KEEP, FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE};
        assert_eq!(Falloc::of_mode(0), Ok(Falloc::Grow));
        assert_eq!(Falloc::of_mode(KEEP), Ok(Falloc::KeepSize));
        assert_eq!(
            Falloc::of_mode(FALLOC_FL_PUNCH_HOLE | KEEP),
            Ok(Falloc::Punch)
        );
        assert_eq!(
            Falloc::of_mode(FALLOC_FL_ZERO_RANGE | KEEP),
            Ok(Falloc::Punch)
        );
        assert_eq!(Falloc::of_mode(FALLOC_FL_ZERO_RANGE), Ok(Falloc::ZeroGrow));
        for unsupported in [FALLOC_FL_PUNCH_HOLE, libc::FALLOC_FL_COLLAPSE_RANGE] {
            assert_eq!(
                Falloc::of_mode(unsupported).map_err(Failed::errno),
                Err(libc::EOPNOTSUPP)
            );
        }
        assert!(!Falloc::Grow.reads_range() && !Falloc::KeepSize.reads_range());
        assert!(Falloc::Punch.reads_range() && Falloc::ZeroGrow.reads_range());
    }

    #[test]
    fn only_seek_data_and_seek_hole_from_a_real_offset_are_passed_on() {
        assert_eq!(seek_request(5, libc::SEEK_DATA), Ok((5, false)));
        assert_eq!(seek_request(0, libc::SEEK_HOLE), Ok((0, true)));
        assert_eq!(
            seek_request(5, libc::SEEK_SET).map_err(Failed::errno),
            Err(libc::EINVAL)
        );
        assert_eq!(
            seek_request(-1, libc::SEEK_HOLE).map_err(Failed::errno),
            Err(libc::ENXIO)
        );
        assert_eq!(
            seek_request(-1, libc::SEEK_END).map_err(Failed::errno),
            Err(libc::EINVAL),
            "whence is checked first"
        );
    }
}
