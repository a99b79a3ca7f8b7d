//! A randomized fault campaign across lab hosts (issue 25 item 3): two client hosts run a
//! mixed workload through their mounts — checksummed files written and fsynced, renames,
//! unlinks, reads of what is acknowledged — while a seeded driver, once per round, kills
//! a server (SIGKILL) and starts it again, freezes one (SIGSTOP), or cuts a host's cable.
//! Applications must see a pause, never an error; after every round every acknowledged
//! name is there with its bytes, on both mounts, nothing else is, and `weft fsck -n` finds
//! nothing.
//!
//! `WEFT_CAMPAIGN_ROUNDS` (default 10) and `WEFT_CAMPAIGN_SEED` (default 1) choose the
//! run; `WEFT_CAMPAIGN_FULL=1` holds a fault 5–30 s instead of 0.5–3 s (the issue's
//! campaign; a round then takes up to a minute); `WEFT_CAMPAIGN_FAULTS=kill,freeze,cut,fill`
//! (or a part of that list) chooses the kinds of fault. Each round prints the longest
//! create (write and fsync) and read the workers saw: a restart's pause as a client sees
//! it.
//!
//! The workload runs in child processes — this test binary started again with
//! [`WORKER`] set, running this same test as one client's worker — never in threads of
//! the driver: while a thread of a process waits in a FUSE request on a killed server,
//! a process that process starts stalls in exec (kernel stack: `execve` …
//! `setup_arg_pages` … `move_page_tables`, state D) until the request ends, so the
//! driver could not start the server again until the mount gave up. Each worker appends
//! what it had acknowledged to a journal on local disk, which the driver checks.

use crate::bin;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use weft_testkit::lab::{LabCluster, LabSpec};
use weft_testkit::pattern;

/// Set in a worker's environment: the directory (on a mount) it works in.
const WORKER: &str = "WEFT_CAMPAIGN_WORKER";
/// This test's name, as the worker's command line selects it.
const TEST: &str = "campaign::acknowledged_data_and_names_survive_a_seeded_fault_campaign";
/// Marks the line of a worker's output with its longest create and read (seconds).
const LONGEST: &str = "longest:";
/// A worker keeps about this many files of its own: more, and it mostly unlinks.
const KEEP: usize = 150;

/// Each OSS host's disk: room for what the workers keep (about 2 × [`KEEP`] files of
/// 0.4 MiB on average, striped over both OSTs) many times over — deleted files' objects
/// go a few seconds after the unlink (the MDT's destroy worker yields to clients), and
/// the churn of a long round can leave hundreds of MiB waiting — yet quick to fill.
const OSS_DISK_MIB: u64 = 1024;

/// What one client has had acknowledged: file name → (content seed, length).
type Acked = BTreeMap<String, (u64, usize)>;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Reads a worker's journal: lines `put NAME SEED LEN`, `ren OLD NEW` and `del NAME`, each
/// written after the operation it records returned (and, for `put`, was fsynced), and
/// `nospc NAME` for a file whose write failed with ENOSPC (and which was unlinked).
fn replay(journal: &Path) -> Acked {
    let mut acked = Acked::new();
    let text = std::fs::read_to_string(journal).unwrap_or_default();
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        match f.as_slice() {
            ["put", name, seed, len] => {
                let v = (seed.parse().unwrap(), len.parse().unwrap());
                acked.insert(name.to_string(), v);
            }
            ["ren", old, new] => {
                let v = acked.remove(*old).expect("renamed file was acknowledged");
                acked.insert(new.to_string(), v);
            }
            ["del", name] => {
                acked.remove(*name).expect("unlinked file was acknowledged");
            }
            ["nospc", _] => {}
            _ => panic!("journal {}: bad line {line:?}", journal.display()),
        }
    }
    acked
}

fn record(journal: &mut std::fs::File, line: String) {
    journal
        .write_all(format!("{line}\n").as_bytes())
        .expect("journal append");
}

/// One client's workload, in a worker process, until the file `stop` exists. Names start
/// with `prefix`, so the clients never touch each other's files. `nospc_ok`: an OST may
/// be full this round, so a write may fail with ENOSPC.
fn workload(dir: &Path, prefix: &str, seed: u64, journal_path: &Path, stop: &Path, nospc_ok: bool) {
    let mut mine = replay(journal_path);
    let mut journal = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(journal_path)
        .expect("journal");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut n = 0u64;
    let fresh = |n: &mut u64| {
        *n += 1;
        format!("{prefix}{seed:x}-{n}")
    };
    // The longest create (write and fsync) and read: a fault's pause as a client sees it.
    let (mut longest_create, mut longest_read) = (0f64, 0f64);
    while !stop.exists() {
        let op = rng.random_range(0..10);
        let create = mine.is_empty() || (op < 5 && mine.len() < KEEP);
        if create {
            let name = fresh(&mut n);
            // Mostly small files; one in eight spans many 64 KiB stripes (up to 4 MiB).
            let max = if rng.random_range(0..8) == 0 {
                4 << 20
            } else {
                256 << 10
            };
            let len = rng.random_range(1..max);
            let content_seed = rng.random();
            let path = dir.join(&name);
            let t = std::time::Instant::now();
            let written = write_synced(&path, &pattern(0, len, content_seed));
            longest_create = longest_create.max(t.elapsed().as_secs_f64());
            match written {
                Ok(()) => {
                    record(&mut journal, format!("put {name} {content_seed} {len}"));
                    mine.insert(name, (content_seed, len));
                }
                // A full OST: the file was never acknowledged; it goes.
                Err(e) if nospc_ok && e.raw_os_error() == Some(libc::ENOSPC) => {
                    match std::fs::remove_file(&path) {
                        Ok(()) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        Err(e) => panic!("unlink of {name} after ENOSPC: {e}"),
                    }
                    record(&mut journal, format!("nospc {name}"));
                }
                Err(e) => panic!("write and fsync of {name}: {e}"),
            }
            continue;
        }
        let names: Vec<&String> = mine.keys().collect();
        let name = names[rng.random_range(0..names.len())].clone();
        let path = dir.join(&name);
        match op {
            0..=6 if mine.len() >= KEEP => {
                std::fs::remove_file(&path).unwrap_or_else(|e| panic!("unlink of {name}: {e}"));
                record(&mut journal, format!("del {name}"));
                mine.remove(&name);
            }
            5..=6 => {
                let new = fresh(&mut n);
                std::fs::rename(&path, dir.join(&new))
                    .unwrap_or_else(|e| panic!("rename of {name}: {e}"));
                record(&mut journal, format!("ren {name} {new}"));
                let v = mine.remove(&name).expect("known name");
                mine.insert(new, v);
            }
            7 => {
                std::fs::remove_file(&path).unwrap_or_else(|e| panic!("unlink of {name}: {e}"));
                record(&mut journal, format!("del {name}"));
                mine.remove(&name);
            }
            _ => {
                let (s, len) = mine[&name];
                let t = std::time::Instant::now();
                let back = std::fs::read(&path).unwrap_or_else(|e| panic!("read of {name}: {e}"));
                longest_read = longest_read.max(t.elapsed().as_secs_f64());
                assert!(back == pattern(0, len, s), "{name} reads back as written");
            }
        }
    }
    println!("{LONGEST} create {longest_create:.3} read {longest_read:.3}");
}

/// How many operations the workers have journaled so far, and how many of them are
/// writes refused with ENOSPC.
fn journal_lines(journals: &[PathBuf]) -> (usize, usize) {
    let text: String = journals
        .iter()
        .filter_map(|j| std::fs::read_to_string(j).ok())
        .collect();
    let nospc = text.lines().filter(|l| l.starts_with("nospc ")).count();
    (text.lines().count(), nospc)
}

fn write_synced(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let mut f = std::fs::File::create(path)?;
    f.write_all(data)?;
    f.sync_all()
}

/// A worker process: client `i`'s workload in `dir`, this round.
struct Worker {
    child: Child,
    log: PathBuf,
}

impl Worker {
    fn start(
        dir: &Path,
        i: usize,
        seed: u64,
        journal: &Path,
        stop: &Path,
        fill: bool,
        log: PathBuf,
    ) -> Self {
        let out = std::fs::File::create(&log).unwrap();
        let err = out.try_clone().unwrap();
        let child = Command::new(std::env::current_exe().unwrap())
            .args([TEST, "--exact", "--nocapture", "--test-threads=1"])
            .env(WORKER, dir)
            .env("WEFT_CAMPAIGN_PREFIX", format!("c{i}-"))
            .env("WEFT_CAMPAIGN_WORKER_SEED", seed.to_string())
            .env("WEFT_CAMPAIGN_JOURNAL", journal)
            .env("WEFT_CAMPAIGN_STOP", stop)
            .env("WEFT_CAMPAIGN_NOSPC_OK", if fill { "1" } else { "0" })
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap();
        Self { child, log }
    }

    /// Waits for the worker's end: its longest create and read (seconds), or its output
    /// if it failed.
    fn finish(mut self) -> Result<(f64, f64), String> {
        let status = tokio::task::block_in_place(|| self.child.wait()).unwrap();
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        if !status.success() {
            return Err(format!("worker failed ({status}):\n{log}"));
        }
        // libtest's "test NAME ... " may start the line.
        let line = log
            .lines()
            .find_map(|l| l.split_once(LONGEST).map(|(_, rest)| rest));
        let f: Vec<f64> = line
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        match f.as_slice() {
            [create, read] => Ok((*create, *read)),
            _ => Err(format!("worker printed no '{LONGEST}' line:\n{log}")),
        }
    }
}

/// The worker's side: runs when this binary was started by [`Worker::start`].
fn run_worker(dir: &Path) {
    let var = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("{k} unset"));
    let seed = var("WEFT_CAMPAIGN_WORKER_SEED").parse().unwrap();
    let journal = PathBuf::from(var("WEFT_CAMPAIGN_JOURNAL"));
    let stop = PathBuf::from(var("WEFT_CAMPAIGN_STOP"));
    let nospc_ok = var("WEFT_CAMPAIGN_NOSPC_OK") == "1";
    workload(
        dir,
        &var("WEFT_CAMPAIGN_PREFIX"),
        seed,
        &journal,
        &stop,
        nospc_ok,
    );
}

/// The kinds of [`Fault`], as `WEFT_CAMPAIGN_FAULTS` names them (default: all).
const FAULT_KINDS: [&str; 4] = ["kill", "freeze", "cut", "fill"];

/// The faults a round may inject.
#[derive(Debug)]
enum Fault {
    /// SIGKILL of process `.0`, started again after `.1`.
    Kill(usize, Duration),
    /// SIGSTOP of process `.0`, SIGCONT after `.1`.
    Freeze(usize, Duration),
    /// Host `.0`'s cable pulled, put back after `.1`.
    Cut(String, Duration),
    /// OSS host `.0`'s disk filled to the last block by a file beside its OST, removed
    /// after `.1`.
    Fill(String, Duration),
}

impl Fault {
    /// A fault of one of `kinds`, held 0.5–3 s (`long`: 5–30 s), on one of `hosts` for a
    /// cut. Processes: 0 MGS, 1 MDS, 2 and 3 the OSSes (see [`process`]).
    fn draw(rng: &mut StdRng, kinds: &[&str], long: bool, hosts: &[&str]) -> Self {
        let kind = loop {
            let k = rng.random_range(0..FAULT_KINDS.len());
            if kinds.contains(&FAULT_KINDS[k]) {
                break k;
            }
        };
        let hold = |rng: &mut StdRng| {
            let secs = match long {
                true => rng.random_range(5.0..30.0),
                false => rng.random_range(0.5..3.0),
            };
            Duration::from_secs_f64(secs)
        };
        match kind {
            0 => Fault::Kill(rng.random_range(0..4), hold(rng)),
            1 => Fault::Freeze(rng.random_range(0..4), hold(rng)),
            2 => Fault::Cut(hosts[rng.random_range(0..hosts.len())].into(), hold(rng)),
            _ => Fault::Fill(format!("oss{}", rng.random_range(1..3)), hold(rng)),
        }
    }
}

/// Fills the file system of `dir` with `dir/filler` until it has no block left.
fn fill(dir: &Path) -> std::io::Result<()> {
    let mut f = std::fs::File::create(dir.join("filler"))?;
    let chunk = vec![0xa5u8; 1 << 20];
    loop {
        match f.write(&chunk) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => return Ok(()),
            Err(e) => return Err(e),
        }
    }
}

/// Process `i` of the cluster: 0 MGS, 1 MDS, 2.. the OSSes.
fn process(lc: &mut LabCluster, i: usize) -> &mut weft_testkit::ServerProcess {
    match i {
        0 => &mut lc.mgs,
        1 => &mut lc.mds,
        k => &mut lc.oss[k - 2],
    }
}

/// Every acknowledged name with its bytes, on every mount, and nothing else.
fn check(mounts: &[PathBuf], want: &Acked, what: &str) {
    for m in mounts {
        let dir = m.join("campaign");
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        let expected: Vec<&String> = want.keys().collect();
        assert_eq!(
            names.iter().collect::<Vec<_>>(),
            expected,
            "{what}: names on {}",
            m.display()
        );
        for (name, (s, len)) in want {
            let back = std::fs::read(dir.join(name))
                .unwrap_or_else(|e| panic!("{what}: read of {name} on {}: {e}", m.display()));
            assert!(
                back == pattern(0, *len, *s),
                "{what}: {name}'s bytes on {}",
                m.display()
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_data_and_names_survive_a_seeded_fault_campaign() {
    if let Some(dir) = std::env::var_os(WORKER) {
        tokio::task::block_in_place(|| run_worker(Path::new(&dir)));
        return;
    }
    let rounds = env_u64("WEFT_CAMPAIGN_ROUNDS", 10);
    let seed = env_u64("WEFT_CAMPAIGN_SEED", 1);
    let full = std::env::var_os("WEFT_CAMPAIGN_FULL").is_some();
    let kinds_env = std::env::var("WEFT_CAMPAIGN_FAULTS").unwrap_or_default();
    let kinds: Vec<&str> = match kinds_env.is_empty() {
        true => FAULT_KINDS.to_vec(),
        false => kinds_env.split(',').collect(),
    };
    assert!(
        kinds.iter().all(|k| FAULT_KINDS.contains(k)),
        "WEFT_CAMPAIGN_FAULTS: a list of {FAULT_KINDS:?}"
    );
    eprintln!("fault campaign: {rounds} rounds, seed {seed}, long holds: {full}, faults {kinds:?}");
    let spec = LabSpec {
        servers: "srv".into(),
        oss: vec![("oss1".into(), 1), ("oss2".into(), 1)],
        clients: vec!["c1".into(), "c2".into()],
        link_mbit: None,
        oss_disk_mib: Some(OSS_DISK_MIB),
        server_args: Vec::new(),
        failover_host: None,
    };
    let hosts = ["srv", "oss1", "oss2", "c1", "c2"];
    let mut lc = LabCluster::start(bin(), &spec).await.unwrap();
    let mounts: Vec<PathBuf> = lc.mounts.iter().map(|m| m.path.clone()).collect();
    std::fs::create_dir(mounts[0].join("campaign")).unwrap();
    let dir = mounts[0].join("campaign").display().to_string();
    let out = lc
        .lab
        .run("c1", bin(), &["setstripe", "-c", "-1", "-S", "64K", &dir])
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let fs = format!("{}:/{}", lc.mgs_addr, weft_testkit::FSNAME);
    let work = lc.lab.dir().join("campaign");
    std::fs::create_dir(&work).unwrap();
    let journals: Vec<PathBuf> = (0..mounts.len())
        .map(|i| work.join(format!("journal-c{i}")))
        .collect();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut acked_total = 0;
    let (mut ops_before, mut nospc_before) = (0, 0);
    for round in 0..rounds {
        let fault = Fault::draw(&mut rng, &kinds, full, &hosts);
        eprintln!("round {round}: {fault:?}");
        let stop = work.join(format!("stop-{round}"));
        let filling = matches!(fault, Fault::Fill(..));
        let workers: Vec<Worker> = mounts
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let wseed = seed.wrapping_mul(1000).wrapping_add(round * 10 + i as u64);
                let log = work.join(format!("worker-c{i}-{round}.log"));
                let j = &journals[i];
                Worker::start(&m.join("campaign"), i, wseed, j, &stop, filling, log)
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(rng.random_range(300..1500))).await;
        match &fault {
            Fault::Kill(i, d) => {
                let p = process(&mut lc, *i);
                p.kill().unwrap();
                tokio::time::sleep(*d).await;
                p.restart().unwrap();
            }
            Fault::Freeze(i, d) => {
                process(&mut lc, *i).pause().unwrap();
                tokio::time::sleep(*d).await;
                process(&mut lc, *i).resume().unwrap();
            }
            Fault::Cut(host, d) => {
                lc.lab.set_link(host, false).unwrap();
                tokio::time::sleep(*d).await;
                lc.lab.set_link(host, true).unwrap();
            }
            Fault::Fill(host, d) => {
                let disk = lc.lab.host_dir(host).unwrap();
                tokio::task::block_in_place(|| fill(&disk)).unwrap();
                tokio::time::sleep(*d).await;
                std::fs::remove_file(disk.join("filler")).unwrap();
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        std::fs::write(&stop, b"").unwrap();
        let what = format!("round {round} ({fault:?})");
        let (mut longest, mut failed) = ((0f64, 0f64), Vec::new());
        for w in workers {
            match w.finish() {
                Ok((c, r)) => longest = (longest.0.max(c), longest.1.max(r)),
                Err(e) => failed.push(e),
            }
        }
        if !failed.is_empty() {
            // What the OSTs had then: space, and space promised to clients.
            let mut state = String::new();
            for args in [
                vec!["df", &fs],
                vec![
                    "get_param",
                    "--mgs",
                    &lc.mgs_addr,
                    "obdfilter.*.granted_bytes",
                ],
            ] {
                let out = lc.lab.run("srv", bin(), &args).unwrap();
                state.push_str(&String::from_utf8_lossy(&out.stdout));
                state.push_str(&String::from_utf8_lossy(&out.stderr));
            }
            panic!("{what}: {}\n--- cluster ---\n{state}", failed.join("\n"));
        }
        let mut want = Acked::new();
        for j in &journals {
            want.extend(replay(j));
        }
        let (ops, nospc) = journal_lines(&journals);
        eprintln!(
            "round {round}: {} operations acknowledged across it, {} writes refused (ENOSPC); \
             longest create {:.2} s, read {:.2} s",
            ops - ops_before - (nospc - nospc_before),
            nospc - nospc_before,
            longest.0,
            longest.1
        );
        (ops_before, nospc_before) = (ops, nospc);
        acked_total = want.len();
        tokio::task::block_in_place(|| check(&mounts, &want, &what));
        let out = lc.lab.run("srv", bin(), &["fsck", "-n", &fs]).unwrap();
        assert!(
            out.status.success(),
            "{what}: weft fsck -n found problems:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    eprintln!("fault campaign: {rounds} rounds clean, {acked_total} files acknowledged at the end");
}
