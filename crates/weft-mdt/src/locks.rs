//! File locks held on the MDT: POSIX byte-range locks and `flock` locks, coherent across
//! every client of the file system (Lustre keeps them in its LDLM on the MDT too).
//!
//! Locks live in memory only. An owner is a lock owner of one connection ([`Owner`]).
//! When the connection breaks, its waits go and its locks are parked for the client node
//! ([`LockTable::park`]) until its next connection takes them back
//! ([`LockTable::adopt`]) or the grace period ends ([`LockTable::expire`]): then they go
//! too, and waiters on the same files are granted what is now free. An MDT restart loses
//! every lock; Lustre's clients replay theirs during recovery, ours do not (see
//! ARCHITECTURE.md, "Locks").
//!
//! Semantics are Linux's: an owner's ranges of one type merge when they overlap or touch,
//! a lock over part of another of the same owner splits it, re-locking a range with the
//! other type converts it in place (atomically: no one can slip in between), and unlocking
//! any sub-range is allowed. Only different owners conflict: a write lock conflicts with
//! any lock of another owner on an overlapping range, a read lock only with write locks.
//! POSIX and flock locks are separate tables and never conflict with each other.
//!
//! A blocking request (`F_SETLKW`) that cannot be granted is queued; its reply is sent
//! when a release makes it grantable, so it costs no thread while it waits. Waiters are
//! retried in arrival order after every change on their file. A waiter is dropped when
//! the client cancels it (the process got a signal: EINTR) or disconnects. A POSIX wait
//! that would close a cycle of owners waiting for each other fails with EDEADLK instead.
//!
//! Memory is bounded: a connection may hold at most [`LockLimits::per_connection`] lock
//! records and queued waits together; past that a request fails with ENOLCK.

use parking_lot::{Mutex, MutexGuard};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::oneshot;
use uuid::Uuid;
use weft_proto::mdt::{FileLock, LockHolder, LockKind, LockType, MdtReply, MdtRequest};
use weft_proto::{Errno, Fid, WireError, WireResult};

mod ranges;

pub use ranges::{Held, Mode, Owner, RangeLocks};

/// Limits on what one connection may keep in the lock table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockLimits {
    /// Lock records (after merging) plus queued waits, per connection.
    pub per_connection: usize,
}

impl Default for LockLimits {
    fn default() -> Self {
        Self {
            per_connection: 16_384,
        }
    }
}

/// A queued blocking request.
#[derive(Debug)]
struct Waiter {
    owner: Owner,
    wait: u64,
    mode: Mode,
    start: u64,
    end: u64,
    pid: u32,
    reply: oneshot::Sender<WireResult<()>>,
}

/// A lock to grant one owner: its type, byte range and the process asking (a request's,
/// or a waiter's when it is woken).
#[derive(Debug, Clone, Copy)]
struct Wanted {
    typ: LockType,
    start: u64,
    end: u64,
    pid: u32,
}

#[derive(Debug, Default)]
struct FileLocks {
    locks: RangeLocks,
    waiters: VecDeque<Waiter>,
}

type Key = (Fid, LockKind);

/// What the table keeps about one connection.
#[derive(Debug, Default)]
struct Conn {
    client: Uuid,
    /// Lock records plus queued waits.
    used: usize,
    /// Files where it holds or waits for something (may include a few it no longer does).
    files: HashSet<Key>,
    /// Its queued waits: wait id -> file.
    waits: HashMap<u64, Key>,
    /// Wait ids cancelled when no such wait was queued, newest last: requests run
    /// concurrently, so a cancel may overtake the wait it cancels.
    cancelled: VecDeque<u64>,
}

/// Cancelled-but-unknown wait ids remembered per connection.
const EARLY_CANCELS: usize = 64;

#[derive(Debug, Default)]
struct Inner {
    files: HashMap<Key, FileLocks>,
    conns: HashMap<u64, Conn>,
    /// Connections that broke while holding locks, by client: (connection, park number).
    parked: HashMap<Uuid, Vec<(u64, u64)>>,
    parks: u64,
}

/// Counters of the lock table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LockStats {
    /// Lock records held now.
    pub held: u64,
    /// Blocking requests waiting now.
    pub waiting: u64,
    /// Lock requests granted (at once or after a wait) since start.
    pub grants: u64,
    /// Blocking requests that had to wait since start.
    pub waits: u64,
    /// Requests that met a conflicting lock (EAGAIN, a wait, or a conflict `F_GETLK`
    /// reported) since start.
    pub conflicts: u64,
    /// Waits refused with EDEADLK since start.
    pub deadlocks: u64,
}

/// Who sends a lock request.
pub struct Caller<'a> {
    /// The connection.
    pub conn: u64,
    /// The client's UUID from its handshake, reported to others by `F_GETLK`.
    pub client: Uuid,
    /// Whether the connection has closed. Checked under the table's mutex: a request
    /// that arrives after the connection's cleanup must not leave locks behind.
    pub closed: &'a (dyn Fn() -> bool + Sync),
}

/// Most owners visited when looking for a deadlock cycle (Linux stops after 10 hops).
const DEADLOCK_SEARCH: usize = 256;

/// The lock table of one MDT.
#[derive(Debug, Default)]
pub struct LockTable {
    inner: Mutex<Inner>,
    limits: LockLimits,
    grants: AtomicU64,
    waits: AtomicU64,
    conflicts: AtomicU64,
    deadlocks: AtomicU64,
    /// Clients with parked locks: every request looks at this before taking the mutex.
    parked_clients: AtomicU64,
}

fn err(errno: Errno, msg: &str) -> WireError {
    WireError::new(errno, msg)
}

enum Step {
    Reply(WireResult<MdtReply>),
    Wait(oneshot::Receiver<WireResult<()>>),
}

impl LockTable {
    /// An empty table with these limits.
    pub fn new(limits: LockLimits) -> Self {
        Self {
            limits,
            ..Self::default()
        }
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock()
    }

    /// Counters for monitoring.
    pub fn stats(&self) -> LockStats {
        let (held, waiting) = {
            let g = self.inner();
            g.files.values().fold((0, 0), |(h, w), f| {
                (h + f.locks.held.len() as u64, w + f.waiters.len() as u64)
            })
        };
        LockStats {
            held,
            waiting,
            grants: self.grants.load(Ordering::Relaxed),
            waits: self.waits.load(Ordering::Relaxed),
            conflicts: self.conflicts.load(Ordering::Relaxed),
            deadlocks: self.deadlocks.load(Ordering::Relaxed),
        }
    }

    /// Whether `req` is a lock request (served here, not by the namespace).
    pub fn handles(req: &MdtRequest) -> bool {
        req.class() == weft_proto::mdt::RequestClass::Lock
    }

    /// Serves a lock request; a blocking one returns when it is granted or refused.
    pub async fn execute(&self, caller: &Caller<'_>, req: MdtRequest) -> WireResult<MdtReply> {
        match self.step(caller, req) {
            Step::Reply(r) => r,
            Step::Wait(rx) => match rx.await {
                Ok(r) => r.map(|()| MdtReply::Ok),
                // Dropped by a disconnect: nobody is left to read the answer.
                Err(_) => Err(err(Errno::Intr, "lock wait ended with its connection")),
            },
        }
    }

    fn step(&self, caller: &Caller<'_>, req: MdtRequest) -> Step {
        let mut g = self.inner();
        if (caller.closed)() {
            return Step::Reply(Err(err(Errno::Io, "connection closed")));
        }
        match req {
            MdtRequest::GetLock { fid, lock } => Step::Reply(self.getlk(&g, caller, fid, &lock)),
            MdtRequest::SetLock { fid, lock, wait } => self.setlk(&mut g, caller, fid, lock, wait),
            MdtRequest::CancelLockWait { wait } => {
                Self::cancel(&mut g, caller.conn, wait);
                Step::Reply(Ok(MdtReply::Ok))
            }
            MdtRequest::ReleaseLocks { fid, kind, owner } => {
                let owner = Owner {
                    conn: caller.conn,
                    owner,
                };
                self.release_owner(&mut g, (fid, kind), owner);
                Step::Reply(Ok(MdtReply::Ok))
            }
            _ => Step::Reply(Err(err(Errno::Proto, "not a lock request"))),
        }
    }

    fn check(lock: &FileLock) -> WireResult<()> {
        if lock.start > lock.end {
            return Err(err(Errno::Inval, "lock range ends before it starts"));
        }
        Ok(())
    }

    fn getlk(
        &self,
        g: &Inner,
        caller: &Caller<'_>,
        fid: Fid,
        lock: &FileLock,
    ) -> WireResult<MdtReply> {
        Self::check(lock)?;
        let Some(mode) = Mode::of(lock.typ) else {
            return Err(err(Errno::Inval, "F_GETLK needs a read or write lock"));
        };
        let owner = Owner {
            conn: caller.conn,
            owner: lock.owner,
        };
        let found = g
            .files
            .get(&(fid, lock.kind))
            .and_then(|f| f.locks.first_conflict(owner, mode, lock.start, lock.end));
        Ok(MdtReply::Lock(found.map(|h| {
            self.conflicts.fetch_add(1, Ordering::Relaxed);
            LockHolder {
                typ: h.mode.lock_type(),
                start: h.start,
                end: h.end,
                pid: h.pid,
                client: g
                    .conns
                    .get(&h.owner.conn)
                    .map(|c| c.client)
                    .unwrap_or_default(),
                owner: h.owner.owner,
            }
        })))
    }

    fn setlk(
        &self,
        g: &mut Inner,
        caller: &Caller<'_>,
        fid: Fid,
        lock: FileLock,
        wait: Option<u64>,
    ) -> Step {
        if let Err(e) = Self::check(&lock) {
            return Step::Reply(Err(e));
        }
        let key = (fid, lock.kind);
        let owner = Owner {
            conn: caller.conn,
            owner: lock.owner,
        };
        let conn = g.conns.entry(caller.conn).or_default();
        conn.client = caller.client;
        if let Some(id) = wait
            && let Some(i) = conn.cancelled.iter().position(|&c| c == id)
        {
            conn.cancelled.remove(i);
            return Step::Reply(Err(err(Errno::Intr, "lock wait cancelled")));
        }
        let Some(mode) = Mode::of(lock.typ) else {
            // Unlocking never conflicts; it may free others.
            let planned = g.files.get(&key).map(|f| {
                let before = f.locks.count_of(owner);
                (
                    before,
                    f.locks
                        .applied(owner, LockType::Unlock, lock.start, lock.end, 0),
                )
            });
            if let Some((before, mine)) = planned {
                let after = mine.len();
                // Unlocking the middle of a range splits it: one more record.
                if after > before && !self.fits(g, caller.conn, after - before) {
                    return Step::Reply(Err(err(
                        Errno::NoLck,
                        "too many locks on this connection",
                    )));
                }
                if let Some(f) = g.files.get_mut(&key) {
                    f.locks.replace(owner, mine);
                }
                Self::account(g, caller.conn, before, after);
                self.wake(g, key);
                Self::forget_if_unused(g, caller.conn, key);
            }
            return Step::Reply(Ok(MdtReply::Ok));
        };
        let file = g.files.entry(key).or_default();
        let conflict = file
            .locks
            .conflicts(owner, mode, lock.start, lock.end)
            .next()
            .is_some();
        if !conflict {
            let want = Wanted {
                typ: lock.typ,
                start: lock.start,
                end: lock.end,
                pid: lock.pid,
            };
            let r = self.grant(g, key, owner, &want);
            match r {
                // A downgrade or a conversion may let waiters in.
                Ok(()) => self.wake(g, key),
                Err(_) => Self::forget_if_unused(g, caller.conn, key),
            }
            return Step::Reply(r.map(|()| MdtReply::Ok));
        }
        self.conflicts.fetch_add(1, Ordering::Relaxed);
        let Some(wait) = wait else {
            Self::forget_if_unused(g, caller.conn, key);
            return Step::Reply(Err(err(Errno::Again, "conflicting lock held")));
        };
        if lock.kind == LockKind::Posix
            && Self::would_deadlock(g, key, owner, mode, lock.start, lock.end)
        {
            self.deadlocks.fetch_add(1, Ordering::Relaxed);
            Self::forget_if_unused(g, caller.conn, key);
            return Step::Reply(Err(err(Errno::DeadLk, "waiting would deadlock")));
        }
        if g.conns
            .get(&caller.conn)
            .is_some_and(|c| c.waits.contains_key(&wait))
        {
            return Step::Reply(Err(err(Errno::Inval, "wait id already in use")));
        }
        if !self.fits(g, caller.conn, 1) {
            Self::forget_if_unused(g, caller.conn, key);
            return Step::Reply(Err(err(Errno::NoLck, "too many locks on this connection")));
        }
        let (tx, rx) = oneshot::channel();
        g.files.entry(key).or_default().waiters.push_back(Waiter {
            owner,
            wait,
            mode,
            start: lock.start,
            end: lock.end,
            pid: lock.pid,
            reply: tx,
        });
        let conn = g.conns.entry(caller.conn).or_default();
        conn.used += 1;
        conn.files.insert(key);
        conn.waits.insert(wait, key);
        self.waits.fetch_add(1, Ordering::Relaxed);
        Step::Wait(rx)
    }

    fn fits(&self, g: &Inner, conn: u64, more: usize) -> bool {
        g.conns.get(&conn).map_or(0, |c| c.used) + more <= self.limits.per_connection
    }

    fn account(g: &mut Inner, conn: u64, before: usize, after: usize) {
        if let Some(c) = g.conns.get_mut(&conn) {
            c.used = (c.used + after).saturating_sub(before);
        }
    }

    /// Grants a lock known not to conflict, within the connection's limit.
    fn grant(&self, g: &mut Inner, key: Key, owner: Owner, want: &Wanted) -> WireResult<()> {
        let Some(f) = g.files.get(&key) else {
            return Err(err(Errno::Io, "lock table entry vanished"));
        };
        let before = f.locks.count_of(owner);
        let Wanted {
            typ,
            start,
            end,
            pid,
        } = *want;
        let mine = f.locks.applied(owner, typ, start, end, pid);
        let after = mine.len();
        if after > before && !self.fits(g, owner.conn, after - before) {
            return Err(err(Errno::NoLck, "too many locks on this connection"));
        }
        if let Some(f) = g.files.get_mut(&key) {
            f.locks.replace(owner, mine);
        }
        Self::account(g, owner.conn, before, after);
        g.conns.entry(owner.conn).or_default().files.insert(key);
        self.grants.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Grants, in arrival order, every waiter of `key` that no longer conflicts.
    fn wake(&self, g: &mut Inner, key: Key) {
        let mut i = 0;
        loop {
            let Some(f) = g.files.get_mut(&key) else {
                return;
            };
            let Some(w) = f.waiters.get(i) else {
                break;
            };
            if w.reply.is_closed() {
                if let Some(w) = f.waiters.remove(i) {
                    Self::unqueue(g, &w);
                }
                continue;
            }
            if f.locks
                .conflicts(w.owner, w.mode, w.start, w.end)
                .next()
                .is_some()
            {
                i += 1;
                continue;
            }
            let Some(w) = f.waiters.remove(i) else {
                break;
            };
            Self::unqueue(g, &w);
            let r = self.grant_waiter(g, key, &w);
            let _ = w.reply.send(r);
            // Granting may have changed what conflicts: start over from the front.
            i = 0;
        }
        Self::drop_if_empty(g, key);
    }

    fn grant_waiter(&self, g: &mut Inner, key: Key, w: &Waiter) -> WireResult<()> {
        let want = Wanted {
            typ: w.mode.lock_type(),
            start: w.start,
            end: w.end,
            pid: w.pid,
        };
        self.grant(g, key, w.owner, &want)
    }

    /// Forgets a waiter's accounting (it left the queue).
    fn unqueue(g: &mut Inner, w: &Waiter) {
        if let Some(c) = g.conns.get_mut(&w.owner.conn) {
            c.used = c.used.saturating_sub(1);
            c.waits.remove(&w.wait);
        }
    }

    fn drop_if_empty(g: &mut Inner, key: Key) {
        if g.files
            .get(&key)
            .is_some_and(|f| f.locks.is_empty() && f.waiters.is_empty())
        {
            g.files.remove(&key);
        }
    }

    /// Stops tracking `key` for `conn` when it holds and waits for nothing there.
    fn forget_if_unused(g: &mut Inner, conn: u64, key: Key) {
        let used = g.files.get(&key).is_some_and(|f| {
            f.locks.held.iter().any(|h| h.owner.conn == conn)
                || f.waiters.iter().any(|w| w.owner.conn == conn)
        });
        if !used && let Some(c) = g.conns.get_mut(&conn) {
            c.files.remove(&key);
        }
        Self::drop_if_empty(g, key);
    }

    /// Whether `owner` waiting for `mode` over `[start, end]` on `key` would wait, through
    /// a chain of owners each waiting for the next, for itself.
    fn would_deadlock(g: &Inner, key: Key, owner: Owner, mode: Mode, start: u64, end: u64) -> bool {
        // Who waits where, by owner (POSIX waits only).
        let mut waiting: HashMap<Owner, Vec<(Key, &Waiter)>> = HashMap::new();
        for (k, f) in &g.files {
            if k.1 != LockKind::Posix {
                continue;
            }
            for w in &f.waiters {
                waiting.entry(w.owner).or_default().push((*k, w));
            }
        }
        let blockers = |k: &Key, o: Owner, m: Mode, s: u64, e: u64| -> Vec<Owner> {
            g.files
                .get(k)
                .map(|f| f.locks.conflicts(o, m, s, e).map(|h| h.owner).collect())
                .unwrap_or_default()
        };
        let mut seen = HashSet::new();
        let mut todo: Vec<Owner> = blockers(&key, owner, mode, start, end);
        while let Some(o) = todo.pop() {
            if o == owner {
                return true;
            }
            if !seen.insert(o) || seen.len() > DEADLOCK_SEARCH {
                continue;
            }
            for (k, w) in waiting.get(&o).map(Vec::as_slice).unwrap_or_default() {
                todo.extend(blockers(k, w.owner, w.mode, w.start, w.end));
            }
        }
        false
    }

    fn cancel(g: &mut Inner, conn: u64, wait: u64) {
        let Some(key) = g.conns.get(&conn).and_then(|c| c.waits.get(&wait).copied()) else {
            // Granted or refused already (its own reply says which), or not arrived yet:
            // remembered so that it is refused when it comes.
            let c = g.conns.entry(conn).or_default();
            if c.cancelled.len() == EARLY_CANCELS {
                c.cancelled.pop_front();
            }
            c.cancelled.push_back(wait);
            return;
        };
        let w = g.files.get_mut(&key).and_then(|f| {
            let i = f
                .waiters
                .iter()
                .position(|w| w.owner.conn == conn && w.wait == wait)?;
            f.waiters.remove(i)
        });
        if let Some(w) = w {
            Self::unqueue(g, &w);
            let _ = w.reply.send(Err(err(Errno::Intr, "lock wait cancelled")));
        }
        Self::forget_if_unused(g, conn, key);
    }

    fn release_owner(&self, g: &mut Inner, key: Key, owner: Owner) {
        let Some(f) = g.files.get_mut(&key) else {
            return;
        };
        let gone = f.locks.remove_where(|h| h.owner == owner);
        for (conn, n) in gone {
            Self::account(g, conn, n, 0);
        }
        self.wake(g, key);
        Self::forget_if_unused(g, owner.conn, key);
    }

    /// Forgets a closed connection: releases its locks, drops its waits and grants what
    /// that frees to others.
    pub fn disconnect(&self, conn: u64) {
        let mut g = self.inner();
        self.drop_conn(&mut g, conn);
    }

    fn drop_conn(&self, g: &mut Inner, conn: u64) {
        let Some(c) = g.conns.remove(&conn) else {
            return;
        };
        for key in c.files {
            if let Some(f) = g.files.get_mut(&key) {
                f.locks.remove_where(|h| h.owner.conn == conn);
                // Dropping the senders ends the waits; their replies have nowhere to go.
                f.waiters.retain(|w| w.owner.conn != conn);
            }
            self.wake(g, key);
        }
    }

    /// A connection of client node `client` broke while the MDT lives: its waits are
    /// dropped (the client sends them again), and its locks are kept, still excluding
    /// others, for the client's next connection to take back ([`LockTable::adopt`]).
    /// Returns the park number to pass to [`LockTable::expire`] after the grace period.
    /// A nil client cannot come back: its locks are released at once.
    pub fn park(&self, conn: u64, client: Uuid) -> u64 {
        let mut g = self.inner();
        g.parks += 1;
        let n = g.parks;
        let held = g.conns.get(&conn).is_some_and(|c| c.used > c.waits.len());
        if client.is_nil() || !held {
            self.drop_conn(&mut g, conn);
            return n;
        }
        let keys: Vec<Key> = g
            .conns
            .get(&conn)
            .map(|c| c.files.iter().copied().collect())
            .unwrap_or_default();
        for key in keys {
            let dropped: VecDeque<Waiter> = match g.files.get_mut(&key) {
                Some(f) => {
                    let (gone, kept): (VecDeque<_>, VecDeque<_>) = std::mem::take(&mut f.waiters)
                        .into_iter()
                        .partition(|w| w.owner.conn == conn);
                    f.waiters = kept;
                    gone
                }
                None => VecDeque::new(),
            };
            for w in &dropped {
                Self::unqueue(&mut g, w);
            }
            Self::forget_if_unused(&mut g, conn, key);
        }
        g.parked.entry(client).or_default().push((conn, n));
        self.parked_clients
            .store(g.parked.len() as u64, Ordering::Relaxed);
        n
    }

    /// Gives the locks parked for `client` to its connection `conn`. Cheap when nothing is
    /// parked: the RPC handler calls it for every request. Refused (nothing moves) once
    /// `closed` says the connection is gone, like any lock request.
    pub fn adopt(&self, conn: u64, client: Uuid, closed: &(dyn Fn() -> bool + Sync)) {
        if client.is_nil() || self.parked_clients.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut g = self.inner();
        if closed() {
            return;
        }
        let Some(list) = g.parked.remove(&client) else {
            return;
        };
        self.parked_clients
            .store(g.parked.len() as u64, Ordering::Relaxed);
        for (old, _) in list {
            let Some(c) = g.conns.remove(&old) else {
                continue;
            };
            // Renamed in place: the new connection took no lock of its own before this
            // (every request adopts first), so nothing needs merging.
            for key in &c.files {
                if let Some(f) = g.files.get_mut(key) {
                    for h in f.locks.held.iter_mut().filter(|h| h.owner.conn == old) {
                        h.owner.conn = conn;
                    }
                }
            }
            let new = g.conns.entry(conn).or_default();
            new.client = client;
            new.used += c.used;
            new.files.extend(c.files);
        }
    }

    /// Releases what `client` parked at or before park number `upto` and did not take
    /// back, and grants what that frees.
    pub fn expire(&self, client: Uuid, upto: u64) {
        let mut g = self.inner();
        let Some(list) = g.parked.get_mut(&client) else {
            return;
        };
        let (gone, kept): (Vec<_>, Vec<_>) = list.drain(..).partition(|&(_, n)| n <= upto);
        if kept.is_empty() {
            g.parked.remove(&client);
        } else {
            *list = kept;
        }
        self.parked_clients
            .store(g.parked.len() as u64, Ordering::Relaxed);
        for (conn, _) in gone {
            self.drop_conn(&mut g, conn);
        }
    }
}

#[cfg(test)]
mod tests;
