//! The file system as a Rust program uses it: a mount-like [`Client`] with metadata
//! operations by FID or path, and [`File`] handles for data.

use crate::budget::Budget;
use crate::cache::DataCache;
use crate::cluster::{Cluster, ClusterOptions};
use crate::error::ClientError;
use crate::file::File;
use crate::io::IoEngine;
use crate::layout;
use crate::mdt::{Found, MdtClient};
use crate::params::{ClientParams, Param};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::OwnedSemaphorePermit;
use weft_proto::layout::{Layout, LayoutTemplate};
use weft_proto::mdt::{
    AccessMode, Attr, Credentials, DirEntry, DirHash, FileKind, OpenFlags, RenameFlags, SetAttr,
    StatFs, XattrMode,
};
use weft_proto::{Errno, Fid, WireError};

/// How a client mounts.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Connections and identity.
    pub cluster: ClusterOptions,
    /// How long a data RPC is resent over a broken connection before the call fails with EIO.
    pub io_retry: Duration,
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            cluster: ClusterOptions::default(),
            io_retry: Duration::from_secs(60),
        }
    }
}

/// How to open a file (the subset of `open(2)` flags that matter here).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenOptions {
    /// Read, write or both.
    pub access: AccessMode,
    /// O_CREAT with this mode (type bits added by the library; umask already applied).
    pub create: Option<u32>,
    /// O_EXCL (with `create`).
    pub exclusive: bool,
    /// O_TRUNC.
    pub truncate: bool,
    /// O_APPEND.
    pub append: bool,
}

impl OpenOptions {
    /// Open for reading.
    pub fn read() -> Self {
        Self {
            access: AccessMode::Read,
            create: None,
            exclusive: false,
            truncate: false,
            append: false,
        }
    }

    /// Create (or truncate) for writing, like `creat(2)`.
    pub fn create(mode: u32) -> Self {
        Self {
            access: AccessMode::Write,
            create: Some(mode),
            exclusive: false,
            truncate: true,
            append: false,
        }
    }
}

/// Applies the MGS's stored parameters that name client knobs.
fn apply_stored_params(cluster: &Cluster, params: &ClientParams) {
    for (name, value) in &cluster.config().params {
        if params.list(name).is_empty() {
            continue;
        }
        if let Err(e) = params.set(name, value) {
            tracing::warn!(%name, error = %e, "ignoring a stored parameter");
        }
    }
}

/// Re-applies stored parameters after every configuration change, until the client goes.
async fn follow_stored_params(
    mut changes: tokio::sync::watch::Receiver<u64>,
    cluster: std::sync::Weak<Cluster>,
    params: std::sync::Weak<ClientParams>,
) {
    while changes.changed().await.is_ok() {
        let (Some(c), Some(p)) = (cluster.upgrade(), params.upgrade()) else {
            return;
        };
        apply_stored_params(&c, &p);
    }
}

/// A mounted file system, without the kernel.
pub struct Client {
    cluster: Arc<Cluster>,
    params: Arc<ClientParams>,
    engine: Arc<IoEngine>,
    cache: DataCache,
    /// Dirty-data budget in KiB (`max_dirty_mb`).
    dirty: Budget,
    /// Read-ahead budget in KiB (`max_read_ahead_mb`).
    readahead: Budget,
    /// Striped directories met so far.
    stripes: crate::dirs::StripeCache,
    /// Directory entries read ahead of lookups ([`crate::statahead`]).
    pub(crate) statahead: crate::statahead::Statahead,
    /// The size of every open file, shared by its handles.
    open_sizes: crate::file::OpenSizes,
}

const KIB: u64 = 1024;

impl Client {
    /// Connects to the MGS at `mgs` for file system `fsname`.
    pub async fn mount(
        mgs: &str,
        fsname: &str,
        opts: ClientOptions,
    ) -> Result<Arc<Self>, ClientError> {
        let cluster = Cluster::connect(mgs, fsname, opts.cluster.clone()).await?;
        // The instance name tells this client's parameters from other mounts' on the node
        // (`osc.weft-1a2b3c4d.max_dirty_mb`), as Lustre's `llite.FSNAME-ffff...`.
        let uuid = cluster.node_uuid().simple().to_string();
        let instance = format!("{}-{}", cluster.fsname(), &uuid[..8]);
        let params = Arc::new(ClientParams::new(&instance));
        // Persistent settings (`set_param -P`) that name client knobs apply at mount, and
        // again whenever the MGS configuration changes.
        apply_stored_params(&cluster, &params);
        tokio::spawn(follow_stored_params(
            cluster.watch_config(),
            Arc::downgrade(&cluster),
            Arc::downgrade(&params),
        ));
        let engine = Arc::new(IoEngine::new(
            cluster.clone(),
            params.clone(),
            opts.io_retry,
        ));
        let dirty = Budget::new(params.mb(Param::MaxDirtyMb) / KIB);
        let readahead = Budget::new(params.mb(Param::MaxReadAheadMb) / KIB);
        let cache = DataCache::new(params.clone());
        Ok(Arc::new(Self {
            cluster,
            params,
            engine,
            cache,
            dirty,
            readahead,
            stripes: Default::default(),
            statahead: Default::default(),
            open_sizes: Default::default(),
        }))
    }

    /// Bytes written by applications and not yet sent to the OSTs (within `max_dirty_mb`).
    pub fn dirty_bytes(&self) -> u64 {
        self.dirty.in_use() * KIB
    }

    /// The cluster view (configuration and per-target clients).
    pub fn cluster(&self) -> &Arc<Cluster> {
        &self.cluster
    }

    /// The client's tunables.
    pub fn params(&self) -> &Arc<ClientParams> {
        &self.params
    }

    pub(crate) fn engine(&self) -> &Arc<IoEngine> {
        &self.engine
    }

    pub(crate) fn cache(&self) -> &DataCache {
        &self.cache
    }

    /// Bytes held in the data cache.
    pub fn cached_bytes(&self) -> u64 {
        self.cache.bytes()
    }

    /// Waits until `bytes` of dirty data fit in the budget, and takes them.
    pub(crate) async fn acquire_dirty(&self, bytes: u64) -> Result<(), ClientError> {
        let kib = u32::try_from(bytes.div_ceil(KIB))
            .map_err(|_| ClientError::Invalid("write too large".into()))?;
        let budget = (self.params.mb(Param::MaxDirtyMb) / KIB).max(1);
        if u64::from(kib) > budget {
            return Err(ClientError::Remote(WireError::new(
                Errno::FBig,
                "one write larger than max_dirty_mb",
            )));
        }
        self.dirty
            .follow((self.params.mb(Param::MaxDirtyMb) / KIB).max(1));
        let permit = self
            .dirty
            .semaphore()
            .acquire_many(kib)
            .await
            .map_err(|_| ClientError::Invalid("client closed".into()))?;
        permit.forget();
        Ok(())
    }

    /// Takes `bytes` of the dirty budget if that needs no waiting.
    pub(crate) fn try_acquire_dirty(&self, bytes: u64) -> bool {
        let Ok(kib) = u32::try_from(bytes.div_ceil(KIB)) else {
            return false;
        };
        self.dirty
            .follow((self.params.mb(Param::MaxDirtyMb) / KIB).max(1));
        match self.dirty.semaphore().try_acquire_many(kib) {
            Ok(permit) => {
                permit.forget();
                true
            }
            Err(_) => false,
        }
    }

    /// Returns flushed bytes to the dirty budget.
    pub(crate) fn release_dirty(&self, bytes: u64) {
        self.dirty
            .semaphore()
            .add_permits(bytes.div_ceil(KIB) as usize);
    }

    /// Read-ahead budget for `bytes`, if there is some left (read-ahead never waits).
    pub(crate) fn readahead_permit(&self, bytes: u64) -> Option<OwnedSemaphorePermit> {
        let kib = u32::try_from(bytes.div_ceil(KIB)).ok()?;
        self.readahead
            .follow(self.params.mb(Param::MaxReadAheadMb) / KIB);
        self.readahead
            .semaphore()
            .clone()
            .try_acquire_many_owned(kib)
            .ok()
    }

    fn mdt(&self, fid: Fid) -> Result<Arc<MdtClient>, ClientError> {
        self.cluster.mdt_of(fid)
    }

    pub(crate) fn stripe_cache(&self) -> &crate::dirs::StripeCache {
        &self.stripes
    }

    // ---- metadata ----

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
    async fn lookup_no_glimpse(
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
        match found {
            Found::Here(attr) => Ok(attr),
            Found::Elsewhere(fid) => self.mdt(fid)?.getattr(fid).await,
        }
    }

    /// The attributes of `fid`. A regular file open somewhere gets its size from the OSTs
    /// (glimpse), so a stat during a parallel write shows the bytes written so far.
    pub async fn getattr(&self, fid: Fid) -> Result<Attr, ClientError> {
        let attr = self.mdt(fid)?.getattr(fid).await?;
        self.glimpse(attr).await
    }

    async fn glimpse(&self, mut attr: Attr) -> Result<Attr, ClientError> {
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
                asks.push(async move { (c, i as u32, self.engine.getattr(ost, obj).await) });
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
            // Permission first (the MDT checks it), then the data.
            let attr = mdt.setattr(fid, set, cred).await?;
            let layout = mdt.get_layout(fid).await?;
            self.truncate_objects(fid, layout.as_ref(), size).await?;
            self.cache.invalidate(fid);
            self.open_sizes.truncated(fid, size);
            return Ok(attr);
        }
        let owner_or_mode = set.mode.is_some() || set.uid.is_some() || set.gid.is_some();
        let attr = mdt.setattr(fid, set, cred).await?;
        if owner_or_mode && attr.kind == FileKind::Directory {
            self.copy_to_shards(&attr).await?;
        }
        Ok(attr)
    }

    /// Punches every instantiated object of a file to its share of `size`.
    pub(crate) async fn truncate_objects(
        &self,
        fid: Fid,
        layout: Option<&Layout>,
        size: u64,
    ) -> Result<(), ClientError> {
        let Some(layout) = layout else { return Ok(()) };
        let mut punches = Vec::new();
        for c in &layout.components {
            for (i, &ost) in c.osts.iter().enumerate() {
                let obj = c.object(fid, i as u32);
                let osize = layout::object_size_for(c, i as u32, size);
                punches.push(self.engine.punch(ost, obj, osize));
            }
        }
        for r in futures::future::join_all(punches).await {
            r?;
        }
        Ok(())
    }

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
                mdt.create(dir, name, mode, rdev, true, None, None, cred)
                    .await
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

    /// Makes every namespace and attribute change this client made durable on the MDTs
    /// (they answer changes before their disks hold them, like a local file system):
    /// `fsync(2)` of a file or a directory. Costs nothing when nothing changed since the
    /// last sync.
    pub async fn sync_metadata(&self) -> Result<(), ClientError> {
        let (mdts, _) = self.cluster.open_targets();
        futures::future::try_join_all(mdts.iter().map(|m| m.sync())).await?;
        Ok(())
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
            let s = self.cluster.ost(t.id.index)?.statfs().await?;
            let scale = |b: u64| b.saturating_mul(u64::from(s.bsize)) / 4096;
            out.blocks += scale(s.blocks);
            out.bfree += scale(s.bfree);
            out.bavail += scale(s.bavail);
        }
        for t in config.targets_of(weft_proto::TargetKind::Mdt) {
            let s = self.cluster.mdt(t.id.index)?.statfs().await?;
            out.files += s.files;
            out.ffree += s.ffree;
        }
        Ok(out)
    }

    // ---- paths ----

    /// Resolves an absolute path (`/a/b`) to its attributes, following symbolic links in
    /// the middle of the path and, with `follow`, at its end.
    pub async fn resolve(
        &self,
        path: &str,
        follow: bool,
        cred: &Credentials,
    ) -> Result<Attr, ClientError> {
        let mut stack: Vec<Fid> = Vec::new();
        let mut todo: Vec<Vec<u8>> = path
            .as_bytes()
            .split(|&b| b == b'/')
            .rev()
            .map(<[u8]>::to_vec)
            .collect();
        let mut links = 0;
        let mut attr = self.getattr(Fid::ROOT).await?;
        while let Some(name) = todo.pop() {
            match name.as_slice() {
                b"" | b"." => continue,
                b".." => {
                    let up = stack.pop().unwrap_or(Fid::ROOT);
                    attr = self.getattr(up).await?;
                    continue;
                }
                _ => {}
            }
            if attr.kind != FileKind::Directory {
                return Err(ClientError::Remote(WireError::new(
                    Errno::NotDir,
                    "a path component is not a directory",
                )));
            }
            let next = self.lookup(attr.fid, &name, cred).await?;
            let last = todo.iter().all(|n| n.is_empty() || n == b".");
            if next.kind == FileKind::Symlink && (follow || !last) {
                links += 1;
                if links > 40 {
                    return Err(ClientError::Remote(WireError::new(
                        Errno::Loop,
                        "too many symbolic links",
                    )));
                }
                let target = self.readlink(next.fid).await?;
                if target.first() == Some(&b'/') {
                    stack.clear();
                    attr = self.getattr(Fid::ROOT).await?;
                }
                todo.extend(target.split(|&b| b == b'/').rev().map(<[u8]>::to_vec));
                continue;
            }
            stack.push(attr.fid);
            attr = next;
        }
        Ok(attr)
    }

    /// Splits a path into its parent directory's attributes and the last name.
    pub async fn resolve_parent(
        &self,
        path: &str,
        cred: &Credentials,
    ) -> Result<(Attr, Vec<u8>), ClientError> {
        let trimmed = path.trim_end_matches('/');
        let (dir, name) = trimmed.rsplit_once('/').unwrap_or(("", trimmed));
        if name.is_empty() || name == "." || name == ".." {
            return Err(ClientError::Remote(WireError::new(
                Errno::Inval,
                format!("'{path}' names no entry"),
            )));
        }
        let parent = self
            .resolve(if dir.is_empty() { "/" } else { dir }, true, cred)
            .await?;
        Ok((parent, name.as_bytes().to_vec()))
    }

    // ---- files ----

    /// Opens an existing file by FID.
    pub async fn open(
        self: &Arc<Self>,
        fid: Fid,
        opts: OpenOptions,
        cred: &Credentials,
    ) -> Result<File, ClientError> {
        let mdt = self.mdt(fid)?;
        let flags = OpenFlags {
            access: opts.access,
            truncate: opts.truncate,
        };
        let opened = mdt.open(fid, flags, cred).await?;
        if opened.attr.kind == FileKind::Directory && opts.access != AccessMode::Read {
            let _ = mdt.close(opened.handle, None, None, false).await;
            return Err(ClientError::Remote(WireError::new(
                Errno::IsDir,
                "is a directory",
            )));
        }
        self.finish_open(mdt, opened.handle, opened.attr, opened.layout, opts)
            .await
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
                let layout = layout.clone();
                async move {
                    let c = mdt
                        .create(
                            dir,
                            name,
                            mode,
                            0,
                            opts.exclusive,
                            layout,
                            Some(flags),
                            cred,
                        )
                        .await?;
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
                let opts = OpenOptions {
                    truncate: opts.truncate && !c.created,
                    ..opts
                };
                let mut file = self
                    .finish_open(mdt, handle, c.attr, c.layout, opts)
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
    ) -> Result<File, ClientError> {
        if opts.truncate && opts.access != AccessMode::Read {
            // The MDT set the size to 0; the objects must follow.
            self.truncate_objects(attr.fid, layout.as_ref(), 0).await?;
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
        Ok(File::new(self.clone(), mdt, handle, &attr, layout, opts))
    }

    /// The shared sizes of open files.
    pub(crate) fn open_sizes(&self) -> &crate::file::OpenSizes {
        &self.open_sizes
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
