//! What the file-system store adds for compressed objects (`compressed.rs`): the policy
//! deciding whether new objects are compressed (`obdfilter.*.compress`), the per-object
//! locks that serialise their read-modify-write of chunks, and the count of their logical
//! and stored bytes (for `weft df` and `compress_ratio`), taken by a scan at open and kept
//! up to date by every change.

use super::compressed::{self, Compressed, LZ4_XATTR, Meta};
use super::{FsStore, on};
use crate::object::{OBJECTS_DIR, object_hash};
use crate::store::{StoreError, StoreResult};
use parking_lot::{RwLock, RwLockWriteGuard};
use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

/// What [`FsStore::update`] does when the object is missing.
#[derive(Debug, Clone, Copy)]
pub(super) enum Missing {
    /// Fails with not found.
    Fail,
    /// Creates it, compressed when `compress` says so (`None`: as the store's setting
    /// says).
    Create {
        /// The request's choice.
        compress: Option<bool>,
    },
}

/// The compression state of a file-system store.
pub(super) struct Lz4State {
    /// Whether objects created from now on are compressed.
    pub(super) enabled: AtomicBool,
    /// Serialises changes of one compressed object against each other and its reads;
    /// striped by object hash. Plain objects take it shared.
    locks: Box<[RwLock<()>]>,
    /// Logical bytes of every compressed object.
    pub(super) logical: AtomicI64,
    /// Bytes allocated to every compressed object.
    pub(super) stored: AtomicI64,
}

/// The attribute of the compressed object at `path` (`None`: not compressed, or an
/// attribute that is not one).
pub(super) fn meta_at(path: &Path) -> io::Result<Option<Meta>> {
    let mut buf = [0u8; 16];
    match rustix::fs::getxattr(path, LZ4_XATTR, &mut buf) {
        Ok(n) => Ok(Meta::parse(&buf[..n]).ok()),
        Err(rustix::io::Errno::NODATA | rustix::io::Errno::RANGE) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

impl Lz4State {
    /// The state of the data directory `dir`: compression off, usage counted by reading
    /// every object's attributes (one `getxattr` per object).
    pub(super) fn scan(dir: &Path) -> io::Result<Self> {
        let (mut logical, mut stored) = (0i64, 0i64);
        for sub in std::fs::read_dir(dir.join(OBJECTS_DIR))? {
            let sub = sub?;
            if !sub.file_type()?.is_dir() {
                continue;
            }
            for entry in std::fs::read_dir(sub.path())? {
                let path = entry?.path();
                if let Some(m) = meta_at(&path)? {
                    logical += m.size as i64;
                    stored += m.stored as i64;
                }
            }
        }
        Ok(Self {
            enabled: AtomicBool::new(false),
            locks: (0..256).map(|_| RwLock::new(())).collect(),
            logical: AtomicI64::new(logical),
            stored: AtomicI64::new(stored),
        })
    }

    fn lock(&self, id: &weft_proto::ObjectId) -> &RwLock<()> {
        &self.locks[(object_hash(id) & 0xff) as usize]
    }
}

impl FsStore {
    /// Runs a change of the compressed object described by `m` (its lock held
    /// exclusively by the caller), counting what it does to the usage figures.
    fn change_compressed(
        &self,
        file: &File,
        m: Meta,
        f: impl FnOnce(&mut Compressed<'_>) -> io::Result<()>,
    ) -> io::Result<()> {
        let mut obj = Compressed::new(file, m)?;
        let result = f(&mut obj);
        let delta = |after: u64, before: u64| after as i64 - before as i64;
        self.lz4
            .logical
            .fetch_add(delta(obj.size, m.size), Ordering::Relaxed);
        self.lz4
            .stored
            .fetch_add(delta(obj.stored, m.stored), Ordering::Relaxed);
        result
    }

    /// Changes the object (`op` names the change in errors): `plain` on an uncompressed
    /// one, `packed` on a compressed one under its exclusive lock. A missing object is
    /// created or not as `missing` says; returns whether it was created.
    pub(super) fn update(
        &self,
        id: &weft_proto::ObjectId,
        missing: Missing,
        op: &str,
        plain: impl FnOnce(&File) -> io::Result<()>,
        packed: impl FnOnce(&mut Compressed<'_>) -> io::Result<()>,
    ) -> StoreResult<bool> {
        let lock = self.lz4.lock(id);
        let err = |e| StoreError::io(on(op, id), e);
        let compress_new = match missing {
            Missing::Fail => false,
            Missing::Create { compress } => {
                compress.unwrap_or_else(|| self.lz4.enabled.load(Ordering::Relaxed))
            }
        };
        let (guard, file, created) = if compress_new {
            // Created and marked under the exclusive lock: no one writes plain bytes into
            // an object about to be compressed.
            let guard = lock.write();
            let (file, created) = self.open_or_create(id)?;
            if created {
                compressed::set_meta(&file, Meta::default())
                    .map_err(|e| StoreError::io(on("mark compressed", id), e))?;
            }
            (guard, file, created)
        } else {
            let shared = lock.read();
            let (file, created) = if matches!(missing, Missing::Create { .. }) {
                self.open_or_create(id)?
            } else {
                (self.existing(id)?, false)
            };
            if compressed::meta(&file).map_err(err)?.is_none() {
                plain(&file).map_err(err)?;
                return Ok(created);
            }
            drop(shared);
            (lock.write(), file, created)
        };
        match compressed::meta(&file).map_err(err)? {
            Some(m) => self.change_compressed(&file, m, packed).map_err(err)?,
            None => {
                // A plain object created before compression was on: shared is enough.
                let _shared = RwLockWriteGuard::downgrade(guard);
                plain(&file).map_err(err)?;
            }
        }
        Ok(created)
    }

    /// Runs `f` on the compressed object in `file` under its shared lock, or returns
    /// `None` when the object is not compressed.
    pub(super) fn read_compressed<T>(
        &self,
        id: &weft_proto::ObjectId,
        file: &File,
        f: impl FnOnce(&Compressed<'_>) -> io::Result<T>,
    ) -> io::Result<Option<T>> {
        let _shared = self.lz4.lock(id).read();
        match compressed::meta(file)? {
            Some(m) => f(&Compressed::new(file, m)?).map(Some),
            None => Ok(None),
        }
    }

    /// Takes a compressed object out of the usage figures before it is removed.
    pub(super) fn forget_compressed(&self, file: &File) -> io::Result<()> {
        if let Some(m) = compressed::meta(file)? {
            self.lz4.logical.fetch_sub(m.size as i64, Ordering::Relaxed);
            self.lz4
                .stored
                .fetch_sub(m.stored as i64, Ordering::Relaxed);
        }
        Ok(())
    }
}
