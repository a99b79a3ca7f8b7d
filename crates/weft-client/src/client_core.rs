//! The core of a mounted client that its files share: the cluster view, the tunables,
//! the parallel I/O engine, the data cache, the dirty-data and read-ahead budgets and the
//! sizes of open files. A [`crate::Client`] is this core plus the namespace's caches and a
//! request context; a [`crate::File`] holds only the core (and the context it was opened
//! in), so the file modules never reach back into the client.

use crate::budget::Budget;
use crate::cache::DataCache;
use crate::cluster::Cluster;
use crate::error::ClientError;
use crate::file::size::OpenSizes;
use crate::io::{IoEngine, ObjectTargets};
use crate::layout;
use crate::params::{ClientParams, Param};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::OwnedSemaphorePermit;
use weft_proto::layout::Layout;
use weft_proto::{Errno, Fid, WireError};
use weft_rpc::RequestContext;

/// What a client's handles and files share (see the module's documentation).
pub struct ClientCore {
    pub(crate) cluster: Arc<Cluster>,
    pub(crate) params: Arc<ClientParams>,
    pub(crate) engine: Arc<IoEngine>,
    pub(crate) cache: DataCache,
    /// Dirty-data budget in KiB (`max_dirty_mb`).
    dirty: Budget,
    /// Read-ahead budget in KiB (`max_read_ahead_mb`).
    readahead: Budget,
    /// The size of every open file, shared by its handles.
    open_sizes: OpenSizes,
}

const KIB: u64 = 1024;

impl ClientCore {
    /// The core of a client over `cluster` whose object I/O goes to `objects`, resending
    /// data RPCs that fail to reach an object for `io_retry`.
    pub(crate) fn new(
        cluster: Arc<Cluster>,
        params: Arc<ClientParams>,
        objects: Arc<dyn ObjectTargets>,
        io_retry: Duration,
    ) -> Self {
        let engine = Arc::new(IoEngine::with_targets(objects, params.clone(), io_retry));
        let dirty = Budget::new(params.mb(Param::MaxDirtyMb) / KIB);
        let readahead = Budget::new(params.mb(Param::MaxReadAheadMb) / KIB);
        let cache = DataCache::new(params.clone());
        Self {
            cluster,
            params,
            engine,
            cache,
            dirty,
            readahead,
            open_sizes: OpenSizes::default(),
        }
    }

    /// Bytes written by applications and not yet sent to the OSTs (within `max_dirty_mb`).
    pub fn dirty_bytes(&self) -> u64 {
        self.dirty.in_use() * KIB
    }

    /// The cluster view (configuration and per-target clients).
    pub fn cluster(&self) -> &Arc<Cluster> {
        &self.cluster
    }

    /// The client's tunables.
    pub fn params(&self) -> &Arc<ClientParams> {
        &self.params
    }

    pub(crate) fn engine(&self) -> &Arc<IoEngine> {
        &self.engine
    }

    pub(crate) fn cache(&self) -> &DataCache {
        &self.cache
    }

    /// Bytes held in the data cache.
    pub fn cached_bytes(&self) -> u64 {
        self.cache.bytes()
    }

    /// Waits until `bytes` of dirty data fit in the budget, and takes them.
    pub(crate) async fn acquire_dirty(&self, bytes: u64) -> Result<(), ClientError> {
        let kib = u32::try_from(bytes.div_ceil(KIB))
            .map_err(|_| ClientError::Invalid("write too large".into()))?;
        let budget = (self.params.mb(Param::MaxDirtyMb) / KIB).max(1);
        if u64::from(kib) > budget {
            return Err(ClientError::Remote(WireError::new(
                Errno::FBig,
                "one write larger than max_dirty_mb",
            )));
        }
        self.dirty
            .follow((self.params.mb(Param::MaxDirtyMb) / KIB).max(1));
        let permit = self
            .dirty
            .semaphore()
            .acquire_many(kib)
            .await
            .map_err(|_| ClientError::Invalid("client closed".into()))?;
        permit.forget();
        Ok(())
    }

    /// Takes `bytes` of the dirty budget if that needs no waiting.
    pub(crate) fn try_acquire_dirty(&self, bytes: u64) -> bool {
        let Ok(kib) = u32::try_from(bytes.div_ceil(KIB)) else {
            return false;
        };
        self.dirty
            .follow((self.params.mb(Param::MaxDirtyMb) / KIB).max(1));
        match self.dirty.semaphore().try_acquire_many(kib) {
            Ok(permit) => {
                permit.forget();
                true
            }
            Err(_) => false,
        }
    }

    /// Returns flushed bytes to the dirty budget.
    pub(crate) fn release_dirty(&self, bytes: u64) {
        self.dirty
            .semaphore()
            .add_permits(bytes.div_ceil(KIB) as usize);
    }

    /// Read-ahead budget for `bytes`, if there is some left (read-ahead never waits).
    pub(crate) fn readahead_permit(&self, bytes: u64) -> Option<OwnedSemaphorePermit> {
        let kib = u32::try_from(bytes.div_ceil(KIB)).ok()?;
        self.readahead
            .follow(self.params.mb(Param::MaxReadAheadMb) / KIB);
        self.readahead
            .semaphore()
            .clone()
            .try_acquire_many_owned(kib)
            .ok()
    }

    /// The shared sizes of open files.
    pub(crate) fn open_sizes(&self) -> &OpenSizes {
        &self.open_sizes
    }

    /// Punches every instantiated object of a file to its share of `size`, in `ctx`.
    pub(crate) async fn truncate_objects(
        &self,
        ctx: &RequestContext,
        fid: Fid,
        layout: Option<&Layout>,
        size: u64,
    ) -> Result<(), ClientError> {
        let Some(layout) = layout else { return Ok(()) };
        let mut punches = Vec::new();
        for c in &layout.components {
            for (i, &ost) in c.osts.iter().enumerate() {
                let obj = c.object(fid, i as u32);
                let osize = layout::object_size_for(c, i as u32, size);
                punches.push(self.engine.punch(ctx, ost, obj, osize, c.compress));
            }
        }
        for r in futures::future::join_all(punches).await {
            r?;
        }
        Ok(())
    }

    /// Makes every namespace and attribute change this client made durable on the MDTs
    /// (they answer changes before their disks hold them, like a local file system):
    /// `fsync(2)` of a file or a directory. Costs nothing when nothing changed since the
    /// last sync.
    pub async fn sync_metadata(&self) -> Result<(), ClientError> {
        let (mdts, _) = self.cluster.open_targets();
        futures::future::try_join_all(mdts.iter().map(|m| m.sync())).await?;
        Ok(())
    }
}
