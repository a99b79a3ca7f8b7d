//! Helpers the crate's unit tests share.

use weft_proto::{Fid, ObjectId};

/// The sequence of the test files' FIDs (the first a client is given).
const SEQ: u64 = 0x2_0000_0400;

/// Stripe `stripe` of component `component` of file `oid`.
pub(crate) fn object(oid: u32, component: u32, stripe: u32) -> ObjectId {
    let fid = Fid {
        seq: SEQ,
        oid,
        ver: 0,
    };
    ObjectId {
        fid,
        component,
        stripe,
    }
}

/// Object `n` of one file (stripe 0 of component 0).
pub(crate) fn oid(n: u32) -> ObjectId {
    object(n, 0, 0)
}
