//! Encoding of message bodies (postcard) and the opcode each message carries.

use serde::{Serialize, de::DeserializeOwned};

/// A message that travels in a frame body. Its opcode goes into the frame header so a
/// server can count and reject requests before decoding their body.
pub trait Message: Serialize + DeserializeOwned {
    /// The opcode of this value (requests) or of the request it answers (replies use 0).
    fn opcode(&self) -> u16;
    /// A short, stable name of the operation for statistics (`"create"`, `"read"`).
    fn op_name(&self) -> &'static str;
    /// Whether only servers may send this request (a target registering with the MGS, an
    /// MDT asking another or destroying objects on an OST). A server started with a
    /// cluster key refuses it from a connection not authenticated as a server.
    fn server_only(&self) -> bool {
        false
    }
    /// Whether the request may change what the file system stores (refused from a
    /// read-only client class, see `weft_rpc::nodemap`).
    fn modifies(&self) -> bool {
        false
    }
    /// Whether the request is an administrator's (`set_param -P`, pools, migration):
    /// refused from a client class without the admin flag.
    fn admin_only(&self) -> bool {
        false
    }
    /// Maps user and group 0 of the request's credentials to `nobody` (root squash).
    fn squash_root(&mut self, nobody: u32) {
        let _ = nobody;
    }
}

/// What travels in front of every request body: who the request is for, beyond the
/// connection. Bodies are `postcard((RequestHeader, Request))`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RequestHeader {
    /// The job the request belongs to (a batch job id, or `process.uid`), for job statistics.
    pub jobid: Option<String>,
    /// For a request that changes state: its number among its client's such requests
    /// (from 1), the same when it is resent, so a server that already did it answers with
    /// the reply it recorded instead of doing it twice. 0: not resendable.
    pub seq: u64,
    /// Every request of this client numbered below this has been answered: the server may
    /// forget their replies.
    pub acked: u64,
}

/// Longest job id kept, in bytes; longer ones are cut (Lustre keeps 32).
pub const JOBID_MAX: usize = 64;

/// A body that could not be encoded or decoded.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// The bytes are not a valid encoding of the expected message.
    #[error("malformed message body: {0}")]
    Malformed(#[from] postcard::Error),
    /// The encoded body exceeds the frame limit.
    #[error("message body of {len} bytes exceeds the limit of {max}")]
    TooLarge {
        /// Encoded length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Decoding stopped before the end of the body.
    #[error("{0} trailing bytes after the message body")]
    Trailing(usize),
}

/// Encodes a value as a frame body, refusing one larger than [`crate::frame::MAX_BODY`].
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, CodecError> {
    let body = postcard::to_allocvec(value)?;
    if body.len() > crate::frame::MAX_BODY as usize {
        return Err(CodecError::TooLarge {
            len: body.len(),
            max: crate::frame::MAX_BODY as usize,
        });
    }
    Ok(body)
}

/// Decodes a whole frame body; trailing bytes are an error (they mean a framing bug).
pub fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T, CodecError> {
    let (value, rest) = postcard::take_from_bytes(body)?;
    if !rest.is_empty() {
        return Err(CodecError::Trailing(rest.len()));
    }
    Ok(value)
}
