//! The HSM coordinator: restores of released files (`HsmRestore`), served outside the
//! commit thread.
//!
//! One job per file (a map FID -> job), shared by every request from every client. A job
//! runs on its own task, so a reader going away does not stop it:
//! 1. through the commit thread, instantiate the layout over the file's size
//!    (`WriteOp::HsmInstantiate`), then read the inode and its archive record;
//! 2. copy the file in units of [`HsmConfig::unit`] bytes with the data mover
//!    ([`crate::ClusterView::restore_chunk`]), at most [`HsmConfig::in_flight`] at a time:
//!    units covering what waiting readers asked for first (oldest request first), then
//!    onward from the last unit started (read-ahead), wrapping to the start;
//! 3. through the commit thread, clear RELEASED if the file is still released against the
//!    same archive record and layout generation (`WriteOp::HsmRestored`, durable before
//!    anyone is told). If it is not (re-imported, released again meanwhile), the job
//!    starts over, up to [`ATTEMPTS`] times.
//!
//! A request is answered `Progress { done: false }` once its range is loaded, `done: true`
//! once the job finished. A mover error fails every current waiter with it and ends the
//! job (nothing it did not load is marked loaded); the next request starts a new job.
//! Shutdown aborts the jobs: their waiters get EIO.

use crate::commit::WriteOp;
use crate::mdt::Mdt;
use parking_lot::Mutex;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinSet;
use weft_proto::hsm::{HSM_LOST, HSM_RELEASED, RestoreChunk};
use weft_proto::mdt::MdtReply;
use weft_proto::{Errno, Fid, WireError, WireResult};

/// How many times a job starts over when the file changed under it.
const ATTEMPTS: usize = 3;

/// Tuning of the HSM coordinator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HsmConfig {
    /// Bytes per data-mover call (a restore unit).
    pub unit: u64,
    /// Most units of one job in flight at once.
    pub in_flight: usize,
    /// Most units in flight on the MDT, all jobs together: bounds the data mover's
    /// connections however many files are being restored.
    pub max_units: usize,
    /// Most bytes of units in flight on the MDT, all jobs together: bounds the data
    /// mover's memory. A small file's unit counts its own size, so many small files load
    /// at once (a store answers each GET after tens of milliseconds whatever its size)
    /// where only a few whole units of large ones fit.
    pub max_bytes: u64,
}

impl Default for HsmConfig {
    fn default() -> Self {
        Self {
            unit: 32 << 20,
            in_flight: 4,
            max_units: 64,
            max_bytes: 256 << 20,
        }
    }
}

/// The granule of [`HsmConfig::max_bytes`]: a unit takes one permit per started 64 KiB.
const BYTE_GRANULE: u64 = 64 << 10;

/// The permits of `bytes` out of a budget of `total` (a unit over the budget takes all).
fn byte_permits(bytes: u64, total: u32) -> u32 {
    u32::try_from(bytes.div_ceil(BYTE_GRANULE).max(1))
        .unwrap_or(u32::MAX)
        .min(total)
}

/// The restore jobs of one MDT.
pub(crate) struct Coordinator {
    jobs: Mutex<HashMap<Fid, Arc<Job>>>,
    closed: AtomicBool,
    cfg: HsmConfig,
    /// Units in flight on the MDT ([`HsmConfig::max_units`]).
    units: Arc<Semaphore>,
    /// Their bytes, in [`BYTE_GRANULE`]s ([`HsmConfig::max_bytes`]).
    bytes: Arc<Semaphore>,
    /// Permits of `bytes`.
    byte_budget: u32,
    /// Wakes `HsmPccWait` requests: a file left a read-write PCC (see `super::pcc`).
    pub(crate) pcc_changed: Notify,
}

/// One file's restore.
struct Job {
    fid: Fid,
    state: Mutex<JobState>,
    /// Wakes waiting requests: something was loaded, or the job ended.
    changed: Notify,
    /// Wakes the job: a request asked for a range.
    asked: Notify,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

#[derive(Default)]
struct JobState {
    /// The file's size once the job has read it.
    size: Option<u64>,
    /// Loaded byte ranges, sorted, disjoint, merged.
    loaded: Vec<(u64, u64)>,
    /// Ranges requests wait for, oldest first.
    wanted: VecDeque<(u64, u64)>,
    /// How the job ended: `Ok` when the file is loaded and no longer released.
    end: Option<Result<(), WireError>>,
}

impl Coordinator {
    pub fn new(cfg: HsmConfig) -> Self {
        let byte_budget = byte_permits(cfg.max_bytes, u32::MAX >> 4);
        Self {
            jobs: Mutex::new(HashMap::new()),
            closed: AtomicBool::new(false),
            cfg: HsmConfig {
                unit: cfg.unit.max(1),
                in_flight: cfg.in_flight.max(1),
                max_units: cfg.max_units.max(1),
                max_bytes: cfg.max_bytes,
            },
            units: Arc::new(Semaphore::new(cfg.max_units.max(1))),
            bytes: Arc::new(Semaphore::new(byte_budget as usize)),
            byte_budget,
            pcc_changed: Notify::new(),
        }
    }

    /// The restore running on `fid`, if any, with the bytes it has loaded.
    pub fn action(&self, fid: Fid) -> Option<weft_proto::hsm::HsmActionState> {
        let job = self.jobs.lock().get(&fid).cloned()?;
        let s = job.state.lock();
        if s.end.is_some() {
            return None;
        }
        Some(weft_proto::hsm::HsmActionState {
            action: weft_proto::hsm::HsmActionKind::Restore,
            bytes_done: s.loaded.iter().map(|(a, b)| b - a).sum(),
            size: s.size,
        })
    }

    /// Restore jobs running now.
    #[cfg(test)]
    pub fn running(&self) -> usize {
        self.jobs.lock().len()
    }

    /// Stops every job (their waiters get EIO) and refuses new ones.
    pub async fn shutdown(&self) {
        self.closed.store(true, Ordering::Release);
        let jobs: Vec<Arc<Job>> = self.jobs.lock().drain().map(|(_, j)| j).collect();
        for job in jobs {
            let task = job.task.lock().take();
            if let Some(t) = task {
                t.abort();
                let _ = t.await;
            }
            job.finish(Err(WireError::new(Errno::Io, "the MDT is shutting down")));
        }
    }
}

impl Job {
    fn finish(&self, r: Result<(), WireError>) {
        let mut s = self.state.lock();
        if s.end.is_none() {
            s.end = Some(r);
        }
        drop(s);
        self.changed.notify_waiters();
    }

    /// Waits until `[start, end)` is loaded (`done: false`) or the job ends (`done: true`,
    /// or its error); a range loaded when the whole file is waits for the end.
    async fn wait(&self, start: u64, end: u64) -> WireResult<MdtReply> {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let s = self.state.lock();
                match &s.end {
                    Some(Ok(())) => return Ok(MdtReply::Progress { done: true }),
                    Some(Err(e)) => return Err(e.clone()),
                    None => {}
                }
                // Once every byte is loaded the end is near: wait for it, to answer done.
                if let Some(size) = s.size
                    && covers(&s.loaded, start, end.min(size))
                    && !covers(&s.loaded, 0, size)
                {
                    return Ok(MdtReply::Progress { done: false });
                }
            }
            notified.await;
        }
    }
}

/// Marks the job failed if its task ends without finishing it (aborted, or a panic).
struct FinishGuard(Arc<Job>);

impl Drop for FinishGuard {
    fn drop(&mut self) {
        self.0.finish(Err(WireError::new(
            Errno::Io,
            "the restore stopped (MDT shutting down)",
        )));
    }
}

impl Mdt {
    /// `HsmRestore { fid, start, end }`: see the module header.
    pub(crate) async fn hsm_restore(&self, fid: Fid, start: u64, end: u64) -> WireResult<MdtReply> {
        if end < start {
            return Err(WireError::new(
                Errno::Inval,
                "restore range ends before it starts",
            ));
        }
        if self.shutting_down() || self.hsm.closed.load(Ordering::Acquire) {
            return Err(Self::shut());
        }
        let (ino, archive) = super::snapshot(&self.db, fid)
            .map_err(crate::mdt::fail_to_wire)?
            .ok_or_else(|| WireError::new(Errno::Stale, format!("no inode {fid}")))?;
        if ino.hsm_flags & HSM_RELEASED == 0 {
            return Ok(MdtReply::Progress { done: true });
        }
        if archive.is_none() || ino.archive_id == 0 {
            return Err(WireError::new(
                Errno::Io,
                "released file has no archive copy",
            ));
        }
        if ino.hsm_flags & HSM_LOST != 0 {
            return Err(WireError::new(Errno::Io, "the archive copy is lost"));
        }
        let job = self.restore_job(fid, start, end)?;
        job.wait(start, end).await
    }

    /// The file's job, started if there is none, with `[start, end)` asked of it.
    fn restore_job(&self, fid: Fid, start: u64, end: u64) -> WireResult<Arc<Job>> {
        let mut jobs = self.hsm.jobs.lock();
        if let Some(job) = jobs.get(&fid) {
            let job = job.clone();
            drop(jobs);
            job.state.lock().wanted.push_back((start, end));
            job.asked.notify_one();
            return Ok(job);
        }
        let me = self.me.upgrade().ok_or_else(Self::shut)?;
        let job = Arc::new(Job {
            fid,
            state: Mutex::new(JobState {
                wanted: VecDeque::from([(start, end)]),
                ..JobState::default()
            }),
            changed: Notify::new(),
            asked: Notify::new(),
            task: Mutex::new(None),
        });
        self.counters
            .hsm_restores_started
            .fetch_add(1, Ordering::Relaxed);
        let guard = FinishGuard(job.clone());
        let task = tokio::spawn(async move {
            let job = guard.0.clone();
            let r = me.run_restore(&job).await;
            // Gone from the map before waiters hear: a request after a failure starts anew.
            {
                let mut jobs = me.hsm.jobs.lock();
                if jobs.get(&job.fid).is_some_and(|j| Arc::ptr_eq(j, &job)) {
                    jobs.remove(&job.fid);
                }
            }
            let counter = match &r {
                Ok(()) => &me.counters.hsm_restores_done,
                Err(e) => {
                    tracing::warn!(fid = %job.fid, error = %e, "restore failed");
                    &me.counters.hsm_restores_failed
                }
            };
            counter.fetch_add(1, Ordering::Relaxed);
            job.finish(r);
            drop(guard);
        });
        *job.task.lock() = Some(task);
        jobs.insert(fid, job.clone());
        Ok(job)
    }

    /// A job's work, until the file is loaded and no longer released.
    async fn run_restore(&self, job: &Job) -> Result<(), WireError> {
        let fid = job.fid;
        for _ in 0..ATTEMPTS {
            self.write(0, WriteOp::HsmInstantiate(fid)).await?;
            let (ino, archive) = super::snapshot(&self.db, fid)
                .map_err(crate::mdt::fail_to_wire)?
                .ok_or_else(|| WireError::new(Errno::Stale, format!("no inode {fid}")))?;
            if ino.hsm_flags & HSM_RELEASED == 0 {
                return Ok(());
            }
            let (Some(archive), Some(layout)) = (archive, ino.layout) else {
                return Err(WireError::new(
                    Errno::Io,
                    "released file has no archive copy",
                ));
            };
            if ino.archive_id == 0 || ino.hsm_flags & HSM_LOST != 0 {
                return Err(WireError::new(Errno::Io, "the archive copy is lost"));
            }
            let generation = layout.generation;
            {
                let mut s = job.state.lock();
                s.size = Some(ino.size);
                s.loaded.clear();
            }
            job.changed.notify_waiters();
            let template = RestoreChunk {
                fid,
                layout,
                repo: ino.archive_id,
                archive: archive.clone(),
                start: 0,
                end: 0,
            };
            self.copy_units(job, &template, ino.size).await?;
            let restored = WriteOp::HsmRestored(fid, Box::new(archive), generation);
            if let MdtReply::Progress { done: true } = self.write(0, restored).await? {
                return Ok(());
            }
            tracing::info!(%fid, "the file changed during its restore; starting over");
        }
        Err(WireError::new(
            Errno::Io,
            "the file kept changing during its restore",
        ))
    }

    /// Loads `[0, size)` unit by unit (see the module header).
    async fn copy_units(
        &self,
        job: &Job,
        template: &RestoreChunk,
        size: u64,
    ) -> Result<(), WireError> {
        let HsmConfig {
            unit, in_flight, ..
        } = self.hsm.cfg;
        let units = size.div_ceil(unit);
        let extent = |u: u64| (u * unit, ((u + 1) * unit).min(size));
        let mut running: BTreeSet<u64> = BTreeSet::new();
        let mut set = JoinSet::new();
        let mut cursor = 0u64;
        loop {
            while running.len() < in_flight {
                let next = {
                    let mut s = job.state.lock();
                    pick(&mut s, &running, unit, units, size, cursor)
                };
                let Some(u) = next else { break };
                running.insert(u);
                cursor = u + 1;
                let (start, end) = extent(u);
                let chunk = RestoreChunk {
                    start,
                    end,
                    ..template.clone()
                };
                let cluster = self.cluster();
                let units = self.hsm.units.clone();
                let bytes = self.hsm.bytes.clone();
                let permits = byte_permits(end - start, self.hsm.byte_budget);
                set.spawn(async move {
                    // Always in this order (units, then bytes): no two units wait for
                    // each other. The semaphores are never closed; answer EIO if one is.
                    let closed = || (u, Err(WireError::new(Errno::Io, "restore units closed")));
                    let Ok(_unit) = units.acquire_owned().await else {
                        return closed();
                    };
                    let Ok(_bytes) = bytes.acquire_many_owned(permits).await else {
                        return closed();
                    };
                    (u, cluster.restore_chunk(chunk).await)
                });
            }
            if set.is_empty() {
                return Ok(());
            }
            tokio::select! {
                joined = set.join_next() => match joined {
                    Some(Ok((u, Ok(())))) => {
                        running.remove(&u);
                        let (start, end) = extent(u);
                        self.counters
                            .hsm_restore_bytes
                            .fetch_add(end - start, Ordering::Relaxed);
                        job.state.lock().loaded_add(start, end);
                        job.changed.notify_waiters();
                    }
                    Some(Ok((_, Err(e)))) => return Err(e),
                    Some(Err(e)) => {
                        return Err(WireError::new(Errno::Io, format!("restore unit failed: {e}")));
                    }
                    None => {}
                },
                _ = job.asked.notified() => {}
            }
        }
    }
}

impl JobState {
    fn loaded_add(&mut self, start: u64, end: u64) {
        add_range(&mut self.loaded, start, end);
        let loaded = &self.loaded;
        let size = self.size.unwrap_or(u64::MAX);
        self.wanted.retain(|&(s, e)| {
            let e = e.min(size);
            s < e && !covers(loaded, s, e)
        });
    }
}

/// The next unit to load: the first not loaded nor running of the oldest range still
/// wanted, else the first from `cursor` on (wrapping); `None` when every unit is loaded or
/// running.
fn pick(
    s: &mut JobState,
    running: &BTreeSet<u64>,
    unit: u64,
    units: u64,
    size: u64,
    cursor: u64,
) -> Option<u64> {
    let mut i = 0;
    while let Some(&(start, end)) = s.wanted.get(i) {
        let end = end.min(size);
        if start >= end {
            s.wanted.remove(i);
            continue;
        }
        if let Some(u) = free_unit(&s.loaded, running, unit, start / unit, end.div_ceil(unit)) {
            return Some(u);
        }
        i += 1;
    }
    free_unit(&s.loaded, running, unit, cursor.min(units), units)
        .or_else(|| free_unit(&s.loaded, running, unit, 0, cursor.min(units)))
}

/// The first unit in `[from, to)` neither loaded nor running.
fn free_unit(
    loaded: &[(u64, u64)],
    running: &BTreeSet<u64>,
    unit: u64,
    from: u64,
    to: u64,
) -> Option<u64> {
    let mut u = from;
    while u < to {
        let at = u.saturating_mul(unit);
        // Loaded ranges always end at a unit boundary or the file's end.
        if let Some(&(_, e)) = loaded.iter().find(|&&(s, e)| s <= at && at < e) {
            u = e.div_ceil(unit).max(u + 1);
            continue;
        }
        if running.contains(&u) {
            u += 1;
            continue;
        }
        return Some(u);
    }
    None
}

/// Adds `[start, end)` to a sorted, disjoint, merged range list.
fn add_range(ranges: &mut Vec<(u64, u64)>, start: u64, end: u64) {
    if start >= end {
        return;
    }
    let (mut s, mut e) = (start, end);
    ranges.retain(|&(a, b)| {
        if b < s || a > e {
            true
        } else {
            s = s.min(a);
            e = e.max(b);
            false
        }
    });
    let at = ranges.partition_point(|&(a, _)| a < s);
    ranges.insert(at, (s, e));
}

/// Whether `[start, end)` lies inside one range of the list.
fn covers(ranges: &[(u64, u64)], start: u64, end: u64) -> bool {
    start >= end || ranges.iter().any(|&(a, b)| a <= start && end <= b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_merge_and_cover() {
        let mut r = Vec::new();
        add_range(&mut r, 10, 20);
        add_range(&mut r, 30, 40);
        assert!(covers(&r, 12, 18) && !covers(&r, 15, 35));
        add_range(&mut r, 20, 30);
        assert_eq!(r, [(10, 40)]);
        add_range(&mut r, 0, 5);
        add_range(&mut r, 5, 10);
        assert_eq!(r, [(0, 40)]);
        assert!(covers(&r, 0, 40) && covers(&r, 7, 7));
    }

    #[test]
    fn units_asked_for_come_first_then_onward_from_the_cursor() {
        let mut s = JobState {
            size: Some(100),
            wanted: VecDeque::from([(55, 62)]),
            ..JobState::default()
        };
        let none = BTreeSet::new();
        assert_eq!(pick(&mut s, &none, 10, 10, 100, 0), Some(5));
        let running = BTreeSet::from([5]);
        assert_eq!(pick(&mut s, &running, 10, 10, 100, 6), Some(6));
        s.loaded_add(50, 70);
        assert!(s.wanted.is_empty());
        assert_eq!(pick(&mut s, &none, 10, 10, 100, 7), Some(7));
        s.loaded_add(70, 100);
        assert_eq!(pick(&mut s, &none, 10, 10, 100, 10), Some(0));
        s.loaded_add(0, 50);
        assert_eq!(pick(&mut s, &none, 10, 10, 100, 3), None);
    }
}
