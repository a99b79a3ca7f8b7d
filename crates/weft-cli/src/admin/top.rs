//! `weft top`: a live view of every target — operation rates, bulk throughput and latency —
//! refreshed every second from the targets' own statistics.

use anyhow::Result;
use clap::Args;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::IsTerminal;
use std::time::{Duration, Instant};
use weft_client::Cluster;
use weft_proto::TargetKind;
use weft_proto::handshake::ServiceStats;

/// Flags of `weft top`.
#[derive(Args, Debug)]
pub struct TopArgs {
    /// The MGS (default: $WEFT_MGS, else 127.0.0.1:9400).
    #[arg(long, value_parser = crate::parse_addr)]
    pub mgs: Option<String>,
    /// Seconds between refreshes.
    #[arg(long, default_value_t = 1.0)]
    pub interval: f64,
    /// Stop after this many refreshes (default: until interrupted).
    #[arg(long)]
    pub iterations: Option<u64>,
}

/// Per-target totals at one instant.
#[derive(Default, Clone)]
struct Sample {
    requests: u64,
    errors: u64,
    bulk_bytes: u64,
    sum_us: u64,
    per_op: HashMap<String, u64>,
}

fn sample(stats: &ServiceStats) -> Sample {
    let mut s = Sample::default();
    for op in &stats.ops {
        s.requests += op.count;
        s.errors += op.errors;
        s.bulk_bytes += op.bulk_bytes;
        s.sum_us += op.sum_us;
        s.per_op.insert(op.name.clone(), op.count);
    }
    s
}

async fn snapshot(cluster: &Cluster) -> Vec<(String, Option<Sample>)> {
    let mut out = Vec::new();
    for t in &cluster.config().targets {
        let stats = match t.id.kind {
            TargetKind::Mdt => match cluster.mdt(t.id.index) {
                Ok(c) => match c.connection().connection().await {
                    Ok(conn) => conn.stats().await.ok(),
                    Err(_) => None,
                },
                Err(_) => None,
            },
            TargetKind::Ost => match cluster.ost(t.id.index) {
                Ok(c) => match c.connection().connection().await {
                    Ok(conn) => conn.stats().await.ok(),
                    Err(_) => None,
                },
                Err(_) => None,
            },
            TargetKind::Mgs => continue,
        };
        out.push((t.id.to_string(), stats.as_ref().map(sample)));
    }
    out
}

/// One screen: rates between two snapshots `secs` apart.
fn render(
    fs: &str,
    prev: &HashMap<String, Sample>,
    now: &[(String, Option<Sample>)],
    secs: f64,
) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "weft top — {fs} — every {secs:.1} s");
    let _ = writeln!(
        out,
        "{:<10} {:>10} {:>10} {:>12} {:>10}  busiest operations",
        "target", "req/s", "err/s", "MB/s", "avg us"
    );
    for (name, s) in now {
        let Some(s) = s else {
            let _ = writeln!(out, "{name:<10} {:>10}", "down");
            continue;
        };
        let p = prev.get(name).cloned().unwrap_or_default();
        let d = |a: u64, b: u64| a.saturating_sub(b) as f64;
        let reqs = d(s.requests, p.requests);
        let avg = if reqs > 0.0 {
            d(s.sum_us, p.sum_us) / reqs
        } else {
            0.0
        };
        let mut ops: Vec<(String, f64)> = s
            .per_op
            .iter()
            .map(|(op, &n)| {
                (
                    op.clone(),
                    d(n, p.per_op.get(op).copied().unwrap_or(0)) / secs,
                )
            })
            .filter(|(_, r)| *r > 0.0)
            .collect();
        ops.sort_by(|a, b| b.1.total_cmp(&a.1));
        let busiest: Vec<String> = ops
            .iter()
            .take(3)
            .map(|(op, r)| format!("{op} {r:.0}/s"))
            .collect();
        let _ = writeln!(
            out,
            "{name:<10} {:>10.0} {:>10.0} {:>12.1} {:>10.0}  {}",
            reqs / secs,
            d(s.errors, p.errors) / secs,
            d(s.bulk_bytes, p.bulk_bytes) / secs / 1e6,
            avg,
            busiest.join(", ")
        );
    }
    out
}

/// Refreshes the view until interrupted (or `--iterations` runs out).
pub async fn run(args: TopArgs) -> Result<()> {
    let interval = Duration::from_secs_f64(args.interval.clamp(0.1, 3600.0));
    let cluster = super::connect(&super::mgs_address(args.mgs.as_deref()), "").await?;
    let tty = std::io::stdout().is_terminal();
    let mut prev: HashMap<String, Sample> = snapshot(&cluster)
        .await
        .into_iter()
        .filter_map(|(n, s)| s.map(|s| (n, s)))
        .collect();
    let mut last = Instant::now();
    let mut shown = 0u64;
    while args.iterations.is_none_or(|n| shown < n) {
        tokio::time::sleep(interval).await;
        let now = snapshot(&cluster).await;
        let secs = last.elapsed().as_secs_f64().max(1e-3);
        last = Instant::now();
        let screen = render(cluster.fsname(), &prev, &now, secs);
        if tty {
            // Clear the screen and home the cursor, like top.
            print!("\x1b[2J\x1b[H{screen}");
        } else {
            println!("{screen}");
        }
        prev = now
            .into_iter()
            .filter_map(|(n, s)| s.map(|s| (n, s)))
            .collect();
        shown += 1;
    }
    Ok(())
}
