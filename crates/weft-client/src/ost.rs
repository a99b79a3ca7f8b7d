//! Typed access to one OST.

use crate::error::ClientError;
use bytes::Bytes;
use weft_proto::mdt::StatFs;
use weft_proto::ost::{ObjectAttr, OstReply, OstRequest};
use weft_proto::{Message, ObjectId, TargetId};
use weft_rpc::Reconnecting;

/// A client of one object storage target.
pub struct OstClient {
    index: u32,
    conn: Reconnecting,
    /// Requests sent, by operation, with wait times and bulk bytes (`osc.*.stats`).
    stats: weft_rpc::OpStatsTable,
}

impl OstClient {
    /// Wraps a (reconnecting) connection to OST `index`.
    pub fn new(index: u32, conn: Reconnecting) -> Self {
        Self {
            index,
            conn,
            stats: weft_rpc::OpStatsTable::default(),
        }
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
        let start = std::time::Instant::now();
        let sent = bulk.len() as u64;
        let r = self.conn.call(&req, bulk).await;
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

    /// Writes `data` at `offset`; with `sync`, durably.
    pub async fn write(
        &self,
        object: ObjectId,
        offset: u64,
        data: Bytes,
        sync: bool,
    ) -> Result<ObjectAttr, ClientError> {
        match self
            .call(
                OstRequest::Write {
                    object,
                    offset,
                    sync,
                },
                data,
            )
            .await?
        {
            (OstReply::Attr(a), _) => Ok(a),
            _ => Err(self.unexpected("write")),
        }
    }

    /// Truncates or extends the object to `size`.
    pub async fn punch(&self, object: ObjectId, size: u64) -> Result<ObjectAttr, ClientError> {
        match self
            .call(OstRequest::Punch { object, size }, Bytes::new())
            .await?
        {
            (OstReply::Attr(a), _) => Ok(a),
            _ => Err(self.unexpected("punch")),
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
}
