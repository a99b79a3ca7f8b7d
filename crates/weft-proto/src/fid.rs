//! File identifiers (FIDs), FID sequences and stripe object names.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A file identifier, unique in the file system for its lifetime and never reused.
///
/// The MGS grants sequence ranges to MDTs; an MDT allocates object ids within a sequence.
/// The FID location database maps a sequence to the MDT that owns it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Fid {
    /// The sequence, granted to one MDT.
    pub seq: u64,
    /// The object id within the sequence, starting at 1.
    pub oid: u32,
    /// A version, reserved for snapshots; 0 today.
    pub ver: u32,
}

impl Fid {
    /// The root directory's FID, fixed and owned by MDT0.
    pub const ROOT: Fid = Fid {
        seq: ROOT_SEQ,
        oid: 1,
        ver: 0,
    };

    /// The 16-byte big-endian form, which sorts like the FID itself (used as a store key).
    pub fn to_bytes(self) -> [u8; 16] {
        let mut out = [0u8; 16];
        out[..8].copy_from_slice(&self.seq.to_be_bytes());
        out[8..12].copy_from_slice(&self.oid.to_be_bytes());
        out[12..].copy_from_slice(&self.ver.to_be_bytes());
        out
    }

    /// The inverse of [`Fid::to_bytes`].
    pub fn from_bytes(b: [u8; 16]) -> Self {
        let [
            s0,
            s1,
            s2,
            s3,
            s4,
            s5,
            s6,
            s7,
            o0,
            o1,
            o2,
            o3,
            v0,
            v1,
            v2,
            v3,
        ] = b;
        Fid {
            seq: u64::from_be_bytes([s0, s1, s2, s3, s4, s5, s6, s7]),
            oid: u32::from_be_bytes([o0, o1, o2, o3]),
            ver: u32::from_be_bytes([v0, v1, v2, v3]),
        }
    }
}

impl fmt::Display for Fid {
    /// Lustre's spelling: `[0x200000007:0x1:0x0]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{:#x}:{:#x}:{:#x}]", self.seq, self.oid, self.ver)
    }
}

/// The sequence of the root directory and other well-known FIDs on MDT0.
pub const ROOT_SEQ: u64 = 0x2_0000_0007;
/// The first sequence the MGS grants to MDTs.
pub const FIRST_GRANTED_SEQ: u64 = 0x2_0000_0400;

/// A half-open range of FID sequences `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FidSeqRange {
    /// First sequence in the range.
    pub start: u64,
    /// One past the last sequence.
    pub end: u64,
}

impl FidSeqRange {
    /// Whether `seq` lies in the range.
    pub fn contains(&self, seq: u64) -> bool {
        self.start <= seq && seq < self.end
    }

    /// How many sequences the range holds.
    pub fn len(&self) -> u64 {
        self.end.saturating_sub(self.start)
    }

    /// Whether the range holds no sequence.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The name of one stripe object on an OST: the file it belongs to, the layout component
/// and the stripe index within that component. Objects need no allocation round trip at
/// create time: an OST creates the object on first write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ObjectId {
    /// The file's FID.
    pub fid: Fid,
    /// The layout component's id (unique within the file's layout history).
    pub component: u32,
    /// The stripe index within the component.
    pub stripe: u32,
}

impl fmt::Display for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/c{}/s{}", self.fid, self.component, self.stripe)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn fid_bytes_round_trip_and_sort_like_fid(a in any::<(u64, u32, u32)>(), b in any::<(u64, u32, u32)>()) {
            let fa = Fid { seq: a.0, oid: a.1, ver: a.2 };
            let fb = Fid { seq: b.0, oid: b.1, ver: b.2 };
            prop_assert_eq!(Fid::from_bytes(fa.to_bytes()), fa);
            prop_assert_eq!(fa.cmp(&fb), fa.to_bytes().cmp(&fb.to_bytes()));
        }
    }

    #[test]
    fn root_fid_prints_like_lustre() {
        assert_eq!(Fid::ROOT.to_string(), "[0x200000007:0x1:0x0]");
    }
}
