//! Client errors as Python exceptions: `OSError(errno, message, path)`, which Python turns
//! into the matching subclass (`FileNotFoundError` for ENOENT, `PermissionError` for
//! EACCES, `IsADirectoryError`, `NotADirectoryError`, `FileExistsError`, ...).

use pyo3::PyErr;
use pyo3::exceptions::PyOSError;
use weft_client::ClientError;
use weft_proto::Errno;

/// `e` as an OSError about `path`.
pub fn os_error(e: &ClientError, path: &str) -> PyErr {
    errno_error(e.errno(), e.to_string(), path)
}

/// An OSError with `errno` about `path`.
pub fn errno_error(errno: Errno, msg: impl Into<String>, path: &str) -> PyErr {
    PyOSError::new_err((errno.code(), msg.into(), path.to_string()))
}

/// An OSError with a raw errno (one the protocol has no name for, e.g. EBADF of a file
/// used after a fork).
pub fn raw_error(code: i32, msg: impl Into<String>) -> PyErr {
    PyOSError::new_err((code, msg.into()))
}

/// Maps a client result to a Python result about `path`.
pub trait OrOsError<T> {
    /// The value, or the error as an OSError about `path`.
    fn or_os(self, path: &str) -> Result<T, PyErr>;
}

impl<T> OrOsError<T> for Result<T, ClientError> {
    fn or_os(self, path: &str) -> Result<T, PyErr> {
        self.map_err(|e| os_error(&e, path))
    }
}
