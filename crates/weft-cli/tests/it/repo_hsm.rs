//! The HSM verbs that need the MDT's HSM handlers (`HsmSetFlags`, `HsmRelease`):
//! `hsm_set`/`hsm_clear` on a plain file and `hsm_release`'s refusals by the MDT. Listed in
//! `main.rs` once those handlers are merged.

use crate::bin;
use crate::repo::weft_env;
use std::time::Duration;
use weft_proto::mdt::Credentials;
use weft_testkit::{FSNAME, TestCluster};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hsm_flags_are_set_and_cleared() {
    let tc = TestCluster::start(bin(), 1).await.unwrap();
    let root = format!("{}:/{FSNAME}", tc.mgs_addr);
    let client = tc.fs_client(Duration::from_secs(10)).await.unwrap();
    let cred = Credentials::root();
    client.write_file("/f", b"hello", &cred).await.unwrap();
    let f = format!("{root}/f");
    let run = |args: &[&str]| {
        let (ok, out, err) = weft_env(args);
        assert!(ok, "weft {args:?}:\n{out}\n{err}");
        out
    };

    run(&["hsm_set", "--exists", "--archived", "--archive-id", "1", &f]);
    assert_eq!(
        run(&["hsm_state", &f]),
        format!("{f}: (0x00000009) exists archived, archive_id:1\n")
    );
    let attr = client.resolve("/f", false, &cred).await.unwrap();
    assert_eq!((attr.hsm_flags, attr.archive_id), (0x9, 1));

    run(&["hsm_set", "--norelease", "--dirty", &f]);
    let out = run(&["hsm_state", &f]);
    assert!(
        out.starts_with(&format!(
            "{f}: (0x0000001b) exists dirty archived never_release"
        )),
        "{out}"
    );
    // Refused here (dirty) before the MDT is asked.
    let (ok, _, err) = weft_env(&["hsm_release", &f]);
    assert!(!ok && err.contains("EBUSY"), "{err}");

    run(&[
        "hsm_clear",
        "--exists",
        "--archived",
        "--norelease",
        "--dirty",
        &f,
    ]);
    let out = run(&["hsm_state", &f]);
    assert!(out.starts_with(&format!("{f}: (0x00000000)")), "{out}");
    let attr = client.resolve("/f", false, &cred).await.unwrap();
    assert_eq!(attr.hsm_flags, 0);

    // The MDT's own refusal: archived per its flags but open for writing.
    run(&["hsm_set", "--exists", "--archived", &f]);
    let open = client
        .open_path("/f", crate::support::RW, &cred)
        .await
        .unwrap();
    let (ok, _, err) = weft_env(&["hsm_release", &f]);
    assert!(!ok && err.contains("EBUSY"), "released while open: {err}");
    open.close().await.unwrap();
}
