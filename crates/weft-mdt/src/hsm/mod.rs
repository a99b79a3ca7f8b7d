//! Hierarchical storage management on the MDT (issue 23: data repositories with Lustre's
//! HSM semantics): files imported from a repository are *released* (their size and
//! attributes real, their data in the store), and the MDT is the HSM coordinator that
//! loads them back on first read.
//!
//! This module owns what the HSM state of an inode means and how it changes:
//! - `import`: `ImportEntries`, making released files (and symlinks) for a repository's
//!   objects, or telling what an existing name is to them;
//! - `state`: `HsmRelease`, `HsmSetFlags`, `HsmArchived`, and the DIRTY rule every data
//!   change applies (`data_changed`);
//! - `pcc`: `HsmPccRw` and `HsmPccWait`, files held in a client's read-write persistent
//!   cache and the waits of other clients for them;
//! - `restore`: the coordinator: one restore job per file, shared by every reader, run
//!   on its own task, copying units through [`crate::ClusterView::restore_chunk`] and
//!   clearing RELEASED (durably) at the end.
//!
//! A file's [`ArchiveRef`] lives postcard-encoded in the xattr `trusted.weft.archive`
//! ([`ARCHIVE_XATTR`]), stored as every xattr is (record version byte, then the value).

use crate::engine::{Effects, Tx};
use crate::error::{Fail, StoreError};
use crate::store::{self, Inode, Readable};
use redb::{Database, ReadableDatabase};
use weft_proto::Fid;
use weft_proto::hsm::{ARCHIVE_XATTR, ArchiveRef, HSM_ARCHIVED, HSM_DIRTY, HSM_EXISTS};

mod import;
mod pcc;
mod restore;
mod state;

pub(crate) use import::ImportInto;
pub(crate) use restore::Coordinator;
pub use restore::HsmConfig;
pub(crate) use state::{ArchivedCopy, FlagChange};

/// Most entries one `ImportEntries` may carry (they are applied in one transaction).
pub const IMPORT_MAX: usize = 4096;

/// The archive record of `fid`, if it has one.
pub(crate) fn get_archive(xattrs: &impl Readable, fid: Fid) -> Result<Option<ArchiveRef>, Fail> {
    Ok(store::get(
        xattrs,
        "xattrs",
        &store::xattr_key(fid, ARCHIVE_XATTR),
    )?)
}

/// Stores `archive` as `fid`'s archive record.
pub(crate) fn put_archive(
    tx: &mut Tx<'_>,
    fx: &mut Effects,
    fid: Fid,
    archive: &ArchiveRef,
) -> Result<(), StoreError> {
    let v = store::encode(archive)?;
    tx.xattrs.insert(
        store::xattr_key(fid, ARCHIVE_XATTR).as_slice(),
        v.as_slice(),
    )?;
    fx.wrote = true;
    Ok(())
}

/// The data or size of `ino` changed on this MDT: a file with an archive copy becomes
/// DIRTY and is no longer ARCHIVED (its copy is not current), as in Lustre.
pub(crate) fn data_changed(ino: &mut Inode) {
    if ino.hsm_flags & HSM_EXISTS != 0 {
        ino.hsm_flags = (ino.hsm_flags | HSM_DIRTY) & !HSM_ARCHIVED;
    }
}

/// An inode and its archive record as the last commit left them (`None`: no inode).
pub(crate) fn snapshot(
    db: &Database,
    fid: Fid,
) -> Result<Option<(Inode, Option<ArchiveRef>)>, Fail> {
    let r = db.begin_read().map_err(StoreError::from)?;
    let inodes = r.open_table(store::INODES).map_err(StoreError::from)?;
    let Some(ino) = store::get_inode(&inodes, fid)? else {
        return Ok(None);
    };
    let xattrs = r.open_table(store::XATTRS).map_err(StoreError::from)?;
    let archive = get_archive(&xattrs, fid)?;
    Ok(Some((ino, archive)))
}

/// Whether two archive records name the same object version (key, tag and size).
pub(crate) fn same_object(a: &ArchiveRef, b: &ArchiveRef) -> bool {
    a.key == b.key && a.etag == b.etag && a.size == b.size
}
