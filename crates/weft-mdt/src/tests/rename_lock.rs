//! The file system's rename lock as MDT0 keeps it (see `crate::dir_moves`).

use super::harness::{H, errno};
use weft_proto::Errno;
use weft_proto::mdt::{MdtReply, MdtRequest, RenameLockAction};

fn lock(from: u32, op: u64, run: u64, action: RenameLockAction) -> MdtRequest {
    MdtRequest::RenameLock {
        from,
        op,
        run,
        action,
    }
}

#[tokio::test]
async fn one_operation_holds_the_rename_lock_and_it_survives_a_restart() {
    let h = H::new().await;
    let take = |from, op, run| lock(from, op, run, RenameLockAction::Take);
    assert_eq!(
        h.mdt.execute(1, take(1, 10, 100)).await.unwrap(),
        MdtReply::Ok
    );
    // The holder again (a resend): granted; anyone else: EBUSY.
    assert_eq!(
        h.mdt.execute(1, take(1, 10, 100)).await.unwrap(),
        MdtReply::Ok
    );
    assert_eq!(errno(h.mdt.execute(1, take(2, 11, 200)).await), Errno::Busy);
    assert_eq!(errno(h.mdt.execute(1, take(1, 12, 100)).await), Errno::Busy);
    // A release by another operation changes nothing.
    let release = |from, op| lock(from, op, 0, RenameLockAction::Release);
    h.mdt.execute(1, release(2, 10)).await.unwrap();
    h.mdt.execute(1, release(1, 11)).await.unwrap();
    assert_eq!(errno(h.mdt.execute(1, take(2, 11, 200)).await), Errno::Busy);

    // Durable: still held after a restart of MDT0.
    let h = h.reopen().await;
    assert_eq!(errno(h.mdt.execute(1, take(2, 11, 200)).await), Errno::Busy);
    // The holder's MDT restarted (run 101): the lock stays while an intent of the earlier
    // run keeps it, and goes otherwise; the same run's lock is never stale.
    let stale =
        |from, run, keep: Vec<u64>| lock(from, 0, run, RenameLockAction::ReleaseStale { keep });
    h.mdt.execute(1, stale(1, 101, vec![10])).await.unwrap();
    h.mdt.execute(1, stale(1, 100, vec![])).await.unwrap();
    h.mdt.execute(1, stale(2, 201, vec![])).await.unwrap();
    assert_eq!(errno(h.mdt.execute(1, take(2, 11, 200)).await), Errno::Busy);
    h.mdt.execute(1, stale(1, 101, vec![])).await.unwrap();
    assert_eq!(
        h.mdt.execute(1, take(2, 11, 200)).await.unwrap(),
        MdtReply::Ok
    );
    h.mdt.execute(1, release(2, 11)).await.unwrap();
    assert_eq!(
        h.mdt.execute(1, take(3, 12, 300)).await.unwrap(),
        MdtReply::Ok
    );
}
