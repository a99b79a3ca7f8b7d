//! The FUSE mount of weftfs: the kernel's requests turned into calls on the client library
//! ([`weft_client::Client`] and its [`weft_client::File`] handles).
//!
//! Two layers: [`adapter`] is the only code (with [`mount`], which starts the session)
//! that names fuser types; it converts each request to plain values, calls its operation
//! in [`ops`], and converts the result to the reply. [`ops`] works on inode numbers,
//! handle numbers, credentials, offsets and byte buffers, returns an errno on failure
//! ([`errno`]), and is unit-tested without a kernel.
//!
//! The crate owns what only a kernel mount needs, and nothing else:
//! - inode numbers for FIDs ([`inodes`]): the root is inode 1, every other FID flattens to a
//!   fixed number (the same on every mount), and the kernel's lookup counts are tracked
//!   until `forget`;
//! - open-file and open-directory handles ([`ops::handles`]); directory streams
//!   ([`ops::dir_stream`]) are offset by MDT cookies, with `.` and `..` added here (the MDT
//!   lists neither) at offsets 1 and 2;
//! - the caller's credentials per request: uid and gid from the kernel, supplementary
//!   groups from `/proc/<pid>/status` ([`creds`]); the umask is applied to create, mkdir and
//!   mknod modes (the kernel already does so without `FUSE_DONT_MASK`; applying it again is
//!   a no-op kept for the day that flag is asked for);
//! - one errno mapping ([`errno`]) and the attribute conversion ([`adapter::attr`]);
//! - the job id of the calling process for every request it causes ([`jobid`]).
//!
//! Concurrency: fuser reads kernel requests on several threads (`threads=N`) that take
//! turns at one polled `/dev/fuse` descriptor, the reader trying for the next request for
//! `poll_us` before it sleeps (the vendored fuser's `reader.rs`; `poll_us=0`: each thread
//! sleeps in `read(2)` on its own clone); a handler polls its work once on the reading
//! thread and, if it has to wait, hands it to a task on the client's tokio runtime and
//! returns, so requests are answered as the library finishes them, in any order (under
//! `weft up` most metadata requests finish in that first poll: their MDT is served
//! in-process). With FUSE over io_uring (`uring=auto|on`, the vendored fuser's `uring.rs`)
//! the requests come instead through one queue per CPU, each served the same way by a
//! thread pinned to its CPU (one `/dev/fuse` thread remains for FORGET and INTERRUPT).
//! These requests are answered on the reading thread when that needs no
//! waiting: a write that extends what its handle buffers (`File::try_write_buffered`: one
//! copy, no thread switch), a sequential read of pages read ahead (`File::try_read_cached`:
//! a slice of the cached page), a close with nothing to flush, the `security.capability`
//! lookup the kernel makes before every `write(2)` while its absence is remembered
//! ([`nocaps`]), a lookup of a name a statahead scan holds ([`weft_client::statahead`]),
//! and the attributes of a directory a create or unlink of this mount just changed
//! ([`weft_client::changes`]). The tables shared by the threads and tasks (inodes,
//! handles, caches) sit behind short `parking_lot` locks never held across an await; only
//! a directory stream's page is behind an async lock, held while its next page is fetched.
//!
//! Directories: an open directory ([`ops::dir_stream`]) keeps the last page fetched from
//! the MDT for the kernel's small readdir requests and fetches the next page ahead while
//! they take it.
//!
//! Caches: names and attributes are trusted for `entry_timeout`/`attr_timeout` (1 s by
//! default); statahead answers within the same bound of its reading, and not at all
//! without `default_permissions` (it skips the MDT's search-permission check). The kernel
//! page cache is kept across opens (`FOPEN_KEEP_CACHE`) only when the MDT's data version
//! still equals the one the pages were read at; a file this mount wrote is reread after
//! close. The pages the kernel holds of the mount's files stay under
//! `llite.*.max_cached_mb` ([`page_cache`]: the oldest filled are dropped). The kernel's
//! writeback cache is off unless `-o writeback_cache`:
//! it assumes one kernel sees every change. `-o direct_io` bypasses the page cache and lets
//! writers of disjoint ranges of one file run in parallel (`FOPEN_PARALLEL_DIRECT_WRITES`).
//!
//! Permissions: the MDT checks every operation with the caller's credentials. The mount also
//! asks the kernel for `default_permissions`, so that the kernel checks too, on its cached
//! attributes: that is what makes `access(2)`, `chdir` and path walks through cached
//! directories obey the mode bits (without it, the kernel checks nothing on a cached
//! dentry), and gives exactly the local errno (EACCES vs EPERM). A mount by root serves
//! every user (`allow_other`).
//!
//! Close-to-open: `flush` (every `close(2)` of a writable descriptor) writes buffered data
//! and records the size on the MDT ([`weft_client::File::flush`]), so a later open on any
//! mount sees it, and write errors reach `close`; making it durable on the OSTs is left
//! to `fsync`, as on a local file system. A truncate through one descriptor also cuts the
//! other writable handles of the inode in this mount, and an explicit time change first
//! records their writes, so that neither a later flush nor a close undoes it. Within the
//! mount every `write(2)` that returned is seen by every later read: a read first writes
//! back what the file's other handles buffered since.
//!
//! Locks: `fcntl` byte-range locks and `flock` are held on the MDT ([`locks`]), so that
//! every mount sees the same ones; a blocked `F_SETLKW` waits in a task, never a FUSE
//! thread, and a signal to the waiting process cancels it. `flock` travels as a POSIX
//! lock of its open file description (fuser hides the kernel's flag), so it conflicts
//! with `fcntl` locks of other owners on the same file, as on NFS.
//!
//! Not yet: fallocate grows the size but reserves no space (punching and zeroing ranges
//! work; collapsing, inserting and unsharing them are EOPNOTSUPP); `RENAME_WHITEOUT` is
//! EINVAL.

pub mod adapter;
pub mod creds;
pub mod errno;
pub mod inodes;
pub mod jobid;
pub mod kernel_cache;
pub mod locks;
pub mod mount;
pub mod nocaps;
pub mod ops;
pub mod options;
pub mod page_cache;

pub use adapter::WeftFs;
pub use fuser::{FuseTransport, TransportStats, UringMode};
pub use mount::{Mount, Unmounter, is_mounted, unmount};
pub use options::{MountOptions, parse_source};
