//! Helpers the crate's unit tests share.

use weft_proto::{Fid, ObjectId};

/// Object `n` of one file (stripe 0 of component 0).
pub(crate) fn oid(n: u32) -> ObjectId {
    ObjectId {
        fid: Fid {
            seq: 0x2_0000_0400,
            oid: n,
            ver: 0,
        },
        component: 0,
        stripe: 0,
    }
}
