//! A real FUSE mount for end-to-end tests: `weft mount` as a child process on a temporary
//! mount point, always unmounted when the guard drops (even when the test fails), and
//! killed by a watchdog if a test hangs, so that no request blocks forever.

use crate::bin;
use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use weft_testkit::TestCluster;

/// Longest a test may keep a mount before the watchdog kills its server.
const WATCHDOG: Duration = Duration::from_secs(240);

pub struct FuseMount {
    pub dir: tempfile::TempDir,
    pub mnt: PathBuf,
    child: Child,
    log: PathBuf,
    done: Arc<AtomicBool>,
    /// Keeps `enable_uring` on for a mount over the ring made by `WEFT_TEST_URING=on`.
    _uring: Option<EnableUring>,
}

impl FuseMount {
    /// Mounts the test cluster's file system with `-o opts` (may be empty).
    pub fn start(tc: &TestCluster, opts: &str) -> Self {
        Self::start_source(&format!("{}:/{}", tc.mgs_addr, weft_testkit::FSNAME), opts)
    }

    /// Like [`start`](Self::start), for a test that may keep the mount longer than the
    /// default watchdog allows (long suites).
    pub fn start_with_watchdog(tc: &TestCluster, opts: &str, watchdog: Duration) -> Self {
        let source = format!("{}:/{}", tc.mgs_addr, weft_testkit::FSNAME);
        Self::start_inner(&source, opts, watchdog)
    }

    pub fn start_source(source: &str, opts: &str) -> Self {
        Self::start_inner(source, opts, WATCHDOG)
    }

    fn start_inner(source: &str, opts: &str, watchdog: Duration) -> Self {
        let dir = tempfile::tempdir().unwrap();
        // Other users must reach the mount point (permission tests run as them).
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        let log = dir.path().join("mount.log");
        let mut cmd = Command::new(bin());
        cmd.arg("mount").arg(source).arg(&mnt);
        // Over /dev/fuse unless the test says otherwise (`auto` would take the ring
        // whenever a test over it, fuse_uring or the POSIX suites, holds `enable_uring`
        // on), or over the ring with WEFT_TEST_URING=on in the environment (to run any
        // FUSE test over it).
        let mut uring = None;
        let opts = if opts.split(',').any(|o| o.starts_with("uring=")) {
            opts.to_string()
        } else {
            let mode = match std::env::var("WEFT_TEST_URING").as_deref() {
                Ok("on") => {
                    uring =
                        Some(EnableUring::acquire().expect("WEFT_TEST_URING=on: no enable_uring"));
                    "on"
                }
                _ => "off",
            };
            if opts.is_empty() {
                format!("uring={mode}")
            } else {
                format!("{opts},uring={mode}")
            }
        };
        cmd.arg("-o").arg(&opts);
        let logf = std::fs::File::create(&log).unwrap();
        let child = cmd
            .stdin(Stdio::null())
            .stdout(logf.try_clone().unwrap())
            .stderr(logf)
            .spawn()
            .unwrap();
        let done = Arc::new(AtomicBool::new(false));
        let mut m = FuseMount {
            dir,
            mnt,
            child,
            log,
            done,
            _uring: uring,
        };
        m.spawn_watchdog(watchdog);
        m.wait_mounted();
        m
    }

    fn spawn_watchdog(&self, watchdog: Duration) {
        let pid = self.child.id() as libc::pid_t;
        let done = self.done.clone();
        std::thread::spawn(move || {
            let start = Instant::now();
            while start.elapsed() < watchdog {
                if done.load(Ordering::Relaxed) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            if !done.load(Ordering::Relaxed) {
                eprintln!("watchdog: killing the mount server {pid}: the test hung");
                // SAFETY: kill(2) on the pid of our own child; no memory is involved.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        });
    }

    fn wait_mounted(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !weft_fuse::is_mounted(&self.mnt) {
            if let Ok(Some(status)) = self.child.try_wait() {
                self.done.store(true, Ordering::Relaxed);
                panic!("weft mount exited with {status}: {}", self.log());
            }
            assert!(
                Instant::now() < deadline,
                "not mounted after 30 s: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }

    /// Unmounts and waits for the server to exit; returns whether it exited cleanly.
    pub fn unmount(&mut self) -> bool {
        let _ = weft_fuse::unmount(&self.mnt, true);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match self.child.try_wait() {
                Ok(Some(s)) => {
                    self.done.store(true, Ordering::Relaxed);
                    return s.success();
                }
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    self.done.store(true, Ordering::Relaxed);
                    return false;
                }
            }
        }
    }
}

impl FuseMount {
    /// Kills the mount's server process (SIGKILL), as a crash would; the mount point is
    /// left to the drop's unmount.
    pub fn kill_server(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.done.store(true, Ordering::Relaxed);
    }
}

impl Drop for FuseMount {
    fn drop(&mut self) {
        self.unmount();
    }
}

pub fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

/// The errno of a failed result (panics on success, naming what was expected).
pub fn errno<T: std::fmt::Debug>(r: io::Result<T>) -> i32 {
    match r {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => e.raw_os_error().unwrap_or(-1),
    }
}

/// The result of a libc call returning -1 on error.
pub fn check(r: libc::c_int) -> io::Result<()> {
    if r == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Runs `sh -c script` as `uid`:`gid` with supplementary `groups`; returns (status, stderr).
pub fn run_as(uid: u32, gid: u32, groups: &[u32], script: &str) -> (i32, String) {
    let groups = if groups.is_empty() {
        "--clear-groups".to_string()
    } else {
        format!(
            "--groups={}",
            groups
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(",")
        )
    };
    let out = Command::new("setpriv")
        .arg(format!("--reuid={uid}"))
        .arg(format!("--regid={gid}"))
        .arg(groups)
        .args(["sh", "-c", script])
        .stdin(Stdio::null())
        .output()
        .expect("setpriv (util-linux) is needed for permission tests");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Creates `name` in the root of the test cluster's file system, empty, with `layout`.
pub async fn create_with_layout(
    tc: &TestCluster,
    name: &str,
    layout: weft_proto::layout::LayoutTemplate,
) {
    use weft_proto::mdt::{AccessMode, Credentials};
    let client = tc.fs_client(Duration::from_secs(30)).await.unwrap();
    let opts = weft_client::OpenOptions {
        access: AccessMode::ReadWrite,
        create: Some(0o644),
        exclusive: true,
        truncate: false,
        append: false,
    };
    let f = client
        .open_in(
            weft_proto::Fid::ROOT,
            name.as_bytes(),
            opts,
            Some(layout),
            &Credentials::root(),
        )
        .await
        .unwrap();
    f.close().await.unwrap();
}

/// fallocate(2) with `mode` on an open file.
pub fn fallocate(f: &std::fs::File, mode: i32, offset: u64, len: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: fallocate(2) on an open descriptor; no memory is passed.
    check(unsafe { libc::fallocate(f.as_raw_fd(), mode, offset as i64, len as i64) })
}

/// lseek(2) with `whence` (SEEK_DATA, SEEK_HOLE); `None` for ENXIO.
pub fn seek_data_or_hole(f: &std::fs::File, offset: u64, whence: i32) -> io::Result<Option<u64>> {
    use std::os::fd::AsRawFd;
    // SAFETY: lseek(2) on an open descriptor; no memory is passed.
    let r = unsafe { libc::lseek(f.as_raw_fd(), offset as i64, whence) };
    if r >= 0 {
        return Ok(Some(r as u64));
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::ENXIO) {
        Ok(None)
    } else {
        Err(e)
    }
}

/// The fuse module's switch for FUSE over io_uring (Linux 6.14+).
const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";
/// Holders of [`EnableUring`] on the machine hold this file's lock shared.
const ENABLE_URING_HOLDERS: &str = "/tmp/weft-test-enable-uring.holders";
/// Taken exclusive around each change of the holders or of the parameter.
const ENABLE_URING_GUARD: &str = "/tmp/weft-test-enable-uring.guard";
/// The parameter's value before the first holder set it.
const ENABLE_URING_SAVED: &str = "/tmp/weft-test-enable-uring.saved";

/// Keeps `enable_uring` on while held, for mounts with `-o uring=on`: the test processes
/// running at once (the main run and the POSIX suites' run) and their tests share it, and
/// the last holder to leave restores the value found before the first came. `None` when
/// the kernel has no such parameter (then it cannot serve FUSE over io_uring at all).
pub struct EnableUring {
    holder: std::fs::File,
}

fn flock(f: &std::fs::File, op: libc::c_int) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: flock(2) on an open descriptor; no memory is passed.
    check(unsafe { libc::flock(f.as_raw_fd(), op) })
}

/// A new open file description of `path` (flock(2) locks belong to those, so two of one
/// process exclude each other like two processes').
fn lock_file(path: &str) -> std::fs::File {
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .unwrap()
}

impl EnableUring {
    pub fn acquire() -> Option<Self> {
        std::fs::metadata(ENABLE_URING).ok()?;
        let guard = lock_file(ENABLE_URING_GUARD);
        flock(&guard, libc::LOCK_EX).unwrap();
        // Held exclusive only by a leaving holder under the guard: never waits here.
        let holder = lock_file(ENABLE_URING_HOLDERS);
        flock(&holder, libc::LOCK_SH).unwrap();
        if !Path::new(ENABLE_URING_SAVED).exists() {
            let now = std::fs::read_to_string(ENABLE_URING).unwrap();
            std::fs::write(ENABLE_URING_SAVED, now.trim()).unwrap();
        }
        std::fs::write(ENABLE_URING, "Y").unwrap();
        Some(Self { holder })
    }
}

impl Drop for EnableUring {
    fn drop(&mut self) {
        let guard = lock_file(ENABLE_URING_GUARD);
        let _ = flock(&guard, libc::LOCK_EX);
        let _ = flock(&self.holder, libc::LOCK_UN);
        // The last holder gets the holders' lock exclusive: it restores the value.
        let probe = lock_file(ENABLE_URING_HOLDERS);
        if flock(&probe, libc::LOCK_EX | libc::LOCK_NB).is_ok()
            && let Ok(v) = std::fs::read_to_string(ENABLE_URING_SAVED)
        {
            let _ = std::fs::write(ENABLE_URING, v.trim());
            let _ = std::fs::remove_file(ENABLE_URING_SAVED);
        }
    }
}

#[test]
fn enable_uring_is_shared_and_restored_by_the_last_holder() {
    let Ok(before) = std::fs::read_to_string(ENABLE_URING) else {
        return;
    };
    let now = || {
        std::fs::read_to_string(ENABLE_URING)
            .unwrap()
            .trim()
            .to_string()
    };
    let held: Vec<EnableUring> = (0..3).map(|_| EnableUring::acquire().unwrap()).collect();
    assert_eq!(now(), "Y");
    std::thread::scope(|s| {
        for h in held {
            s.spawn(move || {
                let again = EnableUring::acquire().unwrap();
                drop(h);
                assert_eq!(now(), "Y");
                drop(again);
            });
        }
    });
    // Another holder may be running in a parallel test; only alone is the value back.
    if Path::new(ENABLE_URING_SAVED).exists() {
        return;
    }
    assert_eq!(now(), before.trim());
}
