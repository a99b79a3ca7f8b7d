//! The file system as a Rust program uses it: a mount-like [`Client`] with metadata
//! operations by FID or path, and [`File`] handles for data.
//!
//! This module holds the client itself (mounting, options, the dirty and read-ahead
//! budgets); its operations live by concern in `attrs` (lookups, attributes, xattrs,
//! statfs), `namespace` (creating, linking, removing and renaming names), `paths` (path
//! resolution) and `open` (opening files), with directory shards in `crate::dirs`, layouts
//! in `crate::layouts` and statahead in `crate::statahead`.

use crate::budget::Budget;
use crate::cache::DataCache;
use crate::cluster::{Cluster, ClusterOptions};
use crate::error::ClientError;
use crate::io::{IoEngine, ObjectTargets};
use crate::mdt::MdtClient;
use crate::params::{ClientParams, Param};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::OwnedSemaphorePermit;
use weft_proto::mdt::AccessMode;
use weft_proto::{Errno, Fid, WireError};
use weft_rpc::RequestContext;

mod attrs;
mod hsm;
mod namespace;
mod open;
mod paths;

#[cfg(doc)]
use crate::file::File;

/// How a client mounts.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Connections and identity.
    pub cluster: ClusterOptions,
    /// How long a data RPC is resent over a broken connection before the call fails with EIO.
    pub io_retry: Duration,
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            cluster: ClusterOptions::default(),
            io_retry: Duration::from_secs(60),
        }
    }
}

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

/// Applies the MGS's stored parameters that name client knobs.
fn apply_stored_params(cluster: &Cluster, params: &ClientParams) {
    for (name, value) in &cluster.config().params {
        if params.list(name).is_empty() {
            continue;
        }
        if let Err(e) = params.set(name, value) {
            tracing::warn!(%name, error = %e, "ignoring a stored parameter");
        }
    }
}

/// Re-applies stored parameters after every configuration change, until the client goes.
async fn follow_stored_params(
    mut changes: tokio::sync::watch::Receiver<u64>,
    cluster: std::sync::Weak<Cluster>,
    params: std::sync::Weak<ClientParams>,
) {
    while changes.changed().await.is_ok() {
        let (Some(c), Some(p)) = (cluster.upgrade(), params.upgrade()) else {
            return;
        };
        apply_stored_params(&c, &p);
    }
}

/// A mounted file system, without the kernel.
///
/// Every request a `Client` sends goes in its [`RequestContext`] (job id, deadline), and so
/// do those of the [`File`](crate::File)s opened through it, background write-back and
/// read-ahead included. [`Client::mount`] gives a handle with the default context (no job);
/// [`Client::in_context`] gives another handle on the same mount (same connections, caches
/// and budgets) whose requests go in another context: the FUSE layer takes one per kernel
/// request, for the job of the calling process. File methods with an `_in` suffix take the
/// context of one call instead of the one the file was opened in.
pub struct Client {
    cluster: Arc<Cluster>,
    params: Arc<ClientParams>,
    engine: Arc<IoEngine>,
    cache: Arc<DataCache>,
    /// Dirty-data budget in KiB (`max_dirty_mb`).
    dirty: Arc<Budget>,
    /// Read-ahead budget in KiB (`max_read_ahead_mb`).
    readahead: Arc<Budget>,
    /// Striped directories met so far.
    stripes: Arc<crate::dirs::StripeCache>,
    /// Directory entries read ahead of lookups ([`crate::statahead`]).
    pub(crate) statahead: Arc<crate::statahead::Statahead>,
    /// Released files restored ahead of opens ([`crate::restore_ahead`]).
    pub(crate) restore_ahead: Arc<crate::restore_ahead::RestoreAhead>,
    /// The size of every open file, shared by its handles.
    open_sizes: Arc<crate::file::OpenSizes>,
    /// The persistent client cache, once added ([`crate::pcc`]).
    pub(crate) pcc: Arc<parking_lot::RwLock<Option<Arc<crate::pcc::Pcc>>>>,
    /// The context of this handle's requests.
    ctx: RequestContext,
}

const KIB: u64 = 1024;

impl Client {
    /// Connects to the MGS at `mgs` for file system `fsname`.
    pub async fn mount(
        mgs: &str,
        fsname: &str,
        opts: ClientOptions,
    ) -> Result<Arc<Self>, ClientError> {
        let cluster = Cluster::connect(mgs, fsname, opts.cluster.clone()).await?;
        // The instance name tells this client's parameters from other mounts' on the node
        // (`osc.weft-1a2b3c4d.max_dirty_mb`), as Lustre's `llite.FSNAME-ffff...`.
        let uuid = cluster.node_uuid().simple().to_string();
        let instance = format!("{}-{}", cluster.fsname(), &uuid[..8]);
        let params = Arc::new(ClientParams::new(&instance));
        // Persistent settings (`set_param -P`) that name client knobs apply at mount, and
        // again whenever the MGS configuration changes.
        apply_stored_params(&cluster, &params);
        tokio::spawn(follow_stored_params(
            cluster.watch_config(),
            Arc::downgrade(&cluster),
            Arc::downgrade(&params),
        ));
        let objects: Arc<dyn ObjectTargets> = cluster.clone();
        Ok(Self::assemble(cluster, params, objects, opts.io_retry))
    }

    /// A client whose object I/O goes to `objects` (an in-memory fake, or a failing one,
    /// from [`crate::io`]) over a cluster with an empty configuration and no MGS, MDT or
    /// OST connection: for tests of files over fake object I/O (see
    /// [`crate::file::FileMeta`] for their MDT side). Data RPCs that fail to reach an
    /// object are resent for `io_retry`.
    pub fn offline(objects: Arc<dyn ObjectTargets>, io_retry: Duration) -> Arc<Self> {
        let cluster = Cluster::offline(ClusterOptions::default());
        let params = Arc::new(ClientParams::new("offline"));
        Self::assemble(cluster, params, objects, io_retry)
    }

    fn assemble(
        cluster: Arc<Cluster>,
        params: Arc<ClientParams>,
        objects: Arc<dyn ObjectTargets>,
        io_retry: Duration,
    ) -> Arc<Self> {
        let engine = Arc::new(IoEngine::with_targets(objects, params.clone(), io_retry));
        let dirty = Budget::new(params.mb(Param::MaxDirtyMb) / KIB);
        let readahead = Budget::new(params.mb(Param::MaxReadAheadMb) / KIB);
        let cache = DataCache::new(params.clone());
        Arc::new(Self {
            cluster,
            params,
            engine,
            cache: Arc::new(cache),
            dirty: Arc::new(dirty),
            readahead: Arc::new(readahead),
            stripes: Default::default(),
            statahead: Default::default(),
            restore_ahead: Default::default(),
            open_sizes: Default::default(),
            pcc: Default::default(),
            ctx: RequestContext::new(),
        })
    }

    /// A handle on the same mount whose requests (and those of files opened through it)
    /// go in `ctx`.
    pub fn in_context(&self, ctx: RequestContext) -> Arc<Self> {
        Arc::new(Self {
            cluster: self.cluster.clone(),
            params: self.params.clone(),
            engine: self.engine.clone(),
            cache: self.cache.clone(),
            dirty: self.dirty.clone(),
            readahead: self.readahead.clone(),
            stripes: self.stripes.clone(),
            statahead: self.statahead.clone(),
            restore_ahead: self.restore_ahead.clone(),
            open_sizes: self.open_sizes.clone(),
            pcc: self.pcc.clone(),
            ctx,
        })
    }

    /// A handle on the same mount whose requests go in the same context as this one's,
    /// for job `jobid` (see [`Client::in_context`]).
    pub fn for_job(&self, jobid: Option<Arc<str>>) -> Arc<Self> {
        self.in_context(self.ctx.clone().for_job(jobid))
    }

    /// The context this handle's requests go in.
    pub fn context(&self) -> &RequestContext {
        &self.ctx
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

    /// The MDT of `fid`, sending in this handle's context.
    pub(crate) fn mdt(&self, fid: Fid) -> Result<Arc<MdtClient>, ClientError> {
        Ok(self.cluster.mdt_of(fid)?.in_context(&self.ctx))
    }

    /// MDT `index`, sending in this handle's context.
    pub(crate) fn mdt_at(&self, index: u32) -> Result<Arc<MdtClient>, ClientError> {
        Ok(self.cluster.mdt(index)?.in_context(&self.ctx))
    }

    pub(crate) fn stripe_cache(&self) -> &crate::dirs::StripeCache {
        &self.stripes
    }

    /// The shared sizes of open files.
    pub(crate) fn open_sizes(&self) -> &crate::file::OpenSizes {
        &self.open_sizes
    }
}
