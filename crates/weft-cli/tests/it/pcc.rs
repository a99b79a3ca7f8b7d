//! The persistent client cache through real mounts (`weft pcc`): a read-only cache serves
//! the second open from its local copy, drops the copy when another mount writes the
//! file, and evicts the least recently used copy when full; a read-write cache writes a
//! created file locally, copies it into the file system after close (another mount then
//! reads it), and copies back after a restart what a killed mount had fsynced; another
//! mount opening a file still in a read-write cache waits for its copy-back, at most
//! `llite.*.pcc_rw_wait_s`, then fails with ETIMEDOUT.

use crate::bin;
use crate::fuse_common::FuseMount;
use crate::support::weft;
use std::fs;
use std::io::Write;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::time::{Duration, Instant};
use weft_testkit::{TestCluster, pattern, wait_until};

const MIB: usize = 1 << 20;

/// `weft pcc state FILE`: the file's state line and the cache's figures.
fn state(file: &Path) -> (String, std::collections::HashMap<String, String>) {
    let (ok, out, err) = weft(&["pcc", "state", file.to_str().unwrap()]);
    assert!(ok, "pcc state {}: {err}", file.display());
    let mut lines = out.lines().skip(1);
    let first = lines.next().unwrap_or_default().to_string();
    let figures = lines
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect();
    (first, figures)
}

fn figure(file: &Path, name: &str) -> u64 {
    state(file).1[name].parse().unwrap()
}

/// Reads `path` whole, first dropping the kernel's cached pages of it (so the reads reach
/// the mount).
fn read_uncached(path: &Path) -> Vec<u8> {
    let f = fs::File::open(path).unwrap();
    // SAFETY: posix_fadvise on a descriptor we own; no memory is passed.
    unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    let mut out = Vec::new();
    std::io::Read::read_to_end(&mut &f, &mut out).unwrap();
    out
}

/// Sets how long the mounts of `tc` on this node wait for another client's copy-back.
fn set_wait(tc: &TestCluster, secs: u64) {
    let (ok, _, err) = weft(&[
        "set_param",
        "--mgs",
        &tc.mgs_addr,
        &format!("llite.*.pcc_rw_wait_s={secs}"),
    ]);
    assert!(ok, "set_param: {err}");
}

/// Opens `path` for reading; the error and how long the open took.
fn timed_open_err(path: &Path) -> (std::io::Error, Duration) {
    let t = Instant::now();
    let e = fs::File::open(path).expect_err("the open waits, then fails");
    (e, t.elapsed())
}

fn add(mnt: &FuseMount, dir: &Path, mode: &str, rule: &str, capacity: &str) {
    let (ok, out, err) = weft(&[
        "pcc",
        "add",
        mnt.mnt.to_str().unwrap(),
        "--dir",
        dir.to_str().unwrap(),
        "--mode",
        mode,
        "--rule",
        rule,
        "--capacity",
        capacity,
    ]);
    assert!(ok, "pcc add: {err}");
    assert!(out.contains(&format!("mode {mode}")), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_cache_hits_detaches_on_a_remote_write_and_evicts_by_capacity() {
    let tc = TestCluster::start(bin(), 2).await.unwrap();
    let reader = FuseMount::start(&tc, "");
    let writer = FuseMount::start(&tc, "");
    let local = tempfile::tempdir().unwrap();
    fs::create_dir(writer.path("data")).unwrap();
    fs::create_dir(writer.path("other")).unwrap();
    for i in 0..4u64 {
        fs::write(writer.path(&format!("data/f{i}")), pattern(0, MIB, i)).unwrap();
    }
    fs::write(writer.path("other/g"), pattern(0, MIB, 9)).unwrap();

    // Bad input is refused with a reason, and changes nothing.
    let mnt = reader.mnt.to_str().unwrap();
    let (ok, _, err) = weft(&["pcc", "add", mnt, "--dir", "/tmp/x", "--mode", "rx"]);
    assert!(!ok && err.contains("ro or rw"), "{err}");
    let (ok, _, err) = weft(&[
        "pcc",
        "add",
        mnt,
        "--dir",
        "/tmp/x",
        "--mode",
        "ro",
        "--rule",
        "color=red",
    ]);
    assert!(!ok && err.contains("unknown condition"), "{err}");
    let (ok, _, err) = weft(&["pcc", "state", reader.path("data/f0").to_str().unwrap()]);
    assert!(!ok && err.contains("no PCC"), "{err}");

    // Room for three copies of 1 MiB.
    add(&reader, local.path(), "ro", "path=/data/*,size>4K", "3M");
    let f0 = reader.path("data/f0");
    assert_eq!(read_uncached(&f0), pattern(0, MIB, 0));
    wait_until("f0 copied in", || state(&f0).0.starts_with("ro-attached"));
    assert_eq!(figure(&f0, "hits"), 0);
    assert_eq!(figure(&f0, "copy_ins"), 1);
    // The second open reads the local copy.
    let before = figure(&f0, "read_bytes");
    assert_eq!(read_uncached(&f0), pattern(0, MIB, 0));
    assert_eq!(figure(&f0, "hits"), 1);
    assert!(figure(&f0, "read_bytes") - before >= MIB as u64);
    // The copy is a file of the local directory, whole.
    let copies: Vec<_> = fs::read_dir(local.path().join("ro"))
        .unwrap()
        .flatten()
        .collect();
    assert_eq!(copies.len(), 1);
    assert_eq!(fs::read(copies[0].path()).unwrap(), pattern(0, MIB, 0));
    // Outside the rule: never copied.
    let g = reader.path("other/g");
    assert_eq!(read_uncached(&g), pattern(0, MIB, 9));
    assert_eq!(state(&g).0, "none");

    // Another mount writes f0: the next open here drops the stale copy and reads the new
    // data from the file system (then copies it in again).
    {
        let mut w = fs::OpenOptions::new()
            .write(true)
            .open(writer.path("data/f0"))
            .unwrap();
        w.write_all(&pattern(0, 4096, 77)).unwrap();
    }
    let mut want = pattern(0, MIB, 0);
    want[..4096].copy_from_slice(&pattern(0, 4096, 77));
    assert_eq!(read_uncached(&f0), want);
    assert_eq!(figure(&f0, "detaches"), 1);
    wait_until("f0 copied in again", || {
        state(&f0).0.starts_with("ro-attached")
    });
    assert_eq!(read_uncached(&f0), want);
    assert_eq!(figure(&f0, "hits"), 2);

    // Three more files: the least recently used copy (f0) goes for the third.
    for i in 1..4 {
        let f = reader.path(&format!("data/f{i}"));
        assert_eq!(read_uncached(&f), pattern(0, MIB, i));
        wait_until("copied in", || state(&f).0.starts_with("ro-attached"));
    }
    assert_eq!(figure(&f0, "evictions"), 1);
    assert_eq!(state(&f0).0, "none");
    assert!(state(&reader.path("data/f1")).0.starts_with("ro-attached"));
    assert_eq!(fs::read_dir(local.path().join("ro")).unwrap().count(), 3);

    // Detach by hand, then attach again by hand.
    let f3 = reader.path("data/f3");
    let (ok, out, err) = weft(&["pcc", "detach", f3.to_str().unwrap()]);
    assert!(ok && out.contains("\nnone\n"), "{out}{err}");
    let (ok, _, err) = weft(&["pcc", "attach", f3.to_str().unwrap()]);
    assert!(ok, "{err}");
    wait_until("f3 attached", || state(&f3).0.starts_with("ro-attached"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_write_cache_copies_back_after_close_and_after_a_client_crash() {
    let tc = TestCluster::start(bin(), 2).await.unwrap();
    let other = FuseMount::start(&tc, "");
    let local = tempfile::tempdir().unwrap();
    fs::create_dir(other.path("ckpt")).unwrap();
    let mut writer = FuseMount::start(&tc, "");
    add(&writer, local.path(), "rw", "path=/ckpt/*", "1G");

    // Written locally while open; in the file system once closed.
    let c1 = writer.path("ckpt/c1");
    let data = pattern(0, 3 * MIB, 1);
    let mut f = fs::File::create(&c1).unwrap();
    f.write_all(&data).unwrap();
    assert_eq!(state(&c1).0, "rw-dirty");
    assert_eq!(fs::read_dir(local.path().join("rw")).unwrap().count(), 1);
    assert_eq!(figure(&c1, "write_bytes"), data.len() as u64);
    drop(f);
    wait_until("c1 copied back", || state(&c1).0 == "none");
    assert_eq!(figure(&c1, "copy_backs"), 1);
    assert_eq!(fs::read(other.path("ckpt/c1")).unwrap(), data);
    assert_eq!(fs::read(&c1).unwrap(), data);
    assert_eq!(fs::read_dir(local.path().join("rw")).unwrap().count(), 0);
    // Outside the rule: written to the file system as usual.
    fs::write(writer.path("plain"), b"abc").unwrap();
    assert_eq!(fs::read(other.path("plain")).unwrap(), b"abc");

    // The mount dies between the application's fsync and the copy-back: nothing fsynced
    // is lost once a new mount adds the same directory.
    let c2 = writer.path("ckpt/c2");
    let data2 = pattern(0, 2 * MIB + 5, 2);
    let mut f = fs::File::create(&c2).unwrap();
    f.write_all(&data2).unwrap();
    f.sync_all().unwrap();
    writer.kill_server();
    drop(f);
    drop(writer);
    // The MDT still records c2 as held by the dead mount's cache: another mount's open
    // waits the bound, then fails with a clear error instead of reading nothing.
    set_wait(&tc, 2);
    let (e, took) = timed_open_err(&other.path("ckpt/c2"));
    assert_eq!(e.raw_os_error(), Some(libc::ETIMEDOUT), "{e}");
    assert!(took >= Duration::from_secs(2), "it waited: {took:?}");
    let writer = FuseMount::start(&tc, "");
    add(&writer, local.path(), "rw", "path=/ckpt/*", "1G");
    let c2 = writer.path("ckpt/c2");
    wait_until("c2 copied back", || state(&c2).0 == "none");
    assert_eq!(figure(&c2, "copy_backs"), 1);
    assert_eq!(fs::read(other.path("ckpt/c2")).unwrap(), data2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_mount_waits_for_a_read_write_copy_back_and_the_wait_is_bounded() {
    let tc = TestCluster::start(bin(), 2).await.unwrap();
    let other = FuseMount::start(&tc, "");
    let writer = FuseMount::start(&tc, "");
    let local = tempfile::tempdir().unwrap();
    fs::create_dir(writer.path("ckpt")).unwrap();
    add(&writer, local.path(), "rw", "path=/ckpt/*", "1G");
    set_wait(&tc, 60);

    // The other mount opens the file while the writer still has it open (its data only
    // in the writer's cache): the open returns after the copy-back, with every byte.
    let c1 = writer.path("ckpt/c1");
    let data = pattern(0, 6 * MIB + 7, 11);
    let mut f = fs::File::create(&c1).unwrap();
    f.write_all(&data[..2 * MIB]).unwrap();
    assert_eq!(state(&c1).0, "rw-dirty");
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let remote = other.path("ckpt/c1");
    let reader = std::thread::spawn(move || {
        let r = fs::read(&remote);
        let _ = done_tx.send(());
        r
    });
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        done_rx.try_recv().is_err(),
        "the other mount's open returned while the data was only in the writer's cache"
    );
    f.write_all(&data[2 * MIB..]).unwrap();
    drop(f);
    let got = reader.join().unwrap().unwrap();
    assert!(got == data, "the other mount read {} bytes", got.len());
    wait_until("c1 dropped locally", || state(&c1).0 == "none");

    // The writer keeps the next file open past the bound: the other mount's open fails
    // with ETIMEDOUT after it, and succeeds once the writer closed.
    set_wait(&tc, 2);
    let c2 = writer.path("ckpt/c2");
    let mut f = fs::File::create(&c2).unwrap();
    f.write_all(&data[..MIB]).unwrap();
    let (e, took) = timed_open_err(&other.path("ckpt/c2"));
    assert_eq!(e.raw_os_error(), Some(libc::ETIMEDOUT), "{e}");
    assert!(took >= Duration::from_secs(2), "it waited: {took:?}");
    drop(f);
    wait_until("c2 copied back", || state(&c2).0 == "none");
    assert_eq!(fs::read(other.path("ckpt/c2")).unwrap(), &data[..MIB]);
}
