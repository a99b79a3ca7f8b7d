//! The page-aligned buffers the mover collects its ranged GETs into, kept for reuse.
//!
//! A GET of a whole sub-range (8 MiB by default) needs a buffer of 8 MiB and a page.
//! jemalloc serves allocations of 8 MiB and more from its oversize arena, which hands
//! each one back to the kernel as soon as it is freed: every GET would then fault in
//! 2,049 fresh pages (and on a VM that returns freed memory to its host, each page is a
//! host fault too). The pool keeps up to [`MAX_FREE`] freed buffers of the full size;
//! smaller GETs (small files, a file's tail) use plain allocations, which jemalloc's
//! arenas recycle themselves.

use bytes::Bytes;
use parking_lot::Mutex;
use std::sync::Arc;
use weft_proto::frame::{BULK_ALIGN, aligned_vec};

/// Most freed buffers kept (at 8 MiB sub-ranges, 128 MiB): enough for the turnover of
/// a mover's GETs in flight, which its MDT bounds (64 units, 256 MiB).
pub(crate) const MAX_FREE: usize = 16;

/// GETs of fewer bytes than this get a buffer of their own (see the module header).
const POOLED_MIN: usize = 1 << 20;
/// No pool for sub-ranges over this (a mover configured so is left to the allocator).
const POOLED_MAX: usize = 64 << 20;

/// Freed buffers of one size, for reuse.
#[derive(Debug)]
pub(crate) struct BufferPool {
    /// The bytes a pooled buffer holds (the mover's sub-range).
    len: usize,
    free: Mutex<Vec<Vec<u8>>>,
}

impl BufferPool {
    /// A pool of buffers for GETs of up to `len` bytes.
    pub(crate) fn new(len: usize) -> Arc<Self> {
        Arc::new(Self {
            len,
            free: Mutex::new(Vec::new()),
        })
    }

    /// An empty vector with room for `want` bytes from a [`BULK_ALIGN`] boundary, and that
    /// boundary's index (as [`aligned_vec`]): a freed one when `want` is pooled.
    pub(crate) fn take(&self, want: usize) -> (Vec<u8>, usize) {
        if !self.pooled(want) {
            return aligned_vec(want);
        }
        match self.free.lock().pop() {
            Some(mut v) => {
                v.clear();
                // The same allocation as before: the same boundary.
                let pad = v.as_ptr().align_offset(BULK_ALIGN).min(BULK_ALIGN);
                v.resize(pad, 0);
                (v, pad)
            }
            None => aligned_vec(self.len),
        }
    }

    /// The bytes of `buf` from `pad` on; a pooled buffer comes back to the pool when the
    /// last `Bytes` of it is dropped.
    pub(crate) fn freeze(self: &Arc<Self>, buf: Vec<u8>, pad: usize) -> Bytes {
        let fits = self.len + BULK_ALIGN..=POOLED_MAX + BULK_ALIGN;
        if self.len > POOLED_MAX || !fits.contains(&buf.capacity()) {
            return Bytes::from(buf).slice(pad..);
        }
        Bytes::from_owner(Returned {
            buf,
            pool: Arc::clone(self),
        })
        .slice(pad..)
    }

    fn pooled(&self, want: usize) -> bool {
        self.len <= POOLED_MAX && (POOLED_MIN..=self.len).contains(&want)
    }

    fn give_back(&self, buf: Vec<u8>) {
        let mut free = self.free.lock();
        if free.len() < MAX_FREE {
            free.push(buf);
        }
    }

    #[cfg(test)]
    fn free_count(&self) -> usize {
        self.free.lock().len()
    }
}

/// A pooled buffer lent to `Bytes`.
struct Returned {
    buf: Vec<u8>,
    pool: Arc<BufferPool>,
}

impl AsRef<[u8]> for Returned {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for Returned {
    fn drop(&mut self) {
        self.pool.give_back(std::mem::take(&mut self.buf));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEN: usize = 2 << 20;

    fn filled(pool: &Arc<BufferPool>, want: usize, byte: u8) -> Bytes {
        let (mut v, pad) = pool.take(want);
        v.resize(pad + want, byte);
        pool.freeze(v, pad)
    }

    #[test]
    fn a_freed_buffer_is_used_again_aligned() {
        let pool = BufferPool::new(LEN);
        let a = filled(&pool, LEN, 1);
        assert_eq!(a.as_ptr().align_offset(BULK_ALIGN), 0);
        assert!(a.iter().all(|&b| b == 1));
        let at = a.as_ptr();
        let b = a.slice(10..20);
        drop(a);
        assert_eq!(pool.free_count(), 0, "still lent to a slice");
        drop(b);
        assert_eq!(pool.free_count(), 1);
        // A shorter pooled GET gets the same buffer back, from the same boundary.
        let c = filled(&pool, LEN - 12_345, 2);
        assert_eq!(c.as_ptr(), at);
        assert_eq!(c.len(), LEN - 12_345);
        assert!(c.iter().all(|&b| b == 2));
        assert_eq!(pool.free_count(), 0);
    }

    #[test]
    fn small_gets_are_not_pooled_and_the_pool_is_bounded() {
        let pool = BufferPool::new(LEN);
        drop(filled(&pool, 4096, 3));
        assert_eq!(pool.free_count(), 0);
        let lent: Vec<Bytes> = (0..MAX_FREE + 3).map(|_| filled(&pool, LEN, 4)).collect();
        drop(lent);
        assert_eq!(pool.free_count(), MAX_FREE);
    }
}
