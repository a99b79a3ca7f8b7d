//! The weftfs object storage target (OST): stripe objects of files, stored as plain files
//! on a local file system and served over the OST protocol ([`weft_proto::ost`]).
//!
//! This crate owns one OST's data directory: formatting and identity, object read, write,
//! punch, destroy and attributes, data versions, space accounting (`statfs`, ENOSPC before
//! writing) and bulk I/O statistics. It does not own striping (the client computes which
//! object holds which bytes), object lifetime decisions (the MDT's destroy log), or the
//! transport (`weft-rpc`; [`OstHandler`] plugs this crate into it).
//!
//! # On-disk format (version 1)
//!
//! ```text
//! DIR/target.json        {"format_version":1,"fsname":..,"kind":"ost","index":..,"uuid":..}
//! DIR/dv_reserve.json    {"format_version":1,"reserved_end":N}: every data version handed
//!                        out so far is below N
//! DIR/O/00 .. DIR/O/ff   256 subdirectories, chosen by an FNV-1a hash of the object id
//! DIR/O/hh/<seq>-<oid>-<ver>-c<component>-s<stripe>
//!                        one file per object (FID parts in hex), holes kept sparse;
//!                        xattr user.weft.dv = its data version (u64 little-endian)
//!                        xattr user.weft.lz4 (compressed objects only) = logical size and
//!                        bytes of its slots (two u64 LE); the file is then slots of
//!                        64 KiB + 4 KiB, slot i holding logical bytes [i*64K, (i+1)*64K)
//!                        as a 20-byte header and an LZ4 block (or raw bytes), then a hole
//! ```
//!
//! Objects created while `obdfilter.*.compress` is `lz4` ([`Ost::set_compress`]) are
//! compressed in 64 KiB chunks (`store/fs/compressed.rs`), transparently to clients:
//! random reads and writes touch only the chunks they cover, holes stay holes (searched
//! and punched by chunk), and the OST counts logical and stored bytes of such objects
//! (`compress_logical_bytes`, `compress_stored_bytes`). Other objects keep the plain form
//! and its `O_DIRECT` bulk path.
//!
//! Objects are listed (`ListObjects`, for `weft fsck`) by (subdirectory, object id), a
//! page at a time; see `store/fs/list.rs` for the cursor and the cost.
//!
//! # Layers
//!
//! [`Ost`] (`ost_target/`) holds the target's logic: data versions, per-object locks, grants
//! and space admission, size limits, bulk statistics. It reaches storage only through the
//! [`store::ObjectStore`] trait: [`store::fs::FsStore`] keeps objects as files as described
//! above; [`store::memory::MemoryStore`] and [`store::failing::FailingStore`] are the fake
//! and the failure-injecting twin tests run the target over.
//!
//! `target.json` and `dv_reserve.json` are written with the durable recipe (temporary file,
//! fsync, rename, fsync directory); `target.json` is written last at format, so a directory
//! without it is either empty or an interrupted format. The file system must support user
//! extended attributes (checked at format). A served directory is held with an exclusive
//! `flock`, so a second server on it is refused ([`OstError::Busy`]); a failover OSS
//! (`weft oss --failover`) waits for it instead, and the kernel drops the lock when its
//! holder dies, however it dies.
//!
//! Bulk I/O larger than `readcache_max_io_mb` / `writethrough_max_io_mb` (default 1 MiB)
//! bypasses the page cache with `O_DIRECT`; see [`direct`].
//!
//! Data versions are handed out from an OST-wide counter whose reserved range is persisted
//! before use, so they never go backwards; a version stored before the last start is not
//! trusted (a crash may have split data from its attribute) and is replaced on first access.

mod brw;
mod dataversion;
pub mod direct;
mod error;
mod fdcache;
pub mod grant;
mod identity;
mod object;
mod ost_target;
mod service;
pub mod store;
#[cfg(test)]
mod testutil;

pub use brw::{BRW_BUCKETS, BrwBucket, OST_BRW, OST_STATS, OstStats};
pub use dataversion::RESERVE_BLOCK;
pub use error::OstError;
pub use identity::{FORMAT_VERSION, IDENTITY_FILE, Identity, validate_fsname};
pub use object::{object_file_name, object_path, parse_object_file_name};
pub use ost_target::{MAX_OBJECT_SIZE, MAX_TARGET_INDEX, Ost, OstOptions};
pub use service::{DataMover, OstHandler};
pub use store::fs::{DV_XATTR, RESERVE_FILE};
pub use store::{ObjectStore, StoreError};
