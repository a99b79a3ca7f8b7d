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
//! Errors (store down, throttling, MDT errors) are logged with the repository's id and
//! retried at the next sweep; a file whose export failed stays dirty. Credentials are
//! never logged: errors from the store are [`RepoError`]s, made without them.
//!
//! Memory: the listing of step 2 is kept as a set of keys of at most [`LISTED_MAX`] keys;
//! beyond, every candidate for deletion is checked with a HEAD instead. It is step 1's
//! listing when step 1 ran (one listing per sweep), else a listing of its own. The keys of step 4
//! are at most [`WALK_KEYS_MAX`]; beyond, deletions are not carried for that sweep (and
//! the next one only records). Neither survives a restart. Each sweep lists the whole
//! prefix (a HEAD only per new or changed object, up to [`crate::import::seen::SEEN_MAX`]
//! remembered) and walks the whole linked directory: its cost grows with the repository
//! (store event notifications would be the scalable shape).

use crate::error::RepoError;
use crate::export::{self, ExportOptions, key_for};
use crate::import::seen::Seen;
use crate::import::{self, ImportOptions, ListedKeys};
use crate::store::RepoStore;
use futures::StreamExt;
use object_store::ObjectStoreExt;
use object_store::path::Path;
use parking_lot::Mutex;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use weft_client::Client;
use weft_proto::hsm::{HSM_DIRTY, HSM_EXISTS, HSM_RELEASED, Repo};
use weft_proto::mdt::{Credentials, FileKind};
use weft_proto::{Errno, Fid, Timestamp};

/// The default time between two sweeps.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(5);
/// Most keys of a listing kept for the deletion check (else a HEAD per candidate).
pub const LISTED_MAX: usize = 500_000;
/// Most file keys remembered between two sweeps for deletions (else none carried).
pub const WALK_KEYS_MAX: usize = 500_000;
/// Files imported or exported at once.
const PARALLEL: usize = 4;

/// What the agent did since it started.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentStats {
    /// Sweeps finished (over every repository).
    pub sweeps: u64,
    /// Files created or updated by automatic imports.
    pub imported: u64,
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

#[derive(Debug, Default)]
struct Counters {
    sweeps: AtomicU64,
    imported: AtomicU64,
    skipped: AtomicU64,
    exported: AtomicU64,
    deleted: AtomicU64,
    conflicts: AtomicU64,
    errors: AtomicU64,
    released: AtomicU64,
    released_bytes: AtomicU64,
}

impl Counters {
    fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }

    fn snapshot(&self) -> AgentStats {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        AgentStats {
            sweeps: g(&self.sweeps),
            imported: g(&self.imported),
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

/// The running agent; [`RepoAgent::stop`] ends it.
pub struct RepoAgent {
    counters: Arc<Counters>,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
    tiering: Option<JoinHandle<()>>,
}

impl RepoAgent {
    /// Starts sweeping every `interval` with `client` (acting as root), and looking at
    /// OST usage for tiering every [`crate::tiering::TIER_TICK`].
    pub fn start(client: Arc<Client>, interval: Duration) -> Self {
        let counters = Arc::new(Counters::default());
        let (stop, stopped) = watch::channel(false);
        let tiering = tokio::spawn(run_tiering(
            client.clone(),
            counters.clone(),
            stopped.clone(),
        ));
        let task = tokio::spawn(run(client, interval, counters.clone(), stopped));
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
}

async fn run(
    client: Arc<Client>,
    interval: Duration,
    counters: Arc<Counters>,
    mut stopped: watch::Receiver<bool>,
) {
    let mut states: HashMap<u32, RepoState> = HashMap::new();
    loop {
        tokio::select! {
            _ = stopped.wait_for(|s| *s) => return,
            _ = sweep(&client, &mut states, &counters) => {}
        }
        tokio::select! {
            _ = stopped.wait_for(|s| *s) => return,
            _ = tokio::time::sleep(interval) => {}
        }
    }
}

/// Whether `a` and `b` are the same association, as made (its tiering policy may change).
fn same_association(a: &Repo, b: &Repo) -> bool {
    (&a.spec, a.dir, a.created) == (&b.spec, b.dir, b.created)
}

/// One sweep over every repository of the current configuration.
async fn sweep(client: &Arc<Client>, states: &mut HashMap<u32, RepoState>, c: &Counters) {
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
                        },
                    );
                }
                Err(e) => {
                    tracing::warn!(repo = repo.id, "repository agent: store not opened: {e}");
                    Counters::add(&c.errors, 1);
                    continue;
                }
            }
        }
        if let Some(state) = states.get_mut(&repo.id) {
            sweep_repo(client, repo, state, c).await;
        }
    }
    Counters::add(&c.sweeps, 1);
}

async fn sweep_repo(client: &Arc<Client>, repo: &Repo, state: &mut RepoState, c: &Counters) {
    let (ip, ep) = (repo.spec.import_policy, repo.spec.export_policy);
    // Deletions first: a file removed here must not come back by the import below.
    if (ep.new || ep.deleted)
        && let Err(e) = export_moved_and_deleted(client, repo, state, c).await
    {
        tracing::warn!(repo = repo.id, "auto export of renames and deletions: {e}");
        Counters::add(&c.errors, 1);
    }
    let store = &state.store;
    // The import's listing, kept for the deletion check below (one listing per sweep).
    let mut listed: Option<Option<HashSet<String>>> = None;
    if ip.new || ip.changed {
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
                Counters::add(&c.imported, p.created + p.updated);
                Counters::add(&c.skipped, p.skipped);
                Counters::add(&c.conflicts, p.conflicts);
                Counters::add(&c.errors, p.failed);
                if p.failed > 0 {
                    tracing::warn!(
                        repo = repo.id,
                        created = p.created,
                        updated = p.updated,
                        conflicts = p.conflicts,
                        failed = p.failed,
                        "auto import: some failed"
                    );
                } else if p.created + p.updated + p.conflicts > 0 {
                    tracing::info!(
                        repo = repo.id,
                        created = p.created,
                        updated = p.updated,
                        conflicts = p.conflicts,
                        "auto import"
                    );
                }
            }
            Err(e) => {
                tracing::warn!(repo = repo.id, "auto import: {e}");
                Counters::add(&c.errors, 1);
            }
        }
    }
    if ip.deleted
        && let Err(e) = import_deleted(client, repo, store, listed, c).await
    {
        tracing::warn!(repo = repo.id, "auto import of deletions: {e}");
        Counters::add(&c.errors, 1);
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

/// A regular file or symlink found by [`walk`].
pub(crate) struct Walked {
    /// Its directory and the directory's path relative to the linked one.
    pub(crate) parent: Fid,
    pub(crate) parent_rel: String,
    pub(crate) name: Vec<u8>,
    /// Its path relative to the linked directory.
    pub(crate) rel: String,
    pub(crate) fid: Fid,
    /// A regular file (else a symlink).
    pub(crate) regular: bool,
    pub(crate) hsm_flags: u32,
    pub(crate) archive_id: u32,
    pub(crate) open_count: u32,
    /// Its size.
    pub(crate) size: u64,
    /// When it was last used: `max(atime, mtime)` (see `crate::tiering`).
    pub(crate) used: Timestamp,
    /// Its data version.
    pub(crate) data_version: u64,
}

/// Walks the tree below `dir` (depth first, a page at a time), calling `visit` for each
/// regular file and symlink with a UTF-8 path.
pub(crate) async fn walk(
    client: &Client,
    dir: Fid,
    mut visit: impl FnMut(Walked),
) -> Result<(), RepoError> {
    let cred = Credentials::root();
    let mut stack = vec![(dir, String::new(), 0u64)];
    while let Some((fid, rel, cookie)) = stack.pop() {
        let (page, eof) = client.scan_dir(fid, cookie, &cred).await?;
        if !eof && let Some(last) = page.last() {
            stack.push((fid, rel.clone(), last.entry.cookie));
        }
        for e in page {
            let e = e.entry;
            if e.name == b"." || e.name == b".." {
                continue;
            }
            let Ok(name) = std::str::from_utf8(&e.name) else {
                continue;
            };
            let child = if rel.is_empty() {
                name.to_string()
            } else {
                format!("{rel}/{name}")
            };
            match e.kind {
                FileKind::Directory => stack.push((e.fid, child, 0)),
                FileKind::Regular | FileKind::Symlink => {
                    let a = e.attr.as_ref();
                    visit(Walked {
                        parent: fid,
                        parent_rel: rel.clone(),
                        name: e.name.clone(),
                        rel: child,
                        fid: e.fid,
                        regular: e.kind == FileKind::Regular,
                        hsm_flags: a.map_or(0, |a| a.hsm_flags),
                        archive_id: a.map_or(0, |a| a.archive_id),
                        open_count: a.map_or(0, |a| a.open_count),
                        size: a.map_or(0, |a| a.size),
                        used: a.map_or(Timestamp::default(), |a| {
                            let key = |t: &Timestamp| (t.sec, t.nsec);
                            if key(&a.mtime) > key(&a.atime) {
                                a.mtime
                            } else {
                                a.atime
                            }
                        }),
                        data_version: a.map_or(0, |a| a.data_version),
                    });
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// The full key of `rel` under the store's prefix, as a string.
fn key_of(store: &RepoStore, rel: &str) -> Option<String> {
    key_for(store.prefix(), rel).ok().map(|k| k.to_string())
}

/// Step 2 of the module header. `listed`: the keys this sweep's import listed (`Some(None)`
/// when more than [`LISTED_MAX`]); `None`: no import ran, list here.
async fn import_deleted(
    client: &Arc<Client>,
    repo: &Repo,
    store: &RepoStore,
    listed: Option<Option<HashSet<String>>>,
    c: &Counters,
) -> Result<(), RepoError> {
    // The listing, as a bounded set of keys.
    let listed = match listed {
        Some(keys) => keys,
        None => {
            let prefix = Some(store.prefix()).filter(|p| !p.as_ref().is_empty());
            let mut keys = ListedKeys::new(LISTED_MAX);
            let mut listing = store.store().list(prefix);
            while let Some(item) = listing.next().await {
                let meta = item.map_err(|e| RepoError::store(store.url(), &e))?;
                keys.add(meta.location.as_ref());
                if keys.gave_up() {
                    break;
                }
            }
            keys.take()
        }
    };
    // The candidates: archived here, clean, closed, and not listed at their path.
    let mut candidates = Vec::new();
    walk(client, repo.dir, |w| {
        let clean = w.hsm_flags & HSM_EXISTS != 0 && w.hsm_flags & HSM_DIRTY == 0;
        if !clean || w.archive_id != repo.id || w.open_count > 0 {
            return;
        }
        let listed_here = match (&listed, key_of(store, &w.rel)) {
            (Some(set), Some(k)) => set.contains(&k),
            _ => false,
        };
        if !listed_here {
            candidates.push(w);
        }
    })
    .await?;
    let root = Credentials::root();
    let mut emptied: BTreeSet<(usize, String)> = BTreeSet::new();
    for w in candidates {
        // The key its archive reference names (a file imported or exported elsewhere).
        let key = match client.hsm_archive_ref(w.fid).await {
            Ok(Some(r)) => r.key,
            Ok(None) => continue,
            Err(e) => {
                tracing::warn!(repo = repo.id, path = %w.rel, "archive reference not read: {e}");
                Counters::add(&c.errors, 1);
                continue;
            }
        };
        if listed.as_ref().is_some_and(|s| s.contains(&key)) {
            continue;
        }
        // Confirmed gone (not made since the listing).
        let Ok(path) = Path::parse(&key) else {
            continue;
        };
        match store.store().head(&path).await {
            Ok(_) => continue,
            Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(RepoError::store(store.url(), &e)),
        }
        // Still clean and closed?
        match client.getattr(w.fid).await {
            Ok(a) if a.hsm_flags & HSM_DIRTY == 0 && a.open_count == 0 => {}
            _ => continue,
        }
        match client.unlink(w.parent, &w.name, &root).await {
            Ok(()) => {
                tracing::info!(repo = repo.id, path = %w.rel, %key, "object deleted: file removed");
                Counters::add(&c.deleted, 1);
                if !w.parent_rel.is_empty() {
                    emptied.insert((depth(&w.parent_rel), w.parent_rel.clone()));
                }
            }
            Err(e) if e.errno() == Errno::NoEnt => {}
            Err(e) => {
                tracing::warn!(repo = repo.id, path = %w.rel, "not removed: {e}");
                Counters::add(&c.errors, 1);
            }
        }
    }
    // Directories emptied, deepest first, then their parents.
    while let Some((d, rel)) = emptied.pop_last() {
        let (parent_rel, name) = rel.rsplit_once('/').unwrap_or(("", rel.as_str()));
        let parent = match resolve_rel(client, repo.dir, parent_rel).await {
            Ok(f) => f,
            Err(_) => continue,
        };
        match client.rmdir(parent, name.as_bytes(), &root).await {
            Ok(()) => {
                tracing::info!(repo = repo.id, path = %rel, "emptied directory removed");
                Counters::add(&c.deleted, 1);
                if !parent_rel.is_empty() {
                    emptied.insert((d - 1, parent_rel.to_string()));
                }
            }
            Err(e) if matches!(e.errno(), Errno::NotEmpty | Errno::NoEnt) => {}
            Err(e) => {
                tracing::warn!(repo = repo.id, path = %rel, "directory not removed: {e}");
                Counters::add(&c.errors, 1);
            }
        }
    }
    Ok(())
}

fn depth(rel: &str) -> usize {
    rel.split('/').count()
}

/// The FID of `rel` (relative to `dir`; `""`: `dir` itself).
async fn resolve_rel(client: &Client, dir: Fid, rel: &str) -> Result<Fid, RepoError> {
    let cred = Credentials::root();
    let mut fid = dir;
    for c in rel.split('/').filter(|c| !c.is_empty()) {
        fid = client.lookup(fid, c.as_bytes(), &cred).await?.fid;
    }
    Ok(fid)
}

/// Steps 3 (moved files) and 4 of the module header.
async fn export_moved_and_deleted(
    client: &Arc<Client>,
    repo: &Repo,
    state: &mut RepoState,
    c: &Counters,
) -> Result<(), RepoError> {
    let store = &state.store;
    let mut now: Option<HashSet<String>> = Some(HashSet::new());
    let mut moved = Vec::new();
    let prev = state.walked.take();
    walk(client, repo.dir, |w| {
        let Some(key) = key_of(store, &w.rel) else {
            return;
        };
        let new_here = prev.as_ref().is_some_and(|p| !p.contains(&key));
        let clean = w.hsm_flags & HSM_EXISTS != 0
            && w.hsm_flags & (HSM_DIRTY | HSM_RELEASED) == 0
            && w.archive_id == repo.id;
        if new_here && clean && w.open_count == 0 {
            moved.push((w.fid, w.rel.clone(), key.clone()));
        }
        if w.hsm_flags & HSM_EXISTS == 0 {
            return;
        }
        if let Some(set) = &mut now {
            if set.len() >= WALK_KEYS_MAX {
                now = None;
            } else {
                set.insert(key);
            }
        }
    })
    .await?;
    if repo.spec.export_policy.new {
        for (fid, rel, key) in moved {
            match client.hsm_archive_ref(fid).await {
                Ok(Some(r)) if r.key != key => {}
                _ => continue,
            }
            let path = format!("{}/{rel}", repo.spec.path.trim_end_matches('/'));
            match export::export_file(client, repo, store, fid, &path).await {
                Ok(_) => {
                    tracing::info!(repo = repo.id, path = %rel, "moved file exported again");
                    Counters::add(&c.exported, 1);
                }
                Err(e) => {
                    tracing::warn!(repo = repo.id, path = %rel, "moved file not exported: {e}");
                    Counters::add(&c.errors, 1);
                }
            }
        }
    }
    if repo.spec.export_policy.deleted
        && let (Some(prev), Some(now)) = (&prev, &mut now)
    {
        let gone: Vec<String> = prev.difference(now).cloned().collect();
        for key in gone {
            let Ok(path) = Path::parse(&key) else {
                continue;
            };
            match store.store().delete(&path).await {
                Ok(()) => {
                    tracing::info!(repo = repo.id, %key, "file removed: object deleted");
                    Counters::add(&c.deleted, 1);
                }
                Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => {
                    // Kept for the next sweep.
                    tracing::warn!(repo = repo.id, %key, "object not deleted: {}",
                        RepoError::store(store.url(), &e));
                    Counters::add(&c.errors, 1);
                    now.insert(key);
                }
            }
        }
    }
    state.walked = now;
    Ok(())
}
