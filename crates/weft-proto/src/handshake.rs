//! The connect handshake: the first request on every connection.

use crate::target::TargetId;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The protocol version this build speaks in handshakes. Messages are postcard enums whose
/// variants are numbered by position, so any change to a message type makes old peers
/// misread new ones: bump it with every such change, and a mismatched peer gets a clear
/// "protocol version N is not supported" at connect instead of garbled requests.
/// 5: node authentication (challenge-response), RW-PCC records and waits.
/// 6: eviction (the connect reply says whether the target evicted the node, and how long
/// it waits for a silent peer); failover addresses in registrations and the
/// configuration's targets.
/// 7: per-component compression in layouts and templates, and in OST writes and
/// punches that create an object.
/// 8: a repository's event queue (`RepoSpec::events`).
/// 9: `HsmTieringWants` (restores of one MDS process waiting for tiering room tell the
/// agent's).
pub const PROTOCOL_VERSION: u32 = 9;

/// Opcodes shared by every service (the handshake and liveness).
pub mod opcode {
    /// [`super::ConnectRequest`].
    pub const CONNECT: u16 = 1;
    /// An empty request answered with an empty reply.
    pub const PING: u16 = 2;
    /// Asks for the service's operation statistics.
    pub const STATS: u16 = 3;
    /// [`super::AuthHello`], answered by [`super::AuthChallenge`]: the first request on a
    /// connection to a server started with a cluster key.
    pub const AUTH_HELLO: u16 = 4;
    /// [`super::AuthProof`], answered by an empty reply or a refusal.
    pub const AUTH_PROOF: u16 = 5;
}

/// Feature bit: the peer can receive server-to-client callbacks.
pub const FEATURE_CALLBACKS: u64 = 1 << 0;
/// Every feature this build understands.
pub const FEATURES_SUPPORTED: u64 = FEATURE_CALLBACKS;

/// Binds a new connection to one target of one file system.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectRequest {
    /// The file system the client means; a mismatch is refused.
    pub fsname: String,
    /// The connecting node's identity, stable for its lifetime.
    pub client_uuid: Uuid,
    /// [`PROTOCOL_VERSION`] of the client.
    pub protocol_version: u32,
    /// Feature bits the client supports.
    pub features: u64,
    /// The target the connection is for.
    pub target: TargetId,
}

/// The server's answer to a successful [`ConnectRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectReply {
    /// The target's own UUID (changes if the target is reformatted).
    pub target_uuid: Uuid,
    /// Features both sides support.
    pub features: u64,
    /// The server's protocol version.
    pub protocol_version: u32,
    /// The target evicted this node (it stayed silent past `evict_timeout_ms`) since the
    /// node's last connection: what the node cached on that connection's behalf — dirty
    /// data, open handles, locks — is gone on the server and must not be sent again.
    pub evicted: bool,
    /// How long the target waits for a silent peer before evicting it (0: never). The
    /// peer sends a ping well within it on an otherwise idle connection.
    pub evict_timeout_ms: u64,
}

/// Which key a peer proves it holds: the client key (mounts, tools) or the server key
/// (MGS, MDS, OSS), from which the client key is derived one way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AuthRole {
    /// A client: proves the client key.
    Client,
    /// A server: proves the server key.
    Server,
}

/// Bytes of an authentication nonce and of a proof (HMAC-SHA256).
pub const AUTH_LEN: usize = 32;

/// Opens mutual authentication: who the peer says it is and its fresh nonce.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthHello {
    /// The key the peer will prove.
    pub role: AuthRole,
    /// The file system it means (empty for a server still learning it from the MGS); the
    /// connect request that follows must name the same.
    pub fsname: String,
    /// The node's identity; the connect request that follows must carry the same.
    pub client_uuid: Uuid,
    /// [`PROTOCOL_VERSION`] of the peer; the connect request must carry the same.
    pub protocol_version: u32,
    /// Random bytes, fresh for this connection.
    pub nonce: [u8; AUTH_LEN],
}

/// The server's answer to an [`AuthHello`]: its nonce and its proof of the key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthChallenge {
    /// Random bytes, fresh for this connection.
    pub nonce: [u8; AUTH_LEN],
    /// HMAC-SHA256 of the transcript under the role's key, labelled as the server's.
    pub proof: [u8; AUTH_LEN],
}

/// The peer's proof of the key, after it checked the server's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthProof {
    /// HMAC-SHA256 of the transcript under the role's key, labelled as the client's.
    pub proof: [u8; AUTH_LEN],
}

/// Per-operation statistics of one service, as returned by the STATS opcode.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceStats {
    /// The target these statistics belong to.
    pub target: Option<TargetId>,
    /// One row per operation that has been seen.
    pub ops: Vec<OpStats>,
    /// Counters particular to the target (an OST's bytes written, an MDT's open handles).
    pub counters: Vec<Counter>,
    /// Per-job operation statistics (jobs seen recently), like Lustre's job_stats.
    pub jobs: Vec<JobStats>,
}

/// The operations of one job on one target.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobStats {
    /// The job id the requests carried.
    pub jobid: String,
    /// Seconds since the Unix epoch when the job's first request in this table arrived.
    pub start_time: u64,
    /// Seconds since the Unix epoch of the job's latest request.
    pub snapshot_time: u64,
    /// Per-operation figures (histogram buckets are left empty).
    pub ops: Vec<OpStats>,
}

/// One named counter of a target.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counter {
    /// Dotted name, e.g. `write_bytes` or `brw.write.1048576`.
    pub name: String,
    /// Its value.
    pub value: u64,
}

/// Counters and a latency histogram for one operation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpStats {
    /// The operation's name.
    pub name: String,
    /// Requests handled.
    pub count: u64,
    /// Requests that ended in an error.
    pub errors: u64,
    /// Sum of latencies, in microseconds.
    pub sum_us: u64,
    /// Bulk bytes received and sent.
    pub bulk_bytes: u64,
    /// Latency histogram: `buckets[i]` counts requests that took `< 2^i` microseconds
    /// (and at least `2^(i-1)`); the last bucket holds everything slower.
    pub buckets: Vec<u64>,
}
