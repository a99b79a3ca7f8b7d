//! HSM and data repository calls of the client: each goes to the MDT of the FID it names
//! (see `crate::mdt::hsm` for what each request does).

use super::Client;
use crate::error::ClientError;
use weft_proto::Fid;
use weft_proto::hsm::{ArchiveRef, HsmActionState, ImportEntry, ImportOutcome};
use weft_proto::mdt::{Attr, Credentials};

impl Client {
    /// Imports objects of repository `repo` as released files of directory `parent`.
    pub async fn import_entries(
        &self,
        parent: Fid,
        repo: u32,
        entries: Vec<ImportEntry>,
        cred: &Credentials,
    ) -> Result<Vec<ImportOutcome>, ClientError> {
        self.mdt(parent)?
            .import_entries(parent, repo, entries, cred)
            .await
    }

    /// Waits until bytes `[start, end)` of released file `fid` are on the OSTs; true when
    /// the whole file is (it is no longer released).
    pub async fn hsm_restore(&self, fid: Fid, start: u64, end: u64) -> Result<bool, ClientError> {
        self.mdt(fid)?.hsm_restore(fid, start, end).await
    }

    /// Releases archived file `fid`'s data from the OSTs (`weft hsm_release`).
    pub async fn hsm_release(
        &self,
        fid: Fid,
        data_version: Option<u64>,
        cred: &Credentials,
    ) -> Result<Attr, ClientError> {
        self.mdt(fid)?.hsm_release(fid, data_version, cred).await
    }

    /// Sets then clears HSM flags (`weft hsm_set`, `hsm_clear`).
    pub async fn hsm_set_flags(
        &self,
        fid: Fid,
        set: u32,
        clear: u32,
        archive_id: Option<u32>,
        cred: &Credentials,
    ) -> Result<Attr, ClientError> {
        self.mdt(fid)?
            .hsm_set_flags(fid, set, clear, archive_id, cred)
            .await
    }

    /// Records that `fid`'s data as of `data_version` is archived at `archive`.
    pub async fn hsm_archived(
        &self,
        fid: Fid,
        repo: u32,
        data_version: u64,
        archive: ArchiveRef,
        cred: &Credentials,
    ) -> Result<Attr, ClientError> {
        self.mdt(fid)?
            .hsm_archived(fid, repo, data_version, archive, cred)
            .await
    }

    /// Records that the read-write PCC `owner` holds `fid` (`attach`) or gave it back.
    pub(crate) async fn hsm_pcc_rw(
        &self,
        fid: Fid,
        owner: &str,
        attach: bool,
    ) -> Result<Attr, ClientError> {
        self.mdt(fid)?.hsm_pcc_rw(fid, owner, attach).await
    }

    /// Waits at most `wait_ms` until `fid` is in no read-write PCC; true when it is not.
    pub(crate) async fn hsm_pcc_wait(&self, fid: Fid, wait_ms: u32) -> Result<bool, ClientError> {
        self.mdt(fid)?.hsm_pcc_wait(fid, wait_ms).await
    }

    /// The HSM action running on `fid` (`None`: none).
    pub async fn hsm_action(&self, fid: Fid) -> Result<Option<HsmActionState>, ClientError> {
        self.mdt(fid)?.hsm_action(fid).await
    }

    /// Where `fid`'s archived copy is.
    pub async fn hsm_archive_ref(&self, fid: Fid) -> Result<Option<ArchiveRef>, ClientError> {
        self.mdt(fid)?.hsm_archive_ref(fid).await
    }

    /// Restores the whole of released file `fid` (a no-op for a file not released).
    pub async fn restore_whole(&self, fid: Fid) -> Result<(), ClientError> {
        for _ in 0..crate::file::WHOLE_FILE_ASKS {
            if self.hsm_restore(fid, 0, u64::MAX).await? {
                return Ok(());
            }
        }
        Err(ClientError::Remote(weft_proto::WireError::new(
            weft_proto::Errno::Io,
            "the file's restore did not finish",
        )))
    }
}
