//! The fuser adapter: the only code besides [`crate::mount`] that names fuser types.
//!
//! [`WeftFs`] is what a fuser session serves. Each handler ([`filesystem`]) takes what it
//! needs from the request (inode and handle numbers, the caller's credentials, copied
//! names and data), calls an operation of [`crate::ops`] and turns its result into the
//! kernel's reply. The work is polled once on the reading thread: what finishes without
//! waiting is answered there, and what has to wait (an MDT or OST round trip over the
//! network, a large read) goes on as a task on the client's tokio runtime, so many
//! requests are in flight together and a slow one never holds up the others. The task
//! replies when the library answers.

pub mod attr;
mod filesystem;

use crate::errno::{Failed, FsResult};
use crate::kernel_cache::KernelCache;
use crate::ops::dir_stream::DirSink;
use crate::ops::dirs::DirPlusSink;
use crate::ops::files::Opened;
use crate::ops::xattrs::XattrAnswer;
use crate::ops::{Entry, Ops};
use crate::options::MountOptions;
use attr::{file_attr, file_type, timestamp, unread_dir_attr};
use fuser::{
    FopenFlags, Generation, INodeNo, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyLock, ReplyLseek, ReplyOpen, ReplyStatfs,
    ReplyWrite, ReplyXattr, Request, TimeOrNow,
};
use std::ffi::OsStr;
use std::future::Future;
use std::os::unix::ffi::OsStrExt;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use weft_client::Client;
use weft_proto::mdt::{Attr, Credentials, FileKind, TimeSet};

/// Largest write the kernel sends (it caps FUSE requests at 256 pages by default).
pub const MAX_WRITE: u32 = 1 << 20;

/// The weftfs FUSE file system: give it to a fuser session.
pub struct WeftFs {
    ops: Arc<Ops>,
    rt: tokio::runtime::Handle,
    /// Tells the kernel to forget cached attributes; set once the session exists.
    notifier: Arc<OnceLock<fuser::Notifier>>,
}

/// The session's notifier, once there is one, reaches the kernel's caches.
impl KernelCache for OnceLock<fuser::Notifier> {
    /// Only the attributes are dropped (no offset), which takes no lock the kernel holds
    /// during an OPEN.
    fn forget_attributes(&self, ino: u64) {
        if let Some(n) = self.get()
            && let Err(e) = n.inval_inode(INodeNo(ino), -1, 0)
        {
            // ENOENT: the kernel no longer holds the inode, so it caches nothing.
            tracing::debug!(ino, error = %e, "attribute invalidation refused");
        }
    }

    fn drop_pages(&self, ino: u64, offset: u64, len: u64) {
        let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
            return;
        };
        if let Some(n) = self.get()
            && let Err(e) = n.inval_inode(INodeNo(ino), offset, len)
        {
            // ENOENT: the kernel no longer holds the inode, nor its pages.
            tracing::debug!(ino, offset, len, error = %e, "page drop refused");
        }
    }
}

impl WeftFs {
    /// A file system over `client`, running its work on `rt`.
    pub fn new(client: Arc<Client>, opts: MountOptions, rt: tokio::runtime::Handle) -> Self {
        let notifier = Arc::new(OnceLock::new());
        let ops = Ops::new(client, opts, notifier.clone());
        Self {
            ops: Arc::new(ops),
            rt,
            notifier,
        }
    }

    /// Where the mount puts the session's notifier once the session exists (the file
    /// system is made first, then handed to the session).
    pub fn notifier_slot(&self) -> Arc<OnceLock<fuser::Notifier>> {
        self.notifier.clone()
    }

    fn opts(&self) -> &MountOptions {
        self.ops.opts()
    }

    /// The caller's credentials.
    fn cred(&self, req: &Request) -> Credentials {
        self.ops.caller(req.uid(), req.gid(), req.pid())
    }

    /// The caller's credentials and a copy of the name a request is about.
    fn named(&self, req: &Request, name: &OsStr) -> (Credentials, Vec<u8>) {
        (self.cred(req), name.as_bytes().to_vec())
    }

    /// The caller's job id.
    fn jobid(&self, req: &Request) -> Option<Arc<str>> {
        self.ops.jobid(req.pid(), req.uid(), req.gid())
    }

    /// Runs `work` (on this thread until it first waits, then on the runtime); `done`
    /// replies with its result.
    ///
    /// The work gets the operations of this request ([`Ops::for_job`]): every request it
    /// sends carries the job id of the calling process.
    fn spawn<T, F, R, D>(&self, req: &Request, work: impl FnOnce(Arc<Ops>) -> F, reply: R, done: D)
    where
        F: Future<Output = FsResult<T>> + Send + 'static,
        T: Send + 'static,
        R: ErrorReply + Send + 'static,
        D: FnOnce(R, T, &Ops) + Send + 'static,
    {
        self.spawn_as(self.jobid(req), work, reply, done);
    }

    /// [`WeftFs::spawn`] for a request answered with success alone.
    fn spawn_ok<F>(&self, req: &Request, work: impl FnOnce(Arc<Ops>) -> F, reply: ReplyEmpty)
    where
        F: Future<Output = FsResult<()>> + Send + 'static,
    {
        self.spawn(req, work, reply, |r, (), _| r.ok());
    }

    /// [`WeftFs::spawn`] for a request answered with an entry.
    fn spawn_entry<F>(&self, req: &Request, work: impl FnOnce(Arc<Ops>) -> F, reply: ReplyEntry)
    where
        F: Future<Output = FsResult<Entry>> + Send + 'static,
    {
        self.spawn(req, work, reply, |r, e, s| reply_entry(s.opts(), r, e));
    }

    /// [`WeftFs::spawn`] with a given job id, for requests whose caller must not be looked
    /// at: FLUSH comes from a process in `execve` closing its close-on-exec descriptors,
    /// and reading that process's environment would wait for the exec, which waits for
    /// this FLUSH.
    fn spawn_as<T, F, R, D>(
        &self,
        jobid: Option<Arc<str>>,
        work: impl FnOnce(Arc<Ops>) -> F,
        reply: R,
        done: D,
    ) where
        F: Future<Output = FsResult<T>> + Send + 'static,
        T: Send + 'static,
        R: ErrorReply + Send + 'static,
        D: FnOnce(R, T, &Ops) + Send + 'static,
    {
        // Most requests name no job: they share the mount's operations (no allocation).
        let ops = if jobid.as_deref() == self.ops.context().jobid() {
            self.ops.clone()
        } else {
            self.ops.for_job(jobid)
        };
        let fut = work(ops.clone());
        self.run_here_first(async move {
            match fut.await {
                Ok(v) => done(reply, v, &ops),
                Err(e) => reply.fail(e),
            }
        });
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

/// The kernel's errno of a failure.
fn errno(e: Failed) -> fuser::Errno {
    fuser::Errno::from_i32(e.errno())
}

/// Replies that can carry an error.
trait ErrorReply {
    fn fail(self, e: Failed);
}

macro_rules! error_reply {
    ($($t:ty),*) => {$(
        impl ErrorReply for $t {
            fn fail(self, e: Failed) {
                self.error(errno(e))
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

/// Hands `e` to the kernel, trusted for the mount's timeouts.
fn reply_entry(opts: &MountOptions, reply: ReplyEntry, e: Entry) {
    reply.entry_with_ttls(
        &opts.attr_timeout,
        &opts.entry_timeout,
        &file_attr(e.ino, &e.attr),
        Generation(0),
    );
}

/// Hands attributes `a` of `ino` to the kernel, trusted for `attr_timeout`.
fn reply_attr(opts: &MountOptions, reply: ReplyAttr, ino: u64, a: &Attr) {
    reply.attr(&opts.attr_timeout, &file_attr(ino, a));
}

/// The kernel's flags for an open file.
fn fopen_flags(opts: &MountOptions, opened: Opened) -> FopenFlags {
    let mut f = FopenFlags::empty();
    if opts.direct_io {
        f |= FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_PARALLEL_DIRECT_WRITES;
    } else if opened.keep_cache {
        f |= FopenFlags::FOPEN_KEEP_CACHE;
    }
    f
}

fn time_set(t: TimeOrNow) -> TimeSet {
    match t {
        TimeOrNow::Now => TimeSet::Now,
        TimeOrNow::SpecificTime(t) => TimeSet::At(timestamp(t)),
    }
}

fn xattr_reply(r: ReplyXattr, answer: XattrAnswer) {
    match answer {
        XattrAnswer::Size(len) => r.size(len),
        XattrAnswer::Data(v) => r.data(&v),
    }
}

impl DirSink for ReplyDirectory {
    fn add(&mut self, ino: u64, offset: u64, kind: FileKind, name: &[u8]) -> bool {
        ReplyDirectory::add(
            self,
            INodeNo(ino),
            offset,
            file_type(kind),
            OsStr::from_bytes(name),
        )
    }
}

/// A readdirplus reply, with how long the kernel may trust its entries.
struct PlusReply {
    reply: ReplyDirectoryPlus,
    ttl: Duration,
}

impl DirPlusSink for PlusReply {
    fn add(&mut self, ino: u64, offset: u64, name: &[u8], attr: Option<&Attr>) -> bool {
        let (fa, ttl) = match attr {
            Some(a) => (file_attr(ino, a), self.ttl),
            None => (unread_dir_attr(ino), Duration::ZERO),
        };
        let name = OsStr::from_bytes(name);
        self.reply
            .add(INodeNo(ino), offset, name, &ttl, &fa, Generation(0))
    }
}
