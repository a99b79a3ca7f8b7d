//! The weftfs client library.
//!
//! Today it owns the cluster view of a client — the configuration fetched from the MGS and
//! kept current through its callbacks — and typed clients for each service ([`MgsClient`],
//! [`MdtClient`], [`OstClient`]) over reconnecting connections. Servers use the same typed
//! clients to reach each other (an MDT destroys objects on OSTs). The file API with striping,
//! read-ahead and write-back is built on these (see ARCHITECTURE.md).

pub mod budget;
pub mod cache;
pub mod changes;
pub mod client;
pub mod client_core;
pub mod cluster;
pub mod error;
pub mod file;
pub mod io;
pub mod layout;
pub mod layouts;
pub mod locks;
pub mod mdt;
pub mod mgs;
pub mod ost;
pub mod params;
pub mod pcc;
pub mod restore_ahead;
pub mod statahead;
#[cfg(test)]
mod test_attrs;

pub use client::{Client, ClientOptions};
pub use client_core::ClientCore;
pub use cluster::{Cluster, ClusterOptions};
pub use error::ClientError;
pub use file::{File, OpenOptions};
pub use layouts::{LayoutOf, Migrated};
pub use mdt::{Found, MdtClient, NewFile};
pub use mgs::MgsClient;
pub use ost::OstClient;
pub use params::{ClientParams, Param};
/// The context requests go in (job id, resend numbers, deadline); see [`Client::in_context`].
pub use weft_rpc::RequestContext;
