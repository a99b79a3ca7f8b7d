//! What makes a handle's writes visible and durable, and ends it: `flush` (close-to-open:
//! data on the OSTs, size on the MDT), `fsync` (and durable there), `write_back` before a
//! truncate made elsewhere, `truncate` and `close`.

use super::{File, State};
use crate::error::ClientError;
use crate::pcc::local::Kind;
use weft_rpc::RequestContext;

impl File {
    /// Writes buffered data to the OSTs and records the size (and the new data version) on
    /// the MDT, keeping the file open; the OSTs are not asked to make it durable. This is
    /// what `close(2)` needs: the next open on any client sees the bytes and the size
    /// (close-to-open), and write errors reach the closer, without fsync's cost. Returns
    /// the first write error since the last report.
    ///
    /// Its requests go in the context the file was opened in (a FUSE `FLUSH` comes from
    /// whichever process closes a descriptor, possibly while it is in `execve`).
    pub async fn flush(&self) -> Result<(), ClientError> {
        self.flush_in(&self.ctx).await
    }

    /// [`flush`](Self::flush) with its writes of buffered data in `ctx` (the size it
    /// records in the context the file was opened in).
    pub async fn flush_in(&self, ctx: &RequestContext) -> Result<(), ClientError> {
        let mut st = self.state.lock().await;
        self.check_open(&st)?;
        self.flush_locked(ctx, &mut st).await?;
        self.merge_size(&mut st).await
    }

    /// Whether [`flush`](Self::flush) would find nothing to do and succeed: no buffered
    /// bytes, no flush in flight, no write error waiting, nothing to record on the MDT and
    /// the handle still open. False when that cannot be told without waiting (another
    /// call holds the handle's state), so a caller may skip `flush` only on `true`.
    pub fn nothing_to_flush(&self) -> bool {
        self.state.try_lock().is_ok_and(|st| {
            !st.closed
                && st.dirty.is_empty()
                && st.flushing.is_none()
                && st.error.is_none()
                && !st.modified
        })
    }

    /// Records what this handle wrote on the MDT (size, times, data version), once per
    /// batch of writes: a later close does not stamp the times again, so times set
    /// explicitly after a flush (`cp -p`, `touch -d`) stay.
    async fn merge_size(&self, st: &mut State) -> Result<(), ClientError> {
        if st.modified {
            let (size, blocks) = (self.size.get(), st.known_blocks());
            self.on_handle(|h| self.mdt.size_merge(h, Some(size), blocks, true))
                .await?;
            st.modified = false;
        }
        Ok(())
    }

    /// Writes this handle's buffered bytes to the OSTs and waits, recording nothing on the
    /// MDT: a truncate made through another handle (or by path) must cut them, so it comes
    /// first. A write error stays for this handle's next write, fsync or close.
    pub async fn write_back(&self) {
        self.write_back_in(&self.ctx).await
    }

    /// [`write_back`](Self::write_back) with its writes in `ctx`.
    pub async fn write_back_in(&self, ctx: &RequestContext) {
        let mut st = self.state.lock().await;
        if st.closed {
            return;
        }
        self.settle(&mut st).await;
        self.start_flush(ctx, &mut st);
        self.settle(&mut st).await;
    }

    /// Takes `size` as the file's size after a truncate made elsewhere (following
    /// [`write_back`](Self::write_back)): [`size`](Self::size), later appends and the size
    /// recorded at close start from it.
    pub async fn size_changed(&self, size: u64) {
        let mut st = self.state.lock().await;
        self.size.set(size);
        st.blocks.clear();
    }

    /// Writes buffered data, makes it durable on the OSTs, records the size on the MDT
    /// and makes that (and this client's other metadata changes) durable there.
    pub async fn fsync(&self) -> Result<(), ClientError> {
        self.fsync_in(&self.ctx).await
    }

    /// [`fsync`](Self::fsync) with its OST requests in `ctx` (the MDT's in the context the
    /// file was opened in).
    pub async fn fsync_in(&self, ctx: &RequestContext) -> Result<(), ClientError> {
        let mut st = self.state.lock().await;
        self.check_open(&st)?;
        if let Some(local) = self.local().filter(|l| l.kind == Kind::ReadWrite) {
            // Durable on the local disk: a crash before the copy-back loses nothing.
            return local.sync().await;
        }
        self.flush_locked(ctx, &mut st).await?;
        let touched = std::mem::take(&mut st.touched);
        let syncs = touched
            .iter()
            .map(|&(ost, obj)| self.core.engine().sync(ctx, ost, obj));
        for r in futures::future::join_all(syncs).await {
            r?;
        }
        self.merge_size(&mut st).await?;
        self.core.sync_metadata().await
    }

    /// Sets the file's size: drops buffered data past it, punches every object to its share
    /// of the new size, and records the size on the MDT.
    pub async fn truncate(&self, size: u64) -> Result<(), ClientError> {
        self.truncate_in(&self.ctx, size).await
    }

    /// [`truncate`](Self::truncate) with the writes of buffered data in `ctx` (the other
    /// requests in the context the file was opened in).
    pub async fn truncate_in(&self, ctx: &RequestContext, size: u64) -> Result<(), ClientError> {
        let mut st = self.state.lock().await;
        self.check_open(&st)?;
        if let Some(local) = self.local().filter(|l| l.kind == Kind::ReadWrite) {
            local.set_len(size)?;
            self.size.set(size);
            return Ok(());
        }
        self.flush_locked(ctx, &mut st).await?;
        // What was written before the truncate gets its data version now; the truncate
        // itself sets size, times and version on the MDT.
        self.merge_size(&mut st).await?;
        // Another client may have instantiated components this handle has not seen.
        let layout = self.refresh_layout().await?;
        self.core
            .truncate_objects(&self.ctx, self.fid, layout.as_deref(), size)
            .await?;
        let set = weft_proto::mdt::SetAttr {
            size: Some(size),
            ..Default::default()
        };
        self.mdt
            .setattr(self.fid, set, &weft_proto::mdt::Credentials::root())
            .await?;
        self.core.cache().invalidate(self.fid);
        self.size.set(size);
        st.blocks.clear();
        Ok(())
    }

    /// Writes what is buffered and closes the handle, merging the size into the MDT. The
    /// first write error since the last fsync is returned (after the handle is closed).
    /// Its requests go in the context the file was opened in.
    pub async fn close(&self) -> Result<(), ClientError> {
        let mut st = self.state.lock().await;
        if !st.closed && self.evicted() {
            return self.close_evicted(&mut st).await;
        }
        self.check_open(&st)?;
        let flushed = self.flush_locked(&self.ctx, &mut st).await;
        st.closed = true;
        self.detach_local();
        let size = st.modified.then(|| self.size.get());
        let blocks = st.modified.then(|| st.known_blocks()).flatten();
        let modified = st.modified;
        let closed = self
            .on_handle(|h| self.mdt.close(h, size, blocks, modified))
            .await;
        flushed.and(closed)
    }

    /// Lets go of the handle's local copy (PCC): a read-write one is copied into the file
    /// system after the last close here.
    fn detach_local(&self) {
        if let Some(local) = self.local.write().take()
            && local.kind == Kind::ReadWrite
        {
            local.handle_closed();
        }
    }

    /// Ends a handle opened before this node was evicted: the MDT closed it already, so
    /// nothing is sent; buffered changes are dropped. EIO if it had changes (they were
    /// refused or are dropped now), else nothing to report.
    async fn close_evicted(&self, st: &mut State) -> Result<(), ClientError> {
        self.settle(st).await;
        st.dirty.clear();
        self.core.release_dirty(std::mem::take(&mut st.dirty_bytes));
        st.closed = true;
        self.detach_local();
        let lost = st.modified || st.error.take().is_some();
        if lost {
            Err(super::evicted_error())
        } else {
            Ok(())
        }
    }
}
