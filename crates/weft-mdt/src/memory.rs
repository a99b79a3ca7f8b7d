//! An in-memory [`ClusterView`] for tests: OSTs with settable free space and state, pools,
//! a default layout, a sequence allocator, OSTs that can be taken down so destroys fail,
//! and a fake data mover (objects of repositories in memory, every chunk asked recorded,
//! failing or slow on command).

use crate::cluster::{BoxFuture, ClusterView, OstInfo, PeerError};
use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use weft_proto::fid::FIRST_GRANTED_SEQ;
use weft_proto::hsm::RestoreChunk;
use weft_proto::mdt::{MdtReply, MdtRequest};
use weft_proto::{Errno, WireError};
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
    /// Repository objects by (repository, key).
    objects: BTreeMap<(u32, String), Vec<u8>>,
    /// Every restore chunk asked for, in order.
    chunks: Vec<RestoreChunk>,
    /// While set, every restore fails with this errno.
    restore_failure: Option<Errno>,
    /// How long each restore chunk takes.
    restore_delay: Duration,
    /// Restore chunks being copied now, and the most at once so far.
    restores_running: usize,
    restores_peak: usize,
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

    /// Puts object `key` of repository `repo` in the fake store.
    pub fn put_object(&self, repo: u32, key: &str, data: Vec<u8>) {
        self.state
            .lock()
            .objects
            .insert((repo, key.to_string()), data);
    }

    /// Every restore chunk the MDT asked the mover for, in order.
    pub fn restore_chunks(&self) -> Vec<RestoreChunk> {
        self.state.lock().chunks.clone()
    }

    /// Makes every restore fail with `errno` (after the mover's retries, as it would
    /// answer), or (`None`) succeed again.
    pub fn fail_restores(&self, errno: Option<Errno>) {
        self.state.lock().restore_failure = errno;
    }

    /// Makes each restore chunk take `delay`.
    pub fn set_restore_delay(&self, delay: Duration) {
        self.state.lock().restore_delay = delay;
    }

    /// The most restore chunks that were being copied at once.
    pub fn restores_peak(&self) -> usize {
        self.state.lock().restores_peak
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

    fn restore_chunk(&self, chunk: RestoreChunk) -> BoxFuture<'_, Result<(), WireError>> {
        let mut s = self.state.lock();
        let delay = s.restore_delay;
        let object = s.objects.get(&(chunk.repo, chunk.archive.key.clone()));
        let result = match (s.restore_failure, object) {
            (Some(errno), _) => Err(WireError::new(errno, "the store failed (on command)")),
            (None, None) => Err(WireError::new(Errno::NoEnt, "no such object in the store")),
            (None, Some(o)) if chunk.end > o.len() as u64 || chunk.start >= chunk.end => {
                Err(WireError::new(Errno::Io, "chunk outside the object"))
            }
            (None, Some(_))
                if chunk
                    .layout
                    .component_at(chunk.start)
                    .is_none_or(|c| !c.is_instantiated()) =>
            {
                Err(WireError::new(
                    Errno::Io,
                    "chunk into an uninstantiated component",
                ))
            }
            (None, Some(_)) => Ok(()),
        };
        s.chunks.push(chunk);
        s.restores_running += 1;
        s.restores_peak = s.restores_peak.max(s.restores_running);
        drop(s);
        Box::pin(async move {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            self.state.lock().restores_running -= 1;
            result
        })
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
