//! Group commit: one thread applies every pending write operation in one redb write
//! transaction, commits once, then answers all of them.
//!
//! A batch is whatever queued up while the previous commit ran (up to `max_batch`). A
//! batch of changes that stay on this MDT is committed without an fsync, its changes
//! written to the redo log first (see [`crate::redo`]); every [`redo::MAX_DEFERRED`] such
//! commits (or [`redo::MAX_LOG_BYTES`] of log), every [`crate::redo::COMMIT_INTERVAL`], on a client's `Sync` and for any batch
//! that tells another server about its changes, the commit is durable (fsync) and the log
//! is emptied. Objects are destroyed on OSTs only once the unlink that freed them is
//! durable. An operation that fails validation has written nothing and is answered with its
//! errno while the rest of the batch commits. A store failure aborts the batch: every
//! operation in it gets EIO and handle changes are reverted.

use crate::dir_moves::DirMove;
use crate::engine::{Effects, Engine, Tx};
use crate::error::{Fail, StoreError, store_to_wire};
use crate::redo;
use crate::remote::Intent;
use crate::store;
use parking_lot::Mutex;
use redb::Durability;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, mpsc, oneshot};
use weft_proto::mdt::{MdtReply, MdtRequest};
use weft_proto::{Errno, FidSeqRange, WireError};

mod apply;

use apply::apply;

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
    /// Make every commit so far durable (a client's `fsync`, the commit interval).
    Sync,
    /// The HSM coordinator's first step of a restore: instantiate a released file's layout
    /// over its size (see `crate::hsm`).
    HsmInstantiate(weft_proto::Fid),
    /// The HSM coordinator's last step: the file is loaded from this archive record into
    /// objects of this layout generation; clear RELEASED (durably) if both still hold.
    HsmRestored(weft_proto::Fid, Box<weft_proto::hsm::ArchiveRef>, u32),
}

impl WriteOp {
    /// Whether the operation may be committed without an fsync, the redo log keeping it
    /// until the next durable commit: what changes only this MDT's namespace. Requests of
    /// other servers, the last step of a cross-MDT operation and directory moves are made
    /// durable before they are answered, since another server acts on the answer; so is a
    /// batch in which a client request starts a cross-MDT operation (checked after it ran).
    fn may_defer(&self) -> bool {
        match self {
            WriteOp::Req(req, _) => matches!(
                req,
                MdtRequest::Create { .. }
                    | MdtRequest::Mkdir { .. }
                    | MdtRequest::Symlink { .. }
                    | MdtRequest::Link { .. }
                    | MdtRequest::Unlink { .. }
                    | MdtRequest::Rmdir { .. }
                    | MdtRequest::Rename { .. }
                    | MdtRequest::SetAttr { .. }
                    | MdtRequest::SetXattr { .. }
                    | MdtRequest::RemoveXattr { .. }
                    | MdtRequest::Open { .. }
                    | MdtRequest::Close { .. }
                    | MdtRequest::SizeMerge { .. }
                    | MdtRequest::Instantiate { .. }
                    | MdtRequest::SetLayout { .. }
                    | MdtRequest::SetDirDefault { .. }
                    | MdtRequest::HsmSetFlags { .. }
            ),
            WriteOp::DropConn
            | WriteOp::ParkConn(_)
            | WriteOp::DropParked(..)
            | WriteOp::GrantSeq(_)
            | WriteOp::HasFids
            | WriteOp::DestroyDone(_)
            | WriteOp::ReapOrphans
            | WriteOp::HsmInstantiate(_) => true,
            // A restore's end is durable before readers are told the file is loaded.
            WriteOp::FinishIntent(..)
            | WriteOp::MoveDir(..)
            | WriteOp::Sync
            | WriteOp::HsmRestored(..) => false,
        }
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
/// [`weft_rpc::RequestContext`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Origin {
    /// The client's node UUID (nil when unknown): a client that reconnects may use the
    /// handles it opened on its previous connection.
    pub client: uuid::Uuid,
    /// The request's number; 0 for a request that is not numbered.
    pub seq: u64,
    /// Every number below this has been answered.
    pub acked: u64,
    /// Whether the client may send the request again (over a connection that can break):
    /// its reply is recorded then. A client of this process never does.
    pub resendable: bool,
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

// Moved once through the commit queue; boxing every operation would cost an allocation
// per request for a message that is almost always an operation.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Msg {
    Op(Pending),
    Shutdown(oneshot::Sender<()>),
}

/// Tuning of the commit loop.
pub(crate) struct CommitConfig {
    pub max_batch: usize,
}

/// The commit thread's state, shared with the request paths: a change that needs no fsync
/// is committed by the task that received it when it is the only write in flight and none
/// overlapped another lately ([`SHARED_FOR`]), saving the two thread hand-offs to the
/// commit thread and back (about a third of an MDT create on a machine whose idle CPUs
/// sleep). Everything else goes through the commit thread's queue and is batched there:
/// with several writers, the commits then run beside the tasks that receive and answer
/// requests instead of in them (4 processes creating or unlinking: ~10 % more operations
/// per second on this VM than with every lone write committed inline; one process: ~10 %
/// fewer when queued, hence the inline path).
pub(crate) struct Committer {
    state: Mutex<Committing>,
    destroy_wake: Arc<Notify>,
    gate: InlineGate,
}

/// How long after two writes overlapped every write goes through the commit thread.
const SHARED_FOR: Duration = Duration::from_millis(2);

/// Which writes may be committed inline: counts the writes in flight and remembers when
/// two last overlapped.
pub(crate) struct InlineGate {
    in_flight: AtomicUsize,
    /// Until when (microseconds after `epoch`) writes go through the queue: the last time
    /// a write was submitted while another was in flight, plus [`SHARED_FOR`].
    shared_until: AtomicU64,
    epoch: Instant,
}

/// One submitted write, counted in [`InlineGate::in_flight`] until dropped.
pub(crate) struct Submitted<'a>(&'a InlineGate);

impl Drop for Submitted<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl InlineGate {
    fn new() -> Self {
        Self {
            in_flight: AtomicUsize::new(0),
            shared_until: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }

    /// Counts a write as submitted until the returned guard is dropped; whether it may be
    /// committed inline: it is the only write in flight and none overlapped another
    /// within [`SHARED_FOR`].
    pub fn enter(&self) -> (Submitted<'_>, bool) {
        let others = self.in_flight.fetch_add(1, Ordering::AcqRel);
        let now = u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX);
        if others > 0 {
            let until = now.saturating_add(SHARED_FOR.as_micros() as u64);
            self.shared_until.fetch_max(until, Ordering::AcqRel);
            return (Submitted(self), false);
        }
        let alone = now >= self.shared_until.load(Ordering::Acquire);
        (Submitted(self), alone)
    }
}

struct Committing {
    engine: Engine,
    deferred: Deferred,
}

impl Committer {
    pub fn new(engine: Engine, destroy_wake: Arc<Notify>) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(Committing {
                engine,
                deferred: Deferred::default(),
            }),
            destroy_wake,
            gate: InlineGate::new(),
        })
    }

    /// Counts a write as submitted until the returned guard is dropped; whether it may be
    /// committed inline (see [`Committer::try_inline`] and [`InlineGate::enter`]).
    pub fn submitted(&self) -> (Submitted<'_>, bool) {
        self.gate.enter()
    }

    /// Applies `batch` in one transaction and answers it (what the commit thread does with
    /// each batch it takes from the queue).
    pub(crate) fn run_batch(&self, batch: Vec<Pending>) {
        let mut g = self.state.lock();
        let Committing { engine, deferred } = &mut *g;
        run_batch(engine, batch, &self.destroy_wake, deferred);
    }

    /// Commits `p` on the calling thread if it may be committed without an fsync, that
    /// would not be the commit that must be durable, and nobody is committing now; hands
    /// it back otherwise (for the commit thread's queue). Callers try this only for a
    /// write [`Committer::submitted`] found alone.
    pub fn try_inline(&self, p: Pending) -> Option<Pending> {
        if !p.op.may_defer() {
            return Some(p);
        }
        let Some(mut g) = self.state.try_lock() else {
            return Some(p);
        };
        if !g.engine.redo.has_room(g.deferred.commits + 1) {
            return Some(p);
        }
        let Committing { engine, deferred } = &mut *g;
        run_batch(engine, vec![p], &self.destroy_wake, deferred);
        None
    }
}

/// Runs the commit loop until the channel closes or a shutdown message arrives.
pub(crate) fn run(
    committer: Arc<Committer>,
    mut rx: mpsc::UnboundedReceiver<Msg>,
    cfg: CommitConfig,
) -> Option<oneshot::Sender<()>> {
    let mut shutdown = None;
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
            committer.run_batch(batch);
        }
    }
    // Drain what raced with shutdown so no caller waits forever.
    rx.close();
    let mut rest = Vec::new();
    while let Ok(Msg::Op(p)) = rx.try_recv() {
        rest.push(p);
    }
    if !rest.is_empty() {
        committer.run_batch(rest);
    }
    let mut g = committer.state.lock();
    let Committing { engine, deferred } = &mut *g;
    if deferred.commits > 0 {
        // Leave nothing for the next start to redo.
        if let Err(e) = make_durable(engine, deferred, &committer.destroy_wake) {
            tracing::warn!(error = %e, "final MDT commit failed; the next start replays the redo log");
        }
    }
    shutdown
}

/// Commits made without an fsync since the last durable one.
#[derive(Default)]
struct Deferred {
    commits: u32,
    /// One of them logged objects to destroy.
    destroys: bool,
}

/// How a batch's transaction ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Committed {
    /// Nothing was written: nothing committed.
    Nothing,
    /// Committed without an fsync, its frame in the redo log.
    Deferred,
    /// Committed with an fsync: everything before it is durable too.
    Durable,
}

fn run_batch(
    engine: &mut Engine,
    batch: Vec<Pending>,
    destroy_wake: &Notify,
    state: &mut Deferred,
) {
    let n = batch.len() as u64;
    let sync = batch.iter().any(|p| matches!(p.op, WriteOp::Sync));
    let may_defer =
        !sync && engine.redo.has_room(state.commits) && batch.iter().all(|p| p.op.may_defer());
    let (outcomes, fx, result) = apply_batch(engine, batch, may_defer);
    let mut outcomes = outcomes;
    let result = result.and_then(|committed| {
        if committed != Committed::Nothing {
            engine.counters.commits.fetch_add(1, Ordering::Relaxed);
        }
        state.destroys |= fx.destroys;
        match committed {
            Committed::Deferred => state.commits += 1,
            Committed::Durable => durable(engine, state, destroy_wake),
            Committed::Nothing => {}
        }
        engine.publish();
        if sync && state.commits > 0 {
            make_durable(engine, state, destroy_wake)?;
        }
        Ok(())
    });
    if let Err(e) = result {
        tracing::error!(error = %e, "MDT commit failed; batch answered with EIO");
        engine.handles.lock().undo(fx.undo);
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
    engine
        .counters
        .deferred
        .store(u64::from(state.commits), Ordering::Relaxed);
    // Committed (or undone): opens and closes outside this thread may trust the inodes
    // this batch touched again.
    engine.handles.lock().end_batch();
    engine.counters.ops.fetch_add(n, Ordering::Relaxed);
    for (reply, outcome) in outcomes {
        if let Some(reply) = reply {
            // The caller may have gone away (its request was cancelled): nothing to do.
            let _ = reply.send(outcome);
        }
    }
}

/// After a durable commit: the redo log is emptied and the objects of every unlink so far
/// may be destroyed.
fn durable(engine: &mut Engine, state: &mut Deferred, destroy_wake: &Notify) {
    engine.redo.clear();
    state.commits = 0;
    engine
        .counters
        .durable_commits
        .fetch_add(1, Ordering::Relaxed);
    engine
        .counters
        .durable_destroys
        .store(engine.meta.next_destroy, Ordering::Release);
    if std::mem::take(&mut state.destroys) {
        destroy_wake.notify_one();
    }
}

/// Makes every commit so far durable with an empty durable commit.
fn make_durable(
    engine: &mut Engine,
    state: &mut Deferred,
    destroy_wake: &Notify,
) -> Result<(), StoreError> {
    durable_empty_commit(engine)?;
    durable(engine, state, destroy_wake);
    Ok(())
}

type Answered = Vec<(Option<oneshot::Sender<Outcome>>, Outcome)>;

/// Applies a batch in one transaction and commits it: without an fsync if `may_defer` and
/// nothing in it starts a cross-MDT operation, durably otherwise.
fn apply_batch(
    engine: &mut Engine,
    batch: Vec<Pending>,
    may_defer: bool,
) -> (Answered, Effects, Result<Committed, StoreError>) {
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
    if let Some(e) = failure {
        drop(tx);
        drop(txn);
        engine.meta = meta_before;
        return (out, fx, Err(e));
    }
    if !fx.wrote && engine.meta == meta_before {
        // Nothing changed (reads ordered with writes, failed validations): nothing to commit.
        return (out, fx, Ok(Committed::Nothing));
    }
    fx.wrote = true;
    // The other MDT of a cross-MDT operation acts on its prepared step: durable first.
    let defer = may_defer && !out.iter().any(|(_, o)| matches!(o, Outcome::CrossMdt(_)));
    let lsn = engine.redo.next_lsn();
    let frame = (|| {
        let v = store::encode(&engine.meta)?;
        tx.meta.insert(store::META_KEY, v.as_slice())?;
        redo::set_lsn(&mut tx.meta, lsn)?;
        // A durable commit needs no frame.
        Ok::<_, StoreError>(if defer { tx.take_frame(lsn) } else { None })
    })();
    drop(tx);
    let result = frame.and_then(|frame| commit(engine, txn, lsn, frame));
    (out, fx, result)
}

/// Commits `txn` (commit `lsn`): without an fsync if it has a redo-log `frame`, which is
/// appended to the log before anything is answered; durably otherwise.
fn commit(
    engine: &mut Engine,
    mut txn: redb::WriteTransaction,
    lsn: u64,
    frame: Option<Vec<u8>>,
) -> Result<Committed, StoreError> {
    txn.set_durability(if frame.is_some() {
        Durability::None
    } else {
        Durability::Immediate
    })?;
    txn.commit()?;
    let Some(frame) = frame else {
        engine.redo.committed(lsn);
        return Ok(Committed::Durable);
    };
    match engine.redo.append(lsn, &frame) {
        Ok(()) => Ok(Committed::Deferred),
        Err(e) => {
            // The change is in redb's memory but not in the log: make it durable instead.
            tracing::warn!(error = %e, "writing the redo log failed; committing with an fsync");
            engine.redo.committed(lsn);
            durable_empty_commit(engine)?;
            Ok(Committed::Durable)
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lone_write_goes_inline_until_writes_overlap() {
        let g = InlineGate::new();
        let (first, alone) = g.enter();
        assert!(alone);
        let (second, alone) = g.enter();
        assert!(!alone, "another write is in flight");
        drop((first, second));
        // Writes overlapped a moment ago: more are likely; they share the queue.
        assert!(!g.enter().1);
        std::thread::sleep(SHARED_FOR + Duration::from_millis(1));
        let (lone, alone) = g.enter();
        assert!(alone);
        drop(lone);
        assert_eq!(g.in_flight.load(Ordering::Acquire), 0);
    }
}
