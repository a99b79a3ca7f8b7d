//! A mounted client's parameters and statistics: `weft get_param` / `set_param` reach the
//! mount through its control socket, `set_param -P` reaches it live through the MGS, and
//! its Prometheus endpoint (`-o metrics=HOST:PORT`) parses and counts its requests.

use crate::bin;
use crate::fuse_common::FuseMount;
use crate::support::weft;
use std::collections::HashMap;
use std::fs;
use std::process::{Command, Stdio};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use weft_testkit::TestCluster;
use weft_testkit::wait_until;

/// `get_param` output as name -> value (multi-line values joined).
fn params(out: &str) -> HashMap<String, String> {
    let mut map = HashMap::new();
    let mut last: Option<String> = None;
    for line in out.lines() {
        match line.split_once('=') {
            Some((n, v)) if !n.contains(' ') && n.contains('.') => {
                map.insert(n.to_string(), v.to_string());
                last = Some(n.to_string());
            }
            _ => {
                if let Some(n) = &last {
                    let v = map.entry(n.clone()).or_default();
                    v.push('\n');
                    v.push_str(line);
                }
            }
        }
    }
    map
}

/// The instance name of the client mounted at `mnt` (other tests' mounts may be on the
/// node too).
pub(crate) fn instance_of(mnt: &std::path::Path) -> String {
    let (ok, out, err) = weft(&["get_param", "llite.*.stats"]);
    assert!(ok, "{err}");
    let want = fs::canonicalize(mnt).unwrap();
    params(&out)
        .into_iter()
        .find(|(_, v)| v.contains(&format!("mountpoint       {}\n", want.display())))
        .map(|(n, _)| {
            n.trim_start_matches("llite.")
                .trim_end_matches(".stats")
                .to_string()
        })
        .unwrap_or_else(|| panic!("no client mounted at {}: {out}", want.display()))
}

async fn scrape(addr: &str) -> prometheus_parse::Scrape {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).await.unwrap();
    let (head, body) = resp.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_string()))).unwrap()
}

fn sample(s: &prometheus_parse::Scrape, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    s.samples
        .iter()
        .find(|x| x.metric == name && labels.iter().all(|(k, v)| x.labels.get(k) == Some(*v)))
        .and_then(|x| match x.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => Some(v),
            _ => None,
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mounted_client_shows_and_takes_its_parameters() {
    let tc = TestCluster::start(bin(), 2).await.unwrap();
    let port = weft_testkit::free_port().unwrap();
    let maddr = format!("127.0.0.1:{port}");
    let m = FuseMount::start(&tc, &format!("metrics={maddr}"));
    let data = vec![5u8; 3 << 20];
    fs::write(m.path("f"), &data).unwrap();
    assert_eq!(fs::read(m.path("f")).unwrap(), data);
    let inst = instance_of(&m.mnt);

    // Knobs and per-target request statistics with wait times.
    let (ok, out, err) = weft(&["get_param", &format!("osc.{inst}.*"), "mdc.*.stats"]);
    assert!(ok, "{err}");
    let p = params(&out);
    assert_eq!(p[&format!("osc.{inst}.max_rpcs_in_flight")], "8");
    let mdc = p
        .iter()
        .find(|(n, _)| n.starts_with("mdc.") && n.ends_with(&format!("-mdc-{inst}.stats")))
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| panic!("no mdc stats: {out}"));
    assert!(
        mdc.contains("create") && mdc.contains("req_waittime"),
        "{mdc}"
    );
    let (_, out, _) = weft(&["get_param", "osc.*-OST*-osc-*.stats"]);
    let osc: String = params(&out)
        .into_iter()
        .filter(|(n, _)| n.ends_with(&format!("-osc-{inst}.stats")))
        .map(|(_, v)| v)
        .collect();
    assert!(osc.contains("write") && osc.contains("bulk_bytes"), "{osc}");

    // set_param without -P: this node's mount, now.
    let (ok, out, err) = weft(&["set_param", &format!("osc.{inst}.max_rpcs_in_flight=3")]);
    assert!(ok, "{err}");
    assert!(out.contains("=3"), "{out}");
    let (_, out, _) = weft(&["get_param", "-n", &format!("osc.{inst}.max_rpcs_in_flight")]);
    assert_eq!(out.trim(), "3");
    let (ok, _, err) = weft(&["set_param", &format!("osc.{inst}.max_rpcs_in_flight=0")]);
    assert!(!ok && err.contains("not a number from 1"), "{err}");
    let (ok, _, err) = weft(&["set_param", "osc.*.no_such_knob=1"]);
    assert!(!ok && err.contains("no parameter"), "{err}");

    // set_param -P: stored on the MGS and applied by the running mount.
    let (ok, _, err) = weft(&[
        "set_param",
        "--mgs",
        &tc.mgs_addr,
        "-P",
        "llite.*.max_read_ahead_per_file_mb=17",
    ]);
    assert!(ok, "{err}");
    wait_until("the running mount applies the stored setting", || {
        let (_, out, _) = weft(&[
            "get_param",
            "-n",
            &format!("llite.{inst}.max_read_ahead_per_file_mb"),
        ]);
        out.trim() == "17"
    });

    // The Prometheus endpoint: the same figures, parsed by a real parser.
    let s = scrape(&maddr).await;
    let writes = sample(&s, "weft_client_requests_total", &[("op", "write")]).unwrap();
    assert!(writes >= 1.0, "write RPCs counted: {writes}");
    assert!(
        sample(
            &s,
            "weft_client_request_duration_seconds_count",
            &[("op", "create")]
        )
        .is_some()
    );
    assert_eq!(
        sample(
            &s,
            "weft_client_param",
            &[("name", &format!("llite.{inst}.max_read_ahead_per_file_mb"))]
        ),
        Some(17.0)
    );
    assert!(sample(&s, "weft_client_cached_bytes", &[]).is_some());

    // The stored setting survives restarting every server process: a new mount takes it.
    drop(m);
    let mut tc = tc;
    tc.mgs.kill().unwrap();
    tc.mds.kill().unwrap();
    tc.oss.kill().unwrap();
    tc.mgs.restart().unwrap();
    tc.mds.restart().unwrap();
    tc.oss.restart().unwrap();
    tc.wait_ready().await.unwrap();
    let m2 = FuseMount::start(&tc, "");
    assert_eq!(fs::read(m2.path("f")).unwrap(), data);
    let inst2 = instance_of(&m2.mnt);
    assert_ne!(inst2, inst);
    let (_, out, _) = weft(&[
        "get_param",
        "--mgs",
        &tc.mgs_addr,
        "-n",
        &format!("llite.{inst2}.max_read_ahead_per_file_mb"),
    ]);
    assert_eq!(out.trim(), "17");
}

/// The bulk bytes of operation `op` that `job_stats` of every OST attribute to `job`.
fn job_bytes(out: &str, job: &str, op: &str) -> u64 {
    let mut total = 0;
    let mut in_job = false;
    for line in out.lines() {
        let t = line.trim();
        if let Some(j) = t.strip_prefix("- job_id:") {
            in_job = j.trim() == job;
        } else if in_job && t.starts_with(&format!("{op}:")) {
            total += t
                .split("bulk_bytes:")
                .nth(1)
                .and_then(|v| v.trim().trim_end_matches('}').trim().parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_statistics_name_the_job_of_the_calling_process() {
    let tc = TestCluster::start(bin(), 2).await.unwrap();
    let m = FuseMount::start(&tc, "");
    let f = m.path("ckpt");
    let run = |env: &[(&str, &str)], args: &[&str]| {
        let mut c = Command::new("dd");
        c.env_clear().env("PATH", "/usr/bin:/bin");
        for (k, v) in env {
            c.env(k, v);
        }
        let st = c
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(st.success());
    };
    // A batch job's process: its SLURM_JOB_ID names the job.
    run(
        &[("SLURM_JOB_ID", "4242")],
        &[
            "if=/dev/zero",
            &format!("of={}", f.display()),
            "bs=1M",
            "count=3",
            "conv=fsync",
        ],
    );
    // Without it: the fallback, executable name and uid (`%e.%u`).
    run(
        &[],
        &[
            "if=/dev/zero",
            &format!("of={}", m.path("other").display()),
            "bs=1M",
            "count=2",
            "conv=fsync",
        ],
    );
    let (ok, out, err) = weft(&["get_param", "--mgs", &tc.mgs_addr, "obdfilter.*.job_stats"]);
    assert!(ok, "{err}");
    assert_eq!(job_bytes(&out, "4242", "write"), 3 << 20, "{out}");
    assert_eq!(job_bytes(&out, "dd.0", "write"), 2 << 20, "{out}");
    let (_, md, _) = weft(&["get_param", "--mgs", &tc.mgs_addr, "mdt.*.job_stats"]);
    assert!(md.contains("- job_id:          4242"), "{md}");
}

/// A process that execs while it holds a file of the mount open closes that descriptor
/// inside `execve` (close-on-exec), which sends FLUSH while the kernel keeps the process's
/// environment locked. The mount must not read that environment for the FLUSH's job id
/// (it would wait for the exec, which waits for the FLUSH): the exec completes, and the
/// bytes the FLUSH writes back are counted for the job that wrote them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_with_a_file_of_the_mount_open_completes() {
    use std::io::Write;
    let tc = TestCluster::start(bin(), 2).await.unwrap();
    let m = FuseMount::start(&tc, "");
    let f = m.path("held");
    // Rust opens with O_CLOEXEC; the buffered bytes go out with the exec's FLUSH.
    let mut held = fs::File::create(&f).unwrap();
    held.write_all(&[5u8; 300_000]).unwrap();
    let mut child = Command::new("true").spawn().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        match child.try_wait().unwrap() {
            Some(st) => {
                assert!(st.success());
                break;
            }
            None if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(20))
            }
            None => panic!("a child exec'ing with a file of the mount open never finished"),
        }
    }
    // The child's FLUSH wrote the bytes back: another client sees them before our close.
    let fs2 = tc
        .fs_client(std::time::Duration::from_secs(10))
        .await
        .unwrap();
    let attr = fs2
        .resolve("/held", false, &weft_proto::mdt::Credentials::root())
        .await
        .unwrap();
    assert_eq!(fs2.getattr(attr.fid).await.unwrap().size, 300_000);
    drop(held);
    let (ok, out, err) = weft(&["get_param", "--mgs", &tc.mgs_addr, "obdfilter.*.job_stats"]);
    assert!(ok, "{err}");
    assert_eq!(job_bytes(&out, "true.0", "write"), 0, "{out}");
}

/// `llite.INST.statahead_stats` of the mount at `mnt`, by name.
pub(crate) fn statahead_figures(mnt: &std::path::Path) -> std::collections::BTreeMap<String, u64> {
    let inst = instance_of(mnt);
    let (ok, out, err) = weft(&["get_param", "-n", &format!("llite.{inst}.statahead_stats")]);
    assert!(ok, "{err}");
    out.lines()
        .filter_map(|l| l.split_once(' '))
        .filter_map(|(n, v)| Some((n.to_string(), v.trim().parse::<u64>().ok()?)))
        .collect()
}

/// `llite.INST.statahead_stats` of the mount at `mnt`: (hits, scans, entries).
fn statahead_stats(mnt: &std::path::Path) -> (u64, u64, u64) {
    let f = statahead_figures(mnt);
    let field = |name: &str| *f.get(name).unwrap_or_else(|| panic!("no {name} in {f:?}"));
    (field("hits"), field("scans"), field("entries"))
}

/// Stats of many names in one directory are answered from one readdirplus scan
/// (statahead), with the attributes the MDT has; a create through the mount leaves the
/// other names usable, a rename through it voids what the scan read, a name created
/// elsewhere after the scan is found, and `statahead_max=0` turns it off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_of_a_directory_come_from_statahead_and_stay_true() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let tc = TestCluster::start(bin(), 1).await.unwrap();
    let writer = FuseMount::start(&tc, "");
    // Long timeouts: the scan stays fresh however slow the machine is.
    let reader = FuseMount::start(&tc, "entry_timeout=60,attr_timeout=60");
    const N: usize = 300;
    fs::create_dir(writer.path("d")).unwrap();
    for i in 0..N {
        let p = writer.path(&format!("d/f{i:04}"));
        fs::write(&p, vec![1u8; i]).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o600 + (i as u32 % 64))).unwrap();
    }
    let check = |i: usize| {
        let m = fs::metadata(reader.path(&format!("d/f{i:04}"))).unwrap();
        assert_eq!(m.len(), i as u64, "size of f{i:04}");
        assert_eq!(
            m.mode() & 0o7777,
            0o600 + (i as u32 % 64),
            "mode of f{i:04}"
        );
    };
    // The reader's kernel has never seen these names: each stat is a lookup. The first
    // few go to the MDT and start a scan of the directory.
    for i in 0..10 {
        check(i);
    }
    wait_until("a scan read the whole directory", || {
        let (_, scans, entries) = statahead_stats(&reader.mnt);
        scans == 1 && entries >= N as u64
    });
    let (hits0, _, _) = statahead_stats(&reader.mnt);
    for i in 10..200 {
        check(i);
    }
    let (hits1, scans, _) = statahead_stats(&reader.mnt);
    assert!(
        hits1 - hits0 >= 190,
        "190 stats, {} from statahead",
        hits1 - hits0
    );
    assert_eq!(scans, 1);

    // A name created elsewhere after the scan is found (no negative answer from it).
    fs::write(writer.path("d/late"), b"x").unwrap();
    assert_eq!(fs::metadata(reader.path("d/late")).unwrap().len(), 1);

    // A change made through the reader's mount of other entries leaves the rest of the
    // scan usable: a create there, then stats of names it did not touch.
    fs::write(reader.path("d/mine"), b"yz").unwrap();
    for i in 200..250 {
        check(i);
    }
    let (hits2, scans, _) = statahead_stats(&reader.mnt);
    assert_eq!((hits2 - hits1, scans), (50, 1));

    // A change through the reader that may touch any inode (a rename) voids what is left:
    // f0250, renamed through the writer, is not answered from it. (The kernel looks up
    // f0260 for the rename: one more hit.) The stats that follow go to the MDT: a
    // directory is scanned once per freshness period (60 s here).
    fs::rename(writer.path("d/f0250"), writer.path("d/moved")).unwrap();
    fs::rename(reader.path("d/f0260"), reader.path("d/g0260")).unwrap();
    for i in 250..N {
        match i {
            250 => assert!(fs::metadata(reader.path("d/f0250")).is_err(), "stale f0250"),
            260 => assert_eq!(fs::metadata(reader.path("d/g0260")).unwrap().len(), 260),
            _ => check(i),
        }
    }
    assert_eq!(fs::metadata(reader.path("d/moved")).unwrap().len(), 250);
    let (hits3, scans3, _) = statahead_stats(&reader.mnt);
    assert_eq!((hits3, scans3), (hits2 + 1, 1));

    // Off: no scan of a second directory.
    let inst = instance_of(&reader.mnt);
    let (ok, _, err) = weft(&["set_param", &format!("llite.{inst}.statahead_max=0")]);
    assert!(ok, "{err}");
    fs::create_dir(writer.path("e")).unwrap();
    for i in 0..50 {
        fs::write(writer.path(&format!("e/f{i}")), b"").unwrap();
    }
    for i in 0..50 {
        fs::metadata(reader.path(&format!("e/f{i}"))).unwrap();
    }
    assert_eq!(
        statahead_stats(&reader.mnt).1,
        scans3,
        "a scan with statahead off"
    );
    assert_eq!(statahead_stats(&reader.mnt).0, hits3);
}

/// Removing a directory's files one by one (each looked up, then unlinked) keeps using
/// one statahead scan: the unlinks void only their own names, so most lookups cost no MDT
/// round trip, and a removed name is never answered from the scan.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unlink_loop_keeps_its_directory_scan() {
    let tc = TestCluster::start(bin(), 1).await.unwrap();
    let writer = FuseMount::start(&tc, "");
    // Long timeouts: the scan stays fresh however slow the machine is.
    let remover = FuseMount::start(&tc, "entry_timeout=60,attr_timeout=60");
    const N: usize = 400;
    fs::create_dir(writer.path("d")).unwrap();
    for i in 0..N {
        fs::write(writer.path(&format!("d/f{i:04}")), b"x").unwrap();
    }
    assert!(fs::metadata(remover.path("d")).unwrap().is_dir());
    let mut sent = 0;
    let mut lookups = mdc_count(&remover.mnt, "lookup");
    for i in 0..N {
        fs::remove_file(remover.path(&format!("d/f{i:04}"))).unwrap();
        if i % 50 == 0 {
            sent += mdc_count(&remover.mnt, "lookup") - lookups;
            // Names removed earlier stay removed (these lookups may go to the MDT).
            for j in (0..=i).step_by(7) {
                let gone = fs::metadata(remover.path(&format!("d/f{j:04}")));
                assert!(gone.is_err(), "f{j:04} is back");
            }
            lookups = mdc_count(&remover.mnt, "lookup");
        }
    }
    sent += mdc_count(&remover.mnt, "lookup") - lookups;
    assert!(sent < 60, "{sent} lookups of {N} went to the MDT");
    assert_eq!(fs::read_dir(writer.path("d")).unwrap().count(), 0);
}

/// Requests of operation `op` the mount at `mnt` sent to its MDTs (`mdc.*.stats`).
fn mdc_count(mnt: &std::path::Path, op: &str) -> u64 {
    let inst = instance_of(mnt);
    let (ok, out, err) = weft(&["get_param", &format!("mdc.*-mdc-{inst}.stats")]);
    assert!(ok, "{err}");
    out.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some(op)).then(|| w.next()?.parse::<u64>().ok())?
        })
        .sum()
}

/// A listing through readdirplus costs readdir round trips only: the kernel skips the
/// attributes of `.` and `..`, so none are fetched for them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_asks_the_mdt_for_pages_only() {
    let tc = TestCluster::start(bin(), 1).await.unwrap();
    let writer = FuseMount::start(&tc, "");
    fs::create_dir(writer.path("l")).unwrap();
    for n in ["a", "b", "c"] {
        fs::write(writer.path(&format!("l/{n}")), n).unwrap();
    }
    let reader = FuseMount::start(&tc, "");
    fs::metadata(reader.path("l")).unwrap();
    let (getattrs, readdirs) = (
        mdc_count(&reader.mnt, "getattr"),
        mdc_count(&reader.mnt, "readdir"),
    );
    let mut names: Vec<String> = fs::read_dir(reader.path("l"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["a", "b", "c"]);
    assert_eq!(
        mdc_count(&reader.mnt, "getattr"),
        getattrs,
        "getattrs for a listing"
    );
    assert!(mdc_count(&reader.mnt, "readdir") > readdirs);
    // `.` and `..` are listed, with their inode numbers.
    use std::os::unix::fs::MetadataExt;
    let out = std::process::Command::new("ls")
        .args(["-ai"])
        .arg(reader.path("l"))
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&out.stdout).into_owned();
    let ino_of = |name: &str| {
        listing
            .split_whitespace()
            .collect::<Vec<_>>()
            .chunks(2)
            .find(|c| c.get(1) == Some(&name))
            .and_then(|c| c[0].parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no {name} in {listing}"))
    };
    assert_eq!(ino_of("."), fs::metadata(reader.path("l")).unwrap().ino());
    assert_eq!(ino_of(".."), fs::metadata(&reader.mnt).unwrap().ino());

    // A long listing: the kernel asks with attributes first and without them after
    // (`readdirplus_auto`). A first page of 64 entries with attributes, then pages of
    // 1024 without them fetched ahead serve the plain requests: 64 + 1024 + 412, three
    // MDT round trips, none fetched twice.
    fs::create_dir(writer.path("big")).unwrap();
    for i in 0..1500 {
        fs::File::create(writer.path(&format!("big/{i}"))).unwrap();
    }
    let before = mdc_count(&reader.mnt, "readdir");
    assert_eq!(fs::read_dir(reader.path("big")).unwrap().count(), 1500);
    assert_eq!(
        mdc_count(&reader.mnt, "readdir") - before,
        3,
        "MDT pages for 1500 entries"
    );
}

/// The kernel asks for a directory's attributes again after every create or unlink in it
/// (it drops them, and needs them for the next path walk): the mount answers with those
/// the MDT returned with the change, without a round trip, and they are exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_changed_through_the_mount_is_stated_without_a_round_trip() {
    use std::os::unix::fs::MetadataExt;
    let tc = TestCluster::start(bin(), 1).await.unwrap();
    let m = FuseMount::start(&tc, "");
    let other = FuseMount::start(&tc, "");
    fs::create_dir(m.path("d")).unwrap();
    fs::create_dir(m.path("d/sub")).unwrap();
    // (A mkdir does not return its directory.)
    fs::metadata(m.path("d")).unwrap();
    let getattrs = mdc_count(&m.mnt, "getattr");
    for i in 0..20 {
        fs::File::create(m.path(&format!("d/f{i}"))).unwrap();
    }
    for i in 0..10 {
        fs::remove_file(m.path(&format!("d/f{i}"))).unwrap();
    }
    let here = fs::metadata(m.path("d")).unwrap();
    assert_eq!(
        mdc_count(&m.mnt, "getattr"),
        getattrs,
        "getattrs for 30 changes in one directory"
    );
    let there = fs::metadata(other.path("d")).unwrap();
    let seen = |a: &fs::Metadata| {
        (
            a.mtime(),
            a.mtime_nsec(),
            a.ctime(),
            a.ctime_nsec(),
            a.nlink(),
        )
    };
    assert_eq!(seen(&here), seen(&there));
    assert_eq!(here.nlink(), 3);
    assert_eq!(fs::read_dir(m.path("d")).unwrap().count(), 11);
}

/// The MDT answers namespace changes before its disk holds them. What a client synced
/// through the mount (`fsync(2)` of a file, of a directory) survives losing everything
/// else: the MDS is killed and its redo log deleted, as a power failure could leave it.
/// What was not synced is gone, so the syncs were what kept the rest. An fsync with
/// nothing changed since costs no MDT request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_an_fsync_through_the_mount_synced_survives_losing_the_redo_log() {
    let mut tc = TestCluster::start(bin(), 1).await.unwrap();
    tc.hold_mds_commits().await.unwrap();
    let m = FuseMount::start(&tc, "");
    fs::create_dir(m.path("d")).unwrap();
    let mut g = fs::File::create_new(m.path("d/g")).unwrap();
    std::io::Write::write_all(&mut g, b"abc").unwrap();
    g.sync_all().unwrap();
    let syncs = mdc_count(&m.mnt, "sync");
    g.sync_all().unwrap();
    assert_eq!(mdc_count(&m.mnt, "sync"), syncs, "nothing changed since");
    drop(g);
    for i in 0..5 {
        fs::write(m.path(&format!("d/f{i}")), b"x").unwrap();
    }
    fs::File::open(m.path("d")).unwrap().sync_all().unwrap();
    fs::write(m.path("d/late"), b"zz").unwrap();

    tc.mds.kill().unwrap();
    let redo = tc.dir.path().join("mdt0").join(weft_mdt::redo::REDO_FILE);
    fs::remove_file(&redo).unwrap();
    tc.mds.restart().unwrap();
    tc.wait_ready().await.unwrap();

    let fresh = FuseMount::start(&tc, "");
    let mut names: Vec<String> = fs::read_dir(fresh.path("d"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["f0", "f1", "f2", "f3", "f4", "g"]);
    assert_eq!(fs::read(fresh.path("d/g")).unwrap(), b"abc");
}

/// Bytes of `path` in the kernel's page cache (`mincore` over a shared mapping of it).
fn resident_bytes(path: &std::path::Path) -> u64 {
    use std::os::fd::AsRawFd;
    let f = fs::File::open(path).unwrap();
    let len = f.metadata().unwrap().len() as usize;
    let page = 4096usize;
    // SAFETY: a read-only shared mapping of `len` bytes of an open file, unmapped below
    // before the file closes; mincore writes one byte per page into a vector that long.
    // No safe interface reports page-cache residency.
    unsafe {
        let at = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        );
        assert_ne!(at, libc::MAP_FAILED, "{}", std::io::Error::last_os_error());
        let mut vec = vec![0u8; len.div_ceil(page)];
        let rc = libc::mincore(at, len, vec.as_mut_ptr());
        libc::munmap(at, len);
        assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
        vec.iter().filter(|&&b| b & 1 == 1).count() as u64 * page as u64
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kernel_keeps_at_most_max_cached_mb_of_the_mounts_files() {
    let tc = TestCluster::start(bin(), 2).await.unwrap();
    let m = FuseMount::start(&tc, "");
    let inst = instance_of(&m.mnt);
    const MIB: u64 = 1 << 20;
    let a = m.path("a");
    let b = m.path("b");
    let data: Vec<u8> = (0..48 * MIB).map(|i| (i * 7 % 251) as u8).collect();
    fs::write(&a, &data).unwrap();
    fs::write(&b, &data).unwrap();

    // Under the default bound (1,024 MiB) a file read whole stays in the kernel's cache.
    assert_eq!(fs::read(&a).unwrap(), data);
    let cached = resident_bytes(&a);
    assert!(cached >= 40 * MIB, "only {cached} bytes of a cached");

    // Under 8 MiB, reading b drops the oldest pages (a's first, then b's own oldest).
    let (ok, _, err) = weft(&["set_param", &format!("llite.{inst}.max_cached_mb=8")]);
    assert!(ok, "{err}");
    assert_eq!(fs::read(&b).unwrap(), data);
    wait_until("the kernel drops pages down to the bound", || {
        resident_bytes(&a) + resident_bytes(&b) <= 8 * MIB
    });
    // What stayed is b's end (filled last), and the bytes read again are still right.
    assert!(resident_bytes(&b) > 0);
    assert_eq!(fs::read(&a).unwrap(), data);
    assert_eq!(fs::read(&b).unwrap(), data);
}
