//! Attributes: lookups, `getattr` with the size from the OSTs (glimpse), `setattr` and the
//! object punches a size change needs, extended attributes, `statfs` and metadata sync.

use super::Client;
use crate::error::ClientError;
use crate::layout;
use crate::mdt::Found;
use weft_proto::mdt::{Attr, Credentials, FileKind, SetAttr, StatFs, XattrMode};
use weft_proto::{Errno, Fid};

impl Client {
    /// Looks `name` up in directory `parent`.
    pub async fn lookup(
        &self,
        parent: Fid,
        name: &[u8],
        cred: &Credentials,
    ) -> Result<Attr, ClientError> {
        let attr = self.lookup_no_glimpse(parent, name, cred).await?;
        self.glimpse(attr).await
    }

    /// A lookup with the size the MDT knows (an open asks the OSTs itself if it must).
    pub(super) async fn lookup_no_glimpse(
        &self,
        parent: Fid,
        name: &[u8],
        cred: &Credentials,
    ) -> Result<Attr, ClientError> {
        let found = self
            .in_shard(parent, name, |dir, mdt| async move {
                mdt.lookup_entry(dir, name, cred).await
            })
            .await?;
        let attr = match found {
            Found::Here(attr) => attr,
            Found::Elsewhere(fid) => self.mdt(fid)?.getattr(fid).await?,
        };
        self.restore_ahead.note(parent, &attr);
        Ok(attr)
    }

    /// The attributes of `fid`. A regular file open somewhere gets its size from the OSTs
    /// (glimpse), so a stat during a parallel write shows the bytes written so far.
    pub async fn getattr(&self, fid: Fid) -> Result<Attr, ClientError> {
        let attr = self.mdt(fid)?.getattr(fid).await?;
        self.glimpse(attr).await
    }

    pub(super) async fn glimpse(&self, mut attr: Attr) -> Result<Attr, ClientError> {
        // Held in another client's read-write PCC: the size is there. Wait for its
        // copy-back (bounded); if it does not come, the size the file system holds.
        if attr.kind == FileKind::Regular && self.pcc_held_elsewhere(&attr) {
            match self.pcc_wait_elsewhere(attr.fid).await {
                Ok(()) => attr = self.mdt(attr.fid)?.getattr(attr.fid).await?,
                Err(e) => tracing::warn!(fid = %attr.fid, error = %e, "PCC copy-back not seen"),
            }
        }
        if attr.kind != FileKind::Regular || attr.open_count == 0 {
            return Ok(attr);
        }
        let Some(layout) = self.mdt(attr.fid)?.get_layout(attr.fid).await? else {
            return Ok(attr);
        };
        let mut size = attr.size;
        let mut blocks = 0;
        let mut asks = Vec::new();
        for c in &layout.components {
            for (i, &ost) in c.osts.iter().enumerate() {
                let obj = c.object(attr.fid, i as u32);
                asks.push(
                    async move { (c, i as u32, self.engine.getattr(&self.ctx, ost, obj).await) },
                );
            }
        }
        for (c, stripe, r) in futures::future::join_all(asks).await {
            let a = r?;
            if a.exists {
                size = size.max(layout::file_end_for(c, stripe, a.size));
                blocks += a.blocks;
            }
        }
        attr.size = size;
        // The OSTs know the allocation exactly; the MDT only what writers last told it.
        attr.blocks = blocks;
        Ok(attr)
    }

    /// Changes attributes; a size change also punches the objects.
    pub async fn setattr(
        &self,
        fid: Fid,
        set: SetAttr,
        cred: &Credentials,
    ) -> Result<Attr, ClientError> {
        let mdt = self.mdt(fid)?;
        if let Some(size) = set.size {
            // Permission first (the MDT checks it), then the data. The MDT refuses (EBUSY)
            // to cut or extend a released file to a size other than 0: its data comes back
            // first, then the truncate is sent again. Other truncates cost no extra call.
            let attr = match mdt.setattr(fid, set.clone(), cred).await {
                Err(e) if e.errno() == Errno::Busy => {
                    if mdt.getattr(fid).await?.hsm_flags & weft_proto::hsm::HSM_RELEASED == 0 {
                        return Err(e);
                    }
                    self.restore_whole(fid).await?;
                    mdt.setattr(fid, set, cred).await?
                }
                r => r?,
            };
            let layout = mdt.get_layout(fid).await?;
            self.core
                .truncate_objects(&self.ctx, fid, layout.as_ref(), size)
                .await?;
            self.cache.invalidate(fid);
            self.open_sizes().truncated(fid, size);
            return Ok(attr);
        }
        let owner_or_mode = set.mode.is_some() || set.uid.is_some() || set.gid.is_some();
        let attr = mdt.setattr(fid, set, cred).await?;
        if owner_or_mode && attr.kind == FileKind::Directory {
            self.copy_to_shards(&attr).await?;
        }
        Ok(attr)
    }

    /// An extended attribute.
    pub async fn getxattr(
        &self,
        fid: Fid,
        name: &[u8],
        cred: &Credentials,
    ) -> Result<Vec<u8>, ClientError> {
        self.mdt(fid)?.getxattr(fid, name, cred).await
    }

    /// Sets an extended attribute.
    pub async fn setxattr(
        &self,
        fid: Fid,
        name: &[u8],
        value: &[u8],
        mode: XattrMode,
        cred: &Credentials,
    ) -> Result<(), ClientError> {
        self.mdt(fid)?.setxattr(fid, name, value, mode, cred).await
    }

    /// Extended attribute names.
    pub async fn listxattr(
        &self,
        fid: Fid,
        cred: &Credentials,
    ) -> Result<Vec<Vec<u8>>, ClientError> {
        self.mdt(fid)?.listxattr(fid, cred).await
    }

    /// Removes an extended attribute.
    pub async fn removexattr(
        &self,
        fid: Fid,
        name: &[u8],
        cred: &Credentials,
    ) -> Result<(), ClientError> {
        self.mdt(fid)?.removexattr(fid, name, cred).await
    }

    /// File system usage as `statfs` reports it: blocks from every OST, inodes from the MDTs.
    pub async fn statfs(&self) -> Result<StatFs, ClientError> {
        let config = self.cluster.config();
        let mut out = StatFs {
            bsize: 4096,
            namelen: weft_proto::NAME_MAX as u32,
            ..Default::default()
        };
        for t in config.targets_of(weft_proto::TargetKind::Ost) {
            let s = self
                .cluster
                .ost(t.id.index)?
                .in_context(&self.ctx)
                .statfs()
                .await?;
            let scale = |b: u64| b.saturating_mul(u64::from(s.bsize)) / 4096;
            out.blocks += scale(s.blocks);
            out.bfree += scale(s.bfree);
            out.bavail += scale(s.bavail);
        }
        for t in config.targets_of(weft_proto::TargetKind::Mdt) {
            let s = self.mdt_at(t.id.index)?.statfs().await?;
            out.files += s.files;
            out.ffree += s.ffree;
        }
        Ok(out)
    }
}
