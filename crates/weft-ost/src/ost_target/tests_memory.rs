//! The target over the in-memory store: round trips of read, write, truncate, punch and
//! seek, data versions (including across a restart over the same store), listing and
//! space admission — fast and with no data directory.

use super::tests::{oid, opts};
use super::*;
use crate::store::memory::{MemoryStore, PAGE};
use weft_proto::ost::{OstReply, OstRequest};

const P: u64 = PAGE as u64;

fn mem_ost() -> (Arc<MemoryStore>, Arc<Ost>) {
    let store = Arc::new(MemoryStore::new());
    let ost = Ost::with_store(store.clone(), opts()).unwrap();
    (store, ost)
}

#[tokio::test]
async fn write_read_and_truncate_round_trip() {
    let (_s, ost) = mem_ost();
    let (attr, data) = ost.read(oid(1), 0, 10).await.unwrap();
    assert!(!attr.exists && data.is_empty(), "missing reads empty");
    let w = ost
        .write(oid(1), 0, Bytes::from_static(b"hello world"), false)
        .await
        .unwrap();
    assert!(w.exists && w.size == 11 && w.data_version > 0);
    let (r, data) = ost.read(oid(1), 6, 100).await.unwrap();
    assert_eq!(&data[..], b"world", "short read at the end");
    assert_eq!((r.size, r.data_version), (11, w.data_version));
    let (_, data) = ost.read(oid(1), u64::MAX, 10).await.unwrap();
    assert!(data.is_empty());
    let t = ost.punch(oid(1), 5).await.unwrap();
    assert_eq!(t.size, 5);
    let e = ost.punch(oid(1), 3 * P).await.unwrap();
    let (_, data) = ost.read(oid(1), 0, 100).await.unwrap();
    assert_eq!(&data[..5], b"hello");
    assert!(
        data[5..].iter().all(|b| *b == 0),
        "extended part reads as zeros"
    );
    assert_eq!(e.blocks, 8, "extending allocates nothing");
    assert!(w.data_version < t.data_version && t.data_version < e.data_version);
}

#[tokio::test]
async fn punch_range_frees_pages_and_keeps_the_size() {
    let (_s, ost) = mem_ost();
    let w = ost
        .write(oid(1), 0, Bytes::from(vec![7u8; 4 * PAGE]), false)
        .await
        .unwrap();
    assert_eq!(w.blocks, 32);
    let p = ost.punch_range(oid(1), P / 2, 2 * P).await.unwrap();
    assert_eq!(p.size, w.size, "size kept");
    assert_eq!(p.blocks, 24, "one whole page freed");
    assert!(p.data_version > w.data_version);
    let (_, data) = ost.read(oid(1), 0, 4 * P as u32).await.unwrap();
    let punched = PAGE / 2..PAGE / 2 + 2 * PAGE;
    for (i, b) in data.iter().enumerate() {
        assert_eq!(*b, if punched.contains(&i) { 0 } else { 7 }, "byte {i}");
    }
    // A punch of nothing changes nothing; a missing object stays missing.
    let same = ost.punch_range(oid(1), P, 0).await.unwrap();
    assert_eq!(same.data_version, p.data_version);
    assert!(!ost.punch_range(oid(2), 0, P).await.unwrap().exists);
    assert!(!ost.getattr(oid(2)).await.unwrap().exists);
}

#[tokio::test]
async fn seek_finds_data_and_holes() {
    let (_s, ost) = mem_ost();
    ost.write(oid(1), 0, Bytes::from_static(b"head"), false)
        .await
        .unwrap();
    ost.write(oid(1), 16 * P, Bytes::from(vec![1u8; PAGE]), false)
        .await
        .unwrap();
    let size = 17 * P;
    assert_eq!(ost.seek(oid(1), 0, false).await.unwrap(), Some(0));
    assert_eq!(ost.seek(oid(1), 0, true).await.unwrap(), Some(P));
    assert_eq!(ost.seek(oid(1), P, false).await.unwrap(), Some(16 * P));
    assert_eq!(ost.seek(oid(1), 16 * P, true).await.unwrap(), Some(size));
    // At or past the end: no data, and the end is a hole.
    assert_eq!(ost.seek(oid(1), size, false).await.unwrap(), None);
    assert_eq!(
        ost.seek(oid(1), size + 9, true).await.unwrap(),
        Some(size + 9)
    );
    // A missing object is all hole.
    assert_eq!(ost.seek(oid(2), 5, false).await.unwrap(), None);
    assert_eq!(ost.seek(oid(2), 5, true).await.unwrap(), Some(5));
}

#[tokio::test]
async fn versions_are_stable_while_nothing_changes_and_renewed_after_a_restart() {
    let (store, ost) = mem_ost();
    let w = ost
        .write(oid(1), 0, Bytes::from_static(b"abc"), false)
        .await
        .unwrap();
    assert_eq!(
        ost.getattr(oid(1)).await.unwrap().data_version,
        w.data_version
    );
    assert_eq!(
        ost.read(oid(1), 0, 3).await.unwrap().0.data_version,
        w.data_version
    );
    ost.sync(Some(oid(1))).await.unwrap();
    assert_eq!(
        ost.getattr(oid(1)).await.unwrap().data_version,
        w.data_version
    );
    drop(ost);
    // A restart over the same store: the old version is not trusted, and is replaced
    // once by one above everything handed out before.
    let ost = Ost::with_store(store, opts()).unwrap();
    let a = ost.getattr(oid(1)).await.unwrap();
    assert!(a.data_version > w.data_version);
    assert_eq!(
        ost.getattr(oid(1)).await.unwrap().data_version,
        a.data_version
    );
    let (_, data) = ost.read(oid(1), 0, 3).await.unwrap();
    assert_eq!(&data[..], b"abc");
}

#[tokio::test]
async fn listing_pages_through_every_object_once() {
    let (_s, ost) = mem_ost();
    for n in 0..50 {
        ost.write(oid(n), 0, Bytes::from(vec![1u8; n as usize]), false)
            .await
            .unwrap();
    }
    ost.destroy_many((40..50).map(oid).collect()).await.unwrap();
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let (page, next) = ost.list_objects(after, 7).await.unwrap();
        assert!(page.len() <= 7);
        seen.extend(page);
        match next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    seen.sort();
    let want: Vec<(ObjectId, u64)> = (0..40).map(|n| (oid(n), u64::from(n))).collect();
    let mut want = want;
    want.sort();
    assert_eq!(seen, want);
    assert_eq!(ost.stats().listed_objects, 40);
    assert_eq!(
        ost.list_objects(None, 0).await.unwrap_err().errno,
        Errno::Inval
    );
}

#[tokio::test]
async fn writes_beyond_free_space_are_refused_before_touching_the_object() {
    // 256 pages; the reserve keeps 0.5% back.
    let ost = Ost::with_store(Arc::new(MemoryStore::with_capacity(256 * P)), opts()).unwrap();
    ost.write(oid(1), 0, Bytes::from(vec![1u8; 200 * PAGE]), false)
        .await
        .unwrap();
    let e = ost
        .execute(
            OstRequest::Write {
                object: oid(2),
                offset: 0,
                sync: false,
                compress: Default::default(),
            },
            Bytes::from(vec![2u8; 100 * PAGE]),
        )
        .await
        .unwrap_err();
    assert_eq!(e.errno, Errno::NoSpc, "{e}");
    assert!(!ost.getattr(oid(2)).await.unwrap().exists, "nothing stored");
    // Grants come out of the same space, and a holder may use its own.
    let (g, _) = ost
        .execute_from(9, OstRequest::Grant { want: u64::MAX }, Bytes::new())
        .await
        .unwrap();
    let OstReply::Granted { bytes } = g else {
        panic!("{g:?}")
    };
    assert!(bytes > 0 && bytes < 56 * P);
    assert!(
        ost.write(oid(3), 0, Bytes::from(vec![3u8; PAGE]), false)
            .await
            .is_err()
    );
    ost.write_from(
        9,
        oid(3),
        0,
        Bytes::from(vec![3u8; PAGE]),
        false,
        Default::default(),
    )
    .await
    .unwrap();
    let s = ost.statfs().await.unwrap();
    assert_eq!((s.blocks, s.bavail), (256, 55));
}
