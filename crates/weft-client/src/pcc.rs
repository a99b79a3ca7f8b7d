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
mod ops;
mod remote;
pub mod rules;
mod store;

use crate::error::ClientError;
pub use rules::{Facts, Rule};
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use store::{RwState, Store};
use weft_proto::mdt::Attr;
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
