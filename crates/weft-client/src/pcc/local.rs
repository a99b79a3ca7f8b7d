//! A handle's local copy: the one seam where an open [`File`](crate::File) attached to
//! the persistent client cache reads (and, read-write, writes) a file of the local
//! directory instead of the OSTs. Calls block on the local disk: the async ones run on a
//! blocking thread, the `_now` ones on the caller's (the FUSE mount's reading thread).

use super::{Pcc, Stat};
use crate::error::ClientError;
use bytes::{Bytes, BytesMut};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;
use weft_proto::{Errno, WireError};

/// Whether a copy may be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A read-only copy of a file as of one data version.
    ReadOnly,
    /// A file created here, copied into the file system after its last close.
    ReadWrite,
}

/// What a handle of a read-write copy runs when it closes (the cache counts the copy's
/// opens and copies it back after the last; see `Client::pcc_rw_closed`).
pub(crate) type OnClose = Box<dyn Fn() + Send + Sync>;

/// An open local copy.
pub struct LocalCopy {
    pub(crate) kind: Kind,
    file: std::fs::File,
    path: PathBuf,
    pub(crate) pcc: Arc<Pcc>,
    on_close: Option<OnClose>,
}

pub(crate) fn io_err(e: std::io::Error, what: &str) -> ClientError {
    let errno = if e.kind() == std::io::ErrorKind::StorageFull {
        Errno::NoSpc
    } else {
        Errno::Io
    };
    ClientError::Remote(WireError::new(errno, format!("PCC {what}: {e}")))
}

impl LocalCopy {
    /// Opens the copy at `path`; `on_close` runs when the handle reading it closes.
    pub(crate) fn open(
        pcc: Arc<Pcc>,
        kind: Kind,
        path: PathBuf,
        on_close: Option<OnClose>,
    ) -> Result<Arc<Self>, ClientError> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(kind == Kind::ReadWrite)
            .open(&path)
            .map_err(|e| io_err(e, "open"))?;
        Ok(Arc::new(Self {
            kind,
            file,
            path,
            pcc,
            on_close,
        }))
    }

    /// The handle reading this copy closed.
    pub(crate) fn handle_closed(&self) {
        if let Some(f) = &self.on_close {
            f();
        }
    }

    /// The copy's length.
    pub(crate) fn len(&self) -> Result<u64, ClientError> {
        Ok(self.file.metadata().map_err(|e| io_err(e, "stat"))?.len())
    }

    /// Reads up to `len` bytes at `offset` (fewer at the end), on this thread.
    pub(crate) fn read_now(&self, offset: u64, len: u64) -> Result<Bytes, ClientError> {
        let len =
            usize::try_from(len).map_err(|_| ClientError::Invalid("read too large".into()))?;
        // Filled, not allocated zeroed: a zeroed allocation of reused memory makes the
        // allocator give it back to the kernel and fault it in again.
        let mut buf = BytesMut::with_capacity(len);
        buf.resize(len, 0);
        let mut got = 0;
        while got < len {
            match self.file.read_at(&mut buf[got..], offset + got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_err(e, "read")),
            }
        }
        buf.truncate(got);
        self.pcc.count(Stat::ReadBytes, got as u64);
        Ok(buf.freeze())
    }

    /// [`read_now`](Self::read_now) on a blocking thread.
    pub(crate) async fn read(
        self: &Arc<Self>,
        offset: u64,
        len: u64,
    ) -> Result<Bytes, ClientError> {
        let me = self.clone();
        tokio::task::spawn_blocking(move || me.read_now(offset, len))
            .await
            .map_err(|e| ClientError::Invalid(format!("PCC read task: {e}")))?
    }

    /// Writes `data` at `offset`, on this thread.
    pub(crate) fn write_now(&self, offset: u64, data: &[u8]) -> Result<(), ClientError> {
        self.file
            .write_all_at(data, offset)
            .map_err(|e| io_err(e, "write"))?;
        self.pcc.count(Stat::WriteBytes, data.len() as u64);
        Ok(())
    }

    /// [`write_now`](Self::write_now) on a blocking thread.
    pub(crate) async fn write(
        self: &Arc<Self>,
        offset: u64,
        data: Bytes,
    ) -> Result<(), ClientError> {
        let me = self.clone();
        tokio::task::spawn_blocking(move || me.write_now(offset, &data))
            .await
            .map_err(|e| ClientError::Invalid(format!("PCC write task: {e}")))?
    }

    /// Makes the copy and its name durable on the local disk.
    pub(crate) async fn sync(self: &Arc<Self>) -> Result<(), ClientError> {
        let me = self.clone();
        tokio::task::spawn_blocking(move || {
            me.file.sync_all()?;
            match me.path.parent() {
                Some(dir) => weft_durable::sync_dir(dir),
                None => Ok(()),
            }
        })
        .await
        .map_err(|e| ClientError::Invalid(format!("PCC sync task: {e}")))?
        .map_err(|e| io_err(e, "fsync"))
    }

    /// Sets the copy's length.
    pub(crate) fn set_len(&self, size: u64) -> Result<(), ClientError> {
        self.file.set_len(size).map_err(|e| io_err(e, "truncate"))
    }
}
