//! Extended attributes: set, get, list and remove, the kernel's size rules for the
//! answers, and the remembered absence of `security.capability` ([`crate::nocaps`]).

use super::Ops;
use crate::errno::{Failed, FsResult};
use crate::nocaps::CAPABILITY;
use weft_proto::mdt::{Credentials, XattrMode};

/// The answer to a getxattr or listxattr asked with a buffer of some size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum XattrAnswer {
    /// Asked with size 0: only the size the value needs.
    Size(u32),
    /// The value, which fits.
    Data(Vec<u8>),
}

impl XattrAnswer {
    /// `value` for a buffer of `size` bytes (0: asking for the size): ERANGE if it does
    /// not fit.
    pub fn new(value: Vec<u8>, size: u32) -> FsResult<Self> {
        match u32::try_from(value.len()) {
            Ok(len) if size == 0 => Ok(XattrAnswer::Size(len)),
            Ok(len) if len <= size => Ok(XattrAnswer::Data(value)),
            _ => Err(Failed::code(libc::ERANGE)),
        }
    }
}

/// How a setxattr may treat an existing attribute, from its `XATTR_*` flags.
pub fn xattr_mode(flags: i32) -> FsResult<XattrMode> {
    match flags & (libc::XATTR_CREATE | libc::XATTR_REPLACE) {
        0 => Ok(XattrMode::Any),
        libc::XATTR_CREATE => Ok(XattrMode::Create),
        libc::XATTR_REPLACE => Ok(XattrMode::Replace),
        _ => Err(Failed::code(libc::EINVAL)),
    }
}

/// Names as listxattr returns them: each followed by a NUL.
pub fn name_list(names: Vec<Vec<u8>>) -> Vec<u8> {
    let mut out = Vec::new();
    for n in names {
        out.extend_from_slice(&n);
        out.push(0);
    }
    out
}

impl Ops {
    /// Whether `name` of `ino` is known to be absent without asking the MDT: the kernel's
    /// `security.capability` lookup before every `write(2)`, while the absence is fresh.
    pub fn known_absent(&self, ino: u64, name: &[u8]) -> bool {
        name == CAPABILITY && self.no_caps.known_absent(ino)
    }

    /// Sets attribute `name` of `ino` to `value` (`flags`: `XATTR_CREATE`/`XATTR_REPLACE`).
    pub async fn setxattr(
        &self,
        ino: u64,
        name: &[u8],
        value: &[u8],
        flags: i32,
        cred: &Credentials,
    ) -> FsResult<()> {
        let mode = xattr_mode(flags)?;
        let fid = self.fid(ino)?;
        self.no_caps.forget(ino);
        Ok(self.client.setxattr(fid, name, value, mode, cred).await?)
    }

    /// Attribute `name` of `ino`, for a buffer of `size` bytes.
    pub async fn getxattr(
        &self,
        ino: u64,
        name: &[u8],
        size: u32,
        cred: &Credentials,
    ) -> FsResult<XattrAnswer> {
        let value = match self.client.getxattr(self.fid(ino)?, name, cred).await {
            Err(e) if name == CAPABILITY && e.errno() == weft_proto::Errno::NoData => {
                self.no_caps.absent(ino);
                return Err(e.into());
            }
            r => r?,
        };
        XattrAnswer::new(value, size)
    }

    /// The attribute names of `ino`, for a buffer of `size` bytes.
    pub async fn listxattr(
        &self,
        ino: u64,
        size: u32,
        cred: &Credentials,
    ) -> FsResult<XattrAnswer> {
        let names = self.client.listxattr(self.fid(ino)?, cred).await?;
        XattrAnswer::new(name_list(names), size)
    }

    /// Removes attribute `name` of `ino`.
    pub async fn removexattr(&self, ino: u64, name: &[u8], cred: &Credentials) -> FsResult<()> {
        self.no_caps.forget(ino);
        Ok(self.client.removexattr(self.fid(ino)?, name, cred).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_follow_the_buffer_size() {
        assert_eq!(
            XattrAnswer::new(b"abc".to_vec(), 0),
            Ok(XattrAnswer::Size(3))
        );
        assert_eq!(
            XattrAnswer::new(b"abc".to_vec(), 3),
            Ok(XattrAnswer::Data(b"abc".to_vec()))
        );
        assert_eq!(
            XattrAnswer::new(b"abc".to_vec(), 2).map_err(Failed::errno),
            Err(libc::ERANGE)
        );
        assert_eq!(XattrAnswer::new(Vec::new(), 0), Ok(XattrAnswer::Size(0)));
    }

    #[test]
    fn setxattr_flags_and_name_lists() {
        assert_eq!(xattr_mode(0), Ok(XattrMode::Any));
        assert_eq!(xattr_mode(libc::XATTR_CREATE), Ok(XattrMode::Create));
        assert_eq!(xattr_mode(libc::XATTR_REPLACE), Ok(XattrMode::Replace));
        assert_eq!(
            xattr_mode(libc::XATTR_CREATE | libc::XATTR_REPLACE).map_err(Failed::errno),
            Err(libc::EINVAL)
        );
        assert_eq!(
            name_list(vec![b"user.a".to_vec(), b"user.bc".to_vec()]),
            b"user.a\0user.bc\0".to_vec()
        );
        assert!(name_list(Vec::new()).is_empty());
    }
}
