//! A mounted client's own figures, declared once: [`LLITE_STATS`] and [`STATAHEAD_STATS`]
//! name each figure for `get_param` (`llite.INSTANCE.stats`, `.statahead_stats`) and for
//! Prometheus (`weft_client_*`), and [`families`] and the `*_text` functions read them.

use crate::metrics::{Family, request_families};
use std::fmt::Write as _;
use std::path::Path;
use weft_proto::handshake::ServiceStats;
use weft_rpc::metric::{MetricDef, MetricKind, Stat};

/// Prefix of a client's families.
pub const PREFIX: &str = "weft_client";

/// A snapshot of a client's cache and statahead figures.
#[derive(Debug, Clone, Copy, Default)]
pub struct ClientFigures {
    /// File data in the cache.
    pub cached_bytes: u64,
    /// Data written and not yet sent.
    pub dirty_bytes: u64,
    /// Statahead's counters.
    pub statahead: weft_client::statahead::StataheadStats,
}

/// The figures of `llite.INSTANCE.stats` (after its `mountpoint` line).
pub const LLITE_STATS: [Stat<ClientFigures>; 2] = [
    Stat::new(
        MetricDef::new(
            "cached_bytes",
            "File data in the client's cache.",
            MetricKind::Gauge,
        ),
        |f| f.cached_bytes,
    ),
    Stat::new(
        MetricDef::new(
            "dirty_bytes",
            "Data written and not yet sent to the OSTs.",
            MetricKind::Gauge,
        ),
        |f| f.dirty_bytes,
    ),
];

/// The figures of `llite.INSTANCE.statahead_stats`.
pub const STATAHEAD_STATS: [Stat<ClientFigures>; 4] = [
    Stat::new(
        MetricDef::new(
            "hits",
            "Lookups answered from statahead.",
            MetricKind::Counter,
        )
        .exported_as("statahead_hits"),
        |f| f.statahead.hits,
    ),
    Stat::new(
        MetricDef::new(
            "scans",
            "Directories read ahead of lookups.",
            MetricKind::Counter,
        )
        .exported_as("statahead_scans"),
        |f| f.statahead.scans,
    ),
    Stat::new(
        MetricDef::new(
            "entries",
            "Entries statahead scans brought in.",
            MetricKind::Counter,
        )
        .exported_as("statahead_entries"),
        |f| f.statahead.entries,
    ),
    Stat::new(
        MetricDef::new(
            "restores_ahead",
            "Released files restored ahead of their opens (llite.*.restore_ahead).",
            MetricKind::Counter,
        )
        .exported_as("statahead_restores_ahead"),
        |f| f.statahead.restores_ahead,
    ),
];

/// The client's knobs (`osc.*`, `llite.*`), one sample per parameter name.
pub const PARAM: MetricDef = MetricDef::new(
    "param",
    "The client's tunables (osc.*, llite.*).",
    MetricKind::Gauge,
);

/// Lustre's `name value` lines of `table`, after a leading newline and `head`.
fn text(head: &str, table: &[Stat<ClientFigures>], figures: &ClientFigures) -> String {
    let mut out = format!("\n{head}");
    for (def, v) in weft_rpc::metric::values(table, figures) {
        let _ = writeln!(out, "{:<16} {v}", def.param);
    }
    out
}

/// The value of `llite.INSTANCE.stats`.
pub fn llite_text(mountpoint: &Path, figures: &ClientFigures) -> String {
    let head = format!("{:<16} {}\n", "mountpoint", mountpoint.display());
    text(&head, &LLITE_STATS, figures)
}

/// The value of `llite.INSTANCE.statahead_stats`.
pub fn statahead_text(figures: &ClientFigures) -> String {
    text("", &STATAHEAD_STATS, figures)
}

/// Every Prometheus family of client `instance`: its requests to each target in
/// `targets`, its knobs `params` and its figures.
pub fn families(
    instance: &str,
    targets: &[ServiceStats],
    params: &[(String, u64)],
    figures: &ClientFigures,
) -> Vec<Family> {
    let mut out = request_families(PREFIX, targets);
    let mut knobs = Family::new(PREFIX, &PARAM);
    for (name, value) in params {
        knobs.push(
            vec![("client", instance.to_string()), ("name", name.clone())],
            *value,
        );
    }
    out.push(knobs);
    for stat in LLITE_STATS.iter().chain(&STATAHEAD_STATS) {
        let mut f = Family::new(PREFIX, &stat.def);
        f.push(vec![("client", instance.to_string())], (stat.get)(figures));
        out.push(f);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use weft_rpc::metric::REQUEST_METRICS;

    #[test]
    fn a_client_exposes_exactly_the_declared_families_and_lists_them() {
        let figures = ClientFigures {
            cached_bytes: 5,
            dirty_bytes: 6,
            statahead: weft_client::statahead::StataheadStats {
                hits: 1,
                scans: 2,
                entries: 3,
                restores_ahead: 4,
            },
        };
        let params = [("llite.x.max_cached_mb".to_string(), 7)];
        let text = crate::metrics::encode(families("x", &[], &params, &figures));
        let exposed: BTreeSet<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        let mut want: BTreeSet<String> = REQUEST_METRICS.iter().map(|d| d.family(PREFIX)).collect();
        want.insert(PARAM.family(PREFIX));
        want.extend(
            LLITE_STATS
                .iter()
                .chain(&STATAHEAD_STATS)
                .map(|s| s.def.family(PREFIX)),
        );
        assert_eq!(
            exposed,
            want.iter().map(String::as_str).collect::<BTreeSet<_>>(),
            "{text}"
        );
        for sample in [
            "weft_client_cached_bytes{client=\"x\"} 5",
            "weft_client_dirty_bytes{client=\"x\"} 6",
            "weft_client_statahead_hits_total{client=\"x\"} 1",
            "weft_client_statahead_entries_total{client=\"x\"} 3",
            "weft_client_param{client=\"x\",name=\"llite.x.max_cached_mb\"} 7",
        ] {
            assert!(text.contains(sample), "{sample} in {text}");
        }

        // get_param shows the same figures under their own names, in Lustre's layout.
        assert_eq!(
            llite_text(Path::new("/mnt/w"), &figures),
            "\nmountpoint       /mnt/w\ncached_bytes     5\ndirty_bytes      6\n"
        );
        assert_eq!(
            statahead_text(&figures),
            "\nhits             1\nscans            2\nentries          3\nrestores_ahead   4\n"
        );
    }
}
