//! File locks across two FUSE mounts of one file system (two `weft mount` processes):
//! `fcntl` record locks (EAGAIN, F_GETLK naming the holder, F_SETLKW waiting for the other
//! mount, EDEADLK across mounts), `flock` exclusion, and locks going away with their
//! process, their descriptor and their mount.
//!
//! Lock holders are forked children: POSIX locks belong to a process, so the holder and
//! the contender must be different processes. A child only makes raw system calls (no
//! allocation) and is driven over a pair of pipes. Other tests use them as a descriptor
//! no process the test starts inherits (the eviction test's buffered writes: a child's
//! `execve` closing an inherited descriptor makes the mount flush it).

use crate::bin;
use crate::fuse_common::{FuseMount, cpath};
use std::fs;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::time::{Duration, Instant};
use weft_testkit::TestCluster;
use weft_testkit::wait_until;

/// A command to a holder: what to do, then start and length for the byte-range ones.
#[derive(Clone, Copy)]
#[repr(u8)]
pub(crate) enum Cmd {
    /// `F_SETLK` write lock.
    Write = b'w',
    /// `F_SETLKW` write lock.
    WriteWait = b'W',
    /// `F_SETLK` read lock.
    Read = b'r',
    /// `F_SETLK` unlock.
    Unlock = b'u',
    /// `flock(LOCK_EX | LOCK_NB)`.
    Flock = b'f',
    /// `flock(LOCK_EX)`, waiting.
    FlockWait = b'F',
    /// Opens the file again and closes that descriptor (POSIX: drops the process's locks).
    OpenClose = b'o',
    /// Closes the locked descriptor.
    Close = b'c',
    /// Writes `len` bytes of 0xAB at `start` (`pwrite`, no fsync).
    Fill = b'd',
    /// `fsync` of the descriptor.
    Fsync = b's',
}

/// A forked process holding a descriptor of one file.
pub(crate) struct Holder {
    pid: libc::pid_t,
    cmd: OwnedFd,
    ev: OwnedFd,
}

fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: both descriptors were just created and are owned by nobody else.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

fn flock_arg(typ: i32, start: u64, len: u64) -> libc::flock {
    // SAFETY: `flock` is plain old data; all-zero is a valid value.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = typ as i16;
    fl.l_whence = libc::SEEK_SET as i16;
    fl.l_start = start as i64;
    fl.l_len = len as i64;
    fl
}

/// The child's loop: only async-signal-safe calls, no allocation.
fn holder_main(path: &std::ffi::CStr, cmd: i32, ev: i32) -> ! {
    // SAFETY: raw system calls on descriptors and buffers this function owns.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_RDWR);
        let mut r: i32 = if fd < 0 { *libc::__errno_location() } else { 0 };
        libc::write(ev, (&raw const r).cast(), 4);
        let mut buf = [0u8; 17];
        loop {
            if libc::read(cmd, buf.as_mut_ptr().cast(), 17) != 17 {
                libc::_exit(0);
            }
            let mut start = [0u8; 8];
            let mut len = [0u8; 8];
            start.copy_from_slice(&buf[1..9]);
            len.copy_from_slice(&buf[9..17]);
            let (start, len) = (u64::from_le_bytes(start), u64::from_le_bytes(len));
            let ret = match buf[0] {
                b'w' => libc::fcntl(fd, libc::F_SETLK, &flock_arg(libc::F_WRLCK, start, len)),
                b'W' => libc::fcntl(fd, libc::F_SETLKW, &flock_arg(libc::F_WRLCK, start, len)),
                b'r' => libc::fcntl(fd, libc::F_SETLK, &flock_arg(libc::F_RDLCK, start, len)),
                b'u' => libc::fcntl(fd, libc::F_SETLK, &flock_arg(libc::F_UNLCK, start, len)),
                b'f' => libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB),
                b'F' => libc::flock(fd, libc::LOCK_EX),
                b'o' => {
                    let other = libc::open(path.as_ptr(), libc::O_RDONLY);
                    if other < 0 { -1 } else { libc::close(other) }
                }
                b'c' => libc::close(fd),
                b'd' => {
                    let chunk = [0xABu8; 4096];
                    let mut done = 0u64;
                    let mut ret = 0;
                    while done < len {
                        let n = (len - done).min(4096) as usize;
                        let w = libc::pwrite(fd, chunk.as_ptr().cast(), n, (start + done) as i64);
                        if w <= 0 {
                            ret = -1;
                            break;
                        }
                        done += w as u64;
                    }
                    ret
                }
                b's' => libc::fsync(fd),
                _ => libc::_exit(2),
            };
            r = if ret < 0 {
                *libc::__errno_location()
            } else {
                0
            };
            libc::write(ev, (&raw const r).cast(), 4);
        }
    }
}

impl Holder {
    /// Forks a process that opens `path` read-write and waits for commands.
    pub(crate) fn spawn(path: &Path) -> Holder {
        let c = cpath(path);
        let (cmd_r, cmd_w) = pipe();
        let (ev_r, ev_w) = pipe();
        // SAFETY: the child only makes async-signal-safe system calls and exits with
        // _exit; it never returns into the test harness.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            holder_main(&c, cmd_r.as_raw_fd(), ev_w.as_raw_fd());
        }
        drop((cmd_r, ev_w));
        let h = Holder {
            pid,
            cmd: cmd_w,
            ev: ev_r,
        };
        assert_eq!(
            h.reply(Duration::from_secs(10)),
            Some(0),
            "holder could not open {path:?}"
        );
        h
    }

    pub(crate) fn send(&self, cmd: Cmd, start: u64, len: u64) {
        let mut buf = [0u8; 17];
        buf[0] = cmd as u8;
        buf[1..9].copy_from_slice(&start.to_le_bytes());
        buf[9..17].copy_from_slice(&len.to_le_bytes());
        // SAFETY: writes 17 bytes from a live buffer to our pipe.
        let n = unsafe { libc::write(self.cmd.as_raw_fd(), buf.as_ptr().cast(), 17) };
        assert_eq!(n, 17);
    }

    /// The child's answer (0 or an errno), or `None` if none came within `timeout`.
    pub(crate) fn reply(&self, timeout: Duration) -> Option<i32> {
        let mut p = libc::pollfd {
            fd: self.ev.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut p, 1, timeout.as_millis() as i32) };
        if n <= 0 {
            return None;
        }
        let mut r = [0u8; 4];
        // SAFETY: reads 4 bytes into a live buffer.
        let got = unsafe { libc::read(self.ev.as_raw_fd(), r.as_mut_ptr().cast(), 4) };
        (got == 4).then(|| i32::from_ne_bytes(r))
    }

    /// Runs a command and returns its answer.
    pub(crate) fn run(&self, cmd: Cmd, start: u64, len: u64) -> i32 {
        self.send(cmd, start, len);
        self.reply(Duration::from_secs(20))
            .expect("the holder did not answer")
    }

    /// Sends SIGKILL and reaps the child; returns whether it died within `timeout`.
    pub(crate) fn kill(&self, timeout: Duration) -> bool {
        // SAFETY: kill(2) and waitpid(2) on our own child.
        unsafe { libc::kill(self.pid, libc::SIGKILL) };
        let deadline = Instant::now() + timeout;
        loop {
            let mut status = 0;
            // SAFETY: as above.
            let r = unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) };
            if r == self.pid {
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        self.kill(Duration::from_secs(30));
    }
}

/// `fcntl` on a descriptor of this (test) process.
fn setlk(f: &fs::File, cmd: i32, typ: i32, start: u64, len: u64) -> Result<(), i32> {
    let fl = flock_arg(typ, start, len);
    // SAFETY: fcntl with a valid descriptor and a live flock struct.
    let r = unsafe { libc::fcntl(f.as_raw_fd(), cmd, &fl) };
    if r < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(-1))
    } else {
        Ok(())
    }
}

fn getlk(f: &fs::File, typ: i32, start: u64, len: u64) -> libc::flock {
    let mut fl = flock_arg(typ, start, len);
    // SAFETY: fcntl with a valid descriptor and a live flock struct it fills.
    let r = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_GETLK, &mut fl) };
    assert_eq!(r, 0, "F_GETLK failed: {}", std::io::Error::last_os_error());
    fl
}

fn flock(f: &fs::File, op: i32) -> Result<(), i32> {
    // SAFETY: flock on a valid descriptor.
    let r = unsafe { libc::flock(f.as_raw_fd(), op) };
    if r < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(-1))
    } else {
        Ok(())
    }
}

fn rw(p: &Path) -> fs::File {
    fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(p)
        .unwrap()
}

async fn two_mounts() -> (TestCluster, FuseMount, FuseMount) {
    let tc = TestCluster::start(bin(), 1).await.unwrap();
    let a = FuseMount::start(&tc, "");
    let b = FuseMount::start(&tc, "");
    (tc, a, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fcntl_locks_conflict_across_mounts_and_getlk_names_the_holder() {
    let (_tc, a, b) = two_mounts().await;
    tokio::task::spawn_blocking(move || {
        fs::write(a.path("f"), b"locked").unwrap();
        let h = Holder::spawn(&a.path("f"));
        assert_eq!(h.run(Cmd::Write, 0, 100), 0);
        assert_eq!(h.run(Cmd::Read, 1000, 0), 0); // read lock to the end of the file
        let f = rw(&b.path("f"));
        assert_eq!(
            setlk(&f, libc::F_SETLK, libc::F_WRLCK, 50, 11),
            Err(libc::EAGAIN)
        );
        assert_eq!(
            setlk(&f, libc::F_SETLK, libc::F_RDLCK, 99, 1),
            Err(libc::EAGAIN)
        );
        // Beside the held range, and sharing the read lock, is fine.
        setlk(&f, libc::F_SETLK, libc::F_WRLCK, 100, 10).unwrap();
        setlk(&f, libc::F_SETLK, libc::F_RDLCK, 5000, 10).unwrap();
        assert_eq!(
            setlk(&f, libc::F_SETLK, libc::F_WRLCK, 1 << 40, 1),
            Err(libc::EAGAIN)
        );
        // F_GETLK names the other mount's holder: its pid and range.
        let fl = getlk(&f, libc::F_WRLCK, 0, 10);
        assert_eq!(fl.l_type, libc::F_WRLCK as i16);
        assert_eq!((fl.l_start, fl.l_len, fl.l_pid), (0, 100, h.pid));
        let fl = getlk(&f, libc::F_WRLCK, 2000, 1);
        assert_eq!(fl.l_type, libc::F_RDLCK as i16);
        assert_eq!((fl.l_start, fl.l_len, fl.l_pid), (1000, 0, h.pid));
        let fl = getlk(&f, libc::F_WRLCK, 200, 100);
        assert_eq!(fl.l_type, libc::F_UNLCK as i16);
        // Our own lock is reported to the holder the other way round.
        assert_eq!(h.run(Cmd::Write, 105, 1), libc::EAGAIN);
        // Unlocking part of the range frees just that part.
        assert_eq!(h.run(Cmd::Unlock, 40, 20), 0);
        setlk(&f, libc::F_SETLK, libc::F_WRLCK, 50, 5).unwrap();
        assert_eq!(
            setlk(&f, libc::F_SETLK, libc::F_WRLCK, 60, 1),
            Err(libc::EAGAIN)
        );
        // Two processes on two mounts each waiting for the other's byte: the second
        // wait would deadlock and fails with EDEADLK instead.
        let (p, q) = (Holder::spawn(&a.path("f")), Holder::spawn(&b.path("f")));
        assert_eq!(p.run(Cmd::Write, 500, 1), 0);
        assert_eq!(q.run(Cmd::Write, 501, 1), 0);
        p.send(Cmd::WriteWait, 501, 1);
        assert_eq!(p.reply(Duration::from_millis(500)), None);
        assert_eq!(q.run(Cmd::WriteWait, 500, 1), libc::EDEADLK);
        assert_eq!(q.run(Cmd::Unlock, 501, 1), 0);
        assert_eq!(p.reply(Duration::from_secs(10)), Some(0));
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setlkw_waits_for_the_other_mount_and_a_killed_waiter_goes_away() {
    let (_tc, a, b) = two_mounts().await;
    tokio::task::spawn_blocking(move || {
        fs::write(a.path("f"), b"x").unwrap();
        let holder = Holder::spawn(&a.path("f"));
        assert_eq!(holder.run(Cmd::Write, 0, 1), 0);
        let waiter = Holder::spawn(&b.path("f"));
        waiter.send(Cmd::WriteWait, 0, 1);
        assert_eq!(
            waiter.reply(Duration::from_millis(1500)),
            None,
            "F_SETLKW returned while the other mount holds the lock"
        );
        let released = Instant::now();
        assert_eq!(holder.run(Cmd::Unlock, 0, 1), 0);
        assert_eq!(waiter.reply(Duration::from_secs(10)), Some(0));
        assert!(released.elapsed() < Duration::from_secs(5));
        // Now the waiter holds it.
        assert_eq!(holder.run(Cmd::Write, 0, 1), libc::EAGAIN);

        // A process killed while it waits dies at once and leaves no lock behind.
        let doomed = Holder::spawn(&a.path("f"));
        doomed.send(Cmd::WriteWait, 0, 1);
        assert_eq!(doomed.reply(Duration::from_millis(500)), None);
        assert!(
            doomed.kill(Duration::from_secs(10)),
            "a killed waiter stayed blocked"
        );
        drop(waiter); // killed: its lock goes with it
        let f = rw(&b.path("f"));
        wait_until("the lock is free once its holders are gone", || {
            setlk(&f, libc::F_SETLK, libc::F_WRLCK, 0, 1).is_ok()
        });
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flock_excludes_across_mounts_until_the_last_close() {
    let (_tc, a, b) = two_mounts().await;
    tokio::task::spawn_blocking(move || {
        fs::write(a.path("f"), b"x").unwrap();
        let h = Holder::spawn(&a.path("f"));
        assert_eq!(h.run(Cmd::Flock, 0, 0), 0);
        let f = fs::File::open(b.path("f")).unwrap();
        assert_eq!(
            flock(&f, libc::LOCK_EX | libc::LOCK_NB),
            Err(libc::EWOULDBLOCK)
        );
        assert_eq!(
            flock(&f, libc::LOCK_SH | libc::LOCK_NB),
            Err(libc::EWOULDBLOCK)
        );
        // Another descriptor of the same file in this process is another flock owner.
        let g = fs::File::open(b.path("f")).unwrap();
        assert_eq!(
            flock(&g, libc::LOCK_EX | libc::LOCK_NB),
            Err(libc::EWOULDBLOCK)
        );
        // Closing the holder's descriptor releases the flock (soon after: the kernel sends
        // the release of a file in the background once close(2) has returned).
        assert_eq!(h.run(Cmd::Close, 0, 0), 0);
        wait_until("flock free after its holder closed", || {
            flock(&f, libc::LOCK_EX | libc::LOCK_NB).is_ok()
        });
        assert_eq!(
            flock(&g, libc::LOCK_EX | libc::LOCK_NB),
            Err(libc::EWOULDBLOCK)
        );
        // A waiting flock on the other mount gets it when this one is dropped.
        let w = Holder::spawn(&a.path("f"));
        w.send(Cmd::FlockWait, 0, 0);
        assert_eq!(w.reply(Duration::from_millis(1000)), None);
        flock(&f, libc::LOCK_UN).unwrap();
        assert_eq!(w.reply(Duration::from_secs(10)), Some(0));
        // Shared locks share.
        drop(w);
        wait_until("flock free after its holder died", || {
            flock(&f, libc::LOCK_SH | libc::LOCK_NB).is_ok()
        });
        flock(&g, libc::LOCK_SH | libc::LOCK_NB).unwrap();
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_go_with_their_process_their_descriptor_and_their_mount() {
    // A dead mount's locks are kept for the MDS's grace period: shortened from a minute.
    const GRACE_S: u64 = 10;
    let mut tc = TestCluster::start(bin(), 1).await.unwrap();
    tc.mds.add_args(&["--handle-grace-s", &GRACE_S.to_string()]);
    tc.mds.restart().unwrap();
    tc.wait_ready().await.unwrap();
    let mut a = FuseMount::start(&tc, "");
    let b = FuseMount::start(&tc, "");
    tokio::task::spawn_blocking(move || {
        fs::write(a.path("f"), b"x").unwrap();
        let f = rw(&b.path("f"));
        // The process exits: its locks go.
        let h = Holder::spawn(&a.path("f"));
        assert_eq!(h.run(Cmd::Write, 0, 0), 0);
        assert_eq!(
            setlk(&f, libc::F_SETLK, libc::F_WRLCK, 7, 1),
            Err(libc::EAGAIN)
        );
        drop(h);
        setlk(&f, libc::F_SETLK, libc::F_WRLCK, 7, 1).unwrap();
        setlk(&f, libc::F_SETLK, libc::F_UNLCK, 0, 0).unwrap();
        // Closing any descriptor of the file drops the process's POSIX locks.
        let h = Holder::spawn(&a.path("f"));
        assert_eq!(h.run(Cmd::Write, 0, 0), 0);
        assert_eq!(h.run(Cmd::OpenClose, 0, 0), 0);
        setlk(&f, libc::F_SETLK, libc::F_WRLCK, 7, 1).unwrap();
        setlk(&f, libc::F_SETLK, libc::F_UNLCK, 0, 0).unwrap();
        assert_eq!(h.run(Cmd::Write, 0, 0), 0);
        assert_eq!(
            setlk(&f, libc::F_SETLK, libc::F_WRLCK, 7, 1),
            Err(libc::EAGAIN)
        );
        // The holder's mount dies: to the MDT that is a broken connection, whose locks
        // are kept for the client to come back (the grace period), then released.
        a.kill_server();
        let killed = Instant::now();
        std::thread::sleep(Duration::from_secs(2));
        assert_eq!(
            setlk(&f, libc::F_SETLK, libc::F_WRLCK, 7, 1),
            Err(libc::EAGAIN),
            "a broken connection's locks are kept for the grace period"
        );
        while setlk(&f, libc::F_SETLK, libc::F_WRLCK, 7, 1).is_err() {
            assert!(
                killed.elapsed() < Duration::from_secs(GRACE_S + 30),
                "the dead mount's lock was never released"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
        assert!(killed.elapsed() >= Duration::from_secs(GRACE_S - 2));
        drop(h);
    })
    .await
    .unwrap();
}
