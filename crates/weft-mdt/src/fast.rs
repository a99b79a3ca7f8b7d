//! Opens that change nothing stored and closes that record nothing, done on the request
//! path instead of the commit thread.
//!
//! Through the commit thread each costs two thread hand-offs and a wait behind the batch
//! being committed (an fsync, when another client's change is in it). A data loader that
//! opens, reads and closes millions of files pays that twice per file. Here an open reads
//! the inode from a snapshot and registers its handle; a close removes its handle. The
//! handle table keeps them correct against the commit thread (see [`crate::handles`]):
//! whenever the commit thread may be deciding something about the inode's handles, the
//! request goes through the commit thread after all.

use crate::error::{Fail, StoreError};
use crate::handles::{Handle, Handles};
use crate::namespace::check_open;
use crate::store::{self, Inode};
use parking_lot::Mutex;
use redb::{Database, ReadableDatabase};
use weft_proto::Fid;
use weft_proto::mdt::{Credentials, MdtReply, MdtRequest};

/// Runs `req` here if it is an open without `O_TRUNC` or a close that records nothing;
/// `None` when it must go through the commit thread.
pub(crate) fn try_run(
    db: &Database,
    handles: &Mutex<Handles>,
    conn: u64,
    req: &MdtRequest,
) -> Option<Result<MdtReply, Fail>> {
    // Which requests may come here is the request table's `fast` flag, refined by their
    // fields (`MdtRequest::changes_nothing_stored`).
    if !req.changes_nothing_stored() {
        return None;
    }
    match req {
        MdtRequest::Open { fid, flags, cred } => open(db, handles, conn, *fid, *flags, cred),
        MdtRequest::Close { handle, .. } => close(db, handles, conn, *handle),
        _ => None,
    }
}

fn open(
    db: &Database,
    handles: &Mutex<Handles>,
    conn: u64,
    fid: Fid,
    flags: weft_proto::mdt::OpenFlags,
    cred: &Credentials,
) -> Option<Result<MdtReply, Fail>> {
    let seen = handles.lock().batches();
    // A missing inode (or one on another MDT) is the commit thread's to answer.
    let ino = match committed_inode(db, fid) {
        Ok(ino) => ino?,
        Err(e) => return Some(Err(e.into())),
    };
    // A refusal read from a committed snapshot is as true as the commit thread's.
    if let Err(e) = check_open(&ino, flags, cred, true) {
        return Some(Err(e));
    }
    let mut h = handles.lock();
    let handle = Handle {
        fid,
        access: flags.access,
        pins: None,
    };
    let id = h.open_untouched(conn, handle, seen)?;
    let attr = ino.attr(fid, h.open_count(fid));
    Some(Ok(MdtReply::Opened {
        handle: id,
        attr,
        layout: ino.layout,
    }))
}

fn close(
    db: &Database,
    handles: &Mutex<Handles>,
    conn: u64,
    id: u64,
) -> Option<Result<MdtReply, Fail>> {
    let (seen, fid) = {
        let h = handles.lock();
        (h.batches(), h.get(conn, id)?.fid)
    };
    let linked = committed_inode(db, fid).ok()??.nlink > 0;
    handles.lock().close_untouched(conn, id, linked, seen)?;
    Some(Ok(MdtReply::Ok))
}

/// The inode as the last commit left it.
fn committed_inode(db: &Database, fid: Fid) -> Result<Option<Inode>, StoreError> {
    let r = db.begin_read()?;
    let inodes = r.open_table(store::INODES)?;
    store::get_inode(&inodes, fid)
}
