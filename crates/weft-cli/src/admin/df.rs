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
            },
            Some(s) => {
                let kib = |blocks: u64| blocks.saturating_mul(u64::from(s.bsize)) / 1024;
                Row {
                    uuid: String::new(),
                    total: kib(s.blocks),
                    used: kib(s.blocks.saturating_sub(s.bfree)),
                    available: kib(s.bavail),
                    online: true,
                }
            }
            None => Row {
                uuid: String::new(),
                total: 0,
                used: 0,
                available: 0,
                online: false,
            },
        };
        let row = Row {
            uuid: format!("{fs}-{}_UUID", t.id),
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
    };
    // Bytes whose data lives only in a data repository (released files), per repository:
    // a walk of each linked directory.
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
