//! The import's listing of a repository: every object under the prefix in key order, from
//! a checkpoint key on.
//!
//! Where the store lists page by page (S3, GCS), the listing is walked directory by
//! directory, several directories listed at once ([`walk`]), and goes flat where that does
//! not pay. A flat listing asks for pages of up to [`LIST_PAGE`] keys (a store that allows
//! fewer, as AWS S3 with its 1,000, answers fewer: nothing else changes), and fetches the
//! next page while the current one is worked on (one page ahead, so memory stays bounded by
//! two pages). Fewer, larger pages matter where a page costs more than its keys: a server
//! that walks its whole bucket for every page (s3s-fs) lists n keys in n / page walks.
//! Other stores use `ObjectStore::list`.

use futures::StreamExt;
use futures::stream::{self, BoxStream};
use object_store::list::{PaginatedListOptions, PaginatedListStore};
use object_store::path::{DELIMITER, Path};
use object_store::{ObjectMeta, ObjectStore};
use std::sync::Arc;
use tokio::sync::mpsc;
use weft_rpc::AbortOnDrop;

/// Most keys asked for in one listing page.
pub const LIST_PAGE: usize = 50_000;

/// The objects under `prefix` (empty: all) after key `after` (if any), in key order.
pub(super) fn objects<'a>(
    store: &'a dyn ObjectStore,
    pages: Option<&Arc<dyn PaginatedListStore>>,
    prefix: &'a Path,
    after: Option<&Path>,
    page: usize,
) -> BoxStream<'a, object_store::Result<ObjectMeta>> {
    let non_empty = Some(prefix).filter(|p| !p.as_ref().is_empty());
    match (pages, after) {
        (Some(pages), _) => walk::walked(
            pages.clone(),
            non_empty.map(|p| format!("{}{DELIMITER}", p.as_ref())),
            after.map(|a| a.as_ref().to_string()),
            page,
        ),
        (None, Some(after)) => store.list_with_offset(non_empty, after),
        (None, None) => store.list(non_empty),
    }
}

/// The flat listing: pages of up to `page` keys under `prefix` (with its trailing `/`)
/// after `after`, one page fetched ahead by a task of its own (started at once); a listing
/// error ends the stream after it.
fn paged(
    lister: Arc<dyn PaginatedListStore>,
    prefix: Option<String>,
    after: Option<String>,
    page: usize,
) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
    // One page waiting in the channel, one being fetched.
    let (tx, rx) = mpsc::channel::<object_store::Result<Vec<ObjectMeta>>>(1);
    let fetcher = tokio::spawn(async move {
        let mut token: Option<String> = None;
        loop {
            let opts = PaginatedListOptions {
                offset: after.clone(),
                max_keys: Some(page.max(1)),
                page_token: token.take(),
                ..Default::default()
            };
            match lister.list_paginated(prefix.as_deref(), opts).await {
                Ok(r) => {
                    if tx.send(Ok(r.result.objects)).await.is_err() {
                        return;
                    }
                    match r.page_token {
                        Some(t) => token = Some(t),
                        None => return,
                    }
                }
                Err(e) => {
                    let _ = tx.send(Err(e)).await;
                    return;
                }
            }
        }
    });
    // The fetcher stops when the listing is dropped (an import that stops early).
    let guard = AbortOnDrop(fetcher);
    stream::unfold((rx, guard), |(mut rx, guard)| async move {
        let page = rx.recv().await?;
        Some((page, (rx, guard)))
    })
    .flat_map(|page| match page {
        Ok(objects) => stream::iter(objects.into_iter().map(Ok)).boxed(),
        Err(e) => stream::once(async move { Err(e) }).boxed(),
    })
    .boxed()
}

mod walk;

#[cfg(test)]
mod tests;
