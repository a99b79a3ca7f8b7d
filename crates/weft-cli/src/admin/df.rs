//! `weft df [-h] [-i] [--pool P] [HOST:PORT:/FSNAME | PATH]`: usage of every MDT and OST and the
//! file system's totals, like `lfs df`; then, for each data repository, the bytes of its
//! released files (data only in the store: what tiering freed), in the Used column.

use anyhow::Result;
use clap::Args;
use serde::Serialize;
use weft_proto::TargetKind;

/// Flags of `weft df`.
#[derive(Args, Debug)]
pub struct DfArgs {
    /// Sizes in powers of 1024 with units (K, M, G, T).
    #[arg(short = 'h', long = "human-readable")]
    pub human: bool,
    /// Inodes instead of blocks.
    #[arg(short = 'i', long = "inodes")]
    pub inodes: bool,
    /// Only the OSTs of this pool.
    #[arg(long)]
    pub pool: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// The file system: HOST:PORT:/FSNAME or a path in a mount (default: $WEFT_MGS or
    /// 127.0.0.1:9400, and the name it serves).
    pub fs: Option<String>,
    /// Print help (`-h` means human-readable here, as in `lfs df`).
    #[arg(long, action = clap::ArgAction::Help)]
    pub help: Option<bool>,
}

/// One line of the report.
#[derive(Debug, Serialize)]
struct Row {
    uuid: String,
    /// Total, used and available: 1 KiB blocks, or inodes with `-i`.
    total: u64,
    used: u64,
    available: u64,
    /// Whether the target answered.
    online: bool,
    /// An OST's compressed objects: logical and stored size in 1 KiB blocks (none stored:
    /// absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    compressed: Option<Compressed>,
}

/// What an OST's compressed objects hold and take.
#[derive(Debug, Clone, Copy, Serialize)]
struct Compressed {
    logical: u64,
    stored: u64,
}

/// The compressed usage of OST `index`, if it holds compressed objects and answers.
async fn compressed_of(cluster: &weft_client::Cluster, index: u32) -> Option<Compressed> {
    let c = cluster.ost(index).ok()?;
    let stats = c.connection().connection().await.ok()?.stats().await.ok()?;
    let (logical, stored) = super::param::compressed_usage(&stats);
    (logical > 0).then_some(Compressed {
        logical: logical / 1024,
        stored: stored.div_ceil(1024),
    })
}

fn human(kib: u64) -> String {
    let units = ["K", "M", "G", "T", "P"];
    let mut v = kib as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1}{}", units[u])
}

/// Asks every target for its usage and prints the table.
pub async fn run(args: DfArgs) -> Result<()> {
    let (addr, fsname) = match &args.fs {
        // HOST:PORT:/FSNAME, or any path inside a mount (as `lfs df /mnt/lustre`).
        Some(spec) => match super::parse_fs_spec(spec) {
            Ok(fs) => fs,
            Err(_) => {
                let p = super::fspath::resolve(spec)?;
                (p.mgs, p.fsname)
            }
        },
        None => (super::mgs_address(None), String::new()),
    };
    let cluster = super::connect(&addr, &fsname).await?;
    let config = cluster.config();
    let fs = cluster.fsname().to_string();
    let pool_members = match &args.pool {
        Some(p) => Some(
            config
                .pools
                .get(p)
                .cloned()
                .ok_or_else(|| anyhow::anyhow!("pool {fs}.{p} does not exist"))?,
        ),
        None => None,
    };
    let mut mdts = Vec::new();
    let mut osts = Vec::new();
    for t in &config.targets {
        let usage = match t.id.kind {
            TargetKind::Mdt => match cluster.mdt(t.id.index) {
                Ok(c) => c.statfs().await.ok(),
                Err(_) => None,
            },
            TargetKind::Ost => {
                if pool_members
                    .as_ref()
                    .is_some_and(|m| !m.contains(&t.id.index))
                {
                    continue;
                }
                match cluster.ost(t.id.index) {
                    Ok(c) => c.statfs().await.ok(),
                    Err(_) => None,
                }
            }
            TargetKind::Mgs => continue,
        };
        let row = match usage {
            Some(s) if args.inodes => Row {
                uuid: String::new(),
                total: s.files,
                used: s.files.saturating_sub(s.ffree),
                available: s.ffree,
                online: true,
                compressed: None,
            },
            Some(s) => {
                let kib = |blocks: u64| blocks.saturating_mul(u64::from(s.bsize)) / 1024;
                Row {
                    uuid: String::new(),
                    total: kib(s.blocks),
                    used: kib(s.blocks.saturating_sub(s.bfree)),
                    available: kib(s.bavail),
                    online: true,
                    compressed: None,
                }
            }
            None => Row {
                uuid: String::new(),
                total: 0,
                used: 0,
                available: 0,
                online: false,
                compressed: None,
            },
        };
        let compressed = if t.id.kind == TargetKind::Ost && row.online {
            compressed_of(&cluster, t.id.index).await
        } else {
            None
        };
        let row = Row {
            uuid: format!("{fs}-{}_UUID", t.id),
            compressed,
            ..row
        };
        if t.id.kind == TargetKind::Mdt {
            mdts.push(row)
        } else {
            osts.push(row)
        }
    }
    // Like lfs df: the summary counts OST space for blocks and MDT inodes for -i.
    let summed = if args.inodes { &mdts } else { &osts };
    let summary = Row {
        uuid: "filesystem_summary:".into(),
        total: summed.iter().map(|r| r.total).sum(),
        used: summed.iter().map(|r| r.used).sum(),
        available: summed.iter().map(|r| r.available).sum(),
        online: true,
        compressed: osts
            .iter()
            .filter_map(|r| r.compressed)
            .reduce(|a, b| Compressed {
                logical: a.logical + b.logical,
                stored: a.stored + b.stored,
            }),
    };
    // Bytes whose data lives only in a data repository (released files), per repository:
    // the MDTs' counts per archive id.
    let released = if args.inodes || config.repos.is_empty() {
        Vec::new()
    } else {
        super::repo::released_all(&addr, &fs).await?
    };
    if args.json {
        let released: Vec<_> = released
            .iter()
            .map(|(id, path, r)| {
                serde_json::json!({ "repo": id, "path": path, "files": r.files, "bytes": r.bytes })
            })
            .collect();
        let all = serde_json::json!({ "fsname": fs, "mdts": mdts, "osts": osts,
            "summary": summary, "released": released });
        println!("{}", serde_json::to_string_pretty(&all)?);
        return Ok(());
    }
    let (t, u, a) = if args.inodes {
        ("Inodes", "IUsed", "IFree")
    } else if args.human {
        ("bytes", "Used", "Available")
    } else {
        ("1K-blocks", "Used", "Available")
    };
    println!(
        "{:<24} {:>12} {:>12} {:>12} {:>5} Mounted on",
        "UUID",
        t,
        u,
        a,
        if args.inodes { "IUse%" } else { "Use%" }
    );
    let fmt = |v: u64| {
        if args.human && !args.inodes {
            human(v)
        } else {
            v.to_string()
        }
    };
    let target = format!("{addr}:/{fs}");
    for r in mdts.iter().chain(osts.iter()) {
        if !r.online {
            println!("{:<24} : inactive device", r.uuid);
            continue;
        }
        let pct = if r.total == 0 {
            0
        } else {
            (r.used * 100).div_ceil(r.total.max(1))
        };
        println!(
            "{:<24} {:>12} {:>12} {:>12} {:>4}% {target}",
            r.uuid,
            fmt(r.total),
            fmt(r.used),
            fmt(r.available),
            pct
        );
    }
    println!();
    let pct = if summary.total == 0 {
        0
    } else {
        (summary.used * 100).div_ceil(summary.total)
    };
    println!(
        "{:<24} {:>12} {:>12} {:>12} {:>4}% {target}",
        summary.uuid,
        fmt(summary.total),
        fmt(summary.used),
        fmt(summary.available),
        pct
    );
    // LZ4-compressed objects (`obdfilter.*.compress=lz4`): what they hold and take.
    if let Some(all) = summary.compressed {
        println!();
        println!(
            "{:<24} {:>12} {:>12} {:>6}",
            "compressed", "logical", "stored", "ratio"
        );
        let rows = osts.iter().filter_map(|r| Some((&r.uuid, r.compressed?)));
        for (uuid, c) in rows.chain(std::iter::once((&summary.uuid, all))) {
            println!(
                "{:<24} {:>12} {:>12} {:>6}",
                uuid,
                fmt(c.logical),
                fmt(c.stored),
                super::param::compress_ratio(c.logical, c.stored)
            );
        }
    }
    // Like the rows above, in KiB (or human) units: data kept only in the store.
    for (id, path, r) in &released {
        println!(
            "{:<24} {:>12} {:>12} {:>12} {:>5} {path} (repository {id}, {} files)",
            "released:",
            "",
            fmt(r.bytes.div_ceil(1024)),
            "",
            "",
            r.files
        );
    }
    Ok(())
}
