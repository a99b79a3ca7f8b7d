//! Copying a chunk, or its bytes on some OSTs, from its repository's store into the OST
//! objects, and syncing them; the stores opened for it, one per repository.

use super::Mover;
use crate::store::RepoStore;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use parking_lot::Mutex;
use std::collections::HashSet;
use std::sync::atomic::Ordering;
use weft_proto::hsm::RestoreChunk;
use weft_proto::{Errno, ObjectId, WireError};
use weft_rpc::RequestContext;

impl Mover {
    /// Copies the chunk (already checked), or only its bytes on OSTs `only`, from its store
    /// into the OST objects, then syncs every object written; answers the bytes copied.
    pub(super) async fn copy(
        &self,
        chunk: &RestoreChunk,
        only: Option<&[u32]>,
    ) -> Result<u64, WireError> {
        let RestoreChunk {
            fid,
            layout,
            repo,
            archive,
            start,
            end,
        } = chunk;
        let (fid, repo, start, end) = (*fid, *repo, *start, *end);
        let spans = match only {
            None => vec![(start, end)],
            Some(osts) => {
                let pieces = weft_client::layout::map_range(layout, fid, start, end - start)
                    .map_err(|e| WireError::new(Errno::Inval, format!("file {fid}: {e}")))?;
                spans_on(&pieces, osts)
            }
        };
        let store = self.store(repo).await?;
        let key = Path::parse(&archive.key).map_err(|e| {
            WireError::new(
                Errno::Inval,
                format!("{:?} is not an object key: {e}", archive.key),
            )
        })?;
        let touched: Mutex<HashSet<(u32, ObjectId)>> = Mutex::new(HashSet::new());
        let bytes: u64 = spans.iter().map(|(a, b)| b - a).sum();
        let sub = self.config.sub_range;
        let ranges = spans.into_iter().flat_map(|(start, end)| {
            (0..(end - start).div_ceil(sub)).map(move |i| {
                let a = start + i * sub;
                Ok::<_, WireError>((a, a.saturating_add(sub).min(end)))
            })
        });
        let (store, key, touched) = (&store, &key, &touched);
        futures::stream::iter(ranges)
            .try_for_each_concurrent(self.config.in_flight, |(a, b)| async move {
                let pieces = weft_client::layout::map_range(layout, fid, a, b - a)
                    .map_err(|e| WireError::new(Errno::Inval, format!("file {fid}: {e}")))?;
                let data = self.fetch(store, key, archive, a, b).await?;
                self.io
                    .write(&RequestContext::new(), &pieces, &data, false)
                    .await
                    .map_err(WireError::from)?;
                self.counters
                    .bytes_written
                    .fetch_add(data.len() as u64, Ordering::Relaxed);
                touched
                    .lock()
                    .extend(pieces.iter().map(|p| (p.ost, p.object)));
                Ok(())
            })
            .await?;
        // OST writes are durable only once synced.
        let objects: Vec<(u32, ObjectId)> = touched.lock().drain().collect();
        futures::stream::iter(objects)
            .map(Ok::<_, WireError>)
            .try_for_each_concurrent(self.config.in_flight, |(ost, object)| async move {
                self.io
                    .sync(&RequestContext::new(), ost, object)
                    .await
                    .map_err(WireError::from)
            })
            .await?;
        Ok(bytes)
    }

    /// Repository `id`'s store, opened (again, if its spec changed) as needed.
    async fn store(&self, id: u32) -> Result<RepoStore, WireError> {
        let Some(repo) = self.repos.find(id).await else {
            self.stores.lock().remove(&id);
            return Err(WireError::new(
                Errno::NoEnt,
                format!("repository {id} does not exist (any more)"),
            ));
        };
        let mut stores = self.stores.lock();
        if let Some((spec, store)) = stores.get(&id)
            && *spec == repo.spec
        {
            return Ok(store.clone());
        }
        let store =
            RepoStore::open(&repo.spec).map_err(|e| WireError::new(e.errno(), e.to_string()))?;
        stores.insert(id, (repo.spec, store.clone()));
        Ok(store)
    }
}

/// The file ranges of the pieces on OSTs `osts`, in file order, adjacent ones joined.
pub(super) fn spans_on(pieces: &[weft_client::layout::Piece], osts: &[u32]) -> Vec<(u64, u64)> {
    let mut spans: Vec<(u64, u64)> = pieces
        .iter()
        .filter(|p| osts.contains(&p.ost))
        .map(|p| (p.file_offset, p.file_offset + p.len))
        .collect();
    spans.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(spans.len());
    for (a, b) in spans {
        match out.last_mut() {
            Some(last) if last.1 == a => last.1 = b,
            _ => out.push((a, b)),
        }
    }
    out
}
