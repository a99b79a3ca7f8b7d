//! Typed access to one OST.

use crate::error::ClientError;
use bytes::Bytes;
use std::sync::Arc;
use weft_proto::hsm::RestoreChunk;
use weft_proto::mdt::StatFs;
use weft_proto::ost::{ObjectAttr, OstReply, OstRequest};
use weft_proto::{Compression, Message, ObjectId, TargetId};
use weft_rpc::{Reconnecting, RequestContext};

/// How long [`OstClient::list_objects`] is resent over a broken connection (as reads to
/// an MDT are, [`crate::mdt::RESEND_FOR`]): a listing changes nothing, so a resend is safe.
pub const LIST_RESEND_FOR: std::time::Duration = std::time::Duration::from_secs(30);

/// How long [`OstClient::restore`] waits for the OSS's answer: it fetches a restore unit
/// (32 MiB) from a store, retrying a failing one, before it answers.
pub const RESTORE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(300);

/// A client of one object storage target.
///
/// Its requests go in its [`RequestContext`] (their job id): the cluster's handle sends the
/// default one (no job), and [`OstClient::in_context`] gives a handle on the same
/// connection that sends another.
#[derive(Clone)]
pub struct OstClient {
    index: u32,
    conn: Arc<Reconnecting>,
    /// Requests sent, by operation, with wait times and bulk bytes (`osc.*.stats`).
    stats: Arc<weft_rpc::OpStatsTable>,
    ctx: RequestContext,
}

impl OstClient {
    /// Wraps a (reconnecting) connection to OST `index`.
    pub fn new(index: u32, conn: Reconnecting) -> Self {
        Self {
            index,
            conn: Arc::new(conn),
            stats: Arc::default(),
            ctx: RequestContext::new(),
        }
    }

    /// A handle on the same connection (and statistics) whose requests go in `ctx`.
    pub fn in_context(&self, ctx: &RequestContext) -> Arc<Self> {
        Arc::new(Self {
            ctx: ctx.clone(),
            ..self.clone()
        })
    }

    /// The context this handle's requests go in.
    pub fn context(&self) -> &RequestContext {
        &self.ctx
    }

    /// This client's requests to the OST by operation: counts, errors, wait times and bulk
    /// bytes either way (`osc.*.stats`, `req_waittime`).
    pub fn stats(&self) -> Vec<weft_proto::handshake::OpStats> {
        self.stats.snapshot()
    }

    /// The OST's index.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The underlying connection (to re-point it when the target moves).
    pub fn connection(&self) -> &Reconnecting {
        &self.conn
    }

    async fn call(&self, req: OstRequest, bulk: Bytes) -> Result<(OstReply, Bytes), ClientError> {
        self.call_timed(req, bulk, None).await
    }

    /// [`Self::call`] waiting for `timeout` instead of the connection's request timeout.
    async fn call_timed(
        &self,
        req: OstRequest,
        bulk: Bytes,
        timeout: Option<std::time::Duration>,
    ) -> Result<(OstReply, Bytes), ClientError> {
        let start = std::time::Instant::now();
        let sent = bulk.len() as u64;
        let r = match timeout {
            None => self.conn.call_in(&self.ctx, &req, bulk).await,
            Some(t) => {
                self.conn
                    .call_noting_in_process(&self.ctx, &req, bulk, t)
                    .await
                    .1
            }
        };
        let received = r.as_ref().map_or(0, |(_, b)| b.len() as u64);
        self.stats
            .record(req.op_name(), start.elapsed(), r.is_err(), sent + received);
        r.map_err(|error| ClientError::Rpc {
            target: TargetId::ost(self.index),
            error,
        })
    }

    fn unexpected(&self, op: &'static str) -> ClientError {
        ClientError::UnexpectedReply {
            target: TargetId::ost(self.index),
            op,
        }
    }

    /// Reads up to `len` bytes at `offset`.
    pub async fn read(
        &self,
        object: ObjectId,
        offset: u64,
        len: u32,
    ) -> Result<(Bytes, ObjectAttr), ClientError> {
        match self
            .call(
                OstRequest::Read {
                    object,
                    offset,
                    len,
                },
                Bytes::new(),
            )
            .await?
        {
            (OstReply::Data { attr }, data) => Ok((data, attr)),
            _ => Err(self.unexpected("read")),
        }
    }

    /// Writes `data` at `offset`; with `sync`, durably. An object this creates is
    /// compressed as `compress` says.
    pub async fn write(
        &self,
        object: ObjectId,
        offset: u64,
        data: Bytes,
        sync: bool,
        compress: Compression,
    ) -> Result<ObjectAttr, ClientError> {
        match self
            .call(
                OstRequest::Write {
                    object,
                    offset,
                    sync,
                    compress,
                },
                data,
            )
            .await?
        {
            (OstReply::Attr(a), _) => Ok(a),
            _ => Err(self.unexpected("write")),
        }
    }

    /// Has the OST's server copy restore `chunk` from its data repository into the file's
    /// objects on OSTs `osts` of that server (empty: all the chunk's, all on that server)
    /// and sync them: see [`OstRequest::Restore`]; answers the bytes copied. Waits up to
    /// [`RESTORE_TIMEOUT`]; not resent.
    pub async fn restore(&self, chunk: RestoreChunk, osts: Vec<u32>) -> Result<u64, ClientError> {
        match self
            .call_timed(
                OstRequest::Restore { chunk, osts },
                Bytes::new(),
                Some(RESTORE_TIMEOUT),
            )
            .await?
        {
            (OstReply::Restored { bytes }, _) => Ok(bytes),
            _ => Err(self.unexpected("restore")),
        }
    }

    /// Truncates or extends the object to `size`; an object this creates is compressed as
    /// `compress` says.
    pub async fn punch(
        &self,
        object: ObjectId,
        size: u64,
        compress: Compression,
    ) -> Result<ObjectAttr, ClientError> {
        match self
            .call(
                OstRequest::Punch {
                    object,
                    size,
                    compress,
                },
                Bytes::new(),
            )
            .await?
        {
            (OstReply::Attr(a), _) => Ok(a),
            _ => Err(self.unexpected("punch")),
        }
    }

    /// Deallocates `[offset, offset + len)` of the object, keeping its size.
    pub async fn punch_range(
        &self,
        object: ObjectId,
        offset: u64,
        len: u64,
    ) -> Result<ObjectAttr, ClientError> {
        let req = OstRequest::PunchRange {
            object,
            offset,
            len,
        };
        match self.call(req, Bytes::new()).await? {
            (OstReply::Attr(a), _) => Ok(a),
            _ => Err(self.unexpected("punch_range")),
        }
    }

    /// Where the object's next data (or, with `hole`, next hole) at or after `offset`
    /// starts; `None`: no data there.
    pub async fn seek(
        &self,
        object: ObjectId,
        offset: u64,
        hole: bool,
    ) -> Result<Option<u64>, ClientError> {
        let req = OstRequest::Seek {
            object,
            offset,
            hole,
        };
        match self.call(req, Bytes::new()).await? {
            (OstReply::Offset(at), _) => Ok(at),
            _ => Err(self.unexpected("seek")),
        }
    }

    /// Removes the object (a missing one is fine).
    pub async fn destroy(&self, object: ObjectId) -> Result<(), ClientError> {
        match self
            .call(OstRequest::Destroy { object }, Bytes::new())
            .await?
        {
            (OstReply::Ok, _) => Ok(()),
            _ => Err(self.unexpected("destroy")),
        }
    }

    /// Removes the objects (missing ones are fine) with one request and one directory
    /// sync per object directory on the OST; at most
    /// [`weft_proto::ost::MAX_DESTROY_BATCH`].
    pub async fn destroy_many(&self, objects: Vec<ObjectId>) -> Result<(), ClientError> {
        match self
            .call(OstRequest::DestroyMany { objects }, Bytes::new())
            .await?
        {
            (OstReply::Ok, _) => Ok(()),
            _ => Err(self.unexpected("destroy_many")),
        }
    }

    /// The object's attributes.
    pub async fn getattr(&self, object: ObjectId) -> Result<ObjectAttr, ClientError> {
        match self
            .call(OstRequest::GetAttr { object }, Bytes::new())
            .await?
        {
            (OstReply::Attr(a), _) => Ok(a),
            _ => Err(self.unexpected("getattr")),
        }
    }

    /// The target's usage.
    pub async fn statfs(&self) -> Result<StatFs, ClientError> {
        match self.call(OstRequest::StatFs, Bytes::new()).await? {
            (OstReply::StatFs(s), _) => Ok(s),
            _ => Err(self.unexpected("statfs")),
        }
    }

    /// Asks for `want` more bytes of grant; returns how many were granted.
    pub async fn grant(&self, want: u64) -> Result<u64, ClientError> {
        match self.call(OstRequest::Grant { want }, Bytes::new()).await? {
            (OstReply::Granted { bytes }, _) => Ok(bytes),
            _ => Err(self.unexpected("grant")),
        }
    }

    /// Makes written data durable (one object, or the whole target).
    pub async fn sync(&self, object: Option<ObjectId>) -> Result<(), ClientError> {
        match self.call(OstRequest::Sync { object }, Bytes::new()).await? {
            (OstReply::Ok, _) => Ok(()),
            _ => Err(self.unexpected("sync")),
        }
    }

    /// One page of the objects the OST holds, with their sizes in bytes: up to `max` (the
    /// OST caps it at [`weft_proto::ost::MAX_LIST_OBJECTS`]) after the cursor `after`
    /// (`None`: from the start), and the cursor to pass as `after` for the next page
    /// (`None`: this was the last; a page may be short or empty before the end). Resent
    /// while the connection is broken, for up to [`LIST_RESEND_FOR`].
    pub async fn list_objects(
        &self,
        after: Option<ObjectId>,
        max: u32,
    ) -> Result<(Vec<(ObjectId, u64)>, Option<ObjectId>), ClientError> {
        let start = std::time::Instant::now();
        let mut backoff = weft_rpc::Backoff::new(
            std::time::Duration::from_millis(50),
            std::time::Duration::from_secs(1),
        );
        loop {
            match self
                .call(OstRequest::ListObjects { after, max }, Bytes::new())
                .await
            {
                Ok((OstReply::Objects { objects, next }, _)) => return Ok((objects, next)),
                Ok(_) => return Err(self.unexpected("list_objects")),
                Err(ClientError::Rpc { error, .. })
                    if error.is_worth_resending()
                        && start.elapsed() + backoff.peek() < LIST_RESEND_FOR =>
                {
                    tracing::debug!(ost = self.index, error = %error, "resending list_objects");
                    backoff.wait().await;
                }
                Err(e) => return Err(e),
            }
        }
    }
}
