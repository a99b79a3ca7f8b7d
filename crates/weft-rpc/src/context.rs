//! The explicit context of one request: the job it is sent for, its resend numbers and
//! the time by which its caller needs the answer. Callers that pass a
//! [`RequestContext`] to [`crate::Connection::call_in`] / [`crate::Reconnecting::call_in`]
//! need no task-local scope; handlers read it in [`crate::Handler::handle_in`]. The older
//! task-local scopes ([`crate::jobid`], [`crate::resend`]) still work:
//! [`RequestContext::ambient`] reads them, and the plain `call` entry points send that.

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
}

impl RequestContext {
    /// No job, not numbered, the connection's timeout.
    pub fn new() -> Self {
        Self::default()
    }

    /// What the task-local scopes of the calling task say (job id and resend numbers; no
    /// deadline): the context of the older entry points.
    pub fn ambient() -> Self {
        let (seq, acked) = crate::resend::current();
        Self {
            jobid: crate::jobid::current(),
            seq,
            acked,
            deadline: None,
        }
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

    /// The context a server reads from a request's header (no deadline: the client keeps
    /// it).
    pub fn from_header(header: &RequestHeader) -> Self {
        Self {
            jobid: header.jobid.as_deref().map(Arc::from),
            seq: header.seq,
            acked: header.acked,
            deadline: None,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_ambient_context_is_what_the_scopes_say_and_travels_in_the_header() {
        assert_eq!(RequestContext::ambient(), RequestContext::new());
        let ctx = crate::jobid::with_jobid(
            Some("j.1".into()),
            crate::resend::with_seq(7, 5, async { RequestContext::ambient() }),
        )
        .await;
        assert_eq!(
            ctx,
            RequestContext::new()
                .for_job(Some("j.1".into()))
                .numbered(7, 5)
        );
        assert_eq!(RequestContext::from_header(&ctx.header()), ctx);
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
