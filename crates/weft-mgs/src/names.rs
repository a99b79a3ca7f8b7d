//! Rules for the names the MGS accepts: file systems, parameters, pools, addresses.

use weft_proto::{Errno, WireError, WireResult};

/// Longest parameter name.
pub const PARAM_NAME_MAX: usize = 128;
/// Longest parameter value, in bytes.
pub const PARAM_VALUE_MAX: usize = 4096;
/// Longest pool name (Lustre's `LOV_MAXPOOLNAME`).
pub const POOL_NAME_MAX: usize = 15;
/// Longest target address (`HOST:PORT`).
pub const ADDRESS_MAX: usize = 255;

/// Whether `name` is a valid file system name: 1 to 8 characters of `[A-Za-z0-9_-]`, as
/// Lustre limits it.
pub fn is_valid_fsname(name: &str) -> bool {
    (1..=8).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Checks a persistent parameter name: `[A-Za-z0-9_.*-]`, 1 to 128 characters.
pub fn check_param_name(name: &str) -> WireResult<()> {
    let ok = (1..=PARAM_NAME_MAX).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'*' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(WireError::new(
            Errno::Inval,
            format!(
                "invalid parameter name {:?}: use 1 to {PARAM_NAME_MAX} characters of A-Z a-z 0-9 _ . * -",
                clip(name)
            ),
        ))
    }
}

/// Checks a parameter value's size.
pub fn check_param_value(value: &str) -> WireResult<()> {
    if value.len() > PARAM_VALUE_MAX {
        return Err(WireError::new(
            Errno::Inval,
            format!(
                "parameter value of {} bytes exceeds {PARAM_VALUE_MAX}",
                value.len()
            ),
        ));
    }
    Ok(())
}

/// Checks a pool name: 1 to 15 characters of `[A-Za-z0-9_-]`.
pub fn check_pool_name(name: &str) -> WireResult<()> {
    let ok = (1..=POOL_NAME_MAX).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(WireError::new(
            Errno::Inval,
            format!(
                "invalid pool name {:?}: use 1 to {POOL_NAME_MAX} characters of A-Z a-z 0-9 _ -",
                clip(name)
            ),
        ))
    }
}

/// Checks a target address: non-empty printable text without spaces, at most 255 bytes.
/// Host names are allowed, so it is not parsed as a socket address.
pub fn check_address(address: &str) -> WireResult<()> {
    let ok =
        (1..=ADDRESS_MAX).contains(&address.len()) && address.chars().all(|c| c.is_ascii_graphic());
    if ok {
        Ok(())
    } else {
        Err(WireError::new(
            Errno::Inval,
            format!("invalid target address {:?}", clip(address)),
        ))
    }
}

/// A prefix of untrusted text, short enough for an error message.
fn clip(s: &str) -> String {
    s.chars().take(64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(is_valid_fsname("weft") && is_valid_fsname("a_b-9XYZ"));
        assert!(!is_valid_fsname("") && !is_valid_fsname("123456789") && !is_valid_fsname("a b"));
        assert!(check_param_name("osc.*.max_dirty_mb").is_ok());
        assert!(check_param_name("").is_err());
        assert!(check_param_name("a=b").is_err());
        assert!(check_param_name(&"x".repeat(129)).is_err());
        assert!(check_param_name(&"x".repeat(128)).is_ok());
        assert!(check_param_value(&"v".repeat(4096)).is_ok());
        assert!(check_param_value(&"v".repeat(4097)).is_err());
        assert!(check_pool_name("flash").is_ok());
        assert!(check_pool_name("sixteen_chars_xx").is_err());
        assert!(check_pool_name("a.b").is_err());
        assert!(check_address("10.0.0.1:988").is_ok());
        assert!(check_address("host name:1").is_err());
        assert!(check_address("").is_err());
    }
}
