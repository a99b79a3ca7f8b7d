//! FUSE over io_uring (Linux 6.14+, `FUSE_OVER_IO_URING`; a weftfs patch to fuser).
//!
//! # Why
//! Over `/dev/fuse` every request wakes a reading thread and every reply wakes the caller,
//! often across CPUs. With a ring the daemon keeps one queue of entries per CPU: the kernel
//! puts a request made on CPU N in queue N and completes it in the thread that waits on
//! that queue's ring, and a reply is committed in the same `io_uring_enter` that fetches
//! the queue's next request.
//!
//! # How
//! After the INIT handshake over `/dev/fuse`, if the kernel offered `FUSE_OVER_IO_URING`
//! and [`crate::Config::uring`] allows it, the INIT reply carries the flag and one thread
//! per possible CPU (queue id = CPU index, pinned to it) sets up an io_uring with 128-byte
//! SQEs and registers [`QUEUE_DEPTH`] entries (`FUSE_IO_URING_CMD_REGISTER`). The kernel
//! sends requests through the rings once every queue has an entry; until then it holds
//! them. Each request is rebuilt contiguous ([`abi::reassemble`]) and dispatched like one
//! read from `/dev/fuse`; its reply is written into the entry and committed with
//! `FUSE_IO_URING_CMD_COMMIT_AND_FETCH` ([`queue`]). FORGET and INTERRUPT still come
//! through `/dev/fuse` (the kernel sends only regular requests through the ring), so one
//! `/dev/fuse` thread keeps reading; notifications are still written there.
//!
//! A failed register makes the kernel fall back to `/dev/fuse` for the connection; with
//! [`UringMode::Auto`] the session then serves it that way, with [`UringMode::On`] the
//! mount fails.

pub(crate) mod abi;
pub(crate) mod queue;

use std::io;
use std::os::fd::AsFd;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use log::info;
use log::warn;

use crate::channel::Channel;
use queue::QueueShared;
pub(crate) use queue::RingDispatch;
pub(crate) use queue::RingReply;

/// Entries per queue: requests of one CPU that can be in the daemon at once (a request
/// beyond that waits in the kernel until an entry is committed).
pub(crate) const QUEUE_DEPTH: usize = 16;

/// Whether a session serves requests through io_uring queues (weftfs patch).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UringMode {
    /// Never: requests are read from `/dev/fuse`.
    #[default]
    Off,
    /// When the kernel offers it and the queues register; `/dev/fuse` otherwise.
    Auto,
    /// Always: the mount fails when the ring cannot be used.
    On,
}

/// How a session receives the kernel's requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FuseTransport {
    /// `read(2)` and `write(2)` on `/dev/fuse`.
    DevFuse,
    /// FUSE over io_uring: per-CPU queues of ring entries.
    Uring,
}

impl FuseTransport {
    /// `"uring"` or `"dev_fuse"`.
    pub fn as_str(self) -> &'static str {
        match self {
            FuseTransport::DevFuse => "dev_fuse",
            FuseTransport::Uring => "uring",
        }
    }
}

/// Which transport a session uses and how many requests came through rings; cheap to
/// clone and read from any thread.
#[derive(Debug, Clone, Default)]
pub struct TransportStats {
    uring: Arc<AtomicBool>,
    served: Arc<AtomicU64>,
}

impl TransportStats {
    /// The session's transport.
    pub fn transport(&self) -> FuseTransport {
        if self.uring.load(Ordering::Acquire) {
            FuseTransport::Uring
        } else {
            FuseTransport::DevFuse
        }
    }

    /// Requests received through the session's rings so far.
    pub fn ring_requests(&self) -> u64 {
        self.served.load(Ordering::Relaxed)
    }
}

/// The number of queues the kernel wants: one per possible CPU.
pub(crate) fn nr_queues() -> usize {
    std::fs::read_to_string("/sys/devices/system/cpu/possible")
        .ok()
        .and_then(|s| parse_cpu_list(s.trim()))
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// The count of CPUs in a list such as `0-3,5` (`None` if malformed).
fn parse_cpu_list(s: &str) -> Option<usize> {
    let mut n = 0usize;
    for part in s.split(',') {
        let part = part.trim();
        match part.split_once('-') {
            Some((a, b)) => {
                let a: usize = a.parse().ok()?;
                let b: usize = b.parse().ok()?;
                n += b.checked_sub(a)? + 1;
            }
            None => {
                let _: usize = part.parse().ok()?;
                n += 1;
            }
        }
    }
    (n > 0).then_some(n)
}

/// Whether this process can create an io_uring with 128-byte SQEs (checked before the INIT
/// reply offers the ring: once the reply carries the flag, the kernel holds requests until
/// the ring is ready or a register fails).
pub(crate) fn probe() -> io::Result<()> {
    io_uring::IoUring::<io_uring::squeue::Entry128, io_uring::cqueue::Entry>::builder()
        .build(2)
        .map(drop)
}

/// The ring queues of a session.
pub(crate) struct Ring {
    queues: Vec<Arc<QueueShared>>,
    threads: Vec<JoinHandle<()>>,
    go: Vec<mpsc::Sender<Arc<dyn RingDispatch>>>,
}

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring")
            .field("queues", &self.queues.len())
            .finish()
    }
}

impl Ring {
    /// Starts a thread per queue and waits until each has registered its entries (the INIT
    /// reply with `FUSE_OVER_IO_URING` must have been written). On failure the started
    /// threads end, and the kernel serves the connection through `/dev/fuse` (a failed
    /// register switches it back).
    pub(crate) fn start(
        ch: &Channel,
        payload_len: usize,
        stats: &TransportStats,
    ) -> io::Result<Ring> {
        let n = nr_queues();
        let (ready_tx, ready_rx) = mpsc::channel();
        let mut ring = Ring {
            queues: Vec::with_capacity(n),
            threads: Vec::with_capacity(n),
            go: Vec::with_capacity(n),
        };
        for qid in 0..n {
            let qid16 = u16::try_from(qid).map_err(|_| io::Error::other("too many CPUs"))?;
            let (go_tx, go_rx) = mpsc::channel();
            let setup = queue::QueueSetup {
                qid: qid16,
                depth: QUEUE_DEPTH,
                payload_len,
                dev_fd: ch.as_fd().as_raw_fd(),
                served: stats.served.clone(),
                ready: ready_tx.clone(),
                go: go_rx,
                ch: ch.sender(),
            };
            ring.go.push(go_tx);
            let t = std::thread::Builder::new()
                .name(format!("fuser-ring-{qid}"))
                .spawn(move || queue::queue_thread(setup));
            match t {
                Ok(t) => ring.threads.push(t),
                Err(e) => {
                    force_dev_fuse(ch);
                    return Err(e);
                }
            }
        }
        drop(ready_tx);
        let mut first_err = None;
        for _ in 0..n {
            match ready_rx.recv_timeout(Duration::from_secs(30)) {
                Ok((_, Ok(q))) => ring.queues.push(q),
                Ok((qid, Err(e))) => {
                    warn!("FUSE over io_uring: queue {qid} did not register: {e}");
                    first_err.get_or_insert(e);
                }
                Err(_) => {
                    first_err.get_or_insert(io::Error::other("ring queue setup timed out"));
                    break;
                }
            }
        }
        match first_err {
            None => {
                stats.uring.store(true, Ordering::Release);
                info!(
                    "FUSE over io_uring: {n} queues of {QUEUE_DEPTH} entries ({payload_len} byte payloads)"
                );
                Ok(ring)
            }
            Some(e) => {
                // A queue whose ring could not even be made never failed a register: make
                // sure the kernel stops waiting for the ring.
                force_dev_fuse(ch);
                Err(e)
            }
        }
    }

    /// Lets the queue threads serve with `dispatcher`.
    pub(crate) fn run(&mut self, dispatcher: Arc<dyn RingDispatch>) {
        for go in self.go.drain(..) {
            let _ = go.send(dispatcher.clone());
        }
    }

    /// Stops the queue threads and waits for them.
    pub(crate) fn stop(&mut self) {
        self.go.clear();
        for q in &self.queues {
            q.stop.store(true, Ordering::Release);
            q.wake();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Sends a register the kernel refuses (an out-of-range queue), which makes it serve the
/// connection through `/dev/fuse` instead of waiting for the ring.
fn force_dev_fuse(ch: &Channel) {
    let res = (|| -> io::Result<i32> {
        let mut ring =
            io_uring::IoUring::<io_uring::squeue::Entry128, io_uring::cqueue::Entry>::builder()
                .build(2)?;
        let cmd = abi::fuse_uring_cmd_req {
            qid: u16::MAX,
            ..Default::default()
        };
        let e = io_uring::opcode::UringCmd80::new(
            io_uring::types::Fd(ch.as_fd().as_raw_fd()),
            abi::FUSE_IO_URING_CMD_REGISTER,
        )
        .cmd(cmd.to_cmd_area())
        .build();
        // SAFETY: the SQE carries no pointers (no iovecs: the kernel refuses it first).
        unsafe { ring.submission().push(&e) }
            .map_err(|_| io::Error::other("submission queue full"))?;
        ring.submit_and_wait(1)?;
        Ok(ring.completion().next().map_or(0, |c| c.result()))
    })();
    match res {
        Ok(r) if r < 0 => {}
        other => warn!("FUSE over io_uring: could not switch back to /dev/fuse: {other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-1"), Some(2));
        assert_eq!(parse_cpu_list("0"), Some(1));
        assert_eq!(parse_cpu_list("0-3,5,7-8"), Some(7));
        assert_eq!(parse_cpu_list(""), None);
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
        assert!(nr_queues() >= 1);
    }

    #[test]
    fn transport_names() {
        assert_eq!(FuseTransport::Uring.as_str(), "uring");
        assert_eq!(FuseTransport::DevFuse.as_str(), "dev_fuse");
        assert_eq!(
            TransportStats::default().transport(),
            FuseTransport::DevFuse
        );
    }
}

#[cfg(test)]
mod mount_tests;
