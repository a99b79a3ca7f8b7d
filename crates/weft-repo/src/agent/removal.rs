//! Import `DELETED`: removing the files whose objects are gone from the store (step 2 of
//! the agent's sweep, and the `ObjectRemoved` events of a bucket's queue), then the
//! directories that emptied.
//!
//! A file is removed only when it is a file (or symlink) archived in this repository
//! (`EXISTS`, not `DIRTY`, `archive_id` this repository's), nobody has it open, its
//! archive reference's key is not listed, a HEAD finds that key gone, and a fresh
//! `getattr` still finds it clean and closed. An emptied directory goes by `rmdir`, so a
//! directory holding anything else stays; never the linked directory itself.

use super::{Counters, LISTED_MAX, Walked, key_of, walk, walk_under};
use crate::error::RepoError;
use crate::import::{ListedKeys, place_of};
use crate::store::RepoStore;
use futures::StreamExt;
use object_store::ObjectStoreExt;
use object_store::path::Path;
use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use weft_client::Client;
use weft_proto::hsm::{HSM_DIRTY, HSM_EXISTS, Repo};
use weft_proto::mdt::Credentials;
use weft_proto::{Errno, Fid};

/// Directories that removals emptied, deepest first (depth, path relative to the linked
/// directory).
type Emptied = BTreeSet<(usize, String)>;

/// Whether `w` is a file the repository may remove when its object is gone: archived
/// here, clean, closed.
fn removable(w: &Walked, repo: &Repo) -> bool {
    w.hsm_flags & HSM_EXISTS != 0
        && w.hsm_flags & HSM_DIRTY == 0
        && w.archive_id == repo.id
        && w.open_count == 0
}

/// Step 2 of the sweep. `listed`: the keys this sweep's import listed (`Some(None)`
/// when more than [`LISTED_MAX`]); `None`: no import ran, list here.
pub(super) async fn import_deleted(
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
        if !removable(&w, repo) {
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
    let mut emptied = Emptied::new();
    for w in candidates {
        remove_if_gone(client, repo, store, &w, listed.as_ref(), &mut emptied, c).await?;
    }
    remove_emptied(client, repo, emptied, c).await;
    Ok(())
}

/// The `ObjectRemoved` events of repository `repo`: the files at `keys` (full keys under
/// its prefix) are removed as the sweep would remove them; answers how many went.
pub(super) async fn remove_keys(
    client: &Arc<Client>,
    repo: &Repo,
    store: &RepoStore,
    keys: &[String],
    c: &Counters,
) -> Result<u64, RepoError> {
    let prefix = store.prefix().as_ref();
    let root = Credentials::root();
    let mut removed = 0;
    let mut emptied = Emptied::new();
    for key in keys {
        let Some(rel) = crate::import::rel_key(prefix, key) else {
            continue;
        };
        let Ok(place) = place_of(rel) else { continue };
        let Some(name) = place.name else { continue };
        let parent = match resolve_rel(client, repo.dir, &place.dir).await {
            Ok(f) => f,
            Err(e) if e.errno() == Errno::NoEnt => continue,
            Err(e) => return Err(e),
        };
        let attr = match client.lookup(parent, name.as_bytes(), &root).await {
            Ok(a) => a,
            Err(e) if e.errno() == Errno::NoEnt => continue,
            Err(e) => return Err(e.into()),
        };
        let w = Walked::of(
            parent,
            &place.dir,
            name.into_bytes(),
            (attr.fid, attr.kind),
            Some(&attr),
        );
        if removable(&w, repo)
            && remove_if_gone(client, repo, store, &w, None, &mut emptied, c).await?
        {
            removed += 1;
        }
    }
    remove_emptied(client, repo, emptied, c).await;
    Ok(removed)
}

/// The `DirectoryRemoved` events of repository `repo` (a hierarchical namespace's
/// directory deleted or renamed away): every file below the directories at `dirs` (full
/// keys under its prefix) is removed as the sweep would remove it, then the directories
/// that emptied, these included; answers how many files went.
pub(super) async fn remove_dirs(
    client: &Arc<Client>,
    repo: &Repo,
    store: &RepoStore,
    dirs: &[String],
    c: &Counters,
) -> Result<u64, RepoError> {
    let prefix = store.prefix().as_ref();
    let mut removed = 0;
    let mut emptied = Emptied::new();
    for key in dirs {
        let Some(rel) = crate::import::rel_key(prefix, key.trim_end_matches('/')) else {
            continue;
        };
        // Only a directory the import would have made for the key.
        let Ok(place) = place_of(&format!("{rel}/")) else {
            continue;
        };
        let rel = place.dir;
        if rel.is_empty() {
            continue;
        }
        let dir = match resolve_rel(client, repo.dir, &rel).await {
            Ok(f) => f,
            Err(e) if e.errno() == Errno::NoEnt => continue,
            Err(e) => return Err(e),
        };
        let mut candidates = Vec::new();
        walk_under(client, dir, &rel, |w| {
            if removable(&w, repo) {
                candidates.push(w);
            }
        })
        .await?;
        for w in candidates {
            if remove_if_gone(client, repo, store, &w, None, &mut emptied, c).await? {
                removed += 1;
            }
        }
        emptied.insert((depth(&rel), rel));
    }
    remove_emptied(client, repo, emptied, c).await;
    Ok(removed)
}

/// Removes candidate `w` if the key its archive reference names is neither in `listed`
/// nor in the store (a HEAD), and it is still clean and closed; its directory goes into
/// `emptied`; answers whether it went. An error only when the store fails the HEAD.
async fn remove_if_gone(
    client: &Arc<Client>,
    repo: &Repo,
    store: &RepoStore,
    w: &Walked,
    listed: Option<&HashSet<String>>,
    emptied: &mut Emptied,
    c: &Counters,
) -> Result<bool, RepoError> {
    // The key its archive reference names (a file imported or exported elsewhere).
    let key = match client.hsm_archive_ref(w.fid).await {
        Ok(Some(r)) => r.key,
        Ok(None) => return Ok(false),
        Err(e) => {
            tracing::warn!(repo = repo.id, path = %w.rel, "archive reference not read: {e}");
            Counters::add(&c.errors, 1);
            return Ok(false);
        }
    };
    if listed.is_some_and(|s| s.contains(&key)) {
        return Ok(false);
    }
    // Confirmed gone (not made since the listing or the event).
    let Ok(path) = Path::parse(&key) else {
        return Ok(false);
    };
    match store.store().head(&path).await {
        Ok(_) => return Ok(false),
        Err(object_store::Error::NotFound { .. }) => {}
        Err(e) => return Err(RepoError::store(store.url(), &e)),
    }
    // Still clean and closed?
    match client.getattr(w.fid).await {
        Ok(a) if a.hsm_flags & HSM_DIRTY == 0 && a.open_count == 0 => {}
        _ => return Ok(false),
    }
    match client.unlink(w.parent, &w.name, &Credentials::root()).await {
        Ok(()) => {
            tracing::info!(repo = repo.id, path = %w.rel, %key, "object deleted: file removed");
            Counters::add(&c.deleted, 1);
            if !w.parent_rel.is_empty() {
                emptied.insert((depth(&w.parent_rel), w.parent_rel.clone()));
            }
            Ok(true)
        }
        Err(e) if e.errno() == Errno::NoEnt => Ok(false),
        Err(e) => {
            tracing::warn!(repo = repo.id, path = %w.rel, "not removed: {e}");
            Counters::add(&c.errors, 1);
            Ok(false)
        }
    }
}

/// Removes the directories in `emptied` that are empty, deepest first, then their parents
/// that this empties, up to but not including the linked directory.
async fn remove_emptied(client: &Arc<Client>, repo: &Repo, mut emptied: Emptied, c: &Counters) {
    let root = Credentials::root();
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
