//! `weft bench-repo` end to end, at a small scale: an s3s-fs bucket, a file system with a
//! FUSE mount, every phase run, with `--rounds 2` (the first epoch and the direct
//! reader measured twice, the goals on medians). A round whose reads came from the
//! mount's data cache (its files fit in `llite.*.max_cached_mb`) is refused, not reported.

use crate::fuse_client_params::instance_of;
use crate::fuse_common::FuseMount;
use crate::repo_s3::LIMIT;
use crate::support::{weft, weft_env};
use weft_testkit::s3::REGION;
use weft_testkit::{FSNAME, S3Server, TestCluster};

const BUCKET: &str = "bench";

/// `weft bench-repo` against `server`'s bucket through mount `m` of `tc`, with `extra`.
fn bench_repo(
    server: &S3Server,
    tc: &TestCluster,
    m: &FuseMount,
    local: &std::path::Path,
    extra: &[&str],
) -> (bool, String, String) {
    let endpoint = server.endpoint();
    let mnt = m.mnt.display().to_string();
    let fs = format!("{}:/{FSNAME}", tc.mgs_addr);
    let local = local.display().to_string();
    let mut args = vec![
        "bench-repo",
        "--endpoint",
        &endpoint,
        "--bucket",
        BUCKET,
        "--region",
        REGION,
        "--mount",
        &mnt,
        "--fs",
        &fs,
        "--local-dir",
        &local,
        "--json",
    ];
    args.extend_from_slice(extra);
    weft_env(&args, &server.env(), LIMIT)
}

/// `weft set_param llite.INST.max_cached_mb=MB` for the mount instance `inst`.
fn set_max_cached_mb(inst: &str, mb: u32) {
    let (ok, _, err) = weft(&["set_param", &format!("llite.{inst}.max_cached_mb={mb}")]);
    assert!(ok, "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_repo_measures_rounds_and_refuses_cached_ones() {
    let server = S3Server::start_s3s_fs().unwrap();
    server.create_bucket(BUCKET).unwrap();
    let tc = TestCluster::start_with_env(crate::bin(), 2, server.env())
        .await
        .unwrap();
    let m = FuseMount::start(&tc, "");
    let inst = instance_of(&m.mnt);
    let local = tempfile::tempdir().unwrap();
    // Datasets larger than the mount's data cache: each round's straight read pushes the
    // released files out of it.
    set_max_cached_mb(&inst, 4);
    let sizes = [
        "--small-count",
        "96",
        "--small-size",
        "64K",
        "--large-count",
        "2",
        "--large-size",
        "17M",
    ];
    let mut args = sizes.to_vec();
    args.extend(["--rounds", "2"]);
    let (ok, out, err) = bench_repo(&server, &tc, &m, local.path(), &args);
    assert!(ok, "bench-repo failed:\n{out}\n{err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["rounds"], 2);
    let rows = report["rows"].as_array().unwrap();
    for dataset in ["small", "large"] {
        let of = |phase: &str| {
            rows.iter()
                .filter(|r| r["dataset"] == dataset && r["phase"] == phase)
                .count()
        };
        assert_eq!(of("epoch1"), 2, "{dataset}: {out}");
        assert_eq!(of("direct"), 2, "{dataset}: {out}");
        assert_eq!(of("epoch2"), 1, "{dataset}: {out}");
        assert_eq!(of("straight-read"), 1, "{dataset}: {out}");
        assert_eq!(of("straight-reread"), 1, "{dataset}: {out}");
        for r in rows.iter().filter(|r| r["dataset"] == dataset) {
            assert!(r["mb_s"].as_f64().unwrap() > 0.0, "{r}");
        }
    }
    let goals = report["goals"].as_array().unwrap();
    assert_eq!(goals.len(), 7, "{out}");

    // The large files fit in the default cache (1,024 MiB): the second round would read
    // them from it, and is refused. (Over 16 MiB each: no restore-ahead loads them
    // behind the reader's back.)
    set_max_cached_mb(&inst, 1024);
    let args = [
        "--skip-populate",
        "--small-count",
        "0",
        "--large-count",
        "2",
        "--large-size",
        "17M",
        "--rounds",
        "2",
    ];
    let (ok, out, err) = bench_repo(&server, &tc, &m, local.path(), &args);
    assert!(!ok, "a cached round was reported:\n{out}");
    assert!(err.contains("came from a cache"), "{err}");
}
