//! The object storage target ([`Ost`]): its identity, per-object locking, and the async
//! object operations clients call, each run on tokio's blocking pool over an
//! [`ObjectStore`]. Request dispatch is in `dispatch.rs`, the operations' bodies in
//! `ops.rs`, data versions in `version.rs`, space admission in `space.rs`.

mod dispatch;
mod ops;
mod space;
mod version;

use crate::brw::{BrwStats, OstStats};
use crate::dataversion::DataVersions;
use crate::direct::CacheLimits;
use crate::error::OstError;
use crate::grant::Grants;
use crate::identity::{FORMAT_VERSION, Identity, KIND_OST, validate_fsname};
use crate::object::object_hash;
use crate::store::ObjectStore;
use crate::store::fs::FsStore;
use bytes::Bytes;
use parking_lot::{Mutex, RwLock};
use std::path::Path;
use std::sync::Arc;
use uuid::Uuid;
use weft_proto::mdt::StatFs;
use weft_proto::ost::{MAX_DESTROY_BATCH, MAX_LIST_OBJECTS, ObjectAttr};
use weft_proto::{Compression, Errno, ObjectId, TargetId, WireError, WireResult};

/// Largest object size (16 TiB): writes and punches beyond it fail with EFBIG. ext4 with
/// 4 KiB blocks stops a little below this; the kernel's EFBIG is passed through as is.
pub const MAX_OBJECT_SIZE: u64 = 16 << 40;
/// Largest target index (Lustre's limit: four hex digits in `OST001f`).
pub const MAX_TARGET_INDEX: u32 = 0xffff;

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

/// The connection id of requests made in-process (no grant of their own).
pub const LOCAL: u64 = 0;

/// One object storage target.
pub struct Ost {
    store: Arc<dyn ObjectStore>,
    identity: Identity,
    versions: DataVersions,
    /// Which bulk I/O bypasses the page cache (used by the file-system store).
    limits: Arc<CacheLimits>,
    locks: [ObjectLock; 256],
    stats: BrwStats,
    grants: Grants,
}

impl std::fmt::Debug for Ost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ost")
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

/// Refuses options no target may have.
fn check_options(opts: &OstOptions) -> Result<(), OstError> {
    validate_fsname(&opts.fsname)?;
    if opts.index > MAX_TARGET_INDEX {
        return Err(OstError::InvalidIndex(opts.index));
    }
    Ok(())
}

impl Ost {
    /// Opens the OST in `dir`, formatting it when it is empty (or does not exist): objects
    /// as files ([`FsStore`]).
    ///
    /// A directory of another file system, kind or index is refused, and so is a non-empty
    /// directory without an identity. This does blocking I/O: call it before serving, or
    /// from `spawn_blocking`.
    pub fn open(dir: &Path, opts: OstOptions) -> Result<Arc<Ost>, OstError> {
        check_options(&opts)?;
        let limits = Arc::new(CacheLimits::default());
        let (store, identity) = FsStore::open(dir, &opts.fsname, opts.index, Arc::clone(&limits))?;
        let ost = Self::assemble(Arc::new(store), identity, limits)?;
        tracing::info!(dir = %dir.display(), fsname = %ost.identity.fsname, index = ost.identity.index, uuid = %ost.identity.uuid, "OST opened");
        Ok(ost)
    }

    /// A target over any store (an in-memory or failure-injecting one in tests), with a
    /// fresh identity: the store keeps objects and the data version reservation, not the
    /// identity.
    pub fn with_store(store: Arc<dyn ObjectStore>, opts: OstOptions) -> Result<Arc<Ost>, OstError> {
        check_options(&opts)?;
        let identity = Identity {
            format_version: FORMAT_VERSION,
            fsname: opts.fsname,
            kind: KIND_OST.to_owned(),
            index: opts.index,
            uuid: Uuid::new_v4(),
        };
        Self::assemble(store, identity, Arc::new(CacheLimits::default()))
    }

    fn assemble(
        store: Arc<dyn ObjectStore>,
        identity: Identity,
        limits: Arc<CacheLimits>,
    ) -> Result<Arc<Ost>, OstError> {
        let versions = DataVersions::open(&*store)?;
        Ok(Arc::new(Ost {
            store,
            identity,
            versions,
            limits,
            locks: std::array::from_fn(|_| ObjectLock::default()),
            stats: BrwStats::default(),
            grants: Grants::default(),
        }))
    }

    /// The I/O sizes above which bulk bypasses the page cache (run-time parameters).
    pub fn cache_limits(&self) -> &CacheLimits {
        &self.limits
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

    /// Turns LZ4 compression of objects created from now on on or off
    /// (`obdfilter.*.compress`); objects keep the form they were created with. Refused by
    /// a store that cannot compress.
    pub fn set_compress(&self, on: bool) -> Result<(), String> {
        if self.store.set_compress(on) || !on {
            Ok(())
        } else {
            Err(format!("OST {} cannot compress objects", self.target_id()))
        }
    }

    /// Whether objects created now are compressed.
    pub fn compress(&self) -> bool {
        self.store.compress()
    }

    /// Bulk I/O statistics: bytes read and written and the I/O size histogram.
    pub fn stats(&self) -> OstStats {
        self.stats.snapshot(self.store.counters())
    }

    /// Counts one restore chunk this OST's server copied (`ok`) or failed to, of `bytes`.
    pub fn record_restore(&self, bytes: u64, ok: bool) {
        self.stats.record_restore(bytes, ok);
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

    /// Writes `data` at `offset`, creating the object if needed (compressed as the
    /// target's `compress` setting says); with `sync` the data is durable before this
    /// returns.
    pub async fn write(
        self: &Arc<Self>,
        object: ObjectId,
        offset: u64,
        data: Bytes,
        sync: bool,
    ) -> WireResult<ObjectAttr> {
        self.write_from(LOCAL, object, offset, data, sync, Compression::Inherit)
            .await
    }

    /// [`Ost::write`] on behalf of connection `conn`: the write may use the connection's
    /// grant, and uses it up. An object it creates is compressed as `compress` says.
    pub async fn write_from(
        self: &Arc<Self>,
        conn: u64,
        object: ObjectId,
        offset: u64,
        data: Bytes,
        sync: bool,
        compress: Compression,
    ) -> WireResult<ObjectAttr> {
        self.blocking(move |ost| ost.write_blocking(conn, &object, offset, &data, sync, compress))
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

    /// Sets the object's size, creating it if missing (compressed as the target's
    /// `compress` setting says).
    pub async fn punch(self: &Arc<Self>, object: ObjectId, size: u64) -> WireResult<ObjectAttr> {
        self.punch_with(object, size, Compression::Inherit).await
    }

    /// [`Ost::punch`], an object it creates compressed as `compress` says.
    pub async fn punch_with(
        self: &Arc<Self>,
        object: ObjectId,
        size: u64,
        compress: Compression,
    ) -> WireResult<ObjectAttr> {
        self.blocking(move |ost| ost.punch_blocking(&object, size, compress))
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
        self.blocking(|ost| Ok(ost.store.statfs()?)).await
    }

    /// Makes one object durable, or with `None` everything on the target's file system.
    pub async fn sync(self: &Arc<Self>, object: Option<ObjectId>) -> WireResult<()> {
        self.blocking(move |ost| match object {
            Some(id) => ost.sync_object_blocking(&id),
            None => Ok(ost.store.sync_all()?),
        })
        .await
    }

    /// One page of the objects the target holds, with their sizes: up to `max` (at most
    /// [`MAX_LIST_OBJECTS`]; 0 is EINVAL) after the cursor `after`, and the cursor of the
    /// next page (`None` after the last). Order: by hashed subdirectory, then object id
    /// (see [`ObjectStore::list`]); stable, so paging lists every object that stays
    /// present exactly once.
    pub async fn list_objects(
        self: &Arc<Self>,
        after: Option<ObjectId>,
        max: u32,
    ) -> WireResult<(Vec<(ObjectId, u64)>, Option<ObjectId>)> {
        if max == 0 {
            return Err(WireError::new(
                Errno::Inval,
                "a listing page of 0 objects".to_string(),
            ));
        }
        let max = max.min(MAX_LIST_OBJECTS) as usize;
        let page = self
            .blocking(move |ost| Ok(ost.store.list(after.as_ref(), max)?))
            .await?;
        self.stats.record_listed(page.0.len() as u64);
        Ok(page)
    }

    /// Runs `f` on tokio's blocking pool.
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
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_failing;
#[cfg(test)]
mod tests_lz4;
#[cfg(test)]
mod tests_memory;
#[cfg(test)]
mod tests_model;
