//! `ImportEntries`: a repository's objects become released files (and symlinks) of one
//! directory, in one transaction, through the create path (same checks, same layout
//! choice); a name already taken is left alone, or updated when it names an older
//! version of the same repository's object that nobody changed here.

use super::state::check_archive;
use super::{get_archive, put_archive, same_object};
use crate::engine::{Effects, Engine, Tx};
use crate::error::{Fail, fail};
use crate::names::check_name;
use crate::namespace::load_dir;
use crate::store::{self, Inode};
use std::sync::atomic::Ordering;
use weft_proto::hsm::{
    HSM_ARCHIVED, HSM_DIRTY, HSM_EXISTS, HSM_NOARCHIVE, HSM_NORELEASE, HSM_RELEASED, ImportEntry,
    ImportKind, ImportOutcome,
};
use weft_proto::mdt::{Credentials, FileKind, MdtReply, NewFile};
use weft_proto::{Errno, Fid, SYMLINK_MAX, Timestamp};

/// The file type bits of a regular file.
const S_IFREG: u32 = 0o100000;

/// Where an import puts its entries, and who asks: the fields of
/// [`weft_proto::mdt::MdtRequest::ImportEntries`] but the entries.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ImportInto<'a> {
    /// The directory the entries are made in.
    pub parent: Fid,
    /// The repository their objects are in.
    pub repo: u32,
    /// The caller (root).
    pub cred: &'a Credentials,
}

impl Engine {
    /// `ImportEntries` (see [`weft_proto::mdt::MdtRequest::ImportEntries`]). Root only
    /// (EPERM); more than [`super::IMPORT_MAX`] entries or repository 0: EINVAL for the
    /// whole request. Each entry then has its own outcome; one refused entry
    /// (`Failed(errno)`) changes nothing of its own and does not stop the others.
    pub(crate) fn import_entries(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        conn: u64,
        into: &ImportInto<'_>,
        entries: &[ImportEntry],
    ) -> Result<MdtReply, Fail> {
        let ImportInto { repo, cred, .. } = *into;
        if cred.uid != 0 {
            return Err(fail(Errno::Perm, "only root imports from a repository"));
        }
        if repo == 0 {
            return Err(fail(Errno::Inval, "repository ids start at 1"));
        }
        if entries.len() > super::IMPORT_MAX {
            return Err(fail(
                Errno::Inval,
                format!("at most {} entries per import", super::IMPORT_MAX),
            ));
        }
        self.reserve_fids(entries.len() as u64)?;
        let mut out = Vec::with_capacity(entries.len());
        for e in entries {
            let outcome = match self.import_one(tx, fx, conn, into, e) {
                Ok(o) => o,
                Err(Fail::Wire(w)) => ImportOutcome::Failed(w.errno.code()),
                Err(other) => return Err(other),
            };
            out.push(outcome);
        }
        let imported = out
            .iter()
            .filter(|o| matches!(o, ImportOutcome::Created(_) | ImportOutcome::Updated(_)))
            .count() as u64;
        self.counters
            .hsm_imported
            .fetch_add(imported, Ordering::Relaxed);
        self.counters
            .hsm_import_entries
            .fetch_add(entries.len() as u64, Ordering::Relaxed);
        Ok(MdtReply::Imported(out))
    }

    /// Makes sure `n` FIDs can be allocated in this operation, so an import never runs
    /// out half-way (its earlier entries are already written in the batch). When the
    /// current sequence holds fewer, it is abandoned and a new one asked for
    /// ([`Fail::NeedSeq`]); a request needing more than one sequence holds goes ahead
    /// (the retry after a grant finds the entries made so far `Unchanged`).
    fn reserve_fids(&mut self, n: u64) -> Result<(), Fail> {
        if n == 0 || self.fids_left() >= n || n > self.seq_width {
            return Ok(());
        }
        self.abandon_seq();
        Err(Fail::NeedSeq)
    }

    fn import_one(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        conn: u64,
        into: &ImportInto<'_>,
        e: &ImportEntry,
    ) -> Result<ImportOutcome, Fail> {
        let ImportInto { parent, repo, cred } = *into;
        // The checks a create makes, in its order, before the name is looked at.
        load_dir(&tx.inodes, &tx.dir_stripes, parent, cred)?;
        check_name(&e.name)?;
        check_entry(repo, e)?;
        if let Some(de) = store::get_dirent(&tx.dirents, parent, &e.name)? {
            return self.import_over(tx, fx, de.fid, repo, e);
        }
        let fid = match e.kind {
            ImportKind::Regular => {
                let new = NewFile {
                    parent,
                    name: &e.name,
                    mode: S_IFREG | (e.mode & 0o7777),
                    rdev: 0,
                    exclusive: true,
                    layout: e.layout.as_ref(),
                    open: None,
                };
                match self.create(tx, fx, conn, &new, cred)? {
                    MdtReply::Created { attr, .. } => attr.fid,
                    _ => return Err(fail(Errno::Io, "create answered something else")),
                }
            }
            ImportKind::Symlink => match self.symlink(tx, fx, parent, &e.name, &e.target, cred)? {
                MdtReply::Attr(a) => a.fid,
                _ => return Err(fail(Errno::Io, "symlink answered something else")),
            },
        };
        // Mutations happened: from here only store failures.
        let mut ino = crate::namespace::load(&tx.inodes, fid)?;
        set_attrs(&mut ino, repo, e);
        ino.hsm_flags = HSM_EXISTS | HSM_ARCHIVED | released_bit(e.kind);
        self.put_inode(tx, fx, fid, &ino)?;
        put_archive(tx, fx, fid, &e.archive)?;
        Ok(ImportOutcome::Created(fid))
    }

    /// The entry's name is taken by `fid`: unchanged, updated, or a conflict.
    fn import_over(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        fid: Fid,
        repo: u32,
        e: &ImportEntry,
    ) -> Result<ImportOutcome, Fail> {
        let Some(mut ino) = store::get_inode(&tx.inodes, fid)? else {
            // Named here, held by another MDT: not a file of this import.
            return Ok(ImportOutcome::Conflict(fid));
        };
        let kind = match e.kind {
            ImportKind::Regular => FileKind::Regular,
            ImportKind::Symlink => FileKind::Symlink,
        };
        if ino.kind != kind {
            return Ok(ImportOutcome::Conflict(fid));
        }
        let Some(old) = get_archive(&tx.xattrs, fid)? else {
            return Ok(ImportOutcome::Conflict(fid));
        };
        if same_object(&old, &e.archive) {
            return Ok(ImportOutcome::Unchanged(fid));
        }
        let ours = ino.archive_id == repo && ino.hsm_flags & HSM_EXISTS != 0;
        if !ours
            || ino.hsm_flags & (HSM_DIRTY | HSM_NORELEASE) != 0
            || self.handles().has_writer(fid)
        {
            return Ok(ImportOutcome::Conflict(fid));
        }
        if kind == FileKind::Regular {
            // Mutations start here (drop_data validates first).
            self.drop_data(tx, fx, fid, &mut ino)?;
        } else {
            ino.symlink = e.target.clone();
        }
        set_attrs(&mut ino, repo, e);
        ino.hsm_flags = (ino.hsm_flags & HSM_NOARCHIVE) | HSM_EXISTS | HSM_ARCHIVED;
        ino.hsm_flags |= released_bit(e.kind);
        ino.data_version = ino.data_version.wrapping_add(1);
        self.put_inode(tx, fx, fid, &ino)?;
        put_archive(tx, fx, fid, &e.archive)?;
        Ok(ImportOutcome::Updated(fid))
    }
}

/// RELEASED for files (their data is in the store); symlinks hold their target here.
fn released_bit(kind: ImportKind) -> u32 {
    match kind {
        ImportKind::Regular => HSM_RELEASED,
        ImportKind::Symlink => 0,
    }
}

/// The object's attributes on an imported inode (ctime now, no blocks on the OSTs).
fn set_attrs(ino: &mut Inode, repo: u32, e: &ImportEntry) {
    ino.mode = e.mode & 0o7777;
    if ino.kind == FileKind::Symlink {
        ino.mode = 0o777;
        ino.size = e.target.len() as u64;
    } else {
        ino.size = e.archive.size;
        ino.blocks = 0;
    }
    ino.uid = e.uid;
    ino.gid = e.gid;
    ino.atime = e.atime;
    ino.mtime = e.mtime;
    ino.ctime = Timestamp::now();
    ino.archive_id = repo;
}

/// What the entry itself must hold (the name is checked apart): a valid archive record,
/// times in range, a symlink's target as `symlink(2)` wants it, no target for files.
fn check_entry(repo: u32, e: &ImportEntry) -> Result<(), Fail> {
    check_archive(repo, &e.archive)?;
    if e.atime.nsec >= 1_000_000_000 || e.mtime.nsec >= 1_000_000_000 {
        return Err(fail(Errno::Inval, "nanoseconds out of range"));
    }
    match e.kind {
        ImportKind::Regular if !e.target.is_empty() => {
            Err(fail(Errno::Inval, "a file entry with a symlink target"))
        }
        ImportKind::Regular => Ok(()),
        ImportKind::Symlink if e.target.is_empty() => {
            Err(fail(Errno::NoEnt, "empty symlink target"))
        }
        ImportKind::Symlink if e.target.len() > SYMLINK_MAX => {
            Err(fail(Errno::NameTooLong, "symlink target too long"))
        }
        ImportKind::Symlink if e.target.contains(&0) => {
            Err(fail(Errno::Inval, "NUL in symlink target"))
        }
        ImportKind::Symlink => Ok(()),
    }
}
