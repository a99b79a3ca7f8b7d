//! The MDT's HSM requests as typed calls: importing objects as released files, restoring,
//! releasing, flag changes and the record of a finished export.

use super::{ClientError, MdtClient, expect_reply};
use weft_proto::hsm::{ArchiveRef, HsmActionState, ImportEntry, ImportOutcome};
use weft_proto::mdt::{Attr, Credentials, MdtReply, MdtRequest};
use weft_proto::{Fid, TargetId};

impl MdtClient {
    /// Imports `entries` into directory `parent` as files archived in repository `repo`
    /// ([`MdtRequest::ImportEntries`]); one outcome per entry, in order.
    pub async fn import_entries(
        &self,
        parent: Fid,
        repo: u32,
        entries: Vec<ImportEntry>,
        cred: &Credentials,
    ) -> Result<Vec<ImportOutcome>, ClientError> {
        let req = MdtRequest::ImportEntries {
            parent,
            repo,
            entries,
            cred: cred.clone(),
        };
        expect_reply!(self, req, "import_entries", MdtReply::Imported(v) => v)
    }

    /// Waits until bytes `[start, end)` of released file `fid` are restored
    /// ([`MdtRequest::HsmRestore`]); true when the whole file is.
    pub async fn hsm_restore(&self, fid: Fid, start: u64, end: u64) -> Result<bool, ClientError> {
        let req = MdtRequest::HsmRestore { fid, start, end };
        expect_reply!(self, req, "hsm_restore", MdtReply::Progress { done } => done)
    }

    /// Releases archived file `fid`'s data ([`MdtRequest::HsmRelease`]).
    pub async fn hsm_release(
        &self,
        fid: Fid,
        data_version: Option<u64>,
        cred: &Credentials,
    ) -> Result<Attr, ClientError> {
        let req = MdtRequest::HsmRelease {
            fid,
            data_version,
            cred: cred.clone(),
        };
        expect_reply!(self, req, "hsm_release", MdtReply::Attr(a) => a)
    }

    /// Sets then clears HSM flags ([`MdtRequest::HsmSetFlags`]).
    pub async fn hsm_set_flags(
        &self,
        fid: Fid,
        set: u32,
        clear: u32,
        archive_id: Option<u32>,
        cred: &Credentials,
    ) -> Result<Attr, ClientError> {
        let req = MdtRequest::HsmSetFlags {
            fid,
            set,
            clear,
            archive_id,
            cred: cred.clone(),
        };
        expect_reply!(self, req, "hsm_set", MdtReply::Attr(a) => a)
    }

    /// Records a finished export ([`MdtRequest::HsmArchived`]).
    pub async fn hsm_archived(
        &self,
        fid: Fid,
        repo: u32,
        data_version: u64,
        archive: ArchiveRef,
        cred: &Credentials,
    ) -> Result<Attr, ClientError> {
        let req = MdtRequest::HsmArchived {
            fid,
            repo,
            data_version,
            archive,
            cred: cred.clone(),
        };
        expect_reply!(self, req, "hsm_archived", MdtReply::Attr(a) => a)
    }

    /// The HSM action running on `fid` ([`MdtRequest::HsmAction`]; `None`: none).
    pub async fn hsm_action(&self, fid: Fid) -> Result<Option<HsmActionState>, ClientError> {
        let req = MdtRequest::HsmAction { fid };
        expect_reply!(self, req, "hsm_action", MdtReply::HsmAction(a) => a)
    }

    /// Where `fid`'s archived copy is ([`MdtRequest::HsmArchiveRef`]).
    pub async fn hsm_archive_ref(&self, fid: Fid) -> Result<Option<ArchiveRef>, ClientError> {
        let req = MdtRequest::HsmArchiveRef { fid };
        expect_reply!(self, req, "hsm_archive_ref", MdtReply::Archive(a) => a)
    }

    /// Records that the read-write PCC `owner` holds `fid` (`attach`) or gave it back
    /// ([`MdtRequest::HsmPccRw`]); answers the attributes.
    pub async fn hsm_pcc_rw(
        &self,
        fid: Fid,
        owner: &str,
        attach: bool,
    ) -> Result<Attr, ClientError> {
        let req = MdtRequest::HsmPccRw {
            fid,
            owner: owner.to_string(),
            attach,
            cred: Credentials::root(),
        };
        expect_reply!(self, req, "hsm_pcc_rw", MdtReply::Attr(a) => a)
    }

    /// Waits at most `wait_ms` until `fid` is in no read-write PCC
    /// ([`MdtRequest::HsmPccWait`]); true when it is not (any more).
    pub async fn hsm_pcc_wait(&self, fid: Fid, wait_ms: u32) -> Result<bool, ClientError> {
        let req = MdtRequest::HsmPccWait { fid, wait_ms };
        expect_reply!(self, req, "hsm_pcc_wait", MdtReply::Progress { done } => done)
    }
}
