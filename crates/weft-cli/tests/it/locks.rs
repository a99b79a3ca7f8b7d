//! File locks through the client library against separate server processes: a blocking
//! wait outlives the request timeout, a cancelled wait leaves nothing, and what an MDT
//! restart does to held locks and waiters.

use crate::bin;
use std::sync::Arc;
use std::time::Duration;
use weft_client::{Client, ClientOptions};
use weft_proto::mdt::{Credentials, FileLock, LOCK_TO_EOF, LockKind, LockType};
use weft_proto::{Errno, Fid};
use weft_testkit::{FSNAME, TestCluster};

/// A client whose ordinary requests time out after `timeout`.
async fn client(tc: &TestCluster, timeout: Duration) -> Arc<Client> {
    let mut opts = ClientOptions::default();
    opts.cluster.rpc.request_timeout = timeout;
    Client::mount(&tc.mgs_addr, FSNAME, opts).await.unwrap()
}

fn lock(typ: LockType, start: u64, end: u64, owner: u64) -> FileLock {
    FileLock {
        kind: LockKind::Posix,
        typ,
        start,
        end,
        owner,
        pid: 4000 + owner as u32,
    }
}

async fn file(c: &Arc<Client>, path: &str) -> Fid {
    let cred = Credentials::root();
    c.write_file(path, b"x", &cred).await.unwrap();
    c.resolve(path, true, &cred).await.unwrap().fid
}

fn errno(r: Result<(), weft_client::ClientError>) -> Errno {
    r.expect_err("expected an error").errno()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_wait_outlives_the_request_timeout_and_a_cancel_leaves_nothing() {
    let tc = TestCluster::start(bin(), 1).await.unwrap();
    let a = client(&tc, Duration::from_secs(1)).await;
    let b = client(&tc, Duration::from_secs(1)).await;
    let fid = file(&a, "/f").await;
    b.setlk(fid, lock(LockType::Write, 0, LOCK_TO_EOF, 1))
        .await
        .unwrap();
    assert_eq!(
        errno(a.setlk(fid, lock(LockType::Read, 10, 10, 1)).await),
        Errno::Again
    );
    let holder = a
        .getlk(fid, lock(LockType::Read, 10, 10, 1))
        .await
        .unwrap()
        .expect("B's lock is reported");
    assert_eq!(
        (holder.start, holder.end, holder.pid),
        (0, LOCK_TO_EOF, 4001)
    );

    let waiter = {
        let a = a.clone();
        tokio::spawn(async move {
            a.setlkw(fid, lock(LockType::Write, 5, 5, 1), std::future::pending())
                .await
        })
    };
    // Three request timeouts later it still waits, then gets the lock once B lets go.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!waiter.is_finished());
    b.setlk(fid, lock(LockType::Unlock, 0, LOCK_TO_EOF, 1))
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(
        errno(b.setlk(fid, lock(LockType::Read, 5, 5, 1)).await),
        Errno::Again
    );

    // Owner 2 of A does not conflict with owner 1 of A on other bytes: granted without
    // waiting (never cancelled; the bound only keeps a regression from hanging the test).
    tokio::time::timeout(
        Duration::from_secs(10),
        a.setlkw(
            fid,
            lock(LockType::Read, 100, 100, 2),
            std::future::pending(),
        ),
    )
    .await
    .expect("a lock nobody conflicts with is granted at once")
    .unwrap();
    // An interrupted wait fails with EINTR and holds nothing.
    let r = b
        .setlkw(
            fid,
            lock(LockType::Write, 0, 10, 3),
            tokio::time::sleep(Duration::from_millis(300)),
        )
        .await;
    assert_eq!(errno(r), Errno::Intr);
    a.setlk(fid, lock(LockType::Unlock, 0, LOCK_TO_EOF, 1))
        .await
        .unwrap();
    assert_eq!(
        a.getlk(fid, lock(LockType::Write, 0, 10, 9)).await.unwrap(),
        None,
        "the cancelled wait was not granted later"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mdt_restart_drops_held_locks_and_waiters_ask_again() {
    let mut tc = TestCluster::start(bin(), 1).await.unwrap();
    let a = client(&tc, Duration::from_secs(5)).await;
    let b = client(&tc, Duration::from_secs(5)).await;
    let fid = file(&a, "/f").await;
    b.setlk(fid, lock(LockType::Write, 0, 0, 1)).await.unwrap();
    let waiter = {
        let a = a.clone();
        tokio::spawn(async move {
            a.setlkw(fid, lock(LockType::Write, 0, 0, 1), std::future::pending())
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiter.is_finished());
    // Locks live in the MDT's memory: after a restart B's lock is gone (it is not
    // replayed), and A's wait, sent again on the new connection, gets the byte.
    tc.mds.restart().unwrap();
    tc.wait_ready().await.unwrap();
    tokio::time::timeout(Duration::from_secs(30), waiter)
        .await
        .expect("the waiter was granted after the restart")
        .unwrap()
        .unwrap();
    assert_eq!(
        errno(b.setlk(fid, lock(LockType::Write, 0, 0, 1)).await),
        Errno::Again
    );
}
