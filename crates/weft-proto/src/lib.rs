//! The weftfs wire protocol: the types every role shares and the codec that frames them.
//!
//! This crate owns identifiers ([`Fid`], [`ObjectId`], [`TargetId`]), layouts, the request and
//! reply messages of each service (MGS, MDT, OST), the errno-carrying [`WireError`], and the
//! frame format with its bounds checks. It performs no I/O: the transport lives in `weft-rpc`.
//!
//! Every frame is a fixed header ([`frame::FrameHeader`]) followed by a postcard-encoded body
//! and raw bulk bytes. Bodies are versioned by the header's protocol version; bulk data is
//! carried as-is and protected by CRC32C.

pub mod checksum;
pub mod codec;
pub mod errno;
pub mod fid;
pub mod frame;
pub mod handshake;
pub mod hsm;
pub mod layout;
pub mod mdt;
pub mod mgs;
pub mod ost;
pub mod target;
pub mod time;

pub use codec::{CodecError, JOBID_MAX, Message, RequestHeader, decode, encode};
pub use errno::{Errno, WireError, WireResult};
pub use fid::{Fid, FidSeqRange, ObjectId};
pub use frame::{FrameError, FrameHeader};
pub use handshake::{ConnectReply, ConnectRequest, PROTOCOL_VERSION};
pub use layout::{Compression, Layout, LayoutComponent, LayoutTemplate};
pub use target::{TargetId, TargetKind};
pub use time::Timestamp;

/// Longest name of one directory entry, in bytes (as Linux's NAME_MAX).
pub const NAME_MAX: usize = 255;
/// Longest symlink target, in bytes (as Linux's PATH_MAX less the NUL).
pub const SYMLINK_MAX: usize = 4095;
/// Largest extended attribute value, in bytes (as Linux's XATTR_SIZE_MAX).
pub const XATTR_VALUE_MAX: usize = 65536;
/// Longest extended attribute name, in bytes (as Linux's XATTR_NAME_MAX).
pub const XATTR_NAME_MAX: usize = 255;
/// Most supplementary groups a request may carry (as Linux's NGROUPS_MAX).
pub const GROUPS_MAX: usize = 65536;
