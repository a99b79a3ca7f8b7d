//! The MDT's figures: [`MdtStats`] and [`MDT_STATS`], the one table that names each of
//! them (its `get_param` name, its Prometheus name, help text and kind), read by the
//! service's STATS counters and by the Prometheus endpoint.

use weft_rpc::metric::{MetricDef, Stat};

/// Counters for `get_param` and monitoring.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MdtStats {
    /// Directories stored (including unlinked ones still open).
    pub dirs: u64,
    /// Other inodes stored (including unlinked ones still open).
    pub files: u64,
    /// Unlinked inodes kept alive by open handles.
    pub orphans: u64,
    /// Destroy-log records not yet confirmed by every OST.
    pub pending_destroys: u64,
    /// Open handles.
    pub open_handles: u64,
    /// Write transactions committed since start.
    pub commits: u64,
    /// Of those, the ones made durable with an fsync (the others were held by the redo
    /// log until the next one), plus empty commits that made earlier ones durable.
    pub durable_commits: u64,
    /// Operations handled by the commit thread since start.
    pub write_ops: u64,
    /// Replies recorded since start, for numbered requests to answer a resend with
    /// (none for requests that came in-process: they are never resent).
    pub reply_records: u64,
    /// Opens and closes answered without the commit thread since start (they changed
    /// nothing stored).
    pub fast_ops: u64,
    /// File locks held now (records after merging).
    pub locks_held: u64,
    /// Blocking lock requests waiting now.
    pub lock_waiters: u64,
    /// Lock requests granted since start.
    pub lock_grants: u64,
    /// Blocking lock requests that had to wait, since start.
    pub lock_waits: u64,
    /// Lock requests that met a conflicting lock, since start.
    pub lock_conflicts: u64,
    /// Lock waits refused with EDEADLK, since start.
    pub lock_deadlocks: u64,
    /// Entries `ImportEntries` was asked to import, since start.
    pub hsm_import_entries: u64,
    /// Of those, the ones that made or updated a file.
    pub hsm_imported: u64,
    /// HSM restore jobs started, since start.
    pub hsm_restores_started: u64,
    /// HSM restore jobs that loaded their whole file.
    pub hsm_restores_done: u64,
    /// HSM restore jobs that failed.
    pub hsm_restores_failed: u64,
    /// Bytes restored from data repositories, since start.
    pub hsm_restore_bytes: u64,
}

/// Every figure of [`MdtStats`], in the order `get_param` has always listed them.
/// Prometheus exports each as `weft_mdt_` + its metric name (`_total` for counters).
pub const MDT_STATS: [Stat<MdtStats>; 22] = [
    Stat::new(
        MetricDef::gauge("dirs", "Directories stored.").exported_as("directories"),
        |s| s.dirs,
    ),
    Stat::new(
        MetricDef::gauge("files", "Non-directory inodes stored."),
        |s| s.files,
    ),
    Stat::new(
        MetricDef::gauge("orphans", "Unlinked inodes kept alive by open handles."),
        |s| s.orphans,
    ),
    Stat::new(
        MetricDef::gauge(
            "pending_destroys",
            "Destroy-log records not yet confirmed by every OST.",
        ),
        |s| s.pending_destroys,
    ),
    Stat::new(
        MetricDef::gauge("open_handles", "Open file handles."),
        |s| s.open_handles,
    ),
    Stat::new(
        MetricDef::counter("commits", "Write transactions committed."),
        |s| s.commits,
    ),
    Stat::new(
        MetricDef::counter("durable_commits", "Commits made durable with an fsync."),
        |s| s.durable_commits,
    ),
    Stat::new(
        MetricDef::counter("write_ops", "Operations applied by the commit thread."),
        |s| s.write_ops,
    ),
    Stat::new(
        MetricDef::counter(
            "fast_ops",
            "Opens and closes answered without the commit thread.",
        ),
        |s| s.fast_ops,
    ),
    Stat::new(
        MetricDef::counter(
            "reply_records",
            "Replies recorded for numbered (resendable) requests.",
        ),
        |s| s.reply_records,
    ),
    Stat::new(
        MetricDef::gauge("locks_held", "File locks held (records after merging)."),
        |s| s.locks_held,
    ),
    Stat::new(
        MetricDef::gauge("lock_waiters", "Blocking lock requests waiting."),
        |s| s.lock_waiters,
    ),
    Stat::new(
        MetricDef::counter("lock_grants", "File locks granted."),
        |s| s.lock_grants,
    ),
    Stat::new(
        MetricDef::counter("lock_waits", "Blocking lock requests that had to wait."),
        |s| s.lock_waits,
    ),
    Stat::new(
        MetricDef::counter(
            "lock_conflicts",
            "Lock requests that met a conflicting lock.",
        ),
        |s| s.lock_conflicts,
    ),
    Stat::new(
        MetricDef::counter("lock_deadlocks", "Lock waits refused with EDEADLK."),
        |s| s.lock_deadlocks,
    ),
    Stat::new(
        MetricDef::counter(
            "hsm_import_entries",
            "Entries asked to be imported from data repositories.",
        ),
        |s| s.hsm_import_entries,
    ),
    Stat::new(
        MetricDef::counter(
            "hsm_imported",
            "Imported entries that made or updated a file.",
        ),
        |s| s.hsm_imported,
    ),
    Stat::new(
        MetricDef::counter("hsm_restores_started", "HSM restore jobs started."),
        |s| s.hsm_restores_started,
    ),
    Stat::new(
        MetricDef::counter(
            "hsm_restores_done",
            "HSM restore jobs that loaded their whole file.",
        ),
        |s| s.hsm_restores_done,
    ),
    Stat::new(
        MetricDef::counter("hsm_restores_failed", "HSM restore jobs that failed."),
        |s| s.hsm_restores_failed,
    ),
    Stat::new(
        MetricDef::counter(
            "hsm_restore_bytes",
            "Bytes restored from data repositories.",
        ),
        |s| s.hsm_restore_bytes,
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_is_declared_once_and_read_from_itself() {
        // Distinct values per field: a getter reading the wrong field shows.
        let s = MdtStats {
            dirs: 1,
            files: 2,
            orphans: 3,
            pending_destroys: 4,
            open_handles: 5,
            commits: 6,
            durable_commits: 7,
            write_ops: 8,
            reply_records: 9,
            fast_ops: 10,
            locks_held: 11,
            lock_waiters: 12,
            lock_grants: 13,
            lock_waits: 14,
            lock_conflicts: 15,
            lock_deadlocks: 16,
            hsm_import_entries: 17,
            hsm_imported: 18,
            hsm_restores_started: 19,
            hsm_restores_done: 20,
            hsm_restores_failed: 21,
            hsm_restore_bytes: 22,
        };
        let got: Vec<_> = weft_rpc::metric::values(&MDT_STATS, &s)
            .map(|(d, v)| (d.param, v))
            .collect();
        assert_eq!(
            got,
            [
                ("dirs", 1),
                ("files", 2),
                ("orphans", 3),
                ("pending_destroys", 4),
                ("open_handles", 5),
                ("commits", 6),
                ("durable_commits", 7),
                ("write_ops", 8),
                ("fast_ops", 10),
                ("reply_records", 9),
                ("locks_held", 11),
                ("lock_waiters", 12),
                ("lock_grants", 13),
                ("lock_waits", 14),
                ("lock_conflicts", 15),
                ("lock_deadlocks", 16),
                ("hsm_import_entries", 17),
                ("hsm_imported", 18),
                ("hsm_restores_started", 19),
                ("hsm_restores_done", 20),
                ("hsm_restores_failed", 21),
                ("hsm_restore_bytes", 22),
            ]
        );
    }
}
