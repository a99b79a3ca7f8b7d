//! Opening and closing files: open and create (with the close-to-open rule for the
//! kernel's page cache), release, and fsync.

use super::handles::OpenFile;
use super::{Entry, Ops, check_name};
use crate::errno::FsResult;
use weft_client::{File, OpenOptions};
use weft_proto::mdt::{AccessMode, Credentials};

/// An open file handed to the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opened {
    /// The handle number.
    pub fh: u64,
    /// Whether the kernel may keep the pages it cached of the file (`FOPEN_KEEP_CACHE`).
    pub keep_cache: bool,
}

impl Ops {
    /// Registers an open file of `ino`; returns its handle number.
    fn register(&self, ino: u64, file: File, access: AccessMode) -> u64 {
        let fh = self.handle_ids.next();
        let writable = access != AccessMode::Read;
        let jobid = self.context().jobid.clone();
        self.files
            .insert(fh, OpenFile::new(ino, file, writable, jobid));
        fh
    }

    /// Opens `ino` with `open(2)` `flags`.
    pub async fn open(&self, ino: u64, flags: i32, cred: Credentials) -> FsResult<Opened> {
        let fid = self.fid(ino)?;
        let access = self.handle_access(flags);
        let opts = OpenOptions {
            access,
            create: None,
            exclusive: false,
            truncate: flags & libc::O_TRUNC != 0,
            append: false,
        };
        let file = self.client.open(fid, opts, &cred).await?;
        if access == AccessMode::Read && !file.pcc_attached() && self.client.pcc().is_some() {
            // A read-only PCC copies the file in if its rule takes it.
            let ancestors = self.ancestors(ino);
            let facts = weft_client::pcc::facts(file.attr_at_open(), &ancestors, false);
            self.client.pcc_consider(&file, &facts);
        }
        // The kernel's cached pages stay only if the data is the version they were read
        // at (close-to-open): the MDT's version at this open.
        let version = file.attr_at_open().data_version;
        let keep_cache = !opts.truncate && self.inodes.page_cache_valid(ino, version);
        if !keep_cache {
            // At an open that found data newer than the kernel's pages, the size the
            // kernel holds (kept for up to `attr_timeout`) may be another mount's old
            // one, and close-to-open means the opener sees the size the last closer left:
            // done before the open is answered, so the opener's next stat or read asks.
            self.kernel.forget_attributes(ino);
        }
        let fh = self.register(ino, file, access);
        Ok(Opened { fh, keep_cache })
    }

    /// Creates (or opens, without `O_EXCL`) `name` in `parent` with `mode` and `open(2)`
    /// `flags`.
    pub async fn create(
        &self,
        parent: u64,
        name: &[u8],
        mode: u32,
        flags: i32,
        cred: Credentials,
    ) -> FsResult<(Entry, Opened)> {
        check_name(name)?;
        let pfid = self.fid(parent)?;
        let access = self.handle_access(flags);
        let opts = OpenOptions {
            access,
            create: Some(mode & 0o7777),
            exclusive: flags & libc::O_EXCL != 0,
            truncate: flags & libc::O_TRUNC != 0,
            append: false,
        };
        let file = self.client.open_in(pfid, name, opts, None, &cred).await?;
        if file.created() && self.client.pcc().is_some() {
            // A read-write PCC whose rule takes the file has it written locally.
            let mut ancestors = vec![pfid];
            ancestors.extend(self.ancestors(parent));
            let facts = weft_client::pcc::facts(file.attr_at_open(), &ancestors, true);
            if let Err(e) = self.client.pcc_on_create(&file, &facts).await {
                tracing::warn!(fid = %file.fid(), error = %e, "PCC: the file is written to the file system");
            }
        }
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
        let opened = Opened {
            fh,
            keep_cache: false,
        };
        Ok((entry, opened))
    }

    /// The last close of handle `fh` of `ino`; `lock_owner`: the open file description
    /// that took a `flock` on it, if one did.
    pub async fn release(&self, ino: u64, fh: u64, lock_owner: Option<u64>) -> FsResult<()> {
        if let Some(owner) = lock_owner {
            self.release_locks(ino, owner).await;
        }
        let Some(f) = self.files.remove(fh) else {
            return Ok(());
        };
        if f.writable {
            // Written data changes the version at close; the kernel's pages are ours
            // and current, but the next open cannot tell, so it rereads.
            self.inodes.page_cache_changed(f.ino);
        }
        Ok(f.file.close().await?)
    }

    /// The directories `ino` was found in, nearest first, up to the root (as far as this
    /// mount knows them).
    fn ancestors(&self, ino: u64) -> Vec<weft_proto::Fid> {
        let mut out = Vec::new();
        let mut at = ino;
        // Bounded: a chain the kernel's forgets cut, or a cycle renames left, ends it.
        for _ in 0..4096 {
            if at == crate::inodes::ROOT_INO {
                break;
            }
            let Some(parent) = self.inodes.parent(at) else {
                break;
            };
            match self.inodes.fid(parent) {
                Some(fid) => out.push(fid),
                None => break,
            }
            at = parent;
        }
        out
    }

    /// Makes what was written through `fh` durable.
    pub async fn fsync(&self, fh: u64) -> FsResult<()> {
        Ok(self.file(fh)?.file.fsync_in(self.context()).await?)
    }
}
