//! What the agent has done: its figures ([`AgentStats`]) and how they are reported
//! ([`AGENT_STATS`]).

use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use weft_rpc::metric::MetricDef;
use weft_rpc::metric::Stat;
/// The counters of the agent this process runs (one at most: the MDS serving MDT0, or
/// `weft up`), for [`running_stats`].
static RUNNING: Mutex<std::sync::Weak<Counters>> = Mutex::new(std::sync::Weak::new());

/// Whether this process runs a repository agent (it serves MDT0).
pub(crate) fn runs_here() -> bool {
    RUNNING.lock().strong_count() > 0
}

/// What the agent this process runs did so far (`None` when it runs none).
pub fn running_stats() -> Option<AgentStats> {
    RUNNING.lock().upgrade().map(|c| c.snapshot())
}

/// The agent's counters, shared by its tasks.
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) sweeps: AtomicU64,
    pub(super) imported: AtomicU64,
    pub(super) events: AtomicU64,
    pub(super) skipped: AtomicU64,
    pub(super) exported: AtomicU64,
    pub(super) deleted: AtomicU64,
    pub(super) conflicts: AtomicU64,
    pub(super) errors: AtomicU64,
    pub(super) released: AtomicU64,
    pub(super) released_bytes: AtomicU64,
}

impl Counters {
    pub(super) fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }
}

/// Makes `counters` those of the agent this process runs.
pub(super) fn set_running(counters: &Arc<Counters>) {
    *RUNNING.lock() = Arc::downgrade(counters);
}

/// What the agent did since it started.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentStats {
    /// Sweeps finished (over every repository).
    pub sweeps: u64,
    /// Files created or updated by automatic imports (listings and events).
    pub imported: u64,
    /// Event messages received from the repositories' queues.
    pub events: u64,
    /// Listed objects the automatic import skipped, unchanged since an earlier sweep
    /// settled them (no HEAD, no MDT request).
    pub skipped: u64,
    /// Files exported by automatic exports.
    pub exported: u64,
    /// Files and directories removed (import `DELETED`) and objects deleted (export
    /// `DELETED`).
    pub deleted: u64,
    /// Import conflicts (a name the import must not replace).
    pub conflicts: u64,
    /// Errors: failed listings, imports, exports, deletions, tiering passes.
    pub errors: u64,
    /// Files released by tiering.
    pub released: u64,
    /// Their bytes.
    pub released_bytes: u64,
}

/// Every figure of [`AgentStats`], as MDT0 reports them while this process runs the agent
/// (`get_param mdt.*-MDT0000.repo_agent.*`; Prometheus `weft_mdt_repo_agent_*`).
pub const AGENT_STATS: [Stat<AgentStats>; 10] = [
    Stat::new(
        MetricDef::counter(
            "repo_agent.sweeps",
            "Sweeps finished over every repository.",
        )
        .exported_as("repo_agent_sweeps"),
        |s| s.sweeps,
    ),
    Stat::new(
        MetricDef::counter(
            "repo_agent.imported",
            "Files created or updated by automatic imports.",
        )
        .exported_as("repo_agent_imported"),
        |s| s.imported,
    ),
    Stat::new(
        MetricDef::counter(
            "repo_agent.events",
            "Event messages received from the repositories' queues.",
        )
        .exported_as("repo_agent_events"),
        |s| s.events,
    ),
    Stat::new(
        MetricDef::counter(
            "repo_agent.skipped",
            "Listed objects skipped, unchanged since an earlier sweep.",
        )
        .exported_as("repo_agent_skipped"),
        |s| s.skipped,
    ),
    Stat::new(
        MetricDef::counter(
            "repo_agent.exported",
            "Files exported by automatic exports.",
        )
        .exported_as("repo_agent_exported"),
        |s| s.exported,
    ),
    Stat::new(
        MetricDef::counter(
            "repo_agent.deleted",
            "Files and directories removed, and objects deleted, for deletions.",
        )
        .exported_as("repo_agent_deleted"),
        |s| s.deleted,
    ),
    Stat::new(
        MetricDef::counter("repo_agent.conflicts", "Import conflicts.")
            .exported_as("repo_agent_conflicts"),
        |s| s.conflicts,
    ),
    Stat::new(
        MetricDef::counter(
            "repo_agent.errors",
            "Failed listings, imports, exports, deletions and tiering passes.",
        )
        .exported_as("repo_agent_errors"),
        |s| s.errors,
    ),
    Stat::new(
        MetricDef::counter("repo_agent.released", "Files released by tiering.")
            .exported_as("repo_agent_released"),
        |s| s.released,
    ),
    Stat::new(
        MetricDef::counter(
            "repo_agent.released_bytes",
            "Bytes of the files released by tiering.",
        )
        .exported_as("repo_agent_released_bytes"),
        |s| s.released_bytes,
    ),
];

impl Counters {
    pub(super) fn snapshot(&self) -> AgentStats {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        AgentStats {
            sweeps: g(&self.sweeps),
            imported: g(&self.imported),
            events: g(&self.events),
            skipped: g(&self.skipped),
            exported: g(&self.exported),
            deleted: g(&self.deleted),
            conflicts: g(&self.conflicts),
            errors: g(&self.errors),
            released: g(&self.released),
            released_bytes: g(&self.released_bytes),
        }
    }
}
