//! File locks, held on the MDT of the file so that every client sees the same ones:
//! `fcntl` record locks (get, set, set-and-wait), `flock`, and the release a close implies.
//!
//! A lock belongs to an owner the caller names (the kernel's lock owner in the mount) on
//! this client's connection to the MDT. When that connection breaks, the MDT keeps the
//! locks for this client node for a grace period and hands them to its next connection;
//! requests that do not wait are resent on the new connection like reads, and a waiting
//! request is sent again and waits again. Locks are not replayed after an MDT restart
//! (Lustre replays them; see ARCHITECTURE.md, "Locks").

use crate::client::Client;
use crate::error::ClientError;
use crate::mdt::{MdtClient, RESEND_FOR};
use bytes::Bytes;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use weft_proto::mdt::{
    FileLock, LOCK_TO_EOF, LockHolder, LockKind, LockType, MdtReply, MdtRequest,
};
use weft_proto::{Errno, Fid, TargetId, WireError};
use weft_rpc::RpcError;

/// Wait ids: unique per connection is enough, unique per process is simpler.
static NEXT_WAIT: AtomicU64 = AtomicU64::new(1);

/// How long a cancelled wait may take to answer before the caller is told EINTR anyway.
const CANCEL_GRACE: Duration = Duration::from_secs(10);

fn interrupted() -> ClientError {
    ClientError::Remote(WireError::new(Errno::Intr, "lock wait interrupted"))
}

fn unexpected(mdt: &MdtClient, op: &'static str) -> ClientError {
    ClientError::UnexpectedReply {
        target: TargetId::mdt(mdt.index()),
        op,
    }
}

impl Client {
    /// The first lock of another owner that would conflict with `lock` (`F_GETLK`), or
    /// `None` if it could be set now.
    pub async fn getlk(&self, fid: Fid, lock: FileLock) -> Result<Option<LockHolder>, ClientError> {
        let mdt = self.mdt(fid)?;
        match mdt.call(MdtRequest::GetLock { fid, lock }).await? {
            MdtReply::Lock(h) => Ok(h),
            _ => Err(unexpected(&mdt, "getlk")),
        }
    }

    /// Sets, converts or releases a lock without waiting (`F_SETLK`): a conflict fails
    /// with EAGAIN.
    pub async fn setlk(&self, fid: Fid, lock: FileLock) -> Result<(), ClientError> {
        let mdt = self.mdt(fid)?;
        match mdt
            .call(MdtRequest::SetLock {
                fid,
                lock,
                wait: None,
            })
            .await?
        {
            MdtReply::Ok => Ok(()),
            _ => Err(unexpected(&mdt, "setlk")),
        }
    }

    /// Sets a lock, waiting as long as it takes for conflicting locks to go (`F_SETLKW`).
    ///
    /// The wait is not cut off by the connection's request timeout. When `interrupted`
    /// completes (the calling process got a signal), the MDT is asked to stop waiting and
    /// the call fails with EINTR, unless the lock was granted first, in which case it is
    /// held and the call succeeds. EDEADLK if waiting would deadlock.
    pub async fn setlkw(
        &self,
        fid: Fid,
        lock: FileLock,
        interrupted_by: impl Future<Output = ()>,
    ) -> Result<(), ClientError> {
        if lock.typ == LockType::Unlock {
            return self.setlk(fid, lock).await;
        }
        let mdt = self.mdt(fid)?;
        let wait = NEXT_WAIT.fetch_add(1, Ordering::Relaxed);
        let req = MdtRequest::SetLock {
            fid,
            lock,
            wait: Some(wait),
        };
        let rpc = |error| ClientError::Rpc {
            target: TargetId::mdt(mdt.index()),
            error,
        };
        let done = |r: Result<(MdtReply, Bytes), RpcError>| match r {
            Ok((MdtReply::Ok, _)) => Ok(()),
            Ok(_) => Err(unexpected(&mdt, "setlkw")),
            Err(e) => Err(rpc(e)),
        };
        tokio::pin!(interrupted_by);
        let mut failing_since: Option<Instant> = None;
        let mut backoff = weft_rpc::Backoff::new(Duration::from_millis(50), Duration::from_secs(1));
        loop {
            let started = Instant::now();
            let attempt = mdt.connection().call_with_timeout::<_, MdtReply>(
                &req,
                Bytes::new(),
                Duration::MAX,
            );
            tokio::pin!(attempt);
            let r = tokio::select! {
                r = &mut attempt => r,
                () = &mut interrupted_by => {
                    // The wait ends with EINTR, or with the grant that won the race.
                    if mdt.call(MdtRequest::CancelLockWait { wait }).await.is_err() {
                        return Err(interrupted());
                    }
                    return match tokio::time::timeout(CANCEL_GRACE, attempt).await {
                        Ok(Err(e)) if e.is_connection_error() => Err(interrupted()),
                        Ok(r) => done(r),
                        Err(_) => Err(interrupted()),
                    };
                }
            };
            match r {
                // Including a restarting MDS that does not serve its MDT yet.
                Err(e) if e.is_worth_resending() => {
                    // The MDT restarted or the connection broke: every lock of this
                    // connection is gone there, so asking again is safe. A wait that was
                    // connected for long counts its failures afresh.
                    if started.elapsed() > RESEND_FOR {
                        failing_since = None;
                    }
                    let since = *failing_since.get_or_insert_with(Instant::now);
                    if since.elapsed() + backoff.peek() >= RESEND_FOR {
                        return Err(rpc(e));
                    }
                    tracing::debug!(mdt = mdt.index(), error = %e, "resending a lock wait");
                    tokio::select! {
                        () = backoff.wait() => {}
                        () = &mut interrupted_by => return Err(interrupted()),
                    }
                }
                r => return done(r),
            }
        }
    }

    /// `flock(2)`: `typ` Read is `LOCK_SH`, Write `LOCK_EX`, Unlock `LOCK_UN`; `wait`
    /// unless `LOCK_NB`. The owner is the open file description.
    pub async fn flock(
        &self,
        fid: Fid,
        owner: u64,
        pid: u32,
        typ: LockType,
        wait: bool,
        interrupted_by: impl Future<Output = ()>,
    ) -> Result<(), ClientError> {
        let lock = FileLock {
            kind: LockKind::Flock,
            typ,
            start: 0,
            end: LOCK_TO_EOF,
            owner,
            pid,
        };
        if wait {
            self.setlkw(fid, lock, interrupted_by).await
        } else {
            self.setlk(fid, lock).await
        }
    }

    /// Releases every lock of `kind` that `owner` holds on `fid` (what a close implies:
    /// POSIX locks of the closing process, or the flock of the last descriptor).
    pub async fn release_locks(
        &self,
        fid: Fid,
        kind: LockKind,
        owner: u64,
    ) -> Result<(), ClientError> {
        let mdt = self.mdt(fid)?;
        match mdt
            .call(MdtRequest::ReleaseLocks { fid, kind, owner })
            .await?
        {
            MdtReply::Ok => Ok(()),
            _ => Err(unexpected(&mdt, "lock_release")),
        }
    }
}
