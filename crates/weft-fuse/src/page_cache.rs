//! The bound on the kernel's page cache of the mount's files (`llite.*.max_cached_mb`, as
//! a Lustre client bounds the page cache of its files).
//!
//! The kernel keeps every page the mount answered a read with (and the pages writes
//! filled) until memory runs short, so a data loader streaming a dataset larger than the
//! bound would otherwise fill all free memory with pages it will not read again before
//! they are pushed out, taking fresh memory page by page (on a VM that hands freed memory
//! back to its host, every such page is a fault in the host: issue 23's epoch 1 measured
//! the mount's copy into fresh pages at 3× the CPU of a copy into recycled ones).
//!
//! [`PageCacheBound`] counts the bytes the mount handed the kernel per 1 MiB chunk of each
//! inode (whole 4 KiB pages, as the kernel holds them; at most [`MAX_CHUNKS`] chunks), the
//! chunk filled longest ago first out. When the count passes the bound it drops
//! the oldest chunks until it is 1/8 under (so drops come in batches): adjacent chunks of
//! one inode become one range, and a thread of its own asks the kernel to drop them
//! ([`KernelCache::drop_pages`], FUSE's inode invalidation with a range), never the
//! thread that answers a request (a drop waits for pages a read in flight holds locked).
//!
//! The count is an estimate from above: pages the kernel dropped on its own, and those of
//! inodes it forgot, are not seen, and are dropped again (nothing happens) when their turn
//! comes. A chunk read again from the kernel's cache is not seen either (no request
//! reaches the mount), so the order is that of filling, not of last use.

use crate::kernel_cache::KernelCache;
use lru::LruCache;
use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use weft_client::params::{ClientParams, Param};

/// Bytes per counted chunk.
pub const CHUNK: u64 = 1 << 20;

/// The kernel's page: what a fill of any part of one costs it.
const PAGE: u64 = 4096;

/// Most chunks counted (about 20 MiB of bookkeeping): past it the oldest are dropped as
/// if over the bound, so that reads of many small files cannot grow the count without
/// limit under a bound of terabytes.
pub const MAX_CHUNKS: usize = 1 << 18;

/// Batches of drops waiting for the dropping thread; when it falls this far behind, later
/// batches are left to the kernel's own reclaim.
const QUEUED_BATCHES: usize = 64;

/// Pages of one inode the kernel is asked to drop: `len` bytes from `offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DropRange {
    /// The inode.
    pub ino: u64,
    /// First byte (a multiple of [`CHUNK`]).
    pub offset: u64,
    /// Bytes (a multiple of [`CHUNK`]).
    pub len: u64,
}

/// The chunks the kernel was handed, oldest first out, and their bytes.
#[derive(Debug)]
pub struct Filled {
    /// Bytes handed per (inode, chunk index), at most [`CHUNK`] each.
    chunks: LruCache<(u64, u64), u64>,
    bytes: u64,
}

impl Default for Filled {
    fn default() -> Self {
        Self {
            chunks: LruCache::unbounded(),
            bytes: 0,
        }
    }
}

impl Filled {
    /// Notes `len` bytes of `ino` from `offset` handed to the kernel (as the whole pages
    /// they touch); with more than `limit` bytes noted (or more than [`MAX_CHUNKS`]
    /// chunks), returns the oldest chunks to drop (as ranges) until the count is at most
    /// 7/8 of both.
    pub fn add(&mut self, ino: u64, offset: u64, len: u64, limit: u64) -> Vec<DropRange> {
        let end = offset.saturating_add(len);
        let mut at = offset;
        while at < end {
            let index = at / CHUNK;
            let chunk_end = (index + 1).saturating_mul(CHUNK).min(end);
            let pages = chunk_end.div_ceil(PAGE) - at / PAGE;
            let held = self.chunks.get_or_insert_mut((ino, index), || 0);
            let grown = (*held + pages * PAGE).min(CHUNK);
            self.bytes += grown - *held;
            *held = grown;
            at = chunk_end;
        }
        if self.bytes <= limit && self.chunks.len() <= MAX_CHUNKS {
            return Vec::new();
        }
        let low = limit - limit / 8;
        let low_chunks = MAX_CHUNKS - MAX_CHUNKS / 8;
        let mut drops: Vec<DropRange> = Vec::new();
        while self.bytes > low || self.chunks.len() > low_chunks {
            let Some(((ino, index), held)) = self.chunks.pop_lru() else {
                break;
            };
            self.bytes -= held;
            let offset = index * CHUNK;
            match drops.last_mut() {
                Some(d) if d.ino == ino && d.offset + d.len == offset => d.len += CHUNK,
                Some(d) if d.ino == ino && offset + CHUNK == d.offset => {
                    d.offset = offset;
                    d.len += CHUNK;
                }
                _ => drops.push(DropRange {
                    ino,
                    offset,
                    len: CHUNK,
                }),
            }
        }
        drops
    }

    /// Bytes counted.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

/// Keeps the kernel's cache of the mount's files under `llite.*.max_cached_mb`.
pub struct PageCacheBound {
    params: Arc<ClientParams>,
    filled: Mutex<Filled>,
    drops: SyncSender<Vec<DropRange>>,
}

impl PageCacheBound {
    /// A bound read from `params` (at every fill, so `set_param` takes effect at once),
    /// dropping through `kernel` on a thread of its own (which ends with the bound).
    pub fn new(params: Arc<ClientParams>, kernel: Arc<dyn KernelCache>) -> std::io::Result<Self> {
        let (drops, queued) = sync_channel(QUEUED_BATCHES);
        std::thread::Builder::new()
            .name("weft-page-drop".into())
            .spawn(move || drop_pages(&queued, kernel.as_ref()))?;
        Ok(Self {
            params,
            filled: Mutex::default(),
            drops,
        })
    }

    /// Notes that the kernel now caches `len` bytes of `ino` from `offset` (a read
    /// answered, a write taken through the cache).
    pub fn filled(&self, ino: u64, offset: u64, len: u64) {
        let limit = self.params.mb(Param::MaxCachedMb);
        let drops = self.filled.lock().add(ino, offset, len, limit);
        if drops.is_empty() {
            return;
        }
        match self.drops.try_send(drops) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                tracing::debug!("page drops queued to the limit: left to the kernel's reclaim");
            }
            Err(TrySendError::Disconnected(_)) => {
                tracing::warn!("the page-dropping thread is gone");
            }
        }
    }
}

/// The dropping thread: every queued range to the kernel, until the bound is dropped.
fn drop_pages(queued: &Receiver<Vec<DropRange>>, kernel: &dyn KernelCache) {
    while let Ok(batch) = queued.recv() {
        for d in batch {
            kernel.drop_pages(d.ino, d.offset, d.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MIB: u64 = CHUNK;

    #[test]
    fn nothing_drops_under_the_limit() {
        let mut f = Filled::default();
        assert!(f.add(1, 0, 3 * MIB, 4 * MIB).is_empty());
        // The same bytes again count once.
        assert!(f.add(1, 0, 3 * MIB, 4 * MIB).is_empty());
        assert_eq!(f.bytes(), 3 * MIB);
        // Partial chunks count the pages they touch.
        assert!(f.add(2, 10, 100, 4 * MIB).is_empty());
        assert_eq!(f.bytes(), 3 * MIB + 4096);
        assert!(f.add(2, 4000, 200, 4 * MIB).is_empty());
        assert_eq!(f.bytes(), 3 * MIB + 3 * 4096);
    }

    #[test]
    fn many_small_fills_are_bounded_by_count() {
        let mut f = Filled::default();
        let mut dropped = 0;
        for ino in 0..MAX_CHUNKS as u64 + 1 {
            dropped += f.add(ino, 0, 100, u64::MAX).len();
        }
        // One over the most: the oldest eighth goes, one range per file.
        assert_eq!(dropped, MAX_CHUNKS / 8 + 1);
        assert_eq!(f.chunks.len(), MAX_CHUNKS - MAX_CHUNKS / 8);
    }

    #[test]
    fn a_stream_drops_its_oldest_chunks_as_one_range() {
        let mut f = Filled::default();
        let limit = 8 * MIB;
        let mut dropped = Vec::new();
        for i in 0..9 {
            dropped.extend(f.add(7, i * MIB, MIB, limit));
        }
        // 9 MiB over an 8 MiB limit: down to 7 MiB, the first two chunks in one range.
        assert_eq!(
            dropped,
            vec![DropRange {
                ino: 7,
                offset: 0,
                len: 2 * MIB
            }]
        );
        assert_eq!(f.bytes(), 7 * MIB);
    }

    #[test]
    fn interleaved_files_drop_their_own_ranges() {
        let mut f = Filled::default();
        for i in 0..4 {
            assert!(f.add(1, i * MIB, MIB, 8 * MIB).is_empty());
            assert!(f.add(2, i * MIB, MIB, 8 * MIB).is_empty());
        }
        let drops = f.add(3, 0, MIB, 8 * MIB);
        assert_eq!(
            drops,
            vec![
                DropRange {
                    ino: 1,
                    offset: 0,
                    len: MIB
                },
                DropRange {
                    ino: 2,
                    offset: 0,
                    len: MIB
                },
            ]
        );
        assert_eq!(f.bytes(), 7 * MIB);
    }

    proptest! {
        /// Whatever the fills, the count stays at most the limit, every drop is whole
        /// chunks, and the count is what was filled less what was dropped.
        #[test]
        fn the_count_stays_under_the_limit(
            fills in prop::collection::vec((0u64..4, 0u64..64 * MIB, 1u64..4 * MIB), 1..200),
            limit_mib in 2u64..32,
        ) {
            let limit = limit_mib * MIB;
            let mut f = Filled::default();
            let mut held = std::collections::HashMap::<(u64, u64), u64>::new();
            for (ino, offset, len) in fills {
                let drops = f.add(ino, offset, len, limit);
                let end = offset + len;
                let mut at = offset;
                while at < end {
                    let i = at / CHUNK;
                    let e = ((i + 1) * CHUNK).min(end);
                    let h = held.entry((ino, i)).or_default();
                    *h = (*h + e.div_ceil(4096) * 4096 - at / 4096 * 4096).min(CHUNK);
                    at = e;
                }
                for d in drops {
                    prop_assert_eq!(d.offset % CHUNK, 0);
                    prop_assert_eq!(d.len % CHUNK, 0);
                    prop_assert!(d.len > 0);
                    for i in d.offset / CHUNK..(d.offset + d.len) / CHUNK {
                        prop_assert!(held.remove(&(d.ino, i)).is_some());
                    }
                }
                prop_assert!(f.bytes() <= limit);
                prop_assert_eq!(f.bytes(), held.values().sum::<u64>());
            }
        }
    }
}
