//! Numbered requests: a resend is answered from the recorded reply, across a restart.

use super::harness::{H, create_req, errno, root};
use crate::Origin;
use weft_proto::mdt::{AccessMode, MdtReply, MdtRequest, OpenFlags};
use weft_proto::{Errno, Fid};

fn n(seq: u64, acked: u64) -> Origin {
    Origin {
        client: uuid::Uuid::from_u128(0x5eed),
        seq,
        acked,
        resendable: true,
    }
}

fn mkdir(name: &str) -> MdtRequest {
    MdtRequest::Mkdir {
        parent: Fid::ROOT,
        name: name.into(),
        mode: 0o755,
        cred: root(),
    }
}

#[tokio::test]
async fn a_resent_change_is_answered_from_its_record_even_after_a_restart() {
    let h = H::new().await;
    let first = h.mdt.execute_from(1, n(1, 1), mkdir("d")).await.unwrap();
    // The same number again (a lost reply): the same answer, not EEXIST.
    assert_eq!(
        h.mdt.execute_from(2, n(1, 1), mkdir("d")).await.unwrap(),
        first
    );
    // Unnumbered, or another number: done again, so EEXIST.
    assert_eq!(errno(h.mdt.execute(1, mkdir("d")).await), Errno::Exist);
    assert_eq!(
        errno(h.mdt.execute_from(1, n(2, 1), mkdir("d")).await),
        Errno::Exist
    );
    // A create that opened: the resend gets a working handle of its own.
    let create = MdtRequest::Create {
        parent: Fid::ROOT,
        name: "f".into(),
        mode: 0o100644,
        rdev: 0,
        exclusive: true,
        layout: None,
        open: Some(OpenFlags {
            access: AccessMode::Write,
            truncate: false,
        }),
        cred: root(),
    };
    h.mdt
        .execute_from(1, n(3, 1), create.clone())
        .await
        .unwrap();

    // The records are durable with the changes.
    let h = h.reopen().await;
    assert_eq!(
        h.mdt.execute_from(7, n(1, 1), mkdir("d")).await.unwrap(),
        first
    );
    let MdtReply::Created {
        attr,
        handle: Some(handle),
        ..
    } = h.mdt.execute_from(7, n(3, 1), create).await.unwrap()
    else {
        panic!("a create with open answers with a handle");
    };
    h.mdt
        .execute(
            7,
            MdtRequest::Close {
                handle,
                size: Some(10),
                blocks: None,
                modified: true,
            },
        )
        .await
        .unwrap();
    assert_eq!(h.getattr(attr.fid).await.unwrap().size, 10);

    // Acknowledged numbers are forgotten: a (bogus) resend of 1 is done again.
    h.mdt.execute_from(7, n(4, 4), mkdir("e")).await.unwrap();
    assert_eq!(
        errno(h.mdt.execute_from(7, n(1, 4), mkdir("d")).await),
        Errno::Exist
    );
    // Failed changes are not recorded: the resend runs again (and may now succeed).
    let rm = MdtRequest::Rmdir {
        parent: Fid::ROOT,
        name: "later".into(),
        cred: root(),
    };
    assert_eq!(
        errno(h.mdt.execute_from(7, n(5, 5), rm.clone()).await),
        Errno::NoEnt
    );
    h.mkdir(Fid::ROOT, "later").await;
    let MdtReply::Removed { parent } = h.mdt.execute_from(7, n(5, 5), rm).await.unwrap() else {
        panic!("rmdir answered something else")
    };
    // With the directory as the removal left it.
    assert_eq!(parent, h.getattr(Fid::ROOT).await.unwrap());
}

fn from(client: u128) -> Origin {
    Origin {
        client: uuid::Uuid::from_u128(client),
        seq: 0,
        acked: 0,
        resendable: true,
    }
}

/// Creates `name` open for writing on `conn` for `client`, then unlinks it: an orphan only
/// the handle keeps alive.
async fn open_orphan(h: &H, conn: u64, client: u128, name: &str) -> (Fid, u64) {
    let open = OpenFlags {
        access: AccessMode::Write,
        truncate: false,
    };
    let create = create_req(name, Some(open));
    let MdtReply::Created {
        attr,
        handle: Some(handle),
        ..
    } = h
        .mdt
        .execute_from(conn, from(client), create)
        .await
        .unwrap()
    else {
        panic!()
    };
    let unlink = MdtRequest::Unlink {
        parent: Fid::ROOT,
        name: name.into(),
        cred: root(),
    };
    h.mdt
        .execute_from(conn, from(client), unlink)
        .await
        .unwrap();
    (attr.fid, handle)
}

fn close(handle: u64) -> MdtRequest {
    MdtRequest::Close {
        handle,
        size: Some(5),
        blocks: None,
        modified: true,
    }
}

#[tokio::test]
async fn handles_of_a_broken_connection_wait_for_their_client() {
    let mut o = super::harness::opts();
    o.handle_grace = std::time::Duration::from_millis(300);
    let h = H::with(o, 2).await;
    let (kept, handle) = open_orphan(&h, 1, 1, "kept").await;
    let (lost, _) = open_orphan(&h, 2, 2, "lost").await;
    h.mdt.disconnect_client(1, uuid::Uuid::from_u128(1));
    h.mdt.disconnect_client(2, uuid::Uuid::from_u128(2));
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    // Within the grace period both orphans live; another client cannot use the handle.
    assert!(h.getattr(kept).await.is_ok() && h.getattr(lost).await.is_ok());
    assert_eq!(
        errno(h.mdt.execute_from(9, from(3), close(handle)).await),
        Errno::BadF
    );
    // Its own client, on a new connection, closes it (merging the size it wrote).
    h.mdt.execute_from(9, from(1), close(handle)).await.unwrap();
    assert_eq!(errno(h.getattr(kept).await), Errno::Stale);
    // The client that never came back loses its handle after the grace period.
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    assert_eq!(errno(h.getattr(lost).await), Errno::Stale);
    assert_eq!(h.mdt.stats().open_handles, 0);
}

#[tokio::test]
async fn a_change_from_a_client_of_this_process_is_not_recorded() {
    let h = H::new().await;
    let in_process = Origin {
        resendable: false,
        ..n(1, 1)
    };
    h.mdt.execute_from(1, in_process, mkdir("d")).await.unwrap();
    assert_eq!(h.mdt.stats().reply_records, 0);
    // Nothing to answer the same number from: done again, so EEXIST.
    assert_eq!(
        errno(h.mdt.execute_from(1, n(1, 1), mkdir("d")).await),
        Errno::Exist
    );
    // The same change over a connection that can break is recorded.
    h.mdt.execute_from(1, n(2, 1), mkdir("e")).await.unwrap();
    assert_eq!(h.mdt.stats().reply_records, 1);
}
