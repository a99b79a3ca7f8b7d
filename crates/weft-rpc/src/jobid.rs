//! The job id a request is sent for. Callers set it for a scope of work (the FUSE layer per
//! kernel request, a benchmark per run); every request sent inside the scope carries it in
//! its [`weft_proto::RequestHeader`], and servers keep statistics per job.
//!
//! The job id is task-local: work spawned onto other tasks (per-OST pipelines) must carry
//! it along — take [`current`] before spawning and wrap the spawned future in
//! [`with_jobid`].

use std::future::Future;
use std::sync::Arc;

tokio::task_local! {
    static JOBID: Option<Arc<str>>;
}

/// Runs `fut` with requests tagged with `jobid`.
pub async fn with_jobid<F: Future>(jobid: Option<Arc<str>>, fut: F) -> F::Output {
    JOBID.scope(jobid, fut).await
}

/// Runs `f` with requests tagged with `jobid`, outside any task (a thread that starts
/// work on a runtime and does not wait for it).
pub fn sync_scope<R>(jobid: Option<Arc<str>>, f: impl FnOnce() -> R) -> R {
    JOBID.sync_scope(jobid, f)
}

/// The job id of the current scope, if any.
pub fn current() -> Option<Arc<str>> {
    JOBID.try_with(Clone::clone).ok().flatten()
}

/// A job id as servers keep it: cut to [`weft_proto::JOBID_MAX`] bytes on a character
/// boundary, control characters replaced.
pub fn sanitize(jobid: &str) -> String {
    let mut out = String::new();
    for c in jobid.chars() {
        if out.len() + c.len_utf8() > weft_proto::JOBID_MAX {
            break;
        }
        out.push(if c.is_control() { '_' } else { c });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_scope_sets_the_job_id() {
        assert_eq!(current(), None);
        let inside = with_jobid(Some("train.42".into()), async { current() }).await;
        assert_eq!(inside.as_deref(), Some("train.42"));
    }

    #[test]
    fn long_and_odd_job_ids_are_tamed() {
        assert_eq!(sanitize("a\nb"), "a_b");
        assert_eq!(sanitize(&"é".repeat(100)).len(), 64);
    }
}
