//! Write-back: writes go into the file's dirty extents (one copy from the caller), bounded
//! by the client-wide `osc.*.max_dirty_mb` budget. Once a file holds a few full RPCs per
//! stripe, its dirty data is flushed by a background task while the writer fills the next
//! buffer; at most one flush per file is in flight, so writes reach the OSTs in order. A
//! write error is kept and reported by the next fsync or close (and by later writes), as
//! POSIX asks. Reads, truncates and overlapping writes first wait for the flush.

use super::{File, State, errno};
use crate::cache::CACHE_PAGE;
use crate::error::ClientError;
use crate::layout::Piece;
use crate::params::Param;
use bytes::{Bytes, BytesMut};
use futures::FutureExt;
use tokio::task::JoinHandle;
use weft_proto::mdt::AccessMode;
use weft_proto::{Errno, ObjectId, WireError};
use weft_rpc::RequestContext;

/// What a background flush ends with: the objects it wrote with their allocated blocks,
/// or its error.
pub(super) type FlushResult = Result<Vec<((u32, ObjectId), u64)>, ClientError>;
/// A background flush.
pub(super) type Flush = JoinHandle<FlushResult>;

impl File {
    /// Waits for the background flush, keeping its error for fsync/close.
    pub(super) async fn settle(&self, st: &mut State) {
        if let Some(task) = st.flushing.take() {
            let done = task.await;
            self.absorb(st, done);
        }
    }

    /// Takes in the result of a finished background flush.
    fn absorb(&self, st: &mut State, done: Result<FlushResult, tokio::task::JoinError>) {
        match done {
            Ok(Ok(objects)) => {
                for (object, blocks) in objects {
                    st.touched.insert(object);
                    // Replies of one flush come in any order; allocation only grows
                    // between truncates (which forget the map).
                    let b = st.blocks.entry(object).or_insert(0);
                    *b = (*b).max(blocks);
                }
            }
            Ok(Err(e)) => {
                st.error.get_or_insert(e.into());
            }
            Err(e) => {
                st.error
                    .get_or_insert(WireError::new(Errno::Io, format!("flush task failed: {e}")));
            }
        }
    }

    /// Takes the dirty extents and writes them, all OSTs at once, returning the budget. The
    /// writes go in `ctx`, the context of the call that starts the flush.
    pub(super) fn start_flush(&self, ctx: &RequestContext, st: &mut State) {
        if st.dirty.is_empty() {
            return;
        }
        let extents = std::mem::take(&mut st.dirty);
        let bytes = std::mem::take(&mut st.dirty_bytes);
        let mut layout_pieces: Vec<(Vec<Piece>, Bytes)> = Vec::with_capacity(extents.len());
        for (off, data) in extents {
            let data = data.freeze();
            // Mapped once already when the data was buffered; a failure now is reported,
            // never silently dropped.
            match self.pieces(off, data.len() as u64) {
                Ok(p) => layout_pieces.push((p, data)),
                Err(e) => {
                    st.error.get_or_insert(e.into());
                }
            }
        }
        // The data is this handle's: after an eviction it must not be sent (see
        // `weft_rpc::session`), however long its flush waits for the connection.
        let (client, ctx) = (self.core.clone(), ctx.clone().in_epoch(self.epoch));
        st.flushing = Some(tokio::spawn(async move {
            let result = async {
                let mut touched = Vec::new();
                let writes = layout_pieces
                    .iter()
                    .map(|(pieces, data)| client.engine().write(&ctx, pieces, data, false));
                for r in futures::future::join_all(writes).await {
                    touched.extend(r?.into_iter().map(|(ost, obj, a)| ((ost, obj), a.blocks)));
                }
                Ok(touched)
            }
            .await;
            client.release_dirty(bytes);
            result
        }));
    }

    /// Writes every dirty byte and waits for it; returns the first write error since the
    /// last report.
    pub(super) async fn flush_locked(
        &self,
        ctx: &RequestContext,
        st: &mut State,
    ) -> Result<(), ClientError> {
        self.settle(st).await;
        self.start_flush(ctx, st);
        self.settle(st).await;
        match st.error.take() {
            Some(e) => Err(ClientError::Remote(e)),
            None => Ok(()),
        }
    }

    /// Writes `data` at `offset` (at the end of the file for an O_APPEND handle); returns
    /// the offset written at. Data is buffered; errors may surface at fsync or close. A
    /// write larger than a quarter of the dirty budget is buffered a part at a time.
    pub async fn write_at(&self, offset: u64, data: &[u8]) -> Result<u64, ClientError> {
        self.write_at_in(&self.ctx, offset, data).await
    }

    /// [`write_at`](Self::write_at) with its OST requests (grants, and the flushes it
    /// starts, which run on in the background) in `ctx`.
    pub async fn write_at_in(
        &self,
        ctx: &RequestContext,
        offset: u64,
        data: &[u8],
    ) -> Result<u64, ClientError> {
        let part = (self.core.params().mb(Param::MaxDirtyMb) / 4).max(CACHE_PAGE) as usize;
        if data.len() <= part {
            return self.write_part(ctx, offset, data, self.append).await;
        }
        let mut parts = data.chunks(part);
        let first = parts.next().unwrap_or_default();
        let start = self.write_part(ctx, offset, first, self.append).await?;
        let mut at = start + first.len() as u64;
        for p in parts {
            self.write_part(ctx, at, p, false).await?;
            at += p.len() as u64;
        }
        Ok(start)
    }

    async fn write_part(
        &self,
        ctx: &RequestContext,
        offset: u64,
        data: &[u8],
        append: bool,
    ) -> Result<u64, ClientError> {
        if self.access == AccessMode::Read {
            return Err(errno(Errno::BadF, "file not open for writing"));
        }
        let len = data.len() as u64;
        let mut st = self.state.lock().await;
        self.check_open(&st)?;
        if let Some(e) = st.error.take() {
            return Err(ClientError::Remote(e));
        }
        let offset = if append { self.size.get() } else { offset };
        let end = offset
            .checked_add(len)
            .ok_or_else(|| errno(Errno::FBig, "write past the largest offset"))?;
        if len == 0 {
            return Ok(offset);
        }
        if let Some(local) = self.local() {
            local.write(offset, Bytes::copy_from_slice(data)).await?;
            self.size.grow(end);
            return Ok(offset);
        }
        // Fail now, not at flush: the range must map to objects (no uninstantiated
        // component) and the OSTs must promise the space (grants).
        let pieces = self.pieces_for_write(offset, len).await?;
        self.core.engine().reserve(ctx, &pieces).await?;
        // Overlapping an extent already dirty: write that out first (keeps extents disjoint).
        let overlaps = st
            .dirty
            .range(..end)
            .next_back()
            .is_some_and(|(o, d)| o + d.len() as u64 > offset);
        let appends = st
            .dirty
            .last_key_value()
            .is_some_and(|(o, d)| o + d.len() as u64 == offset);
        if overlaps && !appends {
            self.flush_locked(ctx, &mut st).await?;
        }
        // Take the budget before buffering, in pieces no larger than a tenth of it.
        self.core.acquire_dirty(len).await?;
        self.buffer(&mut st, offset, data);
        if st.dirty_bytes >= self.flush_threshold() {
            // Double buffering: wait for the previous flush, start this one, keep writing.
            self.settle(&mut st).await;
            self.start_flush(ctx, &mut st);
        }
        Ok(offset)
    }

    /// Buffers a write that appends to what this handle already buffers (the sequential
    /// writer's case), without waiting for anything: no lock held elsewhere, the range
    /// mapped to objects, grant and dirty budget already available, and no flush to wait
    /// for. Returns false, having changed nothing, when any of that would need a wait;
    /// the caller then uses [`write_at`](Self::write_at). Starts a background flush as
    /// `write_at` does, so it must run inside the client's runtime. The FUSE mount calls
    /// this on the thread that read the request, saving a copy and a thread switch.
    pub fn try_write_buffered(&self, offset: u64, data: &[u8]) -> bool {
        self.try_write_buffered_in(&self.ctx, offset, data)
    }

    /// [`try_write_buffered`](Self::try_write_buffered) with the flush it may start in
    /// `ctx`.
    pub fn try_write_buffered_in(&self, ctx: &RequestContext, offset: u64, data: &[u8]) -> bool {
        let len = data.len() as u64;
        let part = (self.core.params().mb(Param::MaxDirtyMb) / 4).max(CACHE_PAGE);
        if self.access == AccessMode::Read
            || self.append
            || len == 0
            || len > part
            || self.evicted()
        {
            return false;
        }
        let Ok(mut st) = self.state.try_lock() else {
            return false;
        };
        if st.closed || st.error.is_some() || offset.checked_add(len).is_none() {
            return false;
        }
        if let Some(local) = self.local() {
            drop(st);
            if local.write_now(offset, data).is_err() {
                // `write_at` tries again and reports the error.
                return false;
            }
            self.size.grow(offset + len);
            return true;
        }
        let appends = st
            .dirty
            .last_key_value()
            .is_none_or(|(o, d)| o + d.len() as u64 == offset);
        let flush_due = st.dirty_bytes + len >= self.flush_threshold();
        if !appends || (flush_due && st.flushing.as_ref().is_some_and(|f| !f.is_finished())) {
            return false;
        }
        let Ok(pieces) = self.pieces(offset, len) else {
            return false;
        };
        if !self.core.try_acquire_dirty(len) {
            return false;
        }
        if !self.core.engine().try_reserve(&pieces) {
            self.core.release_dirty(len);
            return false;
        }
        self.buffer(&mut st, offset, data);
        if flush_due {
            // The previous flush has finished: taking its result does not wait.
            if let Some(done) = st.flushing.take().and_then(|f| f.now_or_never()) {
                self.absorb(&mut st, done);
            }
            self.start_flush(ctx, &mut st);
        }
        true
    }

    /// Copies `data` into the dirty extents (budget and grant already taken).
    fn buffer(&self, st: &mut State, offset: u64, data: &[u8]) {
        let len = data.len() as u64;
        let end = offset + len;
        self.core.cache().invalidate_range(self.fid, offset, end);
        match st.dirty.last_entry() {
            Some(mut last) if *last.key() + last.get().len() as u64 == offset => {
                last.get_mut().extend_from_slice(data)
            }
            _ => {
                // Room for a whole flush, so sequential writes append without reallocating.
                let mut buf = BytesMut::with_capacity((len.max(self.flush_threshold())) as usize);
                buf.extend_from_slice(data);
                st.dirty.insert(offset, buf);
            }
        }
        st.dirty_bytes += len;
        self.size.grow(end);
        st.modified = true;
    }

    /// Dirty bytes that trigger a background flush: enough full RPCs to keep every stripe's
    /// pipeline (`max_rpcs_in_flight`) busy, within a quarter of the dirty budget.
    fn flush_threshold(&self) -> u64 {
        let p = self.core.params();
        let stripes = self
            .layout()
            .as_ref()
            .and_then(|l| l.components.first())
            .map_or(1, |c| c.osts.len().max(1)) as u64;
        let in_flight = p.get(Param::MaxRpcsInFlight).max(2);
        (p.rpc_bytes() * stripes * in_flight)
            .min(p.mb(Param::MaxDirtyMb) / 4)
            .max(CACHE_PAGE)
    }
}
