//! [`FailingObjects`]: another [`ObjectTargets`] (usually a
//! [`MemObjects`](super::fake::MemObjects)) with chosen calls failing — the Nth call, or
//! every call of an operation, OST or object — with EIO, ENOSPC (answered by the OST, so
//! final) or a timeout (a transport failure, so the engine resends it), as mountpoint-s3's
//! countdown-failure client does for its mock. A failed call never reaches the objects.

use super::object::{ObjectIo, ObjectTargets, Op};
use crate::error::ClientError;
use bytes::Bytes;
use futures::FutureExt;
use futures::future::BoxFuture;
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;
use weft_proto::ost::ObjectAttr;
use weft_proto::{Compression, Errno, ObjectId, TargetId, WireError};
use weft_rpc::RpcError;

/// How an injected failure fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The OST answers EIO.
    Io,
    /// The OST answers ENOSPC.
    NoSpace,
    /// The call times out (a transport failure: the engine resends it while its retry
    /// window lasts).
    TimedOut,
}

impl Fault {
    fn error(self, ost: u32) -> ClientError {
        let error = match self {
            Fault::Io => RpcError::Remote(WireError::new(Errno::Io, "injected EIO")),
            Fault::NoSpace => RpcError::Remote(WireError::new(Errno::NoSpc, "injected ENOSPC")),
            Fault::TimedOut => RpcError::TimedOut(Duration::from_millis(1)),
        };
        ClientError::Rpc {
            target: TargetId::ost(ost),
            error,
        }
    }
}

/// Which calls fail, and how: of the calls that match (operation, OST and object, each if
/// given), the `nth` (1-based) and the `times - 1` after it fail with `fault`.
#[derive(Debug, Clone)]
pub struct Rule {
    /// Only calls of this operation.
    pub op: Option<Op>,
    /// Only calls to this OST.
    pub ost: Option<u32>,
    /// Only calls naming this object.
    pub object: Option<ObjectId>,
    /// The first matching call that fails (1: the next one).
    pub nth: u64,
    /// How many matching calls fail from the `nth` on (`u64::MAX`: all of them).
    pub times: u64,
    /// How they fail.
    pub fault: Fault,
    seen: u64,
}

impl Rule {
    /// Fails the `nth` (1-based) call of operation `op` (any operation if `None`) once.
    pub fn nth(op: Option<Op>, nth: u64, fault: Fault) -> Self {
        Self {
            op,
            ost: None,
            object: None,
            nth: nth.max(1),
            times: 1,
            fault,
            seen: 0,
        }
    }

    /// Fails every call of operation `op` (any operation if `None`).
    pub fn always(op: Option<Op>, fault: Fault) -> Self {
        Self {
            times: u64::MAX,
            ..Self::nth(op, 1, fault)
        }
    }

    /// Only calls to OST `ost`.
    pub fn on_ost(self, ost: u32) -> Self {
        Self {
            ost: Some(ost),
            ..self
        }
    }

    /// Only calls naming `object`.
    pub fn on_object(self, object: ObjectId) -> Self {
        Self {
            object: Some(object),
            ..self
        }
    }

    /// `times` matching calls fail, from the `nth` on.
    pub fn times(self, times: u64) -> Self {
        Self { times, ..self }
    }

    /// Counts a call; whether it fails.
    fn fires(&mut self, op: Op, ost: u32, object: Option<ObjectId>) -> bool {
        let matches = self.op.is_none_or(|o| o == op)
            && self.ost.is_none_or(|o| o == ost)
            && (self.object.is_none() || self.object == object);
        if !matches {
            return false;
        }
        self.seen += 1;
        self.seen >= self.nth && self.seen - self.nth < self.times
    }
}

#[derive(Default)]
struct Rules {
    rules: Vec<Rule>,
    failed: u64,
}

/// `inner`'s objects, with the calls its [`Rule`]s choose failing.
#[derive(Clone)]
pub struct FailingObjects {
    inner: Arc<dyn ObjectTargets>,
    rules: Arc<Mutex<Rules>>,
}

impl FailingObjects {
    /// `inner`, failing nothing yet.
    pub fn new(inner: Arc<dyn ObjectTargets>) -> Self {
        Self {
            inner,
            rules: Arc::default(),
        }
    }

    /// Adds a rule (calls are counted from now on).
    pub fn fail(&self, rule: Rule) {
        self.rules.lock().rules.push(rule);
    }

    /// Drops every rule: nothing fails from now on.
    pub fn heal(&self) {
        self.rules.lock().rules.clear();
    }

    /// How many calls have failed so far.
    pub fn failed(&self) -> u64 {
        self.rules.lock().failed
    }
}

impl ObjectTargets for FailingObjects {
    fn target(
        &self,
        index: u32,
        ctx: &weft_rpc::RequestContext,
    ) -> Result<Arc<dyn ObjectIo>, ClientError> {
        Ok(Arc::new(FailingOst {
            inner: self.inner.target(index, ctx)?,
            rules: self.rules.clone(),
            index,
        }))
    }
}

/// One OST of a [`FailingObjects`].
struct FailingOst {
    inner: Arc<dyn ObjectIo>,
    rules: Arc<Mutex<Rules>>,
    index: u32,
}

impl FailingOst {
    /// Runs `call` unless a rule fails it.
    fn check<'a, T: Send + 'a>(
        &'a self,
        op: Op,
        object: Option<ObjectId>,
        call: impl FnOnce(&'a dyn ObjectIo) -> BoxFuture<'a, Result<T, ClientError>>,
    ) -> BoxFuture<'a, Result<T, ClientError>> {
        let mut rules = self.rules.lock();
        // Every rule counts the call, whichever fires.
        let fault = rules
            .rules
            .iter_mut()
            .filter_map(|r| r.fires(op, self.index, object).then_some(r.fault))
            .fold(None, |first, f| first.or(Some(f)));
        if let Some(f) = fault {
            rules.failed += 1;
            return futures::future::ready(Err(f.error(self.index))).boxed();
        }
        drop(rules);
        call(self.inner.as_ref())
    }
}

impl ObjectIo for FailingOst {
    fn read(
        &self,
        object: ObjectId,
        offset: u64,
        len: u32,
    ) -> BoxFuture<'_, Result<(Bytes, ObjectAttr), ClientError>> {
        self.check(Op::Read, Some(object), |o| o.read(object, offset, len))
    }

    fn write(
        &self,
        object: ObjectId,
        offset: u64,
        data: Bytes,
        sync: bool,
        compress: Compression,
    ) -> BoxFuture<'_, Result<ObjectAttr, ClientError>> {
        self.check(Op::Write, Some(object), |o| {
            o.write(object, offset, data, sync, compress)
        })
    }

    fn punch(
        &self,
        object: ObjectId,
        size: u64,
        compress: Compression,
    ) -> BoxFuture<'_, Result<ObjectAttr, ClientError>> {
        self.check(Op::Punch, Some(object), |o| o.punch(object, size, compress))
    }

    fn punch_range(
        &self,
        object: ObjectId,
        offset: u64,
        len: u64,
    ) -> BoxFuture<'_, Result<ObjectAttr, ClientError>> {
        self.check(Op::PunchRange, Some(object), |o| {
            o.punch_range(object, offset, len)
        })
    }

    fn seek(
        &self,
        object: ObjectId,
        offset: u64,
        hole: bool,
    ) -> BoxFuture<'_, Result<Option<u64>, ClientError>> {
        self.check(Op::Seek, Some(object), |o| o.seek(object, offset, hole))
    }

    fn getattr(&self, object: ObjectId) -> BoxFuture<'_, Result<ObjectAttr, ClientError>> {
        self.check(Op::GetAttr, Some(object), |o| o.getattr(object))
    }

    fn sync(&self, object: Option<ObjectId>) -> BoxFuture<'_, Result<(), ClientError>> {
        self.check(Op::Sync, object, |o| o.sync(object))
    }

    fn grant(&self, want: u64) -> BoxFuture<'_, Result<u64, ClientError>> {
        self.check(Op::Grant, None, |o| o.grant(want))
    }
}
