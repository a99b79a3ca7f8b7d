//! Directory handles: opendir, readdir and readdirplus over the handle's
//! [`DirStream`], releasedir, and fsyncdir.

use super::Ops;
use super::dir_stream::{DOT_OFFSET, DOTDOT_OFFSET, DirSink, DirStream};
use crate::errno::{Failed, FsResult};
use weft_proto::mdt::{Attr, Credentials};

/// Takes the entries of a readdirplus reply until it is full.
pub trait DirPlusSink: Send {
    /// Adds an entry named `name` for inode `ino` at stream offset `offset`, with its
    /// attributes (`None` for `.` and `..`, whose attributes the kernel neither reads nor
    /// takes a reference on: `fuse_direntplus_link` skips both names); returns true if the
    /// reply is full (and the entry was not added).
    fn add(&mut self, ino: u64, offset: u64, name: &[u8], attr: Option<&Attr>) -> bool;
}

impl Ops {
    /// Opens directory `ino`; returns the handle number.
    pub fn opendir(&self, ino: u64) -> FsResult<u64> {
        let fid = self.fid(ino)?;
        let fh = self.handle_ids.next();
        self.dirs.insert(fh, DirStream::new(fid, ino));
        Ok(fh)
    }

    /// Closes directory handle `fh`.
    pub fn releasedir(&self, fh: u64) {
        self.dirs.remove(fh);
    }

    /// Makes this client's metadata changes durable (the MDTs answer changes before they
    /// are).
    pub async fn fsyncdir(&self) -> FsResult<()> {
        Ok(self.client.sync_metadata().await?)
    }

    fn dir(&self, fh: u64) -> FsResult<std::sync::Arc<DirStream>> {
        self.dirs.get(fh).ok_or(Failed::code(libc::EBADF))
    }

    /// Fills a readdir reply of handle `fh` from stream offset `offset`.
    pub async fn readdir(
        &self,
        fh: u64,
        offset: u64,
        cred: &Credentials,
        sink: &mut impl DirSink,
    ) -> FsResult<()> {
        let dir = self.dir(fh)?;
        dir.fill(&self.client, &self.inodes, offset, cred, sink)
            .await
    }

    /// Fills a readdirplus reply of handle `fh` from stream offset `offset`; a kernel
    /// reference is taken on every entry that fits.
    pub async fn readdirplus(
        &self,
        fh: u64,
        offset: u64,
        cred: &Credentials,
        sink: &mut impl DirPlusSink,
    ) -> FsResult<()> {
        let dir = self.dir(fh)?;
        for (off, name, ino) in [
            (DOT_OFFSET, &b"."[..], Some(dir.ino)),
            (DOTDOT_OFFSET, &b".."[..], self.inodes.parent(dir.ino)),
        ] {
            if offset >= off {
                continue;
            }
            if sink.add(ino.unwrap_or(dir.ino), off, name, None) {
                return Ok(());
            }
        }
        let (page, start) = dir.page(&self.client, offset, true, cred).await?;
        for e in page.get(start..).unwrap_or_default() {
            let attr = match e.attr.clone() {
                Some(a) => a,
                None => self.client.getattr(e.fid).await?,
            };
            // A reference is taken only for an entry that fits in the reply.
            let ino = self.inodes.ino_of(e.fid);
            let attr = self.local_view(ino, attr).await;
            if sink.add(ino, e.cookie, &e.name, Some(&attr)) {
                break;
            }
            self.inodes.reference(e.fid, Some(dir.ino));
        }
        Ok(())
    }
}
