//! Write-back over fake objects: small writes are buffered and leave in full RPCs at fsync,
//! close or the flush threshold, each byte in the object and at the offset the layout
//! says; a write that fails mid-flush is reported by fsync or close with its errno, the
//! bytes acknowledged before stay where they belong, and what follows behaves as before.

use super::{File, KIB, MIB, Rig, pattern, striped};
use crate::io::Op;
use crate::io::failing::{Fault, Rule};
use weft_proto::Errno;
use weft_proto::mdt::AccessMode;

/// Writes `data` at 0 in `chunk`-byte writes.
async fn write_in_chunks(f: &File, data: &[u8], chunk: usize) {
    for (i, c) in data.chunks(chunk).enumerate() {
        let at = f.write_at((i * chunk) as u64, c).await.unwrap();
        assert_eq!(at, (i * chunk) as u64);
    }
}

/// A file over 4 OSTs in 64 KiB stripes, open for writing, with 1 MiB written to it in
/// 4 KiB writes (all buffered: below the flush threshold); and that MiB.
async fn buffered_mib() -> (Rig, Vec<u8>, File) {
    let rig = Rig::new(striped(64 * KIB, 4));
    let data = pattern(MIB as usize);
    let f = rig.open(AccessMode::Write, 0);
    write_in_chunks(&f, &data, 4096).await;
    (rig, data, f)
}

#[tokio::test]
async fn small_writes_are_buffered_then_sent_in_full_rpcs_at_fsync() {
    let (rig, data, f) = buffered_mib().await;
    // Below the flush threshold (64 KiB RPCs x 4 stripes x 8 in flight): all buffered.
    rig.quiesce(0).await;
    assert!(rig.objects.calls_of(Op::Write).is_empty());
    assert_eq!(rig.client.dirty_bytes(), MIB);

    f.fsync().await.unwrap();
    let writes = rig.objects.calls_of(Op::Write);
    assert_eq!(writes.len(), 16, "1 MiB in 64 KiB RPCs: {writes:?}");
    assert!(writes.iter().all(|w| w.len == 64 * KIB));
    for ost in 0..4 {
        assert_eq!(
            writes.iter().filter(|w| w.ost == ost).count(),
            4,
            "each stripe's object gets its share"
        );
    }
    let stored = rig.stored(MIB);
    assert!(
        stored.iter().zip(&data).all(|(s, d)| *s == Some(*d)),
        "every byte is in its object at its offset"
    );
    // fsync made the objects durable and recorded the size on the MDT.
    assert_eq!(rig.objects.calls_of(Op::Sync).len(), 4);
    let merges = rig.mdt.merges.lock().clone();
    assert_eq!(merges.len(), 1);
    assert_eq!(merges[0].1, Some(MIB));
    assert_eq!(rig.client.dirty_bytes(), 0, "the dirty budget is returned");
    f.close().await.unwrap();
}

#[tokio::test]
async fn passing_the_threshold_flushes_in_the_background_and_close_sends_the_rest() {
    let rig = Rig::new(striped(64 * KIB, 4));
    let data = pattern(3 * MIB as usize + 1000);
    let f = rig.open(AccessMode::Write, 0);
    write_in_chunks(&f, &data, 64 * KIB as usize).await;
    rig.quiesce(0).await;
    let early = rig.objects.calls_of(Op::Write).len();
    assert!(early > 0, "the threshold (2 MiB here) started flushes");
    f.close().await.unwrap();
    let stored = rig.stored(data.len() as u64);
    assert!(stored.iter().zip(&data).all(|(s, d)| *s == Some(*d)));
    let closes = rig.mdt.closes.lock().clone();
    assert_eq!(closes.len(), 1);
    assert_eq!(
        closes[0].1,
        Some(data.len() as u64),
        "close records the size"
    );
    assert!(closes[0].3, "and that the file was modified");
    assert_eq!(rig.client.dirty_bytes(), 0);
}

#[tokio::test]
async fn scattered_and_overlapping_writes_land_where_the_layout_says() {
    // A stripe size that RPCs do not divide, over 3 OSTs.
    let rig = Rig::new(striped(96 * KIB, 3));
    let size = 2 * MIB;
    let mut shadow = vec![0u8; size as usize];
    let f = rig.open(AccessMode::Write, 0);
    let writes: [(u64, usize); 7] = [
        (MIB + 5, 300_000),
        (10, 70_000),
        (200_000, 4096),
        (MIB, 100),         // overlaps a buffered extent: the buffer goes out first
        (MIB + 1000, 5000), // inside bytes already sent
        (70_010, 1),        // right after bytes already sent
        (size - 333, 333),  // the last bytes
    ];
    for (k, (at, len)) in writes.into_iter().enumerate() {
        let bytes: Vec<u8> = pattern(len)
            .iter()
            .map(|b| b.wrapping_add(k as u8))
            .collect();
        f.write_at(at, &bytes).await.unwrap();
        shadow[at as usize..at as usize + len].copy_from_slice(&bytes);
    }
    f.fsync().await.unwrap();
    let stored = rig.stored(size);
    for (i, (s, want)) in stored.iter().zip(&shadow).enumerate() {
        assert_eq!(s.unwrap_or(0), *want, "byte {i}");
    }
    assert!(
        rig.objects
            .calls_of(Op::Write)
            .iter()
            .all(|w| w.len <= 64 * KIB),
        "no RPC is larger than max_pages_per_rpc"
    );
    assert_eq!(f.size().await, size);
}

#[tokio::test]
async fn a_write_failing_mid_flush_is_reported_by_fsync_and_loses_nothing_acknowledged() {
    for (fault, errno) in [(Fault::Io, Errno::Io), (Fault::NoSpace, Errno::NoSpc)] {
        let (rig, data, f) = buffered_mib().await;
        // The first write RPC to the third stripe's object fails.
        let object = rig.layout.components[0].object(rig.fid, 2);
        rig.failing
            .fail(Rule::nth(Some(Op::Write), 1, fault).on_object(object));
        let err = f.fsync().await.unwrap_err();
        assert_eq!(err.errno(), errno, "{fault:?}");
        assert_eq!(rig.failing.failed(), 1);
        assert!(
            rig.mdt.merges.lock().is_empty(),
            "a failed fsync records nothing"
        );

        // Every byte the objects hold is the one written there; only the failed RPC's
        // 64 KiB are missing.
        let stored = rig.stored(MIB);
        let missing = stored
            .iter()
            .filter(|s| s.is_none() || **s == Some(0))
            .count();
        assert_eq!(missing as u64, 64 * KIB, "{fault:?}");
        assert!(
            stored
                .iter()
                .zip(&data)
                .all(|(s, d)| s.is_none_or(|s| s == 0 || s == *d)),
            "no byte is misplaced"
        );

        // As before the seam: the error is reported once; the data of the failed RPC is
        // not sent again, the next fsync succeeds and close reports nothing more.
        f.fsync().await.unwrap();
        assert_eq!(rig.mdt.merges.lock().len(), 1);
        f.close().await.unwrap();
        assert_eq!(rig.mdt.closes.lock().len(), 1);
        assert_eq!(rig.client.dirty_bytes(), 0);
    }
}

#[tokio::test]
async fn a_failed_flush_without_fsync_is_reported_by_later_writes_and_close() {
    let rig = Rig::new(striped(64 * KIB, 1));
    let f = rig.open(AccessMode::Write, 0);
    rig.failing.fail(Rule::always(Some(Op::Write), Fault::Io));
    // 1 MiB passes the one-stripe threshold (512 KiB) twice: background flushes fail.
    write_in_chunks(&f, &pattern(MIB as usize), 64 * KIB as usize).await;
    rig.quiesce(0).await;
    f.write_back().await;
    let err = f.write_at(MIB, b"more").await.unwrap_err();
    assert_eq!(
        err.errno(),
        Errno::Io,
        "the next write reports the flush error"
    );
    rig.failing.heal();
    f.write_at(MIB, b"more").await.unwrap();
    f.close().await.unwrap();
    assert_eq!(
        rig.objects
            .object(0, rig.layout.components[0].object(rig.fid, 0))
            .map(|o| o[MIB as usize..].to_vec()),
        Some(b"more".to_vec())
    );
}

#[tokio::test]
async fn close_reports_a_flush_error_and_still_closes_the_handle() {
    let rig = Rig::new(striped(64 * KIB, 2));
    let f = rig.open(AccessMode::Write, 0);
    write_in_chunks(&f, &pattern(200 * KIB as usize), 8192).await;
    rig.failing
        .fail(Rule::nth(Some(Op::Write), 2, Fault::NoSpace));
    let err = f.close().await.unwrap_err();
    assert_eq!(err.errno(), Errno::NoSpc);
    assert_eq!(
        rig.mdt.closes.lock().len(),
        1,
        "the MDT handle is closed anyway"
    );
    assert_eq!(f.read_at(0, 1).await.unwrap_err().errno(), Errno::BadF);
}

#[tokio::test]
async fn a_timed_out_write_is_resent_and_nothing_is_lost() {
    let (rig, data, f) = buffered_mib().await;
    rig.failing
        .fail(Rule::nth(Some(Op::Write), 3, Fault::TimedOut).times(2));
    f.fsync().await.unwrap();
    assert_eq!(rig.failing.failed(), 2);
    let stored = rig.stored(MIB);
    assert!(stored.iter().zip(&data).all(|(s, d)| *s == Some(*d)));
}

#[tokio::test]
async fn a_write_the_osts_cannot_promise_space_for_fails_before_it_is_buffered() {
    let rig = Rig::new(striped(64 * KIB, 2));
    rig.objects.set_space(100 * KIB);
    let f = rig.open(AccessMode::Write, 0);
    let err = f
        .write_at(0, &pattern(300 * KIB as usize))
        .await
        .unwrap_err();
    assert_eq!(err.errno(), Errno::NoSpc);
    assert_eq!(rig.client.dirty_bytes(), 0, "nothing was buffered");
    assert!(rig.objects.calls_of(Op::Write).is_empty());
    f.close().await.unwrap();
}
