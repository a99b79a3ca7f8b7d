//! Per-operation counters and latency histograms kept by every service.

use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use weft_proto::handshake::{JobStats, OpStats};

/// Number of latency buckets: `< 1 us`, `< 2 us`, ... `< 2^25 us` (~34 s), and slower.
pub const LATENCY_BUCKETS: usize = 27;

/// Counters of one operation. Lock-free: updated with relaxed atomics.
#[derive(Default)]
struct OpCounters {
    count: AtomicU64,
    errors: AtomicU64,
    sum_us: AtomicU64,
    bulk_bytes: AtomicU64,
    buckets: [AtomicU64; LATENCY_BUCKETS],
}

/// Statistics of every operation a service has handled, keyed by operation name.
#[derive(Default)]
pub struct OpStatsTable {
    ops: RwLock<HashMap<&'static str, std::sync::Arc<OpCounters>>>,
}

/// The histogram bucket of a latency: the number of bits of its microsecond count.
pub fn latency_bucket(elapsed: Duration) -> usize {
    let us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
    ((u64::BITS - us.leading_zeros()) as usize).min(LATENCY_BUCKETS - 1)
}

impl OpStatsTable {
    /// Records one request of operation `name`.
    pub fn record(&self, name: &'static str, elapsed: Duration, failed: bool, bulk_bytes: u64) {
        let counters = self.counters(name);
        counters.count.fetch_add(1, Ordering::Relaxed);
        if failed {
            counters.errors.fetch_add(1, Ordering::Relaxed);
        }
        let us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        counters.sum_us.fetch_add(us, Ordering::Relaxed);
        counters.bulk_bytes.fetch_add(bulk_bytes, Ordering::Relaxed);
        if let Some(b) = counters.buckets.get(latency_bucket(elapsed)) {
            b.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn counters(&self, name: &'static str) -> std::sync::Arc<OpCounters> {
        if let Some(c) = self.ops.read().get(name) {
            return c.clone();
        }
        let mut ops = self.ops.write();
        ops.entry(name).or_default().clone()
    }

    /// A consistent-enough snapshot (each counter read once), sorted by name.
    pub fn snapshot(&self) -> Vec<OpStats> {
        let ops = self.ops.read();
        let mut out: Vec<OpStats> = ops
            .iter()
            .map(|(name, c)| OpStats {
                name: (*name).to_string(),
                count: c.count.load(Ordering::Relaxed),
                errors: c.errors.load(Ordering::Relaxed),
                sum_us: c.sum_us.load(Ordering::Relaxed),
                bulk_bytes: c.bulk_bytes.load(Ordering::Relaxed),
                buckets: c
                    .buckets
                    .iter()
                    .map(|b| b.load(Ordering::Relaxed))
                    .collect(),
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }
}

/// Jobs kept per target; past this, the job heard from least recently is dropped.
pub const MAX_JOBS: usize = 1024;
/// A job not heard from for this long is dropped, by default (Lustre's
/// `job_cleanup_interval`; see [`set_job_cleanup_interval`]).
pub const JOB_IDLE: std::time::Duration = std::time::Duration::from_secs(600);

/// Seconds a job may stay silent before its figures are dropped, for every service of the
/// process.
static JOB_CLEANUP_SECS: AtomicU64 = AtomicU64::new(600);

/// Sets `job_cleanup_interval` (seconds, at least 1) for every service of this process.
pub fn set_job_cleanup_interval(secs: u64) {
    JOB_CLEANUP_SECS.store(secs.max(1), Ordering::Relaxed);
}

/// The current `job_cleanup_interval` in seconds.
pub fn job_cleanup_interval() -> u64 {
    JOB_CLEANUP_SECS.load(Ordering::Relaxed)
}

fn job_idle() -> Duration {
    Duration::from_secs(job_cleanup_interval())
}

/// One job's figures.
struct JobEntry {
    start: u64,
    last: u64,
    last_seen: std::time::Instant,
    ops: HashMap<&'static str, OpStats>,
}

/// Per-job operation statistics, bounded in the number of jobs.
#[derive(Default)]
pub struct JobStatsTable {
    jobs: Mutex<HashMap<String, JobEntry>>,
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl JobStatsTable {
    /// Records one request of `jobid`.
    pub fn record(
        &self,
        jobid: &str,
        op: &'static str,
        elapsed: Duration,
        failed: bool,
        bulk_bytes: u64,
    ) {
        let now = std::time::Instant::now();
        let key = crate::sanitize_jobid(jobid);
        let mut jobs = self.jobs.lock();
        if !jobs.contains_key(&key) {
            jobs.retain(|_, j| now.duration_since(j.last_seen) < job_idle());
            if jobs.len() >= MAX_JOBS {
                let oldest = jobs
                    .iter()
                    .min_by_key(|(_, j)| j.last_seen)
                    .map(|(k, _)| k.clone());
                if let Some(k) = oldest {
                    jobs.remove(&k);
                }
            }
        }
        let t = unix_now();
        let j = jobs.entry(key).or_insert_with(|| JobEntry {
            start: t,
            last: t,
            last_seen: now,
            ops: HashMap::new(),
        });
        j.last = t;
        j.last_seen = now;
        let s = j.ops.entry(op).or_insert_with(|| OpStats {
            name: op.to_string(),
            ..Default::default()
        });
        s.count += 1;
        s.errors += u64::from(failed);
        s.sum_us += u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        s.bulk_bytes += bulk_bytes;
    }

    /// The jobs seen within `job_cleanup_interval`, sorted by job id.
    pub fn snapshot(&self) -> Vec<JobStats> {
        let now = std::time::Instant::now();
        let jobs = self.jobs.lock();
        let mut out: Vec<JobStats> = jobs
            .iter()
            .filter(|(_, j)| now.duration_since(j.last_seen) < job_idle())
            .map(|(id, j)| {
                let mut ops: Vec<OpStats> = j.ops.values().cloned().collect();
                ops.sort_by(|a, b| a.name.cmp(&b.name));
                JobStats {
                    jobid: id.clone(),
                    start_time: j.start,
                    snapshot_time: j.last,
                    ops,
                }
            })
            .collect();
        out.sort_by(|a, b| a.jobid.cmp(&b.jobid));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latencies_land_in_log2_buckets() {
        assert_eq!(latency_bucket(Duration::from_nanos(500)), 0);
        assert_eq!(latency_bucket(Duration::from_micros(1)), 1);
        assert_eq!(latency_bucket(Duration::from_micros(3)), 2);
        assert_eq!(
            latency_bucket(Duration::from_secs(10_000)),
            LATENCY_BUCKETS - 1
        );
    }

    #[test]
    fn jobs_are_counted_apart_and_bounded() {
        let t = JobStatsTable::default();
        t.record("train.1", "write", Duration::from_micros(5), false, 100);
        t.record("train.1", "write", Duration::from_micros(5), true, 100);
        t.record("eval.2", "read", Duration::from_micros(5), false, 7);
        let s = t.snapshot();
        assert_eq!(s.len(), 2);
        assert_eq!(
            (
                s[1].jobid.as_str(),
                s[1].ops[0].count,
                s[1].ops[0].errors,
                s[1].ops[0].bulk_bytes
            ),
            ("train.1", 2, 1, 200)
        );
        for i in 0..(MAX_JOBS + 10) {
            t.record(&format!("job{i}"), "open", Duration::ZERO, false, 0);
        }
        assert_eq!(t.snapshot().len(), MAX_JOBS);
        let long = "x".repeat(500);
        t.record(&long, "open", Duration::ZERO, false, 0);
        t.record(&long, "open", Duration::ZERO, false, 0);
        let s = t.snapshot();
        let kept = s.iter().find(|j| j.jobid.starts_with("xxx")).unwrap();
        assert_eq!(
            (kept.jobid.len(), kept.ops[0].count),
            (weft_proto::JOBID_MAX, 2)
        );
    }

    #[test]
    fn records_are_counted_per_operation() {
        let t = OpStatsTable::default();
        t.record("create", Duration::from_micros(10), false, 0);
        t.record("create", Duration::from_micros(10), true, 0);
        t.record("read", Duration::from_micros(100), false, 4096);
        let s = t.snapshot();
        assert_eq!(s.len(), 2);
        assert_eq!(
            (s[0].name.as_str(), s[0].count, s[0].errors),
            ("create", 2, 1)
        );
        assert_eq!((s[1].name.as_str(), s[1].bulk_bytes), ("read", 4096));
        assert_eq!(s[0].buckets.iter().sum::<u64>(), 2);
    }
}
