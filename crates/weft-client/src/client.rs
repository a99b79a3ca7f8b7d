//! The file system as a Rust program uses it: a mount-like [`Client`] with metadata
//! operations by FID or path, and [`File`] handles for data.
//!
//! This module holds the client itself (mounting, options, its handles in other request
//! contexts; what its files share with it, the budgets included, is the
//! [`ClientCore`]); its operations live by concern in `attrs` (lookups, attributes,
//! xattrs, statfs), `namespace` (creating, linking, removing and renaming names), `paths`
//! (path resolution), `open` (opening files), `hsm` and `dirs` (striped directories'
//! shards), with layouts in `crate::layouts` and statahead in `crate::statahead`.

use crate::client_core::ClientCore;
use crate::cluster::{Cluster, ClusterOptions};
use crate::error::ClientError;
pub use crate::file::OpenOptions;
use crate::io::ObjectTargets;
use crate::mdt::MdtClient;
use crate::params::ClientParams;
use std::sync::Arc;
use std::time::Duration;
use weft_proto::Fid;
use weft_rpc::RequestContext;

mod attrs;
pub(crate) mod dirs;
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
    /// What the client's handles and files share ([`ClientCore`]; its methods are the
    /// client's through `Deref`).
    pub(crate) core: Arc<ClientCore>,
    /// Striped directories met so far.
    stripes: Arc<dirs::StripeCache>,
    /// Directory entries read ahead of lookups ([`crate::statahead`]).
    pub(crate) statahead: Arc<crate::statahead::Statahead>,
    /// Released files restored ahead of opens ([`crate::restore_ahead`]).
    pub(crate) restore_ahead: Arc<crate::restore_ahead::RestoreAhead>,
    /// The persistent client cache, once added ([`crate::pcc`]).
    pub(crate) pcc: Arc<parking_lot::RwLock<Option<Arc<crate::pcc::Pcc>>>>,
    /// The context of this handle's requests.
    pub(crate) ctx: RequestContext,
}

impl std::ops::Deref for Client {
    type Target = ClientCore;

    fn deref(&self) -> &ClientCore {
        &self.core
    }
}

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
        Arc::new(Self {
            core: Arc::new(ClientCore::new(cluster, params, objects, io_retry)),
            stripes: Default::default(),
            statahead: Default::default(),
            restore_ahead: Default::default(),
            pcc: Default::default(),
            ctx: RequestContext::new(),
        })
    }

    /// A handle on the same mount whose requests (and those of files opened through it)
    /// go in `ctx`.
    pub fn in_context(&self, ctx: RequestContext) -> Arc<Self> {
        Arc::new(Self {
            core: self.core.clone(),
            stripes: self.stripes.clone(),
            statahead: self.statahead.clone(),
            restore_ahead: self.restore_ahead.clone(),
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

    /// The MDT of `fid`, sending in this handle's context.
    pub(crate) fn mdt(&self, fid: Fid) -> Result<Arc<MdtClient>, ClientError> {
        Ok(self.cluster.mdt_of(fid)?.in_context(&self.ctx))
    }

    /// MDT `index`, sending in this handle's context.
    pub(crate) fn mdt_at(&self, index: u32) -> Result<Arc<MdtClient>, ClientError> {
        Ok(self.cluster.mdt(index)?.in_context(&self.ctx))
    }

    pub(crate) fn stripe_cache(&self) -> &dirs::StripeCache {
        &self.stripes
    }
}
