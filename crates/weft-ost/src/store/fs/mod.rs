//! The file-system store: each object a sparse file in a data directory
//! (`O/<hh>/<name>`, see [`crate::object_path`]), its data version in an extended attribute,
//! open descriptors in an LRU cache, large aligned I/O around the page cache.
//!
//! [`FsStore::open`] also owns the directory's lifecycle: the exclusive `flock` held while
//! it is served, reading the identity, and formatting an empty directory (`format.rs`).

mod chunk;
mod compressed;
mod format;
mod io;
mod list;
mod lz4;
mod meta;

pub use compressed::LZ4_XATTR;
#[cfg(test)]
pub(crate) use meta::format_reserve;
pub use meta::{DV_XATTR, RESERVE_FILE};

use crate::direct::{CacheLimits, DirectIo};
use crate::error::OstError;
use crate::fdcache::{DEFAULT_CAPACITY, FdCache};
use crate::identity::Identity;
use crate::object::{OBJECTS_DIR, object_path, subdir_of};
use crate::store::{ListPage, ObjectStat, ObjectStore, StoreCounters, StoreError, StoreResult};
use bytes::Bytes;
use lz4::Missing;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use weft_durable::sync_dir;
use weft_proto::ObjectId;
use weft_proto::mdt::StatFs;

/// Objects as files in one data directory, held exclusively while the store lives.
pub struct FsStore {
    dir: PathBuf,
    /// The data directory, open and `flock`ed for the store's lifetime.
    dir_fd: File,
    fds: FdCache,
    /// Which bulk I/O bypasses the page cache, and its descriptors.
    direct: DirectIo,
    direct_reads: AtomicU64,
    direct_writes: AtomicU64,
    /// Compression of new objects, and what compressed objects hold.
    lz4: lz4::Lz4State,
}

impl std::fmt::Debug for FsStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FsStore")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

/// `what` of an error about object `id`.
fn on(op: &str, id: &ObjectId) -> String {
    format!("{op} {id}")
}

impl FsStore {
    /// Opens the data directory `dir` of OST `index` of `fsname`, formatting it when it is
    /// empty (or does not exist); returns the store and the directory's identity. Bulk I/O
    /// above `limits` bypasses the page cache.
    ///
    /// A directory of another file system, kind or index is refused, and so is a non-empty
    /// directory without an identity, and one another store holds. Blocking.
    pub fn open(
        dir: &Path,
        fsname: &str,
        index: u32,
        limits: Arc<CacheLimits>,
    ) -> Result<(FsStore, Identity), OstError> {
        std::fs::create_dir_all(dir).map_err(|e| OstError::io(dir, e))?;
        let dir_fd = File::open(dir).map_err(|e| OstError::io(dir, e))?;
        // Held for the store's lifetime: two servers on one directory would hand out the
        // same data versions and race on every object.
        rustix::fs::flock(
            &dir_fd,
            rustix::fs::FlockOperation::NonBlockingLockExclusive,
        )
        .map_err(|e| {
            if e == rustix::io::Errno::WOULDBLOCK {
                OstError::Busy(dir.to_owned())
            } else {
                OstError::io(dir, e.into())
            }
        })?;
        let identity = match Identity::load(dir)? {
            Some(id) => {
                id.check(fsname, index)?;
                id
            }
            None => format::format(dir, fsname, index)?,
        };
        let objects = dir.join(OBJECTS_DIR);
        if !objects.is_dir() {
            return Err(OstError::Corrupt {
                path: objects,
                reason: "object directory is missing".into(),
            });
        }
        let store = FsStore {
            dir: dir.to_owned(),
            dir_fd,
            fds: FdCache::new(DEFAULT_CAPACITY),
            direct: DirectIo::new(limits),
            direct_reads: AtomicU64::new(0),
            direct_writes: AtomicU64::new(0),
            lz4: lz4::Lz4State::scan(dir).map_err(|e| OstError::io(&objects, e))?,
        };
        Ok((store, identity))
    }

    /// The data directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The object's file, if it exists (cached descriptors first).
    fn open_existing(&self, id: &ObjectId) -> StoreResult<Option<Arc<File>>> {
        if let Some(f) = self.fds.get(id) {
            return Ok(Some(f));
        }
        match OpenOptions::new()
            .read(true)
            .write(true)
            .open(object_path(&self.dir, id))
        {
            Ok(f) => {
                let f = Arc::new(f);
                self.fds.insert(*id, Arc::clone(&f));
                Ok(Some(f))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(StoreError::io(on("open", id), e)),
        }
    }

    /// The object's file; [`StoreError::NotFound`] when it has none.
    fn existing(&self, id: &ObjectId) -> StoreResult<Arc<File>> {
        self.open_existing(id)?.ok_or(StoreError::NotFound(*id))
    }

    /// The object's file, created if missing; `true` when this call created it.
    fn open_or_create(&self, id: &ObjectId) -> StoreResult<(Arc<File>, bool)> {
        if let Some(f) = self.fds.get(id) {
            return Ok((f, false));
        }
        let path = object_path(&self.dir, id);
        let (file, created) = match OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
        {
            Ok(f) => (f, true),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => (
                OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(&path)
                    .map_err(|e| StoreError::io(on("open", id), e))?,
                false,
            ),
            Err(e) => return Err(StoreError::io(on("create", id), e)),
        };
        let file = Arc::new(file);
        self.fds.insert(*id, Arc::clone(&file));
        Ok((file, created))
    }

    /// Makes the object's directory entry (its creation or removal) durable.
    fn sync_parent(&self, id: &ObjectId) -> StoreResult<()> {
        let path = object_path(&self.dir, id);
        match path.parent() {
            Some(parent) => {
                sync_dir(parent).map_err(|e| StoreError::io(on("fsync directory of", id), e))
            }
            None => Ok(()),
        }
    }

    fn stat_of(id: &ObjectId, file: &File) -> StoreResult<ObjectStat> {
        let meta = file
            .metadata()
            .map_err(|e| StoreError::io(on("stat", id), e))?;
        Ok(ObjectStat {
            size: meta.len(),
            blocks: meta.blocks(),
        })
    }
}

impl ObjectStore for FsStore {
    fn read(&self, id: &ObjectId, offset: u64, len: usize) -> StoreResult<Bytes> {
        let file = self.existing(id)?;
        let packed = self.read_compressed(id, &file, |c| c.read(offset, len));
        if let Some(data) = packed.map_err(|e| StoreError::io(on("read", id), e))? {
            return Ok(data);
        }
        let size = Self::stat_of(id, &file)?.size;
        // Never allocate more than the object can return: a 64 MiB read of a small object
        // costs what the object holds.
        let want = usize::try_from((len as u64).min(size.saturating_sub(offset))).unwrap_or(0);
        self.read_data(id, &file, offset, want)
            .map_err(|e| StoreError::io(on("read", id), e))
    }

    fn write(
        &self,
        id: &ObjectId,
        offset: u64,
        data: &Bytes,
        compress: Option<bool>,
    ) -> StoreResult<bool> {
        self.update(
            id,
            Missing::Create { compress },
            "write",
            |file| self.write_data(id, file, data, offset),
            |c| c.write(offset, data),
        )
    }

    fn set_size(&self, id: &ObjectId, size: u64, compress: Option<bool>) -> StoreResult<()> {
        self.update(
            id,
            Missing::Create { compress },
            "truncate",
            |file| file.set_len(size),
            |c| c.set_size(size),
        )
        .map(|_| ())
    }

    fn punch(&self, id: &ObjectId, offset: u64, len: u64) -> StoreResult<()> {
        let plain = |file: &File| {
            rustix::fs::fallocate(
                file,
                rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE,
                offset,
                len,
            )
            .map_err(std::io::Error::from)
        };
        self.update(id, Missing::Fail, "punch", plain, |c| c.punch(offset, len))
            .map(|_| ())
    }

    fn stat(&self, id: &ObjectId) -> StoreResult<ObjectStat> {
        let file = self.existing(id)?;
        let mut st = Self::stat_of(id, &file)?;
        if let Some(m) = compressed::meta(&file)
            .map_err(|e| StoreError::io(on("read logical size of", id), e))?
        {
            st.size = m.size;
        }
        Ok(st)
    }

    fn seek(&self, id: &ObjectId, offset: u64, hole: bool) -> StoreResult<Option<u64>> {
        let file = self.existing(id)?;
        let packed = self.read_compressed(id, &file, |c| c.seek(offset, hole));
        if let Some(found) = packed.map_err(|e| StoreError::io(on("seek", id), e))? {
            return Ok(found);
        }
        let whence = if hole {
            rustix::fs::SeekFrom::Hole(offset)
        } else {
            rustix::fs::SeekFrom::Data(offset)
        };
        // The descriptor is shared, but every other use of it is positional (pread,
        // pwrite), so moving its offset here disturbs nothing.
        match rustix::fs::seek(&*file, whence) {
            Ok(found) => Ok(Some(found)),
            // At or past the end.
            Err(rustix::io::Errno::NXIO) => Ok(None),
            Err(e) => Err(StoreError::io(on("seek", id), e.into())),
        }
    }

    fn version(&self, id: &ObjectId) -> StoreResult<Option<u64>> {
        meta::get_xattr(&*self.existing(id)?)
            .map_err(|e| StoreError::io(on("read data version of", id), e))
    }

    fn set_version(&self, id: &ObjectId, version: u64) -> StoreResult<()> {
        meta::set_xattr(&*self.existing(id)?, version)
            .map_err(|e| StoreError::io(on("store data version of", id), e))
    }

    fn remove(&self, id: &ObjectId) -> StoreResult<bool> {
        // The caller holds the object exclusively: no descriptor of the file we unlink is
        // in use or handed out again.
        if let Some(file) = self.open_existing(id)? {
            self.forget_compressed(&file)
                .map_err(|e| StoreError::io(on("count out", id), e))?;
        }
        self.fds.remove(id);
        self.direct.forget(id);
        match std::fs::remove_file(object_path(&self.dir, id)) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(StoreError::io(on("remove", id), e)),
        }
    }

    fn sync_removed(&self, ids: &[ObjectId]) -> StoreResult<()> {
        // One directory sync per object directory touched, not one per object.
        let mut dirs = std::collections::BTreeMap::new();
        for id in ids {
            dirs.entry(subdir_of(id)).or_insert(*id);
        }
        let mut first_error = None;
        for id in dirs.values() {
            if let Err(e) = self.sync_parent(id) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    fn sync_data(&self, id: &ObjectId, created: bool) -> StoreResult<()> {
        let file = self.existing(id)?;
        // A compressed object's size is an attribute: fdatasync may not write it.
        let size_in_xattr = compressed::meta(&file)
            .map_err(|e| StoreError::io(on("read logical size of", id), e))?
            .is_some();
        if size_in_xattr {
            file.sync_all()
        } else {
            file.sync_data()
        }
        .map_err(|e| StoreError::io(on("fdatasync", id), e))?;
        if created {
            self.sync_parent(id)?;
        }
        Ok(())
    }

    fn sync_object(&self, id: &ObjectId) -> StoreResult<()> {
        self.existing(id)?
            .sync_all()
            .map_err(|e| StoreError::io(on("fsync", id), e))?;
        self.sync_parent(id)
    }

    fn sync_all(&self) -> StoreResult<()> {
        rustix::fs::syncfs(&self.dir_fd).map_err(|e| StoreError::io("syncfs", e.into()))
    }

    fn list(&self, after: Option<&ObjectId>, max: usize) -> StoreResult<ListPage> {
        list::list_page(&self.dir, after.copied(), max)
    }

    fn statfs(&self) -> StoreResult<StatFs> {
        let st =
            rustix::fs::fstatvfs(&self.dir_fd).map_err(|e| StoreError::io("statvfs", e.into()))?;
        Ok(StatFs {
            bsize: u32::try_from(st.f_frsize).unwrap_or(u32::MAX),
            blocks: st.f_blocks,
            bfree: st.f_bfree,
            bavail: st.f_bavail,
            files: st.f_files,
            ffree: st.f_ffree,
            namelen: u32::try_from(st.f_namemax).unwrap_or(u32::MAX),
        })
    }

    fn version_reserve(&self) -> StoreResult<u64> {
        meta::load_reserve(&self.dir)
    }

    fn set_version_reserve(&self, end: u64) -> StoreResult<()> {
        meta::store_reserve(&self.dir, end)
    }

    fn counters(&self) -> StoreCounters {
        StoreCounters {
            direct_reads: self.direct_reads.load(Ordering::Relaxed),
            direct_writes: self.direct_writes.load(Ordering::Relaxed),
            compressed_logical: self.lz4.logical.load(Ordering::Relaxed).max(0) as u64,
            compressed_stored: self.lz4.stored.load(Ordering::Relaxed).max(0) as u64,
        }
    }

    fn set_compress(&self, on: bool) -> bool {
        self.lz4.enabled.store(on, Ordering::Relaxed);
        true
    }

    fn compress(&self) -> bool {
        self.lz4.enabled.load(Ordering::Relaxed)
    }
}
