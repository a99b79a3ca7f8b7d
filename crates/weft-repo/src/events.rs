//! A bucket's event notifications (S3 → SQS), which the auto import follows: FSx for
//! Lustre's event-driven `AutoImportPolicy`.
//!
//! The bucket's owner configures the notification (`ObjectCreated:*` and
//! `ObjectRemoved:*` to an SQS queue, directly, through SNS, or through EventBridge) and
//! gives the queue at `weft repo create --events QUEUE_URL`, which checks that the queue
//! answers with the store's credentials ([`check`]). The repository agent then
//! long-polls the queue (`agent/events.rs`): each message's changes ([`s3_event`]) that
//! fall under a repository's bucket and prefix are imported (created: a HEAD, then the
//! MDT decides as for a listed object) or removed (the same checks as the sweep's
//! deletions, a HEAD confirming the object gone) within about a second, and the message is
//! deleted. Events carry no ordering the import relies on: every change is confirmed
//! against the store first. The listing sweep stays as the safety net for lost or late
//! events, at a much longer interval (`weft mds --repo-events-sweep-ms`).
//!
//! Several repositories may share a queue (one bucket, several prefixes): one receiver
//! per queue hands each change to every repository it falls under.

pub mod s3_event;
pub mod sqs;

use crate::error::RepoError;
use crate::store::RepoStore;
pub use sqs::Sqs;

/// Checks that `queue` answers to the store's credentials (its ARN is read): an error at
/// `weft repo create` for a missing queue, refused credentials or a store that is not
/// S3.
pub async fn check(store: &RepoStore, queue: &str) -> Result<String, RepoError> {
    let access = store.aws().ok_or_else(|| {
        RepoError::Spec(format!(
            "{}: event notifications come from S3 buckets only",
            store.url()
        ))
    })?;
    Sqs::new(queue, access)?.arn().await
}

/// Whether `key` is below `prefix` (empty: the whole bucket), by whole components; the
/// prefix's own directory marker (`PREFIX/`) is not.
pub fn under_prefix(key: &str, prefix: &str) -> bool {
    crate::import::rel_key(prefix, key).is_some_and(|rel| !rel.is_empty() && rel != "/")
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
}
