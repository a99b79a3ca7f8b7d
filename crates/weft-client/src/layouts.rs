//! Layout administration by FID: reading and setting layouts (`weft getstripe` /
//! `setstripe`), scanning directories with attributes and layouts (`weft find`), and
//! migrating a file to a new layout online (`weft migrate`).
//!
//! Migration works like Lustre's `lfs migrate`: the data is copied into a volatile file (an
//! unlinked file this client holds open) created with the new layout, read back and
//! compared with what was copied, and the MDT then swaps the two layouts in one
//! transaction, provided the file's data version has not moved and nobody has it open for
//! writing. Readers keep reading the old objects until they close; the MDT destroys them
//! after that.

use crate::client::{Client, OpenOptions};
use crate::error::ClientError;
use std::sync::Arc;
use weft_proto::layout::{Layout, LayoutTemplate};
use weft_proto::mdt::{AccessMode, Credentials, FileKind};
use weft_proto::{Errno, Fid, WireError};

/// What a path's layout is: a file's layout or a directory's default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LayoutOf {
    /// A regular file's layout (`None`: it has none).
    File(Option<Layout>),
    /// A directory's default layout for new files (`None`: it inherits).
    Dir(Option<LayoutTemplate>),
}

/// Bytes copied (and verified) per step of a migration.
const MIGRATE_CHUNK: u64 = 16 << 20;

/// What a migration did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Migrated {
    /// Bytes copied and verified.
    pub bytes: u64,
    /// The file's layout afterwards.
    pub layout: Option<Layout>,
}

fn remote(errno: Errno, msg: impl Into<String>) -> ClientError {
    ClientError::Remote(WireError::new(errno, msg))
}

impl Client {
    /// The layout of a file or the default layout of a directory.
    pub async fn layout_of(&self, fid: Fid) -> Result<LayoutOf, ClientError> {
        let attr = self.getattr(fid).await?;
        let mdt = self.mdt(fid)?;
        match attr.kind {
            FileKind::Directory => Ok(LayoutOf::Dir(mdt.get_default_layout(fid).await?)),
            FileKind::Regular => Ok(LayoutOf::File(mdt.get_layout(fid).await?)),
            _ => Err(remote(
                Errno::NoData,
                "only files and directories have layouts",
            )),
        }
    }

    /// Sets a directory's default layout (`None` removes it), or the layout of a regular
    /// file that has no data yet.
    pub async fn set_layout(
        &self,
        fid: Fid,
        template: Option<LayoutTemplate>,
        cred: &Credentials,
    ) -> Result<(), ClientError> {
        self.cluster()
            .mdt_of(fid)?
            .set_layout(fid, template, cred)
            .await
    }

    /// Creates an empty regular file `name` in `parent` with `layout` (`weft setstripe` on
    /// a new path); EEXIST if the name exists.
    pub async fn create_with_layout(
        self: &Arc<Self>,
        parent: Fid,
        name: &[u8],
        mode: u32,
        layout: LayoutTemplate,
        cred: &Credentials,
    ) -> Result<Fid, ClientError> {
        let opts = OpenOptions {
            access: AccessMode::Write,
            create: Some(mode),
            exclusive: true,
            truncate: false,
            append: false,
        };
        let f = self.open_in(parent, name, opts, Some(layout), cred).await?;
        let fid = f.fid();
        f.close().await?;
        Ok(fid)
    }

    /// Re-stripes the regular file `fid`, which has a name in directory `parent`, to
    /// `template`, online. Fails with EBUSY, changing nothing, when the file is written
    /// while it is copied.
    pub async fn migrate(
        self: &Arc<Self>,
        parent: Fid,
        fid: Fid,
        template: LayoutTemplate,
        cred: &Credentials,
    ) -> Result<Migrated, ClientError> {
        let src = self.open(fid, OpenOptions::read(), cred).await?;
        let result = self.migrate_open(parent, &src, template, cred).await;
        let closed = src.close().await;
        let migrated = result?;
        closed?;
        Ok(migrated)
    }

    async fn migrate_open(
        self: &Arc<Self>,
        parent: Fid,
        src: &crate::File,
        template: LayoutTemplate,
        cred: &Credentials,
    ) -> Result<Migrated, ClientError> {
        let attr = self.getattr(src.fid()).await?;
        if attr.kind != FileKind::Regular {
            return Err(remote(Errno::Inval, "only regular files migrate"));
        }
        // The volatile file: created beside the file (same MDT, same permissions), then
        // unlinked at once; it lives as an orphan held open by this client.
        let tmp = format!(
            ".weft-migrate.{:x}.{:x}.{}",
            attr.fid.seq,
            attr.fid.oid,
            std::process::id()
        );
        let opts = OpenOptions {
            access: AccessMode::ReadWrite,
            create: Some(0o600),
            exclusive: true,
            truncate: false,
            append: false,
        };
        let vol = self
            .open_in(parent, tmp.as_bytes(), opts, Some(template), cred)
            .await?;
        let unlinked = self.unlink(parent, tmp.as_bytes(), cred).await;
        let result = match unlinked {
            Ok(()) => {
                self.copy_verify_swap(src, &vol, attr.data_version, attr.size, cred)
                    .await
            }
            Err(e) => Err(e),
        };
        // Closing the volatile file destroys whichever layout it holds now (the old one
        // after a swap, once no reader pins it; the copy after a failure).
        let closed = vol.close().await;
        let migrated = result?;
        closed?;
        Ok(migrated)
    }

    async fn copy_verify_swap(
        &self,
        src: &crate::File,
        vol: &crate::File,
        data_version: u64,
        size: u64,
        cred: &Credentials,
    ) -> Result<Migrated, ClientError> {
        // Copy, remembering a checksum of every chunk as read from the source.
        let mut sums = Vec::new();
        let mut off = 0u64;
        while off < size {
            let data = src.read_at(off, MIGRATE_CHUNK.min(size - off)).await?;
            if data.is_empty() {
                return Err(remote(Errno::Io, "the file ended early while copying"));
            }
            sums.push(weft_proto::checksum::crc32c(&data));
            vol.write_at(off, &data).await?;
            off += data.len() as u64;
        }
        vol.fsync().await?;
        // Verify: what the new objects hold must be what was read.
        self.cache().invalidate(vol.fid());
        let mut off = 0u64;
        for (i, want) in sums.iter().enumerate() {
            let data = vol.read_at(off, MIGRATE_CHUNK.min(size - off)).await?;
            if weft_proto::checksum::crc32c(&data) != *want {
                return Err(remote(
                    Errno::Io,
                    format!("verification failed: chunk {i} of the copy differs"),
                ));
            }
            off += data.len() as u64;
        }
        let layout = self
            .cluster()
            .mdt_of(src.fid())?
            .swap_layouts(src.fid(), vol.fid(), vol.handle(), data_version, cred)
            .await?;
        Ok(Migrated {
            bytes: size,
            layout,
        })
    }
}
