//! Serving one OST request: which [`Ost`] operation each [`OstRequest`] is, and the
//! shape of its reply.

use super::{LOCAL, Ost};
use bytes::Bytes;
use std::sync::Arc;
use weft_proto::ost::{OstReply, OstRequest};
use weft_proto::{Errno, WireError, WireResult};

impl Ost {
    /// Serves one request; `bulk` is the request's bulk (write data), the returned bytes
    /// the reply's bulk (read data).
    pub async fn execute(
        self: &Arc<Self>,
        request: OstRequest,
        bulk: Bytes,
    ) -> WireResult<(OstReply, Bytes)> {
        self.execute_from(LOCAL, request, bulk).await
    }

    /// Handles one request from connection `conn` (whose grant writes use and grants add to).
    pub async fn execute_from(
        self: &Arc<Self>,
        conn: u64,
        request: OstRequest,
        bulk: Bytes,
    ) -> WireResult<(OstReply, Bytes)> {
        if !bulk.is_empty() && !matches!(request, OstRequest::Write { .. }) {
            return Err(WireError::new(
                Errno::Proto,
                format!("unexpected bulk of {} bytes", bulk.len()),
            ));
        }
        match request {
            OstRequest::Read {
                object,
                offset,
                len,
            } => {
                let (attr, data) = self.read(object, offset, len).await?;
                Ok((OstReply::Data { attr }, data))
            }
            OstRequest::Write {
                object,
                offset,
                sync,
                compress,
            } => Ok((
                OstReply::Attr(
                    self.write_from(conn, object, offset, bulk, sync, compress)
                        .await?,
                ),
                Bytes::new(),
            )),
            OstRequest::Punch {
                object,
                size,
                compress,
            } => Ok((
                OstReply::Attr(self.punch_with(object, size, compress).await?),
                Bytes::new(),
            )),
            OstRequest::Destroy { object } => {
                self.destroy(object).await?;
                Ok((OstReply::Ok, Bytes::new()))
            }
            OstRequest::DestroyMany { objects } => {
                self.destroy_many(objects).await?;
                Ok((OstReply::Ok, Bytes::new()))
            }
            OstRequest::GetAttr { object } => {
                Ok((OstReply::Attr(self.getattr(object).await?), Bytes::new()))
            }
            OstRequest::StatFs => Ok((OstReply::StatFs(self.statfs().await?), Bytes::new())),
            OstRequest::Sync { object } => {
                self.sync(object).await?;
                Ok((OstReply::Ok, Bytes::new()))
            }
            OstRequest::Grant { want } => {
                let free = self.blocking(|ost| ost.free_beyond_reserve()).await?;
                let bytes = self.grants.grant(conn, want, free);
                Ok((OstReply::Granted { bytes }, Bytes::new()))
            }
            OstRequest::ListObjects { after, max } => {
                let (objects, next) = self.list_objects(after, max).await?;
                Ok((OstReply::Objects { objects, next }, Bytes::new()))
            }
            OstRequest::PunchRange {
                object,
                offset,
                len,
            } => Ok((
                OstReply::Attr(self.punch_range(object, offset, len).await?),
                Bytes::new(),
            )),
            OstRequest::Seek {
                object,
                offset,
                hole,
            } => Ok((
                OstReply::Offset(self.seek(object, offset, hole).await?),
                Bytes::new(),
            )),
            // The OSS's data mover serves these (`crate::OstHandler::with_mover`).
            OstRequest::Restore { .. } => Err(WireError::new(
                Errno::NoSys,
                format!("{}'s server has no data mover", self.target_id()),
            )),
        }
    }
}
