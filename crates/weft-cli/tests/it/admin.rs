//! Administration verbs against separate server processes: pools (and that a pool
//! restricts placement) and `weft df`.

use crate::bin;
use crate::support::weft;

use weft_client::NewFile;
use weft_proto::layout::{EOF, LayoutTemplate, TemplateComponent};
use weft_proto::mdt::Credentials;
use weft_proto::{Fid, TargetId};
use weft_testkit::{FSNAME, TestCluster};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pools_are_managed_from_the_cli_and_restrict_placement() {
    let tc = TestCluster::start(bin(), 3).await.unwrap();
    let mgs = tc.mgs_addr.as_str();
    let pool = format!("{FSNAME}.flash");
    let (ok, _, err) = weft(&["pool", "--mgs", mgs, "new", &pool]);
    assert!(ok, "{err}");
    let (ok, _, err) = weft(&[
        "pool",
        "--mgs",
        mgs,
        "add",
        &pool,
        &format!("{FSNAME}-OST[1-2]"),
    ]);
    assert!(ok, "{err}");
    let (ok, out, _) = weft(&["pool", "--mgs", mgs, "list", &pool]);
    assert!(ok);
    assert_eq!(
        out.lines().skip(1).collect::<Vec<_>>(),
        [
            format!("{FSNAME}-OST0001_UUID"),
            format!("{FSNAME}-OST0002_UUID")
        ]
    );
    let (ok, _, err) = weft(&["pool", "--mgs", mgs, "destroy", &pool]);
    assert!(
        !ok && err.contains("ENOTEMPTY"),
        "a non-empty pool is kept: {err}"
    );
    let (ok, _, err) = weft(&["pool", "--mgs", mgs, "add", &pool, "OST0009"]);
    assert!(
        !ok && err.contains("ENOENT"),
        "unknown OSTs are refused: {err}"
    );

    // Files striped over "all OSTs of the pool" land only on pool members.
    let client = tc.client().await.unwrap();
    let mdt = client.mdt(0).unwrap();
    let cred = Credentials::root();
    let template = LayoutTemplate {
        components: vec![TemplateComponent {
            end: EOF,
            stripe_count: -1,
            stripe_offset: -1,
            pool: Some("flash".into()),
            ..Default::default()
        }],
    };
    // The MDT learns the pool from the MGS's change announcement.
    let mut placed = None;
    for _ in 0..100 {
        match mdt
            .create(
                &NewFile::exclusive(Fid::ROOT, b"pooled", 0o100644).with_layout(&template),
                &cred,
            )
            .await
        {
            Ok(c) => {
                placed = Some(c);
                break;
            }
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(50)).await,
        }
    }
    let mut osts = placed.expect("create in pool").layout.unwrap().components[0]
        .osts
        .clone();
    osts.sort_unstable();
    assert_eq!(osts, vec![1, 2]);

    let (ok, _, err) = weft(&["pool", "--mgs", mgs, "remove", &pool, "1", "2"]);
    assert!(ok, "{err}");
    let (ok, _, err) = weft(&["pool", "--mgs", mgs, "destroy", &pool]);
    assert!(ok, "{err}");
    assert!(tc.client().await.unwrap().config().pools.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn df_reports_every_target_with_real_figures() {
    let tc = TestCluster::start(bin(), 2).await.unwrap();
    let spec = format!("{}:/{FSNAME}", tc.mgs_addr);
    let (ok, out, err) = weft(&["df", "--json", &spec]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["mdts"].as_array().unwrap().len(), 1);
    let osts = v["osts"].as_array().unwrap();
    assert_eq!(osts.len(), 2);
    let client = tc.client().await.unwrap();
    for (i, row) in osts.iter().enumerate() {
        assert_eq!(
            row["uuid"],
            format!("{FSNAME}-{}_UUID", TargetId::ost(i as u32))
        );
        let s = client.ost(i as u32).unwrap().statfs().await.unwrap();
        let total_kib = s.blocks * u64::from(s.bsize) / 1024;
        assert_eq!(row["total"].as_u64().unwrap(), total_kib);
        // Free space moves as other things run: within 1%.
        let avail = row["available"].as_u64().unwrap() as f64;
        let now = (s.bavail * u64::from(s.bsize) / 1024) as f64;
        assert!(
            (avail - now).abs() <= now / 100.0 + 1024.0,
            "{avail} vs {now}"
        );
    }
    let sum: u64 = osts.iter().map(|r| r["total"].as_u64().unwrap()).sum();
    assert_eq!(v["summary"]["total"].as_u64().unwrap(), sum);

    let (ok, out, _) = weft(&["df", "-h", "-i", &spec]);
    assert!(ok);
    assert!(
        out.contains("filesystem_summary:") && out.contains("MDT0000"),
        "{out}"
    );
    let (ok, _, err) = weft(&["df", "nonsense"]);
    assert!(!ok && err.contains("HOST:PORT:/FSNAME"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_param_reads_live_statistics_and_set_param_stores_on_the_mgs() {
    let tc = TestCluster::start(bin(), 2).await.unwrap();
    let mgs = tc.mgs_addr.as_str();
    let client = tc.client().await.unwrap();
    let mdt = client.mdt(0).unwrap();
    let cred = Credentials::root();
    for i in 0..7 {
        mdt.mkdir(Fid::ROOT, format!("d{i}").as_bytes(), 0o755, &cred)
            .await
            .unwrap();
    }
    let (ok, out, err) = weft(&["get_param", "--mgs", mgs, "mdt.*.md_stats"]);
    assert!(ok, "{err}");
    let mkdir = out
        .lines()
        .find(|l| l.starts_with("mkdir"))
        .expect("an mkdir row");
    assert_eq!(mkdir.split_whitespace().nth(1), Some("7"), "{out}");

    let (ok, out, _) = weft(&[
        "get_param",
        "--mgs",
        mgs,
        "-n",
        &format!("obdfilter.{FSNAME}-OST0001.kbytestotal"),
    ]);
    assert!(ok);
    let s = client.ost(1).unwrap().statfs().await.unwrap();
    assert_eq!(
        out.trim().parse::<u64>().unwrap(),
        s.blocks * u64::from(s.bsize) / 1024
    );
    let (ok, out, _) = weft(&["get_param", "--mgs", mgs, "obdfilter.*.brw_stats"]);
    assert!(ok && out.matches("brw_stats=").count() == 2, "{out}");

    let (ok, _, err) = weft(&[
        "set_param",
        "--mgs",
        mgs,
        "-P",
        "llite.*.max_read_ahead_mb=128",
    ]);
    assert!(ok, "{err}");
    assert_eq!(
        tc.client()
            .await
            .unwrap()
            .config()
            .params
            .get("llite.*.max_read_ahead_mb")
            .map(String::as_str),
        Some("128")
    );
    let (ok, out, _) = weft(&["get_param", "--mgs", mgs, "llite.*"]);
    assert!(ok && out.trim() == "llite.*.max_read_ahead_mb=128", "{out}");
    let (ok, _, err) = weft(&[
        "set_param",
        "--mgs",
        mgs,
        "-P",
        "-d",
        "llite.*.max_read_ahead_mb",
    ]);
    assert!(ok, "{err}");
    let (ok, _, err) = weft(&["get_param", "--mgs", mgs, "llite.*"]);
    assert!(!ok && err.contains("no parameter matches"), "{err}");
    let (ok, _, err) = weft(&["set_param", "--mgs", mgs, "-P", "novalue"]);
    assert!(!ok && err.contains("NAME=VALUE"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_shows_every_target_and_the_operations_running() {
    let tc = TestCluster::start(bin(), 2).await.unwrap();
    let client = tc.client().await.unwrap();
    let mdt = client.mdt(0).unwrap();
    // Keep the MDT busy for as long as top watches.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let busy = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let cred = Credentials::root();
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                mdt.mkdir(Fid::ROOT, format!("top{i}").as_bytes(), 0o755, &cred)
                    .await
                    .unwrap();
                i += 1;
            }
        })
    };
    let mgs = tc.mgs_addr.clone();
    let out = tokio::task::spawn_blocking(move || {
        weft(&[
            "top",
            "--mgs",
            &mgs,
            "--iterations",
            "2",
            "--interval",
            "0.3",
        ])
    })
    .await
    .unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    busy.await.unwrap();
    let (ok, out, err) = out;
    assert!(ok, "{err}");
    assert_eq!(out.matches("weft top").count(), 2, "{out}");
    for t in ["MDT0000", "OST0000", "OST0001"] {
        assert!(out.contains(t), "{t} missing: {out}");
    }
    assert!(out.contains("mkdir"), "the running mkdirs show: {out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_server_parameter_applies_now_and_after_a_restart() {
    let mut tc = TestCluster::start(bin(), 2).await.unwrap();
    let mgs = tc.mgs_addr.clone();
    let get = |pattern: &str| {
        let (ok, out, err) = weft(&["get_param", "--mgs", &mgs, "-n", pattern]);
        assert!(ok, "{err}");
        out.trim().to_string()
    };
    assert_eq!(
        get(&format!("mdt.{FSNAME}-MDT0000.job_cleanup_interval")),
        "600"
    );
    let (ok, _, err) = weft(&[
        "set_param",
        "--mgs",
        &mgs,
        "-P",
        "mdt.*.job_cleanup_interval=45",
    ]);
    assert!(ok, "{err}");
    // The running MDS applies it; the OSS (another process) is not an MDT and keeps its own.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while get(&format!("mdt.{FSNAME}-MDT0000.job_cleanup_interval")) != "45" {
        assert!(std::time::Instant::now() < deadline, "not applied");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(
        get(&format!("obdfilter.{FSNAME}-OST0000.job_cleanup_interval")),
        "600"
    );
    // A restarted MDS applies it at start.
    tc.mds.restart().unwrap();
    tc.wait_ready().await.unwrap();
    assert_eq!(
        get(&format!("mdt.{FSNAME}-MDT0000.job_cleanup_interval")),
        "45"
    );

    // The OSTs' page-cache limits: one OST named, and a value out of range ignored.
    let ost = |n: u32, p: &str| get(&format!("obdfilter.{FSNAME}-OST{n:04X}.{p}"));
    assert_eq!(ost(0, "writethrough_max_io_mb"), "1");
    let (ok, _, err) = weft(&[
        "set_param",
        "--mgs",
        &mgs,
        "-P",
        &format!("obdfilter.{FSNAME}-OST0001.writethrough_max_io_mb=8"),
        "obdfilter.*.readcache_max_io_mb=65",
    ]);
    assert!(ok, "{err}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while ost(1, "writethrough_max_io_mb") != "8" {
        assert!(std::time::Instant::now() < deadline, "not applied");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(ost(0, "writethrough_max_io_mb"), "1", "another OST");
    assert_eq!(ost(1, "readcache_max_io_mb"), "1", "65 MiB is refused");
    tc.oss.restart().unwrap();
    tc.wait_ready().await.unwrap();
    assert_eq!(ost(1, "writethrough_max_io_mb"), "8", "after a restart");
}
