//! Steps 3 (moved files) and 4 of the agent's sweep: a file moved here is exported again
//! at its new key, and the objects of files gone since the previous walk are deleted.

use super::{Counters, RepoState, WALK_KEYS_MAX, walk};
use crate::error::RepoError;
use crate::export::{self, key_for};
use crate::store::RepoStore;
use object_store::ObjectStoreExt;
use object_store::path::Path;
use std::collections::HashSet;
use std::sync::Arc;
use weft_client::Client;
use weft_proto::hsm::{HSM_DIRTY, HSM_EXISTS, HSM_RELEASED, Repo};
/// The full key of `rel` under the store's prefix, as a string.
pub(super) fn key_of(store: &RepoStore, rel: &str) -> Option<String> {
    key_for(store.prefix(), rel).ok().map(|k| k.to_string())
}

/// Steps 3 (moved files) and 4 of the module header.
pub(super) async fn export_moved_and_deleted(
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
