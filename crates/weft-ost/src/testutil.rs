//! Helpers the crate's unit tests share.

use weft_proto::{Fid, ObjectId};

/// Stripe `stripe` of component `component` of file `oid`.
pub(crate) fn object(oid: u32, component: u32, stripe: u32) -> ObjectId {
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

/// Object `n` of one file (stripe 0 of component 0).
pub(crate) fn oid(n: u32) -> ObjectId {
    object(n, 0, 0)
}
