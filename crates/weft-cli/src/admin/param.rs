//! `weft get_param PATTERN...` and `weft set_param [-P] NAME=VALUE...` (Lustre's `lctl`).
//!
//! Client parameters and statistics come from every mount on this node through its control
//! socket ([`crate::client_node`]): `osc.*.max_rpcs_in_flight`, `llite.*.max_cached_mb`,
//! `mdc.*.stats`, `osc.*.stats`, ...; `set_param` without `-P` changes them there.
//! Server parameters are read live from each target: `mdt.FS-MDTxxxx.md_stats`,
//! `obdfilter.FS-OSTxxxx.stats` and `.brw_stats`, `*.job_stats` (per job id), usage (`kbytestotal`, `kbytesfree`,
//! `kbytesavail`, `filestotal`, `filesfree`) and the targets' counters. Parameters stored
//! with `set_param -P` live on the MGS; every node fetches them with its configuration.

use anyhow::{Result, bail};
use clap::Args;
use std::fmt::Write as _;
use weft_client::Cluster;
use weft_proto::handshake::ServiceStats;
use weft_proto::mdt::StatFs;
use weft_proto::{TargetId, TargetKind};

/// Flags of `weft get_param`.
#[derive(Args, Debug)]
pub struct GetParamArgs {
    /// The MGS (default: $WEFT_MGS, else 127.0.0.1:9400); also limits client parameters
    /// to mounts of that file system.
    #[arg(long, value_parser = crate::parse_addr)]
    pub mgs: Option<String>,
    /// Print values only, without names.
    #[arg(short = 'n')]
    pub values_only: bool,
    /// Parameter names; `*` and `?` match within the name.
    #[arg(required = true)]
    pub patterns: Vec<String>,
}

/// Flags of `weft set_param`.
#[derive(Args, Debug)]
pub struct SetParamArgs {
    /// The MGS (default: $WEFT_MGS, else 127.0.0.1:9400).
    #[arg(long, value_parser = crate::parse_addr)]
    pub mgs: Option<String>,
    /// Store the setting on the MGS: every node applies it, now and after restarts.
    #[arg(short = 'P')]
    pub permanent: bool,
    /// With -P: delete the stored settings named (NAME, no value).
    #[arg(short = 'd', requires = "permanent")]
    pub delete: bool,
    /// NAME=VALUE settings (or NAMEs with -d).
    #[arg(required = true)]
    pub settings: Vec<String>,
}

use weft_client::params::glob_match;

/// The parameter prefix of a target: `mdt.FS-MDT0000` or `obdfilter.FS-OST0000`.
fn prefix(fs: &str, id: TargetId) -> Option<String> {
    match id.kind {
        TargetKind::Mdt => Some(format!("mdt.{fs}-{id}")),
        TargetKind::Ost => Some(format!("obdfilter.{fs}-{id}")),
        TargetKind::Mgs => None,
    }
}

/// The names a target offers and, once fetched, their values.
pub(crate) fn target_params(
    kind: TargetKind,
    stats: &ServiceStats,
    statfs: Option<&StatFs>,
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let ops_name = if kind == TargetKind::Mdt {
        "md_stats"
    } else {
        "stats"
    };
    let mut ops = String::from("\n");
    for op in &stats.ops {
        // Lustre's layout: name, samples, unit, then sum; the histogram gives min/max bounds.
        let min = op
            .buckets
            .iter()
            .position(|&n| n > 0)
            .map_or(0, |i| if i == 0 { 0 } else { 1u64 << (i - 1) });
        let max = op
            .buckets
            .iter()
            .rposition(|&n| n > 0)
            .map_or(0, |i| 1u64 << i);
        let _ = writeln!(
            ops,
            "{:<24} {} samples [usecs] {} {} {} errors {}",
            op.name, op.count, min, max, op.sum_us, op.errors
        );
    }
    out.push((ops_name.to_string(), ops));
    if kind == TargetKind::Ost {
        let mut brw = String::from("\nI/O size        reads      writes\n");
        let get = |n: &str| counter(stats, n);
        for c in stats
            .counters
            .iter()
            .filter(|c| c.name.starts_with("brw.read."))
        {
            let size = c.name.trim_start_matches("brw.read.");
            let _ = writeln!(
                brw,
                "{size:<12} {:>10} {:>10}",
                c.value,
                get(&format!("brw.write.{size}"))
            );
        }
        out.push(("brw_stats".to_string(), brw));
    }
    // Lustre's job_stats layout (YAML), one entry per job seen recently.
    let mut jobs = String::from("\njob_stats:\n");
    for j in &stats.jobs {
        let _ = writeln!(jobs, "- job_id:          {}", j.jobid);
        let _ = writeln!(jobs, "  snapshot_time:   {}", j.snapshot_time);
        let _ = writeln!(jobs, "  start_time:      {}", j.start_time);
        for op in &j.ops {
            let _ = writeln!(
                jobs,
                "  {:<16} {{ samples: {}, unit: usecs, sum: {}, errors: {}, bulk_bytes: {} }}",
                format!("{}:", op.name),
                op.count,
                op.sum_us,
                op.errors,
                op.bulk_bytes
            );
        }
    }
    out.push(("job_stats".to_string(), jobs));
    for c in stats
        .counters
        .iter()
        .filter(|c| !c.name.starts_with("brw."))
    {
        let value = match (c.name.as_str(), c.value) {
            ("compress", 0) => "none".to_string(),
            ("compress", _) => "lz4".to_string(),
            (_, v) => v.to_string(),
        };
        out.push((c.name.clone(), value));
    }
    if kind == TargetKind::Ost {
        let (logical, stored) = compressed_usage(stats);
        out.push(("compress_ratio".into(), compress_ratio(logical, stored)));
    }
    if let Some(s) = statfs {
        let kib = |b: u64| (b.saturating_mul(u64::from(s.bsize)) / 1024).to_string();
        out.push(("kbytestotal".into(), kib(s.blocks)));
        out.push(("kbytesfree".into(), kib(s.bfree)));
        out.push(("kbytesavail".into(), kib(s.bavail)));
        out.push(("filestotal".into(), s.files.to_string()));
        out.push(("filesfree".into(), s.ffree.to_string()));
    }
    out
}

/// The value of a target's counter `name` (0 when it has none).
fn counter(stats: &ServiceStats, name: &str) -> u64 {
    stats
        .counters
        .iter()
        .find(|c| c.name == name)
        .map_or(0, |c| c.value)
}

/// Logical and stored bytes of an OST's compressed objects, from its counters.
pub(crate) fn compressed_usage(stats: &ServiceStats) -> (u64, u64) {
    (
        counter(stats, "compress_logical_bytes"),
        counter(stats, "compress_stored_bytes"),
    )
}

/// Logical bytes per stored byte of compressed objects, two decimals (`1.00` when none
/// are stored).
pub(crate) fn compress_ratio(logical: u64, stored: u64) -> String {
    if stored == 0 {
        return "1.00".into();
    }
    format!("{:.2}", logical as f64 / stored as f64)
}

/// Every parameter whose name matches one of `patterns`, with its value, in name order.
pub async fn collect(cluster: &Cluster, patterns: &[String]) -> Result<Vec<(String, String)>> {
    let fs = cluster.fsname().to_string();
    let config = cluster.config();
    let mut found = Vec::new();
    for t in &config.targets {
        let Some(prefix) = prefix(&fs, t.id) else {
            continue;
        };
        // Only ask a target whose name could match.
        let could = patterns.iter().any(|p| {
            let head = p.split('.').take(2).collect::<Vec<_>>().join(".");
            glob_match(&head, &prefix)
        });
        if !could {
            continue;
        }
        let (stats, statfs) = match t.id.kind {
            TargetKind::Mdt => {
                let c = cluster.mdt(t.id.index)?;
                (
                    c.connection().connection().await?.stats().await?,
                    c.statfs().await.ok(),
                )
            }
            TargetKind::Ost => {
                let c = cluster.ost(t.id.index)?;
                (
                    c.connection().connection().await?.stats().await?,
                    c.statfs().await.ok(),
                )
            }
            TargetKind::Mgs => continue,
        };
        // Where the target is served, from the configuration (Lustre shows failover
        // servers as `failover_nids`).
        let served = [
            ("server".to_string(), t.address.clone()),
            ("failover_nids".to_string(), t.failover.join(",")),
        ];
        for (name, value) in target_params(t.id.kind, &stats, statfs.as_ref())
            .into_iter()
            .chain(served)
        {
            let full = format!("{prefix}.{name}");
            if patterns.iter().any(|p| glob_match(p, &full)) {
                found.push((full, value));
            }
        }
    }
    for (name, value) in &config.params {
        if patterns.iter().any(|p| glob_match(p, name)) && !found.iter().any(|(n, _)| n == name) {
            found.push((name.clone(), value.clone()));
        }
    }
    found.sort();
    Ok(found)
}

/// Prints the matching parameters: this node's mounted clients', then the servers'.
pub async fn get(args: GetParamArgs) -> Result<()> {
    // With --mgs, only the mounts of that file system.
    let mut found = crate::client_node::ask_all(&crate::client_node::CtlRequest {
        mgs: args.mgs.clone(),
        op: crate::client_node::CtlOp::Get(args.patterns.clone()),
    })
    .await?;
    // Client names never start like server ones; only ask the servers if a pattern could
    // name one of theirs (or nothing matched here).
    let server_side = found.is_empty()
        || args
            .patterns
            .iter()
            .any(|p| !(p.starts_with("osc.") || p.starts_with("llite.") || p.starts_with("mdc.")));
    if server_side {
        match super::connect(&super::mgs_address(args.mgs.as_deref()), "").await {
            Ok(cluster) => found.extend(collect(&cluster, &args.patterns).await?),
            Err(e) if found.is_empty() => return Err(e),
            Err(e) => tracing::debug!(error = %e, "servers not reached"),
        }
    }
    found.sort();
    found.dedup_by(|a, b| a.0 == b.0);
    if found.is_empty() {
        bail!("no parameter matches {}", args.patterns.join(" "));
    }
    for (name, value) in found {
        if args.values_only {
            println!("{}", value.trim_start_matches('\n'));
        } else {
            println!("{name}={value}");
        }
    }
    Ok(())
}

/// Changes the settings in every client mounted on this node (until it unmounts).
async fn set_on_this_node(mgs: Option<&str>, settings: &[String]) -> Result<()> {
    for s in settings {
        let Some((name, value)) = s.split_once('=').filter(|(n, _)| !n.is_empty()) else {
            bail!("'{s}' is not NAME=VALUE");
        };
        let set = crate::client_node::ask_all(&crate::client_node::CtlRequest {
            mgs: mgs.map(str::to_string),
            op: crate::client_node::CtlOp::Set(name.to_string(), value.to_string()),
        })
        .await?;
        if set.is_empty() {
            bail!(
                "no parameter of a client mounted here matches '{name}' (server parameters such \
                 as mdt.*.job_cleanup_interval are set with -P, which stores the setting on the \
                 MGS for every node)"
            );
        }
        for (n, v) in set {
            println!("{n}={v}");
        }
    }
    Ok(())
}

/// Stores (or deletes) settings on the MGS.
pub async fn set(args: SetParamArgs) -> Result<()> {
    if !args.permanent {
        return set_on_this_node(args.mgs.as_deref(), &args.settings).await;
    }
    let cluster = super::connect(&super::mgs_address(args.mgs.as_deref()), "").await?;
    for s in &args.settings {
        let (name, value) = if args.delete {
            (s.as_str(), None)
        } else {
            match s.split_once('=') {
                Some((n, v)) if !n.is_empty() => (n, Some(v.to_string())),
                _ => bail!("'{s}' is not NAME=VALUE"),
            }
        };
        cluster
            .mgs()
            .set_param(name.to_string(), value.clone())
            .await?;
        match value {
            Some(v) => println!("{name}={v}"),
            None => println!("{name} deleted"),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn globs_match_like_lctl() {
        assert!(glob_match(
            "osc.*.max_rpcs_in_flight",
            "osc.weft-OST0001.max_rpcs_in_flight"
        ));
        assert!(glob_match("mdt.*.md_stats", "mdt.weft-MDT0000.md_stats"));
        assert!(!glob_match("mdt.*.md_stats", "mdt.weft-MDT0000.stats"));
        assert!(glob_match(
            "obdfilter.weft-OST000?.stats",
            "obdfilter.weft-OST0003.stats"
        ));
        assert!(glob_match("*", "anything.at.all"));
        assert!(!glob_match("a*b", "acd"));
        assert!(glob_match("a*b*c", "aXbYbZc"));
    }
}
