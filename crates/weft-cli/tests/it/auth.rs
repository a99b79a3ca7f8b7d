//! Node authentication between real processes: servers started with the cluster key
//! (`--key`, here through `WEFT_KEY`) refuse a node without it or with a wrong one — the
//! same words either way — and refuse server-only requests from a client's key; a mount
//! with the client key works.

use crate::bin;
use crate::fuse_common::FuseMount;
use crate::support::weft_env;
use std::path::Path;
use std::time::Duration;
use weft_proto::{Errno, TargetId};
use weft_testkit::{FSNAME, ServerProcess, TestCluster, free_port, key_files};

fn s(p: &Path) -> String {
    p.display().to_string()
}

/// A keyed cluster of one OST, and the directory holding its keys and a wrong one.
async fn keyed() -> (TestCluster, tempfile::TempDir) {
    let keys = tempfile::tempdir().unwrap();
    let (server, _client) = key_files(keys.path()).unwrap();
    let other = keys.path().join("other");
    std::fs::create_dir(&other).unwrap();
    key_files(&other).unwrap();
    let env = vec![("WEFT_KEY".to_string(), s(&server))];
    let tc = TestCluster::start_with_env(bin(), 1, env).await.unwrap();
    (tc, keys)
}

/// Starts `weft oss` serving OST 1 with `key` (none: no `--key`) and returns its log once
/// it exited (it must, within 30 s).
async fn oss_with(tc: &TestCluster, key: Option<&Path>, log: &Path) -> String {
    let mut args = vec![
        "oss".to_string(),
        "--mgs".into(),
        tc.mgs_addr.clone(),
        "--listen".into(),
        format!("127.0.0.1:{}", free_port().unwrap()),
        "--ost".into(),
        format!("1={}", s(&tc.dir.path().join("intruder-ost1"))),
        "--mgs-timeout".into(),
        "2".into(),
    ];
    if let Some(k) = key {
        args.extend(["--key".to_string(), s(k)]);
    }
    let mut p = ServerProcess::start("oss-intruder", bin(), args, log.to_path_buf()).unwrap();
    let status = p.wait_exit(Duration::from_secs(30)).await.unwrap();
    assert!(!status.success(), "{}", p.log());
    p.log()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_without_the_key_cannot_register_a_target_or_mount() {
    let (tc, keys) = keyed().await;
    let k = keys.path();
    let wrong = k.join("other/server.key");

    // A target's server: without a key, with a wrong one, with the client key.
    let none = oss_with(&tc, None, &k.join("none.log")).await;
    assert!(none.contains("authentication failed"), "{none}");
    let bad = oss_with(&tc, Some(&wrong), &k.join("wrong.log")).await;
    assert!(
        bad.contains("handshake refused: EACCES: authentication failed"),
        "{bad}"
    );
    let client = oss_with(&tc, Some(&k.join("client.key")), &k.join("client.log")).await;
    assert!(client.contains("needs the server key"), "{client}");
    let c = tc.client().await.unwrap();
    assert!(
        c.refresh()
            .await
            .unwrap()
            .target(TargetId::ost(1))
            .is_none()
    );

    // A mount: refused without a key and with a wrong one, in the same words.
    let mnt = tempfile::tempdir().unwrap();
    let source = format!("{}:/{FSNAME}", tc.mgs_addr);
    let mount = |key: Option<&Path>| {
        let mut args = vec!["mount".to_string(), source.clone(), s(mnt.path())];
        if let Some(key) = key {
            args.extend(["--key".to_string(), s(key)]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        weft_env(&args, &[], Duration::from_secs(60))
    };
    let (ok, _, no_key) = mount(None);
    assert!(!ok && no_key.contains("authentication failed"), "{no_key}");
    let (ok, _, wrong_key) = mount(Some(&wrong));
    assert!(!ok, "{wrong_key}");
    let (ok, _, wrong_key_too) = mount(Some(&k.join("other/client.key")));
    assert!(!ok);
    let last_line = |e: &str| e.lines().last().unwrap_or_default().to_string();
    assert_eq!(last_line(&wrong_key), last_line(&wrong_key_too));
    assert!(
        wrong_key.contains("handshake refused: EACCES: authentication failed"),
        "{wrong_key}"
    );

    // The servers log each refusal with the peer's address, and count it on their
    // Prometheus endpoint (the MGS refused the two mounts above, at least).
    let mgs_log = tc.mgs.log();
    assert!(
        mgs_log.contains("authentication refused") && mgs_log.contains("peer=127.0.0.1:"),
        "{mgs_log}"
    );
    let mgs_metrics = crate::metrics::scrape(&tc.metrics_addrs[0]).await;
    let refused = crate::metrics::value(&mgs_metrics, "weft_auth_refused_total", &[]);
    let accepted = crate::metrics::value(&mgs_metrics, "weft_auth_accepted_total", &[]);
    assert!(
        refused >= 2.0 && accepted >= 1.0,
        "refused {refused}, accepted {accepted}"
    );

    // The client key mounts (as `-o key=` from fstab would) and works.
    let m = FuseMount::start(&tc, &format!("key={}", s(&k.join("client.key"))));
    std::fs::write(m.path("f"), b"authenticated").unwrap();
    assert_eq!(std::fs::read(m.path("f")).unwrap(), b"authenticated");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_key_cannot_make_server_requests() {
    let (tc, keys) = keyed().await;
    let client_key = weft_rpc::ClusterKey::load(&keys.path().join("client.key")).unwrap();
    let opts = weft_client::ClusterOptions {
        transport: std::sync::Arc::new(
            weft_rpc::Tcp::sockets().with_key(Some(std::sync::Arc::new(client_key))),
        ),
        ..Default::default()
    };
    let c = weft_client::Cluster::connect(&tc.mgs_addr, FSNAME, opts)
        .await
        .unwrap();

    // Registering a target, asking for FID sequences, destroying objects: refused.
    let e = c
        .mgs()
        .register(
            TargetId::ost(7),
            uuid::Uuid::new_v4(),
            "127.0.0.1:1".into(),
            vec![],
            false,
        )
        .await
        .unwrap_err();
    assert_eq!(e.errno(), Errno::Perm, "{e}");
    let e = c.mgs().alloc_seq(0, 1).await.unwrap_err();
    assert_eq!(e.errno(), Errno::Perm, "{e}");
    let object = weft_proto::ObjectId {
        fid: weft_proto::Fid::ROOT,
        component: 0,
        stripe: 0,
    };
    let e = c.ost(0).unwrap().destroy(object).await.unwrap_err();
    assert_eq!(e.errno(), Errno::Perm, "{e}");
    // Ordinary requests work.
    c.mdt(0).unwrap().statfs().await.unwrap();

    // The same requests with the server key (the harness's own client) pass the check.
    let server = tc.client().await.unwrap();
    server.ost(0).unwrap().destroy(object).await.unwrap();
}
