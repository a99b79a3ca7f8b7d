//! Where a stripe object lives in the data directory.
//!
//! `O/<hh>/<seq>-<oid>-<ver>-c<component>-s<stripe>`: FID parts in hex, component and stripe
//! in decimal, `<hh>` two hex digits of a stable hash of the whole object id so that the 256
//! subdirectories fill evenly.

use std::path::{Path, PathBuf};
use weft_proto::ObjectId;

/// The directory holding the object subdirectories.
pub const OBJECTS_DIR: &str = "O";
/// How many hashed subdirectories there are.
pub const SUBDIRS: usize = 256;

/// A stable 64-bit FNV-1a hash of an object id. Stable across builds and platforms: it
/// decides where objects are on disk.
pub fn object_hash(id: &ObjectId) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = OFFSET;
    let bytes = id.fid.to_bytes();
    for b in bytes
        .iter()
        .chain(id.component.to_be_bytes().iter())
        .chain(id.stripe.to_be_bytes().iter())
    {
        h ^= u64::from(*b);
        h = h.wrapping_mul(PRIME);
    }
    h
}

/// The name of the hashed subdirectory with index `i` (`00` to `ff`).
pub fn subdir_name(i: usize) -> String {
    format!("{:02x}", i % SUBDIRS)
}

/// The object's file name inside its subdirectory.
pub fn object_file_name(id: &ObjectId) -> String {
    format!(
        "{:x}-{:x}-{:x}-c{}-s{}",
        id.fid.seq, id.fid.oid, id.fid.ver, id.component, id.stripe
    )
}

/// The index of the hashed subdirectory holding the object (the hash's top byte).
pub fn subdir_of(id: &ObjectId) -> usize {
    (object_hash(id) >> 56) as usize
}

/// The object id an object's file is named after: the inverse of [`object_file_name`].
/// Anything else (temporary files, stray names, the same id spelt another way: upper-case
/// hex, leading zeros, signs) is `None`, so a name parses exactly when it is the one file
/// name of its object.
pub fn parse_object_file_name(name: &str) -> Option<ObjectId> {
    let mut parts = name.split('-');
    let seq = u64::from_str_radix(parts.next()?, 16).ok()?;
    let oid = u32::from_str_radix(parts.next()?, 16).ok()?;
    let ver = u32::from_str_radix(parts.next()?, 16).ok()?;
    let component = parts.next()?.strip_prefix('c')?.parse::<u32>().ok()?;
    let stripe = parts.next()?.strip_prefix('s')?.parse::<u32>().ok()?;
    if parts.next().is_some() {
        return None;
    }
    let id = ObjectId {
        fid: weft_proto::Fid { seq, oid, ver },
        component,
        stripe,
    };
    // The parsers accept spellings the formatter never writes ("+1", "01", "A").
    (object_file_name(&id) == name).then_some(id)
}

/// The object's path under the data directory `root`.
pub fn object_path(root: &Path, id: &ObjectId) -> PathBuf {
    root.join(OBJECTS_DIR)
        .join(subdir_name(subdir_of(id)))
        .join(object_file_name(id))
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_proto::Fid;

    #[test]
    fn paths_are_stable_and_readable() {
        let id = ObjectId {
            fid: Fid {
                seq: 0x200000400,
                oid: 0x1f,
                ver: 0,
            },
            component: 1,
            stripe: 3,
        };
        let p = object_path(Path::new("/d"), &id);
        assert_eq!(p.file_name().unwrap(), "200000400-1f-0-c1-s3");
        // The hash decides the on-disk location: it must never change between builds.
        assert_eq!(object_hash(&id), 0x8ace_cb1e_e4db_2a4c);
        assert_eq!(p.parent().unwrap(), Path::new("/d/O/8a"));
        let zero = ObjectId {
            fid: Fid {
                seq: 0,
                oid: 0,
                ver: 0,
            },
            component: 0,
            stripe: 0,
        };
        assert_eq!(object_hash(&zero), 0x81d2_3fd7_003c_2305);
    }

    #[test]
    fn file_names_parse_back_to_their_object() {
        for id in [
            ObjectId {
                fid: Fid {
                    seq: 0x200000400,
                    oid: 0x1f,
                    ver: 0,
                },
                component: 1,
                stripe: 3,
            },
            ObjectId {
                fid: Fid {
                    seq: u64::MAX,
                    oid: u32::MAX,
                    ver: u32::MAX,
                },
                component: u32::MAX,
                stripe: u32::MAX,
            },
            ObjectId {
                fid: Fid {
                    seq: 0,
                    oid: 0,
                    ver: 0,
                },
                component: 0,
                stripe: 0,
            },
        ] {
            assert_eq!(parse_object_file_name(&object_file_name(&id)), Some(id));
        }
        assert_eq!(
            subdir_of(&parse_object_file_name("200000400-1f-0-c1-s3").unwrap()),
            0x8a
        );
    }

    #[test]
    fn other_names_do_not_parse() {
        for name in [
            "",
            "200000400-1f-0-c1-s3.tmp",
            ".200000400-1f-0-c1-s3.tmp",
            "200000400-1f-0-c1",
            "200000400-1f-0-c1-s3-x",
            "200000400-1f-0-1-3",
            "200000400-1F-0-c1-s3",
            "0200000400-1f-0-c1-s3",
            "+200000400-1f-0-c1-s3",
            "200000400-1f-0-c+1-s3",
            "200000400-1f-0-c01-s3",
            "200000400-1f-0-c1-s4294967296",
            "10000000000000000-1f-0-c1-s3",
            "200000400--1f-0-c1-s3",
            "dv_reserve.json",
        ] {
            assert_eq!(parse_object_file_name(name), None, "{name:?}");
        }
    }
}
