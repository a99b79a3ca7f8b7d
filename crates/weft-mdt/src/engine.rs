//! The write side of the MDT: the state the commit thread owns and the primitives every
//! namespace operation is built from (allocating FIDs, writing inodes, dropping links,
//! destroying inodes through the destroy log).
//!
//! Every operation runs in two phases inside the batch's shared write transaction: first it
//! validates everything (returning a [`Fail::Wire`] having written nothing), then it
//! mutates, where only store failures can occur. A store failure poisons the whole batch,
//! which is then dropped uncommitted.

use crate::cluster::ClusterView;
use crate::error::{Fail, StoreError};
use crate::handles::{Handles, Undo};
use crate::placement::Placement;
use crate::store::{self, DestroyRecord, Inode, Meta, Readable};
use parking_lot::{Mutex, MutexGuard};
use redb::{Database, WriteTransaction};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use weft_proto::{Errno, Fid, FidSeqRange, ObjectId};

pub(crate) use crate::redo::WTable;

/// The tables of one write transaction, opened once per batch. Every change made through
/// them is recorded for the redo log (see [`crate::redo`]).
pub(crate) struct Tx<'t> {
    pub inodes: WTable<'t>,
    pub dirents: WTable<'t>,
    pub xattrs: WTable<'t>,
    pub orphans: WTable<'t>,
    pub destroy: WTable<'t>,
    pub replies: WTable<'t>,
    pub intents: WTable<'t>,
    pub remote_ops: WTable<'t>,
    pub remote_dirs: WTable<'t>,
    pub dir_stripes: WTable<'t>,
    pub dir_defaults: WTable<'t>,
    pub rename_lock: WTable<'t>,
    pub frozen: WTable<'t>,
    pub meta: WTable<'t>,
}

impl<'t> Tx<'t> {
    pub fn open(txn: &'t WriteTransaction) -> Result<Self, StoreError> {
        use crate::redo::id;
        Ok(Self {
            inodes: WTable::open(txn, id::INODES)?,
            dirents: WTable::open(txn, id::DIRENTS)?,
            xattrs: WTable::open(txn, id::XATTRS)?,
            orphans: WTable::open(txn, id::ORPHANS)?,
            destroy: WTable::open(txn, id::DESTROY_LOG)?,
            replies: WTable::open(txn, id::REPLIES)?,
            intents: WTable::open(txn, id::INTENTS)?,
            remote_ops: WTable::open(txn, id::REMOTE_OPS)?,
            remote_dirs: WTable::open(txn, id::REMOTE_DIRS)?,
            dir_stripes: WTable::open(txn, id::DIR_STRIPES)?,
            dir_defaults: WTable::open(txn, id::DIR_DEFAULTS)?,
            rename_lock: WTable::open(txn, id::RENAME_LOCK)?,
            frozen: WTable::open(txn, id::FROZEN)?,
            meta: WTable::open(txn, id::META)?,
        })
    }

    /// The redo-log frame body of everything changed so far, for commit `lsn` (`None` if
    /// nothing was).
    pub fn take_frame(&mut self, lsn: u64) -> Option<Vec<u8>> {
        crate::redo::frame_body(
            lsn,
            [
                &mut self.inodes,
                &mut self.dirents,
                &mut self.xattrs,
                &mut self.orphans,
                &mut self.destroy,
                &mut self.replies,
                &mut self.intents,
                &mut self.remote_ops,
                &mut self.remote_dirs,
                &mut self.dir_stripes,
                &mut self.dir_defaults,
                &mut self.rename_lock,
                &mut self.frozen,
                &mut self.meta,
            ],
        )
    }
}

/// What the operations of a batch did besides their replies.
#[derive(Debug, Default)]
pub(crate) struct Effects {
    /// Something was written: the batch must commit.
    pub wrote: bool,
    /// Destroy-log records were added: wake the destroy task after commit.
    pub destroys: bool,
    /// Handle-table changes to revert if the commit fails.
    pub undo: Vec<Undo>,
}

/// Counters other threads may read at any time.
#[derive(Debug, Default)]
pub struct Counters {
    /// Directories stored.
    pub dirs: AtomicU64,
    /// Non-directories stored.
    pub files: AtomicU64,
    /// Destroy-log records written so far (since start).
    pub destroys_logged: AtomicU64,
    /// Write transactions committed.
    pub commits: AtomicU64,
    /// Of those, the durable ones (fsync): the others' changes were in the redo log until
    /// the next one.
    pub durable_commits: AtomicU64,
    /// Commits not yet durable.
    pub deferred: AtomicU64,
    /// Destroy-log records with a lower sequence are durable: their objects may go.
    pub durable_destroys: AtomicU64,
    /// Operations answered by the commit thread.
    pub ops: AtomicU64,
    /// Opens and closes answered without the commit thread (see `fast.rs`).
    pub fast_ops: AtomicU64,
    /// Requests of clients and other servers started (the destroy worker waits while
    /// they keep coming, see `destroy.rs`).
    pub requests: AtomicU64,
    /// Replies recorded for numbered requests (see `replies.rs`).
    pub reply_records: AtomicU64,
    /// FIDs allocatable without asking the MGS (saturating).
    pub fids_left: AtomicU64,
    /// Entries `ImportEntries` was asked to import (see `crate::hsm`).
    pub hsm_import_entries: AtomicU64,
    /// Of those, the ones that made or updated a file.
    pub hsm_imported: AtomicU64,
    /// Restore jobs started by the HSM coordinator.
    pub hsm_restores_started: AtomicU64,
    /// Restore jobs that loaded their whole file.
    pub hsm_restores_done: AtomicU64,
    /// Restore jobs that failed (the data mover's error, or a file that kept changing).
    pub hsm_restores_failed: AtomicU64,
    /// Bytes the data mover restored.
    pub hsm_restore_bytes: AtomicU64,
    /// Released files and bytes per archive id, as of the last commit.
    pub released: Mutex<Vec<store::ReleasedCount>>,
}

/// The commit thread's state.
pub(crate) struct Engine {
    pub db: Arc<Database>,
    pub meta: Meta,
    pub cluster: Arc<dyn ClusterView>,
    pub placement: Placement,
    pub handles: Arc<Mutex<Handles>>,
    pub seq_width: u64,
    pub counters: Arc<Counters>,
    pub redo: crate::redo::RedoLog,
}

/// The most links a non-directory may have (ext4's `EXT4_LINK_MAX`).
pub const LINK_MAX: u32 = 65000;

/// How deep a parent chain may go before it is declared corrupt.
const MAX_DEPTH: usize = 1 << 16;

impl Engine {
    pub fn handles(&self) -> MutexGuard<'_, Handles> {
        self.handles.lock()
    }

    /// Whether a new FID can be allocated without asking the MGS.
    pub fn fid_available(&self) -> bool {
        (self.meta.cur_seq != 0 && self.meta.next_oid <= self.seq_width)
            || self.meta.free_seqs.iter().any(|r| !r.is_empty())
    }

    /// Allocates a FID; callers check [`Engine::fid_available`] while validating.
    pub fn alloc_fid(&mut self) -> Result<Fid, Fail> {
        if self.meta.cur_seq == 0 || self.meta.next_oid > self.seq_width {
            self.meta.free_seqs.retain(|r| !r.is_empty());
            let Some(range) = self.meta.free_seqs.first_mut() else {
                return Err(Fail::NeedSeq);
            };
            self.meta.cur_seq = range.start;
            range.start += 1;
            self.meta.next_oid = 1;
        }
        let oid = u32::try_from(self.meta.next_oid).map_err(|_| Fail::NeedSeq)?;
        self.meta.next_oid += 1;
        Ok(Fid {
            seq: self.meta.cur_seq,
            oid,
            ver: 0,
        })
    }

    /// Stops handing out FIDs of the current sequence: the next comes from a new one.
    pub fn abandon_seq(&mut self) {
        if self.meta.cur_seq != 0 {
            self.meta.next_oid = self.seq_width + 1;
        }
    }

    /// Adds sequences granted by the MGS.
    pub fn grant(&mut self, range: FidSeqRange, fx: &mut Effects) {
        if !range.is_empty() && !self.meta.free_seqs.contains(&range) {
            self.meta.free_seqs.push(range);
            fx.wrote = true;
        }
    }

    /// Writes inode `fid`, keeping the released counts ([`store::Meta::released`]) in
    /// step with the record it replaces.
    pub fn put_inode(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        fid: Fid,
        ino: &Inode,
    ) -> Result<(), StoreError> {
        let v = store::encode(ino)?;
        let before = match tx.inodes.insert(fid.to_bytes().as_slice(), v.as_slice())? {
            // A damaged record being replaced had no share that can be told.
            Some(old) => store::decode::<store::InodeAttrs>("inodes", old.value())
                .ok()
                .and_then(|a| a.released_share()),
            None => None,
        };
        self.meta.count_released(before, ino.released_share());
        fx.wrote = true;
        Ok(())
    }

    /// A non-directory loses one link (a name removed or replaced): unlinked at the last.
    pub fn drop_one_link(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        fid: Fid,
        mut ino: Inode,
    ) -> Result<(), StoreError> {
        ino.nlink = ino.nlink.saturating_sub(1);
        ino.ctime = weft_proto::Timestamp::now();
        if ino.nlink == 0 {
            self.unlinked(tx, fx, fid, &ino)
        } else {
            self.put_inode(tx, fx, fid, &ino)
        }
    }

    /// An inode just lost its last name: it becomes an orphan while handles hold it open,
    /// else it is destroyed now.
    pub fn unlinked(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        fid: Fid,
        ino: &Inode,
    ) -> Result<(), StoreError> {
        if self.handles().count(fid) > 0 {
            tx.orphans.insert(
                fid.to_bytes().as_slice(),
                [store::RECORD_VERSION].as_slice(),
            )?;
            self.put_inode(tx, fx, fid, ino)
        } else {
            self.destroy_inode(tx, fx, fid, ino)
        }
    }

    /// Removes an inode with its extended attributes and logs its objects for destruction.
    pub fn destroy_inode(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        fid: Fid,
        ino: &Inode,
    ) -> Result<(), StoreError> {
        tx.inodes.remove(fid.to_bytes().as_slice())?;
        self.meta.count_released(ino.released_share(), None);
        tx.orphans.remove(fid.to_bytes().as_slice())?;
        if ino.is_dir() {
            tx.dir_defaults.remove(fid.to_bytes().as_slice())?;
        }
        let (start, end) = store::fid_prefix_range(fid);
        let keys = collect_keys(&tx.xattrs, &start, end.as_deref())?;
        for k in keys {
            tx.xattrs.remove(k.as_slice())?;
        }
        if ino.is_dir() {
            self.meta.dirs = self.meta.dirs.saturating_sub(1);
        } else {
            self.meta.files = self.meta.files.saturating_sub(1);
        }
        if let Some(layout) = &ino.layout {
            self.log_destroy(tx, fx, fid, layout.objects(fid).collect())?;
        }
        fx.wrote = true;
        Ok(())
    }

    /// Writes a destroy-log record for `objects` (nothing if empty).
    pub fn log_destroy(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        fid: Fid,
        objects: Vec<(u32, ObjectId)>,
    ) -> Result<(), StoreError> {
        if objects.is_empty() {
            return Ok(());
        }
        let seq = self.meta.next_destroy;
        self.meta.next_destroy += 1;
        let rec = store::encode(&DestroyRecord { fid, objects })?;
        tx.destroy
            .insert(seq.to_be_bytes().as_slice(), rec.as_slice())?;
        fx.wrote = true;
        fx.destroys = true;
        self.counters
            .destroys_logged
            .fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Whether `anc` is `fid` or one of its ancestors, following directory parent links.
    pub fn is_ancestor_or_self(
        &self,
        inodes: &impl Readable,
        anc: Fid,
        fid: Fid,
    ) -> Result<bool, Fail> {
        let mut cur = fid;
        for _ in 0..MAX_DEPTH {
            if cur == anc {
                return Ok(true);
            }
            let Some(ino) = store::get_inode(inodes, cur)? else {
                // The chain leaves this MDT (a remote directory): whether it comes back
                // through `anc` cannot be told from here.
                return Err(crate::error::fail(
                    Errno::XDev,
                    "the directory's ancestors are on another MDT",
                ));
            };
            if ino.parent == cur {
                return Ok(false);
            }
            cur = ino.parent;
        }
        Err(crate::error::fail(
            Errno::Loop,
            "directory parent chain too deep",
        ))
    }

    /// Destroys the orphans left by a previous run that no client has opened again (their
    /// handles died with it; clients reopen what they still hold).
    pub fn reap_orphans(&mut self, tx: &mut Tx<'_>, fx: &mut Effects) -> Result<usize, StoreError> {
        let keys = collect_keys(&tx.orphans, &[], None)?;
        let mut n = 0;
        for k in keys {
            let mut b = [0u8; 16];
            if k.len() != 16 {
                tx.orphans.remove(k.as_slice())?;
                continue;
            }
            b.copy_from_slice(&k);
            let fid = Fid::from_bytes(b);
            match store::get_inode(&tx.inodes, fid)? {
                Some(_) if self.handles().count(fid) > 0 => {}
                Some(ino) if ino.nlink == 0 => {
                    self.destroy_inode(tx, fx, fid, &ino)?;
                    n += 1;
                }
                _ => {
                    tx.orphans.remove(k.as_slice())?;
                    fx.wrote = true;
                }
            }
        }
        Ok(n)
    }

    /// Stores (or with `None` removes) the default for new subdirectories of `fid`.
    pub fn put_dir_default(
        &self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        fid: Fid,
        default: Option<&weft_proto::mdt::DirDefault>,
    ) -> Result<(), StoreError> {
        match default {
            Some(d) => {
                let v = store::encode(d)?;
                tx.dir_defaults
                    .insert(fid.to_bytes().as_slice(), v.as_slice())?;
            }
            None => {
                tx.dir_defaults.remove(fid.to_bytes().as_slice())?;
            }
        }
        fx.wrote = true;
        Ok(())
    }

    /// FIDs allocatable without asking the MGS (saturating).
    pub fn fids_left(&self) -> u64 {
        let in_cur = if self.meta.cur_seq == 0 {
            0
        } else {
            (self.seq_width + 1).saturating_sub(self.meta.next_oid)
        };
        let free: u64 = self.meta.free_seqs.iter().map(|r| r.len()).sum();
        in_cur.saturating_add(free.saturating_mul(self.seq_width))
    }

    /// Publishes counters after a commit.
    pub fn publish(&self) {
        if let Some(now) = &self.meta.released {
            let mut shown = self.counters.released.lock();
            if *shown != *now {
                shown.clone_from(now);
            }
        }
        self.counters.dirs.store(self.meta.dirs, Ordering::Relaxed);
        self.counters
            .files
            .store(self.meta.files, Ordering::Relaxed);
        self.counters
            .fids_left
            .store(self.fids_left(), Ordering::Relaxed);
    }
}

/// The keys in `[start, end)` (`end` `None`: to the end of the table).
pub(crate) fn collect_keys(
    table: &impl Readable,
    start: &[u8],
    end: Option<&[u8]>,
) -> Result<Vec<Vec<u8>>, StoreError> {
    let mut out = Vec::new();
    let iter = match end {
        Some(end) => table.range::<&[u8]>(start..end)?,
        None => table.range::<&[u8]>(start..)?,
    };
    for item in iter {
        let (k, _) = item?;
        out.push(k.value().to_vec());
    }
    Ok(out)
}
