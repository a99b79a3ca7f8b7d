//! The coordinating MDS crashes at each failpoint of a directory move; the move rolls
//! forward exactly once and the rename lock is free again.

use super::*;

/// Where the coordinating MDS dies in a directory move.
#[derive(Debug, Clone, Copy)]
enum Crash {
    /// After the rename lock was taken, before anything else (no intent left).
    Locked,
    /// With the intent written, before the other MDT was asked.
    BeforeRemote,
    /// With the other MDT's part done, before the intent is finished.
    BeforeFinish,
}

impl Crash {
    fn failpoint(self) -> &'static str {
        match self {
            Crash::Locked => "dir_move.locked",
            Crash::BeforeRemote => "cross_mdt.before_remote",
            Crash::BeforeFinish => "cross_mdt.before_finish",
        }
    }
}

/// The MDS of MDT1 aborts at `crash` while moving `/p1/d` (name on MDT1) into `/q` (on
/// `dst_on`), the directory's inode on `inode_on`; it is restarted without the failpoint.
/// The move is then done exactly once (or, crashing before any intent, not at all and the
/// client's resend does it), `weft fsck` finds nothing, and the rename lock is free again:
/// a directory move coordinated by MDT0 goes through.
async fn coordinator_crash_in_a_move(crash: Crash, dst_on: u32, inode_on: u32) {
    let (mut tc, c) = cluster(2).await;
    let cred = root();
    let q = c
        .mkdir_on(Fid::ROOT, b"q", 0o755, dst_on, &cred)
        .await
        .unwrap();
    let p1 = c.mkdir_on(Fid::ROOT, b"p1", 0o755, 1, &cred).await.unwrap();
    let d = c
        .mkdir_on(p1.fid, b"d", 0o755, inode_on, &cred)
        .await
        .unwrap();
    c.write_file("/p1/d/f", b"f", &cred).await.unwrap();

    let outcome = {
        let c = c.clone();
        crash_at(&mut tc, 1, crash.failpoint(), async move {
            c.rename(p1.fid, b"d", q.fid, b"d", PLAIN, &root()).await
        })
        .await
    };
    tc.wait_ready().await.unwrap();
    if let Err(e) = &outcome {
        // A resend that met the restarted MDS before it served its MDT again is the one
        // failure tolerated; the move is done all the same (checked below).
        eprintln!("{crash:?}: the client's call failed ({e})");
        assert!(
            !matches!(e.errno(), Errno::NoEnt | Errno::Exist | Errno::Busy),
            "{crash:?}: the resend was answered {e}, as if this client had not moved it"
        );
        if c.lookup(p1.fid, b"d", &cred).await.is_ok() {
            c.rename(p1.fid, b"d", q.fid, b"d", PLAIN, &cred)
                .await
                .unwrap();
        }
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while c.lookup(p1.fid, b"d", &cred).await.is_ok() {
        assert!(
            std::time::Instant::now() < deadline,
            "{crash:?}: not rolled forward"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(c.lookup(q.fid, b"d", &cred).await.unwrap().fid, d.fid);
    assert_eq!(&c.read_file("/q/d/f", &cred).await.unwrap()[..], b"f");
    assert_eq!(c.getattr(q.fid).await.unwrap().nlink, 3);
    assert_eq!(c.getattr(p1.fid).await.unwrap().nlink, 2);
    assert_fsck_clean(&tc).await;
    // The lock is free: MDT0 moves a directory (it would wait 30 s and answer EBUSY).
    let started = std::time::Instant::now();
    c.rename(q.fid, b"d", p1.fid, b"d", PLAIN, &cred)
        .await
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{crash:?}: the rename lock was still held"
    );
    assert_fsck_clean(&tc).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_rename_lock_is_released_when_its_mds_restarts() {
    coordinator_crash_in_a_move(Crash::Locked, 0, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_to_another_mdt_rolls_forward_after_a_crash_before_the_remote_step() {
    coordinator_crash_in_a_move(Crash::BeforeRemote, 0, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_to_another_mdt_rolls_forward_after_a_crash_before_finishing() {
    coordinator_crash_in_a_move(Crash::BeforeFinish, 0, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_of_an_inode_on_the_destination_mdt_rolls_forward_after_a_crash() {
    coordinator_crash_in_a_move(Crash::BeforeFinish, 0, 0).await;
}

/// Both parents on MDT1, the inode on MDT0: the entries move at once and an intent sets
/// the directory's ".." on MDT0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_between_directories_of_one_mdt_sets_the_parent_after_a_crash() {
    coordinator_crash_in_a_move(Crash::BeforeRemote, 1, 0).await;
}
