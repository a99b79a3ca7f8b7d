//! The object storage target: opening (and formatting) a data directory, and the object
//! operations. Every disk access runs on tokio's blocking pool, never on a reactor thread.

use crate::brw::{BrwStats, OstStats};
use crate::dataversion::{self, DataVersions, RESERVE_FILE};
use crate::direct::{CacheLimits, DirectIo, EINVAL, read_direct};
use crate::error::{OstError, io_to_wire};
use crate::fdcache::{DEFAULT_CAPACITY, FdCache};
use crate::grant::Grants;
use crate::identity::{FORMAT_VERSION, Identity, KIND_OST, validate_fsname};
use crate::object::{OBJECTS_DIR, SUBDIRS, object_hash, object_path, subdir_name, subdir_of};
use bytes::Bytes;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use uuid::Uuid;
use weft_durable::{TMP_SUFFIX, sync_dir};
use weft_proto::frame::MAX_BULK;
use weft_proto::mdt::StatFs;
use weft_proto::ost::{MAX_DESTROY_BATCH, ObjectAttr, OstReply, OstRequest};
use weft_proto::{Errno, ObjectId, TargetId, WireError, WireResult};

/// Largest object size (16 TiB): writes and punches beyond it fail with EFBIG. ext4 with
/// 4 KiB blocks stops a little below this; the kernel's EFBIG is passed through as is.
pub const MAX_OBJECT_SIZE: u64 = 16 << 40;
/// Largest target index (Lustre's limit: four hex digits in `OST001f`).
pub const MAX_TARGET_INDEX: u32 = 0xffff;
/// Free space kept back from writes: 0.5% of the device, at most 1 GiB, so that the target
/// never fills up to the last block (which ext4 and its journal handle badly).
const RESERVE_PERMILLE: u64 = 5;
const RESERVE_MAX: u64 = 1 << 30;
/// Leftover of the xattr probe of an interrupted format.
const PROBE_FILE: &str = ".xattr_probe";

/// What [`Ost::open`] needs to know.
#[derive(Debug, Clone)]
pub struct OstOptions {
    /// The OST's index in the file system.
    pub index: u32,
    /// The file system it belongs to.
    pub fsname: String,
}

/// Serialises what must not interleave on one object: destroy against everything else
/// (`lifecycle`), and handing out plus storing a data version (`version`), so an object's
/// version only ever increases. Locks are striped over 256 slots by object hash.
#[derive(Default)]
struct ObjectLock {
    lifecycle: RwLock<()>,
    version: Mutex<()>,
}

/// An object storage target serving one data directory.
/// The connection id of requests made in-process (no grant of their own).
pub const LOCAL: u64 = 0;

/// One object storage target.
pub struct Ost {
    dir: PathBuf,
    dir_fd: File,
    identity: Identity,
    versions: DataVersions,
    fds: FdCache,
    /// Which bulk I/O bypasses the page cache, and its descriptors (see [`Ost::write_data`]).
    direct: DirectIo,
    locks: [ObjectLock; 256],
    stats: BrwStats,
    grants: Grants,
}

impl std::fmt::Debug for Ost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ost")
            .field("dir", &self.dir)
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

fn wire_io(what: impl std::fmt::Display) -> impl FnOnce(io::Error) -> WireError {
    move |e| io_to_wire(&what.to_string(), e)
}

impl Ost {
    /// Opens the OST in `dir`, formatting it when it is empty (or does not exist).
    ///
    /// A directory of another file system, kind or index is refused, and so is a non-empty
    /// directory without an identity. This does blocking I/O: call it before serving, or
    /// from `spawn_blocking`.
    pub fn open(dir: &Path, opts: OstOptions) -> Result<Arc<Ost>, OstError> {
        validate_fsname(&opts.fsname)?;
        if opts.index > MAX_TARGET_INDEX {
            return Err(OstError::InvalidIndex(opts.index));
        }
        std::fs::create_dir_all(dir).map_err(|e| OstError::io(dir, e))?;
        let dir_fd = File::open(dir).map_err(|e| OstError::io(dir, e))?;
        // Held for the target's lifetime: two servers on one directory would hand out the
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
                id.check(&opts.fsname, opts.index)?;
                id
            }
            None => format(dir, &opts)?,
        };
        let objects = dir.join(OBJECTS_DIR);
        if !objects.is_dir() {
            return Err(OstError::Corrupt {
                path: objects,
                reason: "object directory is missing".into(),
            });
        }
        let versions = DataVersions::open(dir)?;
        tracing::info!(dir = %dir.display(), fsname = %identity.fsname, index = identity.index, uuid = %identity.uuid, "OST opened");
        Ok(Arc::new(Ost {
            dir: dir.to_owned(),
            dir_fd,
            identity,
            versions,
            fds: FdCache::new(DEFAULT_CAPACITY),
            direct: DirectIo::new(),
            locks: std::array::from_fn(|_| ObjectLock::default()),
            stats: BrwStats::default(),
            grants: Grants::default(),
        }))
    }

    /// The I/O sizes above which bulk bypasses the page cache (run-time parameters).
    pub fn cache_limits(&self) -> &CacheLimits {
        self.direct.limits()
    }

    /// The UUID fixed when the target was formatted.
    pub fn uuid(&self) -> Uuid {
        self.identity.uuid
    }

    /// The OST's index.
    pub fn index(&self) -> u32 {
        self.identity.index
    }

    /// The target id (`OSTxxxx`).
    pub fn target_id(&self) -> TargetId {
        TargetId::ost(self.identity.index)
    }

    /// The file system the target belongs to.
    pub fn fsname(&self) -> &str {
        &self.identity.fsname
    }

    /// The data directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Bulk I/O statistics: bytes read and written and the I/O size histogram.
    pub fn stats(&self) -> OstStats {
        self.stats.snapshot()
    }

    /// Serves one request; `bulk` is the request's bulk (write data), the returned bytes
    /// the reply's bulk (read data).
    pub async fn execute(
        self: &Arc<Self>,
        request: OstRequest,
        bulk: Bytes,
    ) -> WireResult<(OstReply, Bytes)> {
        self.execute_from(LOCAL, request, bulk).await
    }

    /// Handles one request from connection `conn` (whose grant writes use and grants add to).
    pub async fn execute_from(
        self: &Arc<Self>,
        conn: u64,
        request: OstRequest,
        bulk: Bytes,
    ) -> WireResult<(OstReply, Bytes)> {
        if !bulk.is_empty() && !matches!(request, OstRequest::Write { .. }) {
            return Err(WireError::new(
                Errno::Proto,
                format!("unexpected bulk of {} bytes", bulk.len()),
            ));
        }
        match request {
            OstRequest::Read {
                object,
                offset,
                len,
            } => {
                let (attr, data) = self.read(object, offset, len).await?;
                Ok((OstReply::Data { attr }, data))
            }
            OstRequest::Write {
                object,
                offset,
                sync,
            } => Ok((
                OstReply::Attr(self.write_from(conn, object, offset, bulk, sync).await?),
                Bytes::new(),
            )),
            OstRequest::Punch { object, size } => Ok((
                OstReply::Attr(self.punch(object, size).await?),
                Bytes::new(),
            )),
            OstRequest::Destroy { object } => {
                self.destroy(object).await?;
                Ok((OstReply::Ok, Bytes::new()))
            }
            OstRequest::DestroyMany { objects } => {
                self.destroy_many(objects).await?;
                Ok((OstReply::Ok, Bytes::new()))
            }
            OstRequest::GetAttr { object } => {
                Ok((OstReply::Attr(self.getattr(object).await?), Bytes::new()))
            }
            OstRequest::StatFs => Ok((OstReply::StatFs(self.statfs().await?), Bytes::new())),
            OstRequest::Sync { object } => {
                self.sync(object).await?;
                Ok((OstReply::Ok, Bytes::new()))
            }
            OstRequest::Grant { want } => {
                let free = self.blocking(|ost| ost.free_beyond_reserve()).await?;
                let bytes = self.grants.grant(conn, want, free);
                Ok((OstReply::Granted { bytes }, Bytes::new()))
            }
            OstRequest::ListObjects { after, max } => {
                let (objects, next) = self.list_objects(after, max).await?;
                Ok((OstReply::Objects { objects, next }, Bytes::new()))
            }
            OstRequest::PunchRange {
                object,
                offset,
                len,
            } => Ok((
                OstReply::Attr(self.punch_range(object, offset, len).await?),
                Bytes::new(),
            )),
            OstRequest::Seek {
                object,
                offset,
                hole,
            } => Ok((
                OstReply::Offset(self.seek(object, offset, hole).await?),
                Bytes::new(),
            )),
        }
    }

    /// Reads up to `len` bytes at `offset`: fewer at the object's end, holes as zeros, and
    /// nothing (with `exists: false`) from a missing object.
    ///
    /// The returned data version is sampled before the data is read, so data is never
    /// labelled with a version newer than itself: a cache keyed by it stays safe.
    pub async fn read(
        self: &Arc<Self>,
        object: ObjectId,
        offset: u64,
        len: u32,
    ) -> WireResult<(ObjectAttr, Bytes)> {
        self.blocking(move |ost| ost.read_blocking(&object, offset, len))
            .await
    }

    /// Writes `data` at `offset`, creating the object if needed; with `sync` the data is
    /// durable before this returns.
    pub async fn write(
        self: &Arc<Self>,
        object: ObjectId,
        offset: u64,
        data: Bytes,
        sync: bool,
    ) -> WireResult<ObjectAttr> {
        self.write_from(LOCAL, object, offset, data, sync).await
    }

    /// [`Ost::write`] on behalf of connection `conn`: the write may use the connection's
    /// grant, and uses it up.
    pub async fn write_from(
        self: &Arc<Self>,
        conn: u64,
        object: ObjectId,
        offset: u64,
        data: Bytes,
        sync: bool,
    ) -> WireResult<ObjectAttr> {
        self.blocking(move |ost| ost.write_blocking(conn, &object, offset, &data, sync))
            .await
    }

    /// Returns a connection's grant to the pool (the connection closed).
    pub fn release_grants(&self, conn: u64) {
        self.grants.release(conn);
    }

    /// Bytes granted to every connection.
    pub fn granted(&self) -> u64 {
        self.grants.total()
    }

    /// Sets the object's size, creating it if missing.
    pub async fn punch(self: &Arc<Self>, object: ObjectId, size: u64) -> WireResult<ObjectAttr> {
        self.blocking(move |ost| ost.punch_blocking(&object, size))
            .await
    }

    /// Deallocates `[offset, offset + len)` of the object, keeping its size, so the range
    /// reads as zeros and its blocks are free again. A missing object stays missing.
    pub async fn punch_range(
        self: &Arc<Self>,
        object: ObjectId,
        offset: u64,
        len: u64,
    ) -> WireResult<ObjectAttr> {
        self.blocking(move |ost| ost.punch_range_blocking(&object, offset, len))
            .await
    }

    /// Where the object's next data (or hole, with `hole`) at or after `offset` starts:
    /// `None` for data past the last; the object's end counts as a hole.
    pub async fn seek(
        self: &Arc<Self>,
        object: ObjectId,
        offset: u64,
        hole: bool,
    ) -> WireResult<Option<u64>> {
        self.blocking(move |ost| ost.seek_blocking(&object, offset, hole))
            .await
    }

    /// Removes the object durably; a missing object is not an error.
    pub async fn destroy(self: &Arc<Self>, object: ObjectId) -> WireResult<()> {
        self.destroy_many(vec![object]).await
    }

    /// Removes the objects (missing ones are fine), then makes the removals durable with
    /// one directory sync per object directory touched, not one per object. At most
    /// [`MAX_DESTROY_BATCH`] objects.
    pub async fn destroy_many(self: &Arc<Self>, objects: Vec<ObjectId>) -> WireResult<()> {
        if objects.len() > MAX_DESTROY_BATCH {
            return Err(WireError::new(
                Errno::Inval,
                format!(
                    "{} objects to destroy in one request; at most {MAX_DESTROY_BATCH}",
                    objects.len()
                ),
            ));
        }
        self.blocking(move |ost| ost.destroy_many_blocking(&objects))
            .await
    }

    /// The object's size, blocks and data version (`exists: false` when missing).
    pub async fn getattr(self: &Arc<Self>, object: ObjectId) -> WireResult<ObjectAttr> {
        self.blocking(move |ost| ost.getattr_blocking(&object))
            .await
    }

    /// Usage of the device holding the data directory.
    pub async fn statfs(self: &Arc<Self>) -> WireResult<StatFs> {
        self.blocking(|ost| ost.statfs_blocking()).await
    }

    /// Makes one object durable, or with `None` everything on the target's file system.
    pub async fn sync(self: &Arc<Self>, object: Option<ObjectId>) -> WireResult<()> {
        self.blocking(move |ost| match object {
            Some(id) => ost.sync_object_blocking(&id),
            None => rustix::fs::syncfs(&ost.dir_fd).map_err(|e| io_to_wire("syncfs", e.into())),
        })
        .await
    }

    /// One page of the objects the target holds, with their sizes: up to `max` (at most
    /// [`weft_proto::ost::MAX_LIST_OBJECTS`]; 0 is EINVAL) after the cursor `after`, and
    /// the cursor of the next page (`None` after the last). Order: by hashed subdirectory,
    /// then object id (see `list.rs`); stable, so paging lists every object that stays
    /// present exactly once.
    pub async fn list_objects(
        self: &Arc<Self>,
        after: Option<ObjectId>,
        max: u32,
    ) -> WireResult<(Vec<(ObjectId, u64)>, Option<ObjectId>)> {
        let page = self
            .blocking(move |ost| crate::list::list_page(&ost.dir, after, max))
            .await?;
        self.stats.record_listed(page.0.len() as u64);
        Ok(page)
    }

    async fn blocking<T, F>(self: &Arc<Self>, f: F) -> WireResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Ost) -> WireResult<T> + Send + 'static,
    {
        let ost = Arc::clone(self);
        tokio::task::spawn_blocking(move || f(&ost))
            .await
            .map_err(|e| WireError::new(Errno::Io, format!("OST I/O task failed: {e}")))?
    }

    fn lock_of(&self, id: &ObjectId) -> &ObjectLock {
        &self.locks[(object_hash(id) & 0xff) as usize]
    }

    fn read_blocking(
        &self,
        id: &ObjectId,
        offset: u64,
        len: u32,
    ) -> WireResult<(ObjectAttr, Bytes)> {
        if len > MAX_BULK {
            return Err(WireError::new(
                Errno::Inval,
                format!("read of {len} bytes exceeds the bulk limit {MAX_BULK}"),
            ));
        }
        let lock = self.lock_of(id);
        let _life = lock.lifecycle.read().unwrap_or_else(|e| e.into_inner());
        let Some(file) = self.open_existing(id)? else {
            return Ok((ObjectAttr::default(), Bytes::new()));
        };
        let data_version = self.version_of(id, &file)?;
        let size = file
            .metadata()
            .map_err(wire_io(format!("stat {id}")))?
            .len();
        // Never allocate more than the object can return: a 64 MiB read of a small object
        // costs what the object holds.
        let want = usize::try_from(u64::from(len).min(size.saturating_sub(offset))).unwrap_or(0);
        let buf = self.read_data(id, &file, offset, want)?;
        let meta = file.metadata().map_err(wire_io(format!("stat {id}")))?;
        self.stats.record_read(buf.len() as u64);
        Ok((
            ObjectAttr {
                exists: true,
                size: meta.len(),
                blocks: meta.blocks(),
                data_version,
            },
            buf,
        ))
    }

    fn write_blocking(
        &self,
        conn: u64,
        id: &ObjectId,
        offset: u64,
        data: &[u8],
        sync: bool,
    ) -> WireResult<ObjectAttr> {
        let len = data.len() as u64;
        check_end(offset, len)?;
        self.check_space(conn, len)?;
        let lock = self.lock_of(id);
        let _life = lock.lifecycle.read().unwrap_or_else(|e| e.into_inner());
        let (file, created) = self.open_or_create(id)?;
        let written = self.write_data(id, &file, data, offset);
        // Even a failed write may have changed some bytes: the version moves either way.
        let version = self.bump_version(id, &file);
        written.map_err(wire_io(format!("write {id}")))?;
        let data_version = version?;
        if sync {
            file.sync_data()
                .map_err(wire_io(format!("fdatasync {id}")))?;
            if created {
                self.sync_parent(id)?;
            }
        }
        let meta = file.metadata().map_err(wire_io(format!("stat {id}")))?;
        self.stats.record_write(len);
        self.grants.consume(conn, len);
        Ok(ObjectAttr {
            exists: true,
            size: meta.len(),
            blocks: meta.blocks(),
            data_version,
        })
    }

    fn punch_blocking(&self, id: &ObjectId, size: u64) -> WireResult<ObjectAttr> {
        if size > MAX_OBJECT_SIZE {
            return Err(WireError::new(
                Errno::FBig,
                format!("size {size} exceeds the object limit {MAX_OBJECT_SIZE}"),
            ));
        }
        let lock = self.lock_of(id);
        let _life = lock.lifecycle.read().unwrap_or_else(|e| e.into_inner());
        let (file, _) = self.open_or_create(id)?;
        let punched = file.set_len(size);
        let version = self.bump_version(id, &file);
        punched.map_err(wire_io(format!("truncate {id}")))?;
        let data_version = version?;
        let meta = file.metadata().map_err(wire_io(format!("stat {id}")))?;
        Ok(ObjectAttr {
            exists: true,
            size: meta.len(),
            blocks: meta.blocks(),
            data_version,
        })
    }

    fn punch_range_blocking(&self, id: &ObjectId, offset: u64, len: u64) -> WireResult<ObjectAttr> {
        let end = offset.checked_add(len).ok_or_else(|| {
            WireError::new(
                Errno::Inval,
                format!("range of {len} bytes at {offset} overflows"),
            )
        })?;
        // Nothing lies past the largest object: punching there is punching nothing.
        let end = end.min(MAX_OBJECT_SIZE);
        let lock = self.lock_of(id);
        let _life = lock.lifecycle.read().unwrap_or_else(|e| e.into_inner());
        let Some(file) = self.open_existing(id)? else {
            return Ok(ObjectAttr::default());
        };
        if offset < end {
            let punched = rustix::fs::fallocate(
                &*file,
                rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE,
                offset,
                end - offset,
            );
            // Bumped whatever the punch did: part of the range may be gone already.
            let version = self.bump_version(id, &file);
            punched.map_err(|e| io_to_wire(&format!("punch {id}"), e.into()))?;
            version?;
        }
        self.getattr_of(id, &file)
    }

    fn seek_blocking(&self, id: &ObjectId, offset: u64, hole: bool) -> WireResult<Option<u64>> {
        let lock = self.lock_of(id);
        let _life = lock.lifecycle.read().unwrap_or_else(|e| e.into_inner());
        let Some(file) = self.open_existing(id)? else {
            return Ok(hole.then_some(offset));
        };
        let whence = if hole {
            rustix::fs::SeekFrom::Hole(offset)
        } else {
            rustix::fs::SeekFrom::Data(offset)
        };
        // The descriptor is shared, but every other use of it is positional (pread,
        // pwrite), so moving its offset here disturbs nothing.
        match rustix::fs::seek(&*file, whence) {
            Ok(found) => Ok(Some(found)),
            // At or past the end: no more data, and the end itself is the hole.
            Err(rustix::io::Errno::NXIO) => Ok(hole.then_some(offset)),
            Err(e) => Err(io_to_wire(&format!("seek {id}"), e.into())),
        }
    }

    fn destroy_many_blocking(&self, ids: &[ObjectId]) -> WireResult<()> {
        // Every object is tried and every directory touched synced, whatever fails: the
        // MDT sends the whole batch again, and what is done stays done.
        let mut first_error = None;
        let mut dirs = std::collections::BTreeMap::new();
        for id in ids {
            match self.remove_object(id) {
                Ok(true) => {
                    dirs.entry(subdir_of(id)).or_insert(*id);
                }
                Ok(false) => {}
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        for id in dirs.values() {
            if let Err(e) = self.sync_parent(id) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Unlinks the object's file (not durably: see [`Ost::sync_parent`]); false if there
    /// was none.
    fn remove_object(&self, id: &ObjectId) -> WireResult<bool> {
        let lock = self.lock_of(id);
        // Exclusive: no operation may hold (or cache) a descriptor of the file we unlink.
        let _life = lock.lifecycle.write().unwrap_or_else(|e| e.into_inner());
        self.fds.remove(id);
        self.direct.forget(id);
        match std::fs::remove_file(object_path(&self.dir, id)) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(io_to_wire(&format!("remove {id}"), e)),
        }
    }

    fn getattr_blocking(&self, id: &ObjectId) -> WireResult<ObjectAttr> {
        let lock = self.lock_of(id);
        let _life = lock.lifecycle.read().unwrap_or_else(|e| e.into_inner());
        let Some(file) = self.open_existing(id)? else {
            return Ok(ObjectAttr::default());
        };
        self.getattr_of(id, &file)
    }

    /// The attributes of the object open as `file`.
    fn getattr_of(&self, id: &ObjectId, file: &File) -> WireResult<ObjectAttr> {
        let data_version = self.version_of(id, file)?;
        let meta = file.metadata().map_err(wire_io(format!("stat {id}")))?;
        Ok(ObjectAttr {
            exists: true,
            size: meta.len(),
            blocks: meta.blocks(),
            data_version,
        })
    }

    fn statfs_blocking(&self) -> WireResult<StatFs> {
        let st = rustix::fs::fstatvfs(&self.dir_fd).map_err(|e| io_to_wire("statvfs", e.into()))?;
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

    fn sync_object_blocking(&self, id: &ObjectId) -> WireResult<()> {
        let lock = self.lock_of(id);
        let _life = lock.lifecycle.read().unwrap_or_else(|e| e.into_inner());
        let Some(file) = self.open_existing(id)? else {
            return Ok(());
        };
        file.sync_all().map_err(wire_io(format!("fsync {id}")))?;
        self.sync_parent(id)
    }

    /// Refuses a write that would eat into the reserve of the device.
    /// Free bytes beyond the reserve kept for the file system itself.
    fn free_beyond_reserve(&self) -> WireResult<u64> {
        let st = rustix::fs::fstatvfs(&self.dir_fd).map_err(|e| io_to_wire("statvfs", e.into()))?;
        let unit = st.f_frsize.max(1);
        let (avail, total) = (
            st.f_bavail.saturating_mul(unit),
            st.f_blocks.saturating_mul(unit),
        );
        Ok(avail.saturating_sub(reserve_of(total)))
    }

    /// Admits a write of `len` bytes from `conn`: its grant plus the space nobody holds.
    fn check_space(&self, conn: u64, len: u64) -> WireResult<()> {
        if len == 0 {
            return Ok(());
        }
        let free = self.free_beyond_reserve()?;
        if self.grants.admits(conn, len, free) {
            Ok(())
        } else {
            Err(WireError::new(
                Errno::NoSpc,
                format!(
                    "{}: write of {len} bytes does not fit in {free} bytes free ({} promised to clients)",
                    self.target_id(),
                    self.grants.total()
                ),
            ))
        }
    }

    fn sync_parent(&self, id: &ObjectId) -> WireResult<()> {
        let path = object_path(&self.dir, id);
        match path.parent() {
            Some(parent) => sync_dir(parent).map_err(wire_io(format!("fsync directory of {id}"))),
            None => Ok(()),
        }
    }

    /// Writes `data` at `offset` of the object. A write larger than
    /// `writethrough_max_io_mb` whose buffer, offset and length are aligned goes around the
    /// page cache (`O_DIRECT`), as a Lustre OSS writes large bulk straight to disk: the copy
    /// into the page cache is most of the CPU an OST spends on a write, the client keeps its
    /// own cache, and the OST holds no dirty data. Smaller writes, and every write on a file
    /// system that refuses `O_DIRECT`, are buffered. The kernel keeps the two kinds
    /// coherent (a direct write flushes and drops cached pages of its range). Durability is
    /// unchanged: `O_DIRECT` does not flush the device, so a sync still calls `fdatasync`.
    fn write_data(&self, id: &ObjectId, file: &File, data: &[u8], offset: u64) -> io::Result<()> {
        if let Some(direct) = self.direct.for_write(&self.dir, id, data, offset) {
            match direct.write_all_at(data, offset) {
                Ok(()) => {
                    self.stats.record_direct(true);
                    return Ok(());
                }
                // Refused (alignment the device wants): the buffered write below writes
                // the whole range again, whatever part the direct one wrote.
                Err(e) if e.raw_os_error() == Some(EINVAL) => {
                    tracing::debug!(object = %id, "O_DIRECT write refused; buffered");
                }
                Err(e) => return Err(e),
            }
        }
        file.write_all_at(data, offset)
    }

    /// Reads `want` bytes at `offset` of the object (fewer at its end). A read larger than
    /// `readcache_max_io_mb` at an aligned offset goes around the page cache into a
    /// page-aligned buffer (see [`Ost::write_data`]); smaller reads are cached, so small
    /// files and random readers keep the OST's page cache.
    fn read_data(&self, id: &ObjectId, file: &File, offset: u64, want: usize) -> WireResult<Bytes> {
        if let Some(direct) = self.direct.for_read(&self.dir, id, offset, want) {
            match read_direct(&direct, offset, want) {
                Ok(b) => {
                    self.stats.record_direct(false);
                    return Ok(b);
                }
                Err(e) if e.raw_os_error() == Some(EINVAL) => {
                    tracing::debug!(object = %id, "O_DIRECT read refused; buffered");
                }
                Err(e) => return Err(io_to_wire(&format!("read {id}"), e)),
            }
        }
        // Read into the buffer's spare capacity: zero-filling megabytes first would cost
        // as much as the read's own copy.
        let mut buf: Vec<u8> = Vec::with_capacity(want);
        while buf.len() < want {
            let at = offset + buf.len() as u64;
            let spare = rustix::buffer::spare_capacity(&mut buf);
            match rustix::io::pread(file, spare, at) {
                Ok(0) => break, // truncated under us: return what there is
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(io_to_wire(&format!("read {id}"), e.into())),
            }
        }
        Ok(Bytes::from(buf))
    }

    fn open_existing(&self, id: &ObjectId) -> WireResult<Option<Arc<File>>> {
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
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_to_wire(&format!("open {id}"), e)),
        }
    }

    /// The object's file, created if missing; `true` when this call created it.
    fn open_or_create(&self, id: &ObjectId) -> WireResult<(Arc<File>, bool)> {
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
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => (
                OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(&path)
                    .map_err(wire_io(format!("open {id}")))?,
                false,
            ),
            Err(e) => return Err(io_to_wire(&format!("create {id}"), e)),
        };
        let file = Arc::new(file);
        self.fds.insert(*id, Arc::clone(&file));
        Ok((file, created))
    }

    /// The object's current data version; one given before this start is replaced by a
    /// fresh one (see [`crate::dataversion`]).
    fn version_of(&self, id: &ObjectId, file: &File) -> WireResult<u64> {
        let read = |f: &File| {
            dataversion::get_xattr(f).map_err(wire_io(format!("read data version of {id}")))
        };
        if let Some(v) = read(file)?.filter(|v| self.versions.is_current(*v)) {
            return Ok(v);
        }
        let _g = self
            .lock_of(id)
            .version
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        // Another request may have refreshed it while we waited.
        if let Some(v) = read(file)?.filter(|v| self.versions.is_current(*v)) {
            return Ok(v);
        }
        self.assign_version(id, file)
    }

    /// Gives the object a new data version after a change.
    fn bump_version(&self, id: &ObjectId, file: &File) -> WireResult<u64> {
        let _g = self
            .lock_of(id)
            .version
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        self.assign_version(id, file)
    }

    fn assign_version(&self, id: &ObjectId, file: &File) -> WireResult<u64> {
        let v = self
            .versions
            .next()
            .map_err(wire_io("data version reservation"))?;
        dataversion::set_xattr(file, v).map_err(wire_io(format!("store data version of {id}")))?;
        Ok(v)
    }
}

/// Checks that `[offset, offset + len)` stays within the largest object.
fn check_end(offset: u64, len: u64) -> WireResult<u64> {
    offset
        .checked_add(len)
        .filter(|end| *end <= MAX_OBJECT_SIZE)
        .ok_or_else(|| {
            WireError::new(
                Errno::FBig,
                format!(
                    "write of {len} bytes at {offset} exceeds the object limit {MAX_OBJECT_SIZE}"
                ),
            )
        })
}

/// Whether `len` bytes fit in `avail` while keeping the reserve of a `total`-byte device.
/// Conservative: an overwrite of allocated blocks is counted as if it needed new ones.
/// Space kept back from clients on a device of `total` bytes.
fn reserve_of(total: u64) -> u64 {
    (total / 1000 * RESERVE_PERMILLE).min(RESERVE_MAX)
}

/// Whether `len` bytes fit in `avail` bytes of a `total`-byte device, beyond the reserve.
#[cfg(test)]
fn fits(len: u64, avail: u64, total: u64) -> bool {
    avail.saturating_sub(reserve_of(total)) >= len
}

/// Formats an empty directory: object subdirectories, version reservation, and the
/// identity last, so that its presence means the format completed.
fn format(dir: &Path, opts: &OstOptions) -> Result<Identity, OstError> {
    let objects = dir.join(OBJECTS_DIR);
    // Only what an interrupted format leaves behind may be there.
    for entry in std::fs::read_dir(dir).map_err(|e| OstError::io(dir, e))? {
        let entry = entry.map_err(|e| OstError::io(dir, e))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let leftover = name == OBJECTS_DIR
            || name == RESERVE_FILE
            || name == PROBE_FILE
            || name.ends_with(TMP_SUFFIX);
        if !leftover {
            return Err(OstError::NotEmpty(dir.to_owned()));
        }
    }
    dataversion::probe_xattrs(dir)?;
    std::fs::create_dir_all(&objects).map_err(|e| OstError::io(&objects, e))?;
    for i in 0..SUBDIRS {
        let sub = objects.join(subdir_name(i));
        match std::fs::create_dir(&sub) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                // An interrupted format: its subdirectories must still be empty.
                let mut entries = std::fs::read_dir(&sub).map_err(|e| OstError::io(&sub, e))?;
                if entries.next().is_some() {
                    return Err(OstError::NotEmpty(dir.to_owned()));
                }
            }
            Err(e) => return Err(OstError::io(&sub, e)),
        }
    }
    sync_dir(&objects).map_err(|e| OstError::io(&objects, e))?;
    DataVersions::format(dir)?;
    let identity = Identity {
        format_version: FORMAT_VERSION,
        fsname: opts.fsname.clone(),
        kind: KIND_OST.to_owned(),
        index: opts.index,
        uuid: Uuid::new_v4(),
    };
    identity.store(dir)?;
    tracing::info!(dir = %dir.display(), fsname = %opts.fsname, index = opts.index, "formatted OST");
    Ok(identity)
}

#[cfg(test)]
mod tests;
