//! The connect handshake: the first request on every connection.

use crate::target::TargetId;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The protocol version this build speaks in handshakes.
pub const PROTOCOL_VERSION: u32 = 4;

/// Opcodes shared by every service (the handshake and liveness).
pub mod opcode {
    /// [`super::ConnectRequest`].
    pub const CONNECT: u16 = 1;
    /// An empty request answered with an empty reply.
    pub const PING: u16 = 2;
    /// Asks for the service's operation statistics.
    pub const STATS: u16 = 3;
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
