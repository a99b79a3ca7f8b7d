//! The repository agent: automatic import and export (FSx for Lustre's `AutoImportPolicy`
//! and `AutoExportPolicy`), run by the MDS serving MDT0, one per file system.
//!
//! Every sweep interval (`weft mds --repo-interval-ms`, default 5 s), the agent reads the
//! current configuration (associations made or removed at run time are picked up at the
//! next sweep) and, for each repository with a policy, runs step 4 (with the moved-file
//! part of step 3) first, so that a file removed here is not imported back from its
//! object in the same sweep, then steps 1, 2 and 3:
//!
//! 1. **Import NEW / CHANGED**: an import of the whole prefix ([`crate::import`]); the MDT
//!    decides each object's outcome: created, unchanged (same key, tag and size), updated
//!    (released against the new version, loaded data dropped) or conflict (a local file
//!    with unexported changes, or open for writing: logged, retried at the next sweep).
//!    Objects an earlier sweep settled and that the listing shows at the same version
//!    (tag, size, time) are skipped without a HEAD ([`crate::import::seen`]), so a steady
//!    sweep costs its listing: as with FSx's event-driven import, a file deleted here is
//!    not brought back while its object is unchanged (the agent's first sweep after a
//!    restart, which knows nothing yet, imports everything like `weft repo import`).
//!    Without `NEW`, names that do not exist are left out; without `CHANGED`, names that
//!    do (one lookup per object then).
//! 2. **Import DELETED**: a walk of the linked directory; a file (or symlink) archived in
//!    this repository (`EXISTS`, not `DIRTY`, `archive_id` this repository's, nobody has it
//!    open) whose key (prefix + relative path, or the key its archive reference names) is
//!    not listed any more, and that a HEAD confirms gone, is unlinked; then each directory
//!    such unlinks emptied is removed (an `rmdir`, so a directory holding anything else
//!    stays), up to but not including the linked directory.
//! 3. **Export NEW / CHANGED**: an export of the linked directory ([`crate::export`]),
//!    leaving out files open somewhere (`open_count > 0`: taken at a later sweep, after the
//!    last close). Files the import made are archived, not dirty, so they are not sent
//!    back. A file that moved (its archive reference names another key than its path's)
//!    is exported again at its new key.
//! 4. **Export DELETED**: the keys of the files seen by the previous sweep's walk that the
//!    current walk does not see any more (deleted or renamed) are deleted from the store.
//!    The first sweep after the agent starts only records (deletions while it was down are
//!    not carried).
//!
//! **Event notifications** (`weft repo create --events QUEUE_URL`, [`crate::events`]):
//! one receiver per queue long-polls it and applies each created or removed object under
//! a repository's prefix at once: a created one is imported as step 1 imports a listed
//! one, a removed one's file goes as in step 2 (the object confirmed gone by a HEAD).
//! Steps 1 and 2 of such a repository then run only every
//! [`AgentConfig::events_sweep`] (default [`EVENTS_SWEEP_INTERVAL`]), as the safety net
//! for events lost or never configured, and at the next sweep after an event renamed or
//! deleted the linked prefix itself or a directory above it (a hierarchical namespace's
//! `DirectoryRenamed`/`DirectoryDeleted`) or after a sweep whose steps 1 or 2 failed;
//! steps 3 and 4 every sweep as before. A message is deleted once its changes are
//! applied; one that could not be (store or MDT errors) comes back after the queue's
//! visibility timeout, one that is no S3 event is deleted with a warning.
//!
//! Errors (store down, throttling, MDT errors) are logged with the repository's id and
//! retried at the next sweep; a file whose export failed stays dirty. Credentials are
//! never logged: errors from the store are [`RepoError`](crate::RepoError)s, made without them.
//!
//! Memory: the listing of step 2 is kept as a set of keys of at most [`LISTED_MAX`] keys;
//! beyond, every candidate for deletion is checked with a HEAD instead. It is step 1's
//! listing when step 1 ran (one listing per sweep), else a listing of its own. The keys of step 4
//! are at most [`WALK_KEYS_MAX`]; beyond, deletions are not carried for that sweep (and
//! the next one only records). Neither survives a restart. Each sweep lists the whole
//! prefix (a HEAD only per new or changed object, up to [`crate::import::seen::SEEN_MAX`]
//! remembered) and walks the whole linked directory: its cost grows with the repository,
//! which is why a repository with an event queue lists rarely.

mod events;
mod moved_and_deleted;
mod removal;
pub(crate) mod stats;
pub(crate) mod walk;

use stats::Counters;
pub use stats::{AGENT_STATS, AgentStats, running_stats};
pub(crate) use walk::{Walked, walk, walk_under};

use crate::export::{self, ExportOptions};
use crate::import::seen::Seen;
use crate::import::{self, ImportOptions, ListedKeys};
use crate::store::RepoStore;
use moved_and_deleted::{export_moved_and_deleted, key_of};
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use weft_client::Client;
use weft_proto::hsm::Repo;

/// The default time between two sweeps.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(5);
/// The default time between two listings (steps 1 and 2) of a repository whose bucket
/// sends event notifications.
pub const EVENTS_SWEEP_INTERVAL: Duration = Duration::from_secs(600);

/// How often the agent works.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AgentConfig {
    /// Time between two sweeps.
    pub interval: Duration,
    /// Time between two listings of a repository with an event queue.
    pub events_sweep: Duration,
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            interval: SWEEP_INTERVAL,
            events_sweep: EVENTS_SWEEP_INTERVAL,
        }
    }
}
/// Most keys of a listing kept for the deletion check (else a HEAD per candidate).
pub const LISTED_MAX: usize = 500_000;
/// Most file keys remembered between two sweeps for deletions (else none carried).
pub const WALK_KEYS_MAX: usize = 500_000;
/// Files imported or exported at once.
const PARALLEL: usize = 4;

/// The running agent; [`RepoAgent::stop`] ends it.
pub struct RepoAgent {
    counters: Arc<Counters>,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
    tiering: Option<JoinHandle<()>>,
}

impl RepoAgent {
    /// Starts sweeping every `config.interval` with `client` (acting as root), and
    /// looking at OST usage for tiering every [`crate::tiering::TIER_TICK`].
    pub fn start(client: Arc<Client>, config: AgentConfig) -> Self {
        let counters = Arc::new(Counters::default());
        stats::set_running(&counters);
        let (stop, stopped) = watch::channel(false);
        let tiering = tokio::spawn(run_tiering(
            client.clone(),
            counters.clone(),
            stopped.clone(),
        ));
        let task = tokio::spawn(run(client, config, counters.clone(), stopped));
        Self {
            counters,
            stop,
            task: Some(task),
            tiering: Some(tiering),
        }
    }

    /// What it did so far.
    pub fn stats(&self) -> AgentStats {
        self.counters.snapshot()
    }

    /// Stops it: a sweep under way is abandoned where it is (a file being exported stays
    /// dirty; its multipart upload, if any, is left to the store's lifecycle rules).
    pub async fn stop(mut self) {
        let _ = self.stop.send(true);
        for t in [self.task.take(), self.tiering.take()]
            .into_iter()
            .flatten()
        {
            let _ = t.await;
        }
    }
}

impl Drop for RepoAgent {
    fn drop(&mut self) {
        for t in [self.task.take(), self.tiering.take()]
            .into_iter()
            .flatten()
        {
            t.abort();
        }
    }
}

/// The tiering loop (see [`crate::tiering`]): a pass every tick, or at once when a
/// restore waits for room.
async fn run_tiering(
    client: Arc<Client>,
    counters: Arc<Counters>,
    mut stopped: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = stopped.wait_for(|s| *s) => return,
            _ = crate::tiering::pressure_or(crate::tiering::TIER_TICK) => {}
        }
        let config = client.cluster().config();
        let repos: Vec<Repo> = config
            .repos
            .iter()
            .filter(|r| r.tiering.is_some())
            .cloned()
            .collect();
        if repos.is_empty() {
            continue;
        }
        tokio::select! {
            _ = stopped.wait_for(|s| *s) => return,
            r = crate::tiering::tier_pass(&client, &repos) => match r {
                Ok(r) => {
                    Counters::add(&counters.released, r.files);
                    Counters::add(&counters.released_bytes, r.bytes);
                }
                Err(e) => {
                    tracing::warn!("tiering: {e}");
                    Counters::add(&counters.errors, 1);
                }
            }
        }
    }
}

/// A repository's state between sweeps.
struct RepoState {
    /// The association it belongs to (an association made again, even alike, starts over).
    repo: Repo,
    store: RepoStore,
    /// The file keys the previous walk saw (export `DELETED`).
    walked: Option<HashSet<String>>,
    /// The objects earlier sweeps imported or found unchanged, at their versions: a sweep
    /// skips them without a HEAD while the listing shows them unchanged.
    seen: Arc<Mutex<Seen>>,
    /// When steps 1 and 2 last ran (a repository with an event queue lists rarely).
    listed_at: Option<Instant>,
}

/// Repositories an event said were renamed or deleted as a whole (their prefix, or a
/// directory above it): the receivers put them here, the next sweep lists them.
pub(crate) type Relist = Arc<Mutex<HashSet<u32>>>;

/// What the agent keeps between sweeps.
struct Agent {
    config: AgentConfig,
    states: HashMap<u32, RepoState>,
    /// The event queues' receivers, by queue URL (dropped: stopped).
    queues: HashMap<String, events::Receiver>,
    relist: Relist,
}

async fn run(
    client: Arc<Client>,
    config: AgentConfig,
    counters: Arc<Counters>,
    mut stopped: watch::Receiver<bool>,
) {
    let mut agent = Agent {
        config,
        states: HashMap::new(),
        queues: HashMap::new(),
        relist: Relist::default(),
    };
    loop {
        tokio::select! {
            _ = stopped.wait_for(|s| *s) => return,
            _ = sweep(&client, &mut agent, &counters) => {}
        }
        tokio::select! {
            _ = stopped.wait_for(|s| *s) => return,
            _ = tokio::time::sleep(config.interval) => {}
        }
    }
}

/// Whether `a` and `b` are the same association, as made: the same directory and store
/// (its policies, event queue and tiering may change: `weft repo update`, `tiering`).
fn same_association(a: &Repo, b: &Repo) -> bool {
    let store = |r: &Repo| {
        let s = &r.spec;
        (
            s.path.clone(),
            s.url.clone(),
            s.endpoint.clone(),
            s.region.clone(),
            s.path_style,
            s.chunk_size,
            r.dir,
            r.created,
        )
    };
    store(a) == store(b)
}

/// One sweep over every repository of the current configuration.
async fn sweep(client: &Arc<Client>, agent: &mut Agent, c: &Arc<Counters>) {
    let states = &mut agent.states;
    let config = client.cluster().config();
    let repos: Vec<Repo> = config
        .repos
        .iter()
        .filter(|r| r.spec.import_policy.any() || r.spec.export_policy.any())
        .cloned()
        .collect();
    states.retain(|id, _| repos.iter().any(|r| r.id == *id));
    for repo in &repos {
        if states
            .get(&repo.id)
            .is_none_or(|s| !same_association(&s.repo, repo))
        {
            match RepoStore::open(&repo.spec) {
                Ok(store) => {
                    states.insert(
                        repo.id,
                        RepoState {
                            repo: repo.clone(),
                            store,
                            walked: None,
                            seen: Arc::default(),
                            listed_at: None,
                        },
                    );
                }
                Err(e) => {
                    tracing::warn!(repo = repo.id, "repository agent: store not opened: {e}");
                    Counters::add(&c.errors, 1);
                }
            }
        }
    }
    follow_queues(client, &repos, agent, c);
    for repo in &repos {
        if let Some(state) = agent.states.get_mut(&repo.id) {
            let relist = agent.relist.lock().remove(&repo.id);
            sweep_repo(client, repo, state, agent.config, relist, c).await;
        }
    }
    Counters::add(&c.sweeps, 1);
}

/// Starts a receiver for each event queue a repository with an import policy names (with
/// the first such repository's credentials), and stops those no repository names.
fn follow_queues(client: &Arc<Client>, repos: &[Repo], agent: &mut Agent, c: &Arc<Counters>) {
    let wanted: HashMap<&str, &Repo> = repos
        .iter()
        .filter(|r| r.spec.import_policy.any())
        .filter_map(|r| r.spec.events.as_deref().map(|q| (q, r)))
        .collect();
    agent.queues.retain(|q, _| wanted.contains_key(q.as_str()));
    for (queue, repo) in wanted {
        if agent.queues.contains_key(queue) {
            continue;
        }
        let Some(state) = agent.states.get(&repo.id) else {
            continue;
        };
        let relist = agent.relist.clone();
        match events::Receiver::start(client.clone(), queue, &state.store, c.clone(), relist) {
            Ok(r) => {
                tracing::info!(repo = repo.id, queue, "following the bucket's event queue");
                agent.queues.insert(queue.to_string(), r);
            }
            Err(e) => {
                tracing::warn!(repo = repo.id, "event queue not followed: {e}");
                Counters::add(&c.errors, 1);
            }
        }
    }
}

async fn sweep_repo(
    client: &Arc<Client>,
    repo: &Repo,
    state: &mut RepoState,
    config: AgentConfig,
    relist: bool,
    c: &Counters,
) {
    let (ip, ep) = (repo.spec.import_policy, repo.spec.export_policy);
    // Deletions first: a file removed here must not come back by the import below.
    if (ep.new || ep.deleted)
        && let Err(e) = export_moved_and_deleted(client, repo, state, c).await
    {
        tracing::warn!(repo = repo.id, "auto export of renames and deletions: {e}");
        Counters::add(&c.errors, 1);
    }
    let store = &state.store;
    // With an event queue, the listing steps are the safety net: rarely, or when an
    // event moved the whole prefix.
    let list_now = repo.spec.events.is_none()
        || relist
        || state
            .listed_at
            .is_none_or(|t| t.elapsed() >= config.events_sweep);
    if list_now {
        state.listed_at = Some(Instant::now());
    }
    // The import's listing, kept for the deletion check below (one listing per sweep).
    let mut listed: Option<Option<HashSet<String>>> = None;
    if list_now && (ip.new || ip.changed) {
        let keys = ip
            .deleted
            .then(|| Arc::new(Mutex::new(ListedKeys::new(LISTED_MAX))));
        let opts = ImportOptions {
            parallel: PARALLEL,
            skip_new: !ip.new,
            skip_changed: !ip.changed,
            seen: Some(state.seen.clone()),
            listed: keys.clone(),
            ..Default::default()
        };
        match import::import_from(client, repo, store, &opts, &|_| {}).await {
            Ok(p) => {
                listed = keys.map(|k| k.lock().take());
                count_import(c, repo.id, &p, "auto import");
            }
            Err(e) => {
                tracing::warn!(repo = repo.id, "auto import: {e}");
                Counters::add(&c.errors, 1);
                // Listed again at the next sweep, not at the next safety-net listing
                // (`events_sweep` away with an event queue): what changed while the store
                // failed may have sent no event, or the one this listing stands in for.
                state.listed_at = None;
            }
        }
    }
    if list_now
        && ip.deleted
        && let Err(e) = removal::import_deleted(client, repo, store, listed, c).await
    {
        tracing::warn!(repo = repo.id, "auto import of deletions: {e}");
        Counters::add(&c.errors, 1);
        state.listed_at = None;
    }
    if ep.new || ep.changed {
        let opts = ExportOptions {
            parallel: PARALLEL,
            skip_open: true,
            skip_new: !ep.new,
            skip_changed: !ep.changed,
            ..Default::default()
        };
        match export::export_to(client, repo, store, &repo.spec.path, &opts, &|_| {}).await {
            Ok(p) => {
                Counters::add(&c.exported, p.exported);
                Counters::add(&c.errors, p.failed);
                if p.failed > 0 {
                    tracing::warn!(
                        repo = repo.id,
                        exported = p.exported,
                        bytes = p.bytes,
                        failed = p.failed,
                        "auto export: some failed (left dirty)"
                    );
                } else if p.exported > 0 {
                    tracing::info!(
                        repo = repo.id,
                        exported = p.exported,
                        bytes = p.bytes,
                        "auto export"
                    );
                }
            }
            Err(e) => {
                tracing::warn!(repo = repo.id, "auto export: {e}");
                Counters::add(&c.errors, 1);
            }
        }
    }
}

/// Counts what an automatic import (`what`: a sweep's or an event batch's) did, and logs
/// it when it did anything.
fn count_import(c: &Counters, repo: u32, p: &import::ImportProgress, what: &str) {
    Counters::add(&c.imported, p.created + p.updated);
    Counters::add(&c.skipped, p.skipped);
    Counters::add(&c.conflicts, p.conflicts);
    Counters::add(&c.errors, p.failed);
    let (created, updated, conflicts, failed) = (p.created, p.updated, p.conflicts, p.failed);
    if failed > 0 {
        tracing::warn!(
            repo,
            created,
            updated,
            conflicts,
            failed,
            "{what}: some failed"
        );
    } else if created + updated + conflicts > 0 {
        tracing::info!(repo, created, updated, conflicts, "{what}");
    }
}
