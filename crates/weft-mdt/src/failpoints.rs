//! Fault injection for crash tests, through the `fail` crate: the MDT's failpoints, named
//! once here, and how a server process arms one.
//!
//! A multi-process test restarts an MDS with `WEFT_FAILPOINT=<point>` in its environment;
//! when the MDT opens, [`arm_from_env`] configures that point to abort the process, as a
//! `kill -9` at that instant would stop it. In-process tests may configure any point with
//! `fail::cfg` or `fail::cfg_callback` instead.
//!
//! The points are compiled into every build (the `fail` crate's `failpoints` feature is on
//! in the workspace): the crash tests run the ordinary server binary, and each point sits
//! on a cross-MDT or migration path where an unarmed point (a read-locked map lookup)
//! costs nothing measurable.

/// The environment variable naming the failpoint that aborts the process.
pub const ENV: &str = "WEFT_FAILPOINT";

/// Before step 2 of a cross-MDT operation (its intent is durable, no other MDT asked).
pub const CROSS_MDT_BEFORE_REMOTE: &str = "cross_mdt.before_remote";
/// After step 2 (the other MDT answered), before step 3 finishes the intent.
pub const CROSS_MDT_BEFORE_FINISH: &str = "cross_mdt.before_finish";
/// A directory move just took the rename lock (no intent holds it yet).
pub const DIR_MOVE_LOCKED: &str = "dir_move.locked";
/// A migration copied the directory's entries to the new MDT, before its attributes.
pub const MIGRATE_COPIED: &str = "migrate.copied";
/// A migration's second phase (the name is the copy's), before the old directory goes.
pub const MIGRATE_SWITCHED: &str = "migrate.switched";

/// Every failpoint of the MDT.
pub const ALL: [&str; 5] = [
    CROSS_MDT_BEFORE_REMOTE,
    CROSS_MDT_BEFORE_FINISH,
    DIR_MOVE_LOCKED,
    MIGRATE_COPIED,
    MIGRATE_SWITCHED,
];

/// Arms the failpoint named by [`ENV`], if set, to abort the process when reached.
pub fn arm_from_env() {
    let Ok(point) = std::env::var(ENV) else {
        return;
    };
    if !ALL.contains(&point.as_str()) {
        tracing::warn!(point, "{ENV} names no failpoint of the MDT");
    }
    let name = point.clone();
    let armed = fail::cfg_callback(point, move || {
        tracing::error!(point = %name, "failpoint reached: aborting");
        std::process::abort();
    });
    if let Err(e) = armed {
        tracing::warn!(error = %e, "{ENV} could not be armed");
    }
}

/// Failpoint `point`: does what it is configured to do (nothing unless armed).
pub(crate) fn hit(point: &'static str) {
    fail::fail_point!(point);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn a_configured_point_runs_its_action_where_it_is_hit() {
        let hits = Arc::new(AtomicU32::new(0));
        let seen = hits.clone();
        fail::cfg_callback(MIGRATE_SWITCHED, move || {
            seen.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
        hit(MIGRATE_COPIED);
        hit(MIGRATE_SWITCHED);
        fail::remove(MIGRATE_SWITCHED);
        hit(MIGRATE_SWITCHED);
        assert_eq!(hits.load(Ordering::SeqCst), 1);
    }
}
