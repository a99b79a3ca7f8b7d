//! A store that throttles or fails, end to end (the in-process s3s-fs with fault
//! injection, `weft_testkit::s3_faults`), through a FUSE mount:
//!
//! - Throttled lazy load: the object's GETs answer `503 SlowDown` a few times; the read
//!   succeeds with the object's bytes after the retries (counted at the server).
//! - Persistent throttling: the read fails with EIO in bounded time, the file stays
//!   released (nothing half-loaded is served); once the throttling stops, a read succeeds.
//! - A failed export (every PUT of the object throttled): `weft repo export` fails after
//!   retrying, the file stays DIRTY; the next export succeeds and the store has the data.
//! - A restore held up by stalled GETs: `weft hsm_action` shows `RESTORE running (N bytes
//!   moved)` while it runs and `NOOP` once it is over.

use crate::repo_s3::{BUCKET, LIMIT, PREFIX, bucket, hsm_state, link};
use crate::support::weft_env;
use bytes::Bytes;
use object_store::ObjectStoreExt;
use object_store::path::Path as StorePath;
use std::time::{Duration, Instant};
use weft_testkit::s3_faults::{Fault, Matching};
use weft_testkit::{S3Server, TestCluster, pattern};

/// Two of the mover's 8 MiB ranged GETs.
const SIZE: usize = (12 << 20) + 99;

/// A cluster of two OSTs linked to `server`, a mount, and the bucket imported.
async fn imported(server: &S3Server) -> (TestCluster, crate::fuse_common::FuseMount, String) {
    let env = server.env();
    let tc = TestCluster::start_with_env(crate::bin(), 2, env.clone())
        .await
        .unwrap();
    let (tc, a, dir) = link(server, tc);
    let (ok, out, err) = weft_env(&["repo", "import", &dir], &env, LIMIT);
    assert!(ok, "{out}{err}");
    // Each read below is its file's first: no restores ahead of them.
    let inst = crate::fuse_client_params::instance_of(&a.mnt);
    let set = format!("llite.{inst}.restore_ahead=0");
    let (ok, out, err) = crate::support::weft(&["set_param", &set]);
    assert!(ok, "{out}{err}");
    (tc, a, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttling_store_is_retried_fails_in_bounded_time_and_a_failed_export_stays_dirty() {
    let server = S3Server::start_s3s_fs().unwrap();
    server.create_bucket(BUCKET).unwrap();
    let store = bucket(&server);
    let faults = server.faults().unwrap().clone();
    for name in ["thr.bin", "down.bin", "edit.bin"] {
        let body = Bytes::from(pattern(0, SIZE, name.len() as u64));
        let path = StorePath::from(format!("{PREFIX}/{name}"));
        store.put(&path, body.into()).await.unwrap();
    }
    let env = server.env();
    let (tc, a, dir) = imported(&server).await;

    // Throttled: three SlowDowns, then the load goes through.
    let gets = Matching::path("GET", &format!("/{BUCKET}/{PREFIX}/thr.bin"));
    faults.add(Fault::SlowDown, gets.clone(), Some(3));
    let before = faults.injected();
    let got = std::fs::read(a.path("data/thr.bin")).unwrap();
    assert!(
        got == pattern(0, SIZE, 7),
        "the object's bytes after throttling"
    );
    assert_eq!(faults.injected() - before, 3, "every SlowDown was met");
    let tries = faults.requests_matching(&gets);
    assert!(
        tries >= 3 + 2,
        "{tries} GETs: the throttled ones were retried"
    );

    // Throttled until cleared: EIO in bounded time, still released; then a read succeeds.
    let gets = Matching::path("GET", &format!("/{BUCKET}/{PREFIX}/down.bin"));
    faults.add(Fault::SlowDown, gets.clone(), None);
    let t = Instant::now();
    let r = std::fs::read(a.path("data/down.bin"));
    let took = t.elapsed();
    assert_eq!(
        r.as_ref().err().and_then(|e| e.raw_os_error()),
        Some(libc::EIO),
        "a read of a store that keeps throttling fails with EIO"
    );
    assert!(took < Duration::from_secs(120), "bounded: {took:?}");
    let tries = faults.requests_matching(&gets);
    eprintln!("persistent SlowDown: EIO after {took:?} and {tries} GETs");
    assert!(tries > 1, "retried before giving up: {tries} GETs");
    let down = a.path("data/down.bin").display().to_string();
    assert!(
        hsm_state(&down, &env).contains("released"),
        "nothing marked loaded"
    );
    faults.clear();
    let got = std::fs::read(a.path("data/down.bin")).unwrap();
    assert!(got == pattern(0, SIZE, 8), "a later read loads it");

    // A changed file whose export keeps being throttled stays dirty.
    let path = a.path("data/edit.bin");
    let new = pattern(1, SIZE, 99);
    std::fs::write(&path, &new).unwrap();
    let shown = path.display().to_string();
    // The change reaches the MDT at the FUSE release, which follows close().
    let t = Instant::now();
    while !hsm_state(&shown, &env).contains("dirty") {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the changed file became dirty"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let puts = Matching {
        path_contains: Some(format!("/{BUCKET}/{PREFIX}/edit.bin")),
        method: None,
    };
    faults.add(Fault::SlowDown, puts.clone(), None);
    let before = faults.requests_matching(&puts);
    let (ok, out, err) = weft_env(&["repo", "export", &dir], &env, LIMIT);
    assert!(!ok, "an export into a throttling store fails: {out}{err}");
    let tries = faults.requests_matching(&puts) - before;
    assert!(tries > 1, "the upload was retried: {tries} requests");
    let state = hsm_state(&shown, &env);
    assert!(
        state.contains("dirty") && !state.contains("archived"),
        "{state}"
    );
    faults.clear();
    let (ok, out, err) = weft_env(&["repo", "export", &dir], &env, LIMIT);
    assert!(ok, "{out}{err}");
    let state = hsm_state(&shown, &env);
    assert!(
        state.contains("archived") && !state.contains("dirty"),
        "{state}"
    );
    let stored = store
        .get(&StorePath::from(format!("{PREFIX}/edit.bin")))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert!(stored == new, "the store has the new data");
    drop((a, tc));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_and_reset_requests_are_retried_by_the_mover() {
    let server = S3Server::start_s3s_fs().unwrap();
    server.create_bucket(BUCKET).unwrap();
    let store = bucket(&server);
    let faults = server.faults().unwrap().clone();
    let body = Bytes::from(pattern(0, SIZE, 3));
    store
        .put(
            &StorePath::from(format!("{PREFIX}/r.bin")),
            body.clone().into(),
        )
        .await
        .unwrap();
    let (tc, a, _) = imported(&server).await;
    let gets = Matching::path("GET", &format!("/{BUCKET}/{PREFIX}/r.bin"));
    faults.add(Fault::Reset, gets.clone(), Some(2));
    faults.add(
        Fault::Stall(Duration::from_millis(500)),
        gets.clone(),
        Some(1),
    );
    let got = std::fs::read(a.path("data/r.bin")).unwrap();
    assert!(got == body, "the object's bytes after resets and a stall");
    assert!(
        faults.requests_matching(&gets) >= 2 + 2,
        "the reset GETs were retried"
    );
    drop((a, tc));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hsm_action_shows_a_restore_while_it_runs_and_noop_after() {
    let server = S3Server::start_s3s_fs().unwrap();
    server.create_bucket(BUCKET).unwrap();
    let store = bucket(&server);
    let faults = server.faults().unwrap().clone();
    let body = Bytes::from(pattern(0, SIZE, 5));
    store
        .put(
            &StorePath::from(format!("{PREFIX}/slow.bin")),
            body.clone().into(),
        )
        .await
        .unwrap();
    let env = server.env();
    let (tc, a, _) = imported(&server).await;
    let file = a.path("data/slow.bin");
    let shown = file.to_string_lossy().into_owned();
    let action = || {
        let (ok, out, err) = weft_env(&["hsm_action", &shown], &env, LIMIT);
        assert!(ok, "hsm_action: {out}{err}");
        out
    };
    assert_eq!(action(), format!("{shown}: NOOP\n"), "nothing asked yet");
    // Both of the file's GETs wait 3 s: the restore runs while the read waits for it.
    let gets = Matching::path("GET", &format!("/{BUCKET}/{PREFIX}/slow.bin"));
    faults.add(Fault::Stall(Duration::from_secs(3)), gets, Some(2));
    let reader = std::thread::spawn({
        let file = file.clone();
        move || std::fs::read(file)
    });
    let mut seen = String::new();
    weft_testkit::wait_until("hsm_action shows the restore", || {
        seen = action();
        seen.contains("RESTORE running")
    });
    let moved = seen
        .strip_prefix(&format!("{shown}: RESTORE running ("))
        .and_then(|r| r.strip_suffix(" bytes moved)\n"))
        .and_then(|n| n.parse::<u64>().ok());
    assert!(
        moved.is_some_and(|n| n <= SIZE as u64),
        "lfs hsm_action's shape: {seen:?}"
    );
    let got = reader.join().unwrap().unwrap();
    assert!(got == body, "the object's bytes");
    assert_eq!(action(), format!("{shown}: NOOP\n"), "the restore is over");
    drop((a, tc));
}
