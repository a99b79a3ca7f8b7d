//! Bulk read/write statistics: byte counters and a histogram of I/O sizes in power-of-two
//! buckets, like Lustre's `brw_stats`. The transport already counts operations and
//! latencies; these say how big the I/Os are, which is what tells a well-striped checkpoint
//! (few large RPCs) from a badly tuned one (many small ones).

use crate::store::StoreCounters;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};
use weft_rpc::metric::{MetricDef, Stat};

/// Smallest bucket: I/Os up to 4 KiB.
pub const BRW_MIN_SHIFT: u32 = 12;
/// Number of buckets: up to 4 KiB, 8 KiB, ... 64 MiB (the largest bulk).
pub const BRW_BUCKETS: usize = 15;

/// One bucket of the histogram.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrwBucket {
    /// Upper bound of the bucket, in bytes: it counts I/Os of more than half this and at
    /// most this many bytes (the first bucket counts everything up to it).
    pub max_bytes: u64,
    /// Reads of that size.
    pub reads: u64,
    /// Writes of that size.
    pub writes: u64,
}

/// A snapshot of an OST's bulk I/O statistics.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OstStats {
    /// Bytes returned by reads.
    pub read_bytes: u64,
    /// Bytes stored by writes.
    pub write_bytes: u64,
    /// Number of reads.
    pub reads: u64,
    /// Number of writes.
    pub writes: u64,
    /// I/O size histogram, smallest bucket first.
    pub brw: Vec<BrwBucket>,
    /// Objects returned by listings (`ListObjects` pages; the transport counts the pages).
    pub listed_objects: u64,
    /// Reads that went around the page cache (`O_DIRECT`; see [`crate::direct`]; counted
    /// by the store).
    pub direct_reads: u64,
    /// Writes that went around the page cache.
    pub direct_writes: u64,
    /// Logical bytes of compressed objects.
    pub compressed_logical: u64,
    /// Bytes allocated to compressed objects.
    pub compressed_stored: u64,
    /// HSM restore chunks this OST's server copied for the MDS (its
    /// [`weft_proto::ost::OstRequest::Restore`]s sent to this OST).
    pub restores: u64,
    /// Restore chunks that failed.
    pub restore_errors: u64,
    /// Bytes of the restore chunks copied.
    pub restored_bytes: u64,
}

/// Every single figure of [`OstStats`], the one table naming them: the OST service's
/// STATS counters (what `get_param` lists) and Prometheus's `weft_ost_` families are read
/// from it. The histogram is [`OST_BRW`].
pub const OST_STATS: [Stat<OstStats>; 12] = [
    Stat::new(
        MetricDef::counter("read_bytes", "Bytes returned by reads."),
        |s| s.read_bytes,
    ),
    Stat::new(
        MetricDef::counter("write_bytes", "Bytes stored by writes."),
        |s| s.write_bytes,
    ),
    Stat::new(MetricDef::counter("reads", "Bulk reads served."), |s| {
        s.reads
    }),
    Stat::new(MetricDef::counter("writes", "Bulk writes stored."), |s| {
        s.writes
    }),
    Stat::new(
        MetricDef::counter("listed_objects", "Objects returned by listings."),
        |s| s.listed_objects,
    ),
    Stat::new(
        MetricDef::counter(
            "direct_reads",
            "Reads that went around the page cache (O_DIRECT).",
        ),
        |s| s.direct_reads,
    ),
    Stat::new(
        MetricDef::counter(
            "direct_writes",
            "Writes that went around the page cache (O_DIRECT).",
        ),
        |s| s.direct_writes,
    ),
    Stat::new(
        MetricDef::gauge(
            "compress_logical_bytes",
            "Logical bytes of compressed objects.",
        ),
        |s| s.compressed_logical,
    ),
    Stat::new(
        MetricDef::gauge(
            "compress_stored_bytes",
            "Bytes allocated to compressed objects.",
        ),
        |s| s.compressed_stored,
    ),
    Stat::new(
        MetricDef::counter(
            "restores",
            "HSM restore chunks copied from a data repository by this server's data mover.",
        ),
        |s| s.restores,
    ),
    Stat::new(
        MetricDef::counter("restore_errors", "HSM restore chunks that failed."),
        |s| s.restore_errors,
    ),
    Stat::new(
        MetricDef::counter("restored_bytes", "Bytes of the HSM restore chunks copied."),
        |s| s.restored_bytes,
    ),
];

/// The I/O size histogram of [`OstStats::brw`] (`get_param`'s `brw.read.N`/`brw.write.N`),
/// one Prometheus counter per direction and size bucket.
pub const OST_BRW: MetricDef =
    MetricDef::counter("brw", "Bulk reads and writes by I/O size (brw_stats).");

#[derive(Default)]
pub(crate) struct BrwStats {
    read_bytes: AtomicU64,
    write_bytes: AtomicU64,
    reads: [AtomicU64; BRW_BUCKETS],
    writes: [AtomicU64; BRW_BUCKETS],
    listed_objects: AtomicU64,
    restores: AtomicU64,
    restore_errors: AtomicU64,
    restored_bytes: AtomicU64,
}

/// The bucket counting an I/O of `len` bytes.
pub(crate) fn bucket_of(len: u64) -> usize {
    let bits = if len <= 1 {
        0
    } else {
        u64::BITS - (len - 1).leading_zeros()
    };
    (bits.saturating_sub(BRW_MIN_SHIFT) as usize).min(BRW_BUCKETS - 1)
}

impl BrwStats {
    pub(crate) fn record_read(&self, len: u64) {
        self.read_bytes.fetch_add(len, Ordering::Relaxed);
        if let Some(c) = self.reads.get(bucket_of(len)) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn record_write(&self, len: u64) {
        self.write_bytes.fetch_add(len, Ordering::Relaxed);
        if let Some(c) = self.writes.get(bucket_of(len)) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn record_listed(&self, objects: u64) {
        self.listed_objects.fetch_add(objects, Ordering::Relaxed);
    }

    pub(crate) fn record_restore(&self, bytes: u64, ok: bool) {
        if ok {
            self.restores.fetch_add(1, Ordering::Relaxed);
            self.restored_bytes.fetch_add(bytes, Ordering::Relaxed);
        } else {
            self.restore_errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The counters now, with the store's own (`O_DIRECT` reads and writes).
    pub(crate) fn snapshot(&self, store: StoreCounters) -> OstStats {
        let brw: Vec<BrwBucket> = self
            .reads
            .iter()
            .zip(self.writes.iter())
            .enumerate()
            .map(|(i, (r, w))| BrwBucket {
                max_bytes: 1u64 << (BRW_MIN_SHIFT as usize + i),
                reads: r.load(Ordering::Relaxed),
                writes: w.load(Ordering::Relaxed),
            })
            .collect();
        OstStats {
            read_bytes: self.read_bytes.load(Ordering::Relaxed),
            write_bytes: self.write_bytes.load(Ordering::Relaxed),
            reads: brw.iter().map(|b| b.reads).sum(),
            writes: brw.iter().map(|b| b.writes).sum(),
            brw,
            listed_objects: self.listed_objects.load(Ordering::Relaxed),
            direct_reads: store.direct_reads,
            direct_writes: store.direct_writes,
            compressed_logical: store.compressed_logical,
            compressed_stored: store.compressed_stored,
            restores: self.restores.load(Ordering::Relaxed),
            restore_errors: self.restore_errors.load(Ordering::Relaxed),
            restored_bytes: self.restored_bytes.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_names_every_figure_once_in_get_params_order() {
        let s = OstStats {
            read_bytes: 1,
            write_bytes: 2,
            reads: 3,
            writes: 4,
            brw: Vec::new(),
            listed_objects: 5,
            direct_reads: 6,
            direct_writes: 7,
            compressed_logical: 8,
            compressed_stored: 9,
            restores: 10,
            restore_errors: 11,
            restored_bytes: 12,
        };
        let got: Vec<_> = weft_rpc::metric::values(&OST_STATS, &s)
            .map(|(d, v)| (d.param, v))
            .collect();
        assert_eq!(
            got,
            [
                ("read_bytes", 1),
                ("write_bytes", 2),
                ("reads", 3),
                ("writes", 4),
                ("listed_objects", 5),
                ("direct_reads", 6),
                ("direct_writes", 7),
                ("compress_logical_bytes", 8),
                ("compress_stored_bytes", 9),
                ("restores", 10),
                ("restore_errors", 11),
                ("restored_bytes", 12),
            ]
        );
    }

    #[test]
    fn sizes_land_in_power_of_two_buckets() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(4096), 0);
        assert_eq!(bucket_of(4097), 1);
        assert_eq!(bucket_of(1 << 20), 8);
        assert_eq!(bucket_of((1 << 20) + 1), 9);
        assert_eq!(bucket_of(64 << 20), BRW_BUCKETS - 1);
        assert_eq!(bucket_of(u64::MAX), BRW_BUCKETS - 1);
        let s = BrwStats::default();
        s.record_write(1 << 20);
        s.record_read(100);
        let snap = s.snapshot(StoreCounters::default());
        assert_eq!(
            snap.brw[8],
            BrwBucket {
                max_bytes: 1 << 20,
                reads: 0,
                writes: 1
            }
        );
        assert_eq!(snap.brw[0].reads, 1);
        assert_eq!(
            (snap.read_bytes, snap.write_bytes, snap.reads, snap.writes),
            (100, 1 << 20, 1, 1)
        );
    }
}
