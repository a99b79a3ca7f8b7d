//! What the MDT needs to know about the rest of the file system, as a trait so the MDT can
//! be driven without a network: the OSTs and their free space, pools, the file system's
//! default layout, FID sequence grants from the MGS, and object destruction on OSTs.

use std::future::Future;
use std::pin::Pin;
use weft_proto::{FidSeqRange, LayoutTemplate, ObjectId};

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
    /// Destroys one stripe object on an OST. Destroying an object that does not exist must
    /// succeed (the destroy log may replay a destroy after a restart).
    fn destroy_object(&self, ost: u32, object: ObjectId) -> BoxFuture<'_, Result<(), String>>;
}
