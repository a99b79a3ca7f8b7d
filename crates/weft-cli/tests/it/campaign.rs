//! A randomized fault campaign across lab hosts (issue 25 item 3): two client hosts run a
//! mixed workload through their mounts — checksummed files written and fsynced, renames,
//! unlinks, reads of what is acknowledged — while a seeded driver, once per round, kills
//! and restarts a server (SIGKILL), freezes one (SIGSTOP), or cuts an OSS host's cable.
//! Applications must see a pause, never an error; after every round every acknowledged
//! name is there with its bytes, on both mounts, nothing else is, and `weft fsck -n` finds
//! nothing.
//!
//! `WEFT_CAMPAIGN_ROUNDS` (default 10) and `WEFT_CAMPAIGN_SEED` (default 1) choose the
//! run; `WEFT_CAMPAIGN_FULL=1` freezes servers for 5–30 s instead of 1–3 s.
//!
//! It fails today, so it is `#[ignore]`d (counted as skipped; run it with `cargo test -p
//! weft-cli --test it -- --ignored campaign::`), and the failure is the harness's, not the
//! file system's: the workload's threads and the fault driver share the test process, and
//! while one of its threads waits in a FUSE request on a killed server, a process this test
//! process starts stalls in exec (kernel stack: `execve` … `setup_arg_pages` …
//! `move_page_tables`, state D) until that request ends. So the OSS restart (and, before
//! `ServerProcess::signal` sent signals itself, the SIGCONT of a freeze; still the `ip` of
//! a cable cut) happens only once the mount's I/O gave up after `io_retry` (60 s): EIO
//! or ETIMEDOUT. The same loop in a process of its own rides out the same faults
//! (`restart::fsynced_writes_through_a_mount_ride_out_an_oss_kill_and_server_freezes`).
//! To pass, the workload must run in child processes, or the lab must start servers from a
//! process whose threads never wait on the mount.
//! The default campaign kills and restarts servers; `WEFT_CAMPAIGN_ALL=1` also freezes
//! them and cuts OSS cables.

use crate::bin;
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use weft_testkit::lab::{LabCluster, LabSpec};
use weft_testkit::pattern;

/// What the workload has had acknowledged: file name → (content seed, length).
type Acked = Arc<Mutex<BTreeMap<String, (u64, usize)>>>;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One client's workload until `stop`: names start with `prefix`, so the clients never
/// touch each other's files and the model needs no ordering between them.
fn workload(mnt: PathBuf, prefix: String, seed: u64, acked: Acked, stop: Arc<AtomicBool>) {
    let dir = mnt.join("campaign");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let mine: Vec<String> = acked
            .lock()
            .keys()
            .filter(|k| k.starts_with(&prefix))
            .cloned()
            .collect();
        let op = rng.random_range(0..10);
        if op < 5 || mine.is_empty() {
            n += 1;
            let name = format!("{prefix}{seed:x}-{n}");
            let len = rng.random_range(1..256 << 10);
            let content_seed = rng.random();
            let data = pattern(0, len, content_seed);
            write_synced(&dir.join(&name), &data)
                .unwrap_or_else(|e| panic!("{}: write and fsync of {name}: {e}", mnt.display()));
            acked.lock().insert(name, (content_seed, len));
        } else {
            let name = &mine[rng.random_range(0..mine.len())];
            let path = dir.join(name);
            match op {
                5..=6 => {
                    let new = format!("{name}r");
                    std::fs::rename(&path, dir.join(&new))
                        .unwrap_or_else(|e| panic!("rename of {name}: {e}"));
                    let mut a = acked.lock();
                    if let Some(v) = a.remove(name) {
                        a.insert(new, v);
                    }
                }
                7 => {
                    std::fs::remove_file(&path).unwrap_or_else(|e| panic!("unlink of {name}: {e}"));
                    acked.lock().remove(name);
                }
                _ => {
                    let (s, len) = acked.lock()[name];
                    let back =
                        std::fs::read(&path).unwrap_or_else(|e| panic!("read of {name}: {e}"));
                    assert!(back == pattern(0, len, s), "{name} reads back as written");
                }
            }
        }
    }
}

fn write_synced(path: &Path, data: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut f = std::fs::File::create(path)?;
    f.write_all(data)?;
    f.sync_all()
}

/// The faults a round may inject.
#[derive(Debug)]
enum Fault {
    Kill(usize),
    Freeze(usize, Duration),
    Cut(String, Duration),
}

/// Process `i` of the cluster: 0 MGS, 1 MDS, 2.. the OSSes.
fn process(lc: &mut LabCluster, i: usize) -> &mut weft_testkit::ServerProcess {
    match i {
        0 => &mut lc.mgs,
        1 => &mut lc.mds,
        k => &mut lc.oss[k - 2],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "harness: a server started again from this process stalls while its workload threads wait on the mount (issue 25)"]
async fn acknowledged_data_and_names_survive_a_seeded_fault_campaign() {
    let rounds = env_u64("WEFT_CAMPAIGN_ROUNDS", 10);
    let seed = env_u64("WEFT_CAMPAIGN_SEED", 1);
    let full = std::env::var_os("WEFT_CAMPAIGN_FULL").is_some();
    let all = std::env::var_os("WEFT_CAMPAIGN_ALL").is_some();
    eprintln!("fault campaign: {rounds} rounds, seed {seed}, every fault: {all}");
    let spec = LabSpec {
        servers: "srv".into(),
        oss: vec![("oss1".into(), 1), ("oss2".into(), 1)],
        clients: vec!["c1".into(), "c2".into()],
        link_mbit: None,
    };
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
    let acked: Acked = Arc::default();
    let mut rng = StdRng::seed_from_u64(seed);
    let hold = |rng: &mut StdRng| {
        let secs = if full {
            rng.random_range(5.0..30.0)
        } else {
            rng.random_range(1.0..3.0)
        };
        Duration::from_secs_f64(secs)
    };
    for round in 0..rounds {
        let stop = Arc::new(AtomicBool::new(false));
        let workers: Vec<_> = mounts
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let (m, acked, stop) = (m.clone(), acked.clone(), stop.clone());
                let wseed = seed.wrapping_mul(1000).wrapping_add(round * 10 + i as u64);
                std::thread::spawn(move || workload(m, format!("c{i}-"), wseed, acked, stop))
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(rng.random_range(200..1000))).await;
        let kinds = if all { 3 } else { 1 };
        // Processes: 0 MGS, 1 MDS, 2 and 3 the OSSes (see `process`).
        let fault = match rng.random_range(0..kinds) {
            0 => Fault::Kill(rng.random_range(0..4)),
            1 => Fault::Freeze(rng.random_range(0..4), hold(&mut rng)),
            _ => Fault::Cut(format!("oss{}", rng.random_range(1..3)), hold(&mut rng)),
        };
        eprintln!("round {round}: {fault:?}");
        match &fault {
            Fault::Kill(i) => {
                let p = process(&mut lc, *i);
                p.kill().unwrap();
                tokio::time::sleep(Duration::from_millis(500)).await;
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
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        stop.store(true, Ordering::Relaxed);
        for w in workers {
            if let Err(e) = tokio::task::block_in_place(|| w.join()) {
                std::panic::resume_unwind(e);
            }
        }
        // Every acknowledged name with its bytes, on both mounts, and nothing else.
        let want = acked.lock().clone();
        for m in &mounts {
            let mut names: Vec<String> = std::fs::read_dir(m.join("campaign"))
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            names.sort();
            let expected: Vec<String> = want.keys().cloned().collect();
            assert_eq!(
                names,
                expected,
                "round {round} ({fault:?}): names on {}",
                m.display()
            );
            for (name, (s, len)) in &want {
                let back = std::fs::read(m.join("campaign").join(name)).unwrap();
                assert!(
                    back == pattern(0, *len, *s),
                    "round {round}: {name} on {}",
                    m.display()
                );
            }
        }
        let out = lc.lab.run("srv", bin(), &["fsck", "-n", &fs]).unwrap();
        assert!(
            out.status.success(),
            "round {round} ({fault:?}): weft fsck -n found problems:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    eprintln!(
        "fault campaign: {rounds} rounds clean, {} files acknowledged",
        acked.lock().len()
    );
}
