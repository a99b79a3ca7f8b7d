//! Opening files by FID, by name (creating with O_CREAT) and by path, and whole-file
//! reads and writes by path.

use super::{Client, OpenOptions};
use crate::error::ClientError;
use crate::file::File;
use crate::mdt::{MdtClient, NewFile};
use std::sync::Arc;
use weft_proto::layout::{Layout, LayoutTemplate};
use weft_proto::mdt::{AccessMode, Attr, Credentials, FileKind, OpenFlags};
use weft_proto::{Errno, Fid, WireError};

impl Client {
    /// Opens an existing file by FID.
    pub async fn open(
        self: &Arc<Self>,
        fid: Fid,
        opts: OpenOptions,
        cred: &Credentials,
    ) -> Result<File, ClientError> {
        self.open_with(fid, opts, cred, true).await
    }

    /// Opens an existing file by FID, through the persistent cache (`pcc`) or around it
    /// (the cache's own copies).
    pub(crate) async fn open_with(
        self: &Arc<Self>,
        fid: Fid,
        opts: OpenOptions,
        cred: &Credentials,
        pcc: bool,
    ) -> Result<File, ClientError> {
        let mdt = self.mdt(fid)?;
        let flags = OpenFlags {
            access: opts.access,
            truncate: opts.truncate,
        };
        let mut opened = mdt.open(fid, flags, cred).await?;
        // Held in another client's read-write PCC: its data is not in the file system
        // yet. Wait for the copy-back, then open again (a truncate the first open made is
        // made again after the copy).
        if self.pcc_held_elsewhere(&opened.attr) {
            let _ = mdt.close(opened.handle, None, None, false).await;
            self.pcc_wait_elsewhere(fid).await?;
            opened = mdt.open(fid, flags, cred).await?;
        }
        if opened.attr.kind == FileKind::Directory && opts.access != AccessMode::Read {
            let _ = mdt.close(opened.handle, None, None, false).await;
            return Err(ClientError::Remote(WireError::new(
                Errno::IsDir,
                "is a directory",
            )));
        }
        let file = self
            .finish_open(mdt, opened.handle, opened.attr, opened.layout, opts, pcc)
            .await?;
        if file.is_released() {
            self.restore_ahead(fid, file.attr_at_open().archive_id, cred);
        }
        Ok(file)
    }

    /// Opens (and with `opts.create`, creates) `name` in `parent`.
    pub async fn open_in(
        self: &Arc<Self>,
        parent: Fid,
        name: &[u8],
        opts: OpenOptions,
        layout: Option<LayoutTemplate>,
        cred: &Credentials,
    ) -> Result<File, ClientError> {
        let Some(mode) = opts.create else {
            let attr = self.lookup_no_glimpse(parent, name, cred).await?;
            return self.open(attr.fid, opts, cred).await;
        };
        let flags = OpenFlags {
            access: opts.access,
            truncate: opts.truncate,
        };
        let mode = (mode & 0o7777) | FileKind::Regular.mode_bits();
        let created = self
            .in_shard(parent, name, |dir, mdt| {
                let new = NewFile {
                    parent: dir,
                    name,
                    mode,
                    rdev: 0,
                    exclusive: opts.exclusive,
                    layout: layout.as_ref(),
                    open: Some(flags),
                };
                async move {
                    let c = mdt.create(&new, cred).await?;
                    Ok((c, mdt))
                }
            })
            .await;
        match created {
            Ok((c, mdt)) => {
                let handle = c
                    .handle
                    .ok_or_else(|| ClientError::Invalid("create returned no handle".into()))?;
                // A new file has no objects yet (an OST makes one at its first write):
                // O_TRUNC has nothing to cut, and no punch is sent.
                if !c.created && self.pcc_held_elsewhere(&c.attr) {
                    // An existing file of another client's read-write PCC: wait for it.
                    let _ = mdt.close(handle, None, None, false).await;
                    return self.open(c.attr.fid, opts, cred).await;
                }
                let opts = OpenOptions {
                    truncate: opts.truncate && !c.created,
                    ..opts
                };
                let mut file = self
                    .finish_open(mdt, handle, c.attr, c.layout, opts, true)
                    .await?;
                if c.created {
                    file.set_created();
                }
                Ok(file)
            }
            // The name exists and O_EXCL was not asked: open what is there.
            Err(e) if e.errno() == Errno::Exist && !opts.exclusive => {
                let attr = self.lookup_no_glimpse(parent, name, cred).await?;
                self.open(attr.fid, opts, cred).await
            }
            Err(e) => Err(e),
        }
    }

    /// Opens a path (creating it with `opts.create`).
    pub async fn open_path(
        self: &Arc<Self>,
        path: &str,
        opts: OpenOptions,
        cred: &Credentials,
    ) -> Result<File, ClientError> {
        // A directory of the path replaced meanwhile (renamed over, or migrated to another
        // MDT) answers ESTALE: resolve once more, as the kernel does (`retry_estale`).
        let mut retried = false;
        loop {
            let r = async {
                let (parent, name) = self.resolve_parent(path, cred).await?;
                self.open_in(parent.fid, &name, opts, None, cred).await
            }
            .await;
            match r {
                Err(e) if e.errno() == Errno::Stale && !retried => retried = true,
                r => return r,
            }
        }
    }

    async fn finish_open(
        self: &Arc<Self>,
        mdt: Arc<MdtClient>,
        handle: u64,
        attr: Attr,
        layout: Option<Layout>,
        opts: OpenOptions,
        pcc: bool,
    ) -> Result<File, ClientError> {
        if opts.truncate && opts.access != AccessMode::Read {
            // The MDT set the size to 0; the objects must follow.
            self.core
                .truncate_objects(&self.ctx, attr.fid, layout.as_ref(), 0)
                .await?;
            self.cache.invalidate(attr.fid);
        }
        // Close-to-open: cached pages of an older data version are dropped.
        self.cache.validate(attr.fid, attr.data_version);
        // Open elsewhere: learn the size written so far. Best effort: an OST that is down
        // fails the reads that need it, not the open.
        let attr = if attr.open_count > 1 {
            match self.glimpse(attr.clone()).await {
                Ok(a) => a,
                Err(e) => {
                    tracing::debug!(fid = %attr.fid, error = %e, "glimpse at open failed");
                    attr
                }
            }
        } else {
            attr
        };
        let file = File::new(
            self.core.clone(),
            self.ctx.clone(),
            mdt,
            handle,
            &attr,
            layout,
            opts,
        );
        // A released file is restored whole before it can change (Lustre's rule).
        if opts.access != AccessMode::Read && file.is_released() {
            file.restore_all().await?;
        }
        if pcc {
            self.pcc_on_open(&file, opts).await?;
        }
        Ok(file)
    }

    /// Reads a whole file by path (a convenience for small files).
    pub async fn read_file(
        self: &Arc<Self>,
        path: &str,
        cred: &Credentials,
    ) -> Result<bytes::Bytes, ClientError> {
        let f = self.open_path(path, OpenOptions::read(), cred).await?;
        let size = f.size().await;
        let data = f.read_at(0, size).await;
        f.close().await?;
        data
    }

    /// Writes a whole file by path, creating or truncating it.
    pub async fn write_file(
        self: &Arc<Self>,
        path: &str,
        data: &[u8],
        cred: &Credentials,
    ) -> Result<(), ClientError> {
        let f = self
            .open_path(path, OpenOptions::create(0o644), cred)
            .await?;
        let written = f.write_at(0, data).await;
        let closed = f.close().await;
        written.and(closed)
    }
}
