//! `weft repo` (data repository associations and their tasks) and the HSM verbs that need
//! no MDT HSM handlers (`hsm_state`, the refusals of `hsm_release`, `hsm_restore` of files
//! not released, `hsm_action`), against separate server processes and `file://`
//! repositories. Every command runs with cloud credentials in its environment and must
//! never print them.

use crate::bin;
use std::time::Duration;
use weft_proto::hsm::TaskKind;
use weft_proto::mdt::{Credentials, FileKind};
use weft_proto::mgs::{MgsReply, MgsRequest};
use weft_testkit::{FSNAME, TestCluster};

/// Credentials every command gets in its environment; none may appear in any output.
pub const SECRETS: [(&str, &str); 3] = [
    ("AWS_ACCESS_KEY_ID", "AKIDsekritKeyId7731"),
    ("AWS_SECRET_ACCESS_KEY", "sekrit-value-9f2c1e"),
    ("AWS_SESSION_TOKEN", "sekrit-session-5d0a"),
];

/// Runs `weft args...` with [`SECRETS`] in its environment and debug logging on, bounded
/// in time; asserts that no output holds a secret; returns (success, stdout, stderr).
pub fn weft_env(args: &[&str]) -> (bool, String, String) {
    let env: Vec<(String, String)> = SECRETS
        .iter()
        .chain(&[("RUST_LOG", "debug")])
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let out = crate::support::weft_run_env(args, "", &env, Duration::from_secs(90));
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    for (k, v) in SECRETS {
        assert!(
            !stdout.contains(v) && !stderr.contains(v),
            "weft {args:?} printed {k}:\n{stdout}\n{stderr}"
        );
    }
    (out.status.success(), stdout, stderr)
}

/// Like [`weft_env`], asserting success; answers stdout.
fn ok(args: &[&str]) -> String {
    let (ok, out, err) = weft_env(args);
    assert!(ok, "weft {args:?} failed:\n{out}\n{err}");
    out
}

/// Like [`weft_env`], asserting failure; answers stderr.
fn fails(args: &[&str]) -> String {
    let (ok, out, err) = weft_env(args);
    assert!(!ok, "weft {args:?} succeeded:\n{out}\n{err}");
    err
}

fn file_url(dir: &std::path::Path) -> String {
    format!("file://{}", dir.display())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repositories_are_created_listed_shown_and_deleted() {
    let tc = TestCluster::start(bin(), 1).await.unwrap();
    let mgs = tc.mgs_addr.as_str();
    let root = format!("{mgs}:/{FSNAME}");
    let store = tempfile::tempdir().unwrap();
    let url = file_url(store.path());
    let at = |p: &str| format!("{root}{p}");

    // Created with its missing parents; the id is all stdout says.
    let out = ok(&[
        "repo",
        "create",
        &at("/data/a"),
        &url,
        "--import-policy",
        "new,changed",
        "--chunk-size",
        "256M",
    ]);
    assert_eq!(out.trim(), "1");
    let client = tc.fs_client(Duration::from_secs(10)).await.unwrap();
    let dir = client
        .resolve("/data/a", false, &Credentials::root())
        .await
        .unwrap();
    assert_eq!(dir.kind, FileKind::Directory);
    let config = client.cluster().refresh().await.unwrap();
    assert_eq!(config.repos.len(), 1);
    assert_eq!(config.repos[0].dir, dir.fid);
    assert_eq!(config.repos[0].spec.chunk_size, 256 << 20);
    assert!(config.repos[0].spec.import_policy.changed);

    // Listed (table and JSON) and shown by id and by a path inside it.
    let out = ok(&["repo", "list", &root]);
    let mut lines = out.lines();
    assert!(lines.next().unwrap().contains("PATH"), "{out}");
    let row = lines.next().unwrap();
    for want in ["1", "/data/a", url.as_str(), "NEW,CHANGED", "NONE", "256M"] {
        assert!(row.contains(want), "{want} missing from {row}");
    }
    let out = ok(&["repo", "list", "--json", "--mgs", mgs]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 1);
    assert_eq!(v[0]["id"], 1);
    assert_eq!(v[0]["url"], url);
    assert_eq!(v[0]["fid"], dir.fid.to_string());
    let out = ok(&["repo", "show", "--mgs", mgs, "1"]);
    assert!(out.contains(&format!("url:             {url}")), "{out}");
    assert!(out.contains("chunk_size:      256M"), "{out}");
    let out = ok(&["repo", "show", "--json", &at("/data/a/not/there")]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["id"], 1);

    // Associations may not nest, above or below.
    let other = tempfile::tempdir().unwrap();
    let other_url = file_url(other.path());
    for p in ["/data", "/data/a", "/data/a/b", "/"] {
        let err = fails(&["repo", "create", &at(p), &other_url]);
        assert!(err.contains("EEXIST"), "{p}: {err}");
    }
    let e = client
        .resolve("/data/a/b", false, &Credentials::root())
        .await
        .unwrap_err();
    assert_eq!(e.errno(), weft_proto::Errno::NoEnt, "made for nothing");

    // Refused before anything is made: a bad scheme, a missing file:// directory, a URL
    // holding credentials (not echoed), a bad chunk size.
    let err = fails(&["repo", "create", &at("/x"), "ftp://host/p"]);
    assert!(err.contains("not a supported store"), "{err}");
    let missing = store.path().join("no/such/dir");
    let err = fails(&["repo", "create", &at("/y"), &file_url(&missing)]);
    assert!(err.contains("no/such/dir"), "{err}");
    let err = fails(&[
        "repo",
        "create",
        &at("/z"),
        &format!("s3://AKIDsekritKeyId7731:{}@bucket/p", SECRETS[1].1),
    ]);
    assert!(err.contains("credentials"), "{err}");
    let err = fails(&[
        "repo",
        "create",
        &at("/w"),
        &other_url,
        "--chunk-size",
        "4K",
    ]);
    assert!(err.contains("chunk size"), "{err}");
    for p in ["/x", "/y", "/z", "/w"] {
        let e = client
            .resolve(p, false, &Credentials::root())
            .await
            .unwrap_err();
        assert_eq!(e.errno(), weft_proto::Errno::NoEnt, "{p} was made");
    }
    assert_eq!(client.cluster().refresh().await.unwrap().repos.len(), 1);

    // Unknown ids; a path inside the directory is not enough to delete.
    let err = fails(&["repo", "show", "--mgs", mgs, "42"]);
    assert!(err.contains("no repository 42"), "{err}");
    let err = fails(&["repo", "delete", "--mgs", mgs, "42"]);
    assert!(err.contains("no repository 42"), "{err}");
    let err = fails(&["repo", "delete", &at("/data/a/b")]);
    assert!(err.contains("inside repository 1"), "{err}");
    let err = fails(&["repo", "show", &at("/elsewhere")]);
    assert!(err.contains("not linked"), "{err}");

    // Deleted by its directory; the directory stays.
    let out = ok(&["repo", "delete", &at("/data/a")]);
    assert!(out.contains("repository 1 deleted"), "{out}");
    let out = ok(&["repo", "list", "--json", "--mgs", mgs]);
    assert_eq!(out.trim(), "[]");
    client
        .resolve("/data/a", false, &Credentials::root())
        .await
        .unwrap();
    // The place is free again. (The MGS gives the next id past those it knows now, so
    // after a delete with no task left it reuses 1: that is the MGS's to decide.)
    let out = ok(&["repo", "create", &at("/data"), &other_url]);
    let id: u32 = out.trim().parse().unwrap();
    let out = ok(&["repo", "delete", "--mgs", mgs, &id.to_string()]);
    assert!(out.contains(&format!("repository {id} deleted")), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_are_listed() {
    let tc = TestCluster::start(bin(), 1).await.unwrap();
    let mgs = tc.mgs_addr.as_str();
    let root = format!("{mgs}:/{FSNAME}");
    let store = tempfile::tempdir().unwrap();
    let out = ok(&[
        "repo",
        "create",
        &format!("{root}/data"),
        &file_url(store.path()),
    ]);
    assert_eq!(out.trim(), "1");

    let out = ok(&["repo", "tasks", "--mgs", mgs]);
    assert_eq!(out.lines().count(), 1, "only the header: {out}");

    let cluster = tc.client().await.unwrap();
    let (reply, _) = cluster
        .mgs()
        .connection()
        .call::<MgsRequest, MgsReply>(
            &MgsRequest::TaskStart {
                repo: 1,
                kind: TaskKind::Export,
                path: "/data/sub".into(),
            },
            bytes::Bytes::new(),
        )
        .await
        .unwrap();
    let MgsReply::Task(task) = reply else {
        panic!("{reply:?}")
    };
    let out = ok(&["repo", "tasks", &root]);
    let row = out.lines().nth(1).unwrap_or_default();
    let words: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        words,
        [
            &task.id.to_string(),
            "1",
            "export",
            "/data/sub",
            "running",
            "0",
            "0",
            "0",
            "-"
        ],
        "{out}"
    );
    let out = ok(&["repo", "tasks", "--json", "--mgs", mgs]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v[0]["id"], task.id);
    assert_eq!(v[0]["kind"], "Export");
    assert_eq!(v[0]["path"], "/data/sub");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hsm_verbs_on_plain_files() {
    let tc = TestCluster::start(bin(), 1).await.unwrap();
    let root = format!("{}:/{FSNAME}", tc.mgs_addr);
    let client = tc.fs_client(Duration::from_secs(10)).await.unwrap();
    let cred = Credentials::root();
    client
        .mkdir(weft_proto::Fid::ROOT, b"d", 0o755, &cred)
        .await
        .unwrap();
    client.write_file("/d/f", b"hello", &cred).await.unwrap();
    client.write_file("/d/g", b"world", &cred).await.unwrap();
    let f = format!("{root}/d/f");
    let g = format!("{root}/d/g");

    let out = ok(&["hsm_state", &f, &g]);
    assert_eq!(
        out,
        format!("{f}: (0x00000000)\n{g}: (0x00000000)\n"),
        "lfs hsm_state's shape"
    );
    let err = fails(&["hsm_state", &format!("{root}/d/nope"), &f]);
    assert!(err.contains("ENOENT"), "{err}");

    // A file that is not archived is not released.
    let err = fails(&["hsm_release", &f]);
    assert!(
        err.contains("EBUSY") && err.contains("not archived"),
        "{err}"
    );
    let err = fails(&["hsm_release", &format!("{root}/d")]);
    assert!(err.contains("not a regular file"), "{err}");

    // Restoring files that are not released does nothing.
    let out = ok(&["hsm_restore", &f, &g]);
    assert_eq!(
        out.trim(),
        "hsm_restore: 0 restored, 2 not released, 0 failed"
    );
    let out = ok(&["hsm_restore", "-r", "--parallel", "2", &format!("{root}/d")]);
    assert_eq!(
        out.trim(),
        "hsm_restore: 0 restored, 2 not released, 0 failed"
    );
    let err = fails(&["hsm_restore", &format!("{root}/d")]);
    assert!(err.contains("use -r"), "{err}");

    let out = ok(&["hsm_action", &f]);
    assert_eq!(out, format!("{f}: NOOP\n"));

    // Flag verbs need a flag; hsm_clear takes no archive id.
    let err = fails(&["hsm_set", &f]);
    assert!(err.contains("no flag given"), "{err}");
    let err = fails(&["hsm_clear", "--archive-id", "1", &f]);
    assert!(err.contains("no --archive-id"), "{err}");

    // Archiving a file outside every repository says so.
    let err = fails(&["hsm_archive", &f]);
    assert!(err.contains("not in a data repository"), "{err}");
}
