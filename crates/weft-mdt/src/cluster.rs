//! What the MDT needs to know about the rest of the file system, as a trait so the MDT can
//! be driven without a network: the OSTs and their free space, pools, the file system's
//! default layout, FID sequence grants from the MGS, and object destruction on OSTs.

use std::future::Future;
use std::pin::Pin;
use weft_proto::hsm::RestoreChunk;
use weft_proto::mdt::{MdtReply, MdtRequest};
use weft_proto::{FidSeqRange, LayoutTemplate, ObjectId, WireError};

/// Why a request to another MDT has no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PeerError {
    /// The MDT answered with an error: the request did nothing there.
    #[error("MDT refused: {0}")]
    Refused(WireError),
    /// The MDT could not be reached: whether the request was done is unknown, and it must
    /// be sent again.
    #[error("MDT unreachable: {0}")]
    Unreachable(String),
}

/// A boxed, sendable future (the same shape as `weft_rpc::service::BoxFuture`).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One OST as the allocator sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OstInfo {
    /// The OST's index.
    pub index: u32,
    /// Whether it is in service (new stripes go only to active OSTs).
    pub active: bool,
    /// Free bytes, as last reported.
    pub free_bytes: u64,
}

/// The MDT's view of the cluster, implemented by the wiring in the `weft` binary (MGS
/// configuration plus OST connections) and by [`crate::memory::MemoryCluster`] in tests.
///
/// The synchronous methods are called from the MDT's commit thread and must return cached
/// figures quickly; the wiring refreshes them in the background.
pub trait ClusterView: Send + Sync + 'static {
    /// Every known OST, with cached state and free space.
    fn osts(&self) -> Vec<OstInfo>;
    /// The OST indices of pool `name`, or `None` if there is no such pool.
    fn pool(&self, name: &str) -> Option<Vec<u32>>;
    /// The file system's default layout (an empty template means "none set").
    fn default_layout(&self) -> LayoutTemplate;
    /// Asks the MGS for `count` new FID sequences for this MDT (durable at the MGS when
    /// this returns).
    fn alloc_seq(&self, count: u32) -> BoxFuture<'_, Result<FidSeqRange, String>>;
    /// Destroys stripe objects of one OST (at most [`weft_proto::ost::MAX_DESTROY_BATCH`]),
    /// durably before it returns. Destroying an object that does not exist must succeed
    /// (the destroy log may replay a destroy after a restart).
    fn destroy_objects(
        &self,
        ost: u32,
        objects: Vec<ObjectId>,
    ) -> BoxFuture<'_, Result<(), String>>;
    /// The root directory's default layout when the root is on another MDT (MDT0), as
    /// last fetched; `None` when it has none or this MDT holds the root.
    fn root_default(&self) -> Option<LayoutTemplate> {
        None
    }
    /// Whether MDT `index` is part of the file system.
    fn has_mdt(&self, index: u32) -> bool {
        self.mdts().contains(&index)
    }
    /// The indices of every MDT of the file system.
    fn mdts(&self) -> Vec<u32>;
    /// The MDT holding `fid`, from the FID location database.
    fn mdt_of(&self, fid: weft_proto::Fid) -> Option<u32>;
    /// Sends a request to MDT `index` (cross-MDT operations). Requests sent this way are
    /// idempotent on the receiving MDT, so [`PeerError::Unreachable`] is retried.
    fn mdt_call(&self, index: u32, req: MdtRequest) -> BoxFuture<'_, Result<MdtReply, PeerError>>;
    /// The data mover: copies `chunk` from its data repository into the file's OST objects
    /// and syncs them before it returns (an HSM restore, driven by `crate::hsm`). It
    /// retries a failing store a bounded number of times with backoff, then answers the
    /// error (EIO for a store that fails, ENOENT for an object gone). Without a mover
    /// (the default) every restore answers ENOSYS.
    fn restore_chunk(&self, chunk: RestoreChunk) -> BoxFuture<'_, Result<(), WireError>> {
        let _ = chunk;
        Box::pin(async {
            Err(WireError::new(
                weft_proto::Errno::NoSys,
                "this MDT has no data mover: HSM restores are not served",
            ))
        })
    }
    /// Restores in another MDS process wait for room under a tiering high mark on these
    /// OSTs (`MdtRequest::HsmTieringWants`, sent to MDT0): the repository agent of this
    /// process, if it runs one, releases for them. Answers the OSTs of `wants` on which
    /// the agent lately found nothing to release. Nothing, by default.
    fn tiering_wants(&self, wants: &[weft_proto::hsm::OstWant]) -> Vec<u32> {
        let _ = wants;
        Vec::new()
    }
    /// Counters of the work done for this MDT outside it (the data mover's restores, the
    /// repository agent's sweeps), reported with the MDT's own (`get_param`, Prometheus).
    fn counters(&self) -> Vec<weft_proto::handshake::Counter> {
        Vec::new()
    }
}
