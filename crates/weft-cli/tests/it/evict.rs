//! Eviction (issue 25) on the multi-host lab: a client host whose cable is pulled stops
//! pinging; past the servers' eviction timeout it is evicted — its lock is released for
//! the other client, the file it held open after unlinking it is destroyed, the MDT counts
//! it — and when the cable is back, its cached dirty data is refused with EIO (never
//! written over the other client's newer data) and it carries on with new opens.
//! Descriptors that must not leak into the processes the test starts belong to forked
//! holders (`fuse_locks::Holder`).

use crate::bin;
use crate::fuse_locks::{Cmd, Holder};
use std::io::{Read, Write};
use std::time::{Duration, Instant};
use weft_testkit::lab::{LabCluster, LabSpec};
use weft_testkit::{FSNAME, pattern, wait_until_within};

/// The servers' eviction timeout in this test, seconds.
const EVICT_S: u64 = 3;

/// `weft get_param -n NAME` on lab host `host`: the value of every target's parameter.
fn param(lc: &LabCluster, host: &str, name: &str) -> Vec<u64> {
    let out = lc
        .lab
        .run(
            host,
            bin(),
            &["get_param", "--mgs", &lc.mgs_addr, "-n", name],
        )
        .unwrap();
    assert!(
        out.status.success(),
        "get_param {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_client_is_evicted_and_its_stale_changes_are_refused() {
    let spec = LabSpec {
        servers: "srv".into(),
        oss: vec![("oss1".into(), 1)],
        clients: vec!["c1".into(), "c2".into()],
        link_mbit: None,
        // A disk of its own: the test must not depend on the free space of the machine's.
        oss_disk_mib: Some(512),
        server_args: vec!["--evict-timeout".into(), EVICT_S.to_string()],
        failover_host: None,
    };
    let lc = LabCluster::start(bin(), &spec).await.unwrap();
    let (c1, c2) = (
        lc.mount("c1").unwrap().path.clone(),
        lc.mount("c2").unwrap().path.clone(),
    );

    // c1: a file written and made durable; a process holding a whole-file lock on it
    // and 1 MiB written over its start through the same descriptor, not fsynced: dirty in
    // c1's cache. (The descriptor is a forked child's, so no process this test starts
    // inherits it: closing an inherited descriptor at exec would make the mount flush.)
    let first = pattern(0, 4 << 20, 1);
    std::fs::write(c1.join("shared"), &first).unwrap();
    let holder = Holder::spawn(&c1.join("shared"));
    assert_eq!(holder.run(Cmd::Flock, 0, 0), 0);
    let contender = Holder::spawn(&c2.join("shared"));
    assert_eq!(contender.run(Cmd::Flock, 0, 0), libc::EWOULDBLOCK);
    // c1 also holds a file open after unlinking it: the MDT keeps it as an orphan.
    let mut orphan = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(c1.join("orphan"))
        .unwrap();
    orphan.write_all(&pattern(0, 2 << 20, 3)).unwrap();
    orphan.sync_all().unwrap();
    std::fs::remove_file(c1.join("orphan")).unwrap();
    assert_eq!(param(&lc, "srv", "mdt.*.orphans"), [1]);
    assert_eq!(param(&lc, "srv", "mdt.*.evictions"), [0]);
    assert_eq!(holder.run(Cmd::Fill, 0, 1 << 20), 0);

    // The cable is pulled: c1 goes silent. c2 waits for the lock, which the MDT releases
    // when it evicts c1, and writes newer data.
    lc.lab.set_link("c1", false).unwrap();
    let cut = Instant::now();
    contender.send(Cmd::FlockWait, 0, 0);
    assert_eq!(
        contender.reply(Duration::from_secs(60)),
        Some(0),
        "c2 gets the lock once c1 is evicted"
    );
    let lock_after = cut.elapsed();
    assert!(
        lock_after >= Duration::from_secs(EVICT_S),
        "the lock was held until the eviction, got it after {lock_after:?}"
    );
    let newer = pattern(0, 1 << 20, 4);
    {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(c2.join("shared"))
            .unwrap();
        f.write_all(&newer).unwrap();
        f.sync_all().unwrap();
    }
    assert_eq!(param(&lc, "srv", "mdt.*.evictions"), [1]);
    wait_until_within(
        "the evicted client's orphan to be destroyed",
        Duration::from_secs(30),
        || param(&lc, "srv", "mdt.*.orphans") == [0],
    );
    eprintln!("c2 got c1's lock {lock_after:?} after c1's cable was pulled");

    // The cable is back: c1's buffered data is refused with EIO, never written.
    lc.lab.set_link("c1", true).unwrap();
    assert_eq!(
        holder.run(Cmd::Fsync, 0, 0),
        libc::EIO,
        "fsync of data buffered before the eviction"
    );
    let mut back = Vec::new();
    std::fs::File::open(c2.join("shared"))
        .unwrap()
        .read_to_end(&mut back)
        .unwrap();
    assert!(
        back[..1 << 20] == newer[..] && back[1 << 20..] == first[1 << 20..],
        "the shared file holds c2's newer data, not c1's stale buffer"
    );
    // The orphan's handle died with the eviction too.
    let gone = orphan
        .sync_all()
        .expect_err("fsync of a handle closed by the eviction");
    assert_eq!(gone.raw_os_error(), Some(libc::EIO), "{gone}");
    drop((holder, contender, orphan));

    // c1 is back for good: it reads the newer data and writes new files.
    let mut seen = Vec::new();
    std::fs::File::open(c1.join("shared"))
        .unwrap()
        .read_to_end(&mut seen)
        .unwrap();
    assert!(seen == back, "c1 reads what c2 wrote");
    let after = pattern(0, 3 << 20, 5);
    std::fs::write(c1.join("after"), &after).unwrap();
    std::fs::File::open(c1.join("after"))
        .unwrap()
        .sync_all()
        .unwrap();
    assert!(std::fs::read(c2.join("after")).unwrap() == after);
    let out = lc
        .lab
        .run(
            "srv",
            bin(),
            &["fsck", "-n", &format!("{}:/{FSNAME}", lc.mgs_addr)],
        )
        .unwrap();
    assert!(
        out.status.success(),
        "fsck after the eviction: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
