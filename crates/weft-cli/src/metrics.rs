//! The Prometheus endpoint every server offers with `--metrics HOST:PORT`: per-operation
//! request counts, errors, bulk bytes and latency histograms of every target the process
//! serves, plus MDT and OST counters and the process's authentication counts. Every family
//! is named by a declaration (`weft_rpc::metric`, `weft_mdt::stats::MDT_STATS`,
//! `weft_ost::OST_STATS`, `weft_rpc::auth::AUTH_METRICS`); the text is OpenMetrics from
//! `prometheus-client` ([`expose`]), served by hyper ([`http`]).

mod expose;
mod http;

pub use expose::{CONTENT_TYPE, Family, Sample, Value, encode, label_value};
pub use http::serve;

use std::sync::Arc;
use weft_mdt::stats::MDT_STATS;
use weft_mdt::{Mdt, MdtStats};
use weft_mgs::{MGS_STATS, Mgs};
use weft_ost::{OST_BRW, OST_STATS, Ost, OstStats};
use weft_proto::TargetId;
use weft_proto::handshake::ServiceStats;
use weft_rpc::Router;
use weft_rpc::auth::{AUTH_METRICS, AuthCounters};
use weft_rpc::metric::{JOB_METRICS, MetricDef, MetricKind, REQUEST_METRICS, Stat};

/// Prefix of a server's request and job families.
const SERVER_PREFIX: &str = "weft";
/// Prefix of MDT families.
const MDT_PREFIX: &str = "weft_mdt";
/// Prefix of OST families.
const OST_PREFIX: &str = "weft_ost";

/// Prefix of MGS families.
const MGS_PREFIX: &str = "weft_mgs";
/// Prefix of OSS (process) families.
const OSS_PREFIX: &str = "weft_oss";
/// Prefix of MDS (process) families.
const MDS_PREFIX: &str = "weft_mds";

/// A server's own figure: targets it took over from another server (failover).
const TAKEOVERS: MetricDef = MetricDef::new(
    "target_takeovers",
    "Targets this server took over from a server that died (failover).",
    MetricKind::Counter,
);

/// What a process exposes: its router's services and the targets it hosts.
pub struct Metrics {
    router: Arc<Router>,
    /// Grows when a standby MDS takes an MDT over ([`Metrics::add_mdt`]).
    mdts: parking_lot::RwLock<Vec<Arc<Mdt>>>,
    /// Grows when a standby OSS takes an OST over ([`Metrics::add_ost`]).
    osts: parking_lot::RwLock<Vec<Arc<Ost>>>,
    /// The prefix of the process's takeover count, for an OSS or MDS (failover).
    takeovers: Option<&'static str>,
    mgs: Option<Arc<Mgs>>,
}

impl Metrics {
    /// Metrics of everything `router` serves, with target counters of `mdts` and `osts`.
    pub fn new(router: Arc<Router>, mdts: Vec<Arc<Mdt>>, osts: Vec<Arc<Ost>>) -> Arc<Self> {
        Arc::new(Self {
            router,
            mdts: parking_lot::RwLock::new(mdts),
            osts: parking_lot::RwLock::new(osts),
            takeovers: None,
            mgs: None,
        })
    }

    /// Metrics of an OSS process: [`Metrics::new`] and its takeover count.
    pub fn oss(router: Arc<Router>, osts: Vec<Arc<Ost>>) -> Arc<Self> {
        Arc::new(Self {
            router,
            mdts: parking_lot::RwLock::new(Vec::new()),
            osts: parking_lot::RwLock::new(osts),
            takeovers: Some(OSS_PREFIX),
            mgs: None,
        })
    }

    /// Metrics of an MDS process: [`Metrics::new`] and its takeover count.
    pub fn mds(router: Arc<Router>, mdts: Vec<Arc<Mdt>>) -> Arc<Self> {
        Arc::new(Self {
            router,
            mdts: parking_lot::RwLock::new(mdts),
            osts: parking_lot::RwLock::new(Vec::new()),
            takeovers: Some(MDS_PREFIX),
            mgs: None,
        })
    }

    /// Metrics of an MGS process: [`Metrics::new`] and the MGS's counters.
    pub fn mgs(router: Arc<Router>, mgs: Arc<Mgs>) -> Arc<Self> {
        Arc::new(Self {
            router,
            mdts: parking_lot::RwLock::new(Vec::new()),
            osts: parking_lot::RwLock::new(Vec::new()),
            takeovers: None,
            mgs: Some(mgs),
        })
    }

    /// Adds the counters of an OST the process started serving later (taken over).
    pub fn add_ost(&self, ost: Arc<Ost>) {
        self.osts.write().push(ost);
    }

    /// Adds the counters of an MDT the process started serving later (taken over).
    pub fn add_mdt(&self, mdt: Arc<Mdt>) {
        self.mdts.write().push(mdt);
    }

    /// The current figures in the OpenMetrics text format.
    pub fn render(&self) -> String {
        let stats: Vec<ServiceStats> = self
            .router
            .targets()
            .into_iter()
            .filter_map(|t| self.router.get(t))
            .map(|s| s.stats())
            .collect();
        let mdts: Vec<_> = self
            .mdts
            .read()
            .iter()
            .map(|m| (TargetId::mdt(m.index()), m.stats()))
            .collect();
        let osts: Vec<_> = self
            .osts
            .read()
            .iter()
            .map(|o| (TargetId::ost(o.index()), o.stats()))
            .collect();
        let mut families = server_families(&stats, &mdts, &osts);
        let views: Vec<_> = self
            .mdts
            .read()
            .iter()
            .map(|m| (TargetId::mdt(m.index()), m.view_counters()))
            .collect();
        families.extend(view_families(&views));
        if let Some(prefix) = self.takeovers {
            let mut f = Family::new(prefix, &TAKEOVERS);
            f.push(
                Vec::new(),
                crate::roles::TAKEOVERS.load(std::sync::atomic::Ordering::Relaxed),
            );
            families.push(f);
        }
        if let Some(mgs) = &self.mgs {
            let stats = mgs.stats();
            for stat in &MGS_STATS {
                let mut f = Family::new(MGS_PREFIX, &stat.def);
                f.push(Vec::new(), (stat.get)(&stats));
                families.push(f);
            }
        }
        encode(families)
    }
}

/// Every family of a server hosting the services of `stats` and the targets `mdts` and
/// `osts` (MDT and OST families only when it hosts any).
pub fn server_families(
    stats: &[ServiceStats],
    mdts: &[(TargetId, MdtStats)],
    osts: &[(TargetId, OstStats)],
) -> Vec<Family> {
    let mut out = request_families(SERVER_PREFIX, stats);
    out.extend(job_families(stats));
    out.extend(auth_families(&weft_rpc::auth::COUNTERS));
    if !mdts.is_empty() {
        out.extend(target_families(MDT_PREFIX, &MDT_STATS, mdts));
    }
    if !osts.is_empty() {
        out.extend(target_families(OST_PREFIX, &OST_STATS, osts));
        let mut brw = Family::new(OST_PREFIX, &OST_BRW);
        for (t, s) in osts {
            for b in &s.brw {
                for (dir, n) in [("read", b.reads), ("write", b.writes)] {
                    let labels = vec![
                        ("target", t.to_string()),
                        ("direction", dir.to_string()),
                        ("max_bytes", b.max_bytes.to_string()),
                    ];
                    brw.push(labels, n);
                }
            }
        }
        out.push(brw);
    }
    out
}

/// The families of the work done for MDTs outside them (the data mover's and the
/// repository agent's counters, `weft_mdt_mover_*` and `weft_mdt_repo_agent_*`): one per
/// declared figure some MDT reports, a sample per MDT that reports it.
fn view_families(views: &[(TargetId, Vec<weft_proto::handshake::Counter>)]) -> Vec<Family> {
    let defs = weft_repo::mover::MOVER_STATS
        .iter()
        .map(|s| s.def)
        .chain(weft_repo::agent::AGENT_STATS.iter().map(|s| s.def));
    defs.filter_map(|def| {
        let mut f = Family::new(MDT_PREFIX, &def);
        for (t, counters) in views {
            if let Some(c) = counters.iter().find(|c| c.name == def.param) {
                f.push(vec![("target", t.to_string())], c.value);
            }
        }
        (!f.samples.is_empty()).then_some(f)
    })
    .collect()
}

/// One family per figure of `table`, with a sample per target.
fn target_families<S>(prefix: &str, table: &[Stat<S>], targets: &[(TargetId, S)]) -> Vec<Family> {
    table
        .iter()
        .map(|stat| {
            let mut f = Family::new(prefix, &stat.def);
            for (t, s) in targets {
                f.push(vec![("target", t.to_string())], (stat.get)(s));
            }
            f
        })
        .collect()
}

/// The process's authentication counts (every server of the process counts into one).
fn auth_families(counters: &AuthCounters) -> Vec<Family> {
    AUTH_METRICS
        .iter()
        .map(|stat| {
            let mut f = Family::new(SERVER_PREFIX, &stat.def);
            f.push(Vec::new(), (stat.get)(counters));
            f
        })
        .collect()
}

fn job_families(stats: &[ServiceStats]) -> Vec<Family> {
    let reads: [fn(&weft_proto::handshake::OpStats) -> u64; 2] = [|o| o.count, |o| o.bulk_bytes];
    JOB_METRICS
        .iter()
        .zip(reads)
        .map(|(def, get)| {
            let mut f = Family::new(SERVER_PREFIX, def);
            for s in stats {
                let t = s.target.map(|t| t.to_string()).unwrap_or_default();
                for j in &s.jobs {
                    for op in &j.ops {
                        let labels = vec![
                            ("target", t.clone()),
                            ("job", label_value(&j.jobid)),
                            ("op", label_value(&op.name)),
                        ];
                        f.push(labels, get(op));
                    }
                }
            }
            f
        })
        .collect()
}

/// Request counters and latency histograms of `stats`, as the [`REQUEST_METRICS`]
/// families under `prefix` (servers use `weft`; a mounted client `weft_client`, whose
/// durations are the time each request waited for its reply).
pub fn request_families(prefix: &str, stats: &[ServiceStats]) -> Vec<Family> {
    let reads: [fn(&weft_proto::handshake::OpStats) -> u64; 3] =
        [|o| o.count, |o| o.errors, |o| o.bulk_bytes];
    let mut out: Vec<Family> = REQUEST_METRICS
        .iter()
        .map(|def| Family::new(prefix, def))
        .collect();
    for s in stats {
        let t = s.target.map(|t| t.to_string()).unwrap_or_default();
        for op in &s.ops {
            let labels = vec![("target", t.clone()), ("op", label_value(&op.name))];
            for (f, get) in out.iter_mut().zip(reads) {
                f.push(labels.clone(), get(op));
            }
            // Bucket i counts requests faster than 2^i microseconds; the last one holds
            // everything slower and becomes +Inf.
            let last = op.buckets.len().saturating_sub(1);
            let buckets = op
                .buckets
                .iter()
                .enumerate()
                .map(|(i, n)| {
                    let le = if i == last {
                        f64::INFINITY
                    } else {
                        (1u64 << i) as f64 / 1e6
                    };
                    (le, *n)
                })
                .collect();
            if let Some(hist) = out.iter_mut().find(|f| f.def.kind == MetricKind::Histogram) {
                hist.samples.push(Sample {
                    labels,
                    value: Value::Histogram {
                        sum: op.sum_us as f64 / 1e6,
                        count: op.count,
                        buckets,
                    },
                });
            }
        }
    }
    out
}

/// Anything that renders figures in the Prometheus text format.
pub trait Render: Send + Sync + 'static {
    /// The current figures.
    fn render(&self) -> String;
}

impl Render for Metrics {
    fn render(&self) -> String {
        Metrics::render(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use weft_proto::handshake::{JobStats, OpStats};

    /// The family names of the `# TYPE` lines of `text`.
    pub(crate) fn exposed(text: &str) -> BTreeSet<String> {
        text.lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split_whitespace().next())
            .map(str::to_string)
            .collect()
    }

    fn op(name: &str) -> OpStats {
        OpStats {
            name: name.into(),
            count: 2,
            errors: 1,
            sum_us: 30,
            bulk_bytes: 4096,
            buckets: vec![0, 1, 1],
        }
    }

    #[test]
    fn the_mover_and_agent_counters_are_exposed_under_the_mdts_that_report_them() {
        use weft_repo::agent::{AGENT_STATS, AgentStats};
        use weft_repo::mover::{MOVER_STATS, MoverStats};
        let mover = MoverStats {
            chunks: 3,
            ..Default::default()
        };
        let agent = AgentStats {
            events: 7,
            ..Default::default()
        };
        let mut mdt0 = weft_rpc::metric::counters(&MOVER_STATS, &mover);
        mdt0.extend(weft_rpc::metric::counters(&AGENT_STATS, &agent));
        let mdt1 = weft_rpc::metric::counters(&MOVER_STATS, &MoverStats::default());
        let views = [(TargetId::mdt(0), mdt0), (TargetId::mdt(1), mdt1)];
        let text = encode(view_families(&views));
        let want: BTreeSet<String> = MOVER_STATS
            .iter()
            .map(|s| s.def.family(MDT_PREFIX))
            .chain(AGENT_STATS.iter().map(|s| s.def.family(MDT_PREFIX)))
            .collect();
        assert_eq!(exposed(&text), want, "{text}");
        assert!(
            text.contains("weft_mdt_mover_chunks_total{target=\"MDT0000\"} 3"),
            "{text}"
        );
        assert!(
            text.contains("weft_mdt_mover_chunks_total{target=\"MDT0001\"} 0"),
            "{text}"
        );
        assert!(
            text.contains("weft_mdt_repo_agent_events_total{target=\"MDT0000\"} 7"),
            "{text}"
        );
        assert!(
            !text.contains("weft_mdt_repo_agent_events_total{target=\"MDT0001\"}"),
            "{text}"
        );
        // Nothing reported, nothing exposed.
        assert!(view_families(&[(TargetId::mdt(0), Vec::new())]).is_empty());
    }

    #[test]
    fn a_server_exposes_exactly_the_declared_families_and_get_param_lists_them() {
        let stats = vec![ServiceStats {
            target: Some(TargetId::mdt(0)),
            ops: vec![op("create")],
            counters: weft_rpc::metric::counters(&MDT_STATS, &MdtStats::default()),
            jobs: vec![JobStats {
                jobid: "j.1".into(),
                snapshot_time: 0,
                start_time: 0,
                ops: vec![op("mkdir")],
            }],
        }];
        let mdts = [(TargetId::mdt(0), MdtStats::default())];
        let osts = [(TargetId::ost(0), OstStats::default())];
        let text = encode(server_families(&stats, &mdts, &osts));
        let mut want: BTreeSet<String> = REQUEST_METRICS
            .iter()
            .chain(&JOB_METRICS)
            .map(|d| d.family(SERVER_PREFIX))
            .collect();
        want.extend(MDT_STATS.iter().map(|s| s.def.family(MDT_PREFIX)));
        want.extend(OST_STATS.iter().map(|s| s.def.family(OST_PREFIX)));
        want.insert(OST_BRW.family(OST_PREFIX));
        want.extend(AUTH_METRICS.iter().map(|s| s.def.family(SERVER_PREFIX)));
        assert_eq!(exposed(&text), want, "{text}");
        // The names servers have always exported (the dashboard and scrapers use them).
        for name in [
            "weft_requests_total",
            "weft_request_duration_seconds_bucket",
            "weft_job_requests_total",
            "weft_mdt_directories",
            "weft_mdt_commits_total",
            "weft_ost_write_bytes_total",
        ] {
            assert!(text.contains(&format!("\n{name}{{")), "{name} in {text}");
        }

        // get_param lists each declared MDT figure under its own name, and nothing else
        // besides the tables every target has.
        let params: BTreeSet<String> =
            crate::admin::param::target_params(weft_proto::TargetKind::Mdt, &stats[0], None)
                .into_iter()
                .map(|(n, _)| n)
                .collect();
        let mut want: BTreeSet<String> =
            MDT_STATS.iter().map(|s| s.def.param.to_string()).collect();
        want.extend(["md_stats".to_string(), "job_stats".to_string()]);
        assert_eq!(params, want);
    }
}
