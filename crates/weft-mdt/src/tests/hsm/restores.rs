//! Restores by the coordinator with the fake mover: ranges answered early, jobs shared,
//! failures, durability, shutdown.

use super::*;

#[tokio::test]
async fn a_mid_file_range_is_answered_before_the_whole_file() {
    let h = H::with(hsm_opts(MIB, 1), 4).await;
    h.cluster.set_restore_delay(Duration::from_millis(20));
    let fid = released_file(&h, "big", 8 * MIB).await;
    let r = h
        .run(restore(fid, 5 * MIB + 10, 5 * MIB + 20))
        .await
        .unwrap();
    assert_eq!(r, MdtReply::Progress { done: false });
    let chunks = h.cluster.restore_chunks();
    assert_eq!((chunks[0].start, chunks[0].end), (5 * MIB, 6 * MIB));
    assert!(
        chunks.len() < 8,
        "answered before the whole file: {}",
        chunks.len()
    );
    assert!(chunks[0].layout.components[0].is_instantiated());
    assert_eq!(
        (chunks[0].repo, chunks[0].archive.key.as_str()),
        (REPO, "big")
    );
    let r = h.run(restore(fid, 0, u64::MAX)).await.unwrap();
    assert_eq!(r, MdtReply::Progress { done: true });
    let chunks = h.cluster.restore_chunks();
    let starts: BTreeSet<u64> = chunks.iter().map(|c| c.start).collect();
    assert_eq!(chunks.len(), 8, "every unit once");
    assert_eq!(starts, (0..8).map(|u| u * MIB).collect());
    let a = h.getattr(fid).await.unwrap();
    assert_eq!(a.hsm_flags, HSM_EXISTS | HSM_ARCHIVED);
    let s = h.mdt.stats();
    assert_eq!(
        (
            s.hsm_restores_started,
            s.hsm_restores_done,
            s.hsm_restore_bytes
        ),
        (1, 1, 8 * MIB)
    );
    // Loaded and no longer released: done at once, nothing asked.
    let r = h.run(restore(fid, 0, 1)).await.unwrap();
    assert_eq!(r, MdtReply::Progress { done: true });
    assert_eq!(h.cluster.restore_chunks().len(), 8);
}

#[tokio::test]
async fn concurrent_readers_share_one_job() {
    let h = H::with(hsm_opts(MIB, 4), 4).await;
    h.cluster.set_restore_delay(Duration::from_millis(10));
    let fid = released_file(&h, "f", 8 * MIB + 5).await;
    let (a, b, c) = tokio::join!(
        h.run_on(1, restore(fid, 0, u64::MAX)),
        h.run_on(2, restore(fid, 0, u64::MAX)),
        h.run_on(3, restore(fid, 3 * MIB, 4 * MIB)),
    );
    assert_eq!(a.unwrap(), MdtReply::Progress { done: true });
    assert_eq!(b.unwrap(), MdtReply::Progress { done: true });
    assert!(c.is_ok());
    let chunks = h.cluster.restore_chunks();
    assert_eq!(chunks.len(), 9, "each unit asked once");
    assert_eq!(
        chunks.iter().map(|c| c.end - c.start).sum::<u64>(),
        8 * MIB + 5
    );
    assert_eq!(h.mdt.stats().hsm_restores_started, 1);
    assert_eq!(h.mdt.hsm.running(), 0);
}

#[tokio::test]
async fn a_failing_mover_answers_eio_and_a_later_restore_succeeds() {
    let h = H::with(hsm_opts(MIB, 2), 4).await;
    let fid = released_file(&h, "f", 3 * MIB).await;
    h.cluster.fail_restores(Some(Errno::Io));
    assert_eq!(errno(h.run(restore(fid, 0, u64::MAX)).await), Errno::Io);
    let a = h.getattr(fid).await.unwrap();
    assert_ne!(a.hsm_flags & HSM_RELEASED, 0, "still released");
    assert_eq!(h.mdt.stats().hsm_restores_failed, 1);
    h.cluster.fail_restores(None);
    let r = h.run(restore(fid, 0, u64::MAX)).await.unwrap();
    assert_eq!(r, MdtReply::Progress { done: true });
    assert_eq!(h.mdt.stats().hsm_restores_started, 2);
    // An object gone from the store answers the mover's error.
    let gone = import_one(&h, entry("gone", "missing", 10)).await;
    assert_eq!(errno(h.run(restore(gone, 0, 10)).await), Errno::NoEnt);
    // A lost archive copy: EIO at once.
    h.run(set_flags(gone, HSM_LOST, 0)).await.unwrap();
    assert_eq!(errno(h.run(restore(gone, 0, 10)).await), Errno::Io);
    assert_eq!(errno(h.run(restore(gone, 10, 5)).await), Errno::Inval);
}

#[tokio::test]
async fn a_restore_is_durable_and_outlives_its_reader() {
    let h = H::with(hsm_opts(MIB, 1), 4).await;
    h.cluster.set_restore_delay(Duration::from_millis(5));
    let fid = released_file(&h, "f", 4 * MIB).await;
    // The reader gives up at once; the job goes on.
    let r = tokio::time::timeout(Duration::from_millis(1), h.run(restore(fid, 0, u64::MAX))).await;
    assert!(r.is_err(), "the reader gave up");
    let mdt = h.mdt.clone();
    wait_for(|| mdt.stats().hsm_restores_done == 1).await;
    drop(mdt);
    let h = h.reopen().await;
    let a = h.getattr(fid).await.unwrap();
    assert_eq!(
        a.hsm_flags,
        HSM_EXISTS | HSM_ARCHIVED,
        "durable across a restart"
    );
}

#[tokio::test]
async fn files_not_released_or_empty_are_done_at_once() {
    let h = H::new().await;
    let local = h.create(Fid::ROOT, "local").await;
    let r = h.run(restore(local, 0, u64::MAX)).await.unwrap();
    assert_eq!(r, MdtReply::Progress { done: true });
    h.cluster.put_object(REPO, "empty", Vec::new());
    let empty = import_one(&h, entry("empty", "empty", 0)).await;
    let r = h.run(restore(empty, 0, u64::MAX)).await.unwrap();
    assert_eq!(r, MdtReply::Progress { done: true });
    assert_eq!(h.getattr(empty).await.unwrap().hsm_flags & HSM_RELEASED, 0);
    assert!(h.cluster.restore_chunks().is_empty());
    let missing = Fid {
        seq: local.seq,
        oid: 999,
        ver: 0,
    };
    assert_eq!(errno(h.run(restore(missing, 0, 1)).await), Errno::Stale);
}

#[tokio::test]
async fn shutdown_does_not_wait_for_restores() {
    let h = H::with(hsm_opts(MIB, 1), 4).await;
    h.cluster.set_restore_delay(Duration::from_secs(600));
    let fid = released_file(&h, "f", 2 * MIB).await;
    let mdt = h.mdt.clone();
    let reader = tokio::spawn(async move { mdt.execute(1, restore(fid, 0, u64::MAX)).await });
    let cluster = h.cluster.clone();
    wait_for(|| !cluster.restore_chunks().is_empty()).await;
    tokio::time::timeout(Duration::from_secs(10), h.mdt.shutdown())
        .await
        .expect("shutdown did not hang");
    assert_eq!(errno(reader.await.unwrap()), Errno::Io);
    // Still released after a restart: a later read restores it.
    h.cluster.set_restore_delay(Duration::ZERO);
    let h = h.reopen().await;
    assert_ne!(h.getattr(fid).await.unwrap().hsm_flags & HSM_RELEASED, 0);
    let r = h.run(restore(fid, 0, u64::MAX)).await.unwrap();
    assert_eq!(r, MdtReply::Progress { done: true });
}

#[tokio::test]
async fn a_reimport_during_a_restore_restarts_it_against_the_new_object() {
    let h = H::with(hsm_opts(MIB, 1), 4).await;
    h.mdt.start_background();
    h.cluster.set_restore_delay(Duration::from_millis(20));
    let fid = released_file(&h, "f", 2 * MIB).await;
    let mdt = h.mdt.clone();
    let reader = tokio::spawn(async move { mdt.execute(1, restore(fid, 0, u64::MAX)).await });
    let cluster = h.cluster.clone();
    wait_for(|| !cluster.restore_chunks().is_empty()).await;
    let mut newer = entry("f", "f", 3 * MIB);
    newer.archive.etag = Some("e2".into());
    h.cluster.put_object(REPO, "f", vec![1; 3 * MIB as usize]);
    assert_eq!(
        import(&h, Fid::ROOT, vec![newer]).await,
        [ImportOutcome::Updated(fid)]
    );
    assert_eq!(
        reader.await.unwrap().unwrap(),
        MdtReply::Progress { done: true }
    );
    let chunks = h.cluster.restore_chunks();
    let last = chunks.last().unwrap();
    assert_eq!(last.archive.etag.as_deref(), Some("e2"));
    assert_eq!(h.getattr(fid).await.unwrap().hsm_flags & HSM_RELEASED, 0);
}

/// An MDT with `budget(max_units, max_bytes)` and a mover taking `delay` per chunk, with
/// `files` released files of `size` bytes, each restored whole at once from a connection
/// of its own: the MDT, and the most chunks that were copied at once.
async fn peak_of(
    max_units: usize,
    max_bytes: u64,
    delay: Duration,
    files: usize,
    size: u64,
) -> (H, usize) {
    let h = H::with(budget(max_units, max_bytes), 4).await;
    h.cluster.set_restore_delay(delay);
    let mut set = tokio::task::JoinSet::new();
    for i in 0..files {
        let fid = released_file(&h, &format!("f{i}"), size).await;
        let mdt = h.mdt.clone();
        set.spawn(async move { mdt.execute(10 + i as u64, restore(fid, 0, u64::MAX)).await });
    }
    while let Some(r) = set.join_next().await {
        assert_eq!(r.unwrap().unwrap(), MdtReply::Progress { done: true });
    }
    let peak = h.cluster.restores_peak();
    (h, peak)
}

fn budget(max_units: usize, max_bytes: u64) -> MdtOptions {
    MdtOptions {
        hsm: HsmConfig {
            unit: MIB,
            in_flight: 4,
            max_units,
            max_bytes,
        },
        ..opts()
    }
}

#[tokio::test]
async fn small_files_load_many_at_once_where_few_large_units_fit() {
    // A store answers each GET after tens of milliseconds whatever its size: small files
    // must not queue behind a count of units sized for large ones.
    let (_, peak) = peak_of(64, 4 * MIB, Duration::from_millis(100), 24, 64 << 10).await;
    assert!(peak > 8, "small files loaded {peak} at a time");

    // Whole 1 MiB units: 4 MiB of budget holds four.
    let (h, peak) = peak_of(64, 4 * MIB, Duration::from_millis(20), 4, 4 * MIB).await;
    assert_eq!(h.cluster.restore_chunks().len(), 16);
    assert!(
        (2..=4).contains(&peak),
        "{peak} units of 1 MiB at once in a 4 MiB budget"
    );

    // And the count of units bounds small ones.
    let (_, peak) = peak_of(3, 4 * MIB, Duration::from_millis(20), 8, 1000).await;
    assert!((1..=3).contains(&peak));
}

#[tokio::test]
async fn the_action_of_a_file_being_restored_is_a_restore_with_the_bytes_moved() {
    let h = H::with(hsm_opts(MIB, 1), 4).await;
    // One unit at a time, each 200 ms: the whole file takes 1.6 s after the first.
    h.cluster.set_restore_delay(Duration::from_millis(200));
    let fid = released_file(&h, "big", 8 * MIB).await;
    let action = |fid| MdtRequest::HsmAction { fid };
    assert_eq!(
        h.run(action(fid)).await.unwrap(),
        MdtReply::HsmAction(None),
        "no restore asked yet"
    );
    // A range in the middle is answered once loaded; the rest of the file goes on.
    let r = h.run(restore(fid, 5 * MIB, 5 * MIB + 1)).await.unwrap();
    assert_eq!(r, MdtReply::Progress { done: false });
    let MdtReply::HsmAction(Some(a)) = h.run(action(fid)).await.unwrap() else {
        panic!("no action while the restore runs");
    };
    assert_eq!(a.action, weft_proto::hsm::HsmActionKind::Restore);
    assert_eq!(a.size, Some(8 * MIB));
    assert!(
        a.bytes_done >= MIB && a.bytes_done < 8 * MIB,
        "{} bytes moved",
        a.bytes_done
    );
    let r = h.run(restore(fid, 0, u64::MAX)).await.unwrap();
    assert_eq!(r, MdtReply::Progress { done: true });
    assert_eq!(h.run(action(fid)).await.unwrap(), MdtReply::HsmAction(None));
}
