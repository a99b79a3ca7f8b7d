//! Helpers shared by the tests of several MDTs (`dne*.rs`).

use weft_client::ClientError;
use weft_proto::Errno;
use weft_proto::mdt::{Credentials, RenameFlags};

pub fn root() -> Credentials {
    Credentials::root()
}

/// An unprivileged user whose group is its uid.
pub fn user(uid: u32) -> Credentials {
    Credentials {
        uid,
        gid: uid,
        groups: vec![],
    }
}

/// The errno of a call that must fail.
pub fn errno<T: std::fmt::Debug>(r: Result<T, ClientError>) -> Errno {
    r.expect_err("expected an error").errno()
}

/// A rename without flags.
pub const PLAIN: RenameFlags = RenameFlags {
    noreplace: false,
    exchange: false,
};
