//! The weftfs metadata target (MDT): one shard of the namespace and everything that makes
//! it durable.
//!
//! # What this crate owns
//! Inodes, directory entries, symlink targets, extended attributes, file layouts and
//! directory default layouts, open handles, orphans (unlinked files still open) and the
//! destroy log (objects to remove from OSTs). It performs POSIX permission checks with the
//! caller's credentials and assigns layouts (OST choice) to new files. It does not own the
//! transport (`weft-rpc`), the cluster configuration (the MGS, seen through
//! [`ClusterView`]), file data (OSTs) or path resolution (clients resolve `.`, `..` and
//! symlinks, and apply the umask).
//!
//! # Store
//! One redb database, `mdt.redb`, in the target's data directory (see [`store`] for the
//! tables). Directory entries are keyed (parent FID, 63-bit xxh3 name hash, name), so a
//! directory lists in hash order by range scan, and a readdir cookie is the hash of the last
//! entry returned: stable while the entry exists and O(page) to resume, whatever the
//! directory's size. Pages never split a group of names with equal hashes. Every record
//! carries a version byte; the meta record carries the format version, the file system
//! name and the MDT index so a directory formatted for another target is refused.
//!
//! # Group commit
//! Reads (lookup, getattr, readdir, xattrs, readlink, getlayout, statfs) run in redb read
//! transactions, concurrently. Everything that changes state, plus opens and closes that do
//! (`O_TRUNC`, a size to record), is applied in a write transaction by the commit thread
//! (module `commit`), which takes every queued operation and applies them one after another
//! (each validates before it mutates, so a refused operation leaves nothing behind); a
//! change that finds nobody committing is applied the same way by the request itself.
//! Other opens and closes only change the in-memory handle table and are done on the
//! request path, ordered with unlinks by the table itself (module `fast`).
//!
//! # Durability
//! Changes that stay on this MDT are committed without an fsync and appended to the redo
//! log ([`redo`]) before they are answered; a durable commit empties the log. One is made
//! after 4,096 deferred commits or 16 MiB of log, every commit interval (1 s by default),
//! on a client's `Sync`, for any batch another server acts on (cross-MDT steps) and at
//! shutdown. Objects are destroyed on OSTs only once the unlink that freed them is durable. A process crash
//! loses nothing answered; a power failure at most the changes since the last durable
//! commit. Cross-MDT steps are durable before they are answered.

//! # FIDs
//! New FIDs come from sequences granted by the MGS ([`ClusterView::alloc_seq`]); the
//! current sequence, next object id and unused grants live in the meta record. When an
//! operation finds no FID left, the request path fetches a sequence, commits the grant and
//! retries the operation.
//!
//! # Open files, orphans and the destroy log
//! Handles live in memory, keyed by (connection, handle id). An inode whose last link goes
//! while it is open is recorded in the orphan table and stays reachable by FID until its
//! last close. When an inode with a layout is finally removed, a destroy-log record listing
//! its objects is written in the same transaction; a background task ([`destroy`]) asks the
//! OSTs to destroy them, retrying with backoff per OST, and deletes the record once every
//! object is confirmed gone. Records survive restarts. Handles die with the process:
//! after a restart clients open their files again by FID (open replay), and orphans that no
//! client has opened again when `handle_grace` has passed are destroyed.
//!
//! # Known deviations from Linux
//! No POSIX ACLs (`system.*` attributes are refused with EOPNOTSUPP); E2BIG is reported as
//! ERANGE (the wire errno set has no E2BIG); `fs.protected_hardlinks` is not enforced.
//!
//! # Several MDTs
//! Names whose inode lives on another MDT (remote directories, striped directories'
//! shards, files linked or renamed across MDTs) are made and removed through durable
//! intents finished after any crash: see `remote/` and ARCHITECTURE.md ("Several MDTs").
//! Directories moved to another parent run under the file system's rename lock
//! (`dir_moves.rs`); `weft migrate -m` freezes, copies and replaces a directory
//! (`migrate.rs`).
//!
//! # HSM (data repositories)
//! Files imported from a repository (`ImportEntries`) are *released*: attributes and size
//! real, HSM flags `EXISTS | ARCHIVED | RELEASED`, the object's [`weft_proto::hsm::ArchiveRef`]
//! in `trusted.weft.archive`. The MDT is the HSM coordinator: `HsmRestore` requests share
//! one restore job per file that loads it through [`ClusterView::restore_chunk`] and
//! clears RELEASED durably at the end. A data change marks an archived file DIRTY;
//! `HsmRelease` drops an archived file's objects. See [`hsm`].
//!
//! # Layouts after create
//! Components of a composite (PFL) layout beyond the first are left uninstantiated until a
//! client writes into their extent and sends `Instantiate`; `weft migrate` copies a file
//! into a volatile file and swaps the layouts (`layouts.rs`).

pub mod cluster;
mod commit;
pub mod destroy;
mod dir_moves;
mod drivers;
mod engine;
pub mod error;
pub mod failing_backend;
pub mod failpoints;
mod fast;
mod fsck;
mod handles;
pub mod hsm;
mod inode_v1;
mod layouts;
pub mod locks;
mod mdt;
pub mod memory;
mod migrate;
pub mod names;
mod namespace;
pub mod perm;
pub mod placement;
mod reads;
pub mod redo;
mod remote;
mod remote_links;
pub mod replies;
pub mod service;
pub mod stats;
pub mod store;

#[cfg(test)]
mod tests;

pub use cluster::{BoxFuture, ClusterView, OstInfo, PeerError};
pub use commit::Origin;
pub use destroy::DestroyConfig;
pub use error::{MdtError, StoreError};
pub use hsm::HsmConfig;
pub use locks::{LockLimits, LockStats, LockTable};
pub use mdt::{DB_FILE, HANDLE_GRACE, Mdt, MdtOptions, MdtStats, SEQ_WIDTH};
pub use memory::MemoryCluster;
pub use service::MdtHandler;
