//! Tiering (`weft repo tiering PATH --high 80% --low 60% --min-age 1d`): a repository's
//! archived files are released from the OSTs by usage, so a small file system can serve a
//! larger bucket. Two halves meet here, in the process that runs both (the MDS serving
//! MDT0, or `weft up`):
//!
//! - **The room gate** ([`admit`]), called by the data mover before it copies a restore
//!   chunk of a repository with tiering: the chunk waits until every OST it writes to has
//!   room under the high mark for it (usage, from a fresh `statfs`, plus the bytes of
//!   chunks admitted and still being copied, plus this chunk's), so restores alone never
//!   take an OST past the high mark. While it waits it tells the agent how much it wants
//!   on which OST. It waits at most [`GATE_WAIT`], and not at all once the agent found
//!   nothing to release on a full OST (then the restore goes on, as without tiering).
//! - **The releaser** ([`tier_pass`]), run by the repository agent every [`TIER_TICK`]
//!   and at once when a chunk waits: for each repository with tiering, when an OST's usage
//!   (plus what waiting chunks want) passes the high mark, it walks the linked directory
//!   and releases archived, clean, closed files of the repository not used for the
//!   policy's minimum age, least recently used first, until every such OST is below the
//!   low mark; then it waits (at most [`SETTLE_WAIT`]) for the released objects' destroys
//!   to show in the OSTs' usage before it looks again, so it does not release twice for
//!   the same bytes.
//!
//! "Used" is a file's `max(atime, mtime)`: weftfs does not update atime on every read (as
//! `noatime`), but a restore sets it (a restore is a read of the file's data), and any
//! change moves mtime. So a file loaded for a reader is as young as its load, and a file
//! read again from the OSTs without a restore keeps its load's time: a hot file that
//! stays loaded for long can be released and loaded again (the cost of not writing an
//! inode on every read).
//!
//! The agent runs in MDT0's process only; the mover of every MDS process has a gate.
//! A gate in a process without the agent (restores of files of other MDTs) tells the
//! agent's process what its chunks wait for (`MdtRequest::HsmTieringWants` to MDT0, at
//! most every [`TIER_TICK`] while they wait); the agent counts those wants for a second
//! ([`REMOTE_WANT_TTL`]) as its own process's, and the answer names the OSTs on which it
//! found nothing to release, so the gate stops waiting there as a local one would.

use crate::agent::walk::{Walked, walk};
use crate::error::RepoError;
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use weft_client::{Client, Cluster};
use weft_proto::hsm::{
    HSM_ARCHIVED, HSM_DIRTY, HSM_EXISTS, HSM_LOST, HSM_NORELEASE, HSM_RELEASED, OstWant, Repo,
    TieringPolicy,
};
use weft_proto::mdt::{Credentials, MdtReply, MdtRequest};
use weft_proto::{Errno, Fid, Timestamp};

/// How often the agent looks at OST usage.
pub const TIER_TICK: Duration = Duration::from_millis(250);
/// Longest a restore chunk waits for room.
pub const GATE_WAIT: Duration = Duration::from_secs(30);
/// Longest the agent waits for released files' objects to be destroyed.
pub const SETTLE_WAIT: Duration = Duration::from_secs(10);
/// How often a waiting chunk looks at usage again.
const GATE_POLL: Duration = Duration::from_millis(50);
/// How long wants from another MDS process count without being sent again.
pub const REMOTE_WANT_TTL: Duration = Duration::from_secs(1);
/// How long a gate waits for the agent's process to take its wants.
const TELL_TIMEOUT: Duration = Duration::from_secs(1);

/// What waiting chunks and the agent share in one process.
#[derive(Default)]
struct Room {
    state: Mutex<RoomState>,
    /// Rings the agent when a chunk starts waiting.
    pressure: Notify,
    /// Bumped whenever an admitted chunk is done (its bytes are in `statfs` from then on).
    finished: AtomicU64,
}

#[derive(Default)]
struct RoomState {
    /// Bytes of admitted chunks still being copied, by OST.
    reserved: HashMap<u32, u64>,
    /// Bytes waiting chunks want, by OST.
    wanted: HashMap<u32, u64>,
    /// When the agent last found nothing to release while an OST was over its mark.
    stuck: HashMap<u32, Instant>,
    /// Bytes restores of other MDS processes wait for, by OST, and when they said so.
    remote: HashMap<u32, (u64, Instant)>,
    /// When this process last told the agent's process its wants.
    told: Option<Instant>,
}

impl RoomState {
    /// What the agent releases for, by OST: this process's waiting chunks' wants and
    /// the fresh ones of other processes.
    fn all_wanted(&self, now: Instant) -> HashMap<u32, u64> {
        let mut all = self.wanted.clone();
        for (ost, (bytes, at)) in &self.remote {
            if now.duration_since(*at) < REMOTE_WANT_TTL {
                let w = all.entry(*ost).or_default();
                *w = (*w).max(*bytes);
            }
        }
        all
    }
}

static ROOM: LazyLock<Room> = LazyLock::new(Room::default);

/// An admitted chunk's reservation, given back when dropped (after the chunk is copied
/// and synced, or failed).
#[must_use = "the reservation lasts while the chunk is copied"]
pub struct Reservation {
    need: HashMap<u32, u64>,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut st = ROOM.state.lock();
        for (ost, n) in &self.need {
            if let Some(r) = st.reserved.get_mut(ost) {
                *r = r.saturating_sub(*n);
            }
        }
        ROOM.finished.fetch_add(1, Ordering::Release);
    }
}

/// Removes the wishes of a waiting chunk's OSTs when dropped.
struct Wanting(Vec<u32>);

impl Drop for Wanting {
    fn drop(&mut self) {
        let mut st = ROOM.state.lock();
        for o in &self.0 {
            st.wanted.remove(o);
        }
    }
}

/// An OST's usage: used and total bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// Bytes in use.
    pub used: u64,
    /// The OST's size.
    pub total: u64,
}

/// OST `ost`'s usage now; `None` when it does not answer.
pub async fn usage(cluster: &Cluster, ost: u32) -> Option<Usage> {
    let c = cluster.ost(ost).ok()?;
    let s = tokio::time::timeout(Duration::from_secs(2), c.statfs())
        .await
        .ok()?
        .ok()?;
    let b = u64::from(s.bsize);
    Some(Usage {
        used: s.blocks.saturating_sub(s.bfree).saturating_mul(b),
        total: s.blocks.saturating_mul(b),
    })
}

/// Waits until the OSTs in `need` (bytes a chunk writes on each) have room for it under
/// `policy`'s high mark (see the module header), and reserves it. Answers the
/// reservation and whether the chunk had to wait.
pub async fn admit(
    cluster: &Cluster,
    policy: &TieringPolicy,
    need: HashMap<u32, u64>,
) -> (Reservation, bool) {
    let started = Instant::now();
    let mut waited = false;
    // What this chunk wants is forgotten however the wait ends (a restore given up drops
    // this future): the agent must not go on releasing for it.
    let _wanting = Wanting(need.keys().copied().collect());
    loop {
        let seen = ROOM.finished.load(Ordering::Acquire);
        let mut usages = Vec::with_capacity(need.len());
        for &ost in need.keys() {
            usages.push((ost, usage(cluster, ost).await));
        }
        // The decision, under the lock (not held across an await).
        let admitted = (|| {
            let mut st = ROOM.state.lock();
            if ROOM.finished.load(Ordering::Acquire) != seen {
                // A chunk finished while we looked: its bytes may be in neither count.
                return None;
            }
            let timed_out = started.elapsed() >= GATE_WAIT;
            let mut fits = true;
            for (ost, u) in &usages {
                let Some(u) = u else { continue };
                let n = need.get(ost).copied().unwrap_or(0);
                let high = TieringPolicy::mark(u.total, policy.high_pct);
                let reserved = st.reserved.get(ost).copied().unwrap_or(0);
                // A chunk larger than the mark itself cannot wait for room.
                let hopeless = n > high || st.stuck.get(ost).is_some_and(|t| *t >= started);
                if !hopeless && u.used.saturating_add(reserved).saturating_add(n) > high {
                    fits = false;
                }
            }
            if fits || timed_out {
                if !fits {
                    tracing::warn!(
                        ?need,
                        "no room under the tiering high mark in time: restoring anyway"
                    );
                }
                for (ost, n) in &need {
                    *st.reserved.entry(*ost).or_default() += n;
                    st.wanted.remove(ost);
                }
                return Some(true);
            }
            for (ost, n) in &need {
                let reserved = st.reserved.get(ost).copied().unwrap_or(0);
                let w = st.wanted.entry(*ost).or_default();
                *w = (*w).max(n.saturating_add(reserved));
            }
            Some(false)
        })();
        match admitted {
            None => continue,
            Some(true) => return (Reservation { need }, waited),
            Some(false) => {}
        }
        waited = true;
        ROOM.pressure.notify_one();
        if !crate::agent::stats::runs_here() {
            tell_agent(cluster).await;
        }
        tokio::time::sleep(GATE_POLL).await;
    }
}

/// Sends this process's wants to the agent's process (MDT0's), at most every
/// [`TIER_TICK`], and marks the OSTs it answers as stuck (see the module header). A
/// failure is logged: the chunks then wait for usage to pass the mark, or
/// [`GATE_WAIT`].
async fn tell_agent(cluster: &Cluster) {
    let wants: Vec<OstWant> = {
        let mut st = ROOM.state.lock();
        let now = Instant::now();
        if st.told.is_some_and(|t| now.duration_since(t) < TIER_TICK) || st.wanted.is_empty() {
            return;
        }
        st.told = Some(now);
        st.wanted
            .iter()
            .map(|(ost, bytes)| OstWant {
                ost: *ost,
                bytes: *bytes,
            })
            .collect()
    };
    let req = MdtRequest::HsmTieringWants { wants };
    let answer = match cluster.mdt(0) {
        Ok(mdt0) => tokio::time::timeout(TELL_TIMEOUT, mdt0.call(req))
            .await
            .map_err(|_| "no answer in time".to_string())
            .and_then(|r| r.map_err(|e| e.to_string())),
        Err(e) => Err(e.to_string()),
    };
    match answer {
        Ok(MdtReply::TieringStuck(osts)) => {
            let now = Instant::now();
            let mut st = ROOM.state.lock();
            for o in osts {
                st.stuck.insert(o, now);
            }
        }
        Ok(other) => tracing::debug!(?other, "MDT0 answered tiering wants unexpectedly"),
        Err(e) => tracing::debug!(error = %e, "could not tell MDT0 the tiering wants"),
    }
}

/// Wants of restores in another MDS process (`MdtRequest::HsmTieringWants`), for this
/// process's agent: counted for [`REMOTE_WANT_TTL`], and the agent woken. Answers the
/// OSTs among them on which the agent found nothing to release within that time.
pub fn wants_from_elsewhere(wants: &[OstWant]) -> Vec<u32> {
    let now = Instant::now();
    let stuck = {
        let mut st = ROOM.state.lock();
        st.remote
            .retain(|_, (_, at)| now.duration_since(*at) < REMOTE_WANT_TTL);
        for w in wants {
            st.remote.insert(w.ost, (w.bytes, now));
        }
        wants
            .iter()
            .filter(|w| {
                st.stuck
                    .get(&w.ost)
                    .is_some_and(|t| now.duration_since(*t) < REMOTE_WANT_TTL)
            })
            .map(|w| w.ost)
            .collect()
    };
    ROOM.pressure.notify_one();
    stuck
}

/// Waits for a chunk to want room (or for `d`).
pub(crate) async fn pressure_or(d: Duration) {
    tokio::select! {
        _ = ROOM.pressure.notified() => {}
        _ = tokio::time::sleep(d) => {}
    }
}

/// What one pass released.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Released {
    /// Files released.
    pub files: u64,
    /// Their bytes (sizes).
    pub bytes: u64,
}

/// A file the releaser may release.
struct Candidate {
    fid: Fid,
    rel: String,
    used: Timestamp,
    size: u64,
    data_version: u64,
}

/// Whether a walked file is a candidate of `repo` under `policy` at `now`.
fn candidate(w: &Walked, repo: &Repo, policy: &TieringPolicy, now: Timestamp) -> bool {
    let want = HSM_EXISTS | HSM_ARCHIVED;
    let refuse = HSM_RELEASED | HSM_DIRTY | HSM_NORELEASE | HSM_LOST;
    w.regular
        && w.hsm_flags & want == want
        && w.hsm_flags & refuse == 0
        && w.archive_id == repo.id
        && w.open_count == 0
        && w.size > 0
        && now.sec.saturating_sub(w.used.sec)
            >= i64::try_from(policy.min_age_secs).unwrap_or(i64::MAX)
}

/// One look at the OSTs for every repository with tiering (see the module header).
pub(crate) async fn tier_pass(client: &Client, repos: &[Repo]) -> Result<Released, RepoError> {
    let mut total = Released::default();
    for repo in repos {
        let Some(policy) = repo.tiering else { continue };
        let r = tier_repo(client, repo, &policy).await?;
        total.files += r.files;
        total.bytes += r.bytes;
    }
    Ok(total)
}

/// The OSTs of the file system with their usage (those that answer).
async fn all_usage(cluster: &Cluster) -> HashMap<u32, Usage> {
    let config = cluster.config();
    let mut out = HashMap::new();
    for t in config.targets_of(weft_proto::TargetKind::Ost) {
        if let Some(u) = usage(cluster, t.id.index).await {
            out.insert(t.id.index, u);
        }
    }
    out
}

async fn tier_repo(
    client: &Client,
    repo: &Repo,
    policy: &TieringPolicy,
) -> Result<Released, RepoError> {
    let cluster = client.cluster();
    let usages = all_usage(cluster).await;
    let wanted = ROOM.state.lock().all_wanted(Instant::now());
    let over = |ost: &u32, u: &Usage, used: u64, pct: u8| {
        used.saturating_add(wanted.get(ost).copied().unwrap_or(0))
            > TieringPolicy::mark(u.total, pct)
    };
    let hot: HashSet<u32> = usages
        .iter()
        .filter(|(o, u)| over(o, u, u.used, policy.high_pct))
        .map(|(o, _)| *o)
        .collect();
    if hot.is_empty() {
        return Ok(Released::default());
    }
    // The candidates, least recently used first.
    let now = Timestamp::now();
    let mut cands = Vec::new();
    walk(client, repo.dir, |w| {
        if candidate(&w, repo, policy, now) {
            cands.push(Candidate {
                fid: w.fid,
                rel: w.rel,
                used: w.used,
                size: w.size,
                data_version: w.data_version,
            });
        }
    })
    .await?;
    cands.sort_by_key(|c| (c.used.sec, c.used.nsec));
    // Usage as releases will leave it (estimated from the files' layouts).
    let mut est: HashMap<u32, u64> = usages.iter().map(|(o, u)| (*o, u.used)).collect();
    let still_over = |est: &HashMap<u32, u64>, ost: &u32| {
        let u = &usages[ost];
        over(ost, u, est.get(ost).copied().unwrap_or(0), policy.low_pct)
    };
    let mut out = Released::default();
    let root = Credentials::root();
    for c in cands {
        if !hot.iter().any(|o| still_over(&est, o)) {
            break;
        }
        let layout = match client.cluster().mdt_of(c.fid)?.get_layout(c.fid).await {
            Ok(Some(l)) => l,
            Ok(None) => continue,
            Err(e) => {
                tracing::debug!(repo = repo.id, path = %c.rel, "layout not read: {e}");
                continue;
            }
        };
        // Bytes on each OST: the file's size spread over the OSTs of the components
        // covering it.
        let pieces = weft_client::layout::map_range(&layout, c.fid, 0, c.size).ok();
        let mut on: HashMap<u32, u64> = HashMap::new();
        for p in pieces.iter().flatten() {
            *on.entry(p.ost).or_default() += p.len;
        }
        if !on.keys().any(|o| hot.contains(o) && still_over(&est, o)) {
            continue;
        }
        match client.hsm_release(c.fid, Some(c.data_version), &root).await {
            Ok(_) => {
                tracing::debug!(repo = repo.id, path = %c.rel, size = c.size, "tiering: released");
                out.files += 1;
                out.bytes += c.size;
                for (o, n) in on {
                    if let Some(e) = est.get_mut(&o) {
                        *e = e.saturating_sub(n);
                    }
                }
            }
            // Opened, changed or released since the walk: not this time.
            Err(e) if matches!(e.errno(), Errno::Busy | Errno::NoEnt | Errno::Stale) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let now = Instant::now();
    {
        let mut st = ROOM.state.lock();
        for o in hot.iter().filter(|o| still_over(&est, o)) {
            st.stuck.insert(*o, now);
        }
    }
    if out.files > 0 {
        tracing::info!(
            repo = repo.id,
            files = out.files,
            bytes = out.bytes,
            "tiering: released least recently used files"
        );
        settle(cluster, &hot, &usages, &est).await;
    }
    Ok(out)
}

/// Waits until the hot OSTs' usage came down to what the releases should leave (their
/// objects are destroyed after the MDT's next durable commit), at most [`SETTLE_WAIT`].
async fn settle(
    cluster: &Cluster,
    hot: &HashSet<u32>,
    before: &HashMap<u32, Usage>,
    est: &HashMap<u32, u64>,
) {
    let deadline = Instant::now() + SETTLE_WAIT;
    while Instant::now() < deadline {
        let mut done = true;
        for o in hot {
            let (Some(b), Some(e)) = (before.get(o), est.get(o)) else {
                continue;
            };
            // Halfway down from before to the estimate is enough: usage moves for other
            // reasons too (writes, restores of other files).
            let target = e.saturating_add(b.used.saturating_sub(*e) / 2);
            if usage(cluster, *o).await.is_some_and(|u| u.used > target) {
                done = false;
            }
        }
        if done {
            return;
        }
        tokio::time::sleep(GATE_POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wants_of_other_processes_count_with_this_ones_until_they_are_stale() {
        let now = Instant::now();
        let mut st = RoomState::default();
        st.wanted.insert(0, 10);
        st.wanted.insert(1, 5);
        st.remote.insert(1, (7, now));
        st.remote.insert(2, (3, now));
        st.remote.insert(3, (9, now - REMOTE_WANT_TTL));
        let all = st.all_wanted(now);
        assert_eq!(all.get(&0), Some(&10), "this process's alone");
        assert_eq!(all.get(&1), Some(&7), "the larger of the two");
        assert_eq!(all.get(&2), Some(&3), "another process's alone");
        assert_eq!(all.get(&3), None, "not sent again within the TTL");
        assert_eq!(all.len(), 3);
    }

    #[test]
    fn candidates_are_archived_clean_closed_and_old_enough() {
        let repo = Repo {
            id: 3,
            spec: weft_proto::hsm::RepoSpec {
                path: "/d".into(),
                url: "file:///x".into(),
                endpoint: None,
                region: None,
                path_style: false,
                import_policy: Default::default(),
                export_policy: Default::default(),
                import_metadata: false,
                events: None,
                chunk_size: 1 << 30,
            },
            dir: Fid::ROOT,
            created: Timestamp::default(),
            tiering: None,
        };
        let policy = TieringPolicy {
            high_pct: 80,
            low_pct: 60,
            min_age_secs: 100,
        };
        let now = Timestamp {
            sec: 1_000,
            nsec: 0,
        };
        let w = |flags, archive_id, open_count, used_sec| Walked {
            parent: Fid::ROOT,
            parent_rel: String::new(),
            name: b"f".to_vec(),
            rel: "f".into(),
            fid: Fid::ROOT,
            regular: true,
            hsm_flags: flags,
            archive_id,
            open_count,
            size: 10,
            used: Timestamp {
                sec: used_sec,
                nsec: 0,
            },
            data_version: 1,
        };
        let ok = HSM_EXISTS | HSM_ARCHIVED;
        assert!(candidate(&w(ok, 3, 0, 900), &repo, &policy, now));
        assert!(
            !candidate(&w(ok, 3, 0, 901), &repo, &policy, now),
            "too young"
        );
        assert!(
            !candidate(&w(ok, 4, 0, 0), &repo, &policy, now),
            "another repository"
        );
        assert!(!candidate(&w(ok, 3, 1, 0), &repo, &policy, now), "open");
        for bad in [HSM_RELEASED, HSM_DIRTY, HSM_NORELEASE, HSM_LOST] {
            assert!(
                !candidate(&w(ok | bad, 3, 0, 0), &repo, &policy, now),
                "{bad:#x}"
            );
        }
        assert!(
            !candidate(&w(HSM_EXISTS, 3, 0, 0), &repo, &policy, now),
            "not archived"
        );
    }
}
