//! The mount's operations on plain values: what each kernel request does, with inode
//! numbers, handle numbers, credentials, offsets and byte buffers in and typed results
//! (an errno on failure, [`crate::errno::Failed`]) out. No fuser type appears here; the
//! adapter ([`crate::adapter`]) converts the kernel's requests and replies.
//!
//! [`Ops`] holds the state every request of one mount shares (the client, the inode and
//! handle tables, the per-process caches) and the helpers several operations use; the
//! operations themselves live in one module per concern:
//! - [`attrs`]: lookup, getattr, setattr, access, readlink, statfs;
//! - [`namespace`]: mknod, mkdir, unlink, rmdir, symlink, rename, link;
//! - [`files`]: open, create, release, fsync;
//! - [`data`]: read, write, flush, fallocate, lseek (and the answers given on the reading
//!   thread);
//! - [`dirs`]: opendir, readdir, readdirplus, releasedir, fsyncdir, over the directory
//!   streams of [`dir_stream`];
//! - [`xattrs`]: extended attributes;
//! - [`locks`]: `fcntl` and `flock` locks.
//!
//! Open files and directories are kept in the tables of [`handles`].

pub mod attrs;
pub mod data;
pub mod dir_stream;
pub mod dirs;
pub mod files;
pub mod handles;
pub mod locks;
pub mod namespace;
pub mod xattrs;

use crate::creds::CredCache;
use crate::errno::{Failed, FsResult};
use crate::inodes::InodeTable;
use crate::jobid::{DEFAULT_JOBID_NAME, DEFAULT_JOBID_VAR, JobIds};
use crate::kernel_cache::KernelCache;
use crate::locks::LockOwners;
use crate::nocaps::NoCaps;
use crate::options::MountOptions;
use crate::page_cache::PageCacheBound;
use dir_stream::DirStream;
use handles::{HandleIds, HandleTable, OpenFile};
use std::sync::Arc;
use weft_client::Client;
use weft_proto::Fid;
use weft_proto::mdt::{AccessMode, Attr, Credentials, FileKind};

/// A found or made inode, ready to hand to the kernel (a reference on it is taken).
#[derive(Debug, Clone)]
pub struct Entry {
    /// Its inode number.
    pub ino: u64,
    /// Its attributes as this mount shows them.
    pub attr: Attr,
}

/// State shared by every request of one mount, and the operations on it.
///
/// The requests an `Ops` sends go in the context of its client handle: the mount's `Ops`
/// sends the default one, and [`Ops::for_job`] gives the operations of one kernel request,
/// sharing every table, whose requests (and the files they open, and the background
/// write-back and read-ahead they start) carry the calling process's job id.
pub struct Ops {
    pub(crate) client: Arc<Client>,
    pub(crate) opts: Arc<MountOptions>,
    pub(crate) inodes: Arc<InodeTable>,
    creds: Arc<CredCache>,
    handle_ids: Arc<HandleIds>,
    files: Arc<HandleTable<OpenFile>>,
    dirs: Arc<HandleTable<DirStream>>,
    locks: Arc<LockOwners>,
    jobids: Arc<JobIds>,
    no_caps: Arc<NoCaps>,
    kernel: Arc<dyn KernelCache>,
    /// Keeps the kernel's pages of the mount's files under `llite.*.max_cached_mb` (none
    /// if its thread could not start).
    page_cache: Option<Arc<PageCacheBound>>,
}

/// Fails with ENAMETOOLONG for a name longer than a directory entry may be.
pub fn check_name(name: &[u8]) -> FsResult<()> {
    if name.len() > weft_proto::NAME_MAX {
        return Err(Failed::code(libc::ENAMETOOLONG));
    }
    Ok(())
}

/// The access mode of `open(2)` flags.
pub fn access_mode(flags: i32) -> AccessMode {
    match flags & libc::O_ACCMODE {
        libc::O_WRONLY => AccessMode::Write,
        libc::O_RDWR => AccessMode::ReadWrite,
        // O_RDONLY, and the impossible combination of both bits.
        _ => AccessMode::Read,
    }
}

impl Ops {
    /// The operations of a mount of `client` with `opts`; `kernel` reaches the kernel's
    /// caches.
    pub fn new(client: Arc<Client>, opts: MountOptions, kernel: Arc<dyn KernelCache>) -> Self {
        // Job ids: the mount option, else the file system's stored setting (`set_param -P
        // jobid_var=...`), else Lustre's defaults.
        let stored = client.cluster().config();
        let pick = |opt: &Option<String>, name: &str, default: &str| {
            opt.clone()
                .or_else(|| stored.params.get(name).cloned())
                .unwrap_or_else(|| default.to_string())
        };
        let jobids = JobIds::new(
            &pick(&opts.jobid_var, "jobid_var", DEFAULT_JOBID_VAR),
            &pick(&opts.jobid_name, "jobid_name", DEFAULT_JOBID_NAME),
        );
        let no_caps = NoCaps::new(opts.attr_timeout);
        let page_cache = if opts.direct_io {
            None
        } else {
            PageCacheBound::new(client.params().clone(), kernel.clone())
                .inspect_err(|e| {
                    tracing::warn!(error = %e, "no bound on the kernel's page cache of this mount")
                })
                .ok()
                .map(Arc::new)
        };
        Self {
            client,
            opts: Arc::new(opts),
            inodes: Arc::new(InodeTable::new()),
            creds: Arc::new(CredCache::new()),
            handle_ids: Arc::default(),
            files: Arc::default(),
            dirs: Arc::default(),
            locks: Arc::default(),
            jobids: Arc::new(jobids),
            no_caps: Arc::new(no_caps),
            kernel,
            page_cache,
        }
    }

    /// The operations of one request for job `jobid`: the same mount (tables, caches,
    /// client), with every request they send in a context carrying `jobid`.
    pub fn for_job(&self, jobid: Option<Arc<str>>) -> Arc<Self> {
        Arc::new(Self {
            client: self.client.for_job(jobid),
            opts: self.opts.clone(),
            inodes: self.inodes.clone(),
            creds: self.creds.clone(),
            handle_ids: self.handle_ids.clone(),
            files: self.files.clone(),
            dirs: self.dirs.clone(),
            locks: self.locks.clone(),
            jobids: self.jobids.clone(),
            no_caps: self.no_caps.clone(),
            kernel: self.kernel.clone(),
            page_cache: self.page_cache.clone(),
        })
    }

    /// The context the requests of these operations go in.
    pub fn context(&self) -> &weft_rpc::RequestContext {
        self.client.context()
    }

    /// The mount's options.
    pub fn opts(&self) -> &MountOptions {
        &self.opts
    }

    /// The credentials of process `pid` running as `uid`/`gid`.
    pub fn caller(&self, uid: u32, gid: u32, pid: u32) -> Credentials {
        self.creds.get(uid, gid, pid)
    }

    /// The job id of process `pid` running as `uid`/`gid`.
    pub fn jobid(&self, pid: u32, uid: u32, gid: u32) -> Option<Arc<str>> {
        self.jobids.get(pid, uid, gid)
    }

    /// The job id of the process that opened file handle `fh` (none for an unknown one).
    pub fn handle_jobid(&self, fh: u64) -> Option<Arc<str>> {
        self.files.jobid(fh)
    }

    /// The kernel now caches `len` bytes of `ino` from `offset`: a read answered or a write
    /// taken through its page cache (not one of a file opened with `O_DIRECT`, whose
    /// `open_flags` say so, nor any on a `-o direct_io` mount).
    pub fn kernel_cached(&self, ino: u64, offset: u64, len: u64, open_flags: i32) {
        if let Some(b) = &self.page_cache
            && open_flags & libc::O_DIRECT == 0
        {
            b.filled(ino, offset, len);
        }
    }

    /// The kernel forgot `n` references to `ino`.
    pub fn forget(&self, ino: u64, n: u64) {
        self.inodes.forget(ino, n);
    }

    /// The FID of inode `ino` (ESTALE if the kernel forgot it).
    fn fid(&self, ino: u64) -> FsResult<Fid> {
        self.inodes.fid(ino).ok_or(Failed::code(libc::ESTALE))
    }

    /// The open file `fh` (EBADF if it is not open).
    fn file(&self, fh: u64) -> FsResult<Arc<OpenFile>> {
        self.files.get(fh).ok_or(Failed::code(libc::EBADF))
    }

    /// The access a handle is opened with. In writeback-cache mode the kernel reads pages
    /// it partly writes, even through a write-only descriptor, so such handles read too.
    fn handle_access(&self, flags: i32) -> AccessMode {
        match access_mode(flags) {
            AccessMode::Write if self.opts.writeback_cache => AccessMode::ReadWrite,
            a => a,
        }
    }

    /// Attributes as this mount must show them: a file it has open for writing may hold
    /// written bytes not yet on the OSTs, which count in its size.
    async fn local_view(&self, ino: u64, mut attr: Attr) -> Attr {
        if attr.kind == FileKind::Regular && attr.open_count > 0 {
            for f in self.files.writers_of(ino) {
                attr.size = attr.size.max(f.file.size().await);
            }
        }
        attr
    }

    /// Takes a kernel reference on an inode found in directory `parent`.
    async fn entry(&self, attr: Attr, parent: Option<u64>) -> Entry {
        let ino = self.inodes.reference(attr.fid, parent);
        let attr = self.local_view(ino, attr).await;
        Entry { ino, attr }
    }

    /// Makes every write(2) made through another handle of `f`'s inode in this mount
    /// visible to `f`: bytes that handle still buffers go to the OSTs (the kernel's page
    /// cache hides them only while it keeps the pages). The end of the file those writes
    /// moved, the handles share already.
    async fn write_back_others(&self, f: &Arc<OpenFile>) {
        for w in self.files.writers_of(f.ino) {
            if !Arc::ptr_eq(&w, f) && w.take_wrote() {
                w.file.write_back_in(self.context()).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_longer_than_name_max_are_refused() {
        assert!(check_name(&[b'a'; weft_proto::NAME_MAX]).is_ok());
        assert_eq!(
            check_name(&[b'a'; weft_proto::NAME_MAX + 1]).map_err(Failed::errno),
            Err(libc::ENAMETOOLONG)
        );
    }

    #[test]
    fn open_flags_give_the_access_mode() {
        assert_eq!(access_mode(libc::O_RDONLY), AccessMode::Read);
        assert_eq!(
            access_mode(libc::O_WRONLY | libc::O_TRUNC),
            AccessMode::Write
        );
        assert_eq!(
            access_mode(libc::O_RDWR | libc::O_APPEND),
            AccessMode::ReadWrite
        );
        assert_eq!(access_mode(libc::O_ACCMODE), AccessMode::Read);
    }
}
