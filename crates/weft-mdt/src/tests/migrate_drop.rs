//! The old directory of a migration to another MDT while its entries are dropped: lookups
//! and listings of it answer ESTALE (the client looks the path up again and finds the new
//! directory), never a miss of a name that moved; before the drop, a frozen directory
//! reads as before.

use super::harness::{H, errno, root};
use weft_proto::Errno;
use weft_proto::mdt::{MdtReply, MdtRequest};

#[tokio::test]
async fn lookups_and_listings_of_a_directory_being_dropped_answer_estale() {
    let h = H::new().await;
    let dir = h.mkdir(weft_proto::Fid::ROOT, "proj").await;
    for name in ["a", "b", "c"] {
        h.create(dir, name).await;
    }
    let freeze = MdtRequest::FreezeDir {
        fid: dir,
        from: 1,
        op: 7,
        freeze: true,
    };
    h.run(freeze).await.unwrap();

    // Frozen, not dropped yet: reads as before, a missing name is a miss.
    assert!(h.lookup(dir, "a").await.is_ok());
    assert_eq!(errno(h.lookup(dir, "zz").await), Errno::NoEnt);
    assert_eq!(h.list(dir, 16).await.len(), 3);

    // One entry dropped: every lookup (of a name gone or still here) and every listing
    // answers ESTALE.
    let drop_one = || MdtRequest::DropMigrated { fid: dir, max: 1 };
    assert!(matches!(
        h.run(drop_one()).await.unwrap(),
        MdtReply::Progress { done: false }
    ));
    for name in ["a", "b", "c", "zz"] {
        assert_eq!(errno(h.lookup(dir, name).await), Errno::Stale, "{name}");
    }
    let listing = MdtRequest::ReadDir {
        fid: dir,
        cookie: 0,
        max_entries: 16,
        plus: false,
        cred: root(),
    };
    assert_eq!(errno(h.run(listing.clone()).await), Errno::Stale);

    // Dropped whole: still ESTALE.
    while !matches!(
        h.run(drop_one()).await.unwrap(),
        MdtReply::Progress { done: true }
    ) {}
    assert_eq!(errno(h.lookup(dir, "a").await), Errno::Stale);
    assert_eq!(errno(h.run(listing).await), Errno::Stale);
}
