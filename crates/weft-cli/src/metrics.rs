//! The Prometheus endpoint every server offers with `--metrics HOST:PORT`: per-operation
//! request counts, errors, bulk bytes and latency histograms of every target the process
//! serves, plus MDT and OST counters, in the Prometheus text format (version 0.0.4).

use anyhow::{Context, Result};
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use weft_mdt::Mdt;
use weft_ost::Ost;
use weft_proto::TargetId;
use weft_proto::handshake::ServiceStats;
use weft_rpc::Router;

/// A per-operation counter: name, help text, and how to read it.
type OpCounter = (
    &'static str,
    &'static str,
    fn(&weft_proto::handshake::OpStats) -> u64,
);

/// A gauge of MDT statistics: name, help text, and how to read it.
type Gauge = (&'static str, &'static str, fn(&weft_mdt::MdtStats) -> u64);

/// Largest HTTP request head the endpoint reads before answering.
const MAX_REQUEST: usize = 8 << 10;
/// How long a scraper may take to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// What a process exposes: its router's services and the targets it hosts.
pub struct Metrics {
    router: Arc<Router>,
    mdts: Vec<Arc<Mdt>>,
    osts: Vec<Arc<Ost>>,
}

impl Metrics {
    /// Metrics of everything `router` serves, with target counters of `mdts` and `osts`.
    pub fn new(router: Arc<Router>, mdts: Vec<Arc<Mdt>>, osts: Vec<Arc<Ost>>) -> Arc<Self> {
        Arc::new(Self { router, mdts, osts })
    }

    /// The current figures in the Prometheus text format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let stats: Vec<ServiceStats> = self
            .router
            .targets()
            .into_iter()
            .filter_map(|t| self.router.get(t))
            .map(|s| s.stats())
            .collect();
        render_requests("weft", &stats, &mut out);
        Self::render_jobs(&stats, &mut out);
        self.render_mdts(&mut out);
        self.render_osts(&mut out);
        out
    }

    fn render_jobs(stats: &[ServiceStats], out: &mut String) {
        let counters: [OpCounter; 2] = [
            (
                "weft_job_requests_total",
                "Requests by job id (jobs seen in the last 10 minutes).",
                |o| o.count,
            ),
            ("weft_job_bulk_bytes_total", "Bulk bytes by job id.", |o| {
                o.bulk_bytes
            }),
        ];
        for (name, help, get) in counters {
            header(out, name, "counter", help);
            for s in stats {
                for j in &s.jobs {
                    for op in &j.ops {
                        sample(
                            out,
                            name,
                            &job_labels(s.target, &j.jobid, &op.name),
                            get(op) as f64,
                        );
                    }
                }
            }
        }
    }

    fn render_mdts(&self, out: &mut String) {
        if self.mdts.is_empty() {
            return;
        }
        let stats: Vec<_> = self
            .mdts
            .iter()
            .map(|m| (TargetId::mdt(m.index()), m.stats()))
            .collect();
        let gauges: [Gauge; 7] = [
            ("weft_mdt_directories", "Directories stored.", |s| s.dirs),
            ("weft_mdt_files", "Non-directory inodes stored.", |s| {
                s.files
            }),
            (
                "weft_mdt_orphans",
                "Unlinked inodes kept alive by open handles.",
                |s| s.orphans,
            ),
            (
                "weft_mdt_pending_destroys",
                "Destroy-log records not yet confirmed by every OST.",
                |s| s.pending_destroys,
            ),
            ("weft_mdt_open_handles", "Open file handles.", |s| {
                s.open_handles
            }),
            (
                "weft_mdt_locks_held",
                "File locks held (records after merging).",
                |s| s.locks_held,
            ),
            (
                "weft_mdt_lock_waiters",
                "Blocking lock requests waiting.",
                |s| s.lock_waiters,
            ),
        ];
        for (name, help, get) in gauges {
            header(out, name, "gauge", help);
            for (t, s) in &stats {
                sample(out, name, &target_label(*t), get(s) as f64);
            }
        }
        let counters: [Gauge; 9] = [
            (
                "weft_mdt_commits_total",
                "Write transactions committed.",
                |s| s.commits,
            ),
            (
                "weft_mdt_durable_commits_total",
                "Commits made durable with an fsync.",
                |s| s.durable_commits,
            ),
            (
                "weft_mdt_write_ops_total",
                "Operations applied by the commit thread.",
                |s| s.write_ops,
            ),
            (
                "weft_mdt_fast_ops_total",
                "Opens and closes answered without the commit thread.",
                |s| s.fast_ops,
            ),
            (
                "weft_mdt_reply_records_total",
                "Replies recorded for numbered (resendable) requests.",
                |s| s.reply_records,
            ),
            ("weft_mdt_lock_grants_total", "File locks granted.", |s| {
                s.lock_grants
            }),
            (
                "weft_mdt_lock_waits_total",
                "Blocking lock requests that had to wait.",
                |s| s.lock_waits,
            ),
            (
                "weft_mdt_lock_conflicts_total",
                "Lock requests that met a conflicting lock.",
                |s| s.lock_conflicts,
            ),
            (
                "weft_mdt_lock_deadlocks_total",
                "Lock waits refused with EDEADLK.",
                |s| s.lock_deadlocks,
            ),
        ];
        for (name, help, get) in counters {
            header(out, name, "counter", help);
            for (t, s) in &stats {
                sample(out, name, &target_label(*t), get(s) as f64);
            }
        }
    }

    fn render_osts(&self, out: &mut String) {
        if self.osts.is_empty() {
            return;
        }
        let stats: Vec<_> = self
            .osts
            .iter()
            .map(|o| (TargetId::ost(o.index()), o.stats()))
            .collect();
        header(
            out,
            "weft_ost_read_bytes_total",
            "counter",
            "Bytes returned by reads.",
        );
        for (t, s) in &stats {
            sample(
                out,
                "weft_ost_read_bytes_total",
                &target_label(*t),
                s.read_bytes as f64,
            );
        }
        header(
            out,
            "weft_ost_write_bytes_total",
            "counter",
            "Bytes stored by writes.",
        );
        for (t, s) in &stats {
            sample(
                out,
                "weft_ost_write_bytes_total",
                &target_label(*t),
                s.write_bytes as f64,
            );
        }
        header(
            out,
            "weft_ost_brw_total",
            "counter",
            "Bulk reads and writes by I/O size (brw_stats).",
        );
        for (t, s) in &stats {
            for b in &s.brw {
                for (dir, n) in [("read", b.reads), ("write", b.writes)] {
                    let l = format!(
                        "target=\"{t}\",direction=\"{dir}\",max_bytes=\"{}\"",
                        b.max_bytes
                    );
                    sample(out, "weft_ost_brw_total", &l, n as f64);
                }
            }
        }
    }
}

/// Request counters and latency histograms of `stats`, as metrics named `{prefix}_requests_total`,
/// `{prefix}_request_duration_seconds`, ... (servers use `weft`; a mounted client
/// `weft_client`, whose durations are the time each request waited for its reply).
pub fn render_requests(prefix: &str, stats: &[ServiceStats], out: &mut String) {
    let counters: [OpCounter; 3] = [
        (
            "requests_total",
            "Requests, by target and operation.",
            |o| o.count,
        ),
        (
            "request_errors_total",
            "Requests answered with an error.",
            |o| o.errors,
        ),
        (
            "request_bulk_bytes_total",
            "Bulk bytes received and sent.",
            |o| o.bulk_bytes,
        ),
    ];
    for (name, help, get) in counters {
        let name = format!("{prefix}_{name}");
        header(out, &name, "counter", help);
        for s in stats {
            for op in &s.ops {
                sample(
                    out,
                    &name,
                    &labels(s.target, &op.name, None),
                    get(op) as f64,
                );
            }
        }
    }
    let hist = format!("{prefix}_request_duration_seconds");
    header(out, &hist, "histogram", "Time to handle a request.");
    for s in stats {
        for op in &s.ops {
            let mut cumulative = 0u64;
            let last = op.buckets.len().saturating_sub(1);
            for (i, n) in op.buckets.iter().enumerate() {
                cumulative += n;
                // Bucket i counts requests faster than 2^i microseconds; the last one
                // holds everything slower and becomes +Inf.
                let le = if i == last {
                    "+Inf".to_string()
                } else {
                    format!("{}", (1u64 << i) as f64 / 1e6)
                };
                let l = labels(s.target, &op.name, Some(&le));
                sample(out, &format!("{hist}_bucket"), &l, cumulative as f64);
            }
            let l = labels(s.target, &op.name, None);
            sample(out, &format!("{hist}_sum"), &l, op.sum_us as f64 / 1e6);
            sample(out, &format!("{hist}_count"), &l, op.count as f64);
        }
    }
}

pub(crate) fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

pub(crate) fn sample(out: &mut String, name: &str, labels: &str, value: f64) {
    let _ = writeln!(out, "{name}{{{labels}}} {value}");
}

fn target_label(t: TargetId) -> String {
    format!("target=\"{t}\"")
}

/// A label value with the characters the text format escapes replaced.
fn label_value(v: &str) -> String {
    v.replace(['\\', '"', '\n'], "_")
}

fn job_labels(target: Option<TargetId>, job: &str, op: &str) -> String {
    let t = target.map(|t| t.to_string()).unwrap_or_default();
    format!(
        "target=\"{t}\",job=\"{}\",op=\"{}\"",
        label_value(job),
        label_value(op)
    )
}

fn labels(target: Option<TargetId>, op: &str, le: Option<&str>) -> String {
    let t = target.map(|t| t.to_string()).unwrap_or_default();
    let op = label_value(op);
    match le {
        Some(le) => format!("target=\"{t}\",op=\"{op}\",le=\"{le}\""),
        None => format!("target=\"{t}\",op=\"{op}\""),
    }
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

/// Serves `GET /metrics` on `addr` until the returned task is aborted.
pub async fn serve<M: Render>(addr: &str, metrics: Arc<M>) -> Result<tokio::task::JoinHandle<()>> {
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen for metrics on {addr}"))?;
    tracing::info!(address = %addr, "Prometheus metrics at /metrics");
    Ok(tokio::spawn(async move {
        loop {
            match listener.accept().await {
                Ok((stream, _)) => {
                    let metrics = metrics.clone();
                    tokio::spawn(async move {
                        if let Err(e) = answer(stream, metrics.as_ref()).await {
                            tracing::debug!(error = %e, "metrics request failed");
                        }
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "metrics accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }))
}

/// Reads one HTTP request head (bounded in size and time) and answers it.
async fn answer<M: Render>(mut stream: TcpStream, metrics: &M) -> std::io::Result<()> {
    let mut buf = vec![0u8; MAX_REQUEST];
    let mut len = 0;
    let head_complete = |b: &[u8]| b.windows(4).any(|w| w == b"\r\n\r\n");
    while !head_complete(&buf[..len]) {
        if len == buf.len() {
            return respond(&mut stream, "431 Request Header Fields Too Large", "").await;
        }
        let n = match tokio::time::timeout(REQUEST_TIMEOUT, stream.read(&mut buf[len..])).await {
            Ok(r) => r?,
            Err(_) => return Ok(()),
        };
        if n == 0 {
            return Ok(());
        }
        len += n;
    }
    let head = String::from_utf8_lossy(&buf[..len]);
    let mut parts = head.split_whitespace();
    match (parts.next(), parts.next()) {
        (Some("GET"), Some("/metrics")) => respond(&mut stream, "200 OK", &metrics.render()).await,
        (Some("GET"), Some(_)) => respond(&mut stream, "404 Not Found", "try /metrics\n").await,
        _ => respond(&mut stream, "405 Method Not Allowed", "").await,
    }
}

async fn respond(stream: &mut TcpStream, status: &str, body: &str) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await
}
