//! `impl fuser::Filesystem for WeftFs`: each kernel request converted to plain values,
//! handed to its operation in [`crate::ops`], and the result converted to the reply.
//!
//! Requests answered on the reading thread without a task, when the operation says it can
//! (see the crate docs): a lookup a statahead scan holds, a directory's attributes a
//! change of this mount left, a cached sequential read, a buffered write, a close with
//! nothing to flush, and the known absence of `security.capability`.

use super::{
    MAX_WRITE, PlusReply, WeftFs, errno, fopen_flags, reply_attr, reply_entry, time_set,
    xattr_reply,
};
use crate::adapter::attr::file_attr;
use crate::ops::data::seek_request;
use crate::ops::locks::KernelLock;
use crate::ops::namespace::masked;
use fuser::{
    AccessFlags, FileHandle, Filesystem, FopenFlags, Generation, INodeNo, InitFlags, KernelConfig,
    LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyLock, ReplyLseek, ReplyOpen, ReplyStatfs,
    ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::SystemTime;
use weft_proto::mdt::SetAttr;

impl Filesystem for WeftFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let max_background = self.opts().max_background;
        let _ = config.set_max_write(MAX_WRITE);
        let _ = config.set_max_readahead(MAX_WRITE);
        let _ = config.set_max_background(max_background);
        let _ = config.set_congestion_threshold(max_background / 4 * 3);
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
        if self.opts().writeback_cache {
            wanted |= InitFlags::FUSE_WRITEBACK_CACHE;
        }
        if self.opts().direct_io {
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
        if let Some(e) = self.ops.lookup_ahead(parent.0, name.as_bytes()) {
            return reply_entry(self.opts(), reply, e);
        }
        let (cred, name) = self.named(req, name);
        self.spawn_entry(
            req,
            |s| async move { s.lookup(parent.0, &name, &cred).await },
            reply,
        );
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.ops.forget(ino.0, nlookup);
    }

    fn getattr(&self, req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        if let Some(a) = self.ops.changed_dir(ino.0) {
            return reply_attr(self.opts(), reply, ino.0, &a);
        }
        self.spawn(
            req,
            |s| async move { s.getattr(ino.0).await },
            reply,
            move |r, a, s| reply_attr(s.opts(), r, ino.0, &a),
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
        let fh = fh.map(|f| f.0);
        self.spawn(
            req,
            |s| async move { s.setattr(ino.0, set, fh, cred).await },
            reply,
            move |r, a, s| reply_attr(s.opts(), r, ino.0, &a),
        );
    }

    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        self.spawn(
            req,
            |s| async move { s.readlink(ino.0).await },
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
        let (cred, name) = self.named(req, name);
        let mode = masked(mode, umask);
        self.spawn_entry(
            req,
            |s| async move { s.mknod(parent.0, &name, mode, rdev, &cred).await },
            reply,
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
        let (cred, name) = self.named(req, name);
        let mode = masked(mode, umask);
        self.spawn_entry(
            req,
            |s| async move { s.mkdir(parent.0, &name, mode, &cred).await },
            reply,
        );
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let (cred, name) = self.named(req, name);
        self.spawn_ok(
            req,
            |s| async move { s.unlink(parent.0, &name, &cred).await },
            reply,
        );
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let (cred, name) = self.named(req, name);
        self.spawn_ok(
            req,
            |s| async move { s.rmdir(parent.0, &name, &cred).await },
            reply,
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
        let (cred, name) = self.named(req, link_name);
        let target = target.as_os_str().as_bytes().to_vec();
        self.spawn_entry(
            req,
            |s| async move { s.symlink(parent.0, &name, &target, &cred).await },
            reply,
        );
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let (cred, name) = self.named(req, name);
        let newname = newname.as_bytes().to_vec();
        let flags = flags.bits();
        self.spawn_ok(
            req,
            |s| async move {
                s.rename(parent.0, &name, newparent.0, &newname, flags, &cred)
                    .await
            },
            reply,
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
        let (cred, name) = self.named(req, newname);
        self.spawn_entry(
            req,
            |s| async move { s.link(ino.0, newparent.0, &name, &cred).await },
            reply,
        );
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let cred = self.cred(req);
        self.spawn(
            req,
            |s| async move { s.open(ino.0, flags.0, cred).await },
            reply,
            |r, o, s| r.opened(FileHandle(o.fh), fopen_flags(s.opts(), o)),
        );
    }

    fn read(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        // A sequential read of pages the client already holds is answered on this thread.
        let cached = {
            let _rt = self.rt.enter();
            self.ops.read_cached(fh.0, offset, size, || self.jobid(req))
        };
        if let Some(data) = cached {
            reply.data(&data);
            return self
                .ops
                .kernel_cached(ino.0, offset, data.len() as u64, flags.0);
        }
        self.spawn(
            req,
            |s| async move { s.read(fh.0, offset, size).await },
            reply,
            move |r, data, s| {
                r.data(&data);
                s.kernel_cached(ino.0, offset, data.len() as u64, flags.0);
            },
        );
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        // A write that extends what the handle buffers is copied in on this thread.
        let written = {
            let _rt = self.rt.enter();
            self.ops
                .write_buffered(fh.0, offset, data, || self.jobid(req))
        };
        if let Some(len) = written {
            reply.written(len);
            return self.ops.kernel_cached(ino.0, offset, len.into(), flags.0);
        }
        // The request buffer is reused for the next request: the task gets a copy.
        let data = data.to_vec();
        self.spawn(
            req,
            |s| async move { s.write(fh.0, offset, &data).await },
            reply,
            move |r, n, s| {
                r.written(n);
                s.kernel_cached(ino.0, offset, n.into(), flags.0);
            },
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
        // Most closes have nothing to do: answered here, without a task and its thread
        // wake-ups.
        let Some(pending) = self.ops.flush_at_once(ino.0, fh.0, lock_owner.0) else {
            return reply.ok();
        };
        self.spawn_as(
            self.ops.handle_jobid(fh.0),
            move |s| async move { s.flush(ino.0, fh.0, lock_owner.0, pending).await },
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
        // The last close of an open file description (which may have taken a flock).
        let owner = lock_owner.map(|o| o.0);
        self.spawn_as(
            self.ops.handle_jobid(fh.0),
            |s| async move { s.release(ino.0, fh.0, owner).await },
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
        self.spawn_ok(req, |s| async move { s.fsync(fh.0).await }, reply);
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.spawn(
            req,
            |s| async move { s.opendir(ino.0) },
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
        let ops = self.ops.clone();
        self.run_here_first(async move {
            match ops.readdir(fh.0, offset, &cred, &mut reply).await {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn readdirplus(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectoryPlus,
    ) {
        let cred = self.cred(req);
        let ops = self.ops.clone();
        let ttl = self.opts().attr_timeout.min(self.opts().entry_timeout);
        let mut sink = PlusReply { reply, ttl };
        self.run_here_first(async move {
            match ops.readdirplus(fh.0, offset, &cred, &mut sink).await {
                Ok(()) => sink.reply.ok(),
                Err(e) => sink.reply.error(errno(e)),
            }
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
        self.ops.releasedir(fh.0);
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
        self.spawn_ok(req, |s| async move { s.fsyncdir().await }, reply);
    }

    fn statfs(&self, req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        self.spawn(
            req,
            |s| async move { s.statfs().await },
            reply,
            |r, st, _| {
                let (blocks, bfree, bavail) = (st.blocks, st.bfree, st.bavail);
                let (files, ffree) = (st.files, st.ffree);
                r.statfs(
                    blocks, bfree, bavail, files, ffree, st.bsize, st.namelen, st.bsize,
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
        let (cred, name) = self.named(req, name);
        let value = value.to_vec();
        self.spawn_ok(
            req,
            |s| async move { s.setxattr(ino.0, &name, &value, flags, &cred).await },
            reply,
        );
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        // Asked before every write(2): answered here while the absence is fresh.
        if self.ops.known_absent(ino.0, name.as_bytes()) {
            return reply.error(fuser::Errno::from_i32(libc::ENODATA));
        }
        let name = name.as_bytes().to_vec();
        let cred = self.cred(req);
        self.spawn(
            req,
            |s| async move { s.getxattr(ino.0, &name, size, &cred).await },
            reply,
            |r, v, _| xattr_reply(r, v),
        );
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let cred = self.cred(req);
        self.spawn(
            req,
            |s| async move { s.listxattr(ino.0, size, &cred).await },
            reply,
            |r, v, _| xattr_reply(r, v),
        );
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let (cred, name) = self.named(req, name);
        self.spawn_ok(
            req,
            |s| async move { s.removexattr(ino.0, &name, &cred).await },
            reply,
        );
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        // Called only without `default_permissions`.
        let cred = self.cred(req);
        let mask = (mask.bits() & 0o7) as u32;
        self.spawn_ok(
            req,
            |s| async move { s.access(ino.0, mask, &cred).await },
            reply,
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
        let (cred, name) = self.named(req, name);
        let mode = masked(mode, umask);
        self.spawn(
            req,
            |s| async move { s.create(parent.0, &name, mode, flags, cred).await },
            reply,
            |r, (e, o), s| {
                let opts = s.opts();
                r.created(
                    &opts.entry_timeout.min(opts.attr_timeout),
                    &file_attr(e.ino, &e.attr),
                    Generation(0),
                    FileHandle(o.fh),
                    fopen_flags(opts, o),
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
        self.spawn_ok(
            req,
            |s| async move { s.fallocate(fh.0, offset, length, mode).await },
            reply,
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
        let (offset, hole) = match seek_request(offset, whence) {
            Ok(r) => r,
            Err(e) => return reply.error(errno(e)),
        };
        self.spawn(
            req,
            move |s| async move { s.seek(fh.0, offset, hole).await },
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
        let lock = KernelLock {
            start,
            end,
            typ,
            owner: lock_owner.0,
            pid,
        };
        self.spawn(
            req,
            move |s| async move { s.getlk(ino.0, lock).await },
            reply,
            |r, l, _| r.locked(l.start, l.end, l.typ, l.pid),
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
        let lock = KernelLock {
            start,
            end,
            typ,
            owner: lock_owner.0,
            pid,
        };
        let tid = req.pid();
        self.spawn_ok(
            req,
            move |s| async move { s.setlk(ino.0, lock, sleep, tid).await },
            reply,
        );
    }
}
