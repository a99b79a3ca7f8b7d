//! Released files (HSM): an imported or released file's size and attributes are real but
//! its data is in the archive (a data repository), not on the OSTs. Before this client
//! reads the OSTs for a range of such a file, it asks the MDT to restore that range
//! (`MdtRequest::HsmRestore`); the MDT runs one restore per file for every client and
//! answers when the range is on the OSTs, so a reader in the middle of a file does not wait
//! for the whole of it. Once the MDT says the whole file is restored, the handle reads as
//! any other. A handle opened for writing restores the whole file first (Lustre restores
//! a released file before any change).

use super::File;
use crate::error::ClientError;
use crate::file::FileMeta;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use weft_proto::Fid;

/// How many times a whole-file restore is asked before giving up: the MDT answers `done`
/// at the first ask unless the file changed meanwhile (then the next ask finishes it).
pub(crate) const WHOLE_FILE_ASKS: usize = 8;

/// Restores `[start, end)` of `fid` if it is still released; clears `released` when the
/// MDT says the whole file is restored.
pub(super) async fn restore_range(
    mdt: &Arc<dyn FileMeta>,
    released: &AtomicBool,
    fid: Fid,
    start: u64,
    end: u64,
) -> Result<(), ClientError> {
    if !released.load(Ordering::Acquire) || start >= end {
        return Ok(());
    }
    if mdt.hsm_restore(fid, start, end).await? {
        released.store(false, Ordering::Release);
    }
    Ok(())
}

impl File {
    /// Whether the file is released (its data still in the archive) as far as this handle
    /// knows.
    pub fn is_released(&self) -> bool {
        self.released.load(Ordering::Acquire)
    }

    /// Restores `[offset, offset + len)` before it is read from the OSTs.
    pub(super) async fn restore_for_read(&self, offset: u64, len: u64) -> Result<(), ClientError> {
        let end = offset.saturating_add(len);
        restore_range(&self.mdt, &self.released, self.fid, offset, end).await
    }

    /// What a read-ahead task needs to restore a range on its own.
    pub(super) fn restorer(&self) -> Option<(Arc<dyn FileMeta>, Arc<AtomicBool>)> {
        self.is_released()
            .then(|| (self.mdt.clone(), self.released.clone()))
    }

    /// Restores the whole file (before a write or a truncate).
    pub(crate) async fn restore_all(&self) -> Result<(), ClientError> {
        for _ in 0..WHOLE_FILE_ASKS {
            if !self.is_released() {
                return Ok(());
            }
            restore_range(&self.mdt, &self.released, self.fid, 0, u64::MAX).await?;
        }
        if self.is_released() {
            return Err(super::errno(
                weft_proto::Errno::Io,
                "the file's restore did not finish",
            ));
        }
        Ok(())
    }
}
