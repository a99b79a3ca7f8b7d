//! What an MDT needs to know about the rest of the file system, served from the client
//! library: OSTs with their free space (polled), pools and the default layout (from the
//! MGS configuration), FID sequence grants (from the MGS), object destruction (on OSTs)
//! and HSM restores (the data mover of `weft-repo`, copying archived objects from their
//! data repository into OST objects; credentials from this process's environment).

use parking_lot::RwLock;
use std::sync::{Arc, Weak};
use std::time::Duration;
use weft_client::Cluster;
use weft_mdt::{ClusterView, OstInfo, PeerError};
use weft_proto::hsm::RestoreChunk;
use weft_proto::layout::LayoutTemplate;
use weft_proto::mdt::{MdtReply, MdtRequest};
use weft_proto::mgs::TargetState;
use weft_proto::{FidSeqRange, ObjectId, TargetKind, WireError};
use weft_rpc::service::BoxFuture;

/// How often OST usage is polled for the allocator.
const POLL_INTERVAL: Duration = Duration::from_secs(2);
/// How often the configuration version is checked for changes.
const CONFIG_CHECK_INTERVAL: Duration = Duration::from_millis(100);
/// How long one OST may take to answer a poll before it counts as inactive.
const POLL_TIMEOUT: Duration = Duration::from_secs(2);

/// The cluster as one MDT sees it.
pub struct MdtClusterView {
    cluster: Arc<Cluster>,
    mdt: u32,
    osts: RwLock<Vec<OstInfo>>,
    /// The root's default layout, fetched from MDT0 by the other MDTs.
    root_default: RwLock<Option<LayoutTemplate>>,
    /// Copies archived data into OST objects for the MDT's restores.
    mover: Arc<weft_repo::Mover>,
}

impl MdtClusterView {
    /// Polls OST usage once, then keeps polling in the background while the view lives.
    ///
    /// The configuration is fetched again first: `cluster` may be shared with OSTs this
    /// process has just registered (`weft up`), whose announcement has not arrived yet, and
    /// a first poll without them would leave them out of the files created before the next.
    pub async fn start(cluster: Arc<Cluster>, mdt: u32) -> Arc<Self> {
        if let Err(e) = cluster.refresh().await {
            tracing::warn!(error = %e, "could not fetch the configuration; polling the OSTs last known");
        }
        let view = Arc::new(Self {
            cluster: cluster.clone(),
            mdt,
            osts: RwLock::new(Vec::new()),
            root_default: RwLock::new(None),
            mover: weft_repo::Mover::new(cluster.clone()),
        });
        view.poll().await;
        let weak: Weak<Self> = Arc::downgrade(&view);
        tokio::spawn(async move {
            let mut seen_version = 0;
            let mut last_poll = tokio::time::Instant::now();
            loop {
                tokio::time::sleep(CONFIG_CHECK_INTERVAL).await;
                let Some(view) = weak.upgrade() else { return };
                // Poll at once when the configuration changed (an OST registered or went
                // inactive), else every POLL_INTERVAL for free space.
                let version = view.cluster.config().version;
                if version != seen_version || last_poll.elapsed() >= POLL_INTERVAL {
                    seen_version = version;
                    view.poll().await;
                    last_poll = tokio::time::Instant::now();
                }
            }
        });
        view
    }

    async fn poll(&self) {
        let config = self.cluster.config();
        // All OSTs at once: one that does not answer costs a poll POLL_TIMEOUT, not each.
        let found = futures::future::join_all(config.targets_of(TargetKind::Ost).map(|t| async {
            let index = t.id.index;
            let usage = match self.cluster.ost(index) {
                Ok(client) => tokio::time::timeout(POLL_TIMEOUT, client.statfs())
                    .await
                    .ok()
                    .and_then(Result::ok),
                Err(_) => None,
            };
            Polled {
                index,
                registered_active: t.state == TargetState::Active,
                free_bytes: usage.map(|s| s.bavail.saturating_mul(u64::from(s.bsize))),
            }
        }))
        .await;
        let found = placeable(&found, &self.osts.read());
        *self.osts.write() = found;
        if self.mdt != 0 {
            // Files in this MDT's directories fall back to the root's default layout, which
            // MDT0 holds: it reaches here within a poll interval of being set.
            let req = weft_proto::mdt::MdtRequest::GetLayout {
                fid: weft_proto::Fid::ROOT,
            };
            if let Ok(mdt0) = self.cluster.mdt(0)
                && let Ok(Ok(MdtReply::Template(t))) =
                    tokio::time::timeout(POLL_TIMEOUT, mdt0.call(req)).await
            {
                *self.root_default.write() = t;
            }
        }
    }
}

/// One OST as the last poll found it.
struct Polled {
    index: u32,
    /// The MGS lists it as active (heard from within its heartbeat timeout).
    registered_active: bool,
    /// Free bytes, or `None` when it did not answer the poll.
    free_bytes: Option<u64>,
}

/// Which OSTs new files may be placed on, from a poll and the previous answer.
///
/// An OST that did not answer is left out while others answered, so new files avoid it.
/// When none answered (its OSS is restarting, or the MDS lost its network for a moment),
/// every OST the MGS still lists as active stays placeable with the free space it last
/// reported: the files' I/O waits for the OSTs' recovery, which is a pause for the
/// application, where refusing every create with ENOSPC was an error. Only when the MGS
/// has given up on every OST (its heartbeat timeout) do creates fail.
fn placeable(polled: &[Polled], before: &[OstInfo]) -> Vec<OstInfo> {
    let any_answered = polled
        .iter()
        .any(|p| p.registered_active && p.free_bytes.is_some());
    polled
        .iter()
        .map(|p| {
            let last = || {
                before
                    .iter()
                    .find(|o| o.index == p.index)
                    .map_or(0, |o| o.free_bytes)
            };
            OstInfo {
                index: p.index,
                active: p.registered_active && (p.free_bytes.is_some() || !any_answered),
                free_bytes: p.free_bytes.unwrap_or_else(last),
            }
        })
        .collect()
}

impl ClusterView for MdtClusterView {
    fn osts(&self) -> Vec<OstInfo> {
        self.osts.read().clone()
    }

    fn pool(&self, name: &str) -> Option<Vec<u32>> {
        self.cluster.config().pools.get(name).cloned()
    }

    fn default_layout(&self) -> LayoutTemplate {
        self.cluster.config().default_layout.clone()
    }

    fn alloc_seq(&self, count: u32) -> BoxFuture<'_, Result<FidSeqRange, String>> {
        Box::pin(async move {
            self.cluster
                .mgs()
                .alloc_seq(self.mdt, count)
                .await
                .map_err(|e| e.to_string())
        })
    }

    fn destroy_objects(
        &self,
        ost: u32,
        objects: Vec<ObjectId>,
    ) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            let client = self.cluster.ost(ost).map_err(|e| e.to_string())?;
            client
                .destroy_many(objects)
                .await
                .map_err(|e| e.to_string())
        })
    }

    fn root_default(&self) -> Option<LayoutTemplate> {
        self.root_default.read().clone()
    }

    fn mdts(&self) -> Vec<u32> {
        self.cluster
            .config()
            .targets_of(weft_proto::TargetKind::Mdt)
            .map(|t| t.id.index)
            .collect()
    }

    fn mdt_of(&self, fid: weft_proto::Fid) -> Option<u32> {
        self.cluster.config().mdt_of_seq(fid.seq)
    }

    fn mdt_call(&self, index: u32, req: MdtRequest) -> BoxFuture<'_, Result<MdtReply, PeerError>> {
        Box::pin(async move {
            let client = self
                .cluster
                .mdt(index)
                .map_err(|e| PeerError::Unreachable(e.to_string()))?;
            client.call(req).await.map_err(|e| match e.remote() {
                Some(w) => PeerError::Refused(w.clone()),
                None => PeerError::Unreachable(e.to_string()),
            })
        })
    }

    fn restore_chunk(&self, chunk: RestoreChunk) -> BoxFuture<'_, Result<(), WireError>> {
        Box::pin(async move { self.mover.restore_chunk(chunk).await })
    }

    /// The mover's counters, and MDT0's the repository agent's (which runs in the process
    /// serving MDT0).
    fn counters(&self) -> Vec<weft_proto::handshake::Counter> {
        use weft_rpc::metric::counters;
        let mut c = counters(&weft_repo::mover::MOVER_STATS, &self.mover.stats());
        if self.mdt == 0
            && let Some(agent) = weft_repo::agent::running_stats()
        {
            c.extend(counters(&weft_repo::agent::AGENT_STATS, &agent));
        }
        c
    }

    /// Wants of tiering gates in other MDS processes, for the agent of this one (MDT0's).
    fn tiering_wants(&self, wants: &[weft_proto::hsm::OstWant]) -> Vec<u32> {
        weft_repo::tiering::wants_from_elsewhere(wants)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn polled(index: u32, registered_active: bool, free: Option<u64>) -> Polled {
        Polled {
            index,
            registered_active,
            free_bytes: free,
        }
    }

    fn info(index: u32, active: bool, free_bytes: u64) -> OstInfo {
        OstInfo {
            index,
            active,
            free_bytes,
        }
    }

    #[test]
    fn an_ost_that_does_not_answer_is_avoided_while_others_answer() {
        let now = placeable(
            &[polled(0, true, Some(10)), polled(1, true, None)],
            &[info(0, true, 9), info(1, true, 7)],
        );
        assert_eq!(now, vec![info(0, true, 10), info(1, false, 7)]);
    }

    #[test]
    fn when_no_ost_answers_the_registered_ones_stay_placeable_with_their_last_space() {
        let now = placeable(
            &[
                polled(0, true, None),
                polled(1, true, None),
                polled(2, false, None),
            ],
            &[info(0, true, 9), info(1, true, 7)],
        );
        assert_eq!(
            now,
            vec![info(0, true, 9), info(1, true, 7), info(2, false, 0)]
        );
    }

    #[test]
    fn osts_the_mgs_gave_up_on_are_never_placeable() {
        let now = placeable(&[polled(0, false, Some(5)), polled(1, false, None)], &[]);
        assert_eq!(now, vec![info(0, false, 5), info(1, false, 0)]);
    }
}
