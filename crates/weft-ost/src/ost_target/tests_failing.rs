//! The target's error paths, over the in-memory store wrapped in the failure-injecting
//! one: EIO on read and write, ENOSPC from the store, short writes, failures storing the
//! data version, syncing, truncating and destroying. Each is checked as the wire error a
//! client gets (through [`Ost::execute`], what the transport sends), and afterwards the
//! object holds what was last acknowledged and its data version tells any cache that a
//! failed change may have touched it.

use super::tests::{oid, opts};
use super::*;
use crate::store::failing::{FailingStore, Fault, Op};
use crate::store::memory::MemoryStore;
use weft_proto::ost::{OstReply, OstRequest};

type Failing = FailingStore<MemoryStore>;

const LEN: usize = 8192;

/// A target over a failing store, with object 1 holding `LEN` bytes of 1 (acknowledged).
async fn setup() -> (Arc<Failing>, Arc<Ost>, ObjectAttr) {
    let store = Arc::new(FailingStore::new(MemoryStore::new()));
    let ost = Ost::with_store(store.clone(), opts()).unwrap();
    let acked = ost
        .write(oid(1), 0, Bytes::from(vec![1u8; LEN]), false)
        .await
        .unwrap();
    (store, ost, acked)
}

/// The wire error a client gets for `request` (with `bulk`), which must fail.
async fn error_of(ost: &Arc<Ost>, request: OstRequest, bulk: Bytes) -> WireError {
    ost.execute(request, bulk).await.unwrap_err()
}

/// A write request as a client sends it; the wire error it gets.
async fn write_err(ost: &Arc<Ost>, offset: u64, fill: u8, sync: bool) -> WireError {
    let write = OstRequest::Write {
        object: oid(1),
        offset,
        sync,
        compress: Default::default(),
    };
    error_of(ost, write, Bytes::from(vec![fill; LEN])).await
}

/// The whole of object 1 and its attributes, as a client would read them.
async fn read_all(ost: &Arc<Ost>) -> (ObjectAttr, Bytes) {
    let (reply, data) = ost
        .execute(
            OstRequest::Read {
                object: oid(1),
                offset: 0,
                len: 1 << 20,
            },
            Bytes::new(),
        )
        .await
        .unwrap();
    let OstReply::Data { attr } = reply else {
        panic!("{reply:?}")
    };
    (attr, data)
}

#[tokio::test]
async fn eio_on_read_is_eio_and_changes_nothing() {
    let (store, ost, acked) = setup().await;
    store.fail_next(Op::Read, Fault::Io);
    let e = error_of(
        &ost,
        OstRequest::Read {
            object: oid(1),
            offset: 0,
            len: 100,
        },
        Bytes::new(),
    )
    .await;
    assert_eq!(e.errno, Errno::Io, "{e}");
    assert_eq!(store.injected(), 1);
    let (attr, data) = read_all(&ost).await;
    assert_eq!(
        attr.data_version, acked.data_version,
        "a read moves no version"
    );
    assert!(data[..] == [1u8; LEN]);
}

#[tokio::test]
async fn eio_on_write_keeps_the_acknowledged_data_and_moves_the_version() {
    let (store, ost, acked) = setup().await;
    store.fail_next(Op::Write, Fault::Io);
    let e = write_err(&ost, 0, 2, false).await;
    assert_eq!(e.errno, Errno::Io, "{e}");
    let (attr, data) = read_all(&ost).await;
    assert!(data[..] == [1u8; LEN], "what was acknowledged");
    assert_eq!(attr.size, LEN as u64);
    assert!(
        attr.data_version > acked.data_version,
        "a failed write may have changed bytes: caches must not trust the old version"
    );
    assert_eq!(ost.stats().writes, 1, "only the acknowledged write counts");
}

#[tokio::test]
async fn enospc_from_the_store_is_enospc() {
    let (store, ost, _) = setup().await;
    store.fail_next(Op::Write, Fault::NoSpace);
    let e = write_err(&ost, LEN as u64, 2, false).await;
    assert_eq!(e.errno, Errno::NoSpc, "{e}");
    let (attr, data) = read_all(&ost).await;
    assert_eq!(attr.size, LEN as u64, "nothing appended");
    assert!(data[..] == [1u8; LEN]);
    // The space check's own statfs failing is an I/O error, before anything is written.
    store.fail_next(Op::StatFs, Fault::Io);
    assert_eq!(write_err(&ost, 0, 3, false).await.errno, Errno::Io);
    assert!(read_all(&ost).await.1[..] == [1u8; LEN]);
}

#[tokio::test]
async fn a_short_write_is_eio_and_a_resend_completes_it() {
    let (store, ost, acked) = setup().await;
    store.fail_next(Op::Write, Fault::ShortWrite);
    let e = write_err(&ost, LEN as u64, 2, false).await;
    assert_eq!(e.errno, Errno::Io, "{e}");
    assert!(e.to_string().contains("stored 4096 of 8192 bytes"), "{e}");
    let (attr, data) = read_all(&ost).await;
    assert!(data[..LEN] == [1u8; LEN], "acknowledged bytes untouched");
    assert!(attr.data_version > acked.data_version);
    // The client resends the failed write: the object is then what it was told.
    let w = ost
        .write(oid(1), LEN as u64, Bytes::from(vec![2u8; LEN]), false)
        .await
        .unwrap();
    let (attr, data) = read_all(&ost).await;
    assert_eq!(
        (attr.size, attr.data_version),
        (2 * LEN as u64, w.data_version)
    );
    assert!(data[..LEN] == [1u8; LEN] && data[LEN..] == [2u8; LEN]);
}

#[tokio::test]
async fn failures_after_the_data_landed_are_still_errors() {
    let (store, ost, acked) = setup().await;
    // The data version could not be stored: the write is not acknowledged.
    store.fail_next(Op::SetVersion, Fault::Io);
    assert_eq!(write_err(&ost, 0, 2, false).await.errno, Errno::Io);
    // Nor is a synchronous write whose sync failed.
    store.fail_next(Op::SyncData, Fault::Io);
    assert_eq!(write_err(&ost, 0, 3, true).await.errno, Errno::Io);
    let (attr, data) = read_all(&ost).await;
    assert!(
        attr.data_version > acked.data_version,
        "a fresh version, never the old one"
    );
    assert!(data[..] == [3u8; LEN], "the data itself landed");
    assert_eq!(ost.stats().writes, 1);
}

#[tokio::test]
async fn failed_truncate_punch_and_sync_report_eio() {
    let (store, ost, acked) = setup().await;
    store.fail_next(Op::SetSize, Fault::Io);
    let e = error_of(
        &ost,
        OstRequest::Punch {
            object: oid(1),
            size: 10,
            compress: Default::default(),
        },
        Bytes::new(),
    )
    .await;
    assert_eq!(e.errno, Errno::Io);
    store.fail_next(Op::Punch, Fault::Io);
    let e = error_of(
        &ost,
        OstRequest::PunchRange {
            object: oid(1),
            offset: 0,
            len: 4096,
        },
        Bytes::new(),
    )
    .await;
    assert_eq!(e.errno, Errno::Io);
    store.fail_next(Op::SyncObject, Fault::Io);
    let e = error_of(
        &ost,
        OstRequest::Sync {
            object: Some(oid(1)),
        },
        Bytes::new(),
    )
    .await;
    assert_eq!(e.errno, Errno::Io);
    let (attr, data) = read_all(&ost).await;
    assert_eq!(attr.size, LEN as u64);
    assert!(attr.data_version > acked.data_version);
    assert!(data[..] == [1u8; LEN]);
}

#[tokio::test]
async fn a_failed_removal_fails_the_batch_but_the_others_go() {
    let (store, ost, _) = setup().await;
    for n in 2..5 {
        ost.write(oid(n), 0, Bytes::from_static(b"x"), false)
            .await
            .unwrap();
    }
    store.fail_nth(Op::Remove, 2, Fault::Io);
    let e = error_of(
        &ost,
        OstRequest::DestroyMany {
            objects: (1..5).map(oid).collect(),
        },
        Bytes::new(),
    )
    .await;
    assert_eq!(e.errno, Errno::Io);
    let mut left = Vec::new();
    for n in 1..5 {
        if ost.getattr(oid(n)).await.unwrap().exists {
            left.push(n);
        }
    }
    assert_eq!(left, [2], "every other object was removed");
    // The MDT resends the batch: done is done, the rest goes now.
    store.fail_next(Op::SyncRemoved, Fault::Io);
    assert_eq!(
        ost.destroy_many((1..5).map(oid).collect())
            .await
            .unwrap_err()
            .errno,
        Errno::Io,
        "an unsynced removal is an error too"
    );
    ost.destroy_many((1..5).map(oid).collect()).await.unwrap();
    assert!(!ost.getattr(oid(2)).await.unwrap().exists);
}
