//! Tiering end to end: a file system of two small OSTs (tmpfs) linked to an S3 bucket
//! (s3s-fs) holding a dataset half again as large as the file system; a reader streams
//! every file through a FUSE mount (each first read a lazy load) while `weft repo
//! tiering` releases least recently used files. Usage of every OST, sampled every few
//! milliseconds, never passes the high mark by more than one restore unit (one file
//! here: each is smaller than the MDT's 32 MiB unit), and every byte read is the
//! object's. `weft df` and `weft repo show` show the released bytes. The same with the
//! linked directory on MDT1 in an MDS process of its own: its restores wait for room that
//! the agent of MDT0's process makes for them, or stop waiting when it finds nothing to
//! release.
//!
//! `WEFT_TIERING_FULL=1` scales it up (bigger OSTs and dataset) for a run by hand.

use crate::repo_s3::{BUCKET, LIMIT, PREFIX, bucket, hsm_state, link};
use crate::support::weft_env;
use bytes::Bytes;
use object_store::ObjectStoreExt;
use object_store::path::Path as StorePath;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use weft_proto::hsm::TieringPolicy;
use weft_testkit::{S3Server, TestCluster, pattern};

const OSTS: u32 = 2;
const HIGH: u8 = 75;
const LOW: u8 = 45;

/// (OST bytes, file bytes, files).
fn geometry() -> (u64, usize, usize) {
    if std::env::var_os("WEFT_TIERING_FULL").is_some() {
        (256 << 20, (24 << 20) + 17, 32)
    } else {
        (24 << 20, (3 << 20) + 1_234, 24)
    }
}

fn key(i: usize) -> String {
    format!("{PREFIX}/set/f{i:03}")
}

/// The highest usage each OST reached while the sampler ran.
async fn sample(tc_client: Arc<weft_client::Cluster>, stop: Arc<AtomicBool>) -> Vec<(u64, u64)> {
    let mut max = vec![(0u64, 0u64); OSTS as usize];
    while !stop.load(Ordering::Relaxed) {
        for (i, m) in max.iter_mut().enumerate() {
            if let Some(u) = weft_repo::tiering::usage(&tc_client, i as u32).await {
                *m = (m.0.max(u.used), u.total);
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    max
}

/// A file system of [`OSTS`] small OSTs linked to a bucket holding a dataset larger than
/// it, imported, with tiering on.
struct Tiered {
    tc: TestCluster,
    a: crate::fuse_common::FuseMount,
    dir: String,
    env: Vec<(String, String)>,
    cluster: Arc<weft_client::Cluster>,
    _server: S3Server,
}

/// [`Tiered`] with the linked directory on MDT `mdt` (other than 0: an MDS process of its
/// own, whose data mover's room gate is not in the agent's process) and files used within
/// `min_age` (as `--min-age` takes it) kept.
async fn tiered(mdt: u32, min_age: &str) -> Tiered {
    let (ost_bytes, file, files) = geometry();
    let server = S3Server::start_s3s_fs().unwrap();
    server.create_bucket(BUCKET).unwrap();
    let store = bucket(&server);
    for i in 0..files {
        let body = Bytes::from(pattern(0, file, i as u64));
        store
            .put(&StorePath::from(key(i)), body.into())
            .await
            .unwrap();
    }
    let env = server.env();
    let mut tc =
        TestCluster::start_with_ost_size_and_env(crate::bin(), OSTS, ost_bytes, env.clone())
            .await
            .unwrap();
    if mdt != 0 {
        tc.add_mds(mdt).await.unwrap();
        let fs_dir = format!("{}:/{}/data", tc.mgs_addr, weft_testkit::FSNAME);
        let index = mdt.to_string();
        let (ok, out, err) = weft_env(&["mkdir", "-i", &index, &fs_dir], &env, LIMIT);
        assert!(ok, "{out}{err}");
    }
    let (tc, a, dir) = link(&server, tc);
    let (ok, out, err) = weft_env(&["repo", "import", &dir], &env, LIMIT);
    assert!(ok, "{out}{err}");
    let (high, low) = (format!("{HIGH}%"), format!("{LOW}%"));
    let (ok, out, err) = weft_env(
        &[
            "repo",
            "tiering",
            &dir,
            "--high",
            &high,
            "--low",
            &low,
            "--min-age",
            min_age,
        ],
        &env,
        LIMIT,
    );
    assert!(ok, "{out}{err}");
    assert!(out.contains("high 75% low 45% min-age"), "{out}");

    let cluster = tc.client().await.unwrap();
    let mut total = 0;
    for i in 0..OSTS {
        total += weft_repo::tiering::usage(&cluster, i).await.unwrap().total;
    }
    let dataset = (file * files) as u64;
    assert!(
        dataset > total,
        "the dataset ({dataset}) is larger than the OSTs ({total})"
    );
    Tiered {
        tc,
        a,
        dir,
        env,
        cluster,
        _server: server,
    }
}

/// Streams every file of `t` through its mount while a sampler watches the OSTs: every
/// byte is the object's, no file is restored ahead, and no OST passes the high mark by
/// more than one restore unit.
async fn stream(t: &Tiered) {
    let (ost_bytes, file, files) = geometry();
    let dataset = (file * files) as u64;
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = tokio::spawn(sample(t.cluster.clone(), stop.clone()));
    let started = Instant::now();
    let root = t.a.path("data/set");
    let read = tokio::task::spawn_blocking(move || {
        for i in 0..files {
            let got = std::fs::read(root.join(format!("f{i:03}"))).unwrap();
            assert!(
                got == pattern(0, file, i as u64),
                "file {i}: the object's bytes"
            );
        }
    });
    read.await.unwrap();
    let took = started.elapsed();
    // Files of a repository with tiering are not restored ahead (no room to spare).
    let ahead = crate::fuse_client_params::statahead_figures(&t.a.mnt)["restores_ahead"];
    assert_eq!(ahead, 0, "files restored ahead under tiering");
    stop.store(true, Ordering::Relaxed);
    let max = sampler.await.unwrap();
    eprintln!(
        "tiering: {files} files of {file} bytes ({dataset} bytes) read through {OSTS} OSTs of \
         {ost_bytes} bytes in {took:?}; highest usage {max:?}"
    );
    // The bound: the high mark plus one restore unit (a whole file here).
    for (i, (used, total)) in max.iter().enumerate() {
        let high = TieringPolicy::mark(*total, HIGH);
        assert!(
            *used <= high + file as u64,
            "OST{i} reached {used} bytes, past the high mark {high} by more than one unit ({file})"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiering_keeps_osts_under_the_high_mark_while_a_reader_streams_a_larger_dataset() {
    let (_, file, files) = geometry();
    let t = tiered(0, "0").await;
    stream(&t).await;
    let (env, a, dir) = (&t.env, &t.a, &t.dir);

    // Released bytes: in `repo show` and `weft df`, from the MDT's counts, which agree
    // with the files' states (counted before and after: tiering may still be releasing).
    let paths: Vec<String> = (0..files)
        .map(|i| a.path(&format!("data/set/f{i:03}")).display().to_string())
        .collect();
    let count_released = || {
        let mut args = vec!["hsm_state"];
        args.extend(paths.iter().map(String::as_str));
        let (ok, out, err) = weft_env(&args, env, LIMIT);
        assert!(ok, "{out}{err}");
        out.lines().filter(|l| l.contains("released")).count() as u64
    };
    let before = count_released();
    let (ok, out, err) = weft_env(&["repo", "show", dir], env, LIMIT);
    assert!(ok, "{out}{err}");
    let line = out.lines().find(|l| l.starts_with("released:")).unwrap();
    let released: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(released > 0 && released < files as u64, "{out}");
    let after = count_released();
    assert!(
        (before..=after).contains(&released),
        "repo show counts {released} released files, their states {before} then {after}"
    );
    assert!(
        out.contains("tiering:         high 75% low 45% min-age 0s"),
        "{out}"
    );
    let (ok, out, err) = weft_env(&["df", dir], env, LIMIT);
    assert!(ok, "{out}{err}");
    let line = out.lines().find(|l| l.starts_with("released:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(kib >= released * file as u64 / 1024, "{out}");
    // The first file was released (least recently used) and loads again.
    let first = a.path("data/set/f000");
    assert!(hsm_state(&first.display().to_string(), env).contains("released"));
    assert!(std::fs::read(&first).unwrap() == pattern(0, file, 0));

    let (ok, out, err) = weft_env(&["repo", "tiering", dir, "--off"], env, LIMIT);
    assert!(ok && out.contains("tiering off"), "{out}{err}");
}

/// MDT1's restores waited for room (`mover.room_waits`) and none gave the wait up (the
/// gate's warning in MDS1's log; `what` says what that would mean).
fn waited_without_giving_up(t: &mut Tiered, what: &str) {
    let mgs = t.tc.mgs_addr.clone();
    let (ok, out, err) = weft_env(
        &[
            "get_param",
            "--mgs",
            &mgs,
            "-n",
            "mdt.*-MDT0001.mover.room_waits",
        ],
        &t.env,
        LIMIT,
    );
    assert!(ok, "{out}{err}");
    let waits: u64 = out.trim().parse().unwrap_or_else(|_| panic!("{out}"));
    assert!(waits > 0, "MDT1's restores never waited for room: {out}");
    let log = t.tc.mds_process(1).unwrap().log();
    assert!(
        !log.contains("no room under the tiering high mark in time"),
        "a restore of MDT1 {what}:\n{log}"
    );
}

/// The linked directory on MDT1, served by an MDS process of its own: its restores' room
/// gate is not in the process of the agent (MDT0's), and tells it what it waits for.
/// Restores there wait for room and get it from the agent's releases, never by giving up
/// the wait (which would take [`weft_repo::tiering::GATE_WAIT`] each time and pass the
/// high mark).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiering_releases_for_restores_of_another_mds_process() {
    let mut t = tiered(1, "0").await;
    stream(&t).await;
    waited_without_giving_up(&mut t, "gave up waiting for room");
}

/// As above with nothing to release (every file younger than the minimum age): the agent
/// finds nothing, says so in its answer, and MDT1's restores stop waiting for room at once
/// (an OST then passes the high mark, as without tiering) instead of each waiting for
/// [`weft_repo::tiering::GATE_WAIT`].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restores_of_another_mds_process_stop_waiting_when_nothing_can_be_released() {
    let (_, file, files) = geometry();
    let mut t = tiered(1, "1d").await;
    // Read until an OST is past its high mark (short of full: each file lands on one OST).
    let mut over = false;
    for i in 0..files {
        let got = std::fs::read(t.a.path(&format!("data/set/f{i:03}"))).unwrap();
        assert!(got == pattern(0, file, i as u64), "file {i}");
        for o in 0..OSTS {
            let u = weft_repo::tiering::usage(&t.cluster, o).await.unwrap();
            over |= u.used > TieringPolicy::mark(u.total, HIGH);
        }
        if over {
            break;
        }
    }
    assert!(over, "no OST passed its high mark");
    waited_without_giving_up(
        &mut t,
        "waited out the gate instead of hearing that nothing can be released",
    );
}

#[test]
fn tiering_marks_are_refused_when_wrong() {
    // No cluster needed: the marks are checked before anything is reached.
    let env: Vec<(String, String)> = Vec::new();
    for args in [
        vec![
            "repo", "tiering", "/nowhere", "--high", "60%", "--low", "70%",
        ],
        vec![
            "repo", "tiering", "/nowhere", "--high", "160%", "--low", "70%",
        ],
        vec!["repo", "tiering", "/nowhere", "--high", "80%"],
        vec!["repo", "tiering", "/nowhere", "--off", "--high", "80%"],
        vec![
            "repo",
            "tiering",
            "/nowhere",
            "--high",
            "80",
            "--low",
            "60",
            "--min-age",
            "1y",
        ],
    ] {
        let (ok, out, err) = weft_env(&args, &env, LIMIT);
        assert!(!ok, "{args:?} succeeded: {out}");
        assert!(!err.is_empty(), "{args:?}: no error said");
    }
}
