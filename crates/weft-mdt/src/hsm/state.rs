//! Changes of a file's HSM state through the commit thread: release (`HsmRelease`), flags
//! (`HsmSetFlags`), an export's report (`HsmArchived`), and the coordinator's two steps of
//! a restore (instantiating the layout, clearing RELEASED at the end).

use super::{get_archive, put_archive, same_object};
use crate::engine::{Effects, Engine, Tx};
use crate::error::{Fail, fail};
use crate::namespace::load;
use crate::perm;
use crate::store::Inode;
use weft_proto::hsm::{
    ArchiveRef, HSM_ARCHIVED, HSM_DIRTY, HSM_EXISTS, HSM_LOST, HSM_NOARCHIVE, HSM_NORELEASE,
    HSM_RELEASED, HSM_SETTABLE, KEY_MAX,
};
use weft_proto::mdt::{Credentials, FileKind, MdtReply};
use weft_proto::{Errno, Fid};

/// The flags a file's owner may change; the rest are root's (Lustre's `HSM_USER_MASK`):
/// an owner setting EXISTS or ARCHIVED could have data released that no archive holds.
pub const HSM_USER_MASK: u32 = HSM_NORELEASE | HSM_NOARCHIVE | HSM_DIRTY;

/// A change of a file's HSM flags: the fields of
/// [`weft_proto::mdt::MdtRequest::HsmSetFlags`] but the file and the caller.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FlagChange {
    /// Flags to set.
    pub set: u32,
    /// Flags to clear.
    pub clear: u32,
    /// A new archive id (root only).
    pub archive_id: Option<u32>,
}

/// An archive copy of a file that was recorded: the fields of
/// [`weft_proto::mdt::MdtRequest::HsmArchived`] but the file and the caller.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ArchivedCopy<'a> {
    /// The repository holding the copy.
    pub repo: u32,
    /// The file's data version the copy was made of.
    pub data_version: u64,
    /// Where the copy is in the repository.
    pub archive: &'a ArchiveRef,
}

/// Flags that mean nothing without an archive copy (Lustre refuses them without EXISTS).
const NEED_EXISTS: u32 = HSM_DIRTY | HSM_ARCHIVED | HSM_LOST | HSM_RELEASED;

impl Engine {
    /// Puts the objects of `ino`'s layout into the destroy log and gives every component a
    /// fresh id (the highest id so far plus one, and up: ids are unique in the layout's
    /// history), keeping OST choices, so objects written later have new names and the
    /// destroy of the old ones cannot race a restore; bumps the generation; blocks become
    /// 0. Validates (EOVERFLOW) before it changes anything.
    pub(crate) fn drop_data(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        fid: Fid,
        ino: &mut Inode,
    ) -> Result<(), Fail> {
        if let Some(layout) = ino.layout.as_mut() {
            let top = layout.components.iter().map(|c| c.id).max().unwrap_or(0);
            let count = u32::try_from(layout.components.len()).unwrap_or(u32::MAX);
            if top.checked_add(count).is_none() {
                return Err(fail(Errno::Overflow, "the layout's component ids ran out"));
            }
            // Mutations start here.
            let objects = layout.objects(fid).collect();
            self.log_destroy(tx, fx, fid, objects)?;
            for (id, c) in (top + 1..).zip(layout.components.iter_mut()) {
                c.id = id;
                c.object_fid = None;
            }
            layout.generation = layout.generation.saturating_add(1);
        }
        ino.blocks = 0;
        Ok(())
    }

    /// `HsmRelease`: see [`weft_proto::mdt::MdtRequest::HsmRelease`]. Besides the
    /// contract's EBUSY cases, a file without an archive record or archive id is busy too
    /// (nothing could restore it).
    pub(crate) fn hsm_release(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        fid: Fid,
        data_version: Option<u64>,
        cred: &Credentials,
    ) -> Result<MdtReply, Fail> {
        let mut ino = load(&tx.inodes, fid)?;
        if !perm::owner_or_root(&ino, cred) {
            return Err(fail(Errno::Perm, "only the owner releases a file"));
        }
        let flags = ino.hsm_flags;
        if ino.kind == FileKind::Regular && flags & HSM_RELEASED != 0 {
            return Ok(self.attr_reply(fid, &ino));
        }
        let busy = |why: &str| Err(fail(Errno::Busy, format!("cannot release: {why}")));
        if ino.kind != FileKind::Regular {
            return busy("not a regular file");
        }
        if flags & (HSM_EXISTS | HSM_ARCHIVED) != HSM_EXISTS | HSM_ARCHIVED {
            return busy("not archived");
        }
        if flags & (HSM_DIRTY | HSM_NORELEASE | HSM_LOST) != 0 {
            return busy("dirty, NORELEASE or lost");
        }
        if data_version.is_some_and(|v| v != ino.data_version) {
            return busy("the data version moved");
        }
        if ino.archive_id == 0 || get_archive(&tx.xattrs, fid)?.is_none() {
            return busy("no archive copy is recorded");
        }
        if self.handles().count(fid) > 0 {
            return busy("the file is open");
        }
        self.drop_data(tx, fx, fid, &mut ino)?;
        ino.hsm_flags |= HSM_RELEASED;
        self.put_inode(tx, fx, fid, &ino)?;
        Ok(self.attr_reply(fid, &ino))
    }

    /// `HsmSetFlags`: owner or root; only [`HSM_SETTABLE`] flags (EINVAL); an owner not
    /// root only [`HSM_USER_MASK`] flags and no archive id (EPERM); flags needing EXISTS
    /// without it afterwards: EINVAL. Regular files and symlinks only (EINVAL).
    pub(crate) fn hsm_set_flags(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        fid: Fid,
        change: &FlagChange,
        cred: &Credentials,
    ) -> Result<MdtReply, Fail> {
        let FlagChange {
            set,
            clear,
            archive_id,
        } = *change;
        let mut ino = load(&tx.inodes, fid)?;
        if !perm::owner_or_root(&ino, cred) {
            return Err(fail(Errno::Perm, "only the owner changes HSM flags"));
        }
        if (set | clear) & !HSM_SETTABLE != 0 {
            return Err(fail(
                Errno::Inval,
                format!(
                    "flags {:#x} cannot be set or cleared",
                    (set | clear) & !HSM_SETTABLE
                ),
            ));
        }
        if cred.uid != 0 && ((set | clear) & !HSM_USER_MASK != 0 || archive_id.is_some()) {
            return Err(fail(
                Errno::Perm,
                "only root changes flags other than norelease, noarchive and dirty",
            ));
        }
        if !matches!(ino.kind, FileKind::Regular | FileKind::Symlink) {
            return Err(fail(Errno::Inval, "only files have an HSM state"));
        }
        let flags = (ino.hsm_flags | set) & !clear;
        if flags & NEED_EXISTS != 0 && flags & HSM_EXISTS == 0 {
            return Err(fail(
                Errno::Inval,
                "dirty, archived, lost and released need exists",
            ));
        }
        let id = archive_id.unwrap_or(ino.archive_id);
        if flags == ino.hsm_flags && id == ino.archive_id {
            return Ok(self.attr_reply(fid, &ino));
        }
        // Mutations start here.
        ino.hsm_flags = flags;
        ino.archive_id = id;
        self.put_inode(tx, fx, fid, &ino)?;
        Ok(self.attr_reply(fid, &ino))
    }

    /// `HsmArchived`: root only; EBUSY when the data version moved (the file keeps its
    /// state, DIRTY included); else EXISTS and ARCHIVED set, DIRTY and LOST cleared, the
    /// archive id and record stored. Regular files only (EINVAL).
    pub(crate) fn hsm_archived(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        fid: Fid,
        copy: &ArchivedCopy<'_>,
        cred: &Credentials,
    ) -> Result<MdtReply, Fail> {
        let ArchivedCopy {
            repo,
            data_version,
            archive,
        } = *copy;
        if cred.uid != 0 {
            return Err(fail(Errno::Perm, "only root records an archive copy"));
        }
        check_archive(repo, archive)?;
        let mut ino = load(&tx.inodes, fid)?;
        if ino.kind != FileKind::Regular {
            return Err(fail(Errno::Inval, "only regular files are archived"));
        }
        if ino.data_version != data_version {
            return Err(fail(
                Errno::Busy,
                "the file changed while it was exported (data version moved)",
            ));
        }
        // Mutations start here.
        ino.hsm_flags = (ino.hsm_flags | HSM_EXISTS | HSM_ARCHIVED) & !(HSM_DIRTY | HSM_LOST);
        ino.archive_id = repo;
        self.put_inode(tx, fx, fid, &ino)?;
        put_archive(tx, fx, fid, archive)?;
        Ok(self.attr_reply(fid, &ino))
    }

    /// The coordinator's first step of a restore: instantiates every component of a
    /// released file over `[0, size)` (no client handle is involved). Answers `Ok`, or
    /// `Progress { done: true }` when the file is not released (nothing to restore).
    pub(crate) fn hsm_instantiate(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        fid: Fid,
    ) -> Result<MdtReply, Fail> {
        let mut ino = load(&tx.inodes, fid)?;
        if ino.hsm_flags & HSM_RELEASED == 0 {
            return Ok(MdtReply::Progress { done: true });
        }
        let Some(mut layout) = ino.layout.clone() else {
            return Err(fail(Errno::Io, "a released file without a layout"));
        };
        if ino.size == 0 || !self.instantiate_range(&mut layout, 0, ino.size)? {
            return Ok(MdtReply::Ok);
        }
        // Mutations start here.
        ino.layout = Some(layout);
        self.put_inode(tx, fx, fid, &ino)?;
        Ok(MdtReply::Ok)
    }

    /// The coordinator's last step: every byte of `fid` is loaded from `archive` into
    /// objects of layout generation `generation`; clears RELEASED if the file is still
    /// released against that object and layout (a concurrent unlink, re-import or release
    /// wins), and sets its atime (tiering's "last used"). Answers `Progress { done }`: whether it was cleared (or the file was not
    /// released at all); ESTALE when the file is gone.
    pub(crate) fn hsm_restored(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        fid: Fid,
        archive: &ArchiveRef,
        generation: u32,
    ) -> Result<MdtReply, Fail> {
        let mut ino = load(&tx.inodes, fid)?;
        if ino.hsm_flags & HSM_RELEASED == 0 {
            return Ok(MdtReply::Progress { done: true });
        }
        let same_ref = get_archive(&tx.xattrs, fid)?.is_some_and(|a| same_object(&a, archive));
        let same_layout = ino.layout.as_ref().map_or(0, |l| l.generation) == generation;
        if !same_ref || !same_layout {
            return Ok(MdtReply::Progress { done: false });
        }
        // Mutations start here. A restore is a read of the file's data: its access time
        // (tiering releases the least recently used files first).
        ino.hsm_flags &= !HSM_RELEASED;
        ino.atime = weft_proto::Timestamp::now();
        self.put_inode(tx, fx, fid, &ino)?;
        Ok(MdtReply::Progress { done: true })
    }
}

/// EINVAL for an archive record that cannot name an object of a repository.
pub(super) fn check_archive(repo: u32, archive: &ArchiveRef) -> Result<(), Fail> {
    if repo == 0 {
        return Err(fail(Errno::Inval, "repository ids start at 1"));
    }
    if archive.key.is_empty() || archive.key.len() > KEY_MAX {
        return Err(fail(Errno::Inval, "bad object key length"));
    }
    if archive.size > i64::MAX as u64 {
        return Err(fail(Errno::FBig, "object too large"));
    }
    Ok(())
}
