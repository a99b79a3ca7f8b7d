//! Group commit: one thread applies every pending write operation in one redb write
//! transaction, commits once with a durable fsync, then answers all of them.
//!
//! A batch is whatever queued up while the previous commit was syncing (up to
//! `max_batch`), so under load one fsync carries many operations and with a single client
//! the latency is one fsync. An operation that fails validation has written nothing and is
//! answered with its errno while the rest of the batch commits. A store failure aborts the
//! batch: every operation in it gets EIO and handle changes are reverted.

use crate::dir_moves::DirMove;
use crate::engine::{Effects, Engine, Tx, lock};
use crate::error::{Fail, StoreError, store_to_wire};
use crate::remote::Intent;
use crate::store;
use redb::Durability;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tokio::sync::{Notify, mpsc, oneshot};
use weft_proto::mdt::{MdtReply, MdtRequest};
use weft_proto::{Errno, FidSeqRange, WireError};

/// A write operation for the commit thread.
#[derive(Debug)]
pub(crate) enum WriteOp {
    /// A client request that changes state (or must be ordered with changes: open), and
    /// its client's number for it if it may be resent.
    Req(MdtRequest, Origin),
    /// Close every handle of the connection.
    DropConn,
    /// Keep the handles of a connection that broke for its client to take back when it
    /// reconnects (they stay open: unlinked files they hold stay alive).
    ParkConn(uuid::Uuid),
    /// Close the client's handles parked before the given park number: it did not come back.
    DropParked(uuid::Uuid, u64),
    /// Add FID sequences granted by the MGS.
    GrantSeq(FidSeqRange),
    /// Answers `Ok` if a FID can be allocated, `NeedSeq` otherwise.
    HasFids,
    /// Remove destroy-log records whose objects are all gone.
    DestroyDone(Vec<u64>),
    /// Destroy the orphans of a previous run that no client opened again.
    ReapOrphans,
    /// Step 3 of a cross-MDT operation: the other MDT's answer (see [`crate::remote`]).
    FinishIntent(Box<Intent>, Box<Result<MdtReply, WireError>>),
    /// A client's rename that moves a directory to another parent, with what the request
    /// path learned under the rename lock (see [`crate::dir_moves`]).
    MoveDir(MdtRequest, Origin, Box<DirMove>),
}

impl WriteOp {
    /// Whether losing this operation in a crash costs nothing but doing it again: removing
    /// destroy-log records whose objects are gone (the destroys are idempotent and are
    /// simply sent again). A batch of only such operations is committed without an fsync;
    /// the next durable commit makes it durable. Without this, every unlink of a file with
    /// objects cost two fsyncs: its own and, moments later, its destroy record's removal.
    fn is_lazy(&self) -> bool {
        matches!(self, WriteOp::DestroyDone(_))
    }

    /// The operation again with what a directory move needs (a rename handed back with
    /// [`Outcome::NeedDirMove`]).
    pub(crate) fn with_dir_move(self, dm: DirMove) -> WriteOp {
        match self {
            WriteOp::Req(req, origin) | WriteOp::MoveDir(req, origin, _) => {
                WriteOp::MoveDir(req, origin, Box::new(dm))
            }
            other => other,
        }
    }
}

/// Who sent a request: the client node, and its number for the request (see
/// [`weft_rpc::resend`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Origin {
    /// The client's node UUID (nil when unknown): a client that reconnects may use the
    /// handles it opened on its previous connection.
    pub client: uuid::Uuid,
    /// The request's number; 0 for a request that is not numbered.
    pub seq: u64,
    /// Every number below this has been answered.
    pub acked: u64,
}

/// How an operation ended, as the commit thread reports it.
pub(crate) enum Outcome {
    Done(Result<MdtReply, WireError>),
    /// No FID left: here is the operation back, to retry after a grant.
    NeedSeq(WriteOp),
    /// A cross-MDT operation is prepared (durable): ask the other MDT, then finish it.
    CrossMdt(Box<Intent>),
    /// A rename moves directory `dir` to `dst_parent`: here is the operation back, to retry
    /// under the rename lock with the destination's ancestors.
    NeedDirMove {
        op: WriteOp,
        dir: weft_proto::Fid,
        dst_parent: weft_proto::Fid,
    },
}

pub(crate) struct Pending {
    pub conn: u64,
    pub op: WriteOp,
    pub reply: Option<oneshot::Sender<Outcome>>,
}

pub(crate) enum Msg {
    Op(Pending),
    Shutdown(oneshot::Sender<()>),
}

/// Consecutive commits without an fsync after which a lazy batch is made durable anyway,
/// so that a long run of them (a big `rm -r` on an otherwise idle MDT) does not leave
/// redb unable to reuse the pages they freed.
const MAX_LAZY_STREAK: u32 = 64;

/// Tuning of the commit loop.
pub(crate) struct CommitConfig {
    pub max_batch: usize,
}

/// Runs the commit loop until the channel closes or a shutdown message arrives.
pub(crate) fn run(
    mut engine: Engine,
    mut rx: mpsc::UnboundedReceiver<Msg>,
    cfg: CommitConfig,
    destroy_wake: Arc<Notify>,
) -> Option<oneshot::Sender<()>> {
    let mut shutdown = None;
    // Commits in a row made without an fsync (see `WriteOp::is_lazy`).
    let mut lazy_streak = 0u32;
    while shutdown.is_none() {
        let Some(first) = rx.blocking_recv() else {
            break;
        };
        let mut batch = Vec::new();
        match first {
            Msg::Op(p) => batch.push(p),
            Msg::Shutdown(ack) => shutdown = Some(ack),
        }
        while batch.len() < cfg.max_batch && shutdown.is_none() {
            match rx.try_recv() {
                Ok(Msg::Op(p)) => batch.push(p),
                Ok(Msg::Shutdown(ack)) => shutdown = Some(ack),
                Err(_) => break,
            }
        }
        if !batch.is_empty() {
            run_batch(&mut engine, batch, &destroy_wake, &mut lazy_streak);
        }
    }
    // Drain what raced with shutdown so no caller waits forever.
    rx.close();
    let mut rest = Vec::new();
    while let Ok(Msg::Op(p)) = rx.try_recv() {
        rest.push(p);
    }
    if !rest.is_empty() {
        run_batch(&mut engine, rest, &destroy_wake, &mut lazy_streak);
    }
    if lazy_streak > 0 {
        // Leave nothing for the next start to redo.
        if let Err(e) = durable_empty_commit(&engine) {
            tracing::warn!(error = %e, "final MDT commit failed; the next start redoes some destroys");
        }
    }
    drop(engine);
    shutdown
}

fn run_batch(
    engine: &mut Engine,
    batch: Vec<Pending>,
    destroy_wake: &Notify,
    lazy_streak: &mut u32,
) {
    let n = batch.len() as u64;
    let lazy = *lazy_streak < MAX_LAZY_STREAK && batch.iter().all(|p| p.op.is_lazy());
    let (outcomes, fx, result) = apply_batch(engine, batch, lazy);
    let mut outcomes = outcomes;
    match result {
        Ok(()) => {
            if fx.wrote {
                engine.counters.commits.fetch_add(1, Ordering::Relaxed);
                *lazy_streak = if lazy { *lazy_streak + 1 } else { 0 };
            }
            engine.publish();
            if fx.destroys {
                destroy_wake.notify_one();
            }
        }
        Err(e) => {
            tracing::error!(error = %e, "MDT commit failed; batch answered with EIO");
            lock(&engine.handles).undo(fx.undo);
            if let Ok(Some(meta)) = reload_meta(engine) {
                engine.meta = meta;
            }
            let err = store_to_wire(&e);
            for (_, o) in outcomes.iter_mut() {
                if matches!(o, Outcome::Done(Ok(_)) | Outcome::CrossMdt(_)) {
                    *o = Outcome::Done(Err(err.clone()));
                }
            }
        }
    }
    // Committed (or undone): opens and closes outside this thread may trust the inodes
    // this batch touched again.
    lock(&engine.handles).end_batch();
    engine.counters.ops.fetch_add(n, Ordering::Relaxed);
    for (reply, outcome) in outcomes {
        if let Some(reply) = reply {
            // The caller may have gone away (its request was cancelled): nothing to do.
            let _ = reply.send(outcome);
        }
    }
}

type Answered = Vec<(Option<oneshot::Sender<Outcome>>, Outcome)>;

/// Applies a batch in one transaction and commits it: durably (fsync) unless `lazy`.
fn apply_batch(
    engine: &mut Engine,
    batch: Vec<Pending>,
    lazy: bool,
) -> (Answered, Effects, Result<(), StoreError>) {
    let mut fx = Effects::default();
    let mut out: Answered = Vec::with_capacity(batch.len());
    let txn = match engine.db.begin_write() {
        Ok(t) => t,
        Err(e) => {
            let e = StoreError::from(e);
            let w = store_to_wire(&e);
            for p in batch {
                out.push((p.reply, Outcome::Done(Err(w.clone()))));
            }
            return (out, fx, Err(e));
        }
    };
    let meta_before = engine.meta.clone();
    let mut failure: Option<StoreError> = None;
    {
        let mut tx = match Tx::open(&txn) {
            Ok(tx) => tx,
            Err(e) => {
                let w = store_to_wire(&e);
                for p in batch {
                    out.push((p.reply, Outcome::Done(Err(w.clone()))));
                }
                return (out, fx, Err(e));
            }
        };
        for p in batch {
            if let Some(e) = &failure {
                out.push((p.reply, Outcome::Done(Err(store_to_wire(e)))));
                continue;
            }
            let outcome = match apply(engine, &mut tx, &mut fx, p.conn, &p.op) {
                Ok(reply) => Outcome::Done(Ok(reply)),
                Err(Fail::Wire(e)) => Outcome::Done(Err(e)),
                Err(Fail::NeedSeq) => Outcome::NeedSeq(p.op),
                Err(Fail::CrossMdt(intent)) => Outcome::CrossMdt(intent),
                Err(Fail::NeedDirMove { dir, dst_parent }) => Outcome::NeedDirMove {
                    op: p.op,
                    dir,
                    dst_parent,
                },
                Err(Fail::Store(e)) => {
                    let w = store_to_wire(&e);
                    failure = Some(e);
                    Outcome::Done(Err(w))
                }
            };
            out.push((p.reply, outcome));
        }
    }
    if let Some(e) = failure {
        drop(txn);
        engine.meta = meta_before;
        return (out, fx, Err(e));
    }
    if !fx.wrote && engine.meta == meta_before {
        // Nothing changed (reads ordered with writes, failed validations): no fsync needed.
        drop(txn);
        return (out, fx, Ok(()));
    }
    fx.wrote = true;
    let result = (|| -> Result<(), StoreError> {
        let mut txn = txn;
        {
            let mut meta = txn.open_table(store::META)?;
            let v = store::encode(&engine.meta)?;
            meta.insert(store::META_KEY, v.as_slice())?;
        }
        txn.set_durability(if lazy {
            Durability::None
        } else {
            Durability::Immediate
        })?;
        txn.commit()?;
        Ok(())
    })();
    (out, fx, result)
}

/// Makes every earlier commit durable.
fn durable_empty_commit(engine: &Engine) -> Result<(), StoreError> {
    let mut txn = engine.db.begin_write()?;
    txn.set_durability(Durability::Immediate)?;
    txn.commit()?;
    Ok(())
}

fn reload_meta(engine: &Engine) -> Result<Option<store::Meta>, StoreError> {
    use redb::ReadableDatabase;
    let r = engine.db.begin_read()?;
    let t = r.open_table(store::META)?;
    store::get_meta(&t)
}

/// The open handle a request names, if any.
fn handle_of(req: &MdtRequest) -> Option<u64> {
    match req {
        MdtRequest::Close { handle, .. }
        | MdtRequest::SizeMerge { handle, .. }
        | MdtRequest::Instantiate { handle, .. }
        | MdtRequest::SwapLayouts { handle, .. } => Some(*handle),
        _ => None,
    }
}

/// Applies one operation.
fn apply(
    engine: &mut Engine,
    tx: &mut Tx<'_>,
    fx: &mut Effects,
    conn: u64,
    op: &WriteOp,
) -> Result<MdtReply, Fail> {
    match op {
        WriteOp::Req(req, n) => apply_numbered(engine, tx, fx, conn, n, req, None),
        WriteOp::MoveDir(req, n, dm) => apply_numbered(engine, tx, fx, conn, n, req, Some(dm)),
        WriteOp::DropConn => engine.drop_conn(tx, fx, conn),
        WriteOp::ParkConn(client) => {
            engine.handles().park(conn, *client);
            Ok(MdtReply::Ok)
        }
        WriteOp::DropParked(client, before) => engine.drop_parked(tx, fx, *client, *before),
        WriteOp::GrantSeq(range) => {
            engine.grant(*range, fx);
            Ok(MdtReply::Ok)
        }
        WriteOp::HasFids => {
            if engine.fid_available() {
                Ok(MdtReply::Ok)
            } else {
                Err(Fail::NeedSeq)
            }
        }
        WriteOp::ReapOrphans => {
            let reaped = engine.reap_orphans(tx, fx)?;
            if reaped > 0 {
                tracing::info!(
                    reaped,
                    "destroyed orphans of the previous run nobody reopened"
                );
            }
            Ok(MdtReply::Ok)
        }
        WriteOp::FinishIntent(intent, outcome) => engine.finish_intent(tx, fx, intent, outcome),
        WriteOp::DestroyDone(seqs) => (|| {
            for s in seqs {
                tx.destroy.remove(s.to_be_bytes().as_slice())?;
            }
            fx.wrote = true;
            Ok(MdtReply::Ok)
        })(),
    }
}

/// A client request: a resend of a numbered one is answered from its recorded reply.
fn apply_numbered(
    engine: &mut Engine,
    tx: &mut Tx<'_>,
    fx: &mut Effects,
    conn: u64,
    n: &Origin,
    req: &MdtRequest,
    dm: Option<&DirMove>,
) -> Result<MdtReply, Fail> {
    if n.seq == 0 {
        return apply_req(engine, tx, fx, conn, n, req, dm);
    }
    if let Some(reply) = crate::replies::recorded(tx, n)? {
        return crate::replies::reconstruct(engine, tx, fx, conn, req, reply);
    }
    // Record the reply only if the operation changed something: one that did not (a
    // failed check, a plain open) is harmless to run again, and recording it would cost a
    // commit.
    let wrote_before = std::mem::take(&mut fx.wrote);
    let r = apply_req(engine, tx, fx, conn, n, req, dm);
    if let Ok(reply) = &r
        && fx.wrote
    {
        crate::replies::record(tx, n, reply)?;
    }
    fx.wrote |= wrote_before;
    r
}

fn apply_req(
    engine: &mut Engine,
    tx: &mut Tx<'_>,
    fx: &mut Effects,
    conn: u64,
    origin: &Origin,
    req: &MdtRequest,
    dm: Option<&DirMove>,
) -> Result<MdtReply, Fail> {
    // A handle this client opened on a connection that broke becomes this connection's.
    if let Some(h) = handle_of(req) {
        engine.handles().adopt(conn, origin.client, h);
    }
    // A directory being migrated to another MDT does not change (the client waits).
    Engine::check_unfrozen(tx, req)?;
    match req {
        MdtRequest::SetAttr { fid, set, cred } => engine.setattr(tx, fx, *fid, set, cred),
        MdtRequest::Create {
            parent,
            name,
            mode,
            rdev,
            exclusive,
            layout,
            open,
            cred,
        } => engine.create(
            tx,
            fx,
            conn,
            *parent,
            name,
            *mode,
            *rdev,
            *exclusive,
            layout.as_ref(),
            *open,
            cred,
        ),
        MdtRequest::Mkdir {
            parent,
            name,
            mode,
            cred,
        } => engine.mkdir_inheriting(tx, fx, *parent, name, *mode, cred, origin),
        MdtRequest::Symlink {
            parent,
            name,
            target,
            cred,
        } => engine.symlink(tx, fx, *parent, name, target, cred),
        MdtRequest::Link {
            fid,
            new_parent,
            new_name,
            cred,
        } => engine.link(tx, fx, *fid, *new_parent, new_name, cred, origin),
        MdtRequest::Unlink { parent, name, cred } => {
            engine.unlink(tx, fx, *parent, name, cred, false, origin)
        }
        MdtRequest::Rmdir { parent, name, cred } => {
            engine.unlink(tx, fx, *parent, name, cred, true, origin)
        }
        MdtRequest::MkdirOn {
            parent,
            name,
            mode,
            mdt,
            cred,
        } => engine.prepare_mkdir_on(tx, fx, *parent, name, *mode, *mdt, cred, origin),
        MdtRequest::MkdirStriped {
            parent,
            name,
            mode,
            count,
            hash,
            cred,
        } => {
            engine.prepare_mkdir_striped(tx, fx, *parent, name, *mode, *count, *hash, cred, origin)
        }
        MdtRequest::SealDir { fid, seal } => engine.seal_dir(tx, fx, *fid, *seal),
        MdtRequest::AddLink { from, op, fid } => engine.add_link(tx, fx, *from, *op, *fid),
        MdtRequest::DropLink {
            from,
            op,
            fid,
            sticky_owner,
            cred,
        } => engine.drop_link(tx, fx, *from, *op, *fid, *sticky_owner, cred),
        MdtRequest::InsertEntry {
            from,
            op,
            parent,
            name,
            fid,
            kind,
            noreplace,
            cred,
        } => engine.insert_entry(
            tx, fx, *from, *op, *parent, name, *fid, *kind, *noreplace, cred,
        ),
        MdtRequest::ForgetOps { from, ops } => engine.forget_ops(tx, fx, *from, ops),
        MdtRequest::MigrateDir {
            parent,
            name,
            mdt,
            cred,
        } => engine.prepare_migrate(tx, fx, *parent, name, *mdt, cred, origin),
        MdtRequest::FreezeDir {
            fid,
            from,
            op,
            freeze,
        } => engine.freeze_dir(tx, fx, *fid, *from, *op, *freeze),
        MdtRequest::InsertEntries { dir, entries } => engine.insert_entries(tx, fx, *dir, entries),
        MdtRequest::DropMigrated { fid, max } => engine.drop_migrated(tx, fx, *fid, *max),
        MdtRequest::RenameLock {
            from,
            op,
            run,
            action,
        } => engine.rename_lock(tx, fx, *from, *op, *run, action),
        MdtRequest::SetParent {
            fid,
            old_parent,
            new_parent,
        } => engine.set_parent(tx, fx, *fid, *old_parent, *new_parent),
        MdtRequest::FsckRepair { repair } => engine.fsck_repair(tx, fx, repair),
        MdtRequest::SetDirDefault { fid, default, cred } => {
            engine.set_dir_default(tx, fx, *fid, default.as_ref(), cred)
        }
        MdtRequest::CreateRemoteDir {
            from,
            op,
            parent,
            mode,
            uid,
            gid,
            default_layout,
            dir_default,
        } => engine.create_remote_dir(
            tx,
            fx,
            *from,
            *op,
            *parent,
            *mode,
            *uid,
            *gid,
            default_layout.as_ref(),
            dir_default.as_ref(),
        ),
        MdtRequest::RemoveRemoteDir {
            fid,
            parent,
            sticky_owner,
            cred,
        } => engine.remove_remote_dir(tx, fx, *fid, *parent, *sticky_owner, cred),
        MdtRequest::Rename {
            src_parent,
            src_name,
            dst_parent,
            dst_name,
            flags,
            cred,
        } => engine.rename(
            tx,
            fx,
            *src_parent,
            src_name,
            *dst_parent,
            dst_name,
            *flags,
            cred,
            origin,
            dm,
        ),
        MdtRequest::SetXattr {
            fid,
            name,
            value,
            mode,
            cred,
        } => engine.setxattr(tx, fx, *fid, name, value, *mode, cred),
        MdtRequest::RemoveXattr { fid, name, cred } => engine.removexattr(tx, fx, *fid, name, cred),
        MdtRequest::Open { fid, flags, cred } => engine.open(tx, fx, conn, *fid, *flags, cred),
        MdtRequest::Close {
            handle,
            size,
            blocks,
            modified,
        } => engine.close(tx, fx, conn, *handle, *size, *blocks, *modified),
        MdtRequest::SetLayout {
            fid,
            template,
            cred,
        } => engine.setlayout(tx, fx, *fid, template.as_ref(), cred),
        MdtRequest::SizeMerge {
            handle,
            size,
            blocks,
            modified,
        } => engine.size_merge(tx, fx, conn, *handle, *size, *blocks, *modified),
        MdtRequest::Instantiate { handle, start, end } => {
            engine.instantiate(tx, fx, conn, *handle, *start, *end)
        }
        MdtRequest::SwapLayouts {
            fid,
            volatile,
            handle,
            data_version,
            cred,
        } => engine.swap_layouts(tx, fx, conn, *fid, *volatile, *handle, *data_version, cred),
        MdtRequest::Lookup { .. }
        | MdtRequest::GetAttr { .. }
        | MdtRequest::ReadLink { .. }
        | MdtRequest::ReadDir { .. }
        | MdtRequest::ScanDir { .. }
        | MdtRequest::GetXattr { .. }
        | MdtRequest::ListXattr { .. }
        | MdtRequest::StatFs
        | MdtRequest::GetLayout { .. }
        | MdtRequest::GetDirStripes { .. }
        | MdtRequest::GetDirDefault { .. }
        | MdtRequest::DirParent { .. }
        | MdtRequest::FsckInodes { .. }
        | MdtRequest::FsckEntries { .. }
        | MdtRequest::GetLock { .. }
        | MdtRequest::SetLock { .. }
        | MdtRequest::CancelLockWait { .. }
        | MdtRequest::ReleaseLocks { .. } => {
            Err(crate::error::fail(Errno::Proto, "not a write operation"))
        }
    }
}
