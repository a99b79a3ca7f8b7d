//! The machinery both ends of a connection share: frame reading with bounds, the writer
//! task that batches frames into few syscalls, and the table of requests awaiting replies.

use crate::error::RpcError;
use crate::transport::BoxWrite;
use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, BufWriter};
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
        Ok(Self { header, body, bulk })
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

/// Writes frames from `rx` until the channel closes or the socket fails. Frames that are
/// already queued are written together and flushed once.
pub async fn writer_loop(w: BoxWrite, mut rx: mpsc::Receiver<OutFrame>) -> std::io::Result<()> {
    let mut w = BufWriter::with_capacity(WRITE_BUFFER, w);
    while let Some(frame) = rx.recv().await {
        write_frame(&mut w, &frame).await?;
        while let Ok(more) = rx.try_recv() {
            write_frame(&mut w, &more).await?;
        }
        w.flush().await?;
    }
    w.shutdown().await
}

async fn write_frame(w: &mut BufWriter<BoxWrite>, f: &OutFrame) -> std::io::Result<()> {
    w.write_all(&f.header).await?;
    w.write_all(&f.body).await?;
    if !f.bulk.is_empty() {
        w.write_all(&f.bulk).await?;
    }
    Ok(())
}

/// One side of a connection: sends frames through the writer task and matches replies to
/// the requests it sent.
pub struct Endpoint {
    tx: mpsc::Sender<OutFrame>,
    pending: Mutex<HashMap<u64, oneshot::Sender<InFrame>>>,
    next_xid: AtomicU64,
    closed: AtomicBool,
    /// Who is on the other side, for messages.
    pub peer: String,
}

impl Endpoint {
    /// An endpoint whose frames go to `tx`.
    pub fn new(tx: mpsc::Sender<OutFrame>, peer: String) -> Self {
        Self {
            tx,
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

    /// Marks the connection closed and fails every request still waiting.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.pending.lock().clear();
    }

    /// Queues a frame for writing.
    pub async fn send(&self, frame: OutFrame) -> Result<(), RpcError> {
        if self.is_closed() {
            return Err(RpcError::Closed);
        }
        self.tx.send(frame).await.map_err(|_| RpcError::Closed)
    }

    /// Queues a frame without waiting; fails if the queue is full.
    pub fn try_send(&self, frame: OutFrame) -> Result<(), RpcError> {
        if self.is_closed() {
            return Err(RpcError::Closed);
        }
        self.tx.try_send(frame).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => {
                RpcError::Remote(WireError::new(Errno::Again, "send queue full"))
            }
            mpsc::error::TrySendError::Closed(_) => RpcError::Closed,
        })
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

/// Encodes a request body: the [`weft_proto::RequestHeader`] of the calling task's scopes
/// ([`crate::RequestContext::ambient`]), then the message.
pub fn encode_request<M: Message>(msg: &M) -> Result<(u16, Vec<u8>), RpcError> {
    encode_request_in(&crate::RequestContext::ambient(), msg)
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
