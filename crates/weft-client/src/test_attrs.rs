//! Attributes and layouts for unit tests.

use weft_proto::Fid;
use weft_proto::layout::{EOF, Layout, LayoutComponent};
use weft_proto::mdt::{Attr, FileKind};

/// The FID of object `oid` in a test sequence.
pub(crate) fn fid(oid: u32) -> Fid {
    Fid {
        seq: 0x200000400,
        oid,
        ver: 0,
    }
}

/// Plain attributes of `fid`, of kind `kind` (mode 0644, one link, empty, at the epoch).
pub(crate) fn attr(fid: Fid, kind: FileKind) -> Attr {
    let t = weft_proto::time::Timestamp::default();
    Attr {
        fid,
        kind,
        mode: 0o644,
        nlink: 1,
        uid: 0,
        gid: 0,
        size: 0,
        blocks: 0,
        atime: t,
        mtime: t,
        ctime: t,
        rdev: 0,
        data_version: 0,
        hsm_flags: 0,
        archive_id: 0,
        project_id: 0,
        open_count: 0,
    }
}

/// A layout of one RAID0 component over OSTs `0..count`, `stripe_size` bytes per stripe.
pub(crate) fn striped(stripe_size: u64, count: u32) -> Layout {
    Layout {
        generation: 1,
        components: vec![LayoutComponent {
            id: 1,
            start: 0,
            end: EOF,
            stripe_size,
            stripe_count: count as i32,
            pool: None,
            osts: (0..count).collect(),
            object_fid: None,
            compress: Default::default(),
        }],
    }
}
