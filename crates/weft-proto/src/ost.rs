//! Object storage target (OST) messages: stripe object I/O.
//!
//! Write data travels as the request's bulk, read data as the reply's bulk; the frame
//! carries their CRC32C, checked by the receiver before the bytes are used.

use crate::codec::Message;
use crate::fid::ObjectId;
use crate::mdt::StatFs;
use serde::{Deserialize, Serialize};

/// What an OST knows about one object.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectAttr {
    /// Whether the object exists (objects are created by their first write).
    pub exists: bool,
    /// Object size in bytes.
    pub size: u64,
    /// 512-byte blocks allocated.
    pub blocks: u64,
    /// Changes whenever the object's data or size changes; never goes backwards.
    pub data_version: u64,
}

/// A request to an object storage target.
// Variant fields are described in their variant's doc comment.
#[allow(missing_docs)]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum OstRequest {
    /// Reads up to `len` bytes at `offset`; fewer come back at the object's end, and holes
    /// read as zeros. A missing object reads as empty.
    Read {
        object: ObjectId,
        offset: u64,
        len: u32,
    },
    /// Writes the request's bulk at `offset`, creating the object if needed; with `sync`
    /// the data is durable before the reply.
    Write {
        object: ObjectId,
        offset: u64,
        sync: bool,
    },
    /// Sets the object's size (truncate down or extend with a hole).
    Punch { object: ObjectId, size: u64 },
    /// Removes the object; removing a missing object succeeds.
    Destroy { object: ObjectId },
    /// The object's size, blocks and data version.
    GetAttr { object: ObjectId },
    /// Usage of the target's device.
    StatFs,
    /// Makes written data durable: one object, or everything on the target.
    Sync { object: Option<ObjectId> },
    /// Reserves `want` more bytes of space for this connection's buffered writes (a grant).
    /// Writes from the connection use up its grant; the OST counts every connection's
    /// grant as used when it checks other writes, so buffered data never meets ENOSPC.
    Grant { want: u64 },
}

/// An object storage target's answer.
// Variant fields are described in their variant's doc comment.
#[allow(missing_docs)]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum OstReply {
    /// Done.
    Ok,
    /// Data read: the bulk carries the bytes; `attr` is the object after the read.
    Data { attr: ObjectAttr },
    /// The object's attributes after the operation.
    Attr(ObjectAttr),
    /// Usage figures.
    StatFs(StatFs),
    /// Bytes this request added to the connection's grant (possibly 0).
    Granted { bytes: u64 },
}

impl Message for OstRequest {
    fn opcode(&self) -> u16 {
        match self {
            OstRequest::Read { .. } => 300,
            OstRequest::Write { .. } => 301,
            OstRequest::Punch { .. } => 302,
            OstRequest::Destroy { .. } => 303,
            OstRequest::GetAttr { .. } => 304,
            OstRequest::StatFs => 305,
            OstRequest::Sync { .. } => 306,
            OstRequest::Grant { .. } => 307,
        }
    }

    fn op_name(&self) -> &'static str {
        match self {
            OstRequest::Read { .. } => "read",
            OstRequest::Write { .. } => "write",
            OstRequest::Punch { .. } => "punch",
            OstRequest::Destroy { .. } => "destroy",
            OstRequest::GetAttr { .. } => "getattr",
            OstRequest::StatFs => "statfs",
            OstRequest::Sync { .. } => "sync",
            OstRequest::Grant { .. } => "grant",
        }
    }
}
