//! Typed access to one MDT: numbering changes for resends, resending over broken
//! connections, and one method per request.

use crate::changes::Changes;
use crate::error::ClientError;
use bytes::Bytes;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use weft_proto::layout::{Layout, LayoutTemplate};
use weft_proto::mdt::{
    Attr, Credentials, DirEntry, DirHash, MdtReply, MdtRequest, OpenFlags, RenameFlags, ScanEntry,
    SetAttr, StatFs, XattrMode,
};
use weft_proto::{Fid, Message, TargetId};
use weft_rpc::{Reconnecting, RequestContext};

pub use weft_proto::mdt::NewFile;

mod hsm;
mod scope;

use scope::{change_scope, changed_entry};

/// What a create returns: the new inode, its layout and, if asked, an open handle.
#[derive(Debug, Clone)]
pub struct Created {
    /// The new inode's attributes.
    pub attr: Attr,
    /// Its layout (regular files).
    pub layout: Option<Layout>,
    /// The open handle, when the create also opened.
    pub handle: Option<u64>,
    /// False when the name held a regular file that was opened instead (`O_CREAT`
    /// without `O_EXCL`).
    pub created: bool,
}

/// What a lookup found.
#[derive(Debug, Clone)]
pub enum Found {
    /// The entry's inode is on the MDT that was asked.
    Here(Attr),
    /// The entry names a remote directory: ask its MDT (FID location database).
    Elsewhere(Fid),
}

/// What an open returns.
#[derive(Debug, Clone)]
pub struct Opened {
    /// The handle to close.
    pub handle: u64,
    /// The file's attributes at open.
    pub attr: Attr,
    /// Its layout.
    pub layout: Option<Layout>,
}

/// How long a read request to an MDT is resent over a broken connection.
pub const RESEND_FOR: std::time::Duration = std::time::Duration::from_secs(30);

/// Whether sending a request twice is harmless (see [`MdtRequest::is_idempotent`]): such
/// requests are resent freely and never numbered.
fn is_read(req: &MdtRequest) -> bool {
    req.is_idempotent()
}

/// How long a request the MDT cannot serve yet (EINPROGRESS: a directory it changes is
/// being migrated to another MDT; no OST is active to place a new file's stripes on; the
/// MGS did not grant FIDs) waits and is sent again before it fails with EBUSY.
pub const MIGRATION_WAIT: std::time::Duration = std::time::Duration::from_secs(600);

fn is_in_progress(e: &weft_rpc::RpcError) -> bool {
    matches!(e, weft_rpc::RpcError::Remote(w) if w.errno == weft_proto::Errno::InProgress)
}

/// Lock requests: never numbered or resent by [`MdtClient::call`] (a broken connection
/// released the locks; the lock code decides what to do).
fn is_lock(req: &MdtRequest) -> bool {
    req.class() == weft_proto::mdt::RequestClass::Lock
}

/// Numbers of the requests that change state (see [`weft_rpc::context`]).
#[derive(Default)]
struct Numbering {
    next: u64,
    /// Numbers sent and not answered yet.
    outstanding: std::collections::BTreeSet<u64>,
}

/// Removes a number from the outstanding set when its call ends (or is dropped).
struct Answered<'a>(&'a parking_lot::Mutex<Numbering>, u64);

impl Drop for Answered<'_> {
    fn drop(&mut self) {
        self.0.lock().outstanding.remove(&self.1);
    }
}

/// A client of one metadata target.
///
/// Its requests go in its [`RequestContext`]: the cluster's handle sends the default one
/// (no job), and [`MdtClient::in_context`] gives a handle on the same connection that sends
/// another. Clones share the connection, numbering and statistics.
#[derive(Clone)]
pub struct MdtClient {
    index: u32,
    conn: Arc<Reconnecting>,
    /// Requests sent, by operation, with their wait times (Lustre's `mdc.*.stats`).
    stats: Arc<weft_rpc::OpStatsTable>,
    numbering: Arc<parking_lot::Mutex<Numbering>>,
    /// Bumped when a request that may change the namespace or attributes is sent and
    /// again when it ends (shared by every MDT of the client): what was read before
    /// cannot be trusted past it (statahead). Keeps the attributes of the directories
    /// changes are made in.
    changes: Arc<Changes>,
    /// A request that changes state was sent since the last [`MdtClient::sync`].
    unsynced: Arc<AtomicBool>,
    /// The context of this handle's requests (job id, deadline); [`MdtClient::call`] adds
    /// the resend numbers.
    ctx: RequestContext,
}

macro_rules! expect_reply {
    ($self:ident, $req:expr, $op:literal, $($pat:pat => $out:expr),+) => {
        match $self.call($req).await? {
            $($pat => Ok($out),)+
            _ => Err(ClientError::UnexpectedReply {
                target: TargetId::mdt($self.index),
                op: $op,
            }),
        }
    };
}
pub(crate) use expect_reply;

impl MdtClient {
    /// Wraps a (reconnecting) connection to MDT `index`; requests that may change state
    /// bump `changes` (see [`MdtClient::call`]).
    pub fn new(index: u32, conn: Reconnecting, changes: Arc<Changes>) -> Self {
        Self {
            index,
            conn: Arc::new(conn),
            stats: Arc::default(),
            numbering: Arc::default(),
            changes,
            unsynced: Arc::new(AtomicBool::new(false)),
            ctx: RequestContext::new(),
        }
    }

    /// A handle on the same connection (numbering, statistics) whose requests go in `ctx`
    /// (for its job id and deadline; [`MdtClient::call`] numbers them).
    pub fn in_context(&self, ctx: &RequestContext) -> Arc<Self> {
        Arc::new(Self {
            ctx: ctx.clone(),
            ..self.clone()
        })
    }

    /// The context this handle's requests go in.
    pub fn context(&self) -> &RequestContext {
        &self.ctx
    }

    /// A number for a request that changes state, and the number below which every
    /// request has been answered.
    fn number(&self) -> (u64, u64) {
        let mut n = self.numbering.lock();
        n.next += 1;
        let seq = n.next;
        let acked = n.outstanding.first().copied().unwrap_or(seq);
        n.outstanding.insert(seq);
        (seq, acked)
    }

    /// This client's requests to the MDT by operation: counts, errors and the time each
    /// waited for its reply (`mdc.*.stats`, `req_waittime`).
    pub fn stats(&self) -> Vec<weft_proto::handshake::OpStats> {
        self.stats.snapshot()
    }

    /// The MDT's index.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The underlying connection.
    pub fn connection(&self) -> &Reconnecting {
        &self.conn
    }

    /// Sends any MDT request and returns the raw reply. Every request but the lock ones is
    /// resent while the connection is broken, for up to [`RESEND_FOR`], so an MDT restart
    /// is invisible to it: reads as they are, and requests that change state with their
    /// number, which the MDT answers from its reply record if it already did the change.
    ///
    /// A request that may change attributes or names bumps the client's change count
    /// when it is sent and when it ends, so that anything read while it was in flight
    /// counts as read before it.
    pub async fn call(&self, req: MdtRequest) -> Result<MdtReply, ClientError> {
        let start = std::time::Instant::now();
        let change = req.may_change_attrs().then(|| {
            self.changes
                .begin_entry(change_scope(&req), changed_entry(&req))
        });
        let r = if is_read(&req) || is_lock(&req) {
            self.call_resending(&self.ctx, &req, start).await
        } else {
            self.unsynced.store(true, Ordering::Release);
            // Numbered even when the MDT is of this process (which records no reply, as
            // the request is never resent): a cross-MDT operation knows its own request by
            // the number when that comes back to finish it.
            let (seq, acked) = self.number();
            let _answered = Answered(&self.numbering, seq);
            let ctx = self.ctx.clone().numbered(seq, acked);
            let r = self.call_resending(&ctx, &req, start).await;
            // Again once done: a sync that ran while it was in flight may not cover it.
            self.unsynced.store(true, Ordering::Release);
            r
        };
        self.stats
            .record(req.op_name(), start.elapsed(), r.is_err(), 0);
        if let (Some(change), Ok(reply)) = (&change, &r)
            && let Some(dir) = reply.changed_dir()
        {
            change.made_in(dir);
        }
        r
    }

    async fn call_resending(
        &self,
        ctx: &RequestContext,
        req: &MdtRequest,
        start: std::time::Instant,
    ) -> Result<MdtReply, ClientError> {
        let ms = std::time::Duration::from_millis;
        let mut resend = weft_rpc::Backoff::new(ms(50), ms(1000));
        // The request table's deadline (none for a migration or a restore).
        let timeout = req
            .deadline(self.conn.options().request_timeout)
            .unwrap_or(std::time::Duration::MAX);
        let mut migrating = weft_rpc::Backoff::new(ms(10), ms(500));
        loop {
            // An MDT of this process is waited for without a deadline and never asked
            // twice (see `Reconnecting::call_noting_in_process`).
            let (in_process, r) = self
                .conn
                .call_noting_in_process(ctx, req, Bytes::new(), timeout)
                .await;
            let r = r.map(|(r, _)| r);
            match r {
                // Not possible yet (a migration, no OST active, no FIDs): wait, send again.
                Err(e) if is_in_progress(&e) => {
                    if start.elapsed() > MIGRATION_WAIT {
                        return Err(ClientError::Rpc {
                            target: TargetId::mdt(self.index),
                            error: weft_rpc::RpcError::Remote(weft_proto::WireError::new(
                                weft_proto::Errno::Busy,
                                format!("not served in time: {e}"),
                            )),
                        });
                    }
                    tracing::debug!(mdt = self.index, op = req.op_name(), error = %e, "waiting");
                    migrating.wait().await;
                }
                // A restarting server listens before it serves its targets: its handshake
                // refuses a target it does not serve yet (ENOENT) for a moment.
                Err(e)
                    if !in_process
                        && e.is_worth_resending()
                        && (!is_lock(req) || is_read(req))
                        && start.elapsed() + resend.peek() < RESEND_FOR =>
                {
                    tracing::debug!(mdt = self.index, op = req.op_name(), error = %e, "resending");
                    resend.wait().await;
                }
                r => {
                    return r.map_err(|error| ClientError::Rpc {
                        target: TargetId::mdt(self.index),
                        error,
                    });
                }
            }
        }
    }

    /// Looks `name` up in `parent`: its attributes, or the FID of a remote directory whose
    /// attributes its own MDT has.
    pub async fn lookup_entry(
        &self,
        parent: Fid,
        name: &[u8],
        cred: &Credentials,
    ) -> Result<Found, ClientError> {
        let req = MdtRequest::Lookup {
            parent,
            name: name.to_vec(),
            cred: cred.clone(),
        };
        expect_reply!(self, req, "lookup",
            MdtReply::Attr(a) => Found::Here(a),
            MdtReply::Entry { fid, .. } => Found::Elsewhere(fid))
    }

    /// Looks `name` up in `parent` when it is known to be on this MDT (a remote directory
    /// answers EXDEV; [`crate::Client::lookup`] follows those).
    pub async fn lookup(
        &self,
        parent: Fid,
        name: &[u8],
        cred: &Credentials,
    ) -> Result<Attr, ClientError> {
        match self.lookup_entry(parent, name, cred).await? {
            Found::Here(a) => Ok(a),
            Found::Elsewhere(fid) => Err(ClientError::Remote(weft_proto::WireError::new(
                weft_proto::Errno::XDev,
                format!("{fid} is a remote directory"),
            ))),
        }
    }

    /// Creates a striped directory with `count` shards; sent to the parent's MDT.
    pub async fn mkdir_striped(
        &self,
        parent: Fid,
        name: &[u8],
        mode: u32,
        count: u32,
        hash: DirHash,
        cred: &Credentials,
    ) -> Result<Attr, ClientError> {
        let req = MdtRequest::MkdirStriped {
            parent,
            name: name.to_vec(),
            mode,
            count,
            hash,
            cred: cred.clone(),
        };
        expect_reply!(self, req, "mkdir_striped", MdtReply::Attr(a) => a)
    }

    /// Migrates directory `name` of `parent` to MDT `mdt` (`weft migrate -m`): the FID of
    /// the directory that has the name afterwards. Sent to the parent's MDT; root only.
    pub async fn migrate_dir(
        &self,
        parent: Fid,
        name: &[u8],
        mdt: u32,
        cred: &Credentials,
    ) -> Result<Fid, ClientError> {
        let req = MdtRequest::MigrateDir {
            parent,
            name: name.to_vec(),
            mdt,
            cred: cred.clone(),
        };
        expect_reply!(self, req, "migrate_dir", MdtReply::Attr(a) => a.fid, MdtReply::Entry { fid, .. } => fid)
    }

    /// Creates a directory whose inode lives on MDT `mdt` (a remote directory); sent to
    /// the parent's MDT.
    pub async fn mkdir_on(
        &self,
        parent: Fid,
        name: &[u8],
        mode: u32,
        mdt: u32,
        cred: &Credentials,
    ) -> Result<Attr, ClientError> {
        let req = MdtRequest::MkdirOn {
            parent,
            name: name.to_vec(),
            mode,
            mdt,
            cred: cred.clone(),
        };
        expect_reply!(self, req, "mkdir_remote", MdtReply::Attr(a) => a)
    }

    /// The attributes of `fid`.
    pub async fn getattr(&self, fid: Fid) -> Result<Attr, ClientError> {
        expect_reply!(self, MdtRequest::GetAttr { fid }, "getattr", MdtReply::Attr(a) => a)
    }

    /// Changes attributes.
    pub async fn setattr(
        &self,
        fid: Fid,
        set: SetAttr,
        cred: &Credentials,
    ) -> Result<Attr, ClientError> {
        let req = MdtRequest::SetAttr {
            fid,
            set,
            cred: cred.clone(),
        };
        expect_reply!(self, req, "setattr", MdtReply::Attr(a) => a)
    }

    /// Creates a non-directory inode (`new.mode` includes the type bits).
    pub async fn create(
        &self,
        new: &NewFile<'_>,
        cred: &Credentials,
    ) -> Result<Created, ClientError> {
        let req = new.request(cred);
        expect_reply!(self, req, "create", MdtReply::Created { attr, layout, handle, created, .. } => Created { attr, layout, handle, created })
    }

    /// Creates a directory.
    pub async fn mkdir(
        &self,
        parent: Fid,
        name: &[u8],
        mode: u32,
        cred: &Credentials,
    ) -> Result<Attr, ClientError> {
        let req = MdtRequest::Mkdir {
            parent,
            name: name.to_vec(),
            mode,
            cred: cred.clone(),
        };
        expect_reply!(self, req, "mkdir", MdtReply::Attr(a) | MdtReply::Created { attr: a, .. } => a)
    }

    /// Creates a symbolic link.
    pub async fn symlink(
        &self,
        parent: Fid,
        name: &[u8],
        target: &[u8],
        cred: &Credentials,
    ) -> Result<Attr, ClientError> {
        let req = MdtRequest::Symlink {
            parent,
            name: name.to_vec(),
            target: target.to_vec(),
            cred: cred.clone(),
        };
        expect_reply!(self, req, "symlink", MdtReply::Attr(a) | MdtReply::Created { attr: a, .. } => a)
    }

    /// A symlink's target.
    pub async fn readlink(&self, fid: Fid) -> Result<Vec<u8>, ClientError> {
        expect_reply!(self, MdtRequest::ReadLink { fid }, "readlink", MdtReply::Link(t) => t)
    }

    /// Adds a hard link.
    pub async fn link(
        &self,
        fid: Fid,
        new_parent: Fid,
        new_name: &[u8],
        cred: &Credentials,
    ) -> Result<Attr, ClientError> {
        let req = MdtRequest::Link {
            fid,
            new_parent,
            new_name: new_name.to_vec(),
            cred: cred.clone(),
        };
        expect_reply!(self, req, "link", MdtReply::Attr(a) => a)
    }

    /// Removes a non-directory name.
    pub async fn unlink(
        &self,
        parent: Fid,
        name: &[u8],
        cred: &Credentials,
    ) -> Result<(), ClientError> {
        let req = MdtRequest::Unlink {
            parent,
            name: name.to_vec(),
            cred: cred.clone(),
        };
        expect_reply!(self, req, "unlink", MdtReply::Ok | MdtReply::Removed { .. } => ())
    }

    /// Removes an empty directory.
    pub async fn rmdir(
        &self,
        parent: Fid,
        name: &[u8],
        cred: &Credentials,
    ) -> Result<(), ClientError> {
        let req = MdtRequest::Rmdir {
            parent,
            name: name.to_vec(),
            cred: cred.clone(),
        };
        expect_reply!(self, req, "rmdir", MdtReply::Ok | MdtReply::Removed { .. } => ())
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
        let req = MdtRequest::Rename {
            src_parent,
            src_name: src_name.to_vec(),
            dst_parent,
            dst_name: dst_name.to_vec(),
            flags,
            cred: cred.clone(),
        };
        expect_reply!(self, req, "rename", MdtReply::Ok => ())
    }

    /// One page of a directory listing after `cookie`; returns entries and end-of-directory.
    pub async fn readdir(
        &self,
        fid: Fid,
        cookie: u64,
        max_entries: u32,
        plus: bool,
        cred: &Credentials,
    ) -> Result<(Vec<DirEntry>, bool), ClientError> {
        let req = MdtRequest::ReadDir {
            fid,
            cookie,
            max_entries,
            plus,
            cred: cred.clone(),
        };
        expect_reply!(self, req, "readdir", MdtReply::Entries { entries, eof } => (entries, eof))
    }

    /// Lists a whole directory, page by page.
    pub async fn readdir_all(
        &self,
        fid: Fid,
        cred: &Credentials,
    ) -> Result<Vec<DirEntry>, ClientError> {
        let mut out = Vec::new();
        let mut cookie = 0;
        loop {
            let (page, eof) = self.readdir(fid, cookie, 1024, false, cred).await?;
            if let Some(last) = page.last() {
                cookie = last.cookie;
            }
            let empty = page.is_empty();
            out.extend(page);
            if eof || empty {
                return Ok(out);
            }
        }
    }

    /// An extended attribute.
    pub async fn getxattr(
        &self,
        fid: Fid,
        name: &[u8],
        cred: &Credentials,
    ) -> Result<Vec<u8>, ClientError> {
        let req = MdtRequest::GetXattr {
            fid,
            name: name.to_vec(),
            cred: cred.clone(),
        };
        expect_reply!(self, req, "getxattr", MdtReply::Xattr(v) => v)
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
        let req = MdtRequest::SetXattr {
            fid,
            name: name.to_vec(),
            value: value.to_vec(),
            mode,
            cred: cred.clone(),
        };
        expect_reply!(self, req, "setxattr", MdtReply::Ok => ())
    }

    /// Extended attribute names.
    pub async fn listxattr(
        &self,
        fid: Fid,
        cred: &Credentials,
    ) -> Result<Vec<Vec<u8>>, ClientError> {
        let req = MdtRequest::ListXattr {
            fid,
            cred: cred.clone(),
        };
        expect_reply!(self, req, "listxattr", MdtReply::XattrNames(v) => v)
    }

    /// Removes an extended attribute.
    pub async fn removexattr(
        &self,
        fid: Fid,
        name: &[u8],
        cred: &Credentials,
    ) -> Result<(), ClientError> {
        let req = MdtRequest::RemoveXattr {
            fid,
            name: name.to_vec(),
            cred: cred.clone(),
        };
        expect_reply!(self, req, "removexattr", MdtReply::Ok => ())
    }

    /// Makes every change this client made on the MDT durable (the MDT answers changes
    /// before its disk holds them); nothing to do if it made none since the last sync.
    pub async fn sync(&self) -> Result<(), ClientError> {
        if !self.unsynced.swap(false, Ordering::AcqRel) {
            return Ok(());
        }
        let r = expect_reply!(self, MdtRequest::Sync, "sync", MdtReply::Ok => ());
        if r.is_err() {
            self.unsynced.store(true, Ordering::Release);
        }
        r
    }

    /// The MDT's usage.
    pub async fn statfs(&self) -> Result<StatFs, ClientError> {
        expect_reply!(self, MdtRequest::StatFs, "statfs", MdtReply::StatFs(s) => s)
    }

    /// Opens a file.
    pub async fn open(
        &self,
        fid: Fid,
        flags: OpenFlags,
        cred: &Credentials,
    ) -> Result<Opened, ClientError> {
        let req = MdtRequest::Open {
            fid,
            flags,
            cred: cred.clone(),
        };
        expect_reply!(self, req, "open", MdtReply::Opened { handle, attr, layout } => Opened { handle, attr, layout })
    }

    /// Closes a handle, merging the size and blocks the client observed.
    pub async fn close(
        &self,
        handle: u64,
        size: Option<u64>,
        blocks: Option<u64>,
        modified: bool,
    ) -> Result<(), ClientError> {
        let req = MdtRequest::Close {
            handle,
            size,
            blocks,
            modified,
        };
        expect_reply!(self, req, "close", MdtReply::Ok | MdtReply::Attr(_) => ())
    }

    /// Merges the size a writer observed into an open file without closing it (fsync).
    pub async fn size_merge(
        &self,
        handle: u64,
        size: Option<u64>,
        blocks: Option<u64>,
        modified: bool,
    ) -> Result<(), ClientError> {
        let req = MdtRequest::SizeMerge {
            handle,
            size,
            blocks,
            modified,
        };
        expect_reply!(self, req, "size_merge", MdtReply::Ok => ())
    }

    /// A file's layout.
    pub async fn get_layout(&self, fid: Fid) -> Result<Option<Layout>, ClientError> {
        expect_reply!(self, MdtRequest::GetLayout { fid }, "getlayout", MdtReply::Layout(l) => l)
    }

    /// Sets a directory's default layout or an empty file's layout.
    pub async fn set_layout(
        &self,
        fid: Fid,
        template: Option<LayoutTemplate>,
        cred: &Credentials,
    ) -> Result<(), ClientError> {
        let req = MdtRequest::SetLayout {
            fid,
            template,
            cred: cred.clone(),
        };
        expect_reply!(self, req, "setlayout", MdtReply::Ok | MdtReply::Layout(_) | MdtReply::Template(_) => ())
    }

    /// A directory's default layout (`None` when it has none).
    pub async fn get_default_layout(
        &self,
        fid: Fid,
    ) -> Result<Option<LayoutTemplate>, ClientError> {
        expect_reply!(self, MdtRequest::GetLayout { fid }, "getlayout", MdtReply::Template(t) => t)
    }

    /// Instantiates the components of an open file's layout overlapping `[start, end)`;
    /// returns the layout after.
    pub async fn instantiate(
        &self,
        handle: u64,
        start: u64,
        end: u64,
    ) -> Result<Option<Layout>, ClientError> {
        let req = MdtRequest::Instantiate { handle, start, end };
        expect_reply!(self, req, "instantiate", MdtReply::Layout(l) => l)
    }

    /// One page of a directory scan (entries with attributes and layouts) after `cookie`.
    pub async fn scan_dir(
        &self,
        fid: Fid,
        cookie: u64,
        max_entries: u32,
        cred: &Credentials,
    ) -> Result<(Vec<ScanEntry>, bool), ClientError> {
        let req = MdtRequest::ScanDir {
            fid,
            cookie,
            max_entries,
            cred: cred.clone(),
        };
        expect_reply!(self, req, "scandir", MdtReply::Scanned { entries, eof } => (entries, eof))
    }

    /// Swaps the layouts of `fid` and the volatile copy open as `handle` (`weft migrate`);
    /// returns `fid`'s new layout.
    pub async fn swap_layouts(
        &self,
        fid: Fid,
        volatile: Fid,
        handle: u64,
        data_version: u64,
        cred: &Credentials,
    ) -> Result<Option<Layout>, ClientError> {
        let req = MdtRequest::SwapLayouts {
            fid,
            volatile,
            handle,
            data_version,
            cred: cred.clone(),
        };
        expect_reply!(self, req, "swap_layouts", MdtReply::Layout(l) => l)
    }
}
