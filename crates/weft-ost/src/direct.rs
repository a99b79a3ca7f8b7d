//! Which I/O goes around the OST's page cache (`O_DIRECT`), and the buffers it needs.
//!
//! Large bulk I/O bypasses the page cache, as on a Lustre OSS (`readcache_max_io_mb`,
//! `writethrough_max_io_mb`): copying megabytes through the page cache is most of the CPU an
//! OST spends per byte, the clients cache what they read and write, and an OST without
//! dirty pages has nothing to lose or flush in bulk. Small I/O stays cached, so small
//! files and random readers keep the page cache's help.

use crate::fdcache::FdCache;
use crate::object::object_path;
use bytes::Bytes;
use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use weft_proto::ObjectId;
use weft_proto::frame::{BULK_ALIGN, aligned_vec};

/// Alignment of buffer, offset and length for `O_DIRECT`: the page size, which covers
/// every logical block size a data directory's device may have. Received bulk is aligned
/// so (`weft_proto::frame::aligned_vec`).
pub(crate) const DIRECT_ALIGN: usize = BULK_ALIGN;

/// `O_DIRECT` descriptors kept open per OST: direct I/O is large streaming I/O, on far fewer
/// objects at a time than the buffered descriptors' cache serves.
const DIRECT_FD_CAPACITY: usize = 256;

/// Whether `e` is what `O_DIRECT` answers for alignment it refuses (EINVAL); the buffered
/// path then does the I/O.
pub(crate) fn is_refusal(e: &io::Error) -> bool {
    rustix::io::Errno::from_io_error(e) == Some(rustix::io::Errno::INVAL)
}

/// One OST's direct I/O: which I/O goes direct, and the descriptors it uses.
pub(crate) struct DirectIo {
    fds: FdCache,
    /// False once the data directory's file system refused `O_DIRECT`.
    ok: AtomicBool,
    /// The sizes above which I/O goes direct (shared with the target, which sets them).
    limits: Arc<CacheLimits>,
}

impl DirectIo {
    pub(crate) fn new(limits: Arc<CacheLimits>) -> Self {
        Self {
            fds: FdCache::new(DIRECT_FD_CAPACITY),
            ok: AtomicBool::new(true),
            limits,
        }
    }

    /// The descriptor to write `data` at `offset` of object `id` with, if the write goes
    /// direct: more than `writethrough_max_io_mb`, buffer, offset and length aligned.
    pub(crate) fn for_write(
        &self,
        dir: &Path,
        id: &ObjectId,
        data: &[u8],
        offset: u64,
    ) -> Option<Arc<File>> {
        let direct = (data.as_ptr() as usize).is_multiple_of(DIRECT_ALIGN)
            && data.len().is_multiple_of(DIRECT_ALIGN)
            && offset.is_multiple_of(DIRECT_ALIGN as u64)
            && data.len() > self.limits.write_max_io();
        direct.then(|| self.file(dir, id)).flatten()
    }

    /// The descriptor to read `want` bytes at `offset` of object `id` with, if the read
    /// goes direct: more than `readcache_max_io_mb`, offset aligned.
    pub(crate) fn for_read(
        &self,
        dir: &Path,
        id: &ObjectId,
        offset: u64,
        want: usize,
    ) -> Option<Arc<File>> {
        let direct = offset.is_multiple_of(DIRECT_ALIGN as u64) && want > self.limits.read_max_io();
        direct.then(|| self.file(dir, id)).flatten()
    }

    /// Forgets the object's descriptor (it is being destroyed).
    pub(crate) fn forget(&self, id: &ObjectId) {
        self.fds.remove(id);
    }

    /// The object's `O_DIRECT` descriptor (cached), or `None` when the file system refuses
    /// `O_DIRECT`.
    fn file(&self, dir: &Path, id: &ObjectId) -> Option<Arc<File>> {
        if !self.ok.load(Ordering::Relaxed) {
            return None;
        }
        if let Some(f) = self.fds.get(id) {
            return Some(f);
        }
        use rustix::fs::{Mode, OFlags};
        match rustix::fs::open(
            object_path(dir, id),
            OFlags::RDWR | OFlags::DIRECT | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => {
                let f = Arc::new(File::from(fd));
                self.fds.insert(*id, Arc::clone(&f));
                Some(f)
            }
            Err(rustix::io::Errno::INVAL) => {
                tracing::warn!(dir = %dir.display(), "the data directory's file system refuses O_DIRECT; all I/O goes through the page cache");
                self.ok.store(false, Ordering::Relaxed);
                None
            }
            // Anything else (no descriptors left, say): the buffered path reports it.
            Err(_) => None,
        }
    }
}

/// Reads `want` bytes at the aligned `offset` of a file opened with `O_DIRECT` (fewer at its
/// end) into a page-aligned buffer: the device copies into it, the CPU does not.
pub(crate) fn read_direct(file: &File, offset: u64, want: usize) -> io::Result<Bytes> {
    // O_DIRECT reads whole blocks: ask for `want` rounded up, keep `want`.
    let padded = want.div_ceil(DIRECT_ALIGN) * DIRECT_ALIGN;
    let (mut buf, pad) = aligned_vec(padded);
    let end = pad + padded;
    while buf.len() < end {
        let at = offset + (buf.len() - pad) as u64;
        let room = end - buf.len();
        let n = match rustix::io::pread(file, &mut buf.spare_capacity_mut()[..room], at) {
            Ok((filled, _)) => filled.len(),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        };
        // SAFETY: `pread` initialized the first `n` bytes of the spare capacity (rustix
        // hands them back as the filled part), and `n <= room <= capacity - len`. No safe
        // API reads into a bounded part of a Vec's spare capacity: rustix's
        // `spare_capacity` offers all of it, and O_DIRECT needs the exact aligned length.
        unsafe { buf.set_len(buf.len() + n) };
        if n == 0 || n % DIRECT_ALIGN != 0 {
            break; // the end of the file
        }
    }
    let got = (buf.len() - pad).min(want);
    Ok(Bytes::from(buf).slice(pad..pad + got))
}

/// The I/O sizes above which reads and writes bypass the page cache, in MiB
/// (`obdfilter.*.readcache_max_io_mb`, `obdfilter.*.writethrough_max_io_mb`).
#[derive(Debug)]
pub struct CacheLimits {
    read_mb: AtomicU64,
    write_mb: AtomicU64,
}

/// Default of both limits: RPCs of more than 1 MiB (the client's 4 MiB RPCs of streaming
/// I/O) go direct; small files and random reads are cached.
pub const DEFAULT_MAX_IO_MB: u64 = 1;
/// The largest accepted limit: every bulk (at most 64 MiB) is then cached.
pub const MAX_MAX_IO_MB: u64 = 64;

impl Default for CacheLimits {
    fn default() -> Self {
        Self {
            read_mb: AtomicU64::new(DEFAULT_MAX_IO_MB),
            write_mb: AtomicU64::new(DEFAULT_MAX_IO_MB),
        }
    }
}

impl CacheLimits {
    /// The parameter names (`obdfilter.*.NAME`): the read limit's, then the write limit's.
    pub const NAMES: [&'static str; 2] = ["readcache_max_io_mb", "writethrough_max_io_mb"];

    /// Each limit with its parameter name.
    pub fn named(&self) -> [(&'static str, u64); 2] {
        let (read, write) = self.get();
        [(Self::NAMES[0], read), (Self::NAMES[1], write)]
    }

    /// Sets the limit called `name` (one of [`CacheLimits::NAMES`]).
    pub fn set_named(&self, name: &str, mb: u64) -> Result<(), String> {
        match Self::NAMES.iter().position(|n| *n == name) {
            Some(i) => self.set(i == 1, mb),
            None => Err(format!("no OST cache limit is called {name}")),
        }
    }

    /// Reads of more bytes than this bypass the page cache.
    pub(crate) fn read_max_io(&self) -> usize {
        (self.read_mb.load(Ordering::Relaxed) as usize) << 20
    }

    /// Writes of more bytes than this bypass the page cache.
    pub(crate) fn write_max_io(&self) -> usize {
        (self.write_mb.load(Ordering::Relaxed) as usize) << 20
    }

    /// `readcache_max_io_mb` and `writethrough_max_io_mb` as they are now.
    pub fn get(&self) -> (u64, u64) {
        (
            self.read_mb.load(Ordering::Relaxed),
            self.write_mb.load(Ordering::Relaxed),
        )
    }

    /// Sets `readcache_max_io_mb` (`write: false`) or `writethrough_max_io_mb`; values
    /// above [`MAX_MAX_IO_MB`] are refused.
    pub fn set(&self, write: bool, mb: u64) -> Result<(), String> {
        if mb > MAX_MAX_IO_MB {
            return Err(format!(
                "{mb} MiB is more than the largest bulk ({MAX_MAX_IO_MB} MiB)"
            ));
        }
        let slot = if write { &self.write_mb } else { &self.read_mb };
        slot.store(mb, Ordering::Relaxed);
        Ok(())
    }
}
