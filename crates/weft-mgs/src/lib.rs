//! The weftfs management service (MGS): the file system's configuration.
//!
//! This crate owns what every node must agree on: the file system's name and UUID, the
//! registered targets (index, UUID, address and failover addresses, active or not), persistent parameters
//! (`set_param -P`), OST pools, FID sequence grants with the FID location database, and the
//! default layout. Every change bumps the configuration version, is made durable, and is
//! then announced to connected peers with [`weft_proto::mgs::MgsCallback::ConfigChanged`].
//! It does not own the namespace (MDTs), data (OSTs), or the transport (`weft-rpc`;
//! [`MgsHandler`] plugs this crate into it).
//!
//! # On-disk format (version 1)
//!
//! One file, `DIR/mgs_state.json`, rewritten whole on every change with the durable recipe
//! (temporary file, fsync, rename, fsync directory):
//!
//! ```text
//! weft-mgs-state 1 <body length> <crc32c of body, 8 hex digits>
//! {"mgs_uuid": .., "next_seq": .., "config": {FsConfig as JSON}}
//! ```
//!
//! `next_seq` is the next FID sequence to grant; it is persisted before a grant is answered,
//! so no sequence is ever granted twice. Heartbeat times live in memory only (the persisted
//! `last_seen` is refreshed whenever something else is written); active/inactive
//! transitions are persisted like any other change. A served directory is held with an
//! exclusive `flock`, so a second MGS on it is refused.
//!
//! Sequence grants are not tied to registration: an MDT may ask before it registers.

mod error;
mod mgs;
mod names;
mod service;
mod state;
mod subscribers;

pub use error::MgsError;
pub use mgs::{
    DEFAULT_HEARTBEAT_TIMEOUT, MAX_FAILOVER_ADDRESSES, MAX_PARAMS, MAX_POOLS, MAX_SEQ_PER_GRANT,
    MAX_TARGET_INDEX, MGS_STATS, Mgs, MgsOptions, MgsStats,
};
pub use names::{PARAM_NAME_MAX, PARAM_VALUE_MAX, POOL_NAME_MAX, is_valid_fsname};
pub use service::MgsHandler;
pub use state::{STATE_FILE, STATE_FORMAT_VERSION};
pub use subscribers::ConfigSubscriber;
