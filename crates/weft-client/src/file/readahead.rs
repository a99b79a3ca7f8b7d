//! Reading an open file: striped reads through the client's data cache, with read-ahead
//! for sequential readers (a window that doubles up to `max_read_ahead_per_file_mb`, sent
//! as full aligned RPCs) and for strided readers (the next records fetched ahead), and
//! reads that serve pages already cached without waiting (`try_read_cached`).

use super::{File, errno, map_err};
use crate::cache::CACHE_PAGE;
use crate::client_core::ClientCore;
use crate::error::ClientError;
use crate::io::Parts;
use crate::layout;
use crate::params::Param;
use bytes::Bytes;
use std::sync::Arc;
use weft_proto::layout::Layout;
use weft_proto::mdt::AccessMode;
use weft_proto::{Errno, Fid};
use weft_rpc::RequestContext;

/// Read-ahead state of one open file.
#[derive(Debug, Default)]
pub(super) struct ReadAhead {
    /// Where the last read ended; a read starting here is sequential.
    last_end: u64,
    /// Bytes read ahead of a sequential reader; 0 for random readers.
    window: u64,
    /// End of what has been prefetched so far.
    prefetched_to: u64,
    /// Where the last read started, and the distance between the last two starts.
    last_offset: u64,
    stride: u64,
    /// How many reads in a row kept `stride`: two or more make a strided reader.
    stride_hits: u32,
}

impl ReadAhead {
    /// Whether a read at `offset` continues this reader's stream: it starts where the last
    /// read ended or, for a reader already streaming, inside the stretch around it that is
    /// being read ahead. The kernel sends one sequential reader's reads several at a time
    /// and they may arrive in any order; one that overtakes another must not look like a
    /// jump that stops read-ahead.
    fn continues(&self, offset: u64) -> bool {
        offset == self.last_end
            || (self.window > 0
                && offset >= self.last_offset.saturating_sub(self.window)
                && offset <= self.prefetched_to.max(self.last_end))
    }

    /// Records a read of `[offset, end)` that continued the stream.
    fn advance(&mut self, offset: u64, end: u64, ra_max: u64) {
        self.window = (self.window * 2).clamp(CACHE_PAGE, ra_max.max(CACHE_PAGE));
        self.stride_hits = 0;
        self.last_offset = self.last_offset.max(offset);
        self.last_end = self.last_end.max(end);
    }
}

/// Strided records fetched ahead of a strided reader.
const STRIDE_AHEAD: u64 = 4;

impl File {
    /// Reads `[offset, offset + len)` from the OSTs. Extents of components that are not
    /// instantiated read as zeros, after checking once that no other client has
    /// instantiated them since this handle learnt the layout.
    async fn read_range(
        &self,
        ctx: &RequestContext,
        offset: u64,
        len: u64,
    ) -> Result<Parts, ClientError> {
        // A released file's range is restored first (which may instantiate components:
        // the hole check below then fetches the layout).
        self.restore_for_read(offset, len).await?;
        let Some(mut layout) = self.layout() else {
            return Err(errno(Errno::Io, "file has no layout"));
        };
        if layout::has_hole(&layout, offset, len)
            && let Some(fresh) = self.refresh_layout().await?
        {
            layout = fresh;
        }
        read_layout_range(&self.core, ctx, &layout, self.fid, offset, len).await
    }

    /// Reads up to `len` bytes at `offset`; fewer at the end of the file.
    pub async fn read_at(&self, offset: u64, len: u64) -> Result<Bytes, ClientError> {
        self.read_at_in(&self.ctx, offset, len).await
    }

    /// [`read_at`](Self::read_at) with its OST reads (and the read-ahead it starts) in
    /// `ctx`.
    pub async fn read_at_in(
        &self,
        ctx: &RequestContext,
        offset: u64,
        len: u64,
    ) -> Result<Bytes, ClientError> {
        self.read_parts_in(ctx, offset, len)
            .await
            .map(Parts::concat)
    }

    /// [`read_at`](Self::read_at) as the cache pages and RPC buffers that hold the range,
    /// without joining them: a caller that copies the data into memory of its own (the
    /// Python package's `readinto`) copies each byte once.
    pub async fn read_parts(&self, offset: u64, len: u64) -> Result<Parts, ClientError> {
        self.read_parts_in(&self.ctx, offset, len).await
    }

    /// [`read_parts`](Self::read_parts) in `ctx` (see [`read_at_in`](Self::read_at_in)).
    pub async fn read_parts_in(
        &self,
        ctx: &RequestContext,
        offset: u64,
        len: u64,
    ) -> Result<Parts, ClientError> {
        if self.access == AccessMode::Write {
            return Err(errno(Errno::BadF, "file not open for reading"));
        }
        let mut st = self.state.lock().await;
        self.check_open(&st)?;
        if let Some(local) = self.local() {
            drop(st);
            let end = offset.saturating_add(len).min(self.size.get());
            return local
                .read(offset, end.saturating_sub(offset))
                .await
                .map(Parts::from);
        }
        if !st.dirty.is_empty() || st.flushing.is_some() {
            // Read your own writes: put them on the OSTs first.
            let r = self.flush_locked(ctx, &mut st).await;
            if let Err(e) = r {
                st.error = e.remote().cloned();
                return Err(e);
            }
        }
        let size = self.size.get();
        let end = offset.saturating_add(len).min(size);
        if offset >= end {
            return Ok(Parts::default());
        }
        // Sequential readers get a growing window; a jump resets it. Readers that jump by
        // the same distance each time (one record of every N) are strided: the next
        // records are fetched ahead instead.
        let ra_max = self
            .core
            .params()
            .mb(Param::MaxReadAheadPerFileMb)
            .min(self.core.params().mb(Param::MaxReadAheadMb));
        let sequential = ra_max > 0 && st.ra.continues(offset);
        if sequential {
            st.ra.advance(offset, end, ra_max);
        } else {
            st.ra.window = 0;
            st.ra.prefetched_to = 0;
            let jump = offset.wrapping_sub(st.ra.last_offset);
            if offset > st.ra.last_offset && jump == st.ra.stride {
                st.ra.stride_hits += 1;
            } else {
                st.ra.stride = if offset > st.ra.last_offset { jump } else { 0 };
                st.ra.stride_hits = u32::from(st.ra.stride > 0);
            }
            st.ra.last_offset = offset;
            st.ra.last_end = end;
        }
        // Noted while no write of this handle can slip in: pages fetched from here on
        // are cached only if no write or truncate dropped the file's pages meanwhile.
        let generation = self.core.cache().generation(self.fid);
        let window = st.ra.window;
        let strided = !sequential && st.ra.stride_hits >= 2 && ra_max > 0;
        let stride = st.ra.stride;
        drop(st);
        if strided {
            let data = self.read_cached(ctx, offset, end, size, generation).await?;
            let record = end - offset;
            let ahead = STRIDE_AHEAD.min(ra_max / record.max(1)).max(1);
            for k in 1..=ahead {
                let a = offset.saturating_add(stride.saturating_mul(k));
                let b = a.saturating_add(record).min(size);
                if a < b {
                    self.prefetch(ctx, a, b, size, generation);
                }
            }
            return Ok(data);
        }
        if window == 0 {
            return self.read_range(ctx, offset, end - offset).await;
        }
        // Sequential: through the cache, then keep the window ahead full.
        let data = self.read_cached(ctx, offset, end, size, generation).await?;
        let mut st = self.state.lock().await;
        let ahead_end = self.readahead_stop(st.ra.last_end.max(end).saturating_add(window), size);
        let from = st.ra.prefetched_to.max(end);
        if from < ahead_end {
            st.ra.prefetched_to = ahead_end;
            drop(st);
            self.prefetch(ctx, from, ahead_end, size, generation);
        }
        Ok(data)
    }

    /// Serves a sequential read from cache pages without waiting, if it can: the handle's
    /// state free, nothing of its own buffered, the read continuing the handle's
    /// sequential stream and every page it needs cached. Keeps the read-ahead window moving as
    /// [`read_at`](Self::read_at) does (so it must run inside the client's runtime), and
    /// returns `None`, having changed nothing, otherwise. A read inside one cache page is
    /// a slice of it, not a copy. The FUSE mount calls this on the thread that read the
    /// request.
    pub fn try_read_cached(&self, offset: u64, len: u64) -> Option<Bytes> {
        self.try_read_cached_in(&self.ctx, offset, len)
    }

    /// [`try_read_cached`](Self::try_read_cached) with the read-ahead it starts in `ctx`.
    pub fn try_read_cached_in(&self, ctx: &RequestContext, offset: u64, len: u64) -> Option<Bytes> {
        self.try_read_cached_parts_in(ctx, offset, len)
            .map(Parts::concat)
    }

    /// [`try_read_cached`](Self::try_read_cached) as the cache pages that hold the range,
    /// not joined (see [`read_parts`](Self::read_parts)).
    pub fn try_read_cached_parts(&self, offset: u64, len: u64) -> Option<Parts> {
        self.try_read_cached_parts_in(&self.ctx, offset, len)
    }

    /// [`try_read_cached_parts`](Self::try_read_cached_parts) with the read-ahead it starts
    /// in `ctx`.
    pub fn try_read_cached_parts_in(
        &self,
        ctx: &RequestContext,
        offset: u64,
        len: u64,
    ) -> Option<Parts> {
        if self.access == AccessMode::Write || self.evicted() {
            return None;
        }
        let mut st = self.state.try_lock().ok()?;
        if let Some(local) = self.local() {
            if st.closed {
                return None;
            }
            drop(st);
            let end = offset.saturating_add(len).min(self.size.get());
            return local
                .read_now(offset, end.saturating_sub(offset))
                .ok()
                .map(Parts::from);
        }
        if st.closed || !st.dirty.is_empty() || st.flushing.is_some() {
            return None;
        }
        let ra_max = self
            .core
            .params()
            .mb(Param::MaxReadAheadPerFileMb)
            .min(self.core.params().mb(Param::MaxReadAheadMb));
        let size = self.size.get();
        let end = offset.saturating_add(len).min(size);
        if offset >= end || ra_max == 0 || !st.ra.continues(offset) {
            return None;
        }
        let cache = self.core.cache();
        let (first, last) = (offset / CACHE_PAGE, (end - 1) / CACHE_PAGE);
        let mut pages = Vec::with_capacity((last - first + 1) as usize);
        for i in first..=last {
            pages.push(cache.get(self.fid, i)?);
        }
        let data = cut_pages(&pages, first, offset, end);
        st.ra.advance(offset, end, ra_max);
        let ahead_end = self.readahead_stop(st.ra.last_end.saturating_add(st.ra.window), size);
        let from = st.ra.prefetched_to.max(end);
        if from < ahead_end {
            st.ra.prefetched_to = ahead_end;
            let generation = cache.generation(self.fid);
            drop(st);
            self.prefetch(ctx, from, ahead_end, size, generation);
        }
        Some(data)
    }

    /// Reads `[offset, end)` from cache pages, fetching the missing ones in one pass; they
    /// are cached if the file's cache generation is still `generation`.
    async fn read_cached(
        &self,
        ctx: &RequestContext,
        offset: u64,
        end: u64,
        size: u64,
        generation: u64,
    ) -> Result<Parts, ClientError> {
        let cache = self.core.cache();
        let (first, last) = (offset / CACHE_PAGE, (end - 1) / CACHE_PAGE);
        // Pages read-ahead is fetching right now: wait for them rather than read them twice.
        for i in first..=last {
            if !cache.contains(self.fid, i) {
                cache.wait_fetch(self.fid, i).await;
            }
        }
        let mut pages = Vec::new();
        let mut missing = Vec::new();
        for i in first..=last {
            match cache.get(self.fid, i) {
                Some(p) => pages.push(Some(p)),
                None => {
                    pages.push(None);
                    missing.push(i);
                }
            }
        }
        if let (Some(&lo), Some(&hi)) = (missing.first(), missing.last()) {
            let start = lo * CACHE_PAGE;
            let stop = ((hi + 1) * CACHE_PAGE).min(size);
            let _fetching = cache.begin_fetch(self.fid, lo, hi);
            let fetched = self.read_range(ctx, start, stop - start).await?;
            for i in lo..=hi {
                let a = (i - lo) * CACHE_PAGE;
                let b = (a + CACHE_PAGE).min(fetched.len());
                if a >= b {
                    break;
                }
                let page = fetched.slice(a, b);
                cache.insert(self.fid, i, page.clone(), generation);
                if let Some(slot) = pages.get_mut((i - first) as usize) {
                    *slot = Some(page);
                }
            }
        }
        let pages: Vec<Bytes> = pages.into_iter().map(Option::unwrap_or_default).collect();
        Ok(cut_pages(&pages, first, offset, end))
    }

    /// Where read-ahead may fetch to now: the window's end `ahead_end`, cut back to a
    /// multiple of the RPC size unless it reaches the end of the file (`size`). A reader
    /// moves the window by one call at a time; without the cut every call would send one
    /// RPC of its own size, with it read-ahead goes out in full, aligned RPCs (which an OST
    /// reads straight from disk: see `weft_ost::direct`).
    fn readahead_stop(&self, ahead_end: u64, size: u64) -> u64 {
        if ahead_end >= size {
            return size;
        }
        let rpc = self.core.params().rpc_bytes().max(CACHE_PAGE);
        ahead_end / rpc * rpc
    }

    /// Fetches `[start, end)` into the cache in the background, within the client's
    /// read-ahead budget; pages already cached are skipped, and nothing is fetched when the
    /// budget is spent, or when a write dropped the file's pages since `generation`. The
    /// fetches go in `ctx`, the context of the read that asked for them.
    fn prefetch(&self, ctx: &RequestContext, start: u64, end: u64, size: u64, generation: u64) {
        let Some(layout) = self.layout() else {
            return;
        };
        let fid = self.fid;
        let (first, last) = (start / CACHE_PAGE, (end - 1) / CACHE_PAGE);
        // Runs of missing pages, each fetched with one engine read (full-size RPCs to every
        // stripe at once) and cut into pages without copying.
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for i in first..=last {
            if self.core.cache().contains(fid, i) || self.core.cache().is_fetching(fid, i) {
                continue;
            }
            match runs.last_mut() {
                Some((_, hi)) if *hi + 1 == i => *hi = i,
                _ => runs.push((i, i)),
            }
        }
        let restorer = self.restorer();
        for (lo, hi) in runs {
            let a = lo * CACHE_PAGE;
            let b = ((hi + 1) * CACHE_PAGE).min(size);
            if a >= b {
                continue;
            }
            let Some(permit) = self.core.readahead_permit(b - a) else {
                return;
            };
            let fetching = self.core.cache().begin_fetch(fid, lo, hi);
            let (client, mut layout, ctx) = (self.core.clone(), layout.clone(), ctx.clone());
            let restorer = restorer.clone();
            tokio::spawn(async move {
                // A released file: restore the range first, then read with the layout
                // the restore instantiated.
                if let Some((mdt, released)) = &restorer {
                    if super::restore::restore_range(mdt, released, fid, a, b)
                        .await
                        .is_err()
                    {
                        return;
                    }
                    if layout::has_hole(&layout, a, b - a) {
                        match mdt.get_layout(fid).await {
                            Ok(Some(l)) => layout = Arc::new(l),
                            _ => return,
                        }
                    }
                }
                if let Ok(data) = read_layout_range(&client, &ctx, &layout, fid, a, b - a).await {
                    for i in lo..=hi {
                        let x = (i - lo) * CACHE_PAGE;
                        let y = (x + CACHE_PAGE).min(data.len());
                        if x < y {
                            client.cache().insert(fid, i, data.slice(x, y), generation);
                        }
                    }
                }
                drop(fetching);
                drop(permit);
            });
        }
    }
}

/// Bytes `[offset, end)` of a file out of its consecutive cache pages from page `first` on,
/// as slices of the pages (no copy; [`Parts::concat`] joins them when asked).
///
/// A page shorter than [`CACHE_PAGE`] was fetched when the file ended inside it; `end` is
/// the size now, so what lies past the page's bytes reads as zeros: a write there would
/// have dropped the page, so only a hole (the file grown by a write further on, or by a
/// truncate up) can be there. Serving it short instead made the kernel take the page's end
/// for the end of the file.
fn cut_pages(pages: &[Bytes], first: u64, offset: u64, end: u64) -> Parts {
    let mut out = Parts::default();
    for (k, page) in pages.iter().enumerate() {
        let base = (first + k as u64) * CACHE_PAGE;
        let a = offset.saturating_sub(base) as usize;
        let b = (end - base).min(CACHE_PAGE) as usize;
        if a < b {
            let held = b.min(page.len());
            if a < held {
                out.push(page.slice(a..held));
            }
            // A page shorter than the range (past what the OSTs held): zeros.
            if b > held.max(a) {
                out.push(Bytes::from(vec![0u8; b - held.max(a)]));
            }
        }
    }
    out
}

/// Reads `[offset, offset + len)` of file `fid` through `layout`: every instantiated extent
/// from the OSTs at once, extents of uninstantiated components as zeros.
async fn read_layout_range(
    client: &ClientCore,
    ctx: &RequestContext,
    layout: &Layout,
    fid: Fid,
    offset: u64,
    len: u64,
) -> Result<Parts, ClientError> {
    let spans = layout::map_sparse(layout, fid, offset, len).map_err(map_err)?;
    let reads = spans.iter().map(|span| async move {
        match span {
            layout::Span::Data(pieces) => client.engine().read_parts(ctx, pieces).await,
            layout::Span::Hole(n) => {
                let mut zeros = Parts::default();
                zeros.push(Bytes::from(vec![0u8; *n as usize]));
                Ok(zeros)
            }
        }
    });
    let mut out = Parts::default();
    for part in futures::future::join_all(reads).await {
        out.extend(part?);
    }
    Ok(out)
}
