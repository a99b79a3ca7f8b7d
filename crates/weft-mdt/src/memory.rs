//! An in-memory [`ClusterView`] for tests: OSTs with settable free space and state, pools,
//! a default layout, a sequence allocator, and OSTs that can be taken down so destroys fail.

use crate::cluster::{BoxFuture, ClusterView, OstInfo, PeerError};
use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet};
use weft_proto::fid::FIRST_GRANTED_SEQ;
use weft_proto::mdt::{MdtReply, MdtRequest};
use weft_proto::{FidSeqRange, LayoutTemplate, ObjectId};

#[derive(Debug, Default)]
struct State {
    osts: Vec<OstInfo>,
    pools: BTreeMap<String, Vec<u32>>,
    default_layout: LayoutTemplate,
    next_seq: u64,
    seq_grants: u64,
    down: BTreeSet<u32>,
    destroyed: Vec<(u32, ObjectId)>,
    failed_destroys: u64,
}

/// A cluster that lives in memory. Cheap to build; every method is deterministic.
#[derive(Debug)]
pub struct MemoryCluster {
    state: Mutex<State>,
}

impl MemoryCluster {
    /// A cluster with `ost_count` active OSTs with 1 TiB free each and no default layout.
    pub fn new(ost_count: u32) -> Self {
        let osts = (0..ost_count)
            .map(|index| OstInfo {
                index,
                active: true,
                free_bytes: 1 << 40,
            })
            .collect();
        Self {
            state: Mutex::new(State {
                osts,
                next_seq: FIRST_GRANTED_SEQ,
                ..State::default()
            }),
        }
    }

    /// Replaces the OST list.
    pub fn set_osts(&self, osts: Vec<OstInfo>) {
        self.state.lock().osts = osts;
    }

    /// Sets the free space of OST `index`.
    pub fn set_free(&self, index: u32, free_bytes: u64) {
        for o in self
            .state
            .lock()
            .osts
            .iter_mut()
            .filter(|o| o.index == index)
        {
            o.free_bytes = free_bytes;
        }
    }

    /// Marks OST `index` active or inactive for allocation.
    pub fn set_active(&self, index: u32, active: bool) {
        for o in self
            .state
            .lock()
            .osts
            .iter_mut()
            .filter(|o| o.index == index)
        {
            o.active = active;
        }
    }

    /// Makes destroys on OST `index` fail (`down = true`) or succeed again.
    pub fn set_down(&self, index: u32, down: bool) {
        let mut s = self.state.lock();
        if down {
            s.down.insert(index);
        } else {
            s.down.remove(&index);
        }
    }

    /// Defines (or replaces) a pool.
    pub fn set_pool(&self, name: &str, osts: Vec<u32>) {
        self.state.lock().pools.insert(name.to_string(), osts);
    }

    /// Sets the file system's default layout.
    pub fn set_default_layout(&self, template: LayoutTemplate) {
        self.state.lock().default_layout = template;
    }

    /// Every object destroyed so far, in order (repeats show replays).
    pub fn destroyed(&self) -> Vec<(u32, ObjectId)> {
        self.state.lock().destroyed.clone()
    }

    /// How many destroys failed because their OST was down.
    pub fn failed_destroys(&self) -> u64 {
        self.state.lock().failed_destroys
    }

    /// How many sequence grants were asked for.
    pub fn seq_grants(&self) -> u64 {
        self.state.lock().seq_grants
    }
}

impl ClusterView for MemoryCluster {
    fn osts(&self) -> Vec<OstInfo> {
        self.state.lock().osts.clone()
    }

    fn pool(&self, name: &str) -> Option<Vec<u32>> {
        self.state.lock().pools.get(name).cloned()
    }

    fn default_layout(&self) -> LayoutTemplate {
        self.state.lock().default_layout.clone()
    }

    fn alloc_seq(&self, count: u32) -> BoxFuture<'_, Result<FidSeqRange, String>> {
        let mut s = self.state.lock();
        let start = s.next_seq;
        s.next_seq = start.saturating_add(u64::from(count.max(1)));
        s.seq_grants += 1;
        let range = FidSeqRange {
            start,
            end: s.next_seq,
        };
        Box::pin(async move { Ok(range) })
    }

    fn destroy_objects(
        &self,
        ost: u32,
        objects: Vec<ObjectId>,
    ) -> BoxFuture<'_, Result<(), String>> {
        let mut s = self.state.lock();
        let result = if s.down.contains(&ost) {
            s.failed_destroys += 1;
            Err(format!("OST{ost:04x} is down"))
        } else {
            s.destroyed.extend(objects.into_iter().map(|o| (ost, o)));
            Ok(())
        };
        Box::pin(async move { result })
    }

    /// One MDT only: cross-MDT operations are tested with real servers.
    fn mdts(&self) -> Vec<u32> {
        vec![0]
    }

    fn mdt_of(&self, _fid: weft_proto::Fid) -> Option<u32> {
        None
    }

    fn mdt_call(&self, index: u32, _req: MdtRequest) -> BoxFuture<'_, Result<MdtReply, PeerError>> {
        Box::pin(async move { Err(PeerError::Unreachable(format!("no MDT {index} in memory"))) })
    }
}
