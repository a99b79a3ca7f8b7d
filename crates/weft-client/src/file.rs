//! An open file: striped reads with read-ahead through the data cache, buffered writes
//! flushed in full-size RPCs, truncate, fsync and close; holes in `sparse`.
//!
//! Write-back: writes go into the file's dirty extents (one copy from the caller), bounded
//! by the client-wide `osc.*.max_dirty_mb` budget. Once a file holds a few full RPCs per
//! stripe, its dirty data is flushed by a background task while the writer fills the next
//! buffer; at most one flush per file is in flight, so writes reach the OSTs in order. A
//! write error is kept and reported by the next fsync or close (and by later writes), as
//! POSIX asks. Reads, truncates and overlapping writes first wait for the flush.

use crate::cache::CACHE_PAGE;
use crate::client::{Client, OpenOptions};
use crate::error::ClientError;
use crate::io::Parts;
use crate::layout::{self, MapError, Piece};
use crate::mdt::MdtClient;
use crate::params::Param;
use bytes::{Bytes, BytesMut};
use futures::FutureExt;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::task::JoinHandle;
use weft_proto::layout::Layout;
use weft_proto::mdt::{AccessMode, Attr};
use weft_proto::{Errno, Fid, ObjectId, WireError};

mod size;
mod sparse;

use size::OpenSize;
pub(crate) use size::OpenSizes;

/// Read-ahead state of one open file.
#[derive(Debug, Default)]
struct ReadAhead {
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

/// What a background flush ends with: the objects it wrote with their allocated blocks,
/// or its error.
type FlushResult = Result<Vec<((u32, ObjectId), u64)>, ClientError>;
/// A background flush.
type Flush = JoinHandle<FlushResult>;

struct State {
    dirty: BTreeMap<u64, BytesMut>,
    dirty_bytes: u64,
    flushing: Option<Flush>,
    error: Option<WireError>,
    modified: bool,
    touched: BTreeSet<(u32, ObjectId)>,
    /// 512-byte blocks of every object this handle wrote, as its last write reply said:
    /// their sum is the file's `st_blocks` as far as this handle knows.
    blocks: BTreeMap<(u32, ObjectId), u64>,
    ra: ReadAhead,
    closed: bool,
}

impl State {
    /// The blocks this handle saw its objects take, if it wrote any: the MDT keeps the
    /// largest figure it is told (other writers may know of other objects).
    fn known_blocks(&self) -> Option<u64> {
        (!self.blocks.is_empty()).then(|| self.blocks.values().sum())
    }
}

/// An open file of a [`Client`].
pub struct File {
    client: Arc<Client>,
    fid: Fid,
    mdt: Arc<MdtClient>,
    /// The MDT's handle; replaced when the file is opened again after an MDT restart.
    handle: AtomicU64,
    /// Held while the file is being opened again, so that it is opened once.
    reopening: tokio::sync::Mutex<()>,
    /// The layout as this handle knows it: replaced when a PFL component is instantiated
    /// (by this handle, or seen instantiated by another client).
    layout: std::sync::RwLock<Option<Arc<Layout>>>,
    access: AccessMode,
    append: bool,
    /// The attributes the MDT returned at open (with the size from the OSTs if the file
    /// was open elsewhere).
    opened: Attr,
    /// This open created the file.
    created: bool,
    /// The file's size as every handle of it in this client knows it (the size at open,
    /// grown by writes, set by truncates).
    size: Arc<OpenSize>,
    state: tokio::sync::Mutex<State>,
}

fn errno(e: Errno, msg: impl Into<String>) -> ClientError {
    ClientError::Remote(WireError::new(e, msg))
}

fn map_err(e: MapError) -> ClientError {
    match e {
        MapError::NotInstantiated { .. } => errno(Errno::NotSup, e.to_string()),
        MapError::Overflow => errno(Errno::FBig, e.to_string()),
        MapError::Uncovered(_) => errno(Errno::Io, e.to_string()),
    }
}

impl File {
    pub(crate) fn new(
        client: Arc<Client>,
        mdt: Arc<MdtClient>,
        handle: u64,
        attr: &Attr,
        layout: Option<Layout>,
        opts: OpenOptions,
    ) -> Self {
        let (access, append) = (opts.access, opts.append);
        let truncated = opts.truncate && access != AccessMode::Read;
        let size = client.open_sizes().join(attr.fid, attr.size, truncated);
        let state = State {
            dirty: BTreeMap::new(),
            dirty_bytes: 0,
            flushing: None,
            error: None,
            modified: false,
            touched: BTreeSet::new(),
            blocks: BTreeMap::new(),
            ra: ReadAhead::default(),
            closed: false,
        };
        Self {
            client,
            fid: attr.fid,
            mdt,
            handle: AtomicU64::new(handle),
            reopening: tokio::sync::Mutex::new(()),
            layout: std::sync::RwLock::new(layout.map(Arc::new)),
            access,
            append,
            opened: attr.clone(),
            created: false,
            size,
            state: tokio::sync::Mutex::new(state),
        }
    }

    /// Marks the file as created by this open.
    pub(crate) fn set_created(&mut self) {
        self.created = true;
    }

    /// Whether this open created the file (it then has no data and no extended
    /// attributes yet).
    pub fn created(&self) -> bool {
        self.created
    }

    /// The attributes as of the open: what a caller needs right after creating or opening
    /// the file, without asking the MDT again.
    pub fn attr_at_open(&self) -> &Attr {
        &self.opened
    }

    /// The file's FID.
    pub fn fid(&self) -> Fid {
        self.fid
    }

    /// The MDT handle this file is open as.
    pub(crate) fn handle(&self) -> u64 {
        self.handle.load(Ordering::Acquire)
    }

    /// Sends an MDT request naming this file's handle. An MDT that restarted has lost
    /// every handle (they live in its memory) and answers EBADF: the file is then opened
    /// again by FID — as root, since the open was allowed when it was made, as Lustre's
    /// open replay does — and the request is sent once more under the new handle. An
    /// unlinked file stays reachable this way for the MDT's grace period after a restart.
    async fn on_handle<T, F, Fut>(&self, call: F) -> Result<T, ClientError>
    where
        F: Fn(u64) -> Fut,
        Fut: std::future::Future<Output = Result<T, ClientError>>,
    {
        let handle = self.handle();
        match call(handle).await {
            Err(e) if e.errno() == Errno::BadF => {
                self.reopen(handle).await?;
                call(self.handle()).await
            }
            other => other,
        }
    }

    /// Opens the file again in place of the lost handle `stale`.
    async fn reopen(&self, stale: u64) -> Result<(), ClientError> {
        let _one = self.reopening.lock().await;
        if self.handle() != stale {
            return Ok(()); // Another request of this file did it meanwhile.
        }
        let flags = weft_proto::mdt::OpenFlags {
            access: self.access,
            truncate: false,
        };
        let cred = weft_proto::mdt::Credentials::root();
        let opened = self.mdt.open(self.fid, flags, &cred).await?;
        self.update_layout(opened.layout);
        self.handle.store(opened.handle, Ordering::Release);
        tracing::info!(fid = %self.fid, "file opened again: its MDT handle was lost");
        Ok(())
    }

    /// The file's layout, as this handle knows it.
    pub fn layout(&self) -> Option<Arc<Layout>> {
        self.layout
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Keeps `layout` if it is newer than the one this handle knows.
    fn update_layout(&self, layout: Option<Layout>) {
        let Some(new) = layout else { return };
        let mut cur = self
            .layout
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if cur.as_ref().is_none_or(|c| c.generation < new.generation) {
            *cur = Some(Arc::new(new));
        }
    }

    /// Asks the MDT for the file's current layout.
    async fn refresh_layout(&self) -> Result<Option<Arc<Layout>>, ClientError> {
        let l = self.mdt.get_layout(self.fid).await?;
        self.update_layout(l);
        Ok(self.layout())
    }

    /// The size as this client knows it: the size at open, grown by writes through any
    /// of its handles of the file, set by truncates.
    pub async fn size(&self) -> u64 {
        self.size.get()
    }

    fn pieces(&self, offset: u64, len: u64) -> Result<Vec<Piece>, ClientError> {
        let layout = self
            .layout()
            .ok_or_else(|| errno(Errno::Io, "file has no layout"))?;
        layout::map_range(&layout, self.fid, offset, len).map_err(map_err)
    }

    /// Maps a range about to be written, first instantiating the PFL components it reaches
    /// that have no OSTs yet.
    async fn pieces_for_write(&self, offset: u64, len: u64) -> Result<Vec<Piece>, ClientError> {
        match self.pieces(offset, len) {
            Err(ClientError::Remote(e)) if e.errno == Errno::NotSup => {
                let layout = self
                    .on_handle(|h| self.mdt.instantiate(h, offset, offset + len))
                    .await?;
                self.update_layout(layout);
                self.pieces(offset, len)
            }
            other => other,
        }
    }

    /// Reads `[offset, offset + len)` from the OSTs. Extents of components that are not
    /// instantiated read as zeros, after checking once that no other client has
    /// instantiated them since this handle learnt the layout.
    async fn read_range(&self, offset: u64, len: u64) -> Result<Parts, ClientError> {
        let Some(mut layout) = self.layout() else {
            return Err(errno(Errno::Io, "file has no layout"));
        };
        if layout::has_hole(&layout, offset, len)
            && let Some(fresh) = self.refresh_layout().await?
        {
            layout = fresh;
        }
        read_layout_range(&self.client, &layout, self.fid, offset, len).await
    }

    fn check_open(&self, st: &State) -> Result<(), ClientError> {
        if st.closed {
            Err(errno(Errno::BadF, "file is closed"))
        } else {
            Ok(())
        }
    }

    /// Waits for the background flush, keeping its error for fsync/close.
    async fn settle(&self, st: &mut State) {
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

    /// Takes the dirty extents and writes them, all OSTs at once, returning the budget.
    fn start_flush(&self, st: &mut State) {
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
        let client = self.client.clone();
        let jobid = weft_rpc::jobid::current();
        st.flushing = Some(tokio::spawn(weft_rpc::jobid::with_jobid(
            jobid,
            async move {
                let result = async {
                    let mut touched = Vec::new();
                    let writes = layout_pieces
                        .iter()
                        .map(|(pieces, data)| client.engine().write(pieces, data, false));
                    for r in futures::future::join_all(writes).await {
                        touched.extend(r?.into_iter().map(|(ost, obj, a)| ((ost, obj), a.blocks)));
                    }
                    Ok(touched)
                }
                .await;
                client.release_dirty(bytes);
                result
            },
        )));
    }

    /// Writes every dirty byte and waits for it; returns the first write error since the
    /// last report.
    async fn flush_locked(&self, st: &mut State) -> Result<(), ClientError> {
        self.settle(st).await;
        self.start_flush(st);
        self.settle(st).await;
        match st.error.take() {
            Some(e) => Err(ClientError::Remote(e)),
            None => Ok(()),
        }
    }

    /// Reads up to `len` bytes at `offset`; fewer at the end of the file.
    pub async fn read_at(&self, offset: u64, len: u64) -> Result<Bytes, ClientError> {
        if self.access == AccessMode::Write {
            return Err(errno(Errno::BadF, "file not open for reading"));
        }
        let mut st = self.state.lock().await;
        self.check_open(&st)?;
        if !st.dirty.is_empty() || st.flushing.is_some() {
            // Read your own writes: put them on the OSTs first.
            let r = self.flush_locked(&mut st).await;
            if let Err(e) = r {
                st.error = e.remote().cloned();
                return Err(e);
            }
        }
        let size = self.size.get();
        let end = offset.saturating_add(len).min(size);
        if offset >= end {
            return Ok(Bytes::new());
        }
        // Sequential readers get a growing window; a jump resets it. Readers that jump by
        // the same distance each time (one record of every N) are strided: the next
        // records are fetched ahead instead.
        let ra_max = self
            .client
            .params()
            .mb(Param::MaxReadAheadPerFileMb)
            .min(self.client.params().mb(Param::MaxReadAheadMb));
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
        let generation = self.client.cache().generation(self.fid);
        let window = st.ra.window;
        let strided = !sequential && st.ra.stride_hits >= 2 && ra_max > 0;
        let stride = st.ra.stride;
        drop(st);
        if strided {
            let data = self.read_cached(offset, end, size, generation).await?;
            let record = end - offset;
            let ahead = STRIDE_AHEAD.min(ra_max / record.max(1)).max(1);
            for k in 1..=ahead {
                let a = offset.saturating_add(stride.saturating_mul(k));
                let b = a.saturating_add(record).min(size);
                if a < b {
                    self.prefetch(a, b, size, generation);
                }
            }
            return Ok(data);
        }
        if window == 0 {
            return Ok(self.read_range(offset, end - offset).await?.concat());
        }
        // Sequential: through the cache, then keep the window ahead full.
        let data = self.read_cached(offset, end, size, generation).await?;
        let mut st = self.state.lock().await;
        let ahead_end = self.readahead_stop(st.ra.last_end.max(end).saturating_add(window), size);
        let from = st.ra.prefetched_to.max(end);
        if from < ahead_end {
            st.ra.prefetched_to = ahead_end;
            drop(st);
            self.prefetch(from, ahead_end, size, generation);
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
        if self.access == AccessMode::Write {
            return None;
        }
        let mut st = self.state.try_lock().ok()?;
        if st.closed || !st.dirty.is_empty() || st.flushing.is_some() {
            return None;
        }
        let ra_max = self
            .client
            .params()
            .mb(Param::MaxReadAheadPerFileMb)
            .min(self.client.params().mb(Param::MaxReadAheadMb));
        let size = self.size.get();
        let end = offset.saturating_add(len).min(size);
        if offset >= end || ra_max == 0 || !st.ra.continues(offset) {
            return None;
        }
        let cache = self.client.cache();
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
            self.prefetch(from, ahead_end, size, generation);
        }
        Some(data)
    }

    /// Reads `[offset, end)` from cache pages, fetching the missing ones in one pass; they
    /// are cached if the file's cache generation is still `generation`.
    async fn read_cached(
        &self,
        offset: u64,
        end: u64,
        size: u64,
        generation: u64,
    ) -> Result<Bytes, ClientError> {
        let cache = self.client.cache();
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
            let fetched = self.read_range(start, stop - start).await?;
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
        let rpc = self.client.params().rpc_bytes().max(CACHE_PAGE);
        ahead_end / rpc * rpc
    }

    /// Fetches `[start, end)` into the cache in the background, within the client's
    /// read-ahead budget; pages already cached are skipped, and nothing is fetched when the
    /// budget is spent, or when a write dropped the file's pages since `generation`.
    fn prefetch(&self, start: u64, end: u64, size: u64, generation: u64) {
        let Some(layout) = self.layout() else {
            return;
        };
        let fid = self.fid;
        let (first, last) = (start / CACHE_PAGE, (end - 1) / CACHE_PAGE);
        // Runs of missing pages, each fetched with one engine read (full-size RPCs to every
        // stripe at once) and cut into pages without copying.
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for i in first..=last {
            if self.client.cache().contains(fid, i) || self.client.cache().is_fetching(fid, i) {
                continue;
            }
            match runs.last_mut() {
                Some((_, hi)) if *hi + 1 == i => *hi = i,
                _ => runs.push((i, i)),
            }
        }
        let jobid = weft_rpc::jobid::current();
        for (lo, hi) in runs {
            let a = lo * CACHE_PAGE;
            let b = ((hi + 1) * CACHE_PAGE).min(size);
            if a >= b {
                continue;
            }
            let Some(permit) = self.client.readahead_permit(b - a) else {
                return;
            };
            let fetching = self.client.cache().begin_fetch(fid, lo, hi);
            let (client, layout, jobid) = (self.client.clone(), layout.clone(), jobid.clone());
            tokio::spawn(weft_rpc::jobid::with_jobid(jobid, async move {
                if let Ok(data) = read_layout_range(&client, &layout, fid, a, b - a).await {
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
            }));
        }
    }

    /// Writes `data` at `offset` (at the end of the file for an O_APPEND handle); returns
    /// the offset written at. Data is buffered; errors may surface at fsync or close. A
    /// write larger than a quarter of the dirty budget is buffered a part at a time.
    pub async fn write_at(&self, offset: u64, data: &[u8]) -> Result<u64, ClientError> {
        let part = (self.client.params().mb(Param::MaxDirtyMb) / 4).max(CACHE_PAGE) as usize;
        if data.len() <= part {
            return self.write_part(offset, data, self.append).await;
        }
        let mut parts = data.chunks(part);
        let first = parts.next().unwrap_or_default();
        let start = self.write_part(offset, first, self.append).await?;
        let mut at = start + first.len() as u64;
        for p in parts {
            self.write_part(at, p, false).await?;
            at += p.len() as u64;
        }
        Ok(start)
    }

    async fn write_part(&self, offset: u64, data: &[u8], append: bool) -> Result<u64, ClientError> {
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
        // Fail now, not at flush: the range must map to objects (no uninstantiated
        // component) and the OSTs must promise the space (grants).
        let pieces = self.pieces_for_write(offset, len).await?;
        self.client.engine().reserve(&pieces).await?;
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
            self.flush_locked(&mut st).await?;
        }
        // Take the budget before buffering, in pieces no larger than a tenth of it.
        self.client.acquire_dirty(len).await?;
        self.buffer(&mut st, offset, data);
        if st.dirty_bytes >= self.flush_threshold() {
            // Double buffering: wait for the previous flush, start this one, keep writing.
            self.settle(&mut st).await;
            self.start_flush(&mut st);
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
        let len = data.len() as u64;
        let part = (self.client.params().mb(Param::MaxDirtyMb) / 4).max(CACHE_PAGE);
        if self.access == AccessMode::Read || self.append || len == 0 || len > part {
            return false;
        }
        let Ok(mut st) = self.state.try_lock() else {
            return false;
        };
        if st.closed || st.error.is_some() || offset.checked_add(len).is_none() {
            return false;
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
        if !self.client.try_acquire_dirty(len) {
            return false;
        }
        if !self.client.engine().try_reserve(&pieces) {
            self.client.release_dirty(len);
            return false;
        }
        self.buffer(&mut st, offset, data);
        if flush_due {
            // The previous flush has finished: taking its result does not wait.
            if let Some(done) = st.flushing.take().and_then(|f| f.now_or_never()) {
                self.absorb(&mut st, done);
            }
            self.start_flush(&mut st);
        }
        true
    }

    /// Copies `data` into the dirty extents (budget and grant already taken).
    fn buffer(&self, st: &mut State, offset: u64, data: &[u8]) {
        let len = data.len() as u64;
        let end = offset + len;
        self.client.cache().invalidate_range(self.fid, offset, end);
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
        let p = self.client.params();
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

    /// Writes buffered data to the OSTs and records the size (and the new data version) on
    /// the MDT, keeping the file open; the OSTs are not asked to make it durable. This is
    /// what `close(2)` needs: the next open on any client sees the bytes and the size
    /// (close-to-open), and write errors reach the closer, without fsync's cost. Returns
    /// the first write error since the last report.
    pub async fn flush(&self) -> Result<(), ClientError> {
        let mut st = self.state.lock().await;
        self.check_open(&st)?;
        self.flush_locked(&mut st).await?;
        self.merge_size(&mut st).await
    }

    /// Whether [`flush`](Self::flush) would find nothing to do and succeed: no buffered
    /// bytes, no flush in flight, no write error waiting, nothing to record on the MDT and
    /// the handle still open. False when that cannot be told without waiting (another
    /// call holds the handle's state), so a caller may skip `flush` only on `true`.
    pub fn nothing_to_flush(&self) -> bool {
        self.state.try_lock().is_ok_and(|st| {
            !st.closed
                && st.dirty.is_empty()
                && st.flushing.is_none()
                && st.error.is_none()
                && !st.modified
        })
    }

    /// Records what this handle wrote on the MDT (size, times, data version), once per
    /// batch of writes: a later close does not stamp the times again, so times set
    /// explicitly after a flush (`cp -p`, `touch -d`) stay.
    async fn merge_size(&self, st: &mut State) -> Result<(), ClientError> {
        if st.modified {
            let (size, blocks) = (self.size.get(), st.known_blocks());
            self.on_handle(|h| self.mdt.size_merge(h, Some(size), blocks, true))
                .await?;
            st.modified = false;
        }
        Ok(())
    }

    /// Writes this handle's buffered bytes to the OSTs and waits, recording nothing on the
    /// MDT: a truncate made through another handle (or by path) must cut them, so it comes
    /// first. A write error stays for this handle's next write, fsync or close.
    pub async fn write_back(&self) {
        let mut st = self.state.lock().await;
        if st.closed {
            return;
        }
        self.settle(&mut st).await;
        self.start_flush(&mut st);
        self.settle(&mut st).await;
    }

    /// Takes `size` as the file's size after a truncate made elsewhere (following
    /// [`write_back`](Self::write_back)): [`size`](Self::size), later appends and the size
    /// recorded at close start from it.
    pub async fn size_changed(&self, size: u64) {
        let mut st = self.state.lock().await;
        self.size.set(size);
        st.blocks.clear();
    }

    /// Writes buffered data, makes it durable on the OSTs, records the size on the MDT
    /// and makes that (and this client's other metadata changes) durable there.
    pub async fn fsync(&self) -> Result<(), ClientError> {
        let mut st = self.state.lock().await;
        self.check_open(&st)?;
        self.flush_locked(&mut st).await?;
        let touched = std::mem::take(&mut st.touched);
        let syncs = touched
            .iter()
            .map(|&(ost, obj)| self.client.engine().sync(ost, obj));
        for r in futures::future::join_all(syncs).await {
            r?;
        }
        self.merge_size(&mut st).await?;
        self.client.sync_metadata().await
    }

    /// Sets the file's size: drops buffered data past it, punches every object to its share
    /// of the new size, and records the size on the MDT.
    pub async fn truncate(&self, size: u64) -> Result<(), ClientError> {
        let mut st = self.state.lock().await;
        self.check_open(&st)?;
        self.flush_locked(&mut st).await?;
        // What was written before the truncate gets its data version now; the truncate
        // itself sets size, times and version on the MDT.
        self.merge_size(&mut st).await?;
        // Another client may have instantiated components this handle has not seen.
        let layout = self.refresh_layout().await?;
        self.client
            .truncate_objects(self.fid, layout.as_deref(), size)
            .await?;
        let set = weft_proto::mdt::SetAttr {
            size: Some(size),
            ..Default::default()
        };
        self.mdt
            .setattr(self.fid, set, &weft_proto::mdt::Credentials::root())
            .await?;
        self.client.cache().invalidate(self.fid);
        self.size.set(size);
        st.blocks.clear();
        Ok(())
    }

    /// Writes what is buffered and closes the handle, merging the size into the MDT. The
    /// first write error since the last fsync is returned (after the handle is closed).
    pub async fn close(&self) -> Result<(), ClientError> {
        let mut st = self.state.lock().await;
        self.check_open(&st)?;
        let flushed = self.flush_locked(&mut st).await;
        st.closed = true;
        let size = st.modified.then(|| self.size.get());
        let blocks = st.modified.then(|| st.known_blocks()).flatten();
        let modified = st.modified;
        let closed = self
            .on_handle(|h| self.mdt.close(h, size, blocks, modified))
            .await;
        flushed.and(closed)
    }
}

impl Drop for File {
    fn drop(&mut self) {
        // A handle dropped without close: release it on the MDT in the background (its
        // buffered data, if any, is lost, as with a process killed before close).
        let (closed, dirty) = self
            .state
            .try_lock()
            .map_or((false, 0), |s| (s.closed, s.dirty_bytes));
        // Buffered bytes that will never be flushed go back to the client's budget.
        self.client.release_dirty(dirty);
        self.client.open_sizes().leave(self.fid, &self.size);
        if !closed {
            let (mdt, handle) = (self.mdt.clone(), self.handle());
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(async move {
                    let _ = mdt.close(handle, None, None, false).await;
                });
            }
        }
    }
}

/// Bytes `[offset, end)` of a file out of its consecutive cache pages from page `first` on:
/// a slice of the page when one page holds them all, else a copy.
///
/// A page shorter than [`CACHE_PAGE`] was fetched when the file ended inside it; `end` is
/// the size now, so what lies past the page's bytes reads as zeros: a write there would
/// have dropped the page, so only a hole (the file grown by a write further on, or by a
/// truncate up) can be there. Serving it short instead made the kernel take the page's end
/// for the end of the file.
fn cut_pages(pages: &[Bytes], first: u64, offset: u64, end: u64) -> Bytes {
    if let [page] = pages {
        let base = first * CACHE_PAGE;
        let (a, b) = ((offset - base) as usize, (end - base) as usize);
        if b <= page.len() {
            return page.slice(a..b);
        }
    }
    let mut out = BytesMut::with_capacity((end - offset) as usize);
    for (k, page) in pages.iter().enumerate() {
        let base = (first + k as u64) * CACHE_PAGE;
        let a = offset.saturating_sub(base) as usize;
        let b = (end - base).min(CACHE_PAGE) as usize;
        if a < b {
            let held = b.min(page.len());
            if a < held {
                out.extend_from_slice(&page[a..held]);
            }
            out.resize(out.len() + (b - held.max(a)), 0);
        }
    }
    out.freeze()
}

/// Reads `[offset, offset + len)` of file `fid` through `layout`: every instantiated extent
/// from the OSTs at once, extents of uninstantiated components as zeros.
async fn read_layout_range(
    client: &Client,
    layout: &Layout,
    fid: Fid,
    offset: u64,
    len: u64,
) -> Result<Parts, ClientError> {
    let spans = layout::map_sparse(layout, fid, offset, len).map_err(map_err)?;
    let reads = spans.iter().map(|span| async move {
        match span {
            layout::Span::Data(pieces) => client.engine().read_parts(pieces).await,
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
