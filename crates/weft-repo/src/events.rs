//! A store's event notifications, which the auto import follows: FSx for Lustre's
//! event-driven `AutoImportPolicy`. Two kinds of queue:
//! - `s3://`: the bucket's notifications (`ObjectCreated:*` and `ObjectRemoved:*` to an
//!   SQS queue, directly, through SNS, or through EventBridge: [`sqs`], [`s3_event`]);
//! - `az://`: the container's blob events (`BlobCreated`, `BlobDeleted`) that an Event
//!   Grid subscription delivers to a storage queue of the account ([`azure_queue`],
//!   [`event_grid`]).
//!
//! The store's owner configures the notification and gives the queue's URL at `weft repo
//! create --events QUEUE_URL`, which checks that the queue answers with the store's
//! credentials ([`check`]). The repository agent then polls the queue (`agent/events.rs`;
//! SQS long-polls, a storage queue is asked again every [`POLL_IDLE`] while empty): each
//! message's changes that fall under a repository's bucket (container) and prefix are
//! imported (created: a HEAD, then the MDT decides as for a listed object) or removed
//! (the same checks as the sweep's deletions, a HEAD confirming the object gone) within
//! about a second, and the message is deleted. Events carry no ordering the import relies
//! on: every change is confirmed against the store first. The listing sweep stays as the
//! safety net for lost or late events, at a much longer interval (`weft mds
//! --repo-events-sweep-ms`).
//!
//! Several repositories may share a queue (one bucket, several prefixes): one receiver
//! per queue hands each change to every repository it falls under.

pub mod azure_queue;
pub mod event_grid;
pub mod s3_event;
pub mod sqs;

use crate::error::RepoError;
use crate::store::RepoStore;
pub use azure_queue::AzureQueue;
use s3_event::Change;
pub use sqs::Sqs;
use std::time::Duration;

/// How long a receiver waits before it asks an empty storage queue again (SQS waits for
/// messages itself, up to [`sqs::WAIT_MAX`]).
pub const POLL_IDLE: Duration = Duration::from_secs(1);

/// A repository's event queue, of the kind its store has.
#[derive(Debug, Clone)]
pub enum Queue {
    /// An SQS queue of an `s3://` bucket's notifications.
    Sqs(Sqs),
    /// A storage queue of an `az://` container's Event Grid events.
    Azure(AzureQueue),
}

impl Queue {
    /// The queue at URL `queue`, reached with `store`'s credentials; an error for a store
    /// that has no events (`gs://`, `file://`).
    pub fn open(queue: &str, store: &RepoStore) -> Result<Self, RepoError> {
        match (store.aws(), store.azure()) {
            (Some(aws), _) => Ok(Queue::Sqs(Sqs::new(queue, aws)?)),
            (None, Some(azure)) => Ok(Queue::Azure(AzureQueue::new(queue, azure)?)),
            (None, None) => Err(RepoError::Spec(format!(
                "{}: event notifications come from S3 buckets (SQS) and Azure containers \
                 (Event Grid to a storage queue) only",
                store.url()
            ))),
        }
    }

    /// The queue's URL.
    pub fn url(&self) -> &str {
        match self {
            Queue::Sqs(q) => q.url(),
            Queue::Azure(q) => q.url(),
        }
    }

    /// Whose events the queue carries (for messages).
    pub fn kind(&self) -> &'static str {
        match self {
            Queue::Sqs(_) => "S3",
            Queue::Azure(_) => "Event Grid",
        }
    }

    /// The next messages, hidden from other receivers for `visibility`: SQS waits up to
    /// [`sqs::WAIT_MAX`] for some; an empty storage queue answers none after
    /// [`POLL_IDLE`].
    pub async fn receive(&self, visibility: Duration) -> Result<Vec<sqs::Message>, RepoError> {
        match self {
            Queue::Sqs(q) => q.receive(sqs::RECEIVE_MAX, sqs::WAIT_MAX, visibility).await,
            Queue::Azure(q) => {
                let got = q.receive(azure_queue::RECEIVE_MAX, visibility).await?;
                if got.is_empty() {
                    tokio::time::sleep(POLL_IDLE).await;
                }
                Ok(got)
            }
        }
    }

    /// Deletes received messages; answers how many were not deleted.
    pub async fn delete(&self, receipts: &[String]) -> Result<usize, RepoError> {
        match self {
            Queue::Sqs(q) => {
                let mut failed = 0;
                for batch in receipts.chunks(sqs::RECEIVE_MAX) {
                    failed += q.delete(batch).await?;
                }
                Ok(failed)
            }
            Queue::Azure(q) => q.delete(receipts).await,
        }
    }

    /// The changes a message's body names, read as this kind of queue's events.
    pub fn changes(&self, body: &str) -> Result<Vec<Change>, String> {
        match self {
            Queue::Sqs(_) => s3_event::changes(body),
            Queue::Azure(_) => event_grid::changes(body),
        }
    }
}

/// The HTTP client of the queue at `url` (`http://` or `https://`; plain HTTP allowed for
/// the former), each call bounded by `timeout`.
pub(crate) fn queue_client(
    url: &url::Url,
    timeout: Duration,
) -> Result<object_store::client::HttpClient, String> {
    use object_store::client::{ClientOptions, HttpConnector, ReqwestConnector};
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err("not an http(s) URL".into());
    }
    let options = ClientOptions::new()
        .with_allow_http(url.scheme() == "http")
        .with_timeout(timeout);
    ReqwestConnector::default()
        .connect(&options)
        .map_err(|e| e.to_string())
}

/// The body of a queue service's answer, at most `max` bytes: a longer one (by its
/// length header, or as it is read) is refused before more of it is read.
pub(crate) async fn bounded_body(
    response: object_store::client::HttpResponse,
    max: usize,
) -> Result<bytes::Bytes, String> {
    use futures::StreamExt;
    let too_long = || format!("an answer over {max} bytes");
    let declared = response
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
    if declared.is_some_and(|n| n > max) {
        return Err(too_long());
    }
    let mut body = response.into_body().bytes_stream();
    let mut out = bytes::BytesMut::new();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| e.to_string())?;
        if out.len() + chunk.len() > max {
            return Err(too_long());
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out.freeze())
}

/// Checks that `queue` answers to the store's credentials (an SQS queue's ARN is read, a
/// storage queue's metadata): an error at `weft repo create` for a missing queue, refused
/// credentials or a store without events. Answers what names the queue to the store's
/// notification configuration (the ARN; a storage queue's URL).
pub async fn check(store: &RepoStore, queue: &str) -> Result<String, RepoError> {
    match Queue::open(queue, store)? {
        Queue::Sqs(q) => q.arn().await,
        Queue::Azure(q) => q.check().await.map(|()| q.url().to_string()),
    }
}

/// Whether `key` is below `prefix` (empty: the whole bucket), by whole components; the
/// prefix's own directory marker (`PREFIX/`) is not.
pub fn under_prefix(key: &str, prefix: &str) -> bool {
    crate::import::rel_key(prefix, key).is_some_and(|rel| !rel.is_empty() && rel != "/")
}

/// Whether directory key `dir` is non-empty `prefix` itself or a directory above it (by
/// whole components): a change to it renames or deletes the whole linked prefix.
pub fn at_or_above_prefix(dir: &str, prefix: &str) -> bool {
    let dir = dir.trim_end_matches('/');
    !prefix.is_empty()
        && !dir.is_empty()
        && (dir == prefix || crate::import::rel_key(dir, prefix).is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_fall_under_prefixes_by_whole_components() {
        assert!(under_prefix("p/a", "p"));
        assert!(under_prefix("p/q/a", "p/q"));
        assert!(under_prefix("anything", ""));
        assert!(!under_prefix("pa/b", "p"));
        assert!(!under_prefix("p", "p"));
        assert!(!under_prefix("q/a", "p"));
        assert!(
            !under_prefix("p/", "p"),
            "the linked directory's own marker"
        );
        assert!(!under_prefix("", ""));
    }

    #[test]
    fn directories_at_or_above_a_prefix_by_whole_components() {
        assert!(at_or_above_prefix("p/q", "p/q"));
        assert!(at_or_above_prefix("p/q/", "p/q"));
        assert!(at_or_above_prefix("p", "p/q"));
        assert!(!at_or_above_prefix("p/qq", "p/q"));
        assert!(!at_or_above_prefix("p/q/r", "p/q"));
        assert!(!at_or_above_prefix("pp", "p/q"));
        assert!(!at_or_above_prefix("", "p"));
        // A repository of the whole bucket: every directory is under it.
        assert!(!at_or_above_prefix("a", ""));
    }
}
