//! The storage seam under the target: [`ObjectStore`], what one OST needs from whatever
//! holds its objects, shaped for whole extents (read an extent, write an extent, punch,
//! set the size, attributes, data/hole search, listing, destroy, space, sync) so that an
//! object store can implement it as well as a local file system.
//!
//! The target ([`crate::Ost`]) keeps everything above storage: data versions (it hands
//! them out; a store only keeps each object's current one and the reservation's end),
//! grants and space admission, per-object locking, size limits and bulk statistics.
//! Implementations:
//!
//! - [`fs::FsStore`]: objects as files in a data directory (the production store);
//! - [`memory::MemoryStore`]: an in-memory fake for fast, deterministic tests;
//! - [`failing::FailingStore`]: wraps any store and injects failures (EIO, ENOSPC, short
//!   writes) into chosen calls, for the target's error paths.
//!
//! Every method may block (disk I/O, a network round trip): the target calls them from
//! tokio's blocking pool, never from a reactor thread. Callers serialise what must not
//! interleave on one object (the target's per-object locks); a store needs only be safe
//! under concurrent calls on different objects and concurrent reads and writes of
//! disjoint ranges of one object.

mod error;
pub mod failing;
pub mod fs;
pub mod memory;

pub use error::{StoreError, StoreResult};

use bytes::Bytes;
use weft_proto::ObjectId;
use weft_proto::mdt::StatFs;

/// Size and allocation of one stored object.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ObjectStat {
    /// Logical size in bytes.
    pub size: u64,
    /// Space allocated, in 512-byte units (as `st_blocks`).
    pub blocks: u64,
}

/// One page of a listing: objects with their sizes, and the cursor of the next page
/// (`None` after the last).
pub type ListPage = (Vec<(ObjectId, u64)>, Option<ObjectId>);

/// Counters a store keeps of its own I/O paths (all zero for stores without them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreCounters {
    /// Reads that went around the page cache (`O_DIRECT`).
    pub direct_reads: u64,
    /// Writes that went around the page cache.
    pub direct_writes: u64,
    /// Logical bytes of the store's compressed objects.
    pub compressed_logical: u64,
    /// Bytes allocated to the store's compressed objects.
    pub compressed_stored: u64,
}

/// What a target needs from the storage holding its objects.
///
/// Calls on an object that does not exist fail with [`StoreError::NotFound`], except
/// those documented to create it ([`write`](ObjectStore::write),
/// [`set_size`](ObjectStore::set_size)) or to accept a missing one.
pub trait ObjectStore: Send + Sync + 'static {
    /// Reads up to `len` bytes at `offset`: fewer at the object's end (none past it),
    /// holes as zeros.
    fn read(&self, id: &ObjectId, offset: u64, len: usize) -> StoreResult<Bytes>;

    /// Writes the whole of `data` at `offset`, creating the object if it is missing
    /// (compressed when `compress` says so; `None`: as [`compress`](Self::compress)
    /// says); `true` when this call created it. On error, part of the range may have been
    /// written.
    fn write(
        &self,
        id: &ObjectId,
        offset: u64,
        data: &Bytes,
        compress: Option<bool>,
    ) -> StoreResult<bool>;

    /// Sets the object's size (truncating or extending with a hole), creating it if
    /// missing (compressed as for [`write`](Self::write)).
    fn set_size(&self, id: &ObjectId, size: u64, compress: Option<bool>) -> StoreResult<()>;

    /// Deallocates `[offset, offset + len)` (`len > 0`), keeping the size: the range reads
    /// as zeros afterwards.
    fn punch(&self, id: &ObjectId, offset: u64, len: u64) -> StoreResult<()>;

    /// The object's size and allocation.
    fn stat(&self, id: &ObjectId) -> StoreResult<ObjectStat>;

    /// Where the next data (or hole, with `hole`) at or after `offset` starts; `None` when
    /// `offset` is at or past the object's end. The end counts as a hole.
    fn seek(&self, id: &ObjectId, offset: u64, hole: bool) -> StoreResult<Option<u64>>;

    /// The data version stored with the object (`None` if it has none).
    fn version(&self, id: &ObjectId) -> StoreResult<Option<u64>>;

    /// Stores the object's data version.
    fn set_version(&self, id: &ObjectId, version: u64) -> StoreResult<()>;

    /// Removes the object, not necessarily durably (see
    /// [`sync_removed`](ObjectStore::sync_removed)); `false` when it did not exist.
    fn remove(&self, id: &ObjectId) -> StoreResult<bool>;

    /// Makes the removals of `ids` durable. Tries every one whatever fails, and reports
    /// the first error.
    fn sync_removed(&self, ids: &[ObjectId]) -> StoreResult<()>;

    /// Makes the object's data durable; with `created`, its existence too.
    fn sync_data(&self, id: &ObjectId, created: bool) -> StoreResult<()>;

    /// Makes the object durable: data, attributes and existence.
    fn sync_object(&self, id: &ObjectId) -> StoreResult<()>;

    /// Makes everything the store holds durable.
    fn sync_all(&self) -> StoreResult<()>;

    /// Up to `max` (> 0) objects after the cursor `after`, with their sizes, in the order
    /// of (hashed subdirectory, object id) (`object::subdir_of`): an order that
    /// depends on the ids only, so paging lists every object present throughout exactly
    /// once.
    fn list(&self, after: Option<&ObjectId>, max: usize) -> StoreResult<ListPage>;

    /// Capacity and use of the space behind the store.
    fn statfs(&self) -> StoreResult<StatFs>;

    /// The end of the reserved block of data versions, as last stored (every version
    /// handed out so far is below it).
    fn version_reserve(&self) -> StoreResult<u64>;

    /// Stores a new end of the reserved block of data versions, durably, before any
    /// version of the block is used.
    fn set_version_reserve(&self, end: u64) -> StoreResult<()>;

    /// Counters of the store's own I/O paths.
    fn counters(&self) -> StoreCounters {
        StoreCounters::default()
    }

    /// Turns compression (LZ4, in chunks) of objects created from now on on or off;
    /// `false` when the store cannot compress (the setting is then ignored).
    fn set_compress(&self, on: bool) -> bool {
        let _ = on;
        false
    }

    /// Whether objects created now are compressed.
    fn compress(&self) -> bool {
        false
    }
}
