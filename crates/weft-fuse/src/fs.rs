//! The kernel's requests, translated into client-library calls.
//!
//! Every handler takes what it needs from the request (inode numbers resolved to FIDs,
//! the caller's credentials, copied names and data) and polls the work once on the reading
//! thread: what finishes without waiting is answered there, and what has to wait (an MDT
//! or OST round trip over the network, a large read) goes on as a task on the client's
//! tokio runtime, so many requests are in flight together and a slow one never holds up
//! the others. The task replies when the library answers. Other requests answered on the
//! reading thread without the library are listed in the crate docs.

use crate::attr::{file_attr, file_type, timestamp};
use crate::creds::CredCache;
use crate::errno::{Failed, FsResult};
use crate::inodes::InodeTable;
use crate::options::MountOptions;
use fuser::{
    AccessFlags, FileHandle, Filesystem, FopenFlags, Generation, INodeNo, InitFlags, KernelConfig,
    LockOwner, OpenAccMode, OpenFlags, RenameFlags as KRenameFlags, ReplyAttr, ReplyCreate,
    ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyLock, ReplyLseek,
    ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::future::Future;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use weft_client::{Client, File, OpenOptions};
use weft_proto::Fid;
use weft_proto::mdt::{
    AccessMode, Attr, Credentials, DirEntry, FileKind, FileLock, LockKind, RenameFlags, SetAttr,
    TimeSet, XattrMode,
};

/// Largest write the kernel sends (it caps FUSE requests at 256 pages by default).
pub const MAX_WRITE: u32 = 1 << 20;
/// Directory entries fetched from the MDT per readdir round trip, with attributes (each
/// costs the MDT an inode read: ~1.1 ms for 1024 on this VM) or without (~0.17 ms). The
/// kernel takes about 1,000 plain entries per READDIR (32 KiB): pages of 4096 made it
/// wait longer for the first of them than pages of 1024 fetched one after the other.
const DIR_PAGE: u32 = 1024;
/// Entries of the first page of a listing the kernel asks for with attributes. The
/// kernel makes a dentry and an inode of every entry of a READDIRPLUS (~4 µs each here)
/// and asks without attributes after the first buffer, unless something looks names up
/// meanwhile (`ls -l`): a short first reply lets a plain listing (`scandir`, `find`)
/// pay for attributes it does not read on a few entries only.
const FIRST_PLUS_PAGE: u32 = 64;
/// Offsets of `.` and `..` in a directory stream; MDT cookies start above them.
const DOT_OFFSET: u64 = 1;
const DOTDOT_OFFSET: u64 = 2;

/// An open file of the mount.
struct OpenFile {
    ino: u64,
    file: File,
    writable: bool,
    /// Set when a write through this handle returns: the handle may hold bytes that
    /// reads through the file's other handles must see (cleared when they are written
    /// back for such a read).
    wrote: AtomicBool,
    /// The job id of the process that opened the file: FLUSH and RELEASE are counted for
    /// it, as the data they write back is that job's.
    jobid: Option<Arc<str>>,
}

/// An open directory: the last page fetched from the MDT, so that the kernel's small
/// readdir requests do not each cost a round trip, and the pages after it, fetched ahead
/// while the kernel takes this one.
struct OpenDir {
    fid: Fid,
    ino: u64,
    page: tokio::sync::Mutex<DirPage>,
}

#[derive(Default)]
struct DirPage {
    /// The cookie the page was fetched after (`None` before the first fetch).
    after: Option<u64>,
    /// Whether the entries carry attributes (fetched for a readdirplus).
    plus: bool,
    entries: Arc<Vec<DirEntry>>,
    eof: bool,
    ahead: Option<PagesAhead>,
}

/// A page of a directory as the MDT returned it: entries and whether it is the last.
type FetchedPage = Result<(Vec<DirEntry>, bool), weft_client::ClientError>;

/// Pages after `after` being fetched one after the other by a task, each as soon as the
/// one before it arrived, [`PAGES_AHEAD`] at most waiting: the kernel takes a page in
/// about the time the MDT needs for the next, so fetching only when it asks left it
/// waiting for every page. Aborted if the directory is closed or read elsewhere first.
struct PagesAhead {
    /// The cookie the next page received starts after.
    after: u64,
    plus: bool,
    pages: tokio::sync::mpsc::Receiver<FetchedPage>,
    task: tokio::task::JoinHandle<()>,
}

/// Pages fetched ahead and not yet taken, besides the one being fetched.
const PAGES_AHEAD: usize = 1;

impl PagesAhead {
    fn start(client: Arc<Client>, fid: Fid, after: u64, plus: bool, cred: Credentials) -> Self {
        let (tx, pages) = tokio::sync::mpsc::channel(PAGES_AHEAD);
        let task = tokio::spawn(async move {
            let mut next = after;
            loop {
                let page = client.readdir(fid, next, DIR_PAGE, plus, &cred).await;
                let more = match &page {
                    Ok((entries, false)) => entries.last().map(|e| e.cookie),
                    _ => None,
                };
                if tx.send(page).await.is_err() {
                    return;
                }
                match more {
                    Some(cookie) => next = cookie,
                    None => return,
                }
            }
        });
        Self {
            after,
            plus,
            pages,
            task,
        }
    }

    /// The next page, if it is the one after `after` and has what the request needs.
    async fn take(&mut self, after: u64, plus: bool) -> Option<(Vec<DirEntry>, bool)> {
        if self.after != after || (plus && !self.plus) {
            return None;
        }
        // A failed fetch is made again, so its error is this request's own.
        let (entries, eof) = self.pages.recv().await?.ok()?;
        self.after = entries.last().map_or(after, |e| e.cookie);
        Some((entries, eof))
    }
}

impl Drop for PagesAhead {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// State shared by every request of one mount.
struct Shared {
    client: Arc<Client>,
    opts: MountOptions,
    inodes: InodeTable,
    creds: CredCache,
    next_fh: AtomicU64,
    files: Mutex<HashMap<u64, Arc<OpenFile>>>,
    dirs: Mutex<HashMap<u64, Arc<OpenDir>>>,
    locks: crate::locks::LockOwners,
    jobids: crate::jobid::JobIds,
    no_caps: crate::nocaps::NoCaps,
    /// Tells the kernel to forget cached attributes; set once the session exists.
    notifier: Arc<OnceLock<fuser::Notifier>>,
}

/// The weftfs FUSE file system: give it to a fuser session.
pub struct WeftFs {
    shared: Arc<Shared>,
    rt: tokio::runtime::Handle,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn check_name(name: &[u8]) -> FsResult<()> {
    if name.len() > weft_proto::NAME_MAX {
        return Err(Failed::code(libc::ENAMETOOLONG));
    }
    Ok(())
}

fn access_mode(flags: i32) -> AccessMode {
    match OpenFlags(flags).acc_mode() {
        OpenAccMode::O_RDONLY => AccessMode::Read,
        OpenAccMode::O_WRONLY => AccessMode::Write,
        OpenAccMode::O_RDWR => AccessMode::ReadWrite,
    }
}

fn time_set(t: TimeOrNow) -> TimeSet {
    match t {
        TimeOrNow::Now => TimeSet::Now,
        TimeOrNow::SpecificTime(t) => TimeSet::At(timestamp(t)),
    }
}

impl WeftFs {
    /// A file system over `client`, running its work on `rt`.
    pub fn new(client: Arc<Client>, opts: MountOptions, rt: tokio::runtime::Handle) -> Self {
        // Job ids: the mount option, else the file system's stored setting (`set_param -P
        // jobid_var=...`), else Lustre's defaults.
        let stored = client.cluster().config();
        let pick = |opt: &Option<String>, name: &str, default: &str| {
            opt.clone()
                .or_else(|| stored.params.get(name).cloned())
                .unwrap_or_else(|| default.to_string())
        };
        let jobids = crate::jobid::JobIds::new(
            &pick(
                &opts.jobid_var,
                "jobid_var",
                crate::jobid::DEFAULT_JOBID_VAR,
            ),
            &pick(
                &opts.jobid_name,
                "jobid_name",
                crate::jobid::DEFAULT_JOBID_NAME,
            ),
        );
        let attr_timeout = opts.attr_timeout;
        Self {
            shared: Arc::new(Shared {
                client,
                opts,
                inodes: InodeTable::new(),
                creds: CredCache::new(),
                next_fh: AtomicU64::new(1),
                files: Mutex::new(HashMap::new()),
                dirs: Mutex::new(HashMap::new()),
                locks: crate::locks::LockOwners::default(),
                jobids,
                no_caps: crate::nocaps::NoCaps::new(attr_timeout),
                notifier: Arc::new(OnceLock::new()),
            }),
            rt,
        }
    }

    /// Where the mount puts the session's notifier once the session exists (the file
    /// system is made first, then handed to the session).
    pub fn notifier_slot(&self) -> Arc<OnceLock<fuser::Notifier>> {
        self.shared.notifier.clone()
    }

    fn cred(&self, req: &Request) -> Credentials {
        self.shared.creds.get(req.uid(), req.gid(), req.pid())
    }

    /// Runs `work` (on this thread until it first waits, then on the runtime); `done`
    /// replies with its result.
    ///
    /// Every request the work sends carries the job id of the calling process.
    fn spawn<T, F, R, D>(
        &self,
        req: &Request,
        work: impl FnOnce(Arc<Shared>) -> F,
        reply: R,
        done: D,
    ) where
        F: Future<Output = FsResult<T>> + Send + 'static,
        T: Send + 'static,
        R: ErrorReply + Send + 'static,
        D: FnOnce(R, T, &Shared) + Send + 'static,
    {
        let jobid = self.shared.jobids.get(req.pid(), req.uid(), req.gid());
        self.spawn_as(jobid, work, reply, done);
    }

    /// [`WeftFs::spawn`] with a given job id, for requests whose caller must not be looked
    /// at: FLUSH comes from a process in `execve` closing its close-on-exec descriptors,
    /// and reading that process's environment would wait for the exec, which waits for
    /// this FLUSH.
    fn spawn_as<T, F, R, D>(
        &self,
        jobid: Option<Arc<str>>,
        work: impl FnOnce(Arc<Shared>) -> F,
        reply: R,
        done: D,
    ) where
        F: Future<Output = FsResult<T>> + Send + 'static,
        T: Send + 'static,
        R: ErrorReply + Send + 'static,
        D: FnOnce(R, T, &Shared) + Send + 'static,
    {
        let shared = self.shared.clone();
        let fut = work(shared.clone());
        self.run_here_first(weft_rpc::jobid::with_jobid(jobid, async move {
            match fut.await {
                Ok(v) => done(reply, v, &shared),
                Err(Failed(e)) => reply.fail(e),
            }
        }));
    }

    /// Runs `task` on this thread until it first has to wait, then as a runtime task.
    ///
    /// Most requests finish without waiting (cached answers, directory pages fetched ahead,
    /// and the MDT of `weft up` served in-process): one poll here answers them on the
    /// thread that read them, without waking a runtime worker and handing the reply back.
    /// A request that has to wait goes on as a task; its first poll there registers the
    /// real waker, so no wake-up is lost to the placeholder one.
    fn run_here_first(&self, task: impl Future<Output = ()> + Send + 'static) {
        let mut task = Box::pin(task);
        let _runtime = self.rt.enter();
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        if task.as_mut().poll(&mut cx).is_pending() {
            self.rt.spawn(task);
        }
    }
}

/// Replies that can carry an error.
trait ErrorReply {
    fn fail(self, e: fuser::Errno);
}

macro_rules! error_reply {
    ($($t:ty),*) => {$(
        impl ErrorReply for $t {
            fn fail(self, e: fuser::Errno) {
                self.error(e)
            }
        }
    )*};
}
error_reply!(
    ReplyEntry,
    ReplyAttr,
    ReplyData,
    ReplyEmpty,
    ReplyOpen,
    ReplyWrite,
    ReplyStatfs,
    ReplyCreate,
    ReplyXattr,
    ReplyDirectory,
    ReplyDirectoryPlus,
    ReplyLock,
    ReplyLseek
);

/// A found or made inode, ready to hand to the kernel.
struct Entry {
    ino: u64,
    attr: Attr,
}

impl Shared {
    /// The access a handle is opened with. In writeback-cache mode the kernel reads pages
    /// it partly writes, even through a write-only descriptor, so such handles read too.
    fn handle_access(&self, flags: i32) -> AccessMode {
        match access_mode(flags) {
            AccessMode::Write if self.opts.writeback_cache => AccessMode::ReadWrite,
            a => a,
        }
    }

    fn fid(&self, ino: INodeNo) -> FsResult<Fid> {
        self.inodes.fid(ino.0).ok_or(Failed::code(libc::ESTALE))
    }

    /// The job id of the process that opened `fh` (none for an unknown handle).
    fn handle_jobid(&self, fh: FileHandle) -> Option<Arc<str>> {
        lock(&self.files).get(&fh.0).and_then(|f| f.jobid.clone())
    }

    fn file(&self, fh: FileHandle) -> FsResult<Arc<OpenFile>> {
        lock(&self.files)
            .get(&fh.0)
            .cloned()
            .ok_or(Failed::code(libc::EBADF))
    }

    /// Whether another handle of `f`'s inode in this mount wrote since its bytes were last
    /// written back (a read must then go the slow way, which writes them back first).
    fn others_wrote(&self, f: &Arc<OpenFile>) -> bool {
        lock(&self.files).values().any(|w| {
            w.ino == f.ino && w.writable && !Arc::ptr_eq(w, f) && w.wrote.load(Ordering::Acquire)
        })
    }

    fn writers_of(&self, ino: u64) -> Vec<Arc<OpenFile>> {
        let mut handles = self.handles_of(ino);
        handles.retain(|f| f.writable);
        handles
    }

    /// Every handle of `ino` open in this mount, read-only ones included.
    fn handles_of(&self, ino: u64) -> Vec<Arc<OpenFile>> {
        lock(&self.files)
            .values()
            .filter(|f| f.ino == ino)
            .cloned()
            .collect()
    }

    /// Makes every write(2) made through another handle of `f`'s inode in this mount
    /// visible to `f`: bytes that handle still buffers go to the OSTs (the kernel's page
    /// cache hides them only while it keeps the pages). The end of the file those writes
    /// moved, the handles share already.
    async fn write_back_others(&self, f: &Arc<OpenFile>) {
        for w in self.writers_of(f.ino) {
            if !Arc::ptr_eq(&w, f) && w.wrote.swap(false, Ordering::AcqRel) {
                w.file.write_back().await;
            }
        }
    }

    /// Attributes as this mount must show them: a file it has open for writing may hold
    /// written bytes not yet on the OSTs, which count in its size.
    async fn local_view(&self, ino: u64, mut attr: Attr) -> Attr {
        if attr.kind == FileKind::Regular && attr.open_count > 0 {
            for f in self.writers_of(ino) {
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

    fn reply_entry(&self, reply: ReplyEntry, e: Entry) {
        reply.entry_with_ttls(
            &self.opts.attr_timeout,
            &self.opts.entry_timeout,
            &file_attr(e.ino, &e.attr),
            Generation(0),
        );
    }

    /// How long a statahead entry may be used: what the kernel would cache a lookup for.
    /// Zero (statahead off) without `default_permissions`, since an answer from statahead
    /// skips the MDT's search-permission check, which the kernel then makes instead.
    fn statahead_age(&self) -> Duration {
        if self.opts.default_permissions {
            self.opts.entry_timeout.min(self.opts.attr_timeout)
        } else {
            Duration::ZERO
        }
    }

    /// `name` in `parent` from a statahead scan. What comes from there never needs
    /// [`Shared::local_view`]'s adjustment: a scan keeps no open regular file, and this
    /// mount opening one (which it must do before writing) voids its entry.
    fn looked_ahead(&self, parent: u64, name: &[u8]) -> Option<Attr> {
        let age = self.statahead_age();
        if age.is_zero() {
            return None;
        }
        let pfid = self.inodes.fid(parent)?;
        self.client.lookup_ahead(pfid, name, age)
    }

    /// Counts a lookup in `parent` that went to the MDT toward a statahead scan.
    fn note_lookup(&self, parent: u64, cred: &Credentials) {
        let age = self.statahead_age();
        if let (false, Some(pfid)) = (age.is_zero(), self.inodes.fid(parent)) {
            self.client.note_lookup(pfid, cred, age);
        }
    }

    /// Directory `ino`'s attributes as a create or unlink this mount just made in it left
    /// them (see [`weft_client::changes`]): the kernel drops a directory's attributes
    /// after every change in it and asks again at the next path walk.
    fn changed_dir(&self, ino: u64) -> Option<Attr> {
        let ttl = self.opts.attr_timeout;
        if ttl.is_zero() {
            return None;
        }
        let fid = self.inodes.fid(ino)?;
        let changes = self.client.cluster().changes();
        changes
            .take_dir(fid, ttl)
            .filter(|a| a.kind == FileKind::Directory)
    }

    async fn getattr(&self, ino: u64, fid: Fid) -> FsResult<Attr> {
        let attr = self.client.getattr(fid).await?;
        Ok(self.local_view(ino, attr).await)
    }

    async fn lookup(&self, parent: u64, name: &[u8], cred: &Credentials) -> FsResult<Entry> {
        check_name(name)?;
        let pfid = self.inodes.fid(parent).ok_or(Failed::code(libc::ESTALE))?;
        // The MDT resolves names only; `.` and `..` are the client's.
        let attr = match name {
            b"." => self.client.getattr(pfid).await?,
            b".." => {
                let up = self
                    .inodes
                    .parent(parent)
                    .and_then(|p| self.inodes.fid(p))
                    .ok_or(Failed::code(libc::ENOENT))?;
                self.client.getattr(up).await?
            }
            _ => self.client.lookup(pfid, name, cred).await?,
        };
        Ok(self.entry(attr, Some(parent)).await)
    }

    async fn setattr(
        &self,
        ino: u64,
        fid: Fid,
        mut set: SetAttr,
        fh: Option<FileHandle>,
        cred: Credentials,
    ) -> FsResult<Attr> {
        let mut cred = cred;
        if let (Some(mode), true) = (set.mode, cred.uid != 0) {
            // The kernel clears setuid/setgid after a write by a non-owner with a chmod in
            // the writer's name; the MDT would refuse it (EPERM), so it is made as root.
            let now = self.client.getattr(fid).await?;
            let kept = now.mode & 0o7777;
            let cleared = kept & !mode & 0o6000;
            if now.uid != cred.uid && cleared != 0 && mode & 0o7777 == kept & !cleared {
                cred = Credentials::root();
            }
        }
        if set.atime.is_some() || set.mtime.is_some() {
            // Writes of this mount not yet recorded on the MDT would stamp the times at
            // their flush, after (and over) the times set here (`cp -p`, `touch -d`).
            for f in self.writers_of(ino) {
                f.file.flush().await?;
            }
        }
        let mut truncated = false;
        if let Some(size) = set.size {
            let handle = match fh {
                Some(fh) => self.file(fh).ok().filter(|f| f.writable),
                None => None,
            };
            // Every other handle of this mount (a process may keep many, and a descriptor
            // closed while still mapped is released only at munmap): the truncate must
            // cut the bytes a writable one buffered, and what they know of the objects'
            // blocks no longer holds (the size they share follows the truncate).
            let others: Vec<Arc<OpenFile>> = self
                .handles_of(ino)
                .into_iter()
                .filter(|f| !handle.as_ref().is_some_and(|h| Arc::ptr_eq(h, f)))
                .collect();
            for f in others.iter().filter(|f| f.writable) {
                f.file.write_back().await;
            }
            if let Some(f) = &handle {
                // An open writable handle (ftruncate): the kernel checked the access.
                f.file.truncate(size).await?;
            } else {
                self.client
                    .setattr(
                        fid,
                        SetAttr {
                            size: Some(size),
                            ..Default::default()
                        },
                        &cred,
                    )
                    .await?;
            }
            set.size = None;
            for f in &others {
                f.file.size_changed(size).await;
            }
            self.inodes.page_cache_changed(ino);
            truncated = true;
        }
        let attr = if set == SetAttr::default() {
            debug_assert!(truncated);
            self.client.getattr(fid).await?
        } else {
            self.client.setattr(fid, set, &cred).await?
        };
        Ok(self.local_view(ino, attr).await)
    }

    /// Makes the kernel ask for `ino`'s attributes again at their next use: at an open
    /// that found data newer than the kernel's pages, the size the kernel holds (kept for
    /// up to `attr_timeout`) may be another mount's old one, and close-to-open means the
    /// opener sees the size the last closer left. Only the attributes are dropped (no
    /// offset), which takes no lock the kernel holds during an OPEN; done before the open is
    /// answered, so the opener's next stat or read already asks.
    fn forget_attributes(&self, ino: u64) {
        if let Some(n) = self.notifier.get()
            && let Err(e) = n.inval_inode(INodeNo(ino), -1, 0)
        {
            // ENOENT: the kernel no longer holds the inode, so it caches nothing.
            tracing::debug!(ino, error = %e, "attribute invalidation refused");
        }
    }

    /// Opens `fid` and registers the handle; returns it with the flags for the kernel.
    fn register(&self, ino: u64, file: File, access: AccessMode) -> u64 {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        let writable = access != AccessMode::Read;
        lock(&self.files).insert(
            fh,
            Arc::new(OpenFile {
                ino,
                file,
                writable,
                wrote: AtomicBool::new(false),
                jobid: weft_rpc::jobid::current(),
            }),
        );
        fh
    }

    fn fopen_flags(&self, keep_cache: bool) -> FopenFlags {
        let mut f = FopenFlags::empty();
        if self.opts.direct_io {
            f |= FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_PARALLEL_DIRECT_WRITES;
        } else if keep_cache {
            f |= FopenFlags::FOPEN_KEEP_CACHE;
        }
        f
    }

    async fn open(
        &self,
        ino: u64,
        fid: Fid,
        flags: i32,
        cred: Credentials,
    ) -> FsResult<(u64, FopenFlags)> {
        let access = self.handle_access(flags);
        let opts = OpenOptions {
            access,
            create: None,
            exclusive: false,
            truncate: flags & libc::O_TRUNC != 0,
            append: false,
        };
        let file = self.client.open(fid, opts, &cred).await?;
        // The kernel's cached pages stay only if the data is the version they were read
        // at (close-to-open): the MDT's version at this open.
        let version = file.attr_at_open().data_version;
        let keep = !opts.truncate && self.inodes.page_cache_valid(ino, version);
        if !keep {
            self.forget_attributes(ino);
        }
        let fh = self.register(ino, file, access);
        Ok((fh, self.fopen_flags(keep)))
    }

    async fn create(
        &self,
        parent: u64,
        name: Vec<u8>,
        mode: u32,
        flags: i32,
        cred: Credentials,
    ) -> FsResult<(Entry, u64, FopenFlags)> {
        check_name(&name)?;
        let pfid = self.inodes.fid(parent).ok_or(Failed::code(libc::ESTALE))?;
        let access = self.handle_access(flags);
        let opts = OpenOptions {
            access,
            create: Some(mode & 0o7777),
            exclusive: flags & libc::O_EXCL != 0,
            truncate: flags & libc::O_TRUNC != 0,
            append: false,
        };
        let file = self.client.open_in(pfid, &name, opts, None, &cred).await?;
        let attr = file.attr_at_open().clone();
        let entry = self.entry(attr, Some(parent)).await;
        if file.created() {
            // A new file has no extended attributes: the kernel's `security.capability`
            // lookup before each write needs no round trip.
            self.no_caps.absent(entry.ino);
        }
        let fh = self.register(entry.ino, file, access);
        // A new (or truncated) file: nothing cached in the kernel yet.
        let _ = self
            .inodes
            .page_cache_valid(entry.ino, entry.attr.data_version);
        Ok((entry, fh, self.fopen_flags(false)))
    }

    async fn release(&self, fh: u64) -> FsResult<()> {
        let f = lock(&self.files).remove(&fh);
        if let Some(f) = f {
            if f.writable {
                // Written data changes the version at close; the kernel's pages are ours
                // and current, but the next open cannot tell, so it rereads.
                self.inodes.page_cache_changed(f.ino);
            }
            f.file.close().await?;
        }
        Ok(())
    }

    /// The entries of `dir` after `offset`: the page held and where in it they start.
    async fn readdir_page(
        &self,
        dir: &OpenDir,
        offset: u64,
        plus: bool,
        cred: &Credentials,
    ) -> FsResult<(Arc<Vec<DirEntry>>, usize)> {
        let mut page = dir.page.lock().await;
        let after = if offset <= DOTDOT_OFFSET { 0 } else { offset };
        // Served from the page held if it covers `after`. A page read with attributes
        // serves a plain readdir too: the kernel (`readdirplus_auto`) asks with
        // attributes at the start of a listing and without them after, unless something
        // looked names up in between (`ls -l`).
        if page.plus || !plus {
            let start = if page.after == Some(after) {
                Some(0)
            } else {
                page.entries
                    .iter()
                    .position(|e| e.cookie == after)
                    .map(|i| i + 1)
            };
            if let Some(i) = start
                && (i < page.entries.len() || page.eof)
            {
                return Ok((page.entries.clone(), i));
            }
        }
        // The kernel (`readdirplus_auto`) asks with attributes at the start of every
        // listing and, after that, only when something looked names up in between (`ls
        // -l`): so the first page with attributes is small, and the page fetched ahead of
        // it comes without them (if the kernel asks with them after all, it is fetched
        // again, once).
        let first = plus && after == 0;
        let size = if first { FIRST_PLUS_PAGE } else { DIR_PAGE };
        let ahead_plus = plus && !first;
        let fetch = || self.client.readdir(dir.fid, after, size, plus, cred);
        // Pages fetched ahead serve the request if it goes on where they start.
        let mut ahead = page.ahead.take();
        let fetched_ahead = match ahead.as_mut() {
            Some(a) => a.take(after, plus).await.map(|p| (p, a.plus)),
            None => None,
        };
        let ((entries, eof), fetched_plus) = match fetched_ahead {
            Some(p) => p,
            None => {
                ahead = None;
                (fetch().await?, plus)
            }
        };
        let entries = Arc::new(entries);
        if eof {
            ahead = None;
        } else if ahead.is_none()
            && let Some(last) = entries.last()
        {
            ahead = Some(PagesAhead::start(
                self.client.clone(),
                dir.fid,
                last.cookie,
                ahead_plus,
                cred.clone(),
            ));
        }
        *page = DirPage {
            after: Some(after),
            plus: fetched_plus,
            entries: entries.clone(),
            eof,
            ahead,
        };
        Ok((entries, 0))
    }
}

impl Shared {
    /// The lock request of a kernel `getlk`/`setlk` (see [`crate::locks`] for why every
    /// lock is sent as POSIX).
    fn file_lock(
        &self,
        owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
    ) -> FsResult<FileLock> {
        Ok(FileLock {
            kind: LockKind::Posix,
            typ: crate::locks::lock_type(typ).ok_or(Failed::code(libc::EINVAL))?,
            start,
            end: crate::locks::from_kernel_end(end),
            owner: owner.0,
            pid,
        })
    }

    /// Releases `owner`'s locks on `ino` if this mount ever locked it for that owner.
    /// A failure is logged, not returned: it does not make the close fail, and it means
    /// the connection to the MDT broke, which released the locks there anyway.
    async fn release_locks(&self, ino: u64, owner: LockOwner) {
        if self.locks.take(ino, owner.0) {
            self.release_remote_locks(ino, owner).await;
        }
    }

    /// Releases on the MDT the POSIX locks `owner` may hold on `ino` (already forgotten
    /// here with `locks.take`).
    async fn release_remote_locks(&self, ino: u64, owner: LockOwner) {
        let Some(fid) = self.inodes.fid(ino) else {
            return;
        };
        if let Err(e) = self
            .client
            .release_locks(fid, LockKind::Posix, owner.0)
            .await
        {
            tracing::warn!(%fid, error = %e, "releasing locks at close failed");
        }
    }
}

impl Filesystem for WeftFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let _ = config.set_max_write(MAX_WRITE);
        let _ = config.set_max_readahead(MAX_WRITE);
        let _ = config.set_max_background(self.shared.opts.max_background);
        let _ = config.set_congestion_threshold(self.shared.opts.max_background / 4 * 3);
        let mut wanted = InitFlags::FUSE_DO_READDIRPLUS
            | InitFlags::FUSE_READDIRPLUS_AUTO
            | InitFlags::FUSE_ATOMIC_O_TRUNC
            | InitFlags::FUSE_PARALLEL_DIROPS
            | InitFlags::FUSE_ASYNC_DIO
            | InitFlags::FUSE_CACHE_SYMLINKS
            | InitFlags::FUSE_AUTO_INVAL_DATA
            | InitFlags::FUSE_MAX_PAGES
            // Locks are the MDT's, so that every mount sees the same ones.
            | InitFlags::FUSE_POSIX_LOCKS
            | InitFlags::FUSE_FLOCK_LOCKS;
        if self.shared.opts.writeback_cache {
            wanted |= InitFlags::FUSE_WRITEBACK_CACHE;
        }
        if self.shared.opts.direct_io {
            wanted |= InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP;
        }
        // Each capability on its own: an old kernel lacking one still gets the others.
        for flag in wanted.iter() {
            if let Err(missing) = config.add_capabilities(flag) {
                tracing::info!(?missing, "kernel lacks a FUSE capability");
            }
        }
        Ok(())
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        // A name a statahead scan holds is answered here, without a task or a round trip.
        if let Some(attr) = self.shared.looked_ahead(parent.0, name.as_bytes()) {
            let ino = self.shared.inodes.reference(attr.fid, Some(parent.0));
            return self.shared.reply_entry(reply, Entry { ino, attr });
        }
        let cred = self.cred(req);
        let name = name.as_bytes().to_vec();
        self.spawn(
            req,
            |s| async move {
                let e = s.lookup(parent.0, &name, &cred).await?;
                s.note_lookup(parent.0, &cred);
                Ok(e)
            },
            reply,
            |r, e, s| s.reply_entry(r, e),
        );
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.shared.inodes.forget(ino.0, nlookup);
    }

    fn getattr(&self, req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        if let Some(a) = self.shared.changed_dir(ino.0) {
            return reply.attr(&self.shared.opts.attr_timeout, &file_attr(ino.0, &a));
        }
        self.spawn(
            req,
            |s| async move {
                let fid = s.fid(ino)?;
                s.getattr(ino.0, fid).await
            },
            reply,
            move |r, a, s| r.attr(&s.opts.attr_timeout, &file_attr(ino.0, &a)),
        );
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let cred = self.cred(req);
        let set = SetAttr {
            mode: mode.map(|m| m & 0o7777),
            uid,
            gid,
            size,
            atime: atime.map(time_set),
            mtime: mtime.map(time_set),
        };
        self.spawn(
            req,
            |s| async move {
                let fid = s.fid(ino)?;
                s.setattr(ino.0, fid, set, fh, cred).await
            },
            reply,
            move |r, a, s| r.attr(&s.opts.attr_timeout, &file_attr(ino.0, &a)),
        );
    }

    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        self.spawn(
            req,
            |s| async move { Ok(s.client.readlink(s.fid(ino)?).await?) },
            reply,
            |r, t, _| r.data(&t),
        );
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let cred = self.cred(req);
        let name = name.as_bytes().to_vec();
        // Without FUSE_DONT_MASK the kernel already applied the umask; applying it again
        // changes nothing, and keeps the rule true if that capability is ever asked for.
        let mode = mode & !(umask & 0o777);
        self.spawn(
            req,
            |s| async move {
                check_name(&name)?;
                let pfid = s.fid(parent)?;
                let a = s
                    .client
                    .mknod(pfid, &name, mode, u64::from(rdev), &cred)
                    .await?;
                Ok(s.entry(a, Some(parent.0)).await)
            },
            reply,
            |r, e, s| s.reply_entry(r, e),
        );
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let cred = self.cred(req);
        let name = name.as_bytes().to_vec();
        let mode = mode & !(umask & 0o777) & 0o7777;
        self.spawn(
            req,
            |s| async move {
                check_name(&name)?;
                let pfid = s.fid(parent)?;
                let a = s.client.mkdir(pfid, &name, mode, &cred).await?;
                Ok(s.entry(a, Some(parent.0)).await)
            },
            reply,
            |r, e, s| s.reply_entry(r, e),
        );
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let cred = self.cred(req);
        let name = name.as_bytes().to_vec();
        self.spawn(
            req,
            |s| async move {
                check_name(&name)?;
                Ok(s.client.unlink(s.fid(parent)?, &name, &cred).await?)
            },
            reply,
            |r, (), _| r.ok(),
        );
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let cred = self.cred(req);
        let name = name.as_bytes().to_vec();
        self.spawn(
            req,
            |s| async move {
                check_name(&name)?;
                Ok(s.client.rmdir(s.fid(parent)?, &name, &cred).await?)
            },
            reply,
            |r, (), _| r.ok(),
        );
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let cred = self.cred(req);
        let name = link_name.as_bytes().to_vec();
        let target = target.as_os_str().as_bytes().to_vec();
        self.spawn(
            req,
            |s| async move {
                check_name(&name)?;
                if target.len() > weft_proto::SYMLINK_MAX {
                    return Err(Failed::code(libc::ENAMETOOLONG));
                }
                let a = s
                    .client
                    .symlink(s.fid(parent)?, &name, &target, &cred)
                    .await?;
                Ok(s.entry(a, Some(parent.0)).await)
            },
            reply,
            |r, e, s| s.reply_entry(r, e),
        );
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: KRenameFlags,
        reply: ReplyEmpty,
    ) {
        let cred = self.cred(req);
        let name = name.as_bytes().to_vec();
        let newname = newname.as_bytes().to_vec();
        self.spawn(
            req,
            |s| async move {
                check_name(&name)?;
                check_name(&newname)?;
                if flags.contains(KRenameFlags::RENAME_WHITEOUT)
                    || (flags.contains(KRenameFlags::RENAME_NOREPLACE)
                        && flags.contains(KRenameFlags::RENAME_EXCHANGE))
                {
                    return Err(Failed::code(libc::EINVAL));
                }
                let f = RenameFlags {
                    noreplace: flags.contains(KRenameFlags::RENAME_NOREPLACE),
                    exchange: flags.contains(KRenameFlags::RENAME_EXCHANGE),
                };
                let (src, dst) = (s.fid(parent)?, s.fid(newparent)?);
                Ok(s.client.rename(src, &name, dst, &newname, f, &cred).await?)
            },
            reply,
            |r, (), _| r.ok(),
        );
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let cred = self.cred(req);
        let name = newname.as_bytes().to_vec();
        self.spawn(
            req,
            |s| async move {
                check_name(&name)?;
                let a = s
                    .client
                    .link(s.fid(ino)?, s.fid(newparent)?, &name, &cred)
                    .await?;
                Ok(s.entry(a, Some(newparent.0)).await)
            },
            reply,
            |r, e, s| s.reply_entry(r, e),
        );
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let cred = self.cred(req);
        self.spawn(
            req,
            |s| async move {
                let fid = s.fid(ino)?;
                s.open(ino.0, fid, flags.0, cred).await
            },
            reply,
            |r, (fh, f), _| r.opened(FileHandle(fh), f),
        );
    }

    fn read(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        // A sequential read of pages the client already holds is answered on this thread.
        if let Ok(f) = self.shared.file(fh)
            && !self.shared.others_wrote(&f)
        {
            let jobid = self.shared.jobids.get(req.pid(), req.uid(), req.gid());
            let _rt = self.rt.enter();
            let cached = weft_rpc::jobid::sync_scope(jobid, || {
                f.file.try_read_cached(offset, u64::from(size))
            });
            if let Some(data) = cached {
                reply.data(&data);
                return;
            }
        }
        self.spawn(
            req,
            |s| async move {
                let f = s.file(fh)?;
                s.write_back_others(&f).await;
                Ok(f.file.read_at(offset, u64::from(size)).await?)
            },
            reply,
            |r, data, _| r.data(&data),
        );
    }

    fn write(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        // A write that extends what the handle buffers is copied in on this thread.
        if let Ok(f) = self.shared.file(fh)
            && let Ok(len) = u32::try_from(data.len())
        {
            let jobid = self.shared.jobids.get(req.pid(), req.uid(), req.gid());
            let _rt = self.rt.enter();
            if weft_rpc::jobid::sync_scope(jobid, || f.file.try_write_buffered(offset, data)) {
                f.wrote.store(true, Ordering::Release);
                reply.written(len);
                return;
            }
        }
        // The request buffer is reused for the next request: the task gets a copy.
        let data = data.to_vec();
        self.spawn(
            req,
            |s| async move {
                let f = s.file(fh)?;
                let len = u32::try_from(data.len()).map_err(|_| Failed::code(libc::EINVAL))?;
                f.file.write_at(offset, &data).await?;
                f.wrote.store(true, Ordering::Release);
                Ok(len)
            },
            reply,
            |r, n, _| r.written(n),
        );
    }

    fn flush(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // close(2): written data must be visible to the next open anywhere (close-to-open)
        // and write errors must reach the closing process, so buffered data goes out now;
        // durability is fsync's business. Closing any descriptor of a file also drops the
        // process's POSIX locks on it; the kernel leaves that to us when locks are remote.
        let may_hold_locks = self.shared.locks.take(ino.0, lock_owner.0);
        if !may_hold_locks {
            // Most closes have nothing to do (a file only read, or written and flushed
            // already): answered here, without a task and its thread wake-ups.
            if let Ok(f) = self.shared.file(fh)
                && (!f.writable || f.file.nothing_to_flush())
            {
                return reply.ok();
            }
        }
        self.spawn_as(
            self.shared.handle_jobid(fh),
            move |s| async move {
                if may_hold_locks {
                    s.release_remote_locks(ino.0, lock_owner).await;
                }
                let f = s.file(fh)?;
                if f.writable {
                    f.file.flush().await?;
                }
                Ok(())
            },
            reply,
            |r, (), _| r.ok(),
        );
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.spawn_as(
            self.shared.handle_jobid(fh),
            |s| async move {
                // The last close of an open file description that took a flock.
                if let Some(owner) = lock_owner {
                    s.release_locks(ino.0, owner).await;
                }
                s.release(fh.0).await
            },
            reply,
            |r, (), _| r.ok(),
        );
    }

    fn fsync(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.spawn(
            req,
            |s| async move { Ok(s.file(fh)?.file.fsync().await?) },
            reply,
            |r, (), _| r.ok(),
        );
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.spawn(
            req,
            |s| async move {
                let fid = s.fid(ino)?;
                let fh = s.next_fh.fetch_add(1, Ordering::Relaxed);
                lock(&s.dirs).insert(
                    fh,
                    Arc::new(OpenDir {
                        fid,
                        ino: ino.0,
                        page: tokio::sync::Mutex::new(DirPage::default()),
                    }),
                );
                Ok(fh)
            },
            reply,
            |r, fh, _| r.opened(FileHandle(fh), FopenFlags::empty()),
        );
    }

    fn readdir(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let cred = self.cred(req);
        let shared = self.shared.clone();
        self.run_here_first(async move {
            let Some(dir) = lock(&shared.dirs).get(&fh.0).cloned() else {
                return reply.error(fuser::Errno::EBADF);
            };
            if offset < DOT_OFFSET
                && reply.add(
                    INodeNo(dir.ino),
                    DOT_OFFSET,
                    fuser::FileType::Directory,
                    ".",
                )
            {
                return reply.ok();
            }
            if offset < DOTDOT_OFFSET {
                let up = shared.inodes.parent(dir.ino).unwrap_or(dir.ino);
                if reply.add(INodeNo(up), DOTDOT_OFFSET, fuser::FileType::Directory, "..") {
                    return reply.ok();
                }
            }
            let (page, start) = match shared.readdir_page(&dir, offset, false, &cred).await {
                Ok(p) => p,
                Err(Failed(e)) => return reply.error(e),
            };
            for e in page.get(start..).unwrap_or_default() {
                let ino = shared.inodes.ino_of(e.fid);
                if reply.add(
                    INodeNo(ino),
                    e.cookie,
                    file_type(e.kind),
                    OsStr::from_bytes(&e.name),
                ) {
                    break;
                }
            }
            reply.ok();
        });
    }

    fn readdirplus(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let cred = self.cred(req);
        let shared = self.shared.clone();
        self.run_here_first(async move {
            let Some(dir) = lock(&shared.dirs).get(&fh.0).cloned() else {
                return reply.error(fuser::Errno::EBADF);
            };
            let (attr_ttl, entry_ttl) = (shared.opts.attr_timeout, shared.opts.entry_timeout);
            // `.` and `..` carry attributes too, but the kernel neither reads them nor takes
            // a reference on them (`fuse_direntplus_link` skips both names): no getattr.
            for (off, name, ino) in [
                (DOT_OFFSET, ".", Some(dir.ino)),
                (DOTDOT_OFFSET, "..", shared.inodes.parent(dir.ino)),
            ] {
                if offset >= off {
                    continue;
                }
                let ino = ino.unwrap_or(dir.ino);
                let fa = crate::attr::unread_dir_attr(ino);
                if reply.add(INodeNo(ino), off, name, &Duration::ZERO, &fa, Generation(0)) {
                    return reply.ok();
                }
            }
            let (page, start) = match shared.readdir_page(&dir, offset, true, &cred).await {
                Ok(p) => p,
                Err(Failed(e)) => return reply.error(e),
            };
            for e in page.get(start..).unwrap_or_default() {
                let attr = match e.attr.clone() {
                    Some(a) => a,
                    None => match shared.client.getattr(e.fid).await {
                        Ok(a) => a,
                        Err(err) => return reply.error(Failed::from(err).0),
                    },
                };
                // A reference is taken only for an entry that fits in the reply.
                let ino = shared.inodes.ino_of(e.fid);
                let attr = shared.local_view(ino, attr).await;
                let fa = file_attr(ino, &attr);
                let ttl = attr_ttl.min(entry_ttl);
                if reply.add(
                    INodeNo(ino),
                    e.cookie,
                    OsStr::from_bytes(&e.name),
                    &ttl,
                    &fa,
                    Generation(0),
                ) {
                    break;
                }
                shared.inodes.reference(e.fid, Some(dir.ino));
            }
            reply.ok();
        });
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        lock(&self.shared.dirs).remove(&fh.0);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        // The MDTs answer changes before they are durable: make this client's durable.
        self.spawn(
            req,
            |s| async move { Ok(s.client.sync_metadata().await?) },
            reply,
            |r, (), _| r.ok(),
        );
    }

    fn statfs(&self, req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        self.spawn(
            req,
            |s| async move { Ok(s.client.statfs().await?) },
            reply,
            |r, st, _| {
                let bsize = st.bsize.max(512);
                r.statfs(
                    st.blocks,
                    st.bfree,
                    st.bavail,
                    st.files,
                    st.ffree,
                    bsize,
                    weft_proto::NAME_MAX as u32,
                    bsize,
                )
            },
        );
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let cred = self.cred(req);
        let name = name.as_bytes().to_vec();
        let value = value.to_vec();
        self.spawn(
            req,
            |s| async move {
                let mode = match flags & (libc::XATTR_CREATE | libc::XATTR_REPLACE) {
                    0 => XattrMode::Any,
                    libc::XATTR_CREATE => XattrMode::Create,
                    libc::XATTR_REPLACE => XattrMode::Replace,
                    _ => return Err(Failed::code(libc::EINVAL)),
                };
                let fid = s.fid(ino)?;
                s.no_caps.forget(ino.0);
                Ok(s.client.setxattr(fid, &name, &value, mode, &cred).await?)
            },
            reply,
            |r, (), _| r.ok(),
        );
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let name = name.as_bytes().to_vec();
        let capability = name == crate::nocaps::CAPABILITY;
        // Asked before every write(2): answered here while the absence is fresh.
        if capability && self.shared.no_caps.known_absent(ino.0) {
            reply.error(fuser::Errno::from_i32(libc::ENODATA));
            return;
        }
        let cred = self.cred(req);
        self.spawn(
            req,
            |s| async move {
                match s.client.getxattr(s.fid(ino)?, &name, &cred).await {
                    Err(e) if capability && e.errno() == weft_proto::Errno::NoData => {
                        s.no_caps.absent(ino.0);
                        Err(e.into())
                    }
                    r => Ok(r?),
                }
            },
            reply,
            move |r, v, _| xattr_reply(r, &v, size),
        );
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let cred = self.cred(req);
        self.spawn(
            req,
            |s| async move {
                let names = s.client.listxattr(s.fid(ino)?, &cred).await?;
                let mut out = Vec::new();
                for n in names {
                    out.extend_from_slice(&n);
                    out.push(0);
                }
                Ok(out)
            },
            reply,
            move |r, v, _| xattr_reply(r, &v, size),
        );
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let cred = self.cred(req);
        let name = name.as_bytes().to_vec();
        self.spawn(
            req,
            |s| async move {
                s.no_caps.forget(ino.0);
                Ok(s.client.removexattr(s.fid(ino)?, &name, &cred).await?)
            },
            reply,
            |r, (), _| r.ok(),
        );
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        // Called only without `default_permissions`: the same mode-bit rule as the MDT's.
        let cred = self.cred(req);
        let mask = (mask.bits() & 0o7) as u32;
        self.spawn(
            req,
            |s| async move {
                let a = s.client.getattr(s.fid(ino)?).await?;
                if mask == 0 || may(&cred, &a, mask) {
                    Ok(())
                } else {
                    Err(Failed::code(libc::EACCES))
                }
            },
            reply,
            |r, (), _| r.ok(),
        );
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let cred = self.cred(req);
        let name = name.as_bytes().to_vec();
        let mode = mode & !(umask & 0o777);
        self.spawn(
            req,
            |s| async move { s.create(parent.0, name, mode, flags, cred).await },
            reply,
            |r, (e, fh, f), s| {
                r.created(
                    &s.opts.entry_timeout.min(s.opts.attr_timeout),
                    &file_attr(e.ino, &e.attr),
                    Generation(0),
                    FileHandle(fh),
                    f,
                )
            },
        );
    }

    fn fallocate(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        self.spawn(
            req,
            |s| async move {
                let f = s.file(fh)?;
                let end = offset
                    .checked_add(length)
                    .ok_or(Failed::code(libc::EFBIG))?;
                const PUNCH: i32 = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
                const ZERO: i32 = libc::FALLOC_FL_ZERO_RANGE;
                const ZERO_KEEP: i32 = libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE;
                if matches!(mode, PUNCH | ZERO | ZERO_KEEP) {
                    // The range, as every handle of this mount sees the file.
                    s.write_back_others(&f).await;
                }
                match mode {
                    // Space is not reserved on the OSTs (they allocate on write); the size
                    // grows as posix_fallocate promises.
                    0 => {
                        if end > f.file.size().await {
                            f.file.truncate(end).await?;
                        }
                        Ok(())
                    }
                    libc::FALLOC_FL_KEEP_SIZE => Ok(()),
                    // Zeroing deallocates too: the range reads as zeros either way, and
                    // OSTs allocate on write.
                    PUNCH | ZERO_KEEP => Ok(f.file.punch(offset, length).await?),
                    ZERO => {
                        f.file.punch(offset, length).await?;
                        if end > f.file.size().await {
                            f.file.truncate(end).await?;
                        }
                        Ok(())
                    }
                    _ => Err(Failed::code(libc::EOPNOTSUPP)),
                }
            },
            reply,
            |r, (), _| r.ok(),
        );
    }

    fn lseek(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        // The kernel sends only SEEK_DATA and SEEK_HOLE; it moves the offset itself for
        // the others.
        let hole = match whence {
            libc::SEEK_DATA => false,
            libc::SEEK_HOLE => true,
            _ => return reply.error(fuser::Errno::EINVAL),
        };
        let Ok(offset) = u64::try_from(offset) else {
            return reply.error(fuser::Errno::ENXIO);
        };
        self.spawn(
            req,
            move |s| async move {
                let f = s.file(fh)?;
                s.write_back_others(&f).await;
                let found = f.file.seek_hole_or_data(offset, hole).await?;
                found
                    .and_then(|at| i64::try_from(at).ok())
                    .ok_or(Failed::code(libc::ENXIO))
            },
            reply,
            |r, at, _| r.offset(at),
        );
    }

    fn getlk(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        reply: ReplyLock,
    ) {
        self.spawn(
            req,
            move |s| async move {
                let lock = s.file_lock(lock_owner, start, end, typ, pid)?;
                let holder = s.client.getlk(s.fid(ino)?, lock).await?;
                Ok(holder.map_or((start, end, libc::F_UNLCK, 0), |h| {
                    (
                        h.start,
                        crate::locks::to_kernel_end(h.end),
                        crate::locks::kernel_type(h.typ),
                        h.pid,
                    )
                }))
            },
            reply,
            |r, (start, end, typ, pid), _| r.locked(start, end, typ, pid),
        );
    }

    fn setlk(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        sleep: bool,
        reply: ReplyEmpty,
    ) {
        let tid = req.pid();
        self.spawn(
            req,
            move |s| async move {
                let lock = s.file_lock(lock_owner, start, end, typ, pid)?;
                let fid = s.fid(ino)?;
                // Noted before asking, so that a close racing with the grant releases it.
                s.locks.add(ino.0, lock_owner.0);
                if sleep {
                    let interrupted = crate::locks::interrupted(tid);
                    s.client.setlkw(fid, lock, interrupted).await?;
                } else {
                    s.client.setlk(fid, lock).await?;
                }
                // Again after a grant: a close by another thread of the owner while this
                // one waited has taken the note away, and the new lock needs it.
                s.locks.add(ino.0, lock_owner.0);
                Ok(())
            },
            reply,
            |r, (), _| r.ok(),
        );
    }
}

fn xattr_reply(r: ReplyXattr, v: &[u8], size: u32) {
    match u32::try_from(v.len()) {
        Ok(len) if size == 0 => r.size(len),
        Ok(len) if len <= size => r.data(v),
        _ => r.error(fuser::Errno::from_i32(libc::ERANGE)),
    }
}

/// Whether `cred` may access `a` for `mask` (`R_OK`/`W_OK`/`X_OK` bits), by mode bits.
fn may(cred: &Credentials, a: &Attr, mask: u32) -> bool {
    if cred.uid == 0 {
        // Root may do anything, but execute only where some execute bit is set.
        return mask & 1 == 0 || a.kind == FileKind::Directory || a.mode & 0o111 != 0;
    }
    let bits = if cred.uid == a.uid {
        (a.mode >> 6) & 7
    } else if cred.in_group(a.gid) {
        (a.mode >> 3) & 7
    } else {
        a.mode & 7
    };
    bits & mask == mask
}
