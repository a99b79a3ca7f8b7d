//! The object I/O seam under [`IoEngine`](super::IoEngine): [`ObjectIo`] is what the
//! engine asks of one OST (read or write an extent of an object, punch, seek, getattr,
//! sync, grant), [`ObjectTargets`] finds the OST of an index. [`OstClient`] over the
//! [`Cluster`]'s connections is the real pair; [`MemObjects`](super::fake::MemObjects) keeps
//! objects in memory and [`FailingObjects`](super::failing::FailingObjects) fails chosen
//! calls of another.
//!
//! Bulk data crosses the seam as [`Bytes`] (reference-counted, never copied); each call
//! costs one boxed future, next to an RPC's worth of data.

use crate::cluster::Cluster;
use crate::error::ClientError;
use crate::ost::OstClient;
use bytes::Bytes;
use futures::FutureExt;
use futures::future::BoxFuture;
use std::sync::Arc;
use weft_proto::ost::ObjectAttr;
use weft_proto::{Compression, ObjectId};
use weft_rpc::RequestContext;

/// The object I/O of one OST, as the I/O engine uses it. Errors are the ones an
/// [`OstClient`] returns: [`ClientError::Rpc`] with a transport error (resent by the
/// engine) or with the server's [`weft_rpc::RpcError::Remote`] (final).
pub trait ObjectIo: Send + Sync {
    /// Reads up to `len` bytes of `object` at `offset` (fewer past its end), with the
    /// object's attributes.
    fn read(
        &self,
        object: ObjectId,
        offset: u64,
        len: u32,
    ) -> BoxFuture<'_, Result<(Bytes, ObjectAttr), ClientError>>;

    /// Writes `data` at `offset` of `object` (creating it, compressed as `compress` says);
    /// with `sync`, durably. Answers the object's attributes after.
    fn write(
        &self,
        object: ObjectId,
        offset: u64,
        data: Bytes,
        sync: bool,
        compress: Compression,
    ) -> BoxFuture<'_, Result<ObjectAttr, ClientError>>;

    /// Truncates or extends `object` to `size` (creating it, compressed as `compress`
    /// says).
    fn punch(
        &self,
        object: ObjectId,
        size: u64,
        compress: Compression,
    ) -> BoxFuture<'_, Result<ObjectAttr, ClientError>>;

    /// Deallocates `[offset, offset + len)` of `object`, keeping its size.
    fn punch_range(
        &self,
        object: ObjectId,
        offset: u64,
        len: u64,
    ) -> BoxFuture<'_, Result<ObjectAttr, ClientError>>;

    /// Where `object`'s next data (with `hole`, next hole) at or after `offset` starts;
    /// `None`: no data there.
    fn seek(
        &self,
        object: ObjectId,
        offset: u64,
        hole: bool,
    ) -> BoxFuture<'_, Result<Option<u64>, ClientError>>;

    /// `object`'s attributes (glimpse).
    fn getattr(&self, object: ObjectId) -> BoxFuture<'_, Result<ObjectAttr, ClientError>>;

    /// Makes written data durable (one object, or the whole target).
    fn sync(&self, object: Option<ObjectId>) -> BoxFuture<'_, Result<(), ClientError>>;

    /// Asks for `want` more bytes of grant; answers how many were granted.
    fn grant(&self, want: u64) -> BoxFuture<'_, Result<u64, ClientError>>;
}

/// Finds the object I/O of OST `index`.
pub trait ObjectTargets: Send + Sync {
    /// OST `index`'s object I/O (an unknown index is
    /// [`ClientError::UnknownTarget`]), sending its requests in `ctx` (their job id).
    fn target(&self, index: u32, ctx: &RequestContext) -> Result<Arc<dyn ObjectIo>, ClientError>;
}

impl ObjectTargets for Cluster {
    fn target(&self, index: u32, ctx: &RequestContext) -> Result<Arc<dyn ObjectIo>, ClientError> {
        Ok(self.ost(index)?.in_context(ctx))
    }
}

impl ObjectIo for OstClient {
    fn read(
        &self,
        object: ObjectId,
        offset: u64,
        len: u32,
    ) -> BoxFuture<'_, Result<(Bytes, ObjectAttr), ClientError>> {
        OstClient::read(self, object, offset, len).boxed()
    }

    fn write(
        &self,
        object: ObjectId,
        offset: u64,
        data: Bytes,
        sync: bool,
        compress: Compression,
    ) -> BoxFuture<'_, Result<ObjectAttr, ClientError>> {
        OstClient::write(self, object, offset, data, sync, compress).boxed()
    }

    fn punch(
        &self,
        object: ObjectId,
        size: u64,
        compress: Compression,
    ) -> BoxFuture<'_, Result<ObjectAttr, ClientError>> {
        OstClient::punch(self, object, size, compress).boxed()
    }

    fn punch_range(
        &self,
        object: ObjectId,
        offset: u64,
        len: u64,
    ) -> BoxFuture<'_, Result<ObjectAttr, ClientError>> {
        OstClient::punch_range(self, object, offset, len).boxed()
    }

    fn seek(
        &self,
        object: ObjectId,
        offset: u64,
        hole: bool,
    ) -> BoxFuture<'_, Result<Option<u64>, ClientError>> {
        OstClient::seek(self, object, offset, hole).boxed()
    }

    fn getattr(&self, object: ObjectId) -> BoxFuture<'_, Result<ObjectAttr, ClientError>> {
        OstClient::getattr(self, object).boxed()
    }

    fn sync(&self, object: Option<ObjectId>) -> BoxFuture<'_, Result<(), ClientError>> {
        OstClient::sync(self, object).boxed()
    }

    fn grant(&self, want: u64) -> BoxFuture<'_, Result<u64, ClientError>> {
        OstClient::grant(self, want).boxed()
    }
}

/// The operations of [`ObjectIo`], to name calls in the fakes' logs and failure rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// [`ObjectIo::read`].
    Read,
    /// [`ObjectIo::write`].
    Write,
    /// [`ObjectIo::punch`].
    Punch,
    /// [`ObjectIo::punch_range`].
    PunchRange,
    /// [`ObjectIo::seek`].
    Seek,
    /// [`ObjectIo::getattr`].
    GetAttr,
    /// [`ObjectIo::sync`].
    Sync,
    /// [`ObjectIo::grant`].
    Grant,
}
