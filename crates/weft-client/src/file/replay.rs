//! Open replay: an MDT that restarted has lost every open handle (they live in its
//! memory); a request naming a lost handle opens the file again by FID and is sent once
//! more under the new handle, as Lustre replays opens.

use super::File;
use crate::error::ClientError;
use std::sync::atomic::Ordering;
use weft_proto::Errno;

impl File {
    /// Sends an MDT request naming this file's handle. An MDT that restarted has lost
    /// every handle (they live in its memory) and answers EBADF: the file is then opened
    /// again by FID — as root, since the open was allowed when it was made, as Lustre's
    /// open replay does — and the request is sent once more under the new handle. An
    /// unlinked file stays reachable this way for the MDT's grace period after a restart.
    pub(super) async fn on_handle<T, F, Fut>(&self, call: F) -> Result<T, ClientError>
    where
        F: Fn(u64) -> Fut,
        Fut: std::future::Future<Output = Result<T, ClientError>>,
    {
        let handle = self.handle();
        match call(handle).await {
            // An eviction closed the handle on purpose: not opened again.
            Err(e) if e.errno() == Errno::BadF && self.evicted() => Err(super::evicted_error()),
            Err(e) if e.errno() == Errno::BadF => {
                self.reopen(handle).await?;
                call(self.handle()).await
            }
            other => other,
        }
    }

    /// Opens the file again in place of the lost handle `stale`.
    async fn reopen(&self, stale: u64) -> Result<(), ClientError> {
        let _one = self.reopening.lock().await;
        if self.handle() != stale {
            return Ok(()); // Another request of this file did it meanwhile.
        }
        let flags = weft_proto::mdt::OpenFlags {
            access: self.access,
            truncate: false,
        };
        let cred = weft_proto::mdt::Credentials::root();
        let opened = self.mdt.open(self.fid, flags, &cred).await?;
        self.update_layout(opened.layout);
        self.handle.store(opened.handle, Ordering::Release);
        tracing::info!(fid = %self.fid, "file opened again: its MDT handle was lost");
        Ok(())
    }
}
