//! TLS between real processes (issue 25): MGS, MDS and OSS started with a certificate of
//! the cluster's CA (`WEFT_TLS_*`), a FUSE mount with its own (`-o tls_ca=,tls_cert=,
//! tls_key=`, as fstab gives it) reads and writes striped files; a mount trusting another
//! CA, a node with another CA's certificate and a plain TCP client are refused, and the
//! servers count the refusals.

use crate::bin;
use crate::fuse_common::FuseMount;
use crate::support::weft_env;
use std::time::Duration;
use weft_testkit::{FSNAME, TestCluster, TestPki, pattern};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_cluster_serves_its_nodes_and_refuses_other_cas() {
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::new(dir.path(), "cluster", &["127.0.0.1"]).unwrap();
    let other = TestPki::new(dir.path(), "other", &["127.0.0.1"]).unwrap();
    let tc = TestCluster::start_with_env(bin(), 2, pki.env())
        .await
        .unwrap();
    let fs = format!("{}:/{FSNAME}", tc.mgs_addr);
    let limit = Duration::from_secs(60);

    // A mount of the cluster: 8 MiB striped over both OSTs, fsynced, read back.
    let m = FuseMount::start(&tc, &pki.mount_options());
    let (ok, _, err) = weft_env(
        &[
            "setstripe",
            "-c",
            "-1",
            "-S",
            "1M",
            &m.path("").display().to_string(),
        ],
        &pki.env(),
        limit,
    );
    assert!(ok, "{err}");
    let data = pattern(0, 8 << 20, 7);
    {
        use std::io::Write;
        let mut f = std::fs::File::create(m.path("striped")).unwrap();
        f.write_all(&data).unwrap();
        f.sync_all().unwrap();
    }
    assert!(std::fs::read(m.path("striped")).unwrap() == data);

    // A tool with the cluster's TLS works; without TLS it is refused.
    let (ok, out, err) = weft_env(&["df", &fs], &pki.env(), limit);
    assert!(ok && out.contains("OST0001"), "{out}{err}");
    let (ok, _, err) = weft_env(&["df", &fs], &[], limit);
    assert!(!ok, "a plain TCP client was served: {err}");

    // A mount trusting another CA refuses the servers; a node whose certificate another CA
    // issued is refused by them.
    let mnt = tempfile::tempdir().unwrap();
    let mount = |opts: String| {
        let target = mnt.path().display().to_string();
        weft_env(&["mount", &fs, &target, "-o", &opts], &[], limit)
    };
    let wrong_ca = format!(
        "tls_ca={},tls_cert={},tls_key={}",
        other.ca.display(),
        pki.cert.display(),
        pki.key.display()
    );
    let (ok, _, err) = mount(wrong_ca);
    assert!(!ok && err.contains("certificate"), "{err}");
    let stranger = format!(
        "tls_ca={},tls_cert={},tls_key={}",
        pki.ca.display(),
        other.cert.display(),
        other.key.display()
    );
    let (ok, _, err) = mount(stranger);
    assert!(!ok, "a node of another CA mounted: {err}");

    // The MGS counted the refusals (the plain client, the stranger) and logged the peers.
    let metrics = crate::metrics::scrape(&tc.metrics_addrs[0]).await;
    let refused = crate::metrics::value(&metrics, "weft_tls_refused_total", &[]);
    assert!(refused >= 2.0, "weft_tls_refused_total {refused}");
    let log = tc.mgs.log();
    assert!(
        log.contains("TLS handshake refused") && log.contains("peer=127.0.0.1:"),
        "{log}"
    );
    drop(m);
}
