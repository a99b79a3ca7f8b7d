//! The `weft` command line: `weft up` end to end, and clear failures on bad flags, busy
//! ports, unreachable MGS and data directories of another file system.

use crate::bin;
use crate::support::weft_run;

use std::time::{Duration, Instant};
use weft_client::{Cluster, ClusterOptions};
use weft_proto::mdt::{Credentials, NewFile};
use weft_proto::{Fid, LayoutTemplate};
use weft_testkit::{ServerProcess, free_port};

/// Runs `weft args...` to completion (bounded by 60 s) and returns (exit code, stderr).
fn run(args: &[&str]) -> (i32, String) {
    let out = weft_run(args, "");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn connect(addr: &str, fsname: &str) -> std::sync::Arc<Cluster> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match Cluster::connect(addr, fsname, ClusterOptions::default()).await {
            Ok(c) if c.config().targets.len() >= 5 => return c,
            _ if Instant::now() > deadline => panic!("weft up did not come up at {addr}"),
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weft_up_serves_stops_on_sigterm_and_reopens_the_same_file_system() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("weft-data");
    let addr = format!("127.0.0.1:{}", free_port().unwrap());
    let args = vec![
        "up".to_string(),
        "--data".into(),
        data.display().to_string(),
        "--listen".into(),
        addr.clone(),
        "--no-mount".into(),
    ];
    let mut up =
        ServerProcess::start("up", bin(), args.clone(), dir.path().join("up.log")).unwrap();
    let client = connect(&addr, "weft").await;
    let cred = Credentials::root();
    let mdt = client.mdt(0).unwrap();
    // The MDT places files on every OST from its first create: it polls with the
    // configuration its own process's OSTs registered in, not the one it connected with.
    let every_ost = LayoutTemplate::raid0(-1, 1 << 20, -1);
    let first = mdt
        .create(
            &NewFile::exclusive(Fid::ROOT, b"wide", 0o100644).with_layout(&every_ost),
            &cred,
        )
        .await
        .unwrap();
    let mut osts: Vec<u32> = first
        .layout
        .unwrap()
        .objects(first.attr.fid)
        .map(|(ost, _)| ost)
        .collect();
    osts.sort_unstable();
    assert_eq!(osts, [0, 1, 2, 3], "{}", up.log());
    mdt.mkdir(Fid::ROOT, b"persisted", 0o700, &cred)
        .await
        .unwrap();
    let status = up.stop().unwrap();
    assert!(
        status.success(),
        "weft up exited with {status}: {}",
        up.log()
    );
    assert!(up.log().contains("stopped"));

    up.restart().unwrap();
    let client = connect(&addr, "weft").await;
    let attr = client
        .mdt(0)
        .unwrap()
        .lookup(Fid::ROOT, b"persisted", &cred)
        .await
        .unwrap();
    assert_eq!(attr.mode & 0o7777, 0o700);
    assert_eq!(
        client.config().targets.len(),
        5,
        "1 MDT + 4 OSTs, registered once each"
    );
    up.stop().unwrap();

    // The same data directory under another file system name is refused.
    let (code, err) = run(&[
        "up",
        "--data",
        &data.display().to_string(),
        "--listen",
        &addr,
        "--fsname",
        "other",
    ]);
    assert_ne!(code, 0);
    assert!(
        err.contains("weft") && err.contains("other"),
        "unclear message: {err}"
    );
}

#[test]
fn bad_flags_are_refused_with_usage() {
    let (code, err) = run(&[
        "mds",
        "--mgs",
        "nonsense",
        "--listen",
        "127.0.0.1:1",
        "--mdt",
        "0=/tmp/x",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("HOST:PORT"), "{err}");
    let (code, err) = run(&[
        "oss",
        "--mgs",
        "127.0.0.1:1",
        "--listen",
        "127.0.0.1:1",
        "--ost",
        "zero=/tmp/x",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("target index"), "{err}");
    let (code, _) = run(&["up", "--osts", "0"]);
    assert_eq!(code, 2);
}

#[test]
fn an_unreachable_mgs_is_retried_then_reported() {
    let dir = tempfile::tempdir().unwrap();
    let dead = format!("127.0.0.1:{}", free_port().unwrap());
    let mdt = format!("0={}", dir.path().join("mdt0").display());
    let (code, err) = run(&[
        "mds",
        "--mgs",
        &dead,
        "--listen",
        "127.0.0.1:0",
        "--mdt",
        &mdt,
        "--mgs-timeout",
        "2",
    ]);
    assert_eq!(code, 1);
    assert!(err.contains("unreachable") && err.contains(&dead), "{err}");
}

#[test]
fn a_busy_port_is_reported() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let (code, err) = run(&[
        "mgs",
        "--data",
        &dir.path().display().to_string(),
        "--listen",
        &addr,
        "--fsname",
        "busy",
    ]);
    assert_eq!(code, 1);
    assert!(
        err.contains("cannot listen") && err.contains(&addr),
        "{err}"
    );
}
