//! Declarations of the figures a role reports: each one's name, help text and kind,
//! written once and read by the stats structs, by `get_param`'s listing and by the
//! Prometheus endpoint, so the three cannot drift apart.
//!
//! A role keeps a table of [`Stat`]s beside its stats struct (e.g. `weft_mdt::MDT_STATS`);
//! the request statistics every service keeps are declared here ([`REQUEST_METRICS`],
//! [`JOB_METRICS`]).

use weft_proto::handshake::Counter;

/// What kind of figure a metric is, as Prometheus types it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// Only grows while the process runs (Prometheus adds `_total` to its samples).
    Counter,
    /// Goes up and down: a level now.
    Gauge,
    /// Latency buckets with a sum and a count.
    Histogram,
}

/// One figure's declaration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricDef {
    /// Its `get_param` name (and the counter name in a STATS reply).
    pub param: &'static str,
    /// Its Prometheus family name after the role's prefix (`weft_mdt_` + this), without
    /// the `_total` a counter's samples get.
    pub metric: &'static str,
    /// One sentence for Prometheus' `# HELP`.
    pub help: &'static str,
    /// Counter, gauge or histogram.
    pub kind: MetricKind,
}

impl MetricDef {
    /// A figure whose `get_param` and Prometheus names are the same.
    pub const fn new(name: &'static str, help: &'static str, kind: MetricKind) -> Self {
        Self {
            param: name,
            metric: name,
            help,
            kind,
        }
    }

    /// A counter named `name`.
    pub const fn counter(name: &'static str, help: &'static str) -> Self {
        Self::new(name, help, MetricKind::Counter)
    }

    /// A gauge named `name`.
    pub const fn gauge(name: &'static str, help: &'static str) -> Self {
        Self::new(name, help, MetricKind::Gauge)
    }

    /// The same figure named `metric` for Prometheus.
    pub const fn exported_as(self, metric: &'static str) -> Self {
        Self { metric, ..self }
    }

    /// The Prometheus family name under `prefix` (e.g. `weft_mdt`).
    pub fn family(&self, prefix: &str) -> String {
        format!("{prefix}_{}", self.metric)
    }

    /// The names the family's samples carry: `_total` for a counter, `_bucket`, `_sum`
    /// and `_count` for a histogram, the family name for a gauge.
    pub fn sample_names(&self, prefix: &str) -> Vec<String> {
        let family = self.family(prefix);
        match self.kind {
            MetricKind::Counter => vec![format!("{family}_total")],
            MetricKind::Gauge => vec![family],
            MetricKind::Histogram => ["bucket", "sum", "count"]
                .iter()
                .map(|s| format!("{family}_{s}"))
                .collect(),
        }
    }
}

/// A declared figure and how to read it from a stats snapshot `S`.
#[derive(Debug)]
pub struct Stat<S> {
    /// The declaration.
    pub def: MetricDef,
    /// Reads the figure.
    pub get: fn(&S) -> u64,
}

impl<S> Stat<S> {
    /// `def`, read with `get`.
    pub const fn new(def: MetricDef, get: fn(&S) -> u64) -> Self {
        Self { def, get }
    }
}

/// Every figure of `table` read from `stats`, in the table's order.
pub fn values<'a, S>(
    table: &'a [Stat<S>],
    stats: &'a S,
) -> impl Iterator<Item = (&'a MetricDef, u64)> + 'a {
    table.iter().map(move |s| (&s.def, (s.get)(stats)))
}

/// Every figure of `table` read from `stats`, as the counters of a STATS reply (which
/// `get_param` lists by their `param` names).
pub fn counters<S>(table: &[Stat<S>], stats: &S) -> Vec<Counter> {
    values(table, stats)
        .map(|(def, value)| Counter {
            name: def.param.to_string(),
            value,
        })
        .collect()
}

/// Request statistics every service keeps, by target and operation (Prometheus only:
/// `get_param` shows them as the `stats` / `md_stats` tables). A mounted client reports
/// the same families under its own prefix, timing the wait for each reply.
pub const REQUEST_METRICS: [MetricDef; 4] = [
    MetricDef::new(
        "requests",
        "Requests, by target and operation.",
        MetricKind::Counter,
    ),
    MetricDef::new(
        "request_errors",
        "Requests answered with an error.",
        MetricKind::Counter,
    ),
    MetricDef::new(
        "request_bulk_bytes",
        "Bulk bytes received and sent.",
        MetricKind::Counter,
    ),
    MetricDef::new(
        "request_duration_seconds",
        "Time to handle a request.",
        MetricKind::Histogram,
    ),
];

/// Per-job request statistics of a server (`get_param`'s `job_stats`).
pub const JOB_METRICS: [MetricDef; 2] = [
    MetricDef::new(
        "job_requests",
        "Requests by job id (jobs seen in the last 10 minutes).",
        MetricKind::Counter,
    ),
    MetricDef::new(
        "job_bulk_bytes",
        "Bulk bytes by job id.",
        MetricKind::Counter,
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Figures {
        a: u64,
        b: u64,
    }

    const TABLE: [Stat<Figures>; 2] = [
        Stat::new(MetricDef::new("a", "A.", MetricKind::Gauge), |f| f.a),
        Stat::new(
            MetricDef::new("b", "B.", MetricKind::Counter).exported_as("bees"),
            |f| f.b,
        ),
    ];

    #[test]
    fn tables_read_their_figures_under_their_names() {
        let f = Figures { a: 3, b: 4 };
        let c = counters(&TABLE, &f);
        assert_eq!(
            c.iter()
                .map(|c| (c.name.as_str(), c.value))
                .collect::<Vec<_>>(),
            [("a", 3), ("b", 4)]
        );
        assert_eq!(TABLE[1].def.family("x"), "x_bees");
        assert_eq!(TABLE[1].def.sample_names("x"), ["x_bees_total"]);
        assert_eq!(TABLE[0].def.sample_names("x"), ["x_a"]);
        assert_eq!(Figures::default().a, 0);
    }
}
