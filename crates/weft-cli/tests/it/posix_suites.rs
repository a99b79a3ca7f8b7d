//! Independent POSIX suites through a real FUSE mount (`weft mount` over separate server
//! processes): pjdfstest (the Rust rewrite: every syscall's rules, times and errnos, with
//! other users' permissions) and fsx (random reads, writes, truncates and mmap checked
//! against a shadow copy, with and without mmap). Their configurations are in
//! `tests/it/posix_suites/`; deviations from ext4 are listed in README.md.
//!
//! Each runs over `/dev/fuse` (`-o uring=off`); pjdfstest and the fsx runs on four
//! stripes of 64 KiB also run over FUSE over io_uring (`-o uring=on`, with the fuse
//! module's `enable_uring` switched on for the test and restored after).
//!
//! The tools are installed by the README's test command, `./test.sh` (`cargo install
//! --locked`, pinned versions, into `target/test-tools`). A missing tool, or another
//! version than the one configured here, fails the test with the command that installs
//! it: these tests never skip.

use crate::bin;
use crate::fuse_common::{FuseMount, create_with_layout};
use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use weft_proto::layout::LayoutTemplate;
use weft_testkit::TestCluster;

/// The versions `./test.sh` installs; the configurations were written for them.
const PJDFSTEST_VERSION: &str = "0.2.2";
const FSX_VERSION: &str = "0.3.2";
/// fsx operations per run in CI, and the fixed seed that makes a failure reproducible.
/// With files of 16 MiB and operations of up to 1 MiB, 100,000 operations of the mmap
/// configuration take over 15 minutes on CI's two cores, which six configurations and
/// the exerciser cannot share with the rest of the suite: CI runs `FSX_OPS` of each, and
/// `WEFT_FSX_OPS=100000 WEFT_EXERCISER_OPS=100000 ./test.sh -p weft-cli --test
/// posix_suites` runs the full size.
const FSX_OPS: u64 = 12_000;
const FSX_SEED: u64 = 20_261_123;

/// The operation count of a random-operation run: `var` from the environment if set.
fn ops_from_env(var: &str, default: u64) -> u64 {
    match std::env::var(var) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{var}={v:?} is not a number of operations")),
        Err(_) => default,
    }
}

/// Longest a suite may run before it is killed as hung.
const SUITE_LIMIT: Duration = Duration::from_secs(15 * 60);

/// How long a random-operation run of `ops` operations may take: the suite limit, or 30
/// ms an operation for the longer runs made by hand.
fn random_run_limit(ops: u64) -> Duration {
    SUITE_LIMIT.max(Duration::from_millis(ops.saturating_mul(30)))
}

fn suite_file(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/it/posix_suites")
        .join(name)
}

/// The installed `name` (on PATH or in cargo's bin directory), checked to be `version`.
fn tool(name: &str, version: &str) -> PathBuf {
    let install = format!("cargo install --locked {name} --version {version}");
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    if let Some(home) = std::env::var_os("CARGO_HOME") {
        dirs.push(PathBuf::from(home).join("bin"));
    }
    if let Some(home) = std::env::var_os("HOME") {
        dirs.push(PathBuf::from(home).join(".cargo/bin"));
    }
    let Some(path) = dirs.iter().map(|d| d.join(name)).find(|p| p.is_file()) else {
        panic!(
            "{name} is not installed; this test needs it and never skips: run the tests with \
             ./test.sh (it installs the tools), or `{install}`"
        );
    };
    let out = Command::new(&path).arg("--version").output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        said.split_whitespace().any(|w| w == version),
        "{} says {said:?}; this test is configured for {name} {version}: run `{install} --force`",
        path.display()
    );
    path
}

fn require_root(what: &str) {
    // SAFETY: geteuid(2) has no arguments and cannot fail.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(euid, 0, "{what} must run as root (mounts, other users)");
}

/// Runs `cmd` with stdout and stderr into one log, killing it after `limit`; returns
/// whether it exited successfully, and the log.
fn run_logged(mut cmd: Command, log: &Path, limit: Duration) -> (bool, String) {
    let out = fs::File::create(log).unwrap();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .env("NO_COLOR", "1")
        .spawn()
        .unwrap();
    let start = Instant::now();
    let ok = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.success();
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "killed after {limit:?}: {:?}\n{}",
                cmd,
                fs::read_to_string(log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    (ok, fs::read_to_string(log).unwrap_or_default())
}

/// What one pjdfstest run reported.
#[derive(Debug, Default)]
struct PjdResult {
    ok: bool,
    passed: BTreeSet<String>,
    skipped: BTreeSet<String>,
    failed: BTreeSet<String>,
    summary: String,
    log: String,
}

/// A directory holding a `mount` for pjdfstest's remounts: mount(8) with `-i`. Without it,
/// mount(8) hands a `fuse.weft` remount to `/sbin/mount.fuse` where the fuse package is
/// installed, which runs a `weft` helper from PATH; the remount itself is the kernel's.
fn remount_shim(dir: &Path) -> PathBuf {
    let real = std::env::var_os("PATH")
        .and_then(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join("mount"))
                .find(|m| m.is_file())
        })
        .expect("mount(8) is needed for pjdfstest's EROFS cases");
    let bin = dir.join("bin");
    fs::create_dir_all(&bin).unwrap();
    let shim = bin.join("mount");
    fs::write(
        &shim,
        format!("#!/bin/sh\nexec {} -i \"$@\"\n", real.display()),
    )
    .unwrap();
    fs::set_permissions(&shim, fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

fn pjdfstest(pjd: &Path, config: &Path, dir: &Path, secondary: &Path, only: &[&str]) -> PjdResult {
    let mut cmd = Command::new(pjd);
    let shim = remount_shim(secondary.parent().unwrap());
    let path = std::env::var_os("PATH").unwrap_or_default();
    let paths = std::iter::once(shim).chain(std::env::split_paths(&path));
    cmd.env("PATH", std::env::join_paths(paths).unwrap());
    cmd.arg("-c").arg(config).arg("-p").arg(dir);
    cmd.arg("-s").arg(secondary);
    cmd.args(only);
    let (ok, log) = run_logged(cmd, &secondary.with_extension("log"), SUITE_LIMIT);
    let mut r = PjdResult {
        ok,
        ..Default::default()
    };
    for line in log.lines() {
        let mut words = line.split_whitespace();
        let (Some(name), Some(last)) = (words.next(), line.split_whitespace().last()) else {
            continue;
        };
        if name == "Summary:" {
            r.summary = line.to_string();
            continue;
        }
        if !name.contains("::") {
            continue;
        }
        match last {
            "ok" => r.passed.insert(name.to_string()),
            "skipped" => r.skipped.insert(name.to_string()),
            "FAILED" | "UNEXPECTEDLY" | "expected" => r.failed.insert(name.to_string()),
            _ => false,
        };
    }
    r.log = log;
    r
}

/// A directory on the mount to run pjdfstest in. pjdfstest 0.2.2 computes the component
/// lengths of its PATH_MAX case from the length of its working path and underflows
/// (`capacity overflow`) when `4095 - len` is a multiple of `NAME_MAX / 2`; its path is
/// this directory plus two `/.tmpXXXXXX` levels, so the name is padded around that.
fn pjdfstest_dir(mnt: &Path) -> PathBuf {
    let mut name = String::from("pjd");
    loop {
        let len = mnt.join(&name).as_os_str().len() + 2 * "/.tmpXXXXXX".len();
        if !(4095 - len).is_multiple_of(255 / 2) {
            break;
        }
        name.push('x');
    }
    let dir = mnt.join(name);
    fs::create_dir(&dir).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pjdfstest_passes_on_the_mount() {
    pjdfstest_passes("uring=off").await;
}

/// Takes `enable_uring` for a test over the ring; `None` (and the test passes, saying why)
/// when the kernel has no FUSE over io_uring.
fn uring_or_skip(what: &str) -> Option<crate::fuse_common::EnableUring> {
    let on = crate::fuse_common::EnableUring::acquire();
    if on.is_none() {
        eprintln!("{what}: skipped: this kernel has no FUSE over io_uring");
    }
    on
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pjdfstest_passes_over_io_uring() {
    let Some(_uring) = uring_or_skip("pjdfstest over io_uring") else {
        return;
    };
    pjdfstest_passes("uring=on").await;
}

/// Runs pjdfstest on a mount with `-o opts` (the transport: `uring=on` or `uring=off`).
async fn pjdfstest_passes(opts: &str) {
    let pjd = tool("pjdfstest", PJDFSTEST_VERSION);
    require_root("pjdfstest");
    let tc = TestCluster::start(bin(), 2).await.unwrap();
    let m = FuseMount::start_with_watchdog(&tc, opts, SUITE_LIMIT * 2);
    tokio::task::spawn_blocking(move || {
        let config = suite_file("pjdfstest.toml");
        let text = fs::read_to_string(&config).unwrap();
        // The EROFS cases remount the file system read-only, which fails (EBUSY) once
        // other cases have leaked descriptors open for writing: they run in a second
        // process, and the first one runs with remounts disabled.
        let work = tempfile::tempdir().unwrap();
        let no_remount = work.path().join("no-remount.toml");
        assert!(text.contains("\nallow_remount = true\n"));
        let changed = text.replace("\nallow_remount = true\n", "\nallow_remount = false\n");
        fs::write(&no_remount, changed).unwrap();
        // The EXDEV cases link and rename to another file system: the local temporary one.
        let secondary = work.path().join("secondary");
        fs::create_dir(&secondary).unwrap();
        let dir = pjdfstest_dir(&m.mnt);

        let main = pjdfstest(&pjd, &no_remount, &dir, &secondary, &[]);
        let erofs = pjdfstest(&pjd, &config, &dir, &secondary, &["erofs"]);
        let report = |r: &PjdResult| format!("{}\n{}\nmount log:\n{}", r.summary, r.log, m.log());
        assert!(main.ok && main.failed.is_empty(), "{}", report(&main));
        assert!(erofs.ok && erofs.failed.is_empty(), "{}", report(&erofs));
        assert!(erofs.skipped.is_empty(), "{}", report(&erofs));
        // Skipped in the main run: the EROFS cases (run by the second process) and the
        // EMLINK case, which needs pathconf(_PC_LINK_MAX) and FUSE has none to give.
        let erofs_cases: BTreeSet<String> = main
            .skipped
            .iter()
            .filter(|n| n.contains("erofs"))
            .cloned()
            .collect();
        let other_skips: Vec<&String> = main.skipped.difference(&erofs_cases).collect();
        assert_eq!(other_skips, ["link::link_count_max"], "{}", report(&main));
        assert_eq!(erofs.passed, erofs_cases, "{}", report(&erofs));
        assert!(
            main.passed.len() > 350,
            "pjdfstest ran only {} cases: {}",
            main.passed.len(),
            report(&main)
        );
        eprintln!(
            "pjdfstest: {} cases passed, {} EROFS cases passed, skipped: {other_skips:?}",
            main.passed.len(),
            erofs.passed.len()
        );
    })
    .await
    .unwrap();
}

/// The file system of a random-operation run: four OSTs, each on a tmpfs of its own.
/// The runs check what the client and the OSTs do with bytes, sizes and holes, which is
/// the same on any local file system; on tmpfs an fsync or a truncate of an object costs
/// no disk flush, so CI's time buys more operations (fsx's fsync and truncate were ~6x
/// slower on this VM's ext4).
async fn random_run_cluster() -> TestCluster {
    const OST_BYTES: u64 = 256 << 20;
    TestCluster::start_with_ost_size(bin(), 4, Some(OST_BYTES))
        .await
        .unwrap()
}

/// Runs fsx with `config` on a new file of `layout`, over `/dev/fuse`.
async fn fsx_passes(config: &str, layout: LayoutTemplate) {
    fsx_passes_with(config, layout, "uring=off").await;
}

/// Runs fsx with `config` on a new file of `layout`, mounted with `-o opts`.
async fn fsx_passes_with(config: &str, layout: LayoutTemplate, opts: &str) {
    let fsx = tool("fsx", FSX_VERSION);
    require_root("fsx through the mount");
    let ops = ops_from_env("WEFT_FSX_OPS", FSX_OPS);
    let limit = random_run_limit(ops);
    let tc = random_run_cluster().await;
    create_with_layout(&tc, "fsx-file", layout).await;
    let m = FuseMount::start_with_watchdog(&tc, opts, limit * 2);
    let config = suite_file(config);
    tokio::task::spawn_blocking(move || {
        let artifacts = tempfile::tempdir().unwrap();
        let mut cmd = Command::new(&fsx);
        cmd.arg("-f").arg(&config);
        cmd.arg("-N").arg(ops.to_string());
        cmd.arg("-S").arg(FSX_SEED.to_string());
        cmd.arg("-P").arg(artifacts.path());
        cmd.arg(m.path("fsx-file"));
        let started = Instant::now();
        let (ok, log) = run_logged(cmd, &artifacts.path().join("fsx.log"), limit);
        let tail: Vec<&str> = log.lines().rev().take(60).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        assert!(
            ok && log.contains("All operations completed A-OK!"),
            "fsx -f {} -N {ops} -S {FSX_SEED} failed:\n{}\nmount log:\n{}",
            config.display(),
            tail.join("\n"),
            m.log()
        );
        eprintln!(
            "fsx: {ops} operations ({}) in {:.0?}",
            config.display(),
            started.elapsed()
        );
    })
    .await
    .unwrap();
}

/// One stripe of 1 MiB: the file system's default layout.
fn one_stripe() -> LayoutTemplate {
    LayoutTemplate::raid0(1, 1 << 20, -1)
}

/// Four stripes of 1 MiB: every operation up to 1 MiB touches one or two objects.
fn four_stripes_of_1m() -> LayoutTemplate {
    LayoutTemplate::raid0(4, 1 << 20, -1)
}

/// Four stripes of 64 KiB: every operation crosses stripe and object boundaries.
fn four_stripes_of_64k() -> LayoutTemplate {
    LayoutTemplate::raid0(4, 64 << 10, -1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fsx_with_mmap_on_one_stripe() {
    fsx_passes("fsx-mmap.toml", one_stripe()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fsx_with_mmap_on_four_stripes_of_1m() {
    fsx_passes("fsx-mmap.toml", four_stripes_of_1m()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fsx_with_mmap_on_four_stripes_of_64k() {
    fsx_passes("fsx-mmap.toml", four_stripes_of_64k()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fsx_without_mmap_on_one_stripe() {
    fsx_passes("fsx-nommap.toml", one_stripe()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fsx_without_mmap_on_four_stripes_of_1m() {
    fsx_passes("fsx-nommap.toml", four_stripes_of_1m()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fsx_without_mmap_on_four_stripes_of_64k() {
    fsx_passes("fsx-nommap.toml", four_stripes_of_64k()).await;
}

// Over io_uring: the layout whose operations cross the most boundaries, with and
// without mmap (the other layouts add little to what the transport is tested for).

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fsx_with_mmap_on_four_stripes_of_64k_over_io_uring() {
    let Some(_uring) = uring_or_skip("fsx over io_uring") else {
        return;
    };
    fsx_passes_with("fsx-mmap.toml", four_stripes_of_64k(), "uring=on").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fsx_without_mmap_on_four_stripes_of_64k_over_io_uring() {
    let Some(_uring) = uring_or_skip("fsx over io_uring") else {
        return;
    };
    fsx_passes_with("fsx-nommap.toml", four_stripes_of_64k(), "uring=on").await;
}

/// Operations of the two-mount exerciser in CI (`WEFT_EXERCISER_OPS` sets another
/// count; see `FSX_OPS`).
const EXERCISER_OPS: u64 = 30_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_mounts_taking_turns_match_a_shadow_copy() {
    require_root("the exerciser's mounts");
    let ops = ops_from_env("WEFT_EXERCISER_OPS", EXERCISER_OPS);
    let limit = random_run_limit(ops);
    let tc = random_run_cluster().await;
    create_with_layout(&tc, "shared", four_stripes_of_64k()).await;
    let a = FuseMount::start_with_watchdog(&tc, "", limit);
    let b = FuseMount::start_with_watchdog(&tc, "", limit);
    let cfg = crate::exerciser::Config {
        paths: vec![a.path("shared"), b.path("shared")],
        flen: 16 << 20,
        max_op: 1 << 20,
        ops,
        ops_per_open: 64,
        seed: FSX_SEED,
    };
    tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        if let Err(e) = crate::exerciser::run(&cfg) {
            panic!("{e}\nmount a log:\n{}\nmount b log:\n{}", a.log(), b.log());
        }
        eprintln!(
            "exerciser: {ops} operations over two mounts in {:.0?}",
            started.elapsed()
        );
    })
    .await
    .unwrap();
}
