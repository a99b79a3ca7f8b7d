//! The MDT's side of read-write files (Lustre's RW-PCC contract): a file this client's
//! cache takes at create is recorded on its MDT as held by the cache's owner id
//! (`HSM_PCCRW`, `MdtRequest::HsmPccRw`), the record is cleared once the copy-back is
//! fsynced in the file system, and every other client that opens such a file, or reads
//! its size, first waits for that (`MdtRequest::HsmPccWait`), at most
//! `llite.*.pcc_rw_wait_s` seconds, then fails the open with ETIMEDOUT.

use super::Pcc;
use crate::client::Client;
use crate::error::ClientError;
use crate::params::Param;
use std::sync::Arc;
use std::time::{Duration, Instant};
use weft_proto::hsm::{HSM_PCCRW, PCC_WAIT_MAX_MS};
use weft_proto::mdt::Attr;
use weft_proto::{Errno, Fid, WireError};

impl Client {
    /// Whether this client's cache holds read-write file `fid` (it is the owner: it
    /// never waits for itself).
    fn pcc_owns(&self, fid: Fid) -> bool {
        self.pcc()
            .is_some_and(|p| p.store.lock().rw_peek(fid).is_some())
    }

    /// Whether `attr` is a file another client's read-write cache holds.
    pub(crate) fn pcc_held_elsewhere(&self, attr: &Attr) -> bool {
        attr.hsm_flags & HSM_PCCRW != 0 && !self.pcc_owns(attr.fid)
    }

    /// Waits until `fid` is in no read-write cache: at most `llite.*.pcc_rw_wait_s`, then
    /// ETIMEDOUT (the owner is gone, or keeps the file open).
    pub(crate) async fn pcc_wait_elsewhere(&self, fid: Fid) -> Result<(), ClientError> {
        let bound = Duration::from_secs(self.params().get(Param::PccRwWaitS));
        let deadline = Instant::now() + bound;
        tracing::debug!(%fid, "waiting for another client's PCC to copy the file back");
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ClientError::Remote(WireError::new(
                    Errno::TimedOut,
                    format!(
                        "{fid} is held in the read-write PCC of another client, which has not \
                         copied it into the file system within {} s (llite.*.pcc_rw_wait_s)",
                        bound.as_secs()
                    ),
                )));
            }
            let ms = u32::try_from(left.as_millis())
                .unwrap_or(u32::MAX)
                .clamp(1, PCC_WAIT_MAX_MS);
            if self.hsm_pcc_wait(fid, ms).await? {
                return Ok(());
            }
        }
    }

    /// Records on the MDT that `pcc` holds `fid` (a file it just created).
    pub(super) async fn pcc_rw_attach(&self, pcc: &Arc<Pcc>, fid: Fid) -> Result<(), ClientError> {
        let owner = pcc.store.lock().owner().to_string();
        self.hsm_pcc_rw(fid, &owner, true).await?;
        Ok(())
    }

    /// Clears the MDT's record that `pcc` holds `fid`: its copy-back is in the file
    /// system. A file removed meanwhile has nothing to clear.
    pub(super) async fn pcc_rw_detach(&self, pcc: &Arc<Pcc>, fid: Fid) -> Result<(), ClientError> {
        let owner = pcc.store.lock().owner().to_string();
        match self.hsm_pcc_rw(fid, &owner, false).await {
            Err(e) if matches!(e.errno(), Errno::NoEnt | Errno::Stale) => Ok(()),
            r => r.map(drop),
        }
    }
}
