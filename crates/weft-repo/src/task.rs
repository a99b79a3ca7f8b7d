//! Reporting a repository task's progress (`weft repo tasks`) to the MGS, shared by
//! import and export: counts as differences since the last report, the checkpoint, and the
//! final state.

use futures::FutureExt;
use std::time::{Duration, Instant};
use weft_client::{Client, ClientError};
use weft_proto::TargetId;
use weft_proto::hsm::TaskState;
use weft_proto::mgs::{MgsReply, MgsRequest};

/// Objects between two progress reports (and at most a second between two).
pub const REPORT_EVERY: u64 = 1000;
/// Time between two progress reports.
pub const REPORT_INTERVAL: Duration = Duration::from_secs(1);

/// Counts as a task reports them (the MGS adds them up).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    /// Items done.
    pub done: u64,
    /// Items failed.
    pub failed: u64,
    /// Bytes moved.
    pub bytes: u64,
}

/// Reports a task's progress to the MGS and the caller's callback, every
/// [`REPORT_INTERVAL`] or [`REPORT_EVERY`] items, as differences since the last report.
pub(crate) struct Reporter<'a> {
    client: &'a Client,
    task: Option<u64>,
    last: Instant,
    last_items: u64,
    sent: Counts,
}

impl<'a> Reporter<'a> {
    pub(crate) fn new(client: &'a Client, task: Option<u64>) -> Self {
        Self {
            client,
            task,
            last: Instant::now(),
            last_items: 0,
            sent: Counts::default(),
        }
    }

    /// Reports if a second passed or [`REPORT_EVERY`] items since the last report:
    /// `on_report` (the caller's callback), then the MGS.
    pub(crate) async fn tick(
        &mut self,
        counts: &Counts,
        checkpoint: Option<String>,
        items: u64,
        on_report: impl FnOnce(),
    ) {
        if self.last.elapsed() < REPORT_INTERVAL && items < self.last_items + REPORT_EVERY {
            return;
        }
        self.last = Instant::now();
        self.last_items = items;
        on_report();
        self.send(counts, checkpoint, TaskState::Running).await;
    }

    /// Reports the final state.
    pub(crate) async fn finish(
        &mut self,
        counts: &Counts,
        checkpoint: Option<String>,
        state: TaskState,
    ) {
        self.send(counts, checkpoint, state).await;
    }

    async fn send(&mut self, counts: &Counts, checkpoint: Option<String>, state: TaskState) {
        let Some(id) = self.task else {
            return;
        };
        let req = MgsRequest::TaskReport {
            id,
            done: counts.done.saturating_sub(self.sent.done),
            failed: counts.failed.saturating_sub(self.sent.failed),
            bytes: counts.bytes.saturating_sub(self.sent.bytes),
            checkpoint,
            state,
        };
        let sent = self
            .client
            .cluster()
            .mgs()
            .connection()
            .call::<MgsRequest, MgsReply>(&req, bytes::Bytes::new())
            .map(|r| r.map(|_| ()))
            .await;
        match sent {
            Ok(()) => self.sent = *counts,
            // The next report carries these counts too.
            Err(error) => {
                let e = ClientError::Rpc {
                    target: TargetId::MGS,
                    error,
                };
                tracing::warn!(task = id, "task report not sent: {e}");
            }
        }
    }
}
