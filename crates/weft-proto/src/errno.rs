//! Errors as they cross the wire: a POSIX errno plus a human message.
//!
//! Servers answer a failed request with a [`WireError`]; the client library turns it into
//! its own error type and the FUSE layer returns [`Errno::code`] to the kernel unchanged.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The POSIX error numbers weftfs servers return, with their Linux values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Errno {
    /// Operation not permitted (EPERM, 1): not the owner, or not privileged.
    Perm,
    /// No such file or directory (ENOENT, 2).
    NoEnt,
    /// Input/output error (EIO, 5).
    Io,
    /// Bad file handle (EBADF, 9).
    BadF,
    /// Resource temporarily unavailable (EAGAIN, 11).
    Again,
    /// Permission denied (EACCES, 13): mode bits refuse the access.
    Access,
    /// Device or resource busy (EBUSY, 16).
    Busy,
    /// File exists (EEXIST, 17).
    Exist,
    /// Cross-device link (EXDEV, 18).
    XDev,
    /// Not a directory (ENOTDIR, 20).
    NotDir,
    /// Is a directory (EISDIR, 21).
    IsDir,
    /// Invalid argument (EINVAL, 22).
    Inval,
    /// File too large (EFBIG, 27).
    FBig,
    /// No space left on device (ENOSPC, 28).
    NoSpc,
    /// Too many links (EMLINK, 31).
    MLink,
    /// Result too large (ERANGE, 34): a buffer is too small.
    Range,
    /// File name too long (ENAMETOOLONG, 36).
    NameTooLong,
    /// Function not implemented (ENOSYS, 38).
    NoSys,
    /// Directory not empty (ENOTEMPTY, 39).
    NotEmpty,
    /// Too many levels of symbolic links (ELOOP, 40).
    Loop,
    /// No data available (ENODATA, 61): no such extended attribute.
    NoData,
    /// Object is remote (EREMOTE, 66): a name operation reached a striped directory's master
    /// inode; the client fetches the directory's stripes and asks the shard. Never shown to
    /// applications.
    Remote,
    /// Protocol error (EPROTO, 71): a malformed or unexpected message.
    Proto,
    /// Value too large for defined data type (EOVERFLOW, 75).
    Overflow,
    /// Operation not supported (EOPNOTSUPP, 95).
    NotSup,
    /// Connection timed out (ETIMEDOUT, 110).
    TimedOut,
    /// Stale file handle (ESTALE, 116): the FID no longer exists.
    Stale,
    /// Disk quota exceeded (EDQUOT, 122).
    DQuot,
    /// Interrupted system call (EINTR, 4): a lock wait was cancelled.
    Intr,
    /// Resource deadlock avoided (EDEADLK, 35): a lock wait would close a cycle.
    DeadLk,
    /// No locks available (ENOLCK, 37): the per-client lock limit is reached.
    NoLck,
    /// Operation now in progress (EINPROGRESS, 115): the directory is being migrated to
    /// another MDT (`weft migrate -m`); the client waits and sends the request again.
    /// Never shown to applications.
    InProgress,
    /// Read-only file system (EROFS, 30): the client's class is read-only
    /// (`weft_rpc::nodemap`).
    RoFs,
}

impl Errno {
    /// The Linux errno value.
    pub fn code(self) -> i32 {
        match self {
            Errno::Perm => 1,
            Errno::NoEnt => 2,
            Errno::Io => 5,
            Errno::BadF => 9,
            Errno::Again => 11,
            Errno::Access => 13,
            Errno::Busy => 16,
            Errno::Exist => 17,
            Errno::XDev => 18,
            Errno::NotDir => 20,
            Errno::IsDir => 21,
            Errno::Inval => 22,
            Errno::FBig => 27,
            Errno::NoSpc => 28,
            Errno::MLink => 31,
            Errno::Range => 34,
            Errno::NameTooLong => 36,
            Errno::NoSys => 38,
            Errno::NotEmpty => 39,
            Errno::Loop => 40,
            Errno::NoData => 61,
            Errno::Remote => 66,
            Errno::Proto => 71,
            Errno::Overflow => 75,
            Errno::NotSup => 95,
            Errno::TimedOut => 110,
            Errno::Stale => 116,
            Errno::DQuot => 122,
            Errno::Intr => 4,
            Errno::DeadLk => 35,
            Errno::NoLck => 37,
            Errno::InProgress => 115,
            Errno::RoFs => 30,
        }
    }

    /// The symbolic name, as in `<errno.h>`.
    pub fn name(self) -> &'static str {
        match self {
            Errno::Perm => "EPERM",
            Errno::NoEnt => "ENOENT",
            Errno::Io => "EIO",
            Errno::BadF => "EBADF",
            Errno::Again => "EAGAIN",
            Errno::Access => "EACCES",
            Errno::Busy => "EBUSY",
            Errno::Exist => "EEXIST",
            Errno::XDev => "EXDEV",
            Errno::NotDir => "ENOTDIR",
            Errno::IsDir => "EISDIR",
            Errno::Inval => "EINVAL",
            Errno::FBig => "EFBIG",
            Errno::NoSpc => "ENOSPC",
            Errno::MLink => "EMLINK",
            Errno::Range => "ERANGE",
            Errno::NameTooLong => "ENAMETOOLONG",
            Errno::NoSys => "ENOSYS",
            Errno::NotEmpty => "ENOTEMPTY",
            Errno::Loop => "ELOOP",
            Errno::NoData => "ENODATA",
            Errno::Remote => "EREMOTE",
            Errno::Proto => "EPROTO",
            Errno::Overflow => "EOVERFLOW",
            Errno::NotSup => "EOPNOTSUPP",
            Errno::TimedOut => "ETIMEDOUT",
            Errno::Stale => "ESTALE",
            Errno::DQuot => "EDQUOT",
            Errno::Intr => "EINTR",
            Errno::DeadLk => "EDEADLK",
            Errno::NoLck => "ENOLCK",
            Errno::InProgress => "EINPROGRESS",
            Errno::RoFs => "EROFS",
        }
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A failed request as the server reports it: the errno to surface and a message for logs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{errno}: {message}")]
pub struct WireError {
    /// The errno an application will see.
    pub errno: Errno,
    /// What went wrong, for humans (never parsed).
    pub message: String,
}

impl WireError {
    /// An error with an explanation.
    pub fn new(errno: Errno, message: impl Into<String>) -> Self {
        Self {
            errno,
            message: message.into(),
        }
    }
}

impl From<Errno> for WireError {
    fn from(errno: Errno) -> Self {
        Self {
            errno,
            message: String::new(),
        }
    }
}

/// What a server sends back for a request: its reply or an error.
pub type WireResult<T> = Result<T, WireError>;
