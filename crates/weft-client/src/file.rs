//! An open file: the handle's state and layout, and the modules that act on it —
//! `readahead` (reads through the data cache), `writeback` (buffered writes and their
//! background flushes), `sync` (flush, fsync, truncate, close), `replay` (reopening after
//! an MDT restart), `restore` (released files' data restored from their archive before a
//! read), `sparse` (holes) and `size` (the size shared by a file's handles).
//! The MDT calls a handle makes go through [`FileMeta`], so tests can run a file over a
//! fake MDT and fake object I/O.

use crate::client_core::ClientCore;
use crate::error::ClientError;
use crate::layout::{self, MapError, Piece};
use crate::pcc::local::{Kind, LocalCopy};
use bytes::BytesMut;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use weft_proto::layout::Layout;
use weft_proto::mdt::{AccessMode, Attr};
use weft_proto::{Errno, Fid, ObjectId, WireError};
use weft_rpc::RequestContext;

mod meta;
mod readahead;
mod replay;
mod restore;
pub(crate) mod size;
mod sparse;
mod sync;
#[cfg(test)]
mod tests;
mod writeback;

pub use meta::FileMeta;
use readahead::ReadAhead;
pub(crate) use restore::WHOLE_FILE_ASKS;
use size::OpenSize;
use writeback::Flush;

/// How to open a file (the subset of `open(2)` flags that matter here).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenOptions {
    /// Read, write or both.
    pub access: AccessMode,
    /// O_CREAT with this mode (type bits added by the library; umask already applied).
    pub create: Option<u32>,
    /// O_EXCL (with `create`).
    pub exclusive: bool,
    /// O_TRUNC.
    pub truncate: bool,
    /// O_APPEND.
    pub append: bool,
}

impl OpenOptions {
    /// Open for reading.
    pub fn read() -> Self {
        Self {
            access: AccessMode::Read,
            create: None,
            exclusive: false,
            truncate: false,
            append: false,
        }
    }

    /// Create (or truncate) for writing, like `creat(2)`.
    pub fn create(mode: u32) -> Self {
        Self {
            access: AccessMode::Write,
            create: Some(mode),
            exclusive: false,
            truncate: true,
            append: false,
        }
    }
}

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

/// An open file of a [`Client`](crate::Client).
pub struct File {
    /// What the file shares with its client's other files.
    core: Arc<ClientCore>,
    /// The context of the file's requests (the one it was opened in).
    ctx: RequestContext,
    fid: Fid,
    mdt: Arc<dyn FileMeta>,
    /// The MDT's handle; replaced when the file is opened again after an MDT restart.
    handle: AtomicU64,
    /// Held while the file is being opened again, so that it is opened once.
    reopening: tokio::sync::Mutex<()>,
    /// The layout as this handle knows it: replaced when a PFL component is instantiated
    /// (by this handle, or seen instantiated by another client).
    layout: parking_lot::RwLock<Option<Arc<Layout>>>,
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
    /// The file was released (HSM) at open and not seen wholly restored since: its data
    /// must be restored from the archive before the OSTs are read (`restore.rs`).
    released: Arc<AtomicBool>,
    /// The local copy this handle reads (and writes) instead of the OSTs, when the file
    /// is in the persistent client cache (`crate::pcc`).
    local: parking_lot::RwLock<Option<Arc<LocalCopy>>>,
    /// The node's eviction epoch at open: once a server has evicted the node, this
    /// handle's cached changes are refused (its flushes carry the epoch) and every call on
    /// it fails with EIO, as on Lustre (see [`weft_rpc::session`]).
    epoch: u64,
    state: tokio::sync::Mutex<State>,
}

fn errno(e: Errno, msg: impl Into<String>) -> ClientError {
    ClientError::Remote(WireError::new(e, msg))
}

/// What a call on a handle opened before an eviction of this node gets.
fn evicted_error() -> ClientError {
    errno(Errno::Io, weft_rpc::RpcError::Evicted.to_string())
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
        core: Arc<ClientCore>,
        ctx: RequestContext,
        mdt: Arc<dyn FileMeta>,
        handle: u64,
        attr: &Attr,
        layout: Option<Layout>,
        opts: OpenOptions,
    ) -> Self {
        let (access, append) = (opts.access, opts.append);
        let truncated = opts.truncate && access != AccessMode::Read;
        let size = core.open_sizes().join(attr.fid, attr.size, truncated);
        let epoch = core.cluster().session().epoch();
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
            core,
            ctx,
            fid: attr.fid,
            mdt,
            handle: AtomicU64::new(handle),
            reopening: tokio::sync::Mutex::new(()),
            layout: parking_lot::RwLock::new(layout.map(Arc::new)),
            access,
            append,
            opened: attr.clone(),
            created: false,
            size,
            released: Arc::new(AtomicBool::new(
                attr.hsm_flags & weft_proto::hsm::HSM_RELEASED != 0,
            )),
            local: parking_lot::RwLock::new(None),
            epoch,
            state: tokio::sync::Mutex::new(state),
        }
    }

    /// Reads (and writes) `local` from now on; a read-write copy's length is the size.
    pub(crate) fn attach_local(&self, local: Arc<LocalCopy>) -> Result<(), ClientError> {
        if local.kind == Kind::ReadWrite {
            self.size.set(self.size.get().max(local.len()?));
        }
        *self.local.write() = Some(local);
        Ok(())
    }

    /// The local copy this handle uses, if any.
    fn local(&self) -> Option<Arc<LocalCopy>> {
        self.local.read().clone()
    }

    /// Whether this handle reads a copy in the persistent client cache.
    pub fn pcc_attached(&self) -> bool {
        self.local.read().is_some()
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

    /// The file's layout, as this handle knows it.
    pub fn layout(&self) -> Option<Arc<Layout>> {
        self.layout.read().clone()
    }

    /// Keeps `layout` if it is newer than the one this handle knows.
    fn update_layout(&self, layout: Option<Layout>) {
        let Some(new) = layout else { return };
        let mut cur = self.layout.write();
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

    fn check_open(&self, st: &State) -> Result<(), ClientError> {
        if st.closed {
            Err(errno(Errno::BadF, "file is closed"))
        } else if self.evicted() {
            Err(evicted_error())
        } else {
            Ok(())
        }
    }

    /// Whether a server evicted this node since the file was opened: its handle, locks
    /// and cached changes are gone, and only a new open works.
    fn evicted(&self) -> bool {
        !self.core.cluster().session().admits(Some(self.epoch))
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
        self.core.release_dirty(dirty);
        self.core.open_sizes().leave(self.fid, &self.size);
        if !closed {
            if let Some(l) = self.local.get_mut().take()
                && l.kind == Kind::ReadWrite
            {
                l.handle_closed();
            }
            let (mdt, handle) = (self.mdt.clone(), self.handle());
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(async move {
                    let _ = mdt.close(handle, None, None, false).await;
                });
            }
        }
    }
}
