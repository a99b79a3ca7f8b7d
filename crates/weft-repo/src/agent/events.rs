//! The receiver of one event queue (see [`crate::events`]): a task that polls the
//! queue and applies each batch of messages to every repository naming that queue whose
//! bucket and prefix a change falls under, then deletes the messages.
//!
//! A batch whose changes could not all be applied (the store or the MDT failing) is not
//! deleted: its messages come back after [`VISIBILITY`] and are applied again (both
//! kinds of change are idempotent: each is checked against the store first). A message
//! that is no event of the queue's kind is deleted with a warning; an object that fails on its own (a bad
//! key, a name taken) is logged and left to the listing sweep.

use super::{Counters, PARALLEL, Relist, count_import, removal, same_association};
use crate::RepoError;
use crate::events::s3_event::{Change, ChangeKind};
use crate::events::{Queue, at_or_above_prefix, under_prefix};
use crate::import::{self, ImportOptions};
use crate::store::RepoStore;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use weft_client::Client;
use weft_proto::hsm::Repo;
use weft_rpc::AbortOnDrop;
use weft_rpc::Backoff;

/// How long a received message stays hidden from other receivers: longer than a batch
/// takes to apply; a batch not applied comes back after it.
pub const VISIBILITY: Duration = Duration::from_secs(60);
/// First and longest wait after a failed receive.
const BACKOFF: Backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(30));

/// A running receiver; dropping it stops it.
pub(super) struct Receiver {
    _task: AbortOnDrop<()>,
}

impl Receiver {
    /// Starts following `queue` with `store`'s credentials; repositories whose whole
    /// prefix an event moves go into `relist`.
    pub(super) fn start(
        client: Arc<Client>,
        queue: &str,
        store: &RepoStore,
        counters: Arc<Counters>,
        relist: Relist,
    ) -> Result<Self, RepoError> {
        let queue = Queue::open(queue, store)?;
        Ok(Self {
            _task: AbortOnDrop(tokio::spawn(receive(client, queue, counters, relist))),
        })
    }
}

/// The receiver's loop.
async fn receive(client: Arc<Client>, queue: Queue, c: Arc<Counters>, relist: Relist) {
    let mut stores: HashMap<u32, (Repo, RepoStore)> = HashMap::new();
    let mut backoff = BACKOFF;
    loop {
        let messages = match queue.receive(VISIBILITY).await {
            Ok(m) => {
                backoff.reset();
                m
            }
            Err(e) => {
                tracing::warn!(queue = queue.url(), "event queue: {e}");
                Counters::add(&c.errors, 1);
                backoff.wait().await;
                continue;
            }
        };
        if messages.is_empty() {
            continue;
        }
        Counters::add(&c.events, messages.len() as u64);
        let mut changes = Vec::new();
        for m in &messages {
            match queue.changes(&m.body) {
                Ok(found) => changes.extend(found),
                Err(why) => {
                    tracing::warn!(
                        queue = queue.url(),
                        "event queue: a message that is no {} event, deleted: {why}",
                        queue.kind()
                    );
                    Counters::add(&c.errors, 1);
                }
            }
        }
        let mut applied = true;
        for (repo, store) in repositories(&client, queue.url(), &mut stores) {
            let in_bucket = changes
                .iter()
                .filter(|ch| store.bucket() == Some(ch.bucket.as_str()));
            // The prefix itself renamed or deleted (or renamed into place): what is under
            // it now is for a listing to find, at the next sweep.
            if in_bucket.clone().any(|ch| {
                matches!(
                    ch.kind,
                    ChangeKind::DirectoryCreated | ChangeKind::DirectoryRemoved
                ) && at_or_above_prefix(&ch.key, store.prefix().as_ref())
            }) {
                tracing::info!(
                    repo = repo.id,
                    "event queue: the linked prefix was moved as a whole; listed at the next sweep"
                );
                relist.lock().insert(repo.id);
            }
            let mine: Vec<&Change> = in_bucket
                .filter(|ch| under_prefix(&ch.key, store.prefix().as_ref()))
                .collect();
            if mine.is_empty() {
                continue;
            }
            if let Err(e) = apply(&client, repo, store, &mine, &c).await {
                tracing::warn!(
                    repo = repo.id,
                    "event import (retried after {VISIBILITY:?}): {e}"
                );
                Counters::add(&c.errors, 1);
                applied = false;
            }
        }
        if applied {
            let receipts: Vec<String> = messages.into_iter().map(|m| m.receipt).collect();
            match queue.delete(&receipts).await {
                Ok(0) => {}
                Ok(n) => tracing::warn!(
                    queue = queue.url(),
                    "event queue: {n} messages not deleted (they come again)"
                ),
                Err(e) => tracing::warn!(
                    queue = queue.url(),
                    "event queue: messages not deleted (they come again): {e}"
                ),
            }
        }
    }
}

/// The repositories of the current configuration that follow `queue` (with an import
/// policy), each with its store (kept in `stores` while the association stays).
fn repositories<'a>(
    client: &Client,
    queue: &str,
    stores: &'a mut HashMap<u32, (Repo, RepoStore)>,
) -> Vec<(&'a Repo, &'a RepoStore)> {
    let config = client.cluster().config();
    let repos: Vec<&Repo> = config
        .repos
        .iter()
        .filter(|r| r.spec.events.as_deref() == Some(queue) && r.spec.import_policy.any())
        .collect();
    stores.retain(|id, (kept, _)| {
        repos
            .iter()
            .any(|r| r.id == *id && same_association(kept, r))
    });
    // A kept association takes its current policies (`weft repo update`).
    for r in &repos {
        if let Some((kept, _)) = stores.get_mut(&r.id) {
            kept.clone_from(r);
        }
    }
    let missing: Vec<&Repo> = repos
        .into_iter()
        .filter(|r| !stores.contains_key(&r.id))
        .collect();
    for r in missing {
        match RepoStore::open(&r.spec) {
            Ok(store) => {
                stores.insert(r.id, (r.clone(), store));
            }
            Err(e) => tracing::warn!(repo = r.id, "event queue: store not opened: {e}"),
        }
    }
    stores.values().map(|(r, s)| (r, s)).collect()
}

/// Applies `changes` (all under `repo`'s bucket and prefix) as its import policy says.
async fn apply(
    client: &Arc<Client>,
    repo: &Repo,
    store: &RepoStore,
    changes: &[&Change],
    c: &Counters,
) -> Result<(), RepoError> {
    let ip = repo.spec.import_policy;
    let keys = |kind: ChangeKind| -> Vec<String> {
        changes
            .iter()
            .filter(|ch| ch.kind == kind)
            .map(|ch| ch.key.clone())
            .collect()
    };
    let opts = ImportOptions {
        parallel: PARALLEL,
        skip_new: !ip.new,
        skip_changed: !ip.changed,
        ..Default::default()
    };
    let created = keys(ChangeKind::Created);
    if (ip.new || ip.changed) && !created.is_empty() {
        let p = import::import_keys(client, repo, store, &created, &opts).await?;
        count_import(c, repo.id, &p, "event import");
    }
    let dirs = keys(ChangeKind::DirectoryCreated);
    if (ip.new || ip.changed) && !dirs.is_empty() {
        for dir in &dirs {
            import_dir(client, repo, store, dir, &opts, c).await?;
        }
    }
    let removed = keys(ChangeKind::Removed);
    if ip.deleted && !removed.is_empty() {
        let n = removal::remove_keys(client, repo, store, &removed, c).await?;
        if n > 0 {
            tracing::info!(repo = repo.id, removed = n, "event import of deletions");
        }
    }
    let dirs = keys(ChangeKind::DirectoryRemoved);
    if ip.deleted && !dirs.is_empty() {
        let n = removal::remove_dirs(client, repo, store, &dirs, c).await?;
        if n > 0 {
            tracing::info!(
                repo = repo.id,
                removed = n,
                "event import of deleted directories"
            );
        }
    }
    Ok(())
}

/// Keys of a directory renamed into place imported at once (bounds the keys held).
const DIR_BATCH: usize = 4096;

/// Imports every object below directory key `dir` (a directory renamed into place),
/// listed [`DIR_BATCH`] keys at a time.
async fn import_dir(
    client: &Arc<Client>,
    repo: &Repo,
    store: &RepoStore,
    dir: &str,
    opts: &ImportOptions,
    c: &Counters,
) -> Result<(), RepoError> {
    use futures::StreamExt;
    let prefix = object_store::path::Path::parse(dir.trim_end_matches('/'))
        .map_err(|e| RepoError::store(store.url(), &object_store::Error::from(e)))?;
    let mut pages = store.store().list(Some(&prefix)).chunks(DIR_BATCH);
    while let Some(page) = pages.next().await {
        let keys = page
            .into_iter()
            .map(|m| m.map(|m| m.location.to_string()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| RepoError::store(store.url(), &e))?;
        let p = import::import_keys(client, repo, store, &keys, opts).await?;
        count_import(c, repo.id, &p, "event import of a directory");
    }
    Ok(())
}
