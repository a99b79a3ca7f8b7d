//! The explicit context of one request: the job it is sent for, its resend numbers and
//! the time by which its caller needs the answer. Callers that pass a
//! [`RequestContext`] to [`crate::Connection::call_in`] / [`crate::Reconnecting::call_in`]
//! carry it in the request's [`weft_proto::RequestHeader`]; handlers read it in
//! [`crate::Handler::handle_in`]. Nothing about a request rides in task-local state: a
//! caller that wants its requests counted for a job (or numbered for resends) passes the
//! context along, including to work it spawns, and the plain `call` entry points send
//! [`RequestContext::new`] (no job, not numbered).
//!
//! Job ids: callers choose them for a scope of work (the FUSE layer per kernel request from
//! the calling process, a benchmark per run); servers keep statistics per job.
//!
//! Resend numbers: a client numbers the requests that change state and sends a resent
//! request with the same number; the server records the reply of each numbered request it
//! carries out (durably, with the change itself) and answers a resend from that record, so
//! an operation whose reply was lost in a crash or a broken connection is neither done
//! twice nor reported as failed (EEXIST for a mkdir that did happen). `acked` tells the
//! server which records it may drop.

use std::sync::Arc;
use std::time::{Duration, Instant};
use weft_proto::RequestHeader;

/// Who a request is for and how long its caller waits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestContext {
    /// The job the request belongs to, for per-job statistics.
    pub jobid: Option<Arc<str>>,
    /// Its number among its client's requests that change state (0: not resendable); a
    /// resend carries the same number.
    pub seq: u64,
    /// Every request of this client numbered below this has been answered.
    pub acked: u64,
    /// When the caller stops waiting; `None`: the connection's request timeout.
    pub deadline: Option<Instant>,
    /// The [`crate::ClientSession`] epoch the request's content belongs to (a file's
    /// writes carry the epoch it was opened in): a request from before an eviction of the
    /// node is refused before it is sent ([`crate::RpcError::Evicted`]). `None`: sent
    /// whatever happened. Stays on the client: not part of the header.
    pub epoch: Option<u64>,
}

impl RequestContext {
    /// No job, not numbered, the connection's timeout.
    pub fn new() -> Self {
        Self::default()
    }

    /// The same context for job `jobid`.
    pub fn for_job(self, jobid: Option<Arc<str>>) -> Self {
        Self { jobid, ..self }
    }

    /// The same context numbered `seq`, with every request below `acked` answered.
    pub fn numbered(self, seq: u64, acked: u64) -> Self {
        Self { seq, acked, ..self }
    }

    /// The same context with its caller waiting until `deadline`.
    pub fn until(self, deadline: Instant) -> Self {
        Self {
            deadline: Some(deadline),
            ..self
        }
    }

    /// The same context for content of session epoch `epoch` (see
    /// [`RequestContext::epoch`]).
    pub fn in_epoch(self, epoch: u64) -> Self {
        Self {
            epoch: Some(epoch),
            ..self
        }
    }

    /// The job id, if any.
    pub fn jobid(&self) -> Option<&str> {
        self.jobid.as_deref()
    }

    /// The context a server reads from a request's header (no deadline: the client keeps
    /// it).
    pub fn from_header(header: &RequestHeader) -> Self {
        Self {
            jobid: header.jobid.as_deref().map(Arc::from),
            seq: header.seq,
            acked: header.acked,
            deadline: None,
            epoch: None,
        }
    }

    /// The header that carries this context on the wire.
    pub fn header(&self) -> RequestHeader {
        RequestHeader {
            jobid: self.jobid.as_ref().map(|j| j.to_string()),
            seq: self.seq,
            acked: self.acked,
        }
    }

    /// How long to wait for the reply: `default`, or less if the deadline comes sooner.
    pub fn timeout(&self, default: Duration) -> Duration {
        match self.deadline {
            Some(d) => default.min(d.saturating_duration_since(Instant::now())),
            None => default,
        }
    }
}

/// A job id as servers keep it: cut to [`weft_proto::JOBID_MAX`] bytes on a character
/// boundary, control characters replaced.
pub fn sanitize_jobid(jobid: &str) -> String {
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

    #[test]
    fn the_context_travels_in_the_header() {
        let ctx = RequestContext::new()
            .for_job(Some("j.1".into()))
            .numbered(7, 5);
        assert_eq!(ctx.jobid(), Some("j.1"));
        assert_eq!(RequestContext::from_header(&ctx.header()), ctx);
        assert_eq!(
            RequestContext::from_header(&RequestContext::new().header()),
            RequestContext::new()
        );
    }

    #[test]
    fn long_and_odd_job_ids_are_tamed() {
        assert_eq!(sanitize_jobid("a\nb"), "a_b");
        assert_eq!(sanitize_jobid(&"é".repeat(100)).len(), 64);
    }

    #[test]
    fn a_deadline_shortens_the_timeout_only() {
        let long = Duration::from_secs(60);
        assert_eq!(RequestContext::new().timeout(long), long);
        let soon = RequestContext::new().until(Instant::now() + Duration::from_secs(1));
        assert!(soon.timeout(long) <= Duration::from_secs(1));
        let past = RequestContext::new().until(Instant::now());
        assert_eq!(past.timeout(long), Duration::ZERO);
        let later = RequestContext::new().until(Instant::now() + Duration::from_secs(3600));
        assert_eq!(later.timeout(long), long);
    }
}
