//! The machinery both ends of a connection share: frame reading with bounds, the socket's
//! write side (a small frame written by its sender at once when the socket is idle, else
//! by the writer task that batches frames into few syscalls), and the table of requests
//! awaiting replies.
//!
//! Writing a small frame from the sender's own thread saves a thread hop per message: a
//! request no longer wakes the writer task (on this 2-vCPU VM a wake-up and the context
//! switch it causes cost more CPU than the write itself). The order of frames is kept: a
//! sender writes directly only when nothing is queued for the writer task, and the task
//! gives the socket back only when it has written everything queued.

use crate::error::RpcError;
use crate::stream::BoxWrite;
use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::io::IoSlice;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::sync::{mpsc, oneshot};
use weft_proto::frame::{FrameHeader, HEADER_LEN, aligned_vec};
use weft_proto::{Errno, FrameError, Message, WireError};

/// Frames queued for the writer task per connection; senders wait when it is full.
pub const WRITE_QUEUE: usize = 256;
/// The reader's buffer: headers and small bodies come out of it without a syscall each.
pub const READ_BUFFER: usize = 256 << 10;
/// The writer's buffer: small frames are gathered here and written with one syscall;
/// bulk payloads at least this large bypass it and go to the socket as they are.
const WRITE_BUFFER: usize = 256 << 10;
/// Largest frame a sender writes to an idle socket itself; larger ones (bulk data) go
/// through the writer task, so that no sender holds the write side for long.
const DIRECT_MAX: usize = 64 << 10;

/// A frame received and checked: its header, body and bulk.
#[derive(Debug)]
pub struct InFrame {
    /// The validated header.
    pub header: FrameHeader,
    /// The body bytes (checksum verified).
    pub body: Bytes,
    /// The bulk bytes; see `bulk_error`.
    pub bulk: Bytes,
    /// Set when the bulk arrived damaged: the stream is still in sync, only this frame's
    /// payload is bad, so the request fails alone and may be retried.
    pub bulk_error: Option<FrameError>,
}

/// A frame ready to be written.
#[derive(Debug)]
pub struct OutFrame {
    header: [u8; HEADER_LEN],
    body: Vec<u8>,
    bulk: Bytes,
    /// Bytes of it already on the socket (a direct write the socket took only part of).
    written: usize,
}

impl OutFrame {
    /// Frames a body and bulk with a fresh header.
    pub fn new(
        opcode: u16,
        flags: u16,
        xid: u64,
        body: Vec<u8>,
        bulk: Bytes,
    ) -> Result<Self, FrameError> {
        let header = FrameHeader::new(opcode, flags, xid, &body, &bulk)?.encode();
        Ok(Self {
            header,
            body,
            bulk,
            written: 0,
        })
    }

    /// Its length on the wire.
    fn len(&self) -> usize {
        HEADER_LEN + self.body.len() + self.bulk.len()
    }

    /// Its pieces still to be written.
    fn unwritten(&self) -> [&[u8]; 3] {
        let mut skip = self.written;
        [&self.header[..], &self.body[..], &self.bulk[..]].map(|piece| {
            let s = skip.min(piece.len());
            skip -= s;
            &piece[s..]
        })
    }

    /// The frame's header, decoded again.
    pub fn header(&self) -> Result<FrameHeader, FrameError> {
        FrameHeader::decode(&self.header)
    }

    /// The frame's body.
    pub fn body(&self) -> &[u8] {
        &self.body
    }
}

/// Reads one frame header; `None` on a clean end of stream before its first byte.
pub async fn read_header<R: AsyncRead + Unpin>(
    r: &mut R,
) -> Result<Option<FrameHeader>, std::io::Error> {
    let mut buf = [0u8; HEADER_LEN];
    let mut filled = 0;
    while filled < HEADER_LEN {
        let n = r.read(&mut buf[filled..]).await?;
        if n == 0 {
            if filled == 0 {
                return Ok(None);
            }
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        filled += n;
    }
    FrameHeader::decode(&buf)
        .map(Some)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// Reads the body and bulk announced by `header`. Lengths were bounded by
/// [`FrameHeader::decode`], so the allocation here is at most `MAX_BODY + MAX_BULK`.
pub async fn read_payload<R: AsyncRead + Unpin>(
    r: &mut R,
    header: FrameHeader,
) -> Result<InFrame, std::io::Error> {
    let mut body = BytesMut::zeroed(header.body_len as usize);
    r.read_exact(&mut body).await?;
    header
        .check_body(&body)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
    let bulk = read_exact_uninit(r, header.bulk_len as usize).await?;
    let bulk_error = header.check_bulk(&bulk).err();
    Ok(InFrame {
        header,
        body: body.freeze(),
        bulk,
        bulk_error,
    })
}

/// Reads exactly `len` bytes into a fresh buffer starting at a [`weft_proto::frame::BULK_ALIGN`] boundary,
/// without zero-filling it first: bulk payloads are megabytes, and the fill would cost as
/// much as a copy. Only the padding before the boundary (under a page) is zeroed.
async fn read_exact_uninit<R: AsyncRead + Unpin>(
    r: &mut R,
    len: usize,
) -> Result<Bytes, std::io::Error> {
    if len == 0 {
        return Ok(Bytes::new());
    }
    let (mut buf, pad) = aligned_vec(len);
    let end = pad + len;
    while buf.len() < end {
        // `read_buf` appends into the spare capacity (never past it: the limit keeps the
        // reads inside `end`, which the capacity covers); limit it to what this frame owns.
        let mut limited = (&mut *r).take((end - buf.len()) as u64);
        if limited.read_buf(&mut buf).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    }
    Ok(Bytes::from(buf).slice(pad..))
}

/// The write side of a socket, shared by its senders and its writer task.
pub struct WriteSide {
    /// The socket while the writer task does not hold it (its buffer is then empty).
    socket: Option<BufWriter<BoxWrite>>,
    /// Frames given to the writer task and not yet written: while there are any, a new
    /// frame queues behind them.
    queued: usize,
    /// Set when the endpoint closed or a write failed: nothing new goes out, and the
    /// socket is dropped (which closes it) once what was queued before is written.
    shut: bool,
}

/// [`WriteSide`] as both ends hold it.
pub type SharedWriteSide = Arc<Mutex<WriteSide>>;

/// The write side of `w`, idle.
pub fn write_side(w: BoxWrite) -> SharedWriteSide {
    Arc::new(Mutex::new(WriteSide {
        socket: Some(BufWriter::with_capacity(WRITE_BUFFER, w)),
        queued: 0,
        shut: false,
    }))
}

/// Closes the socket of `side` now (dropping it), whatever is still queued.
pub fn close_socket(side: &SharedWriteSide) {
    let mut s = side.lock();
    s.shut = true;
    s.socket = None;
}

/// What a direct write achieved.
enum Direct {
    /// The whole frame is on the socket.
    Done,
    /// Not attempted or not finished: the frame (with what was written) goes to the task.
    Queue(OutFrame),
}

impl WriteSide {
    /// Writes `frame` now if the socket is idle, nothing is queued and the frame is small,
    /// without waiting: as much as the socket takes at once.
    fn try_direct(&mut self, mut frame: OutFrame) -> Result<Direct, RpcError> {
        if self.shut {
            return Err(RpcError::Closed);
        }
        if self.queued > 0 || frame.len() > DIRECT_MAX {
            return Ok(Direct::Queue(frame));
        }
        let Some(socket) = self.socket.as_mut() else {
            return Ok(Direct::Queue(frame));
        };
        // The buffer is empty while the task does not hold the socket: write underneath it.
        let w = socket.get_mut();
        let mut cx = Context::from_waker(Waker::noop());
        while frame.written < frame.len() {
            let pieces = frame.unwritten();
            let bufs = pieces.map(IoSlice::new);
            // A `Pending` leaves the socket registered with a no-op waker; the writer task
            // registers its own when it polls the socket next.
            match Pin::new(&mut *w).poll_write_vectored(&mut cx, &bufs) {
                Poll::Ready(Ok(0)) => {
                    self.shut();
                    return Err(RpcError::Closed);
                }
                Poll::Ready(Ok(n)) => frame.written += n,
                Poll::Ready(Err(e)) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Poll::Ready(Err(_)) => {
                    self.shut();
                    return Err(RpcError::Closed);
                }
                Poll::Pending => return Ok(Direct::Queue(frame)),
            }
        }
        Ok(Direct::Done)
    }

    /// Lets nothing new out; drops the socket now if nothing queued is still to be
    /// written (the writer task drops it after writing that, otherwise).
    fn shut(&mut self) {
        self.shut = true;
        if self.queued == 0 {
            self.socket = None;
        }
    }
}

/// Writes the frames queued in `rx` until the channel closes or the socket fails. Frames
/// that are already queued are written together and flushed once; the socket goes back to
/// the senders only when nothing is queued.
pub async fn writer_loop(
    side: SharedWriteSide,
    mut rx: mpsc::Receiver<OutFrame>,
) -> std::io::Result<()> {
    let mut held: Option<BufWriter<BoxWrite>> = None;
    let result = async {
        while let Some(frame) = rx.recv().await {
            let w = match held.as_mut() {
                Some(w) => w,
                None => {
                    let taken = side.lock().socket.take();
                    held.insert(taken.ok_or(std::io::ErrorKind::BrokenPipe)?)
                }
            };
            write_frame(w, &frame).await?;
            let mut written = 1;
            while let Ok(more) = rx.try_recv() {
                write_frame(w, &more).await?;
                written += 1;
            }
            w.flush().await?;
            let mut s = side.lock();
            s.queued = s.queued.saturating_sub(written);
            if s.queued == 0 {
                let idle = held.take();
                if !s.shut {
                    s.socket = idle;
                }
            }
        }
        Ok(())
    }
    .await;
    let mut w = held.take().or_else(|| side.lock().socket.take());
    if result.is_err() {
        side.lock().shut();
        return result;
    }
    match w.as_mut() {
        Some(w) => w.shutdown().await,
        None => Ok(()),
    }
}

async fn write_frame(w: &mut BufWriter<BoxWrite>, f: &OutFrame) -> std::io::Result<()> {
    for piece in f.unwritten() {
        if !piece.is_empty() {
            w.write_all(piece).await?;
        }
    }
    Ok(())
}

/// One side of a connection: sends frames through the writer task and matches replies to
/// the requests it sent.
pub struct Endpoint {
    tx: mpsc::Sender<OutFrame>,
    /// The socket's write side (none for in-process links, whose frames only queue).
    side: Option<SharedWriteSide>,
    pending: Mutex<HashMap<u64, oneshot::Sender<InFrame>>>,
    next_xid: AtomicU64,
    closed: AtomicBool,
    /// Who is on the other side, for messages.
    pub peer: String,
}

impl Endpoint {
    /// An endpoint whose frames go to `tx` only (an in-process link's callbacks).
    pub fn new(tx: mpsc::Sender<OutFrame>, peer: String) -> Self {
        Self::with_side(tx, None, peer)
    }

    /// An endpoint on a socket: small frames are written straight to `side` when it is
    /// idle, the rest queue in `tx` for the writer task ([`writer_loop`]).
    pub fn on_socket(tx: mpsc::Sender<OutFrame>, side: SharedWriteSide, peer: String) -> Self {
        Self::with_side(tx, Some(side), peer)
    }

    fn with_side(tx: mpsc::Sender<OutFrame>, side: Option<SharedWriteSide>, peer: String) -> Self {
        Self {
            tx,
            side,
            pending: Mutex::new(HashMap::new()),
            next_xid: AtomicU64::new(1),
            closed: AtomicBool::new(false),
            peer,
        }
    }

    /// Whether the connection is gone.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire) || self.tx.is_closed()
    }

    /// Closes the connection at once: like [`close`](Self::close), without writing what
    /// is still queued (the connection's tasks are being stopped).
    pub fn close_now(&self) {
        self.close();
        if let Some(side) = &self.side {
            close_socket(side);
        }
    }

    /// Marks the connection closed and fails every request still waiting; the socket
    /// closes once the frames already queued are written.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.pending.lock().clear();
        if let Some(side) = &self.side {
            side.lock().shut();
        }
    }

    /// Writes a frame: at once if the socket is idle and the frame small, else queued
    /// for the writer task (waiting while the queue is full).
    pub async fn send(&self, frame: OutFrame) -> Result<(), RpcError> {
        match self.write_or_queue(frame)? {
            None => Ok(()),
            Some(frame) => {
                // Counted as queued: uncounted again unless it reaches the channel (also
                // when the caller gives up while the queue is full), or the socket would
                // stay with the writer task for good.
                let mut counted = Unqueue(Some(self));
                let r = self.tx.send(frame).await.map_err(|_| RpcError::Closed);
                if r.is_ok() {
                    counted.0 = None;
                }
                r
            }
        }
    }

    /// Writes or queues a frame without waiting; fails if the queue is full.
    pub fn try_send(&self, frame: OutFrame) -> Result<(), RpcError> {
        let Some(frame) = self.write_or_queue(frame)? else {
            return Ok(());
        };
        self.tx.try_send(frame).map_err(|e| {
            self.unqueue();
            match e {
                mpsc::error::TrySendError::Full(_) => {
                    RpcError::Remote(WireError::new(Errno::Again, "send queue full"))
                }
                mpsc::error::TrySendError::Closed(_) => RpcError::Closed,
            }
        })
    }

    /// Writes `frame` directly if it can; otherwise counts it as queued (under the same
    /// lock, so no later frame can be written before it) and hands it back for the
    /// channel. A frame the socket took only part of is queued with a free slot: nothing
    /// was queued, so the channel is empty.
    fn write_or_queue(&self, frame: OutFrame) -> Result<Option<OutFrame>, RpcError> {
        if self.is_closed() {
            return Err(RpcError::Closed);
        }
        let Some(side) = &self.side else {
            return Ok(Some(frame));
        };
        let mut s = side.lock();
        let frame = match s.try_direct(frame) {
            Ok(Direct::Done) => return Ok(None),
            Ok(Direct::Queue(frame)) => frame,
            Err(e) => {
                drop(s);
                self.close();
                return Err(e);
            }
        };
        s.queued += 1;
        if frame.written > 0 {
            // Must reach the task before anything else: the channel is empty (nothing
            // was queued), so this cannot find it full.
            return match self.tx.try_send(frame) {
                Ok(()) => Ok(None),
                Err(_) => {
                    s.queued -= 1;
                    s.shut();
                    drop(s);
                    self.close();
                    Err(RpcError::Closed)
                }
            };
        }
        Ok(Some(frame))
    }

    /// Forgets a frame counted as queued that never reached the channel.
    fn unqueue(&self) {
        if let Some(side) = &self.side {
            let mut s = side.lock();
            s.queued = s.queued.saturating_sub(1);
        }
    }

    /// A fresh request id.
    pub fn next_xid(&self) -> u64 {
        self.next_xid.fetch_add(1, Ordering::Relaxed)
    }

    /// Sends a request and waits for its reply frame.
    pub async fn request(
        &self,
        opcode: u16,
        flags: u16,
        body: Vec<u8>,
        bulk: Bytes,
        timeout: Duration,
    ) -> Result<InFrame, RpcError> {
        let xid = self.next_xid();
        let frame = OutFrame::new(opcode, flags, xid, body, bulk)?;
        let (tx, rx) = oneshot::channel();
        self.pending.lock().insert(xid, tx);
        // The pending entry must go whatever happens next, or it would leak.
        let result = async {
            self.send(frame).await?;
            match tokio::time::timeout(timeout, rx).await {
                Ok(Ok(reply)) => Ok(reply),
                Ok(Err(_)) => Err(RpcError::Closed),
                Err(_) => Err(RpcError::TimedOut(timeout)),
            }
        }
        .await;
        if result.is_err() {
            self.pending.lock().remove(&xid);
        }
        result
    }

    /// Delivers a reply to the request waiting for it; replies nobody waits for (timed out,
    /// or answers to notifications) are dropped.
    pub fn complete(&self, frame: InFrame) {
        let waiter = self.pending.lock().remove(&frame.header.xid);
        if let Some(waiter) = waiter {
            let _ = waiter.send(frame);
        }
    }
}

/// Uncounts a frame counted as queued when dropped armed (see [`Endpoint::send`]).
struct Unqueue<'a>(Option<&'a Endpoint>);

impl Drop for Unqueue<'_> {
    fn drop(&mut self) {
        if let Some(ep) = self.0 {
            ep.unqueue();
        }
    }
}

/// A reply as the caller receives it, from a socket or from a server of this process.
#[derive(Debug)]
pub struct Reply {
    /// The encoded `WireResult` body.
    pub body: Bytes,
    /// The reply bulk; see `bulk_error`.
    pub bulk: Bytes,
    /// Set when the bulk arrived damaged (only over a socket).
    pub bulk_error: Option<FrameError>,
}

impl From<InFrame> for Reply {
    fn from(frame: InFrame) -> Self {
        Self {
            body: frame.body,
            bulk: frame.bulk,
            bulk_error: frame.bulk_error,
        }
    }
}

/// Decodes a reply into the caller's type, surfacing remote errors and damaged bulk.
pub fn decode_reply<T: serde::de::DeserializeOwned>(reply: Reply) -> Result<(T, Bytes), RpcError> {
    let result: weft_proto::WireResult<T> = weft_proto::decode(&reply.body)?;
    let value = result.map_err(RpcError::Remote)?;
    if let Some(e) = reply.bulk_error {
        return Err(RpcError::Frame(e));
    }
    Ok((value, reply.bulk))
}

/// Encodes a callback body (server to client: no request header).
pub fn encode_callback<M: Message>(msg: &M) -> Result<(u16, Vec<u8>), RpcError> {
    Ok((msg.opcode(), weft_proto::encode(msg)?))
}

/// Encodes a request body: the header carrying `ctx`, then the message.
pub fn encode_request_in<M: Message>(
    ctx: &crate::RequestContext,
    msg: &M,
) -> Result<(u16, Vec<u8>), RpcError> {
    Ok((msg.opcode(), weft_proto::encode(&(ctx.header(), msg))?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_proto::frame::BULK_ALIGN;

    #[tokio::test]
    async fn bulk_arrives_whole_and_page_aligned() {
        for len in [0usize, 1, 4095, 4096, 65_537, 4 << 20] {
            let body = b"body".to_vec();
            let bulk = Bytes::from((0..len).map(|i| (i % 251) as u8).collect::<Vec<u8>>());
            let header = FrameHeader::new(7, 0, 1, &body, &bulk).unwrap();
            let mut wire = header.encode().to_vec();
            wire.extend_from_slice(&body);
            wire.extend_from_slice(&bulk);
            // Small reads, as a socket may deliver them.
            let (mut w, mut r) = tokio::io::duplex(1000);
            let feed = tokio::spawn(async move { w.write_all(&wire).await });
            let h = read_header(&mut r).await.unwrap().unwrap();
            let frame = read_payload(&mut r, h).await.unwrap();
            feed.await.unwrap().unwrap();
            assert_eq!(frame.bulk, bulk, "len {len}");
            assert!(frame.bulk_error.is_none());
            if len > 0 {
                assert_eq!(frame.bulk.as_ptr() as usize % BULK_ALIGN, 0, "len {len}");
            }
        }
    }

    /// Many senders, small frames (written by the senders) and large ones (by the writer
    /// task), over a real socket whose reader is slow enough that direct writes stop
    /// part-way: every frame arrives whole, and each sender's in the order it sent them.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn direct_and_queued_frames_keep_each_senders_order() {
        let (ep, _side, writer, server) = socket_endpoint().await;
        const SENDERS: u16 = 8;
        const FRAMES: u64 = 60;
        let mut senders = Vec::new();
        for sender in 0..SENDERS {
            let ep = ep.clone();
            senders.push(tokio::spawn(async move {
                for seq in 0..FRAMES {
                    // Every fifth frame is larger than a direct write may be.
                    let len = if seq % 5 == 4 {
                        DIRECT_MAX + 1000
                    } else {
                        100 + (seq as usize * 997) % 30_000
                    };
                    if seq % 3 == 0 {
                        tokio::time::sleep(Duration::from_micros(500)).await;
                    }
                    if seq % 2 == 0 {
                        ep.send(test_frame(sender, seq, len)).await.unwrap();
                    } else {
                        // The path callback replies take: no waiting, "full" when it is.
                        while let Err(e) = ep.try_send(test_frame(sender, seq, len)) {
                            assert!(matches!(e, RpcError::Remote(_)), "{e}");
                            tokio::task::yield_now().await;
                        }
                    }
                }
            }));
        }
        let mut r = tokio::io::BufReader::new(server);
        let mut next = [0u64; SENDERS as usize];
        for i in 0..u64::from(SENDERS) * FRAMES {
            // A reader that stops now and then: the socket's buffer fills and direct
            // writes go part-way; between the stops the queue empties and the senders
            // write directly.
            if i % 16 == 0 {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            let h = read_header(&mut r).await.unwrap().unwrap();
            let f = read_payload(&mut r, h).await.unwrap();
            let (sender, seq) = (h.opcode as usize, h.xid);
            assert_eq!(seq, next[sender], "sender {sender}'s frames out of order");
            next[sender] += 1;
            assert_eq!(&f.body[..], &seq.to_le_bytes());
            assert!(f.bulk_error.is_none());
            assert!(f.bulk.iter().all(|&b| b == (seq % 251) as u8));
        }
        for s in senders {
            s.await.unwrap();
        }
        ep.close();
        drop(ep);
        writer.await.unwrap().unwrap();
        // The socket was closed: the reader sees the end of the stream.
        assert!(read_header(&mut r).await.unwrap().is_none());
    }

    /// An endpoint on one end of a loopback TCP connection with small socket buffers (so
    /// that a few frames fill them), its write side and writer task, and the other end.
    async fn socket_endpoint() -> (
        Arc<Endpoint>,
        SharedWriteSide,
        tokio::task::JoinHandle<std::io::Result<()>>,
        tokio::net::TcpStream,
    ) {
        let listen = tokio::net::TcpSocket::new_v4().unwrap();
        listen.set_recv_buffer_size(8 << 10).unwrap();
        listen.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let listener = listen.listen(8).unwrap();
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_send_buffer_size(8 << 10).unwrap();
        let client = socket
            .connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        let (_r, w) = client.into_split();
        let (tx, rx) = mpsc::channel(WRITE_QUEUE);
        let side = write_side(Box::new(w));
        let ep = Arc::new(Endpoint::on_socket(tx, side.clone(), "test".into()));
        let writer = tokio::spawn(writer_loop(side.clone(), rx));
        (ep, side, writer, server)
    }

    /// A frame the socket takes only part of goes on through the writer task, and the
    /// frames after it queue behind it (none is written into the middle of it).
    #[tokio::test]
    async fn a_direct_write_the_socket_takes_part_of_is_finished_by_the_writer() {
        let (ep, side, writer, server) = socket_endpoint().await;
        // Nobody reads yet: the first frame (60 KiB, a direct one) fills the buffers.
        let len = DIRECT_MAX - 4096;
        ep.send(test_frame(1, 0, len)).await.unwrap();
        {
            let s = side.lock();
            assert_eq!(
                s.queued, 1,
                "the rest of the first frame went to the writer task"
            );
        }
        for seq in 1..20 {
            ep.send(test_frame(1, seq, 100 + seq as usize))
                .await
                .unwrap();
        }
        let mut r = tokio::io::BufReader::new(server);
        for seq in 0..20 {
            let h = read_header(&mut r).await.unwrap().unwrap();
            let f = read_payload(&mut r, h).await.unwrap();
            assert_eq!(h.xid, seq);
            assert_eq!(
                f.bulk.len(),
                if seq == 0 { len } else { 100 + seq as usize }
            );
            assert!(f.bulk.iter().all(|&b| b == (seq % 251) as u8));
        }
        // Everything written: the socket is back with the senders, who write directly.
        tokio::time::timeout(Duration::from_secs(10), async {
            while side.lock().socket.is_none() {
                tokio::task::yield_now().await;
            }
        })
        .await
        .unwrap();
        assert_eq!(side.lock().queued, 0);
        ep.send(test_frame(1, 20, 10)).await.unwrap();
        assert_eq!(
            side.lock().queued,
            0,
            "a small frame on an idle socket is written at once"
        );
        let h = read_header(&mut r).await.unwrap().unwrap();
        assert_eq!(h.xid, 20);
        read_payload(&mut r, h).await.unwrap();
        ep.close();
        drop(ep);
        writer.await.unwrap().unwrap();
        assert!(read_header(&mut r).await.unwrap().is_none());
    }

    /// Frame `seq` of `sender`: the sequence number as its body, `len` bytes of bulk.
    fn test_frame(sender: u16, seq: u64, len: usize) -> OutFrame {
        let bulk = Bytes::from(vec![(seq % 251) as u8; len]);
        OutFrame::new(sender, 0, seq, seq.to_le_bytes().to_vec(), bulk).unwrap()
    }

    #[tokio::test]
    async fn a_short_bulk_is_an_unexpected_eof() {
        let body = b"b".to_vec();
        let bulk = Bytes::from(vec![9u8; 10_000]);
        let header = FrameHeader::new(7, 0, 1, &body, &bulk).unwrap();
        let mut wire = header.encode().to_vec();
        wire.extend_from_slice(&body);
        wire.extend_from_slice(&bulk[..5000]);
        let mut r = &wire[..];
        let h = read_header(&mut r).await.unwrap().unwrap();
        let e = read_payload(&mut r, h).await.unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof);
    }
}
