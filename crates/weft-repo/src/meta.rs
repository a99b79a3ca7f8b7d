//! The POSIX metadata FSx for Lustre keeps on an object as user metadata (S3 sends it as
//! `x-amz-meta-file-permissions` and so on; `object_store` exposes it as
//! [`Attribute::Metadata`]):
//!
//! | key | value |
//! |---|---|
//! | `file-permissions` | octal `st_mode` with the type bits, e.g. `0100644`; `0120777` is a symlink, whose target is the object's body |
//! | `file-owner`, `file-group` | decimal uid and gid |
//! | `file-atime`, `file-mtime` | nanoseconds since the epoch and `ns`, e.g. `1700000000123456789ns` |
//!
//! Azure Blob Storage allows only C# identifiers as metadata names (a `-` is refused), so
//! on `az://` stores the same keys are spelled with `_` (`file_permissions`, ...:
//! [`KeyStyle::Identifiers`]). Decoding reads either spelling.
//!
//! Decoding is lenient, as objects come from anyone: a missing or malformed value falls
//! back to its default (a regular file `0644`, uid and gid 0, both times the object's
//! last-modified time) and never fails the object. Encoding writes all five keys.

use object_store::{Attribute, AttributeValue, Attributes};
use weft_proto::time::Timestamp;

/// The user metadata key of the mode (type and permission bits, octal).
pub const PERMISSIONS: &str = "file-permissions";
/// The user metadata key of the owner (decimal uid).
pub const OWNER: &str = "file-owner";
/// The user metadata key of the group (decimal gid).
pub const GROUP: &str = "file-group";
/// The user metadata key of the access time (`<nanoseconds>ns`).
pub const ATIME: &str = "file-atime";
/// The user metadata key of the modification time (`<nanoseconds>ns`).
pub const MTIME: &str = "file-mtime";

/// How a store spells the metadata keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KeyStyle {
    /// FSx for Lustre's keys, with `-` (S3, GCS, local directories).
    #[default]
    Fsx,
    /// The same keys with `_` for `-`: Azure Blob Storage takes only C# identifiers.
    Identifiers,
}

impl KeyStyle {
    /// `key` (one of the constants above) as this style spells it.
    pub fn spell(self, key: &'static str) -> std::borrow::Cow<'static, str> {
        match self {
            KeyStyle::Fsx => key.into(),
            KeyStyle::Identifiers => key.replace('-', "_").into(),
        }
    }
}

/// The type bits of `st_mode`.
pub const S_IFMT: u32 = 0o170_000;
/// A regular file's type bits.
pub const S_IFREG: u32 = 0o100_000;
/// A directory's type bits.
pub const S_IFDIR: u32 = 0o040_000;
/// A symbolic link's type bits.
pub const S_IFLNK: u32 = 0o120_000;

/// The permission bits of a file whose object carries none.
pub const DEFAULT_FILE_MODE: u32 = 0o644;
/// The permission bits of a directory made by an import.
pub const DEFAULT_DIR_MODE: u32 = 0o755;

/// What an object's metadata says of the file it holds, defaults filled in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileMeta {
    /// `st_mode`: type bits (`S_IFREG`, `S_IFLNK`, `S_IFDIR`) and permission bits.
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Access time.
    pub atime: Timestamp,
    /// Modification time.
    pub mtime: Timestamp,
}

impl FileMeta {
    /// The defaults for an object without metadata last modified at `modified`.
    pub fn defaults(modified: Timestamp) -> Self {
        Self {
            mode: S_IFREG | DEFAULT_FILE_MODE,
            uid: 0,
            gid: 0,
            atime: modified,
            mtime: modified,
        }
    }

    /// Whether the mode's type is a symbolic link.
    pub fn is_symlink(&self) -> bool {
        self.mode & S_IFMT == S_IFLNK
    }

    /// Whether the mode's type is a directory.
    pub fn is_dir(&self) -> bool {
        self.mode & S_IFMT == S_IFDIR
    }

    /// The permission bits (`0o7777`).
    pub fn perm(&self) -> u32 {
        self.mode & 0o7777
    }

    /// Reads the metadata from an object's attributes, falling back to the defaults for
    /// an object last modified at `modified` wherever a value is missing or malformed.
    pub fn decode(attrs: &Attributes, modified: Timestamp) -> Self {
        let get = |key: &'static str| -> Option<&str> {
            [KeyStyle::Fsx, KeyStyle::Identifiers]
                .into_iter()
                .find_map(|style| attrs.get(&Attribute::Metadata(style.spell(key))))
                .map(|v| v.as_ref().trim())
        };
        let mut m = Self::defaults(modified);
        if let Some(mode) = get(PERMISSIONS).and_then(parse_mode) {
            m.mode = mode;
        }
        if let Some(uid) = get(OWNER).and_then(|v| v.parse().ok()) {
            m.uid = uid;
        }
        if let Some(gid) = get(GROUP).and_then(|v| v.parse().ok()) {
            m.gid = gid;
        }
        if let Some(t) = get(ATIME).and_then(parse_time) {
            m.atime = t;
        }
        if let Some(t) = get(MTIME).and_then(parse_time) {
            m.mtime = t;
        }
        m
    }

    /// The metadata as object attributes, for an export, with FSx's keys.
    pub fn encode(&self) -> Attributes {
        self.encode_as(KeyStyle::Fsx)
    }

    /// The metadata as object attributes, with the keys spelled as `style` spells them.
    pub fn encode_as(&self, style: KeyStyle) -> Attributes {
        let mut a = Attributes::new();
        let mut put = |key: &'static str, value: String| {
            a.insert(
                Attribute::Metadata(style.spell(key)),
                AttributeValue::from(value),
            );
        };
        put(PERMISSIONS, format_mode(self.mode));
        put(OWNER, self.uid.to_string());
        put(GROUP, self.gid.to_string());
        put(ATIME, format_time(self.atime));
        put(MTIME, format_time(self.mtime));
        a
    }
}

/// Parses an octal `st_mode` (`0100644`, `100644`, `644`). A mode without type bits is a
/// regular file's; a type other than regular file, directory or symlink (a FIFO or
/// device FSx exported) is refused, as an import only makes files, symlinks and
/// directories.
pub fn parse_mode(s: &str) -> Option<u32> {
    if s.is_empty() || s.len() > 12 {
        return None;
    }
    let mode = u32::from_str_radix(s, 8).ok()?;
    if mode & !(S_IFMT | 0o7777) != 0 {
        return None;
    }
    match mode & S_IFMT {
        0 => Some(mode | S_IFREG),
        S_IFREG | S_IFDIR | S_IFLNK => Some(mode),
        _ => None,
    }
}

/// Formats `st_mode` as FSx does: seven octal digits (`0100644`).
pub fn format_mode(mode: u32) -> String {
    format!("{mode:07o}")
}

/// Parses `<nanoseconds>ns` (the suffix optional, a sign allowed) into a timestamp.
pub fn parse_time(s: &str) -> Option<Timestamp> {
    let digits = s.strip_suffix("ns").unwrap_or(s);
    let ns: i128 = digits.parse().ok()?;
    let sec = i64::try_from(ns.div_euclid(1_000_000_000)).ok()?;
    let nsec = u32::try_from(ns.rem_euclid(1_000_000_000)).ok()?;
    Timestamp::new(sec, nsec)
}

/// Formats a timestamp as `<nanoseconds>ns`.
pub fn format_time(t: Timestamp) -> String {
    let ns = i128::from(t.sec) * 1_000_000_000 + i128::from(t.nsec);
    format!("{ns}ns")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn t(sec: i64, nsec: u32) -> Timestamp {
        Timestamp { sec, nsec }
    }

    fn attrs(pairs: &[(&'static str, &str)]) -> Attributes {
        let mut a = Attributes::new();
        for &(k, v) in pairs {
            a.insert(Attribute::Metadata(k.into()), v.to_string().into());
        }
        a
    }

    #[test]
    fn decodes_fsx_metadata() {
        let a = attrs(&[
            (PERMISSIONS, "0100640"),
            (OWNER, "1000"),
            (GROUP, "100"),
            (ATIME, "1700000000123456789ns"),
            (MTIME, "1600000000000000001ns"),
        ]);
        let m = FileMeta::decode(&a, t(5, 0));
        assert_eq!(m.mode, 0o100_640);
        assert_eq!(m.perm(), 0o640);
        assert_eq!((m.uid, m.gid), (1000, 100));
        assert_eq!(m.atime, t(1_700_000_000, 123_456_789));
        assert_eq!(m.mtime, t(1_600_000_000, 1));
        assert!(!m.is_symlink() && !m.is_dir());
    }

    #[test]
    fn symlinks_and_directories_are_recognised() {
        let m = FileMeta::decode(&attrs(&[(PERMISSIONS, "0120777")]), t(1, 0));
        assert!(m.is_symlink());
        assert_eq!(m.perm(), 0o777);
        let m = FileMeta::decode(&attrs(&[(PERMISSIONS, "0040755")]), t(1, 0));
        assert!(m.is_dir());
    }

    #[test]
    fn bad_values_fall_back_to_defaults() {
        let modified = t(1_234, 5);
        let a = attrs(&[
            (PERMISSIONS, "rwxr-xr-x"),
            (OWNER, "-1"),
            (GROUP, "4294967296"),
            (ATIME, "soon"),
            (MTIME, "99999999999999999999999999999999999999ns"),
        ]);
        assert_eq!(FileMeta::decode(&a, modified), FileMeta::defaults(modified));
        assert_eq!(
            FileMeta::decode(&Attributes::new(), modified),
            FileMeta::defaults(modified)
        );
        // A FIFO, a device, stray high bits: not something an import makes.
        for bad in ["0010644", "0060600", "01100644", "", "08"] {
            assert_eq!(parse_mode(bad), None, "{bad}");
        }
        assert_eq!(parse_mode("644"), Some(0o100_644));
        assert_eq!(parse_mode(" 0100600 ".trim()), Some(0o100_600));
    }

    #[test]
    fn times_before_1970_and_without_suffix() {
        assert_eq!(parse_time("-1ns"), Some(t(-1, 999_999_999)));
        assert_eq!(parse_time("1000000000"), Some(t(1, 0)));
        assert_eq!(format_time(t(-1, 999_999_999)), "-1ns");
        assert_eq!(
            format_time(t(1_700_000_000, 123_456_789)),
            "1700000000123456789ns"
        );
    }

    #[test]
    fn encodes_as_fsx_does() {
        let m = FileMeta {
            mode: S_IFLNK | 0o777,
            uid: 7,
            gid: 8,
            atime: t(1, 2),
            mtime: t(3, 4),
        };
        let a = m.encode();
        let get = |k: &'static str| {
            a.get(&Attribute::Metadata(k.into()))
                .map(|v| v.as_ref().to_string())
        };
        assert_eq!(get(PERMISSIONS).as_deref(), Some("0120777"));
        assert_eq!(get(OWNER).as_deref(), Some("7"));
        assert_eq!(get(GROUP).as_deref(), Some("8"));
        assert_eq!(get(ATIME).as_deref(), Some("1000000002ns"));
        assert_eq!(get(MTIME).as_deref(), Some("3000000004ns"));
    }

    #[test]
    fn azure_spells_the_keys_as_identifiers_and_reads_back() {
        let m = FileMeta {
            mode: S_IFREG | 0o600,
            uid: 1000,
            gid: 100,
            atime: t(10, 1),
            mtime: t(20, 2),
        };
        let a = m.encode_as(KeyStyle::Identifiers);
        let mut names: Vec<String> = a
            .iter()
            .filter_map(|(k, _)| match k {
                Attribute::Metadata(name) => Some(name.to_string()),
                _ => None,
            })
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                "file_atime",
                "file_group",
                "file_mtime",
                "file_owner",
                "file_permissions"
            ]
        );
        assert_eq!(FileMeta::decode(&a, t(0, 0)), m);
        assert_eq!(KeyStyle::Fsx.spell(PERMISSIONS), PERMISSIONS);
    }

    proptest! {
        /// What an export writes, an import reads back unchanged.
        #[test]
        fn encode_decode_round_trip(
            kind in prop::sample::select(vec![S_IFREG, S_IFDIR, S_IFLNK]),
            perm in 0u32..=0o7777,
            uid: u32,
            gid: u32,
            asec in -(1i64 << 40)..(1i64 << 40),
            ansec in 0u32..1_000_000_000,
            msec in -(1i64 << 40)..(1i64 << 40),
            mnsec in 0u32..1_000_000_000,
        ) {
            let m = FileMeta {
                mode: kind | perm,
                uid,
                gid,
                atime: t(asec, ansec),
                mtime: t(msec, mnsec),
            };
            prop_assert_eq!(FileMeta::decode(&m.encode(), t(0, 0)), m);
        }

        /// Decoding never panics, whatever the values.
        #[test]
        fn decode_is_total(mode in ".{0,20}", owner in ".{0,12}", time in ".{0,40}") {
            let a = attrs(&[(PERMISSIONS, &mode), (OWNER, &owner), (MTIME, &time)]);
            let _ = FileMeta::decode(&a, t(0, 0));
        }
    }
}
