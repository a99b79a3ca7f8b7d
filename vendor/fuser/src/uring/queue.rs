//! One ring queue: its entries' buffers, the thread that owns its io_uring, and the reply
//! that commits into an entry (weftfs patch).
//!
//! Only the queue thread submits to its ring, so that the kernel runs each queue's work in
//! that thread (a request from CPU N is copied in and completed by CPU N's queue thread).
//! A reply writes its entry's buffers, which it owns from the moment the queue thread
//! handed the request out until the commit is submitted, then adds the entry to the queue's
//! list of commits. A reply made on the queue thread (while it dispatches) is submitted
//! with the `io_uring_enter` that waits for the next request; a reply from another thread
//! wakes the queue thread through an eventfd the ring keeps a read on.

use std::alloc::Layout;
use std::cell::Cell;
use std::fmt;
use std::io;
use std::io::IoSlice;
use std::os::fd::AsFd;
use std::os::fd::AsRawFd;
use std::os::fd::RawFd;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::sync::mpsc;

use io_uring::IoUring;
use io_uring::cqueue;
use io_uring::opcode;
use io_uring::squeue;
use io_uring::types;
use log::debug;
use log::error;
use log::warn;
use nix::sys::eventfd::EfdFlags;
use nix::sys::eventfd::EventFd;
use parking_lot::Mutex;

use super::abi;
use crate::channel::ChannelSender;

/// `user_data` of the eventfd read.
const EVENTFD_TAG: u64 = u64::MAX;

/// Dispatches a request that came through a ring (implemented by the session's event loop).
pub(crate) trait RingDispatch: Send + Sync {
    /// Serves the request in `data`, replying through `reply`.
    fn dispatch(&self, data: &[u8], reply: RingReply);
}

/// An entry's two buffers, as registered with the kernel.
struct EntryBufs {
    header: NonNull<u8>,
    payload: NonNull<u8>,
    payload_len: usize,
    /// The iovecs the register command points at.
    iov: [libc::iovec; 2],
}

const HEADER_LAYOUT: Layout = match Layout::from_size_align(abi::HEADER_SZ, 64) {
    Ok(l) => l,
    Err(_) => panic!("header layout"),
};

fn payload_layout(len: usize) -> io::Result<Layout> {
    Layout::from_size_align(len.max(1), 4096).map_err(|_| io::Error::other("payload size"))
}

impl EntryBufs {
    fn new(payload_len: usize) -> io::Result<Self> {
        let pl = payload_layout(payload_len)?;
        // SAFETY: both layouts have a non-zero size (checked above / a constant of 288).
        // Zeroed raw allocations, not Vecs: the kernel writes into them while no Rust
        // reference to them exists (see `QueueShared`), which a Vec or Box would not allow.
        let header = NonNull::new(unsafe { std::alloc::alloc_zeroed(HEADER_LAYOUT) });
        // SAFETY: as above.
        let payload = NonNull::new(unsafe { std::alloc::alloc_zeroed(pl) });
        let (header, payload) = match (header, payload) {
            (Some(h), Some(p)) => (h, p),
            (h, p) => {
                // SAFETY: each pointer was allocated just above with its layout.
                unsafe {
                    if let Some(h) = h {
                        std::alloc::dealloc(h.as_ptr(), HEADER_LAYOUT);
                    }
                    if let Some(p) = p {
                        std::alloc::dealloc(p.as_ptr(), pl);
                    }
                }
                return Err(io::Error::from(io::ErrorKind::OutOfMemory));
            }
        };
        let iov = [
            libc::iovec {
                iov_base: header.as_ptr().cast(),
                iov_len: abi::HEADER_SZ,
            },
            libc::iovec {
                iov_base: payload.as_ptr().cast(),
                iov_len: payload_len,
            },
        ];
        Ok(Self {
            header,
            payload,
            payload_len,
            iov,
        })
    }
}

impl Drop for EntryBufs {
    fn drop(&mut self) {
        if let Ok(pl) = payload_layout(self.payload_len) {
            // SAFETY: allocated in `new` with these layouts, freed once here. The kernel no
            // longer writes to them: the entry's buffers live in `QueueShared`, which the
            // queue thread holds until after its ring is closed and the thread (the only
            // task the kernel copies requests in) is gone.
            unsafe {
                std::alloc::dealloc(self.header.as_ptr(), HEADER_LAYOUT);
                std::alloc::dealloc(self.payload.as_ptr(), pl);
            }
        }
    }
}

/// What a queue's thread and the replies to its requests share.
pub(crate) struct QueueShared {
    pub(crate) qid: u16,
    entries: Box<[EntryBufs]>,
    /// Entries whose reply is written, with their commit ids, for the thread to commit.
    pending: Mutex<Vec<(u16, u64)>>,
    /// Wakes the queue thread for a reply from another thread (or to stop).
    wake: EventFd,
    /// Set when the session ends: the thread stops at its next turn.
    pub(crate) stop: AtomicBool,
    /// The thread is (about to be) waiting in the kernel: a commit from another thread
    /// must wake it. Clear while it runs, when it drains `pending` before waiting anyway.
    asleep: AtomicBool,
    /// Where the eventfd read lands (the kernel writes it; never read).
    evbuf: NonNull<u64>,
    /// Requests served through rings, shared with the session's stats.
    served: Arc<AtomicU64>,
}

// SAFETY: the raw pointers are to allocations `QueueShared` owns. Each entry's buffers are
// accessed by one party at a time: the kernel while a command of the entry is in flight,
// the queue thread between the command's completion and handing the request to a reply,
// then that reply (which is unique: `RingReply` is not Clone and commits once) until it
// queues the commit. `pending` and the atomics are thread-safe on their own.
unsafe impl Send for QueueShared {}
// SAFETY: see `Send`.
unsafe impl Sync for QueueShared {}

impl Drop for QueueShared {
    fn drop(&mut self) {
        // SAFETY: allocated with Box::into_raw in `new`; freed once.
        drop(unsafe { Box::from_raw(self.evbuf.as_ptr()) });
    }
}

impl fmt::Debug for QueueShared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueueShared")
            .field("qid", &self.qid)
            .field("entries", &self.entries.len())
            .finish()
    }
}

thread_local! {
    /// The queue whose thread this is (null elsewhere).
    static ON_QUEUE: Cell<*const QueueShared> = const { Cell::new(std::ptr::null()) };
}

impl QueueShared {
    fn new(qid: u16, depth: usize, payload_len: usize, served: Arc<AtomicU64>) -> io::Result<Self> {
        let entries = (0..depth)
            .map(|_| EntryBufs::new(payload_len))
            .collect::<io::Result<Vec<_>>>()?
            .into_boxed_slice();
        let evbuf = NonNull::from(Box::leak(Box::new(0u64)));
        Ok(Self {
            qid,
            entries,
            pending: Mutex::new(Vec::with_capacity(depth)),
            wake: EventFd::from_value_and_flags(0, EfdFlags::EFD_CLOEXEC)?,
            stop: AtomicBool::new(false),
            asleep: AtomicBool::new(false),
            evbuf,
            served,
        })
    }

    /// Wakes the queue thread.
    pub(crate) fn wake(&self) {
        if let Err(e) = self.wake.write(1) {
            warn!("ring queue {}: eventfd write: {e}", self.qid);
        }
    }

    /// Writes a reply (`fuse_out_header` then the body, as `bufs` concatenated) into entry
    /// `idx`. A body too large for the payload buffer is replaced by an EIO error.
    ///
    /// # Safety
    /// The caller owns entry `idx` (see `QueueShared`'s `Send`).
    unsafe fn write_reply(&self, idx: usize, bufs: &[IoSlice<'_>]) {
        let Some(ent) = self.entries.get(idx) else {
            return;
        };
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        let body = total.saturating_sub(abi::OUT_HEADER_SZ);
        let mut out_header = [0u8; abi::OUT_HEADER_SZ];
        let mut payload_sz = body;
        if total < abi::OUT_HEADER_SZ || body > ent.payload_len {
            error!(
                "ring reply of {total} bytes does not fit (payload buffer {})",
                ent.payload_len
            );
            // Keep the unique (from the header), answer EIO without a body.
            let mut n = 0;
            for b in bufs {
                let take = (abi::OUT_HEADER_SZ - n).min(b.len());
                out_header[n..n + take].copy_from_slice(&b[..take]);
                n += take;
                if n == abi::OUT_HEADER_SZ {
                    break;
                }
            }
            out_header[4..8].copy_from_slice(&(-libc::EIO).to_ne_bytes());
            payload_sz = 0;
        } else {
            let mut at = 0usize; // position in the concatenation
            for b in bufs {
                let mut s: &[u8] = b;
                if at < abi::OUT_HEADER_SZ {
                    let take = (abi::OUT_HEADER_SZ - at).min(s.len());
                    out_header[at..at + take].copy_from_slice(&s[..take]);
                    at += take;
                    s = &s[take..];
                }
                if !s.is_empty() {
                    let off = at - abi::OUT_HEADER_SZ;
                    // SAFETY: off + s.len() <= body <= payload_len (checked above); the
                    // caller owns the entry, so nothing else reads or writes the buffer.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            s.as_ptr(),
                            ent.payload.as_ptr().add(off),
                            s.len(),
                        );
                    }
                    at += s.len();
                }
            }
        }
        let psz = u32::try_from(payload_sz).unwrap_or(0);
        // SAFETY: the header buffer is HEADER_SZ bytes; both writes are inside it; the
        // caller owns the entry.
        unsafe {
            std::ptr::copy_nonoverlapping(
                out_header.as_ptr(),
                ent.header.as_ptr(),
                abi::OUT_HEADER_SZ,
            );
            std::ptr::copy_nonoverlapping(
                psz.to_ne_bytes().as_ptr(),
                ent.header.as_ptr().add(abi::PAYLOAD_SZ_OFF),
                4,
            );
        }
    }

    /// Queues the commit of entry `idx`; wakes the thread if it waits in the kernel.
    fn commit(&self, idx: u16, commit_id: u64) {
        self.pending.lock().push((idx, commit_id));
        // The thread sets `asleep` before it looks at the list a last time and waits (both
        // SeqCst, the list behind its lock): either it sees this commit, or this sees
        // `asleep` and wakes it. Only the first such commit writes the eventfd.
        let on_thread = ON_QUEUE.with(|q| std::ptr::eq(q.get(), self));
        if !on_thread && self.asleep.swap(false, Ordering::SeqCst) {
            self.wake();
        }
    }
}

/// The reply to a request that came through a ring: writes into the request's entry and
/// commits it (once; dropped unsent, it commits an EIO error).
pub(crate) struct RingReply {
    queue: Arc<QueueShared>,
    idx: u16,
    commit_id: u64,
    sent: AtomicBool,
    /// For what a reply does besides answering (backing files).
    pub(crate) ch: ChannelSender,
}

impl fmt::Debug for RingReply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RingReply")
            .field("qid", &self.queue.qid)
            .field("idx", &self.idx)
            .field("commit_id", &self.commit_id)
            .finish()
    }
}

impl RingReply {
    /// Writes the reply into the entry and commits it.
    pub(crate) fn send(&self, bufs: &[IoSlice<'_>]) -> io::Result<()> {
        if self.sent.swap(true, Ordering::AcqRel) {
            return Err(io::Error::other("ring reply already sent"));
        }
        // SAFETY: this reply owns its entry until it queues the commit just below, and
        // `sent` makes this happen once.
        unsafe { self.queue.write_reply(usize::from(self.idx), bufs) };
        self.queue.commit(self.idx, self.commit_id);
        Ok(())
    }
}

impl Drop for RingReply {
    fn drop(&mut self) {
        if !self.sent.load(Ordering::Acquire) {
            // The kernel holds the entry until it is committed: answer EIO.
            let h = crate::ll::fuse_abi::fuse_out_header {
                len: abi::OUT_HEADER_SZ as u32,
                error: -libc::EIO,
                unique: self.commit_id,
            };
            let _ = self.send(&[IoSlice::new(zerocopy::IntoBytes::as_bytes(&h))]);
        }
    }
}

/// Sets the SQE's `len` (the iovec count of a register).
fn set_sqe_len(e: &mut squeue::Entry128, len: u32) {
    const _: () = assert!(std::mem::size_of::<squeue::Entry128>() == 128);
    // SAFETY: `Entry128` is `#[repr(C)]`: the 64-byte `io_uring_sqe` followed by 64 command
    // bytes, all plain integers, so any bytes are valid; `len` is the `u32` at byte 24 of
    // `io_uring_sqe` (uapi io_uring.h), inside the 128 bytes. The crate's `UringCmd80` has
    // no setter for it, and `FUSE_IO_URING_CMD_REGISTER` requires it to be 2.
    unsafe {
        (e as *mut squeue::Entry128)
            .cast::<u8>()
            .add(24)
            .cast::<u32>()
            .write_unaligned(len);
    }
}

fn register_sqe(q: &QueueShared, idx: usize) -> squeue::Entry128 {
    let cmd = abi::fuse_uring_cmd_req {
        qid: q.qid,
        ..Default::default()
    };
    let iov = q.entries.get(idx).map_or(0, |e| e.iov.as_ptr() as u64);
    let mut e = opcode::UringCmd80::new(types::Fixed(0), abi::FUSE_IO_URING_CMD_REGISTER)
        .cmd(cmd.to_cmd_area())
        .addr(Some(iov))
        .build()
        .user_data(idx as u64);
    set_sqe_len(&mut e, 2);
    e
}

fn commit_sqe(qid: u16, idx: u16, commit_id: u64) -> squeue::Entry128 {
    let cmd = abi::fuse_uring_cmd_req {
        qid,
        commit_id,
        ..Default::default()
    };
    opcode::UringCmd80::new(types::Fixed(0), abi::FUSE_IO_URING_CMD_COMMIT_AND_FETCH)
        .cmd(cmd.to_cmd_area())
        .build()
        .user_data(u64::from(idx))
}

fn eventfd_sqe(q: &QueueShared) -> squeue::Entry128 {
    opcode::Read::new(
        types::Fd(q.wake.as_fd().as_raw_fd()),
        q.evbuf.as_ptr().cast(),
        8,
    )
    .build()
    .user_data(EVENTFD_TAG)
    .into()
}

/// Everything a queue thread needs to set itself up.
pub(crate) struct QueueSetup {
    pub(crate) qid: u16,
    pub(crate) depth: usize,
    pub(crate) payload_len: usize,
    pub(crate) dev_fd: RawFd,
    pub(crate) served: Arc<AtomicU64>,
    /// Where the thread reports whether its entries registered (and its shared half).
    pub(crate) ready: mpsc::Sender<(u16, io::Result<Arc<QueueShared>>)>,
    /// What the thread dispatches with once the session runs (closed: stop).
    pub(crate) go: mpsc::Receiver<Arc<dyn RingDispatch>>,
    /// The session's device, for replies' backing-file calls.
    pub(crate) ch: ChannelSender,
}

fn pin_to_cpu(cpu: usize) {
    let mut set = nix::sched::CpuSet::new();
    if set.set(cpu).is_ok() {
        if let Err(e) = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set) {
            debug!("ring queue {cpu}: not pinned: {e}");
        }
    }
}

/// Sets up the queue's ring and registers its entries (reported through `ready`), waits
/// for the session to run, then serves the queue until the session ends.
pub(crate) fn queue_thread(s: QueueSetup) {
    pin_to_cpu(usize::from(s.qid));
    let (shared, mut ring, early) = match setup(&s) {
        Ok(v) => v,
        Err(e) => {
            let _ = s.ready.send((s.qid, Err(e)));
            return;
        }
    };
    let _ = s.ready.send((s.qid, Ok(shared.clone())));
    let Ok(dispatcher) = s.go.recv() else {
        return; // the session ended before running (or the ring is not used)
    };
    ON_QUEUE.with(|q| q.set(Arc::as_ptr(&shared)));
    if let Err(e) = serve(&shared, &mut ring, early, &*dispatcher, &s.ch) {
        error!("ring queue {}: {e}", s.qid);
    }
    ON_QUEUE.with(|q| q.set(std::ptr::null()));
    // The ring closes here, before `shared` (and the buffers the kernel knew) can go.
    drop(ring);
    drop(shared);
}

type Ring = IoUring<squeue::Entry128, cqueue::Entry>;

/// Completions that arrived while the entries were being registered.
type Early = Vec<(u64, i32)>;

fn setup(s: &QueueSetup) -> io::Result<(Arc<QueueShared>, Ring, Early)> {
    let shared = Arc::new(QueueShared::new(
        s.qid,
        s.depth,
        s.payload_len,
        s.served.clone(),
    )?);
    let slots = u32::try_from(s.depth + 1).map_err(|_| io::Error::other("depth"))?;
    let mut ring: Ring = IoUring::builder().setup_cqsize(slots * 2).build(slots)?;
    ring.submitter().register_files(&[s.dev_fd])?;
    let mut early = Vec::new();
    let mut todo: Vec<usize> = (0..s.depth).collect();
    let mut tries = 0;
    while !todo.is_empty() {
        for &idx in &todo {
            push(&mut ring, &register_sqe(&shared, idx))?;
        }
        todo.clear();
        ring.submit()?;
        // A failed register completes at once (its error is posted before the submit
        // returns); a good one completes only with a request.
        let done: Vec<(u64, i32)> = ring
            .completion()
            .map(|c| (c.user_data(), c.result()))
            .collect();
        for (ud, r) in done {
            match r {
                r if r == -libc::EAGAIN && tries < 1000 => {
                    if let Ok(idx) = usize::try_from(ud) {
                        todo.push(idx);
                    }
                }
                r if r < 0 => return Err(io::Error::from_raw_os_error(-r)),
                _ => early.push((ud, r)),
            }
        }
        if !todo.is_empty() {
            tries += 1;
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
    push(&mut ring, &eventfd_sqe(&shared))?;
    ring.submit()?;
    Ok((shared, ring, early))
}

fn push(ring: &mut Ring, e: &squeue::Entry128) -> io::Result<()> {
    // SAFETY: the SQE's pointers (an entry's iovecs, the eventfd buffer) are into
    // `QueueShared`, which outlives the ring (see `queue_thread`).
    unsafe { ring.submission().push(e) }.map_err(|_| io::Error::other("submission queue full"))
}

/// The queue thread's loop.
fn serve(
    q: &Arc<QueueShared>,
    ring: &mut Ring,
    early: Early,
    dispatcher: &dyn RingDispatch,
    ch: &ChannelSender,
) -> io::Result<()> {
    // A rebuilt request: header, opcode struct and payload, 8-byte aligned for parsing.
    let longest =
        abi::IN_HEADER_SZ + abi::OP_IN_OUT_SZ + q.entries.first().map_or(0, |e| e.payload_len);
    let mut words = vec![0u64; longest.div_ceil(8)];
    let buf = zerocopy::IntoBytes::as_mut_bytes(&mut words[..]);
    let mut done = early;
    done.reserve(q.entries.len() + 1);
    let mut commits: Vec<(u16, u64)> = Vec::with_capacity(q.entries.len());
    let mut live = q.entries.len();
    let mut failures_logged = false;
    loop {
        for &(ud, res) in &done {
            if ud == EVENTFD_TAG {
                if !q.stop.load(Ordering::Acquire) {
                    push(ring, &eventfd_sqe(q))?;
                }
                continue;
            }
            let Ok(idx) = u16::try_from(ud) else { continue };
            let Some(ent) = q.entries.get(usize::from(idx)) else {
                continue;
            };
            if res < 0 {
                match -res {
                    libc::EINTR | libc::EAGAIN => {
                        // Not taken: the entry is still unregistered or uncommitted; the
                        // kernel keeps no state for it, so register it anew.
                        push(ring, &register_sqe(q, usize::from(idx)))?;
                        continue;
                    }
                    libc::ENOTCONN | libc::ECONNABORTED | libc::ECANCELED | libc::ENODEV => {}
                    e => {
                        if !failures_logged {
                            warn!("ring queue {}: entry {idx}: errno {e}", q.qid);
                            failures_logged = true;
                        }
                    }
                }
                live = live.saturating_sub(1);
                if live == 0 {
                    debug!("ring queue {}: all entries released", q.qid);
                    return Ok(());
                }
                continue;
            }
            q.served.fetch_add(1, Ordering::Relaxed);
            let mut header = [0u8; abi::HEADER_SZ];
            // SAFETY: the entry's command completed: the kernel has written the request and
            // does not touch the buffers until the entry's next command, which only the
            // reply created below queues. The copies stay inside the two allocations.
            let (commit_id, rebuilt) = unsafe {
                std::ptr::copy_nonoverlapping(
                    ent.header.as_ptr(),
                    header.as_mut_ptr(),
                    abi::HEADER_SZ,
                );
                let payload = std::slice::from_raw_parts(ent.payload.as_ptr(), ent.payload_len);
                (
                    abi::commit_id(&header),
                    abi::reassemble(&header, payload, buf),
                )
            };
            let reply = RingReply {
                queue: q.clone(),
                idx,
                commit_id,
                sent: AtomicBool::new(false),
                ch: ch.clone(),
            };
            match rebuilt {
                Ok(n) => dispatcher.dispatch(&buf[..n], reply),
                Err(e) => {
                    error!("ring queue {}: bad request in entry {idx}: {e:?}", q.qid);
                    drop(reply); // answers EIO
                }
            }
        }
        std::mem::swap(&mut commits, &mut *q.pending.lock());
        for (idx, id) in commits.drain(..) {
            push(ring, &commit_sqe(q.qid, idx, id))?;
        }
        if q.stop.load(Ordering::Acquire) {
            return Ok(());
        }
        // Submits the commits and waits for the next request (or a commit from another
        // thread) in one call; does not wait if a commit came meanwhile.
        q.asleep.store(true, Ordering::SeqCst);
        let want = usize::from(q.pending.lock().is_empty());
        let waited = ring.submit_and_wait(want);
        q.asleep.store(false, Ordering::SeqCst);
        match waited {
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
                ) => {}
            Err(e) => return Err(e),
        }
        done.clear();
        done.extend(ring.completion().map(|c| (c.user_data(), c.result())));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::channel::Channel;
    use crate::dev_fuse::DevFuse;

    fn queue(payload: usize) -> Arc<QueueShared> {
        Arc::new(QueueShared::new(3, 2, payload, Arc::default()).unwrap())
    }

    fn reply(q: &Arc<QueueShared>, idx: u16, commit_id: u64) -> RingReply {
        // Any file stands in for the device: replies only use it for backing files.
        let f = std::fs::File::open("/dev/null").unwrap();
        RingReply {
            queue: q.clone(),
            idx,
            commit_id,
            sent: AtomicBool::new(false),
            ch: Channel::new(Arc::new(DevFuse(f))).sender(),
        }
    }

    /// The entry's out header (len, error, unique), payload size and first payload bytes.
    fn entry(q: &QueueShared, idx: usize, n: usize) -> (u32, i32, u64, u32, Vec<u8>) {
        let e = &q.entries[idx];
        let mut h = [0u8; abi::HEADER_SZ];
        let mut p = vec![0u8; n];
        // SAFETY: the test owns the entry (no kernel, no other reply).
        unsafe {
            std::ptr::copy_nonoverlapping(e.header.as_ptr(), h.as_mut_ptr(), abi::HEADER_SZ);
            std::ptr::copy_nonoverlapping(e.payload.as_ptr(), p.as_mut_ptr(), n);
        }
        let u32_at = |at: usize| u32::from_ne_bytes(h[at..at + 4].try_into().unwrap());
        (
            u32_at(0),
            u32_at(4) as i32,
            u64::from_ne_bytes(h[8..16].try_into().unwrap()),
            abi::payload_sz(&h),
            p,
        )
    }

    fn out_header(len: u32, error: i32, unique: u64) -> Vec<u8> {
        let mut v = len.to_ne_bytes().to_vec();
        v.extend_from_slice(&error.to_ne_bytes());
        v.extend_from_slice(&unique.to_ne_bytes());
        v
    }

    #[test]
    fn a_reply_lands_in_its_entry_and_is_queued_for_commit() {
        let q = queue(64);
        let h = out_header(16 + 11, 0, 77);
        // The header split across slices, the body in two more.
        let bufs = [
            IoSlice::new(&h[..5]),
            IoSlice::new(&h[5..]),
            IoSlice::new(b"hello "),
            IoSlice::new(b"world"),
        ];
        let r = reply(&q, 1, 77);
        r.send(&bufs).unwrap();
        assert!(r.send(&bufs).is_err(), "a second send must be refused");
        drop(r);
        let (len, err, unique, psz, p) = entry(&q, 1, 11);
        assert_eq!((len, err, unique, psz), (27, 0, 77, 11));
        assert_eq!(&p, b"hello world");
        assert_eq!(*q.pending.lock(), vec![(1, 77)], "committed once");
    }

    #[test]
    fn a_reply_too_big_for_the_payload_becomes_eio() {
        let q = queue(8);
        let h = out_header(16 + 9, 0, 5);
        let r = reply(&q, 0, 5);
        r.send(&[IoSlice::new(&h), IoSlice::new(b"123456789")])
            .unwrap();
        let (_, err, unique, psz, _) = entry(&q, 0, 0);
        assert_eq!((err, unique, psz), (-libc::EIO, 5, 0));
        assert_eq!(*q.pending.lock(), vec![(0, 5)]);
    }

    #[test]
    fn a_reply_dropped_unsent_answers_eio() {
        let q = queue(8);
        drop(reply(&q, 1, 9));
        let (_, err, unique, psz, _) = entry(&q, 1, 0);
        assert_eq!((err, unique, psz), (-libc::EIO, 9, 0));
        assert_eq!(*q.pending.lock(), vec![(1, 9)]);
    }

    #[test]
    fn a_reply_from_another_thread_wakes_the_waiting_queue_once() {
        let q = queue(8);
        let h = out_header(16, 0, 1);
        q.asleep.store(true, Ordering::SeqCst);
        std::thread::scope(|s| {
            s.spawn(|| reply(&q, 0, 1).send(&[IoSlice::new(&h)]).unwrap());
        });
        std::thread::scope(|s| {
            s.spawn(|| reply(&q, 1, 2).send(&[IoSlice::new(&h)]).unwrap());
        });
        // Two commits, one wake-up (the second found the thread awake).
        assert_eq!(q.pending.lock().len(), 2);
        assert_eq!(q.wake.read().unwrap(), 1);
        assert!(!q.asleep.load(Ordering::SeqCst));
    }
}
