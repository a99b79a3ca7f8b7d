//! Files in a client's read-write persistent cache (Lustre's RW-PCC contract on the MDT):
//! `HsmPccRw` records that one cache holds a file's data ([`HSM_PCCRW`] in the inode, the
//! cache's id in [`PCC_XATTR`]) or gave it back, and `HsmPccWait` is how another client
//! waits for the give-back before it opens or sizes the file. The record is durable (the
//! request is not deferred), so it survives an MDT restart and a crash of the owning
//! client: that client's next mount with the same cache directory copies the file back
//! and clears it.

use crate::engine::{Effects, Engine, Tx};
use crate::error::{Fail, fail};
use crate::mdt::Mdt;
use crate::namespace::load;
use crate::store;
use std::time::Duration;
use weft_proto::hsm::{HSM_PCCRW, PCC_OWNER_MAX, PCC_WAIT_MAX_MS, PCC_XATTR};
use weft_proto::mdt::{Credentials, FileKind, MdtReply};
use weft_proto::{Errno, Fid, WireError, WireResult};

/// How often a waiter looks again without a wake-up (an unlink, or an MDT of another
/// process serving the detach, does not wake it).
const RECHECK: Duration = Duration::from_secs(1);

impl Engine {
    /// `HsmPccRw`: see [`weft_proto::mdt::MdtRequest::HsmPccRw`].
    pub(crate) fn hsm_pcc_rw(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        fid: Fid,
        owner: &str,
        attach: bool,
        cred: &Credentials,
    ) -> Result<MdtReply, Fail> {
        if cred.uid != 0 {
            return Err(fail(Errno::Perm, "only root attaches files to a PCC"));
        }
        if owner.is_empty() || owner.len() > PCC_OWNER_MAX {
            return Err(fail(
                Errno::Inval,
                format!("a PCC owner id has 1 to {PCC_OWNER_MAX} bytes"),
            ));
        }
        let mut ino = load(&tx.inodes, fid)?;
        if ino.kind != FileKind::Regular {
            return Err(fail(Errno::Inval, "only regular files go into a PCC"));
        }
        let key = store::xattr_key(fid, PCC_XATTR);
        let held: Option<String> = store::get(&tx.xattrs, "xattrs", &key)?;
        let attached = ino.hsm_flags & HSM_PCCRW != 0;
        if attached && held.as_deref().is_some_and(|h| h != owner) {
            return Err(fail(
                Errno::Busy,
                format!(
                    "{fid} is in the read-write PCC {}",
                    held.unwrap_or_default()
                ),
            ));
        }
        if attached == attach && (!attach || held.is_some()) {
            return Ok(self.attr_reply(fid, &ino));
        }
        // Mutations start here.
        if attach {
            ino.hsm_flags |= HSM_PCCRW;
            let v = store::encode(&owner.to_string())?;
            tx.xattrs.insert(key.as_slice(), v.as_slice())?;
        } else {
            ino.hsm_flags &= !HSM_PCCRW;
            tx.xattrs.remove(key.as_slice())?;
        }
        self.put_inode(tx, fx, fid, &ino)?;
        Ok(self.attr_reply(fid, &ino))
    }
}

impl Mdt {
    /// `HsmPccWait`: see [`weft_proto::mdt::MdtRequest::HsmPccWait`]. ESTALE when the
    /// file is gone.
    pub(crate) async fn hsm_pcc_wait(&self, fid: Fid, wait_ms: u32) -> WireResult<MdtReply> {
        let deadline = tokio::time::Instant::now()
            + Duration::from_millis(wait_ms.min(PCC_WAIT_MAX_MS).into());
        loop {
            if self.shutting_down() {
                return Err(Self::shut());
            }
            let woken = self.hsm.pcc_changed.notified();
            let mut woken = std::pin::pin!(woken);
            woken.as_mut().enable();
            let (ino, _) = super::snapshot(&self.db, fid)
                .map_err(crate::mdt::fail_to_wire)?
                .ok_or_else(|| WireError::new(Errno::Stale, format!("no inode {fid}")))?;
            if ino.hsm_flags & HSM_PCCRW == 0 {
                return Ok(MdtReply::Progress { done: true });
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Ok(MdtReply::Progress { done: false });
            }
            let _ = tokio::time::timeout((deadline - now).min(RECHECK), woken).await;
        }
    }

    /// A file left a read-write PCC: wakes the waiters.
    pub(crate) fn pcc_detached(&self) {
        self.hsm.pcc_changed.notify_waiters();
    }
}
