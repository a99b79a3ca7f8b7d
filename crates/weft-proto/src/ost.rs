//! Object storage target (OST) messages: stripe object I/O.
//!
//! Write data travels as the request's bulk, read data as the reply's bulk; the frame
//! carries their CRC32C, checked by the receiver before the bytes are used.

use crate::codec::Message;
use crate::fid::ObjectId;
use crate::hsm::RestoreChunk;
use crate::layout::Compression;
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
    /// Writes the request's bulk at `offset`, creating the object if needed (compressed
    /// as `compress` says: the layout component's choice); with `sync` the data is
    /// durable before the reply.
    Write {
        object: ObjectId,
        offset: u64,
        sync: bool,
        compress: Compression,
    },
    /// Sets the object's size (truncate down or extend with a hole), creating it if
    /// needed (compressed as `compress` says).
    Punch {
        object: ObjectId,
        size: u64,
        compress: Compression,
    },
    /// Removes the object; removing a missing object succeeds.
    Destroy { object: ObjectId },
    /// Removes each object (missing ones succeed), then makes the removals durable with one
    /// sync per directory touched: what an MDT sends to reclaim the objects of many
    /// unlinked files. At most [`MAX_DESTROY_BATCH`] objects; more is `EINVAL`.
    DestroyMany { objects: Vec<ObjectId> },
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
    /// Lists the objects the target holds, one page at a time (for `weft fsck`): up to
    /// `max` objects following the cursor `after` (from the start when `None`), in the
    /// target's listing order, which is stable while objects are not created or removed.
    /// The target caps `max` at [`MAX_LIST_OBJECTS`]; `max` 0 is invalid.
    ListObjects { after: Option<ObjectId>, max: u32 },
    /// Deallocates `[offset, offset + len)` of the object, keeping its size: the range
    /// reads as zeros and its space goes back to the target (`fallocate(2)`'s
    /// `PUNCH_HOLE | KEEP_SIZE`). A missing object has nothing to punch.
    PunchRange {
        object: ObjectId,
        offset: u64,
        len: u64,
    },
    /// Where the object's next data (`hole: false`) or next hole (`hole: true`) at or
    /// after `offset` starts (`lseek(2)`'s `SEEK_DATA` and `SEEK_HOLE`). The end of the
    /// object counts as a hole; a missing object is one hole.
    Seek {
        object: ObjectId,
        offset: u64,
        hole: bool,
    },
    /// The data mover of the OSS serving this OST copies `chunk` (an HSM restore an MDT's
    /// coordinator hands out) from its data repository into the file's objects on OSTs
    /// `osts` (all on this server; empty: every object of the chunk, all on this server)
    /// and syncs them before it answers `Ok`: the bytes reach the OSTs without passing
    /// through the MDS; answers [`OstReply::Restored`]. The OSS reads the store with the
    /// credentials of its own environment. `ENOSYS` from a server without a data mover.
    /// Sent by the MDS only.
    Restore { chunk: RestoreChunk, osts: Vec<u32> },
}

/// The most objects an OST returns in one [`OstRequest::ListObjects`] page, whatever the
/// request asks: 4096 entries are about 160 KiB of body, well within the frame limit.
pub const MAX_LIST_OBJECTS: u32 = 4096;

/// The most objects one [`OstRequest::DestroyMany`] may name (about 24 KiB of body).
pub const MAX_DESTROY_BATCH: usize = 1024;

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
    /// A page of [`OstRequest::ListObjects`]: objects with their size in bytes, in listing
    /// order, and the cursor to pass as `after` for the next page (`None`: this was the
    /// last). A page may be shorter than asked (even empty) with a `next` cursor.
    Objects {
        objects: Vec<(ObjectId, u64)>,
        next: Option<ObjectId>,
    },
    /// The offset a [`OstRequest::Seek`] found; `None` when it looked for data and there
    /// is none at or after the offset.
    Offset(Option<u64>),
    /// A [`OstRequest::Restore`] done: the bytes copied into the server's OSTs.
    Restored { bytes: u64 },
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
            OstRequest::ListObjects { .. } => 308,
            OstRequest::DestroyMany { .. } => 309,
            OstRequest::PunchRange { .. } => 310,
            OstRequest::Seek { .. } => 311,
            OstRequest::Restore { .. } => 312,
        }
    }

    fn modifies(&self) -> bool {
        matches!(
            self,
            OstRequest::Write { .. }
                | OstRequest::Punch { .. }
                | OstRequest::PunchRange { .. }
                | OstRequest::Destroy { .. }
                | OstRequest::DestroyMany { .. }
                | OstRequest::Restore { .. }
        )
    }

    /// Object destruction is the MDT's (and `weft fsck`'s, run with the server key), and so
    /// are restores.
    fn server_only(&self) -> bool {
        matches!(
            self,
            OstRequest::Destroy { .. }
                | OstRequest::DestroyMany { .. }
                | OstRequest::Restore { .. }
        )
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
            OstRequest::ListObjects { .. } => "list_objects",
            OstRequest::DestroyMany { .. } => "destroy_many",
            OstRequest::PunchRange { .. } => "punch_range",
            OstRequest::Seek { .. } => "seek",
            OstRequest::Restore { .. } => "restore",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{decode, encode};
    use crate::fid::Fid;

    fn object(oid: u32, component: u32, stripe: u32) -> ObjectId {
        ObjectId {
            fid: Fid {
                seq: 0x2_0000_0400,
                oid,
                ver: 0,
            },
            component,
            stripe,
        }
    }

    fn every_request() -> Vec<OstRequest> {
        let o = object(1, 0, 0);
        vec![
            OstRequest::Read {
                object: o,
                offset: 1,
                len: 2,
            },
            OstRequest::Write {
                object: o,
                offset: 3,
                sync: true,
                compress: Compression::Lz4,
            },
            OstRequest::Punch {
                object: o,
                size: 4,
                compress: Compression::Off,
            },
            OstRequest::Destroy { object: o },
            OstRequest::DestroyMany {
                objects: vec![o, object(2, 0, 1)],
            },
            OstRequest::GetAttr { object: o },
            OstRequest::StatFs,
            OstRequest::Sync { object: Some(o) },
            OstRequest::Grant { want: 5 },
            OstRequest::ListObjects {
                after: None,
                max: 100,
            },
            OstRequest::PunchRange {
                object: o,
                offset: 6,
                len: 7,
            },
            OstRequest::Seek {
                object: o,
                offset: 8,
                hole: true,
            },
            OstRequest::Restore {
                chunk: RestoreChunk {
                    fid: o.fid,
                    layout: crate::layout::Layout {
                        generation: 1,
                        components: Vec::new(),
                    },
                    repo: 1,
                    archive: crate::hsm::ArchiveRef {
                        key: "k".into(),
                        etag: None,
                        size: 9,
                        modified: Default::default(),
                    },
                    start: 0,
                    end: 9,
                },
                osts: vec![1, 2],
            },
        ]
    }

    #[test]
    fn opcodes_and_op_names_are_distinct() {
        let reqs = every_request();
        let mut opcodes: Vec<u16> = reqs.iter().map(Message::opcode).collect();
        let mut names: Vec<&str> = reqs.iter().map(Message::op_name).collect();
        opcodes.sort_unstable();
        opcodes.dedup();
        names.sort_unstable();
        names.dedup();
        assert_eq!(opcodes.len(), reqs.len());
        assert_eq!(names.len(), reqs.len());
        assert!(opcodes.iter().all(|op| (300..400).contains(op)));
    }

    #[test]
    fn list_objects_round_trips() {
        for req in [
            OstRequest::ListObjects {
                after: None,
                max: MAX_LIST_OBJECTS,
            },
            OstRequest::ListObjects {
                after: Some(object(u32::MAX, 7, 3)),
                max: 0,
            },
        ] {
            let back: OstRequest = decode(&encode(&req).unwrap()).unwrap();
            assert_eq!(back.opcode(), 308);
            assert_eq!(back.op_name(), "list_objects");
            assert_eq!(back, req);
        }
        for reply in [
            OstReply::Objects {
                objects: Vec::new(),
                next: None,
            },
            OstReply::Objects {
                objects: vec![(object(1, 0, 0), 0), (object(2, 1, 5), u64::MAX)],
                next: Some(object(2, 1, 5)),
            },
        ] {
            let back: OstReply = decode(&encode(&reply).unwrap()).unwrap();
            assert_eq!(back, reply);
        }
    }

    #[test]
    fn a_full_page_fits_in_a_frame_body() {
        let worst = ObjectId {
            fid: Fid {
                seq: u64::MAX,
                oid: u32::MAX,
                ver: u32::MAX,
            },
            component: u32::MAX,
            stripe: u32::MAX,
        };
        let reply = OstReply::Objects {
            objects: vec![(worst, u64::MAX); MAX_LIST_OBJECTS as usize],
            next: Some(worst),
        };
        assert!(encode(&reply).is_ok());
    }
}
