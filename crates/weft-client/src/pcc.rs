//! The persistent client cache (PCC, as Lustre's): whole files kept on a client's local
//! disk. One cache per client, added at run time ([`Client::pcc_add`]):
//! - read-only: a file opened for reading under the cache's [`Rule`] is copied whole into
//!   the local directory in the background (`copy.rs`, at most [`COPIES`] at a time);
//!   later opens read the local copy while the MDT's data version is still the one it was
//!   copied at (a write elsewhere changes it: the next open drops the copy); the copies'
//!   bytes are bounded, least recently used out;
//! - read-write: a file created under the rule is written to the local directory; after
//!   its last close here (or `detach`) it is copied into the file system in the
//!   background, then dropped locally. A file left there by a crash is copied at the next
//!   [`Client::pcc_add`] of the directory: what the application fsynced is not lost. The
//!   file's MDT records that the cache holds it until the copy is in the file system, and
//!   other clients' opens wait for that (`remote.rs`).
//!
//! The directory is its own index (`store.rs`); an open [`File`] reads and writes its
//! local copy through `local.rs`. Figures: [`Pcc::stats`].

mod copy;
pub mod local;
mod remote;
pub mod rules;
mod store;

use crate::client::Client;
use crate::error::ClientError;
use crate::file::File;
use local::{Kind, LocalCopy};
pub use rules::{Facts, Rule};
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use store::{RwState, Store};
use weft_proto::mdt::{AccessMode, Attr, Credentials};
use weft_proto::{Errno, Fid, WireError};

/// Copies (in or back) running at once.
pub const COPIES: usize = 4;

/// What a cache keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Read-only copies of files read under the rule.
    ReadOnly,
    /// Files created under the rule, written locally and copied in after close.
    ReadWrite,
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "ro" => Ok(Mode::ReadOnly),
            "rw" => Ok(Mode::ReadWrite),
            _ => Err(format!("bad PCC mode {s:?} (ro or rw)")),
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Mode::ReadOnly => "ro",
            Mode::ReadWrite => "rw",
        })
    }
}

/// How a cache is set up.
#[derive(Debug, Clone)]
pub struct PccConfig {
    /// The local directory.
    pub dir: PathBuf,
    /// What it keeps.
    pub mode: Mode,
    /// Which files.
    pub rule: Rule,
    /// Largest bytes of read-only copies.
    pub capacity: u64,
}

/// A counted figure.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Stat {
    Hits,
    Misses,
    CopyIns,
    CopyInBytes,
    CopyInErrors,
    Evictions,
    Detaches,
    ReadBytes,
    WriteBytes,
    CopyBacks,
    CopyBackBytes,
    CopyBackErrors,
}

const STAT_NAMES: [&str; 12] = [
    "hits",
    "misses",
    "copy_ins",
    "copy_in_bytes",
    "copy_in_errors",
    "evictions",
    "detaches",
    "read_bytes",
    "write_bytes",
    "copy_backs",
    "copy_back_bytes",
    "copy_back_errors",
];

/// Where a file stands in the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileState {
    /// Not in the cache.
    None,
    /// Being copied in (read-only).
    CopyingIn,
    /// A read-only copy of data version `version`, `size` bytes.
    ReadOnly {
        /// The data version copied.
        version: u64,
        /// Its bytes.
        size: u64,
    },
    /// Written locally, not yet copied into the file system.
    RwDirty,
    /// Being copied into the file system.
    RwCopying,
}

impl std::fmt::Display for FileState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FileState::None => f.write_str("none"),
            FileState::CopyingIn => f.write_str("copying-in"),
            FileState::ReadOnly { version, size } => {
                write!(f, "ro-attached data_version={version} size={size}")
            }
            FileState::RwDirty => f.write_str("rw-dirty"),
            FileState::RwCopying => f.write_str("rw-copying"),
        }
    }
}

/// A client's persistent cache.
pub struct Pcc {
    config: PccConfig,
    store: parking_lot::Mutex<Store>,
    copying_in: parking_lot::Mutex<HashSet<Fid>>,
    copies: Arc<tokio::sync::Semaphore>,
    /// Woken when a read-write file's copy-back ends.
    copied_back: tokio::sync::Notify,
    stats: [AtomicU64; STAT_NAMES.len()],
}

impl Pcc {
    /// The cache's set-up.
    pub fn config(&self) -> &PccConfig {
        &self.config
    }

    pub(crate) fn count(&self, s: Stat, n: u64) {
        self.stats[s as usize].fetch_add(n, Ordering::Relaxed);
    }

    /// Every figure by name: hits and misses (opens for reading that found a current
    /// copy, or not), copies in (files, bytes, failures), evictions (copies dropped for
    /// room), detaches (copies dropped as stale or on request), bytes read and written
    /// locally, copies back (files, bytes, failures).
    pub fn stats(&self) -> Vec<(&'static str, u64)> {
        STAT_NAMES
            .iter()
            .zip(&self.stats)
            .map(|(n, v)| (*n, v.load(Ordering::Relaxed)))
            .collect()
    }

    /// The set-up, usage and figures, as `name value` lines.
    pub fn summary(&self) -> String {
        let s = self.store.lock();
        let (ro, rw) = s.counts();
        let mut out = format!(
            "dir {}\nmode {}\nrule {}\ncapacity {}\nused {}\nro_files {}\nrw_files {}\n",
            s.dir().display(),
            self.config.mode,
            self.config.rule,
            s.capacity(),
            s.used(),
            ro,
            rw
        );
        drop(s);
        for (n, v) in self.stats() {
            out.push_str(&format!("{n} {v}\n"));
        }
        out
    }

    /// Where `fid` stands.
    pub fn state_of(&self, fid: Fid) -> FileState {
        let s = self.store.lock();
        if let Some(e) = s.rw_peek(fid) {
            return match e.state {
                RwState::Dirty => FileState::RwDirty,
                RwState::Copying => FileState::RwCopying,
            };
        }
        if let Some(e) = s.ro_peek(fid) {
            return FileState::ReadOnly {
                version: e.version,
                size: e.size,
            };
        }
        drop(s);
        if self.copying_in.lock().contains(&fid) {
            FileState::CopyingIn
        } else {
            FileState::None
        }
    }

    /// Removes files outside the index lock, counting them as `stat`.
    fn remove_files(&self, paths: Vec<PathBuf>, stat: Stat) {
        for p in paths {
            self.count(stat, 1);
            if let Err(e) = std::fs::remove_file(&p) {
                tracing::warn!(path = %p.display(), error = %e, "removing a PCC copy");
            }
        }
    }

    /// Drops the read-only copy of `fid`, if any.
    fn drop_ro(&self, fid: Fid) -> bool {
        let path = self.store.lock().ro_remove(fid);
        let found = path.is_some();
        self.remove_files(path.into_iter().collect(), Stat::Detaches);
        found
    }
}

fn refused(e: Errno, msg: impl Into<String>) -> ClientError {
    ClientError::Remote(WireError::new(e, msg))
}

impl Client {
    /// The client's persistent cache, if it has one.
    pub fn pcc(&self) -> Option<Arc<Pcc>> {
        self.pcc.read().clone()
    }

    /// Sets up the persistent cache `config` (one per client), resolving the rule's
    /// directories as root. Read-write files a crash left in the directory are copied
    /// into the file system in the background.
    pub async fn pcc_add(self: &Arc<Self>, mut config: PccConfig) -> Result<Arc<Pcc>, ClientError> {
        if self.pcc.read().is_some() {
            return Err(refused(Errno::Exist, "this client already has a PCC"));
        }
        for path in config.rule.paths() {
            let attr = self.resolve(&path, true, &Credentials::root()).await?;
            config.rule.resolve(&path, attr.fid);
        }
        let (dir, capacity) = (config.dir.clone(), config.capacity);
        let store = tokio::task::spawn_blocking(move || Store::open(&dir, capacity))
            .await
            .map_err(|e| ClientError::Invalid(format!("PCC open task: {e}")))?
            .map_err(|e| local::io_err(e, "directory"))?;
        let orphans = store.rw_orphans();
        let pcc = Arc::new(Pcc {
            config,
            store: parking_lot::Mutex::new(store),
            copying_in: Default::default(),
            copies: Arc::new(tokio::sync::Semaphore::new(COPIES)),
            copied_back: tokio::sync::Notify::new(),
            stats: Default::default(),
        });
        {
            let mut slot = self.pcc.write();
            if slot.is_some() {
                return Err(refused(Errno::Exist, "this client already has a PCC"));
            }
            *slot = Some(pcc.clone());
        }
        for fid in orphans {
            self.start_copy_back(&pcc, fid);
        }
        Ok(pcc)
    }

    /// Stops using the persistent cache (its directory stays as it is); false if there
    /// was none.
    pub fn pcc_del(&self) -> bool {
        self.pcc.write().take().is_some()
    }

    /// At every open: a read-write file of this cache is opened locally (waiting for a
    /// copy-back in progress to end first); a read-only copy is used if the MDT's data
    /// version is the copy's, else dropped; an open for writing drops it too.
    pub(crate) async fn pcc_on_open(
        self: &Arc<Self>,
        file: &File,
        opts: crate::OpenOptions,
    ) -> Result<(), ClientError> {
        let access = opts.access;
        let Some(pcc) = self.pcc() else { return Ok(()) };
        if file.attr_at_open().kind != weft_proto::mdt::FileKind::Regular {
            return Ok(());
        }
        let fid = file.fid();
        loop {
            let waiter = pcc.copied_back.notified();
            let mut waiter = std::pin::pin!(waiter);
            waiter.as_mut().enable();
            let path = {
                let mut s = pcc.store.lock();
                let path = s.rw_path(fid);
                match s.rw(fid) {
                    None => break,
                    Some(e) if e.state == RwState::Copying => None,
                    Some(e) => {
                        e.opens += 1;
                        Some(path)
                    }
                }
            };
            match path {
                None => waiter.await,
                Some(path) => {
                    let local = match LocalCopy::open(pcc.clone(), fid, Kind::ReadWrite, path) {
                        Ok(l) => l,
                        Err(e) => {
                            self.pcc_rw_closed(&pcc, fid);
                            return Err(e);
                        }
                    };
                    if opts.truncate && access != AccessMode::Read {
                        local.set_len(0)?;
                    }
                    file.attach_local(local)?;
                    return Ok(());
                }
            }
        }
        let version = file.attr_at_open().data_version;
        let current = {
            let mut s = pcc.store.lock();
            s.ro_use(fid)
                .map(|e| (e.version == version, s.ro_path(fid, &e)))
        };
        match current {
            Some((true, path)) if access == AccessMode::Read && !file.is_released() => {
                match LocalCopy::open(pcc.clone(), fid, Kind::ReadOnly, path) {
                    Ok(local) => {
                        file.attach_local(local)?;
                        pcc.count(Stat::Hits, 1);
                    }
                    Err(e) => {
                        tracing::warn!(%fid, error = %e, "PCC copy unreadable: dropped");
                        pcc.drop_ro(fid);
                        pcc.count(Stat::Misses, 1);
                    }
                }
            }
            Some(_) => {
                pcc.drop_ro(fid);
                if access == AccessMode::Read {
                    pcc.count(Stat::Misses, 1);
                }
            }
            None if access == AccessMode::Read => pcc.count(Stat::Misses, 1),
            None => {}
        }
        Ok(())
    }

    /// After an open for reading that did not find a current copy: starts copying the
    /// file in if a read-only cache's rule takes it (`facts` as the mount knows them).
    pub fn pcc_consider(self: &Arc<Self>, file: &File, facts: &Facts<'_>) {
        let Some(pcc) = self.pcc() else { return };
        if pcc.config.mode != Mode::ReadOnly
            || file.pcc_attached()
            || !pcc.config.rule.matches(facts)
        {
            return;
        }
        self.start_copy_in(&pcc, file.fid());
    }

    /// After a create: a read-write cache whose rule takes the file (`facts`, without
    /// size) makes it locally and attaches `file` to it.
    pub async fn pcc_on_create(
        self: &Arc<Self>,
        file: &File,
        facts: &Facts<'_>,
    ) -> Result<(), ClientError> {
        let Some(pcc) = self.pcc() else { return Ok(()) };
        if pcc.config.mode != Mode::ReadWrite || !file.created() || !pcc.config.rule.matches(facts)
        {
            return Ok(());
        }
        let fid = file.fid();
        let path = pcc.store.lock().rw_path(fid);
        let made = path.clone();
        tokio::task::spawn_blocking(move || {
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .open(&made)?;
            // The name is durable at once: a crash after the application's fsync finds it.
            made.parent().map_or(Ok(()), weft_durable::sync_dir)
        })
        .await
        .map_err(|e| ClientError::Invalid(format!("PCC create task: {e}")))?
        .map_err(|e| local::io_err(e, "create"))?;
        pcc.store.lock().rw_insert(fid);
        if let Err(e) = self.pcc_rw_attach(&pcc, fid).await {
            // Not recorded on the MDT, so other clients would not wait for it: the file
            // is written to the file system as usual.
            tracing::warn!(%fid, error = %e, "PCC attach refused: the file is not cached");
            pcc.store.lock().rw_remove(fid);
            let _ = std::fs::remove_file(&path);
            return Ok(());
        }
        match LocalCopy::open(pcc.clone(), fid, Kind::ReadWrite, path) {
            Ok(local) => file.attach_local(local),
            Err(e) => {
                self.pcc_rw_closed(&pcc, fid);
                Err(e)
            }
        }
    }

    /// A handle of read-write file `fid` closed: after the last, the copy-back starts.
    pub(crate) fn pcc_rw_closed(self: &Arc<Self>, pcc: &Arc<Pcc>, fid: Fid) {
        let last = match pcc.store.lock().rw(fid) {
            Some(e) => {
                e.opens = e.opens.saturating_sub(1);
                e.opens == 0 && e.state == RwState::Dirty
            }
            None => false,
        };
        if last {
            self.start_copy_back(pcc, fid);
        }
    }

    /// Where `fid` stands in the cache.
    pub fn pcc_state(&self, fid: Fid) -> Option<FileState> {
        self.pcc().map(|p| p.state_of(fid))
    }

    /// Copies `fid` into a read-only cache now, whatever the rule says (in the
    /// background; [`pcc_state`](Self::pcc_state) tells when it is there).
    pub fn pcc_attach(self: &Arc<Self>, fid: Fid) -> Result<(), ClientError> {
        let pcc = self
            .pcc()
            .ok_or_else(|| refused(Errno::NoEnt, "no PCC on this client"))?;
        if pcc.config.mode != Mode::ReadOnly {
            return Err(refused(
                Errno::NotSup,
                "only files created under the rule go into a read-write PCC",
            ));
        }
        self.start_copy_in(&pcc, fid);
        Ok(())
    }

    /// Detaches `fid`: drops its read-only copy, or starts copying a read-write file
    /// back into the file system (EBUSY while a handle of it is open here).
    pub fn pcc_detach(self: &Arc<Self>, fid: Fid) -> Result<FileState, ClientError> {
        let pcc = self
            .pcc()
            .ok_or_else(|| refused(Errno::NoEnt, "no PCC on this client"))?;
        pcc.drop_ro(fid);
        let rw = pcc.store.lock().rw_peek(fid);
        if let Some(e) = rw {
            if e.opens > 0 {
                return Err(refused(Errno::Busy, "the file is open on this client"));
            }
            if e.state == RwState::Dirty {
                self.start_copy_back(&pcc, fid);
            }
        }
        Ok(pcc.state_of(fid))
    }
}

/// A FID of a granted sequence, for the unit tests.
#[cfg(test)]
pub(crate) fn test_fid(oid: u32) -> Fid {
    Fid {
        seq: 0x2_0000_0400,
        oid,
        ver: 0,
    }
}

/// What a rule is matched against, from attributes and the directories the file is in.
pub fn facts<'a>(attr: &Attr, ancestors: &'a [Fid], creating: bool) -> Facts<'a> {
    Facts {
        size: (!creating).then_some(attr.size),
        uid: attr.uid,
        gid: attr.gid,
        ancestors,
    }
}
