//! What `weft fsck` reads from an MDT and the repairs it asks for. Reading pages through
//! every inode and every directory entry of the store lets the tool check the namespace
//! across MDTs without walking it: entries naming inodes that do not exist (dangling),
//! inodes no entry names (orphans), link counts, shards of striped directories, and which
//! OST objects layouts reference.

use crate::engine::{Effects, Engine, Tx};
use crate::error::{Fail, StoreError, fail};
use crate::store::{self, Dirent, Inode};

use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata};
use weft_proto::mdt::{FsckEntry, FsckInode, FsckRepair, MdtReply};
use weft_proto::{Errno, Fid};

/// Most inodes or entries in one page.
pub const FSCK_PAGE_MAX: u32 = 4096;
/// Most destroy-log objects listed (a log this long means destroys are stuck; the tool
/// then skips the object check).
const DESTROYING_MAX: usize = 100_000;

fn fid_key(k: &[u8]) -> Result<Fid, StoreError> {
    let b: [u8; 16] = k.try_into().map_err(|_| StoreError::Corrupt {
        table: "inodes",
        message: "a key of the wrong length".into(),
    })?;
    Ok(Fid::from_bytes(b))
}

/// One page of inodes after `after`.
pub(crate) fn inodes(db: &Database, after: Option<Fid>, max: u32) -> Result<MdtReply, Fail> {
    let r = db.begin_read().map_err(StoreError::from)?;
    let inodes = r.open_table(store::INODES).map_err(StoreError::from)?;
    let orphans = r.open_table(store::ORPHANS).map_err(StoreError::from)?;
    let stripes = r.open_table(store::DIR_STRIPES).map_err(StoreError::from)?;
    let intents = r.open_table(store::INTENTS).map_err(StoreError::from)?;
    let max = max.clamp(1, FSCK_PAGE_MAX) as usize;
    let start = after.map(|f| f.to_bytes());
    let range = match &start {
        Some(s) => inodes.range::<&[u8]>(s.as_slice()..)?,
        None => inodes.range::<&[u8]>(..)?,
    };
    let mut out = Vec::new();
    let mut next = None;
    for item in range {
        let (k, v) = item?;
        let fid = fid_key(k.value())?;
        if Some(fid) == after {
            continue;
        }
        if out.len() >= max {
            next = out.last().map(|i: &FsckInode| i.fid);
            break;
        }
        let ino: Inode = store::decode("inodes", v.value())?;
        out.push(FsckInode {
            fid,
            kind: ino.kind,
            nlink: ino.nlink,
            parent: ino.parent,
            orphan: orphans.get(fid.to_bytes().as_slice())?.is_some(),
            shards: store::get_stripes(&stripes, fid)?.map(|s| s.shards),
            objects: ino
                .layout
                .as_ref()
                .map(|l| l.objects(fid).collect())
                .unwrap_or_default(),
        });
    }
    let mut destroying = Vec::new();
    if after.is_none() {
        let log = r.open_table(store::DESTROY_LOG).map_err(StoreError::from)?;
        for item in log.iter()? {
            let (_, v) = item?;
            let rec: store::DestroyRecord = store::decode("destroy_log", v.value())?;
            destroying.extend(rec.objects);
            if destroying.len() > DESTROYING_MAX {
                return Err(fail(
                    Errno::Busy,
                    "the destroy log is too long to list: destroys are stuck",
                ));
            }
        }
    }
    Ok(MdtReply::FsckInodes {
        inodes: out,
        next,
        intents: intents.len().map_err(StoreError::from)?,
        destroying,
    })
}

/// One page of directory entries after the key `after`.
pub(crate) fn entries(db: &Database, after: Option<&[u8]>, max: u32) -> Result<MdtReply, Fail> {
    let r = db.begin_read().map_err(StoreError::from)?;
    let dirents = r.open_table(store::DIRENTS).map_err(StoreError::from)?;
    let max = max.clamp(1, FSCK_PAGE_MAX) as usize;
    let range = match after {
        Some(s) => dirents.range::<&[u8]>(s..)?,
        None => dirents.range::<&[u8]>(..)?,
    };
    let mut out = Vec::new();
    let mut last: Option<Vec<u8>> = None;
    let mut next = None;
    for item in range {
        let (k, v) = item?;
        let key = k.value();
        if Some(key) == after {
            continue;
        }
        if out.len() >= max {
            next = last;
            break;
        }
        let parent = fid_key(key.get(..16).ok_or_else(|| StoreError::Corrupt {
            table: "dirents",
            message: "short key".into(),
        })?)?;
        let (_, name) = store::split_dirent_key(key)?;
        let de: Dirent = store::decode("dirents", v.value())?;
        out.push(FsckEntry {
            parent,
            name: name.to_vec(),
            fid: de.fid,
            kind: de.kind,
        });
        last = Some(key.to_vec());
    }
    Ok(MdtReply::FsckEntries { entries: out, next })
}

impl Engine {
    /// Applies one `weft fsck` repair; each re-checks what it fixes, so a repair of
    /// something that changed since the scan does nothing (EAGAIN).
    pub(crate) fn fsck_repair(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        repair: &FsckRepair,
    ) -> Result<MdtReply, Fail> {
        let moved = || fail(Errno::Again, "changed since the scan");
        match repair {
            FsckRepair::RemoveEntry { parent, name, fid } => {
                match store::get_dirent(&tx.dirents, *parent, name)? {
                    Some(d) if d.fid == *fid => {}
                    _ => return Err(moved()),
                }
                // The parent's link count is the tool's to fix (SetNlink), from its count of
                // the subdirectories that remain.
                tx.dirents
                    .remove(store::dirent_key(*parent, name).as_slice())?;
                fx.wrote = true;
                Ok(MdtReply::Ok)
            }
            FsckRepair::SetNlink {
                fid,
                expected,
                nlink,
            } => {
                let mut ino = crate::namespace::load(&tx.inodes, *fid)?;
                if ino.nlink != *expected {
                    return Err(moved());
                }
                ino.nlink = *nlink;
                if ino.nlink == 0 && !ino.is_dir() {
                    self.unlinked(tx, fx, *fid, &ino)?;
                } else {
                    self.put_inode(tx, fx, *fid, &ino)?;
                }
                Ok(MdtReply::Ok)
            }
            FsckRepair::RemoveInode { fid } => {
                let mut ino = crate::namespace::load(&tx.inodes, *fid)?;
                if ino.is_dir() && !store::dir_is_empty(&tx.dirents, *fid)? {
                    return Err(fail(
                        Errno::NotEmpty,
                        "an orphan directory with entries is left for a person to look at",
                    ));
                }
                if let Some(s) = store::get_stripes(&tx.dir_stripes, *fid)? {
                    return Err(fail(
                        Errno::Busy,
                        format!(
                            "an orphan striped directory ({} shards) is left for a person to look at",
                            s.shards.len()
                        ),
                    ));
                }
                ino.nlink = 0;
                self.destroy_inode(tx, fx, *fid, &ino)?;
                tx.remote_dirs.remove(fid.to_bytes().as_slice())?;
                Ok(MdtReply::Ok)
            }
        }
    }
}
