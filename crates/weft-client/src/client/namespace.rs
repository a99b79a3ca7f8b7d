//! Changes to names: mkdir (plain, remote, striped), migrate, mknod, symlink, link, unlink,
//! rmdir and rename, each sent to the MDT holding the name's directory shard.

use super::Client;
use crate::error::ClientError;
use crate::mdt::NewFile;
use weft_proto::mdt::{Attr, Credentials, DirEntry, DirHash, RenameFlags};
use weft_proto::{Errno, Fid};

impl Client {
    /// Creates a directory.
    pub async fn mkdir(
        &self,
        parent: Fid,
        name: &[u8],
        mode: u32,
        cred: &Credentials,
    ) -> Result<Attr, ClientError> {
        self.in_shard(parent, name, |dir, mdt| async move {
            mdt.mkdir(dir, name, mode, cred).await
        })
        .await
    }

    /// Creates a directory whose inode lives on MDT `mdt` (`weft mkdir -i`): a remote
    /// directory when `mdt` is not the parent's MDT. Everything created inside it lives on
    /// `mdt`.
    pub async fn mkdir_on(
        &self,
        parent: Fid,
        name: &[u8],
        mode: u32,
        mdt: u32,
        cred: &Credentials,
    ) -> Result<Attr, ClientError> {
        self.in_shard(parent, name, |dir, m| async move {
            m.mkdir_on(dir, name, mode, mdt, cred).await
        })
        .await
    }

    /// Creates a striped directory (`weft mkdir -c COUNT`): `count` shards on the MDT of
    /// the parent (of the name's shard) and the next ones, names spread by `hash`.
    pub async fn mkdir_striped(
        &self,
        parent: Fid,
        name: &[u8],
        mode: u32,
        count: u32,
        hash: DirHash,
        cred: &Credentials,
    ) -> Result<Attr, ClientError> {
        self.in_shard(parent, name, |dir, m| async move {
            m.mkdir_striped(dir, name, mode, count, hash, cred).await
        })
        .await
    }

    /// Migrates directory `name` of `parent` to MDT `mdt` (`weft migrate -m`; root only):
    /// its attributes and entries move to a new directory there, which takes the name. The
    /// inodes its entries name stay where they are. Answers the new directory's FID (the
    /// same directory's if it is on `mdt` already).
    pub async fn migrate_dir(
        &self,
        parent: Fid,
        name: &[u8],
        mdt: u32,
        cred: &Credentials,
    ) -> Result<Fid, ClientError> {
        self.in_shard(parent, name, |dir, m| async move {
            m.migrate_dir(dir, name, mdt, cred).await
        })
        .await
    }

    /// The index of the MDT holding `fid`.
    pub fn mdt_index_of(&self, fid: Fid) -> Result<u32, ClientError> {
        Ok(self.mdt(fid)?.index())
    }

    /// Creates a non-regular node (FIFO, socket, device); `mode` includes the type bits.
    pub async fn mknod(
        &self,
        parent: Fid,
        name: &[u8],
        mode: u32,
        rdev: u64,
        cred: &Credentials,
    ) -> Result<Attr, ClientError> {
        let created = self
            .in_shard(parent, name, |dir, mdt| async move {
                let new = NewFile {
                    rdev,
                    ..NewFile::exclusive(dir, name, mode)
                };
                mdt.create(&new, cred).await
            })
            .await?;
        Ok(created.attr)
    }

    /// Creates a symbolic link.
    pub async fn symlink(
        &self,
        parent: Fid,
        name: &[u8],
        target: &[u8],
        cred: &Credentials,
    ) -> Result<Attr, ClientError> {
        self.in_shard(parent, name, |dir, mdt| async move {
            mdt.symlink(dir, name, target, cred).await
        })
        .await
    }

    /// A symbolic link's target.
    pub async fn readlink(&self, fid: Fid) -> Result<Vec<u8>, ClientError> {
        self.mdt(fid)?.readlink(fid).await
    }

    /// Adds a hard link.
    pub async fn link(
        &self,
        fid: Fid,
        parent: Fid,
        name: &[u8],
        cred: &Credentials,
    ) -> Result<Attr, ClientError> {
        self.in_shard(parent, name, |dir, mdt| async move {
            mdt.link(fid, dir, name, cred).await
        })
        .await
    }

    /// Removes a name.
    pub async fn unlink(
        &self,
        parent: Fid,
        name: &[u8],
        cred: &Credentials,
    ) -> Result<(), ClientError> {
        self.in_shard(parent, name, |dir, mdt| async move {
            mdt.unlink(dir, name, cred).await
        })
        .await
    }

    /// Removes an empty directory.
    pub async fn rmdir(
        &self,
        parent: Fid,
        name: &[u8],
        cred: &Credentials,
    ) -> Result<(), ClientError> {
        self.in_shard(parent, name, |dir, mdt| async move {
            mdt.rmdir(dir, name, cred).await
        })
        .await
    }

    /// Renames (or exchanges) names.
    pub async fn rename(
        &self,
        src_parent: Fid,
        src_name: &[u8],
        dst_parent: Fid,
        dst_name: &[u8],
        flags: RenameFlags,
        cred: &Credentials,
    ) -> Result<(), ClientError> {
        // Both names go to their shards; the source's MDT does the rename (with the
        // destination's MDT when that is another one). A striped parent not known yet
        // answers EREMOTE: learn its stripes once and route again.
        let mut learned = false;
        loop {
            let src = self.shard_for(src_parent, src_name);
            let dst = self.shard_for(dst_parent, dst_name);
            let r = self
                .mdt(src)?
                .rename(src, src_name, dst, dst_name, flags, cred)
                .await;
            match r {
                Err(e) if !learned && e.errno() == Errno::Remote => {
                    learned = true;
                    let a = self.dir_stripes(src_parent).await;
                    let b = self.dir_stripes(dst_parent).await;
                    if !matches!(a, Ok(Some(_))) && !matches!(b, Ok(Some(_))) {
                        return Err(e);
                    }
                }
                r => return r,
            }
        }
    }

    /// Readdirplus leaves out the attributes of remote directories (their MDT has them):
    /// asks those MDTs, all at once.
    pub(crate) async fn fill_remote_attrs<T>(
        &self,
        entries: &mut [T],
        entry: impl Fn(&mut T) -> &mut DirEntry,
    ) -> Result<(), ClientError> {
        let mut asks = Vec::new();
        for (i, e) in entries.iter_mut().enumerate() {
            let e = entry(e);
            if e.attr.is_none() {
                let fid = e.fid;
                asks.push(async move { (i, self.getattr(fid).await) });
            }
        }
        if asks.is_empty() {
            return Ok(());
        }
        for (i, attr) in futures::future::join_all(asks).await {
            if let Some(e) = entries.get_mut(i) {
                match attr {
                    Ok(a) => entry(e).attr = Some(a),
                    // Removed meanwhile: listed without attributes, as a racing unlink.
                    Err(err) if matches!(err.errno(), Errno::NoEnt | Errno::Stale) => {}
                    Err(err) => return Err(err),
                }
            }
        }
        Ok(())
    }
}
