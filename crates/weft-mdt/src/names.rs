//! Directory entry names: validation and the hash that orders a directory.
//!
//! Entries are stored under (parent FID, hash, name) so a directory lists in hash order and
//! a readdir cookie is simply the hash of the last entry returned. Hashes are 63 bits (so a
//! cookie fits a signed `off_t`) and at least [`MIN_HASH`]: cookies 0, 1 and 2 are reserved
//! (0 = start of the directory; 1 and 2 are left to the client for `.` and `..`).

use weft_proto::{Errno, NAME_MAX, WireError};
use xxhash_rust::xxh3::xxh3_64;

/// The smallest hash an entry can have; smaller cookies are reserved.
pub const MIN_HASH: u64 = 3;

/// The hash of `name` within its directory: 63 bits of xxh3, at least [`MIN_HASH`].
pub fn name_hash(name: &[u8]) -> u64 {
    (xxh3_64(name) >> 1).max(MIN_HASH)
}

/// Checks a name for an entry: not empty, no `/` or NUL, not `.` or `..` (EINVAL), at most
/// [`NAME_MAX`] bytes (ENAMETOOLONG).
pub fn check_name(name: &[u8]) -> Result<(), WireError> {
    if name.is_empty() {
        return Err(WireError::new(Errno::Inval, "empty name"));
    }
    if name == b"." || name == b".." {
        return Err(WireError::new(
            Errno::Inval,
            "'.' and '..' are resolved by the client",
        ));
    }
    if name.iter().any(|&b| b == b'/' || b == 0) {
        return Err(WireError::new(Errno::Inval, "name contains '/' or NUL"));
    }
    if name.len() > NAME_MAX {
        return Err(WireError::new(
            Errno::NameTooLong,
            format!("name of {} bytes", name.len()),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_names_are_refused_with_linux_errnos() {
        let long = vec![b'a'; NAME_MAX + 1];
        let cases: &[(&[u8], Option<Errno>)] = &[
            (b"a", None),
            (b"", Some(Errno::Inval)),
            (b".", Some(Errno::Inval)),
            (b"..", Some(Errno::Inval)),
            (b"...", None),
            (b"a/b", Some(Errno::Inval)),
            (b"a\0b", Some(Errno::Inval)),
            (&long, Some(Errno::NameTooLong)),
            (&long[..NAME_MAX], None),
            (b"\xff\xfe not utf-8", None),
        ];
        for (name, want) in cases {
            assert_eq!(check_name(name).err().map(|e| e.errno), *want, "{name:?}");
        }
    }

    #[test]
    fn hashes_avoid_reserved_cookies_and_fit_63_bits() {
        for i in 0..10_000u32 {
            let h = name_hash(format!("f{i}").as_bytes());
            assert!((MIN_HASH..1 << 63).contains(&h));
        }
    }
}
