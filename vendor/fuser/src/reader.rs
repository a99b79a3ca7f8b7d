//! Turn-taking reading of one polled device descriptor (a weftfs patch to fuser).
//!
//! # Why
//! Unpatched, every session thread sleeps in `read(2)` on its own clone of the device, and
//! each request the kernel queues wakes one of them: two cross-CPU wake-ups per request
//! (the reader's, then the caller's when the reply is written). In a virtual machine a
//! wake-up costs tens of microseconds, more than answering a cached `stat`; a program that
//! makes one call after another pays it on every call.
//!
//! # How
//! With [`crate::Config::poll`] set, the threads share one non-blocking descriptor and
//! take turns at it: one thread at a time reads. After a reply the reader keeps reading
//! for up to the poll time (yielding to other runnable threads between attempts), so the
//! next request of a program that makes calls one after another is taken without a
//! wake-up. It sleeps in `poll(2)` once that time passes without a request, or at once if
//! the previous wait already outlasted it (an idle or slow caller: no time is spun in vain
//! twice in a row). Only the reader ever waits on the device, so the kernel wakes no other
//! thread for a request the reader takes.
//!
//! The reader gives up its turn as soon as it has read a request, and wakes a waiting
//! thread to take it only before work that copies a lot on the thread (reads and writes
//! of [`BUSY_IO_BYTES`] or more) or may sleep (fsync). Other requests are started on the reading thread one after the
//! other: the file system is expected to hand what must wait elsewhere (weftfs's mount
//! answers on the thread only what needs no waiting). Waking helpers for requests that
//! were merely queued made four processes creating files on two CPUs 20 % slower.

use std::os::fd::AsFd;
use std::time::Duration;
use std::time::Instant;

use nix::errno::Errno;
use nix::poll::PollFd;
use nix::poll::PollFlags;
use nix::poll::PollTimeout;
use parking_lot::Condvar;
use parking_lot::Mutex;

use crate::channel::Channel;
use crate::ll::fuse_abi::fuse_opcode;

/// The reading turn shared by a session's threads.
#[derive(Debug)]
pub(crate) struct TurnReader {
    /// How long the reader keeps trying for the next request before it sleeps.
    poll: Duration,
    state: Mutex<State>,
    turn: Condvar,
}

#[derive(Debug, Default)]
struct State {
    /// Whether a thread holds the turn.
    taken: bool,
    /// Threads waiting for the turn.
    waiting: usize,
    /// Whether the previous wait for a request ended within the poll time.
    hot: bool,
    /// The device is gone (unmounted): every thread stops.
    done: bool,
}

impl TurnReader {
    /// Makes `ch` non-blocking and returns the turn for threads reading it.
    pub(crate) fn new(ch: &Channel, poll: Duration) -> std::io::Result<Self> {
        let fd = ch.as_fd();
        let flags = nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_GETFL)?;
        let flags = nix::fcntl::OFlag::from_bits_retain(flags) | nix::fcntl::OFlag::O_NONBLOCK;
        nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_SETFL(flags))?;
        Ok(Self {
            poll,
            state: Mutex::new(State::default()),
            turn: Condvar::new(),
        })
    }

    /// Waits for the turn, reads one request into `buf` and returns its size, giving up the
    /// turn; wakes a waiting thread to read next if this one is about to be busy with the
    /// request.
    pub(crate) fn receive(&self, ch: &Channel, buf: &mut [u8]) -> nix::Result<usize> {
        let hot = {
            let mut s = self.state.lock();
            while s.taken && !s.done {
                s.waiting += 1;
                self.turn.wait(&mut s);
                s.waiting -= 1;
            }
            if s.done {
                return Err(Errno::ENODEV);
            }
            s.taken = true;
            s.hot
        };
        let read = self.read(ch, buf, hot);
        let mut s = self.state.lock();
        s.taken = false;
        let wake = match read {
            Ok((size, in_time)) => {
                s.hot = in_time;
                busy_opcode(&buf[..size])
            }
            Err(Errno::ENODEV) => {
                s.done = true;
                self.turn.notify_all();
                false
            }
            Err(_) => true,
        };
        if wake && s.waiting > 0 {
            self.turn.notify_one();
        }
        read.map(|(size, _)| size)
    }

    /// Reads one request: its size and whether it came within the poll time.
    fn read(&self, ch: &Channel, buf: &mut [u8], hot: bool) -> nix::Result<(usize, bool)> {
        let start = Instant::now();
        loop {
            match ch.receive(buf) {
                Ok(size) => return Ok((size, start.elapsed() <= self.poll)),
                // ENOENT: the request was interrupted before it was read.
                Err(Errno::ENOENT | Errno::EINTR) => continue,
                Err(Errno::EAGAIN) => {}
                Err(e) => return Err(e),
            }
            if hot && start.elapsed() < self.poll {
                std::thread::yield_now();
                continue;
            }
            let mut fds = [PollFd::new(ch.as_fd(), PollFlags::POLLIN)];
            match nix::poll::poll(&mut fds, PollTimeout::NONE) {
                // Readable, or an error the next read reports (ENODEV once unmounted).
                Ok(_) | Err(Errno::EINTR) => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// Reads and writes from this size on copy long enough on the thread that another
/// thread should read meanwhile; smaller ones (4 KiB random reads) cost less than a wake-up.
const BUSY_IO_BYTES: u32 = 64 * 1024;

/// Whether the thread that read this request is about to spend long on it: copying a big
/// read's or write's data, or waiting for an fsync.
fn busy_opcode(req: &[u8]) -> bool {
    // `fuse_in_header` is `len: u32, opcode: u32, unique: u64, nodeid: u64, uid, gid,
    // pid, padding: u32` (40 bytes, native byte order); `fuse_read_in` and
    // `fuse_write_in` follow it with `fh: u64, offset: u64, size: u32`.
    let u32_at = |at: usize| {
        req.get(at..at + 4)
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .map(u32::from_ne_bytes)
    };
    let Some(op) = u32_at(4) else {
        return false;
    };
    if op == fuse_opcode::FUSE_READ as u32 || op == fuse_opcode::FUSE_WRITE as u32 {
        return u32_at(56).is_some_and(|size| size >= BUSY_IO_BYTES);
    }
    op == fuse_opcode::FUSE_FSYNC as u32 || op == fuse_opcode::FUSE_FSYNCDIR as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(op: fuse_opcode, size: u32) -> Vec<u8> {
        let mut r = vec![0u8; 80];
        r[4..8].copy_from_slice(&(op as u32).to_ne_bytes());
        r[56..60].copy_from_slice(&size.to_ne_bytes());
        r
    }

    #[test]
    fn big_data_requests_and_syncs_are_busy() {
        use fuse_opcode::*;
        assert!(busy_opcode(&request(FUSE_READ, 1 << 20)));
        assert!(busy_opcode(&request(FUSE_WRITE, 128 << 10)));
        assert!(!busy_opcode(&request(FUSE_READ, 4096)));
        assert!(!busy_opcode(&request(FUSE_WRITE, 4096)));
        assert!(busy_opcode(&request(FUSE_FSYNC, 0)));
        assert!(busy_opcode(&request(FUSE_FSYNCDIR, 0)));
        assert!(!busy_opcode(&request(FUSE_LOOKUP, 1 << 20)));
        assert!(!busy_opcode(&request(FUSE_GETATTR, 0)));
        // Cut short: never busy, never a panic.
        assert!(!busy_opcode(&[1, 2, 3]));
        assert!(!busy_opcode(&request(FUSE_READ, 1 << 20)[..50]));
    }
}
