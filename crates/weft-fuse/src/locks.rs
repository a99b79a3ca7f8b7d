//! What the mount adds to the library's file locks ([`weft_client::Client::setlkw`] and
//! friends): the kernel's lock requests translated, the owners to release at close, and
//! noticing that a process waiting for a lock got a signal.
//!
//! `flock`: the kernel sends it as a whole-file lock of the open file description, with
//! a `FUSE_LK_FLOCK` flag that fuser 0.18 does not pass on. The mount therefore cannot
//! tell a `flock` from a `fcntl` lock and sends both as POSIX locks: owners are still
//! right (an open file description for `flock`, a process for `fcntl`), so `flock`
//! excludes across mounts and is released at the last close, but on one file a `flock`
//! and a `fcntl` lock of other owners conflict, as on NFS (on a local Linux file system
//! they do not).
//!
//! Signals: fuser answers the kernel's `FUSE_INTERRUPT` with ENOSYS, after which the
//! kernel waits for the reply to a blocked `F_SETLKW` even when the process is killed. So
//! the mount watches the waiting thread itself: when it has a signal pending that it does
//! not block (or is being killed), the wait is cancelled on the MDT and the kernel gets
//! EINTR, which it turns into a restart or EINTR as the signal's disposition says.

use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::time::Duration;
use weft_proto::mdt::{LOCK_TO_EOF, LockType};

/// How often a waiting thread's pending signals are looked at.
const SIGNAL_POLL: Duration = Duration::from_millis(100);

/// The largest offset the kernel uses (`OFFSET_MAX`): its "to the end of the file".
const KERNEL_EOF: u64 = i64::MAX as u64;

/// The lock type of a kernel `F_RDLCK`/`F_WRLCK`/`F_UNLCK`.
pub fn lock_type(typ: i32) -> Option<LockType> {
    match typ {
        libc::F_RDLCK => Some(LockType::Read),
        libc::F_WRLCK => Some(LockType::Write),
        libc::F_UNLCK => Some(LockType::Unlock),
        _ => None,
    }
}

/// The kernel's `F_*LCK` for a lock type.
pub fn kernel_type(typ: LockType) -> i32 {
    match typ {
        LockType::Read => libc::F_RDLCK,
        LockType::Write => libc::F_WRLCK,
        LockType::Unlock => libc::F_UNLCK,
    }
}

/// A kernel range end as the MDT stores it.
pub fn from_kernel_end(end: u64) -> u64 {
    if end >= KERNEL_EOF { LOCK_TO_EOF } else { end }
}

/// An MDT range end as the kernel accepts it (it refuses ends past `OFFSET_MAX`).
pub fn to_kernel_end(end: u64) -> u64 {
    end.min(KERNEL_EOF)
}

/// The (inode, lock owner) pairs this mount has sent lock requests for, so that a close
/// costs an MDT round trip only when it may release something.
#[derive(Debug, Default)]
pub struct LockOwners {
    owners: Mutex<HashMap<u64, HashSet<u64>>>,
}

impl LockOwners {
    /// Notes that `owner` may hold locks on `ino`.
    pub fn add(&self, ino: u64, owner: u64) {
        self.owners.lock().entry(ino).or_default().insert(owner);
    }

    /// Forgets `owner` on `ino`; returns whether it was there (and so may hold locks).
    pub fn take(&self, ino: u64, owner: u64) -> bool {
        let mut m = self.owners.lock();
        let Some(set) = m.get_mut(&ino) else {
            return false;
        };
        let had = set.remove(&owner);
        if set.is_empty() {
            m.remove(&ino);
        }
        had
    }
}

/// Whether thread `tid` has a signal pending that will interrupt it: one of its own it
/// does not block (a thread-directed signal, or the SIGKILL of a dying process), or a
/// process-wide one it does not block when it is the process's only thread. (With other
/// threads the kernel may hand a process-wide signal to one of them; telling the kernel
/// this thread was interrupted when it has no signal to handle would leak ERESTARTSYS to
/// the application.) `None` if the thread is gone.
fn signal_pending(tid: u32) -> Option<bool> {
    let status = match std::fs::read_to_string(format!("/proc/{tid}/status")) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        // No /proc to look at: never interrupt.
        Err(_) => return Some(false),
    };
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
    };
    let mask = |name: &str| {
        field(name)
            .and_then(|v| u64::from_str_radix(v, 16).ok())
            .unwrap_or(0)
    };
    let blocked = mask("SigBlk:");
    let own = mask("SigPnd:") & !blocked;
    let shared = mask("ShdPnd:") & !blocked & !mask("SigIgn:");
    let alone = field("Threads:") == Some("1");
    Some(own != 0 || (alone && shared != 0))
}

/// Completes when thread `tid` should stop waiting: it got a signal, or it is gone.
pub async fn interrupted(tid: u32) {
    loop {
        tokio::time::sleep(SIGNAL_POLL).await;
        // A few hundred bytes from procfs (memory, not a disk): cheap enough to read on
        // the runtime's thread.
        if signal_pending(tid) != Some(false) {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_ranges_and_types_round_trip() {
        assert_eq!(from_kernel_end(i64::MAX as u64), LOCK_TO_EOF);
        assert_eq!(to_kernel_end(LOCK_TO_EOF), i64::MAX as u64);
        assert_eq!(from_kernel_end(99), 99);
        for t in [LockType::Read, LockType::Write, LockType::Unlock] {
            assert_eq!(lock_type(kernel_type(t)), Some(t));
        }
        assert_eq!(lock_type(7), None);
    }

    #[test]
    fn owners_are_forgotten_once() {
        let o = LockOwners::default();
        o.add(5, 1);
        o.add(5, 2);
        assert!(o.take(5, 1));
        assert!(!o.take(5, 1));
        assert!(o.take(5, 2));
        assert!(!o.take(6, 2));
    }

    #[test]
    fn a_quiet_thread_has_no_signal_and_a_gone_one_is_noticed() {
        let tid = rustix::thread::gettid().as_raw_nonzero().get() as u32;
        assert_eq!(signal_pending(tid), Some(false));
        assert_eq!(signal_pending(u32::MAX), None);
    }
}
