//! Durability, restarts, orphans, the destroy log, group commit and FID sequences.

use super::harness::{H, errno, opts, root};
use crate::{Mdt, MdtError, MdtOptions};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;
use weft_proto::mdt::{AccessMode, MdtReply, MdtRequest, OpenFlags, XattrMode};
use weft_proto::{Errno, Fid, LayoutTemplate};

#[tokio::test]
async fn everything_survives_a_restart() {
    let h = H::new().await;
    let uuid = h.mdt.uuid();
    let d = h.mkdir(Fid::ROOT, "d").await;
    let f = h.create(d, "f").await;
    let x = MdtRequest::SetXattr {
        fid: f,
        name: "user.k".into(),
        value: b"v".to_vec(),
        mode: XattrMode::Create,
        cred: root(),
    };
    h.run(x).await.unwrap();
    let h = h.reopen().await;
    assert_eq!(h.mdt.uuid(), uuid);
    assert_eq!(h.lookup(Fid::ROOT, "d").await.unwrap().fid, d);
    assert_eq!(h.lookup(d, "f").await.unwrap().fid, f);
    let get = MdtRequest::GetXattr {
        fid: f,
        name: "user.k".into(),
        cred: root(),
    };
    assert_eq!(h.run(get).await.unwrap(), MdtReply::Xattr(b"v".to_vec()));
    assert_eq!((h.mdt.stats().dirs, h.mdt.stats().files), (2, 1));
    // New FIDs never repeat old ones.
    let g = h.create(d, "g").await;
    assert_ne!(g, f);
}

#[tokio::test]
async fn a_directory_of_another_file_system_or_index_is_refused() {
    let h = H::new().await;
    h.mdt.shutdown().await;
    let (dir, cluster) = (h.dir.path().to_path_buf(), h.cluster.clone());
    drop(h.mdt);
    let other = MdtOptions {
        fsname: "other".into(),
        ..opts()
    };
    assert!(matches!(
        Mdt::open(&dir, other, cluster.clone()),
        Err(MdtError::WrongFsname { .. })
    ));
    let idx = MdtOptions { index: 3, ..opts() };
    assert!(matches!(
        Mdt::open(&dir, idx, cluster.clone()),
        Err(MdtError::WrongIndex { .. })
    ));
    assert!(Mdt::open(&dir, opts(), cluster).is_ok());
}

/// One server at a time: a second open of a served MDT is `Busy` (what a failover MDS
/// waits on), and succeeds once the first is closed.
#[tokio::test]
async fn a_served_mdt_is_busy_for_a_second_server() {
    let h = H::new().await;
    let (dir, cluster) = (h.dir.path().to_path_buf(), h.cluster.clone());
    assert!(matches!(
        Mdt::open(&dir, opts(), cluster.clone()),
        Err(MdtError::Busy { .. })
    ));
    h.mdt.shutdown().await;
    drop(h.mdt);
    assert!(Mdt::open(&dir, opts(), cluster).is_ok());
}

#[tokio::test]
async fn non_zero_mdts_have_no_root() {
    let h = H::with(MdtOptions { index: 1, ..opts() }, 2).await;
    assert_eq!(errno(h.getattr(Fid::ROOT).await), Errno::Stale);
}

#[tokio::test]
async fn unlinked_open_file_stays_readable_until_close() {
    let h = H::new().await;
    h.mdt.start_background();
    let (f, handle) = h
        .create_open(5, Fid::ROOT, "f", Some(LayoutTemplate::raid0(2, 0, -1)))
        .await;
    h.unlink_as(Fid::ROOT, "f", &root()).await.unwrap();
    assert_eq!(errno(h.lookup(Fid::ROOT, "f").await), Errno::NoEnt);
    let a = h.getattr(f).await.unwrap();
    assert_eq!((a.nlink, a.open_count), (0, 1));
    assert_eq!(h.mdt.stats().orphans, 1);
    assert!(matches!(
        h.run(MdtRequest::GetLayout { fid: f }).await.unwrap(),
        MdtReply::Layout(Some(_))
    ));
    assert!(h.cluster.destroyed().is_empty());
    h.run_on(
        5,
        MdtRequest::Close {
            handle,
            size: Some(10),
            blocks: None,
            modified: true,
        },
    )
    .await
    .unwrap();
    assert_eq!(errno(h.getattr(f).await), Errno::Stale);
    h.wait_destroys().await;
    let destroyed = h.cluster.destroyed();
    assert_eq!(destroyed.len(), 2);
    assert!(destroyed.iter().all(|(_, o)| o.fid == f));
    assert_eq!(h.mdt.stats().orphans, 0);
    h.mdt.shutdown().await;
}

/// Opens and closes that skip the commit thread race unlinks correctly: an open that
/// succeeded keeps its inode alive (an orphan) until it closes, its close destroys it, and
/// an open that lost the race fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fast_opens_racing_unlinks_keep_what_they_opened() {
    let h = Arc::new(H::new().await);
    h.mdt.start_background();
    let (mut opened, mut refused) = (0, 0);
    for i in 0..200 {
        let name = format!("f{i}");
        let f = h.create(Fid::ROOT, &name).await;
        let (h1, h2) = (h.clone(), h.clone());
        let open = tokio::spawn(async move {
            let flags = OpenFlags {
                access: AccessMode::Read,
                truncate: false,
            };
            let req = MdtRequest::Open {
                fid: f,
                flags,
                cred: root(),
            };
            h1.run_on(9, req).await
        });
        let unlink = tokio::spawn(async move { h2.unlink_as(Fid::ROOT, &name, &root()).await });
        unlink.await.unwrap().unwrap();
        match open.await.unwrap() {
            Ok(MdtReply::Opened { handle, .. }) => {
                opened += 1;
                let a = h.getattr(f).await.unwrap();
                assert_eq!((a.nlink, a.open_count), (0, 1), "open {i} keeps its inode");
                let close = MdtRequest::Close {
                    handle,
                    size: None,
                    blocks: None,
                    modified: false,
                };
                h.run_on(9, close).await.unwrap();
                assert_eq!(errno(h.getattr(f).await), Errno::Stale, "closed {i}");
            }
            Ok(other) => panic!("open replied {other:?}"),
            Err(e) => {
                assert_eq!(e.errno, Errno::Stale, "open {i}: {e}");
                refused += 1;
            }
        }
    }
    assert_eq!(opened + refused, 200);
    assert!(opened > 0, "some opens came first");
    assert!(
        h.mdt.stats().fast_ops > 0,
        "some opens skipped the commit thread"
    );
    assert_eq!(h.mdt.stats().orphans, 0);
    assert_eq!(h.mdt.stats().open_handles, 0);
    h.mdt.shutdown().await;
}

/// Open replay: after a restart, an orphan of the previous run is kept for the grace
/// period; a client that opens it again keeps it (and its old handle id is refused, never
/// taken for another file), the others are destroyed when the grace period ends.
#[tokio::test]
async fn orphans_of_a_previous_run_wait_for_their_clients_then_go() {
    let h = H::with(
        MdtOptions {
            handle_grace: Duration::from_millis(300),
            ..opts()
        },
        4,
    )
    .await;
    let (kept, old_handle) = h.create_open(5, Fid::ROOT, "kept", None).await;
    let (lost, _) = h.create_open(5, Fid::ROOT, "lost", None).await;
    h.unlink_as(Fid::ROOT, "kept", &root()).await.unwrap();
    h.unlink_as(Fid::ROOT, "lost", &root()).await.unwrap();
    let h = h.reopen().await;
    assert_eq!(h.mdt.stats().orphans, 2);
    h.mdt.start_background();
    // The client finds its handle gone and opens the file again by FID.
    let close_old = MdtRequest::Close {
        handle: old_handle,
        size: None,
        blocks: None,
        modified: false,
    };
    assert_eq!(errno(h.run_on(5, close_old).await), Errno::BadF);
    let reopen = MdtRequest::Open {
        fid: kept,
        flags: OpenFlags {
            access: AccessMode::ReadWrite,
            truncate: false,
        },
        cred: root(),
    };
    let handle = match h.run_on(5, reopen).await.unwrap() {
        MdtReply::Opened { handle, .. } => handle,
        other => panic!("open replied {other:?}"),
    };
    assert_ne!(handle, old_handle, "handle ids of two runs never meet");
    for _ in 0..200 {
        if h.mdt.stats().orphans == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(h.mdt.stats().orphans, 1, "the unopened orphan is reaped");
    assert_eq!(errno(h.getattr(lost).await), Errno::Stale);
    assert_eq!(h.getattr(kept).await.unwrap().nlink, 0);
    // The last close of the reopened orphan destroys it.
    let close = MdtRequest::Close {
        handle,
        size: None,
        blocks: None,
        modified: false,
    };
    h.run_on(5, close).await.unwrap();
    assert_eq!(errno(h.getattr(kept).await), Errno::Stale);
    assert_eq!(h.mdt.stats().orphans, 0);
    h.wait_destroys().await;
    h.mdt.shutdown().await;
}

#[tokio::test]
async fn destroy_log_survives_restart_and_ost_outage() {
    let h = H::new().await;
    for i in 0..4 {
        h.cluster.set_down(i, true);
    }
    h.mdt.start_background();
    let want = created_with_objects(&h, "f").await;
    h.unlink_as(Fid::ROOT, "f", &root()).await.unwrap();
    for _ in 0..200 {
        if h.cluster.failed_destroys() >= 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert!(
        h.cluster.failed_destroys() >= 2,
        "destroys should be retried"
    );
    assert_eq!(h.mdt.stats().pending_destroys, 1);
    let h = h.reopen().await;
    assert_eq!(h.mdt.stats().pending_destroys, 1);
    for i in 0..4 {
        h.cluster.set_down(i, false);
    }
    h.mdt.start_background();
    h.wait_destroys().await;
    assert_eq!(h.cluster.destroyed(), want);
    h.mdt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_creates_share_commits() {
    let h = Arc::new(H::new().await);
    h.create(Fid::ROOT, "warm-up").await;
    let mut tasks = Vec::new();
    for i in 0..299 {
        let h = h.clone();
        tasks.push(tokio::spawn(async move {
            h.create(Fid::ROOT, &format!("f{i}")).await
        }));
    }
    let mut fids = HashSet::new();
    for t in tasks {
        fids.insert(t.await.unwrap());
    }
    assert_eq!(fids.len(), 299);
    let stats = h.mdt.stats();
    assert_eq!(stats.files, 300);
    assert!(
        stats.commits < 300,
        "expected batching, got {} commits",
        stats.commits
    );
    assert_eq!(h.list(Fid::ROOT, 1000).await.len(), 300);
}

#[tokio::test]
async fn fid_sequences_roll_over_and_stay_unique_across_restarts() {
    let h = H::with(
        MdtOptions {
            seq_width: 5,
            ..opts()
        },
        1,
    )
    .await;
    let mut fids = HashSet::new();
    for i in 0..12 {
        fids.insert(h.create(Fid::ROOT, &format!("a{i}")).await);
    }
    let grants = h.cluster.seq_grants();
    assert!(grants >= 3, "{grants} grants");
    let h = h.reopen().await;
    for i in 0..12 {
        fids.insert(h.create(Fid::ROOT, &format!("b{i}")).await);
    }
    assert_eq!(fids.len(), 24);
    assert!(fids.iter().all(|f| f.oid >= 1 && f.oid <= 5));
}

#[tokio::test]
async fn disconnect_closes_handles_and_destroys_orphans() {
    let h = H::new().await;
    h.mdt.start_background();
    let (f, _) = h.create_open(42, Fid::ROOT, "f", None).await;
    h.unlink_as(Fid::ROOT, "f", &root()).await.unwrap();
    h.mdt.disconnect(42);
    for _ in 0..500 {
        if h.getattr(f).await.is_err() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    assert_eq!(errno(h.getattr(f).await), Errno::Stale);
    h.wait_destroys().await;
    assert_eq!(h.cluster.destroyed().len(), 1);
    h.mdt.shutdown().await;
    // After shutdown, writes fail cleanly.
    assert_eq!(
        errno(
            h.run(MdtRequest::Mkdir {
                parent: Fid::ROOT,
                name: "x".into(),
                mode: 0o755,
                cred: root()
            })
            .await
        ),
        Errno::Io
    );
}

#[tokio::test]
async fn destroy_records_removed_without_fsync_stay_removed_after_a_restart() {
    let h = H::new().await;
    h.mdt.start_background();
    for i in 0..3 {
        let name = format!("f{i}");
        h.create(Fid::ROOT, &name).await;
        h.unlink_as(Fid::ROOT, &name, &root()).await.unwrap();
    }
    // The removals are lazy commits: the shutdown makes them durable.
    h.wait_destroys().await;
    let h = h.reopen().await;
    assert_eq!(h.mdt.stats().pending_destroys, 0);
    h.mdt.start_background();
    // A durable commit after lazy ones keeps both.
    h.create(Fid::ROOT, "g").await;
    h.unlink_as(Fid::ROOT, "g", &root()).await.unwrap();
    h.wait_destroys().await;
    h.create(Fid::ROOT, "kept").await;
    let h = h.reopen().await;
    assert_eq!(h.mdt.stats().pending_destroys, 0);
    // Had a removal been lost, the restart would have sent its destroys again.
    let destroyed = h.cluster.destroyed();
    let once: std::collections::HashSet<_> = destroyed.iter().collect();
    assert!(!destroyed.is_empty());
    assert_eq!(once.len(), destroyed.len(), "no object destroyed twice");
    h.lookup(Fid::ROOT, "kept").await.unwrap();
    h.mdt.shutdown().await;
}

/// Until the destroy log is empty (at most `limit`).
async fn drained_within(h: &H, limit: Duration) -> bool {
    let until = std::time::Instant::now() + limit;
    while std::time::Instant::now() < until {
        if h.mdt.stats().pending_destroys == 0 {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

/// Sends requests every 50 ms for `how_long`, or until the destroy log is empty.
async fn keep_busy(h: &H, how_long: Duration) {
    let until = std::time::Instant::now() + how_long;
    while std::time::Instant::now() < until && h.mdt.stats().pending_destroys > 0 {
        h.getattr(Fid::ROOT).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// An MDT whose destroys wait for a `quiet` pause in requests (at most `max_delay`), with
/// one file unlinked durably: the MDT and that file's objects.
async fn unlinked_with_waiting_destroys(
    quiet: Duration,
    max_delay: Duration,
) -> (H, Vec<(u32, weft_proto::ObjectId)>) {
    let mut o = opts();
    o.destroy.quiet = quiet;
    o.destroy.max_delay = max_delay;
    let h = H::with(o, 4).await;
    h.mdt.start_background();
    let objects = created_with_objects(&h, "f").await;
    h.unlink_as(Fid::ROOT, "f", &root()).await.unwrap();
    h.run(MdtRequest::Sync).await.unwrap();
    (h, objects)
}

/// Creates `name` in the root and returns its objects.
async fn created_with_objects(h: &H, name: &str) -> Vec<(u32, weft_proto::ObjectId)> {
    let f = h.create(Fid::ROOT, name).await;
    let MdtReply::Layout(Some(layout)) = h.run(MdtRequest::GetLayout { fid: f }).await.unwrap()
    else {
        panic!("{name} has no layout")
    };
    layout.objects(f).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn destroys_wait_while_requests_keep_coming_then_go() {
    let (h, objects) =
        unlinked_with_waiting_destroys(Duration::from_secs(1), Duration::from_secs(600)).await;
    keep_busy(&h, Duration::from_millis(2500)).await;
    assert!(
        h.cluster.destroyed().is_empty(),
        "destroyed while requests kept coming"
    );
    assert_eq!(h.mdt.stats().pending_destroys, 1);
    // Requests pause: the objects go.
    assert!(drained_within(&h, Duration::from_secs(10)).await);
    assert_eq!(h.cluster.destroyed(), objects);
    h.mdt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn destroys_wait_no_longer_than_max_delay() {
    let (h, objects) =
        unlinked_with_waiting_destroys(Duration::from_secs(1), Duration::from_millis(300)).await;
    // Requests never pause for a second, yet the log drains.
    keep_busy(&h, Duration::from_secs(10)).await;
    assert_eq!(h.mdt.stats().pending_destroys, 0);
    assert_eq!(h.cluster.destroyed(), objects);
    h.mdt.shutdown().await;
}
