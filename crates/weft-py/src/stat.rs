//! Attributes as Python sees them: the fields of an `os.stat_result`, in its order.

use weft_proto::Fid;
use weft_proto::mdt::Attr;

/// `st_mode, st_ino, st_dev, st_nlink, st_uid, st_gid, st_size, st_atime_ns, st_mtime_ns,
/// st_ctime_ns, st_blocks, st_rdev` (the Python side builds the `os.stat_result`).
pub type StatTuple = (
    u32,
    u64,
    u64,
    u32,
    u32,
    u32,
    u64,
    i128,
    i128,
    i128,
    u64,
    u64,
);

/// The inode number the FUSE mount shows for `fid` (weft-fuse's `inodes::flatten`: the
/// sequence's offset above the granted base in the high half, the object id in the low);
/// FIDs outside that range get their 64 bits folded.
pub fn ino_of(fid: Fid) -> u64 {
    if fid == Fid::ROOT {
        return 1;
    }
    match fid.seq.checked_sub(0x2_0000_0000) {
        Some(off) if off != 0 && off < (1 << 31) && fid.ver == 0 => {
            (off << 32) | u64::from(fid.oid)
        }
        _ => (1 << 63) | (fid.seq << 32 ^ u64::from(fid.oid) ^ u64::from(fid.ver) << 16),
    }
}

/// Nanoseconds since the epoch.
fn ns(t: weft_proto::time::Timestamp) -> i128 {
    i128::from(t.sec) * 1_000_000_000 + i128::from(t.nsec)
}

/// The stat fields of `a`.
pub fn stat_tuple(a: &Attr) -> StatTuple {
    (
        a.mode | a.kind.mode_bits(),
        ino_of(a.fid),
        // One device number per file system would need the MGS's identity; 0 like a
        // network file system that does not say.
        0,
        a.nlink,
        a.uid,
        a.gid,
        a.size,
        ns(a.atime),
        ns(a.mtime),
        ns(a.ctime),
        a.blocks,
        a.rdev,
    )
}
