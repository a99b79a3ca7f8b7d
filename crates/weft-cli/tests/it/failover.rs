//! Failover (issue 25): an OST served by a second OSS when its first dies. The two OSS
//! processes share the OST directories (shared storage is a shared directory here); the
//! standby waits on the directories' lock, takes the OSTs over when the primary is killed,
//! and registers them from its own address; clients follow without an application error.

use crate::bin;
use crate::metrics::{scrape, value};
use crate::support::weft;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use weft_client::OpenOptions;
use weft_proto::mdt::{AccessMode, Credentials};
use weft_proto::{Fid, LayoutTemplate, TargetId};
use weft_testkit::{FSNAME, ServerProcess, TestCluster, free_port, pattern, wait_until_async};

const MIB: u64 = 1 << 20;
/// The file the reader reads: several stripes on each OST.
const FILE_BYTES: u64 = 24 * MIB;

/// Where each OST of the cluster is registered, by index.
fn addresses(c: &weft_client::Cluster) -> Vec<(String, Vec<String>)> {
    (0..2)
        .map(|i| {
            let config = c.config();
            let t = config.target(TargetId::ost(i)).expect("OST registered");
            (t.address.clone(), t.failover.clone())
        })
        .collect()
}

/// Writes `len` bytes of pattern `seed` into a new file `name` striped over both OSTs
/// (1 MiB stripes), fsyncs and closes it.
async fn write_striped(fs: &Arc<weft_client::Client>, name: &str, len: u64, seed: u64) {
    let opts = OpenOptions {
        access: AccessMode::ReadWrite,
        create: Some(0o644),
        exclusive: true,
        truncate: false,
        append: false,
    };
    let layout = LayoutTemplate::raid0(2, MIB, -1);
    let f = fs
        .open_in(
            Fid::ROOT,
            name.as_bytes(),
            opts,
            Some(layout),
            &Credentials::root(),
        )
        .await
        .unwrap();
    let mut off = 0;
    while off < len {
        let n = (4 * MIB).min(len - off);
        f.write_at(off, &pattern(off, n as usize, seed))
            .await
            .unwrap();
        off += n;
    }
    f.fsync().await.unwrap();
    f.close().await.unwrap();
}

/// The whole story of issue 25's item: a primary OSS serving OST0 and OST1 with
/// `--failover` naming a standby; the standby started on the same directories waits and
/// writes nothing while the primary lives (and an OSS without `--failover` is refused);
/// a reader reads a file striped over both OSTs in a loop, every read going to the OSTs;
/// the primary is killed (SIGKILL); the standby takes the OSTs over, the MGS moves them
/// and counts the failovers, the reader sees a pause and the same bytes, new writes land,
/// and `weft fsck -n` finds nothing wrong.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_of_an_ost_to_a_second_oss_under_a_reader() {
    let mut tc = TestCluster::start(bin(), 2).await.unwrap();
    let d = tc.dir.path().to_owned();
    let standby_addr = format!("127.0.0.1:{}", free_port().unwrap());
    let standby_metrics = format!("127.0.0.1:{}", free_port().unwrap());

    // The primary, restarted to name its standby.
    tc.oss.stop().unwrap();
    tc.oss.add_args(&["--failover", &standby_addr]);
    tc.oss.restart().unwrap();
    tc.wait_ready().await.unwrap();
    let watcher = tc.client().await.unwrap();
    wait_until_async(
        "the MGS lists the standby as the OSTs' failover",
        || async {
            let _ = watcher.refresh().await;
            addresses(&watcher)
                .iter()
                .all(|(a, f)| *a == tc.oss_addr && *f == vec![standby_addr.clone()])
        },
    )
    .await;

    // The standby, on the same directories.
    let reserve = |i: u32| d.join(format!("ost{i}")).join(weft_ost::RESERVE_FILE);
    let reserves_before: Vec<Vec<u8>> =
        (0..2).map(|i| std::fs::read(reserve(i)).unwrap()).collect();
    let mut args: Vec<String> = ["oss", "--mgs", &tc.mgs_addr, "--listen", &standby_addr]
        .iter()
        .map(|s| s.to_string())
        .collect();
    for i in 0..2 {
        args.push("--ost".into());
        args.push(format!("{i}={}", d.join(format!("ost{i}")).display()));
    }
    args.extend(
        ["--failover", &tc.oss_addr, "--metrics", &standby_metrics]
            .iter()
            .map(|s| s.to_string()),
    );
    let mut standby =
        ServerProcess::start("oss-standby", bin(), args, d.join("standby.log")).unwrap();
    wait_until_async("the standby stands by", || async {
        standby.log().matches("standing by").count() == 2
    })
    .await;
    // An OSS without --failover on a held directory is refused, as before failover.
    let (ok, _, err) = weft(&[
        "oss",
        "--mgs",
        &tc.mgs_addr,
        "--listen",
        &format!("127.0.0.1:{}", free_port().unwrap()),
        "--ost",
        &format!("0={}", d.join("ost0").display()),
    ]);
    assert!(!ok, "a second OSS without --failover must not start");
    assert!(err.contains("ost0"), "{err}");
    // While the primary lives the standby serves nothing and writes nothing.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(standby.is_running(), "{}", standby.log());
    let _ = watcher.refresh().await;
    assert!(addresses(&watcher).iter().all(|(a, _)| *a == tc.oss_addr));
    let m = scrape(&standby_metrics).await;
    assert_eq!(value(&m, "weft_oss_target_takeovers_total", &[]), 0.0);
    for i in 0..2 {
        assert_eq!(
            std::fs::read(reserve(i)).unwrap(),
            reserves_before[i as usize],
            "the standby wrote into OST{i}'s directory while the primary held it"
        );
    }

    // A file over both OSTs, and a reader whose every read goes to them.
    let fs = tc.fs_client(Duration::from_secs(60)).await.unwrap();
    fs.params().set("llite.*.max_read_ahead_mb", "0").unwrap();
    write_striped(&fs, "big", FILE_BYTES, 7).await;
    let stop = Arc::new(AtomicBool::new(false));
    let passes = Arc::new(AtomicU64::new(0));
    let reader = {
        let (fs, stop, passes) = (fs.clone(), stop.clone(), passes.clone());
        tokio::spawn(async move {
            let cred = Credentials::root();
            let f = fs.open_path("/big", OpenOptions::read(), &cred).await?;
            let mut slowest = Duration::ZERO;
            while !stop.load(Ordering::Relaxed) {
                let mut off = 0;
                while off < FILE_BYTES {
                    let started = Instant::now();
                    let got = f.read_at(off, MIB).await?;
                    slowest = slowest.max(started.elapsed());
                    assert!(
                        got[..] == pattern(off, MIB as usize, 7)[..],
                        "bytes at {off} differ"
                    );
                    off += MIB;
                }
                passes.fetch_add(1, Ordering::Relaxed);
            }
            f.close().await?;
            Ok::<_, weft_client::ClientError>(slowest)
        })
    };
    wait_until_async("the reader reads the file once", || async {
        passes.load(Ordering::Relaxed) >= 1
    })
    .await;

    // The primary dies; the standby takes both OSTs over.
    let killed = Instant::now();
    tc.oss.kill().unwrap();
    wait_until_async("the MGS lists the OSTs at the standby", || async {
        let _ = watcher.refresh().await;
        addresses(&watcher).iter().all(|(a, _)| *a == standby_addr)
    })
    .await;
    eprintln!("OSTs at the standby {:?} after the kill", killed.elapsed());
    let after = passes.load(Ordering::Relaxed);
    wait_until_async("the reader reads the file twice more", || async {
        passes.load(Ordering::Relaxed) >= after + 2
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    let slowest = reader
        .await
        .unwrap()
        .expect("the reader sees no error across the failover");
    eprintln!(
        "{} passes; the longest read took {slowest:?}",
        passes.load(Ordering::Relaxed)
    );

    // The configuration: each OST at the standby, the dead primary its failover.
    for (a, f) in addresses(&watcher) {
        assert_eq!(a, standby_addr);
        assert_eq!(f, vec![tc.oss_addr.clone()]);
    }
    let (ok, out, err) = weft(&[
        "get_param",
        "--mgs",
        &tc.mgs_addr,
        &format!("obdfilter.{FSNAME}-OST0001.server"),
        &format!("obdfilter.{FSNAME}-OST0001.failover_nids"),
    ]);
    assert!(ok, "{err}");
    assert!(
        out.contains(&format!("OST0001.server={standby_addr}"))
            && out.contains(&format!("OST0001.failover_nids={}", tc.oss_addr)),
        "{out}"
    );
    let mgs = scrape(&tc.metrics_addrs[0]).await;
    assert_eq!(value(&mgs, "weft_mgs_target_failovers_total", &[]), 2.0);
    assert_eq!(value(&mgs, "weft_mgs_target_moves_total", &[]), 0.0);
    let m = scrape(&standby_metrics).await;
    assert_eq!(value(&m, "weft_oss_target_takeovers_total", &[]), 2.0);
    // At least one whole pass of the reader came from the standby (half the file from
    // each OST): its reads went to the OSTs, not to a cache.
    for ost in ["OST0000", "OST0001"] {
        let read = value(&m, "weft_ost_read_bytes_total", &[("target", ost)]);
        assert!(
            read >= (FILE_BYTES / 2) as f64,
            "{ost}: {read} bytes read at the standby"
        );
    }

    // New writes land on the standby and read back.
    write_striped(&fs, "after", 8 * MIB, 9).await;
    let back = fs.read_file("/after", &Credentials::root()).await.unwrap();
    assert!(back[..] == pattern(0, (8 * MIB) as usize, 9)[..]);
    let fresh = tc.fs_client(Duration::from_secs(30)).await.unwrap();
    let back = fresh.read_file("/big", &Credentials::root()).await.unwrap();
    assert!(back[..] == pattern(0, FILE_BYTES as usize, 7)[..]);

    let fs_spec = format!("{}:/{FSNAME}", tc.mgs_addr);
    let (ok, out, err) = weft(&["fsck", "-n", &fs_spec]);
    assert!(ok, "weft fsck -n found problems:\n{out}{err}");

    // And back: the old primary, started again with the same flags, is now the standby;
    // when the other dies it takes the OSTs back.
    tc.oss.restart().unwrap();
    wait_until_async("the old primary stands by", || async {
        tc.oss.log().matches("standing by").count() == 2
    })
    .await;
    standby.kill().unwrap();
    wait_until_async("the MGS lists the OSTs at the first OSS again", || async {
        let _ = watcher.refresh().await;
        addresses(&watcher).iter().all(|(a, _)| *a == tc.oss_addr)
    })
    .await;
    for (name, len, seed) in [("/big", FILE_BYTES, 7), ("/after", 8 * MIB, 9)] {
        let back = fs.read_file(name, &Credentials::root()).await.unwrap();
        assert!(back[..] == pattern(0, len as usize, seed)[..], "{name}");
    }
    let mgs = scrape(&tc.metrics_addrs[0]).await;
    assert_eq!(value(&mgs, "weft_mgs_target_failovers_total", &[]), 4.0);
}

/// The same across hosts and through a real mount: OSS host oss1 serves OST0 and OST1,
/// oss2 stands by on the same directories; c2 reads, through its FUSE mount, files c1
/// wrote striped over both OSTs while oss1's OSS is killed (SIGKILL). Every read completes
/// byte-exact, the OSTs are then at oss2, new writes land, and `weft fsck -n` is clean.
/// Links are limited to 250 Mbit/s, so the reads are still going when the OSS dies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_of_an_ost_to_a_second_oss_host_under_a_reader_through_a_mount() {
    use std::io::Write;
    use weft_testkit::lab::{LabCluster, LabSpec};
    const FILES: u64 = 6;
    const LEN: usize = 8 << 20;
    let spec = LabSpec {
        servers: "srv".into(),
        oss: vec![("oss1".into(), 2)],
        clients: vec!["c1".into(), "c2".into()],
        link_mbit: Some(250),
        oss_disk_mib: None,
        failover_host: Some("oss2".into()),
        server_args: Vec::new(),
    };
    let mut lc = LabCluster::start(bin(), &spec).await.unwrap();
    let run = |host: &str, args: &[&str]| {
        let out = lc.lab.run(host, bin(), args).unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "weft {args:?} on {host}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        text
    };
    let (c1, c2) = (
        lc.mount("c1").unwrap().path.clone(),
        lc.mount("c2").unwrap().path.clone(),
    );
    std::fs::create_dir(c1.join("data")).unwrap();
    let data_dir = c1.join("data").display().to_string();
    run("c1", &["setstripe", "-c", "-1", "-S", "1M", &data_dir]);
    let write = |path: std::path::PathBuf, seed: u64| {
        let mut f = std::fs::File::create(path).unwrap();
        f.write_all(&pattern(0, LEN, seed)).unwrap();
        f.sync_all().unwrap();
    };
    for i in 0..FILES {
        write(c1.join(format!("data/f{i}")), i);
    }
    let oss1 = format!("{}:9402", lc.lab.host("oss1").unwrap().addr);
    let oss2 = format!("{}:9402", lc.lab.host("oss2").unwrap().addr);
    let fs = format!("{}:/{FSNAME}", lc.mgs_addr);
    let server = format!("obdfilter.{FSNAME}-OST0000.server");
    assert_eq!(
        run("srv", &["get_param", "-n", "--mgs", &lc.mgs_addr, &server]).trim(),
        oss1
    );

    // c2 has never read these files: every byte comes from the OSTs, at 31 MB/s.
    let done = Arc::new(AtomicU64::new(0));
    let reader = {
        let (c2, done) = (c2.clone(), done.clone());
        std::thread::spawn(move || {
            let mut slowest = Duration::ZERO;
            for i in 0..FILES {
                let started = Instant::now();
                let back = std::fs::read(c2.join(format!("data/f{i}")))?;
                slowest = slowest.max(started.elapsed());
                assert!(back == pattern(0, LEN, i), "f{i} reads back byte-exact");
                done.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<_, std::io::Error>(slowest)
        })
    };
    wait_until_async("c2 reads the first file", || async {
        done.load(Ordering::Relaxed) >= 1
    })
    .await;
    let before = done.load(Ordering::Relaxed);
    lc.oss[0].kill().unwrap();
    let slowest = tokio::task::spawn_blocking(move || reader.join().unwrap())
        .await
        .unwrap()
        .expect("no read fails across the failover");
    eprintln!("{before} of {FILES} files read before the kill; the slowest took {slowest:?}");
    assert!(
        before < FILES,
        "the reader was still reading when the OSS died"
    );

    assert_eq!(
        run("srv", &["get_param", "-n", "--mgs", &lc.mgs_addr, &server]).trim(),
        oss2
    );
    // New writes after the failover land and read back on the other client.
    write(c1.join("data/after"), 99);
    assert!(std::fs::read(c2.join("data/after")).unwrap() == pattern(0, LEN, 99));
    run("srv", &["fsck", "-n", &fs]);
}

/// An MDT fails over too: a standby MDS on the MDS's directory waits while the first
/// serves, and when it is killed (SIGKILL) takes MDT0 over; a loop that creates, writes,
/// fsyncs and closes files keeps going without an error (the client resends to the
/// failover address), every acknowledged file is there afterwards, and `weft fsck -n` is
/// clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_of_an_mdt_to_a_second_mds_under_a_creating_loop() {
    let mut tc = TestCluster::start(bin(), 2).await.unwrap();
    let d = tc.dir.path().to_owned();
    let standby_addr = format!("127.0.0.1:{}", free_port().unwrap());
    let standby_metrics = format!("127.0.0.1:{}", free_port().unwrap());
    tc.mds.stop().unwrap();
    tc.mds.add_args(&["--failover", &standby_addr]);
    tc.mds.restart().unwrap();
    tc.wait_ready().await.unwrap();
    let args: Vec<String> = [
        "mds",
        "--mgs",
        &tc.mgs_addr,
        "--listen",
        &standby_addr,
        "--mdt",
        &format!("0={}", d.join("mdt0").display()),
        "--failover",
        &tc.mds_addr,
        "--metrics",
        &standby_metrics,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut standby =
        ServerProcess::start("mds-standby", bin(), args, d.join("mds-standby.log")).unwrap();
    wait_until_async("the standby MDS stands by", || async {
        standby.log().contains("standing by")
    })
    .await;
    let watcher = tc.client().await.unwrap();
    let mdt0 = |c: &weft_client::Cluster| {
        let config = c.config();
        let t = config.target(TargetId::mdt(0)).expect("MDT0 registered");
        (t.address.clone(), t.failover.clone())
    };
    let _ = watcher.refresh().await;
    assert_eq!(
        mdt0(&watcher),
        (tc.mds_addr.clone(), vec![standby_addr.clone()])
    );

    let fs = tc.fs_client(Duration::from_secs(60)).await.unwrap();
    let cred = Credentials::root();
    let dir = fs
        .mkdir(Fid::ROOT, b"loop", 0o755, &cred)
        .await
        .unwrap()
        .fid;
    let body = |i: u64| pattern(0, 16384, i);
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let writer = {
        let (fs, cred, stop, done) = (fs.clone(), cred.clone(), stop.clone(), done.clone());
        tokio::spawn(async move {
            let mut slowest = Duration::ZERO;
            while !stop.load(Ordering::Relaxed) {
                let i = done.load(Ordering::Relaxed);
                let started = Instant::now();
                let opts = OpenOptions {
                    access: AccessMode::ReadWrite,
                    create: Some(0o644),
                    exclusive: true,
                    truncate: false,
                    append: false,
                };
                let f = fs
                    .open_in(dir, format!("f{i}").as_bytes(), opts, None, &cred)
                    .await?;
                f.write_at(0, &body(i)).await?;
                f.fsync().await?;
                f.close().await?;
                slowest = slowest.max(started.elapsed());
                done.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<_, weft_client::ClientError>(slowest)
        })
    };
    wait_until_async("a few files are made", || async {
        done.load(Ordering::Relaxed) >= 5
    })
    .await;
    tc.mds.kill().unwrap();
    wait_until_async("the MGS lists MDT0 at the standby", || async {
        let _ = watcher.refresh().await;
        mdt0(&watcher).0 == standby_addr
    })
    .await;
    let after = done.load(Ordering::Relaxed);
    wait_until_async("more files are made after the failover", || async {
        done.load(Ordering::Relaxed) >= after + 5
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    let slowest = writer
        .await
        .unwrap()
        .expect("no file operation fails across the MDT failover");
    let done = done.load(Ordering::Relaxed);
    eprintln!("{done} files across the MDT failover; the longest took {slowest:?}");
    assert_eq!(mdt0(&watcher).1, vec![tc.mds_addr.clone()]);
    for i in 0..done {
        let back = fs.read_file(&format!("/loop/f{i}"), &cred).await.unwrap();
        assert!(back[..] == body(i)[..], "f{i} reads back as written");
    }
    let fs_spec = format!("{}:/{FSNAME}", tc.mgs_addr);
    let (ok, out, err) = weft(&["fsck", "-n", &fs_spec]);
    assert!(ok, "weft fsck -n found problems:\n{out}{err}");
    let mgs = scrape(&tc.metrics_addrs[0]).await;
    assert_eq!(value(&mgs, "weft_mgs_target_failovers_total", &[]), 1.0);
    let m = scrape(&standby_metrics).await;
    assert_eq!(value(&m, "weft_mds_target_takeovers_total", &[]), 1.0);
    standby.kill().unwrap();
}
