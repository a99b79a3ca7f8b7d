//! Files in a client's read-write PCC: `HsmPccRw` records and clears the owner (root
//! only, one owner at a time, durably), and `HsmPccWait` answers when the file leaves the
//! cache, or at the end of its bounded wait.

use super::*;

fn pcc_rw(fid: Fid, owner: &str, attach: bool) -> MdtRequest {
    MdtRequest::HsmPccRw {
        fid,
        owner: owner.into(),
        attach,
        cred: root(),
    }
}

fn pcc_wait(fid: Fid, wait_ms: u32) -> MdtRequest {
    MdtRequest::HsmPccWait { fid, wait_ms }
}

async fn done(r: weft_proto::WireResult<MdtReply>) -> bool {
    match r.unwrap() {
        MdtReply::Progress { done } => done,
        other => panic!("expected progress, got {other:?}"),
    }
}

#[tokio::test]
async fn a_file_in_a_read_write_pcc_is_waited_for_until_its_owner_detaches_it() {
    let h = H::new().await;
    let fid = h.create(Fid::ROOT, "ckpt").await;
    assert!(done(h.run(pcc_wait(fid, 0)).await).await, "not attached");

    let a = attr_of(h.run(pcc_rw(fid, "owner-a", true)).await).await;
    assert_eq!(a.hsm_flags & HSM_PCCRW, HSM_PCCRW);
    assert_eq!(flag_names(a.hsm_flags), vec!["pccrw"]);
    // Again by the same owner (a remount with the same cache directory): no change.
    attr_of(h.run(pcc_rw(fid, "owner-a", true)).await).await;
    // Another owner, a user, a bad id, a directory: refused, nothing changed.
    let e = h.run(pcc_rw(fid, "owner-b", true)).await.unwrap_err();
    assert_eq!(e.errno, Errno::Busy, "{e}");
    let e = h.run(pcc_rw(fid, "owner-b", false)).await.unwrap_err();
    assert_eq!(e.errno, Errno::Busy, "{e}");
    let as_user = MdtRequest::HsmPccRw {
        fid,
        owner: "owner-a".into(),
        attach: false,
        cred: user(1000, 1000, &[]),
    };
    assert_eq!(h.run(as_user).await.unwrap_err().errno, Errno::Perm);
    let long = "x".repeat(PCC_OWNER_MAX + 1);
    assert_eq!(
        h.run(pcc_rw(fid, &long, true)).await.unwrap_err().errno,
        Errno::Inval
    );
    let dir = h.mkdir(Fid::ROOT, "d").await;
    assert_eq!(
        h.run(pcc_rw(dir, "owner-a", true)).await.unwrap_err().errno,
        Errno::Inval
    );
    // HSM flag changes cannot touch it.
    assert_eq!(
        h.run(set_flags(fid, 0, HSM_PCCRW)).await.unwrap_err().errno,
        Errno::Inval
    );

    // A wait ends at its bound while the file is held.
    let t = std::time::Instant::now();
    assert!(!done(h.run(pcc_wait(fid, 300)).await).await);
    assert!(t.elapsed() >= Duration::from_millis(300));

    // The record is durable: it survives an MDT restart.
    let h = h.reopen().await;
    assert_eq!(
        h.getattr(fid).await.unwrap().hsm_flags & HSM_PCCRW,
        HSM_PCCRW
    );

    // A waiter is answered when the owner detaches, well before its bound.
    let mdt = h.mdt.clone();
    let waiter = tokio::spawn(async move { mdt.execute(2, pcc_wait(fid, 10_000)).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiter.is_finished());
    let a = attr_of(h.run(pcc_rw(fid, "owner-a", false)).await).await;
    assert_eq!(a.hsm_flags & HSM_PCCRW, 0);
    let t = std::time::Instant::now();
    assert!(done(waiter.await.unwrap()).await);
    assert!(t.elapsed() < Duration::from_secs(5), "woken, not timed out");
    // Detaching again is harmless; a file gone answers ESTALE to a waiter.
    attr_of(h.run(pcc_rw(fid, "owner-b", false)).await).await;
    h.run(pcc_rw(fid, "owner-a", true)).await.unwrap();
    h.run(MdtRequest::Unlink {
        parent: Fid::ROOT,
        name: "ckpt".into(),
        cred: root(),
    })
    .await
    .unwrap();
    assert_eq!(
        h.run(pcc_wait(fid, 1000)).await.unwrap_err().errno,
        Errno::Stale
    );
}
