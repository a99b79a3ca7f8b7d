//! Data repositories: object stores linked to directories of a weftfs file system (FSx for
//! Lustre's data repository associations), and the work between the two.
//!
//! - [`store`]: opening a repository's store from its spec (`s3://`, `gs://`, `az://`,
//!   `file://`), with credentials from the process's environment, never from the spec.
//! - [`events`]: a bucket's event notifications (S3 → SQS), which the auto import follows.
//! - [`export`]: exporting new and changed files to the store, recorded archived.
//! - [`import`]: importing a repository's objects as released files (metadata only).
//! - [`meta`]: the POSIX metadata FSx for Lustre keeps on objects (`file-permissions`...).
//! - [`mover`]: the data mover, copying byte ranges of archived objects into files' OST
//!   objects for HSM restores (ranged GETs in parallel, entity tag checks, retries).
//! - [`tiering`]: releasing least recently used archived files when OSTs fill, and the
//!   gate that keeps restores under the high mark.
//!
//! Credentials and signed URLs never appear in errors, logs or metrics made here.

pub mod agent;
pub mod error;
pub mod events;
pub mod export;
pub mod import;
pub mod meta;
pub mod mover;
pub mod store;
mod task;
pub mod tiering;

pub use agent::{AgentConfig, AgentStats, RepoAgent};
pub use error::RepoError;
pub use mover::{Mover, MoverConfig, MoverRole, MoverStats};
pub use store::RepoStore;
