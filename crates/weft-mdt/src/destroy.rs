//! The destroy log's worker: sends object destroys to OSTs and removes each log record once
//! every object in it is confirmed gone.
//!
//! Records are written in the same transaction as the namespace change that orphaned the
//! objects, so nothing leaks across crashes: after a restart the worker simply replays
//! every record left (destroys are idempotent). A record is acted on only once that
//! transaction is durable (see `commit.rs`), so no crash brings back a file whose objects
//! are gone. An OST that fails is retried with
//! exponential backoff, per OST, without holding up the others.

use crate::commit::WriteOp;
use crate::error::StoreError;
use crate::mdt::Mdt;
use crate::store::{self, DestroyRecord};
use redb::ReadableDatabase;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio::time::Instant;

/// Records loaded per round.
const RECORDS_PER_ROUND: usize = 1024;

/// Tuning of the destroy worker.
#[derive(Debug, Clone, Copy)]
pub struct DestroyConfig {
    /// First retry delay after an OST fails.
    pub retry_min: Duration,
    /// Longest retry delay.
    pub retry_max: Duration,
    /// Most destroys in flight at once.
    pub concurrency: usize,
}

impl Default for DestroyConfig {
    fn default() -> Self {
        Self {
            retry_min: Duration::from_millis(200),
            retry_max: Duration::from_secs(30),
            concurrency: 64,
        }
    }
}

struct Backoff {
    retry_at: Instant,
    delay: Duration,
}

/// Loads up to [`RECORDS_PER_ROUND`] records with sequence at least `from` and below
/// `durable` (records of later unlinks are not durable yet: a power failure could bring
/// their files back).
pub(crate) fn load_records(
    db: &redb::Database,
    from: u64,
    durable: u64,
) -> Result<Vec<(u64, DestroyRecord)>, StoreError> {
    let r = db.begin_read()?;
    let t = r.open_table(store::DESTROY_LOG)?;
    let mut out = Vec::new();
    if from >= durable {
        return Ok(out);
    }
    let range = from.to_be_bytes();
    let end = durable.to_be_bytes();
    for item in t.range::<&[u8]>(range.as_slice()..end.as_slice())? {
        let (k, v) = item?;
        let mut b = [0u8; 8];
        if k.value().len() == 8 {
            b.copy_from_slice(k.value());
        }
        out.push((
            u64::from_be_bytes(b),
            store::decode("destroy_log", v.value())?,
        ));
        if out.len() >= RECORDS_PER_ROUND {
            break;
        }
    }
    Ok(out)
}

/// Runs until the MDT is dropped or the task is aborted.
pub(crate) async fn run(mdt: Weak<Mdt>, wake: Arc<Notify>, cfg: DestroyConfig) {
    let mut backoff: HashMap<u32, Backoff> = HashMap::new();
    let mut confirmed: HashSet<(u64, usize)> = HashSet::new();
    let mut cursor = 0u64;
    loop {
        let Some(m) = mdt.upgrade() else { return };
        let db = m.db();
        let from = cursor;
        let durable = m.durable_destroys();
        let records =
            match tokio::task::spawn_blocking(move || load_records(&db, from, durable)).await {
                Ok(Ok(r)) => r,
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "reading the destroy log failed");
                    drop(m);
                    tokio::time::sleep(cfg.retry_max).await;
                    continue;
                }
                Err(_) => return,
            };
        cursor = match records.last() {
            Some((seq, _)) if records.len() >= RECORDS_PER_ROUND => seq.saturating_add(1),
            _ => 0,
        };
        if records.is_empty() {
            drop(m);
            if from == 0 {
                wake.notified().await;
            }
            continue;
        }
        let now = Instant::now();
        let mut set = JoinSet::new();
        let mut in_flight = 0usize;
        for (seq, rec) in &records {
            for (i, (ost, obj)) in rec.objects.iter().enumerate() {
                if confirmed.contains(&(*seq, i))
                    || backoff.get(ost).is_some_and(|b| b.retry_at > now)
                {
                    continue;
                }
                if in_flight >= cfg.concurrency {
                    if let Some(Ok(r)) = set.join_next().await {
                        settle(r, &mut confirmed, &mut backoff, &cfg);
                    }
                    in_flight -= 1;
                }
                let cluster = m.cluster();
                let (seq, ost, obj) = (*seq, *ost, *obj);
                set.spawn(async move { (seq, i, ost, cluster.destroy_object(ost, obj).await) });
                in_flight += 1;
            }
        }
        while let Some(r) = set.join_next().await {
            if let Ok(r) = r {
                settle(r, &mut confirmed, &mut backoff, &cfg);
            }
        }
        let done: Vec<u64> = records
            .iter()
            .filter(|(seq, rec)| (0..rec.objects.len()).all(|i| confirmed.contains(&(*seq, i))))
            .map(|(seq, _)| *seq)
            .collect();
        if !done.is_empty() {
            match m.submit_internal(WriteOp::DestroyDone(done.clone())).await {
                Ok(()) => confirmed.retain(|(seq, _)| !done.contains(seq)),
                Err(e) => tracing::warn!(error = %e, "clearing destroy-log records failed"),
            }
        }
        let pending = records.len() > done.len();
        drop(m);
        if pending && cursor == 0 {
            let next = backoff.values().map(|b| b.retry_at).min();
            let until = next
                .unwrap_or_else(|| Instant::now() + cfg.retry_min)
                .max(Instant::now());
            tokio::select! {
                _ = tokio::time::sleep_until(until) => {}
                _ = wake.notified() => {}
            }
        }
    }
}

fn settle(
    (seq, i, ost, result): (u64, usize, u32, Result<(), String>),
    confirmed: &mut HashSet<(u64, usize)>,
    backoff: &mut HashMap<u32, Backoff>,
    cfg: &DestroyConfig,
) {
    match result {
        Ok(()) => {
            confirmed.insert((seq, i));
            backoff.remove(&ost);
        }
        Err(e) => {
            let delay = backoff
                .get(&ost)
                .map(|b| (b.delay * 2).min(cfg.retry_max))
                .unwrap_or(cfg.retry_min);
            tracing::debug!(ost, error = %e, ?delay, "object destroy failed; will retry");
            backoff.insert(
                ost,
                Backoff {
                    retry_at: Instant::now() + delay,
                    delay,
                },
            );
        }
    }
}
