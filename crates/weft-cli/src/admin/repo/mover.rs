//! The two calls into weft-repo's data mover that the verbs make: a repository's import
//! and an export of a path. They are kept here, and only here, so that the verbs do not
//! depend on where the library puts them.
//!
//! MERGE: weft-repo's `import` and `export` modules are written in parallel with these
//! verbs. Until they are on main, this module mirrors their types field for field and
//! its two functions answer "not available". At merge, replace everything below the
//! `use` lines with:
//!
//! ```ignore
//! pub use weft_repo::export::{ExportOptions, ExportProgress, export};
//! pub use weft_repo::import::{ImportOptions, ImportProgress, import};
//! ```
//!
//! (the call sites in `repo.rs` and `hsm.rs` use exactly these names and fields).

// MERGE: goes with the stand-ins below (their fields are read by the library, not here).
#![allow(dead_code)]

use std::sync::Arc;
use weft_client::Client;
use weft_proto::hsm::Repo;
use weft_repo::RepoError;

/// How to run an import (mirrors `weft_repo::import::ImportOptions`).
#[derive(Debug, Clone, Default)]
pub struct ImportOptions {
    /// The MGS task to report progress to.
    pub task: Option<u64>,
    /// Resume after this key (the task's checkpoint).
    pub resume_after: Option<String>,
    /// Objects handled at once.
    pub parallel: usize,
}

/// An import's counts (mirrors `weft_repo::import::ImportProgress`).
#[derive(Debug, Clone, Default)]
pub struct ImportProgress {
    /// Objects listed in the store.
    pub listed: u64,
    /// New files made.
    pub created: u64,
    /// Files released against a newer object.
    pub updated: u64,
    /// Files already naming their object.
    pub unchanged: u64,
    /// Names taken by something the import must not replace.
    pub conflicts: u64,
    /// Entries that failed.
    pub failed: u64,
    /// The last key fully handled.
    pub last_key: Option<String>,
}

/// How to run an export (mirrors `weft_repo::export::ExportOptions`).
#[derive(Debug, Clone, Default)]
pub struct ExportOptions {
    /// The MGS task to report progress to.
    pub task: Option<u64>,
    /// Files copied at once.
    pub parallel: usize,
}

/// An export's counts (mirrors `weft_repo::export::ExportProgress`).
#[derive(Debug, Clone, Default)]
pub struct ExportProgress {
    /// Files looked at.
    pub scanned: u64,
    /// Files written to the store.
    pub exported: u64,
    /// Bytes written to the store.
    pub bytes: u64,
    /// Files left alone (archived and current, NOARCHIVE, not regular).
    pub skipped: u64,
    /// Files that failed.
    pub failed: u64,
}

const NOT_YET: &str = "this build of weft has no data mover yet (weft-repo's import and export)";

/// MERGE: `weft_repo::import::import`.
pub async fn import(
    _client: &Arc<Client>,
    _repo: &Repo,
    _opts: &ImportOptions,
    _progress: &(dyn Fn(&ImportProgress) + Send + Sync),
) -> Result<ImportProgress, RepoError> {
    Err(RepoError::Spec(NOT_YET.into()))
}

/// MERGE: `weft_repo::export::export`.
pub async fn export(
    _client: &Arc<Client>,
    _repo: &Repo,
    _path: &str,
    _opts: &ExportOptions,
    _progress: &(dyn Fn(&ExportProgress) + Send + Sync),
) -> Result<ExportProgress, RepoError> {
    Err(RepoError::Spec(NOT_YET.into()))
}
