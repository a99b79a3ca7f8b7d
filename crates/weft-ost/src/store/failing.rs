//! A failure-injecting [`ObjectStore`]: wraps any store and makes chosen calls fail — the
//! Nth call, or calls of one operation — with EIO, ENOSPC or a short write (the pattern of
//! mountpoint-s3's mock and countdown-failure clients). Calls that are not failed go to
//! the wrapped store unchanged.
//!
//! ```
//! use weft_ost::store::failing::{FailingStore, Fault, Op};
//! use weft_ost::store::memory::MemoryStore;
//! let store = FailingStore::new(MemoryStore::new());
//! store.fail_next(Op::Write, Fault::NoSpace); // the next write fails with ENOSPC
//! store.fail_nth_call(3, Fault::Io); // the third call from now, whatever it is, with EIO
//! store.clear(); // every call goes through again
//! ```

use crate::store::{ListPage, ObjectStat, ObjectStore, StoreCounters, StoreError, StoreResult};
use bytes::Bytes;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use weft_proto::ObjectId;
use weft_proto::mdt::StatFs;

/// The operations of [`ObjectStore`], one per method.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(missing_docs)] // each is the method of the same name
pub enum Op {
    Read,
    Write,
    SetSize,
    Punch,
    Stat,
    Seek,
    Version,
    SetVersion,
    Remove,
    SyncRemoved,
    SyncData,
    SyncObject,
    SyncAll,
    List,
    StatFs,
    VersionReserve,
    SetVersionReserve,
}

/// What an injected failure does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The call fails with EIO, having done nothing.
    Io,
    /// The call fails with ENOSPC, having done nothing.
    NoSpace,
    /// A write stores the first half of its data, then fails with
    /// [`StoreError::ShortWrite`]; any other call fails as with [`Fault::Io`].
    ShortWrite,
}

/// One armed failure.
#[derive(Debug)]
struct Rule {
    /// The operation it applies to (`None`: every call).
    op: Option<Op>,
    /// Matching calls still let through before it fires.
    skip: u64,
    /// How many more times it fires (`None`: until cleared).
    times: Option<u64>,
    fault: Fault,
}

/// A store whose calls fail when told to.
#[derive(Debug, Default)]
pub struct FailingStore<S> {
    inner: S,
    rules: Mutex<Vec<Rule>>,
    calls: AtomicU64,
    injected: AtomicU64,
}

impl<S: ObjectStore> FailingStore<S> {
    /// Wraps `inner`; nothing fails until told to.
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            rules: Mutex::new(Vec::new()),
            calls: AtomicU64::new(0),
            injected: AtomicU64::new(0),
        }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Every call of `op` fails with `fault` until [`FailingStore::clear`].
    pub fn fail(&self, op: Op, fault: Fault) {
        self.arm(Some(op), 0, None, fault);
    }

    /// The next call of `op` fails with `fault`.
    pub fn fail_next(&self, op: Op, fault: Fault) {
        self.arm(Some(op), 0, Some(1), fault);
    }

    /// The `n`th call of `op` from now (1 is the next) fails with `fault`, once.
    pub fn fail_nth(&self, op: Op, n: u64, fault: Fault) {
        self.arm(Some(op), n.saturating_sub(1), Some(1), fault);
    }

    /// The `n`th call from now of any operation (1 is the next) fails with `fault`, once.
    pub fn fail_nth_call(&self, n: u64, fault: Fault) {
        self.arm(None, n.saturating_sub(1), Some(1), fault);
    }

    /// Disarms every failure.
    pub fn clear(&self) {
        self.rules.lock().clear();
    }

    /// Calls made so far (failed or not).
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// Failures injected so far.
    pub fn injected(&self) -> u64 {
        self.injected.load(Ordering::Relaxed)
    }

    fn arm(&self, op: Option<Op>, skip: u64, times: Option<u64>, fault: Fault) {
        self.rules.lock().push(Rule {
            op,
            skip,
            times,
            fault,
        });
    }

    /// Counts a call of `op` and says whether it fails, and how. Every matching rule
    /// counts the call; the first one due fires.
    fn check(&self, op: Op) -> Option<Fault> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let mut rules = self.rules.lock();
        let mut fired = None;
        for (i, rule) in rules.iter_mut().enumerate() {
            if rule.op.is_some_and(|o| o != op) {
                continue;
            }
            if rule.skip > 0 {
                rule.skip -= 1;
            } else if fired.is_none() {
                fired = Some(i);
            }
        }
        let i = fired?;
        let fault = rules[i].fault;
        if let Some(t) = rules[i].times.as_mut() {
            *t -= 1;
            if *t == 0 {
                rules.remove(i);
            }
        }
        self.injected.fetch_add(1, Ordering::Relaxed);
        Some(fault)
    }

    /// Runs `call` on the inner store unless a failure is due for `op`.
    fn run<T>(&self, op: Op, call: impl FnOnce(&S) -> StoreResult<T>) -> StoreResult<T> {
        match self.check(op) {
            None => call(&self.inner),
            Some(fault) => Err(injected(op, fault)),
        }
    }
}

/// The error of an injected `fault` on a call of `op` (short writes aside).
fn injected(op: Op, fault: Fault) -> StoreError {
    let errno = match fault {
        Fault::NoSpace => rustix::io::Errno::NOSPC,
        Fault::Io | Fault::ShortWrite => rustix::io::Errno::IO,
    };
    StoreError::io(format!("{op:?} (injected)"), errno.into())
}

impl<S: ObjectStore> ObjectStore for FailingStore<S> {
    fn read(&self, id: &ObjectId, offset: u64, len: usize) -> StoreResult<Bytes> {
        self.run(Op::Read, |s| s.read(id, offset, len))
    }

    fn write(
        &self,
        id: &ObjectId,
        offset: u64,
        data: &Bytes,
        compress: Option<bool>,
    ) -> StoreResult<bool> {
        match self.check(Op::Write) {
            None => self.inner.write(id, offset, data, compress),
            Some(Fault::ShortWrite) => {
                let half = data.slice(..data.len() / 2);
                self.inner.write(id, offset, &half, compress)?;
                Err(StoreError::ShortWrite {
                    what: format!("write {id} (injected)"),
                    written: half.len() as u64,
                    len: data.len() as u64,
                })
            }
            Some(fault) => Err(injected(Op::Write, fault)),
        }
    }

    fn set_size(&self, id: &ObjectId, size: u64, compress: Option<bool>) -> StoreResult<()> {
        self.run(Op::SetSize, |s| s.set_size(id, size, compress))
    }

    fn punch(&self, id: &ObjectId, offset: u64, len: u64) -> StoreResult<()> {
        self.run(Op::Punch, |s| s.punch(id, offset, len))
    }

    fn stat(&self, id: &ObjectId) -> StoreResult<ObjectStat> {
        self.run(Op::Stat, |s| s.stat(id))
    }

    fn seek(&self, id: &ObjectId, offset: u64, hole: bool) -> StoreResult<Option<u64>> {
        self.run(Op::Seek, |s| s.seek(id, offset, hole))
    }

    fn version(&self, id: &ObjectId) -> StoreResult<Option<u64>> {
        self.run(Op::Version, |s| s.version(id))
    }

    fn set_version(&self, id: &ObjectId, version: u64) -> StoreResult<()> {
        self.run(Op::SetVersion, |s| s.set_version(id, version))
    }

    fn remove(&self, id: &ObjectId) -> StoreResult<bool> {
        self.run(Op::Remove, |s| s.remove(id))
    }

    fn sync_removed(&self, ids: &[ObjectId]) -> StoreResult<()> {
        self.run(Op::SyncRemoved, |s| s.sync_removed(ids))
    }

    fn sync_data(&self, id: &ObjectId, created: bool) -> StoreResult<()> {
        self.run(Op::SyncData, |s| s.sync_data(id, created))
    }

    fn sync_object(&self, id: &ObjectId) -> StoreResult<()> {
        self.run(Op::SyncObject, |s| s.sync_object(id))
    }

    fn sync_all(&self) -> StoreResult<()> {
        self.run(Op::SyncAll, |s| s.sync_all())
    }

    fn list(&self, after: Option<&ObjectId>, max: usize) -> StoreResult<ListPage> {
        self.run(Op::List, |s| s.list(after, max))
    }

    fn statfs(&self) -> StoreResult<StatFs> {
        self.run(Op::StatFs, |s| s.statfs())
    }

    fn version_reserve(&self) -> StoreResult<u64> {
        self.run(Op::VersionReserve, |s| s.version_reserve())
    }

    fn set_version_reserve(&self, end: u64) -> StoreResult<()> {
        self.run(Op::SetVersionReserve, |s| s.set_version_reserve(end))
    }

    fn counters(&self) -> StoreCounters {
        self.inner.counters()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::memory::MemoryStore;

    #[test]
    fn nth_and_per_operation_failures_fire_as_armed() {
        let s = FailingStore::new(MemoryStore::new());
        s.fail_nth(Op::StatFs, 2, Fault::Io);
        assert!(s.statfs().is_ok());
        assert!(s.version_reserve().is_ok(), "other operations do not count");
        let e = s.statfs().unwrap_err();
        assert_eq!(e.errno(), weft_proto::Errno::Io);
        assert!(s.statfs().is_ok(), "once");
        s.fail_nth_call(2, Fault::NoSpace);
        assert!(s.version_reserve().is_ok());
        assert_eq!(s.statfs().unwrap_err().errno(), weft_proto::Errno::NoSpc);
        s.fail(Op::SyncAll, Fault::Io);
        assert!(s.sync_all().is_err() && s.sync_all().is_err());
        s.clear();
        assert!(s.sync_all().is_ok());
        assert_eq!((s.calls(), s.injected()), (9, 4));
    }
}
