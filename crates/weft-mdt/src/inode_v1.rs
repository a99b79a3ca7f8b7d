//! Inode records of record version 1, as MDTs wrote them before layouts carried
//! compression (session 29): read by [`crate::store::decode`] and turned into today's
//! [`Inode`], whose components then inherit their compression (the OST's setting decides,
//! as it did). A record is written back in the current version when the inode changes.
//!
//! These types are the old shapes, field for field: postcard writes fields in order with
//! no names, so they must never change.

use crate::store::Inode;
use serde::Deserialize;
use weft_proto::layout::{Compression, Layout, LayoutComponent, LayoutTemplate, TemplateComponent};
use weft_proto::mdt::FileKind;
use weft_proto::{Fid, Timestamp};

/// [`Inode`] as record version 1 held it.
#[derive(Debug, Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
pub(crate) struct InodeV1 {
    kind: FileKind,
    mode: u32,
    nlink: u32,
    uid: u32,
    gid: u32,
    size: u64,
    blocks: u64,
    atime: Timestamp,
    mtime: Timestamp,
    ctime: Timestamp,
    rdev: u64,
    data_version: u64,
    hsm_flags: u32,
    archive_id: u32,
    project_id: u32,
    parent: Fid,
    written: bool,
    layout: Option<LayoutV1>,
    default_layout: Option<TemplateV1>,
    symlink: Vec<u8>,
}

/// [`Layout`] without compression.
#[derive(Debug, Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
struct LayoutV1 {
    generation: u32,
    components: Vec<ComponentV1>,
}

/// [`LayoutComponent`] without compression.
#[derive(Debug, Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
struct ComponentV1 {
    id: u32,
    start: u64,
    end: u64,
    stripe_size: u64,
    stripe_count: i32,
    pool: Option<String>,
    osts: Vec<u32>,
    object_fid: Option<Fid>,
}

/// [`LayoutTemplate`] without compression.
#[derive(Debug, Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
struct TemplateV1 {
    components: Vec<TemplateComponentV1>,
}

/// [`TemplateComponent`] without compression.
#[derive(Debug, Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
struct TemplateComponentV1 {
    end: u64,
    stripe_count: i32,
    stripe_size: u64,
    stripe_offset: i32,
    ost_list: Vec<u32>,
    pool: Option<String>,
}

impl From<InodeV1> for Inode {
    fn from(v: InodeV1) -> Self {
        Inode {
            kind: v.kind,
            mode: v.mode,
            nlink: v.nlink,
            uid: v.uid,
            gid: v.gid,
            size: v.size,
            blocks: v.blocks,
            atime: v.atime,
            mtime: v.mtime,
            ctime: v.ctime,
            rdev: v.rdev,
            data_version: v.data_version,
            hsm_flags: v.hsm_flags,
            archive_id: v.archive_id,
            project_id: v.project_id,
            parent: v.parent,
            written: v.written,
            layout: v.layout.map(|l| Layout {
                generation: l.generation,
                components: l
                    .components
                    .into_iter()
                    .map(|c| LayoutComponent {
                        id: c.id,
                        start: c.start,
                        end: c.end,
                        stripe_size: c.stripe_size,
                        stripe_count: c.stripe_count,
                        pool: c.pool,
                        osts: c.osts,
                        object_fid: c.object_fid,
                        compress: Compression::Inherit,
                    })
                    .collect(),
            }),
            default_layout: v.default_layout.map(|t| LayoutTemplate {
                components: t
                    .components
                    .into_iter()
                    .map(|c| TemplateComponent {
                        end: c.end,
                        stripe_count: c.stripe_count,
                        stripe_size: c.stripe_size,
                        stripe_offset: c.stripe_offset,
                        ost_list: c.ost_list,
                        pool: c.pool,
                        compress: Compression::Inherit,
                    })
                    .collect(),
            }),
            symlink: v.symlink,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{InodeAttrs, decode, encode};

    /// A version 1 record: every field set, a PFL layout and a directory template.
    fn v1_record() -> Vec<u8> {
        let t = |sec: i64| Timestamp { sec, nsec: 3 };
        let comp = |id, start, end, osts: Vec<u32>| ComponentV1 {
            id,
            start,
            end,
            stripe_size: 1 << 20,
            stripe_count: osts.len() as i32,
            pool: Some("fast".into()),
            osts,
            object_fid: None,
        };
        let v1 = InodeV1 {
            kind: FileKind::Regular,
            mode: 0o640,
            nlink: 1,
            uid: 1000,
            gid: 1001,
            size: 5 << 20,
            blocks: 10240,
            atime: t(1),
            mtime: t(2),
            ctime: t(3),
            rdev: 0,
            data_version: 9,
            hsm_flags: 0b1001,
            archive_id: 2,
            project_id: 7,
            parent: Fid::ROOT,
            written: true,
            layout: Some(LayoutV1 {
                generation: 3,
                components: vec![
                    comp(1, 0, 4 << 20, vec![0]),
                    comp(2, 4 << 20, u64::MAX, vec![1, 0]),
                ],
            }),
            default_layout: Some(TemplateV1 {
                components: vec![TemplateComponentV1 {
                    end: u64::MAX,
                    stripe_count: -1,
                    stripe_size: 4 << 20,
                    stripe_offset: -1,
                    ost_list: vec![],
                    pool: None,
                }],
            }),
            symlink: vec![],
        };
        postcard::to_extend(&v1, vec![crate::store::RECORD_VERSION]).unwrap()
    }

    #[test]
    fn version_1_inode_records_read_with_inherited_compression_and_write_back_as_version_2() {
        let bytes = v1_record();
        let ino: Inode = decode("inodes", &bytes).unwrap();
        let layout = ino.layout.as_ref().unwrap();
        assert_eq!(layout.generation, 3);
        assert_eq!(layout.components.len(), 2);
        assert_eq!(layout.components[1].osts, vec![1, 0]);
        assert_eq!(layout.components[1].pool.as_deref(), Some("fast"));
        assert!(
            layout
                .components
                .iter()
                .all(|c| c.compress == Compression::Inherit)
        );
        let template = ino.default_layout.as_ref().unwrap();
        assert_eq!(template.components[0].stripe_size, 4 << 20);
        assert_eq!(template.components[0].compress, Compression::Inherit);
        assert_eq!(
            (ino.uid, ino.size, ino.hsm_flags, ino.written),
            (1000, 5 << 20, 0b1001, true)
        );

        // The attributes read alone from either version agree.
        let fid = Fid {
            seq: 1,
            oid: 2,
            ver: 0,
        };
        let old: InodeAttrs = decode("inodes", &bytes).unwrap();
        assert_eq!(old.attr(fid, 0), ino.attr(fid, 0));

        // Written back, the record is version 2 and keeps a compression choice.
        let mut changed = ino.clone();
        changed.layout.as_mut().unwrap().components[1].compress = Compression::Lz4;
        let again = encode(&changed).unwrap();
        assert_eq!(again[0], 2);
        assert_eq!(decode::<Inode>("inodes", &again).unwrap(), changed);
        let new: InodeAttrs = decode("inodes", &again).unwrap();
        assert_eq!(new.attr(fid, 0), ino.attr(fid, 0));
    }

    #[test]
    fn a_damaged_version_1_record_is_corrupt_not_garbage() {
        let bytes = v1_record();
        for cut in [1, bytes.len() / 2, bytes.len() - 1] {
            assert!(
                decode::<Inode>("inodes", &bytes[..cut]).is_err(),
                "cut at {cut}"
            );
        }
    }
}
