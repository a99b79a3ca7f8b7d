//! A redb storage backend that fails on command, for tests of what the MDT does when its
//! store fails: [`FailingBackend`] wraps another backend (redb's in-memory or file
//! backend) and, once armed through its [`FailSwitch`], fails the I/O calls chosen, at
//! once or after a number of calls. Open an MDT on it with [`crate::Mdt::open_with_backend`].
//!
//! redb latches an I/O error: after one, every later operation of that database fails
//! (`StorageError::PreviousIo`) until it is opened again. The MDT answers EIO then; a
//! restart recovers from the last durable commit and the redo log.

use redb::StorageBackend;
use std::io;
use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

/// Which backend calls an armed switch fails (a bit set).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IoKinds(u8);

impl IoKinds {
    /// Reads of the storage.
    pub const READ: IoKinds = IoKinds(1);
    /// Writes.
    pub const WRITE: IoKinds = IoKinds(2);
    /// `sync_data` (an fsync).
    pub const SYNC: IoKinds = IoKinds(4);
    /// `set_len` (growing or shrinking the storage).
    pub const SET_LEN: IoKinds = IoKinds(8);
    /// Every kind above.
    pub const ALL: IoKinds = IoKinds(15);

    /// Both sets.
    pub const fn or(self, other: IoKinds) -> IoKinds {
        IoKinds(self.0 | other.0)
    }

    fn has(self, kind: IoKinds) -> bool {
        self.0 & kind.0 != 0
    }
}

/// Arms and disarms a [`FailingBackend`]; shared with the backend (clone it freely).
#[derive(Debug, Default)]
pub struct FailSwitch {
    /// The kinds of calls that fail once armed (none: disarmed).
    kinds: AtomicU8,
    /// Calls of those kinds still to let through before failing.
    countdown: AtomicU64,
    /// Calls failed so far.
    failed: AtomicU64,
}

impl FailSwitch {
    /// A disarmed switch.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Fails every call of `kinds` from now on.
    pub fn fail_now(&self, kinds: IoKinds) {
        self.fail_after(kinds, 0);
    }

    /// Lets `calls` calls of `kinds` through, then fails every later one.
    pub fn fail_after(&self, kinds: IoKinds, calls: u64) {
        self.countdown.store(calls, Ordering::SeqCst);
        self.kinds.store(kinds.0, Ordering::SeqCst);
    }

    /// Lets every call through again.
    pub fn heal(&self) {
        self.kinds.store(0, Ordering::SeqCst);
    }

    /// How many calls failed so far.
    pub fn failures(&self) -> u64 {
        self.failed.load(Ordering::SeqCst)
    }

    /// Whether a call of `kind` fails (counting it down if it is armed for that kind).
    fn check(&self, kind: IoKinds, what: &str) -> io::Result<()> {
        if !IoKinds(self.kinds.load(Ordering::SeqCst)).has(kind) {
            return Ok(());
        }
        let passed = self
            .countdown
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if passed {
            return Ok(());
        }
        self.failed.fetch_add(1, Ordering::SeqCst);
        Err(io::Error::other(format!("injected failure of {what}")))
    }
}

/// A redb backend that passes every call to `inner` unless its [`FailSwitch`] fails it.
/// The inner backend is shared: a test may open a new database on it after the first
/// is gone (as a restart would find the disk).
#[derive(Debug)]
pub struct FailingBackend<B: StorageBackend> {
    inner: Arc<B>,
    switch: Arc<FailSwitch>,
}

impl<B: StorageBackend> FailingBackend<B> {
    /// `inner`, failing as `switch` says.
    pub fn new(inner: Arc<B>, switch: Arc<FailSwitch>) -> Self {
        Self { inner, switch }
    }
}

impl<B: StorageBackend> StorageBackend for FailingBackend<B> {
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        self.switch.check(IoKinds::READ, "a read")?;
        self.inner.read(offset, out)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.switch.check(IoKinds::SET_LEN, "set_len")?;
        self.inner.set_len(len)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.switch.check(IoKinds::SYNC, "a sync")?;
        self.inner.sync_data()
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.switch.check(IoKinds::WRITE, "a write")?;
        self.inner.write(offset, data)
    }

    fn close(&self) -> io::Result<()> {
        self.inner.close()
    }

    fn try_lock_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> Result<bool, redb::BackendError> {
        self.inner.try_lock_range(start, end)
    }

    fn try_lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> Result<bool, redb::BackendError> {
        self.inner.try_lock_shared_range(start, end)
    }

    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), redb::BackendError> {
        self.inner.lock_range(start, end)
    }

    fn lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> Result<(), redb::BackendError> {
        self.inner.lock_shared_range(start, end)
    }

    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), redb::BackendError> {
        self.inner.unlock_range(start, end)
    }

    fn query_lock_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> Result<bool, redb::BackendError> {
        self.inner.query_lock_range(start, end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redb::backends::InMemoryBackend;

    #[test]
    fn an_armed_switch_fails_the_chosen_calls_after_its_countdown() {
        let switch = FailSwitch::new();
        let b = FailingBackend::new(Arc::new(InMemoryBackend::new()), switch.clone());
        b.set_len(16).unwrap();
        switch.fail_after(IoKinds::WRITE, 1);
        b.write(0, b"ok").unwrap();
        assert!(b.write(0, b"no").is_err());
        let mut out = [0u8; 2];
        b.read(0, &mut out).unwrap();
        assert_eq!(&out, b"ok");
        b.sync_data().unwrap();
        switch.fail_now(IoKinds::SYNC.or(IoKinds::READ));
        assert!(b.sync_data().is_err() && b.read(0, &mut out).is_err());
        b.write(0, b"w!").unwrap();
        switch.heal();
        b.read(0, &mut out).unwrap();
        assert_eq!((&out, switch.failures()), (b"w!", 3));
    }
}
