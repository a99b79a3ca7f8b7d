//! The one place where an error becomes the errno an application sees: [`Failed`], what
//! every operation of the mount returns on failure (the adapter hands its code to the
//! kernel).

use weft_client::ClientError;

/// A failed request, as the kernel will be told: a positive Linux errno.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failed(i32);

impl Failed {
    /// Fails with the Linux errno `code` (EIO if it is not a positive number, as the
    /// kernel accepts no other).
    pub fn code(code: i32) -> Self {
        Failed(if code > 0 { code } else { libc::EIO })
    }

    /// The Linux errno.
    pub fn errno(self) -> i32 {
        self.0
    }
}

impl From<ClientError> for Failed {
    fn from(e: ClientError) -> Self {
        let errno = e.errno();
        match errno {
            // Ordinary outcomes of POSIX calls: not worth a log line.
            weft_proto::Errno::NoEnt
            | weft_proto::Errno::Exist
            | weft_proto::Errno::NotEmpty
            | weft_proto::Errno::Access
            | weft_proto::Errno::Perm
            | weft_proto::Errno::NotDir
            | weft_proto::Errno::IsDir
            | weft_proto::Errno::NameTooLong
            | weft_proto::Errno::NoData
            | weft_proto::Errno::Range
            | weft_proto::Errno::Loop
            | weft_proto::Errno::Inval
            | weft_proto::Errno::NotSup
            // Lock conflicts and interrupted lock waits.
            | weft_proto::Errno::Again
            | weft_proto::Errno::Intr
            | weft_proto::Errno::DeadLk => {}
            _ => tracing::warn!(error = %e, errno = %errno, "request failed"),
        }
        Failed::code(errno.code())
    }
}

/// What request handlers return.
pub type FsResult<T> = Result<T, Failed>;

#[cfg(test)]
mod tests {
    use super::*;
    use weft_proto::{Errno, WireError};

    #[test]
    fn client_errors_keep_their_linux_errno() {
        for e in [
            Errno::NoEnt,
            Errno::Access,
            Errno::Perm,
            Errno::NotEmpty,
            Errno::NoSpc,
        ] {
            let f = Failed::from(ClientError::Remote(WireError::new(e, "x")));
            assert_eq!(f.errno(), e.code());
        }
        assert_eq!(
            Failed::from(ClientError::Invalid("bad".into())).errno(),
            libc::EINVAL
        );
    }

    #[test]
    fn codes_the_kernel_would_refuse_become_eio() {
        assert_eq!(Failed::code(libc::ENOENT).errno(), libc::ENOENT);
        assert_eq!(Failed::code(0).errno(), libc::EIO);
        assert_eq!(Failed::code(-libc::ENOENT).errno(), libc::EIO);
    }
}
