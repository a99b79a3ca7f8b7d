//! What a mover has done: its figures ([`MoverStats`]) and how they are reported
//! ([`MOVER_STATS`]).

use super::Mover;
use std::sync::atomic::{AtomicU64, Ordering};
use weft_rpc::metric::{MetricDef, Stat};
/// What a [`Mover`] has done since it was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MoverStats {
    /// Chunks restored (copied and synced).
    pub chunks: u64,
    /// Chunks that failed.
    pub chunk_errors: u64,
    /// Bytes fetched from stores.
    pub bytes_fetched: u64,
    /// Bytes written to OSTs.
    pub bytes_written: u64,
    /// Sub-range fetches attempted again after a transient store error.
    pub retries: u64,
    /// Fetches refused because the object changed since it was imported.
    pub stale: u64,
    /// Chunks that waited for room under a tiering high mark.
    pub room_waits: u64,
    /// Chunk parts handed to the server of their OSTs, which copied them (an MDS's mover).
    pub handed_off: u64,
}

/// Every figure of [`MoverStats`], as the MDT it restores for reports them
/// (`get_param mdt.*.mover.*`; Prometheus `weft_mdt_mover_*`).
pub const MOVER_STATS: [Stat<MoverStats>; 8] = [
    Stat::new(
        MetricDef::counter("mover.chunks", "Restore chunks copied and synced.")
            .exported_as("mover_chunks"),
        |s| s.chunks,
    ),
    Stat::new(
        MetricDef::counter("mover.chunk_errors", "Restore chunks that failed.")
            .exported_as("mover_chunk_errors"),
        |s| s.chunk_errors,
    ),
    Stat::new(
        MetricDef::counter("mover.bytes_fetched", "Bytes fetched from stores.")
            .exported_as("mover_fetched_bytes"),
        |s| s.bytes_fetched,
    ),
    Stat::new(
        MetricDef::counter("mover.bytes_written", "Bytes written to OSTs by restores.")
            .exported_as("mover_written_bytes"),
        |s| s.bytes_written,
    ),
    Stat::new(
        MetricDef::counter(
            "mover.retries",
            "Fetches attempted again after a transient store error.",
        )
        .exported_as("mover_retries"),
        |s| s.retries,
    ),
    Stat::new(
        MetricDef::counter(
            "mover.stale",
            "Fetches refused because the object changed since its import.",
        )
        .exported_as("mover_stale"),
        |s| s.stale,
    ),
    Stat::new(
        MetricDef::counter(
            "mover.room_waits",
            "Restore chunks that waited for room under a tiering high mark.",
        )
        .exported_as("mover_room_waits"),
        |s| s.room_waits,
    ),
    Stat::new(
        MetricDef::counter(
            "mover.handed_off",
            "Restore chunk parts handed to the server of their OSTs, which copied them.",
        )
        .exported_as("mover_handed_off"),
        |s| s.handed_off,
    ),
];

impl Mover {
    /// What the mover has done so far.
    pub fn stats(&self) -> MoverStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        MoverStats {
            chunks: get(&c.chunks),
            chunk_errors: get(&c.chunk_errors),
            bytes_fetched: get(&c.bytes_fetched),
            bytes_written: get(&c.bytes_written),
            retries: get(&c.retries),
            stale: get(&c.stale),
            room_waits: get(&c.room_waits),
            handed_off: get(&c.handed_off),
        }
    }
}
