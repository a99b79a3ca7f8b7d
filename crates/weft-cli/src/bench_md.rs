//! `weft bench-mdt`: create, stat (lookup) and unlink rates of one MDT through the protocol,
//! with 1..N concurrent clients, each its own connection and its own directory.

use anyhow::{Context, Result, bail};
use clap::Args;
use serde::Serialize;
use std::sync::Arc;
use std::time::Instant;
use weft_client::{Cluster, MdtClient, NewFile};
use weft_proto::Fid;
use weft_proto::mdt::Credentials;

/// Flags of `weft bench-mdt`.
#[derive(Args, Debug)]
pub struct BenchMdtArgs {
    /// Address of the MGS (a running `weft up` or `weft mgs`).
    #[arg(long, default_value = "127.0.0.1:9400", value_parser = crate::parse_addr)]
    pub mgs: String,
    /// File system name.
    #[arg(long, default_value = "weft")]
    pub fsname: String,
    /// Client counts to run, comma separated; each client has its own connection.
    #[arg(long, default_value = "1,8", value_delimiter = ',')]
    pub clients: Vec<u32>,
    /// Files each client creates, stats and unlinks.
    #[arg(long, default_value_t = 20_000)]
    pub files: u32,
    /// Requests each client keeps in flight.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub depth: u32,
    /// Put every client's files in one shared directory instead of one directory each.
    #[arg(long)]
    pub shared: bool,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Serialize)]
struct RunResult {
    clients: u32,
    depth: u32,
    shared_dir: bool,
    files_total: u64,
    create_per_s: f64,
    stat_per_s: f64,
    readdir_entries_per_s: f64,
    unlink_per_s: f64,
}

/// Runs every client count in turn and reports the rates.
pub async fn run(args: BenchMdtArgs) -> Result<()> {
    if args.clients.iter().any(|&c| c == 0 || c > 1024) {
        bail!("--clients values must be between 1 and 1024");
    }
    let mut results = Vec::new();
    for &clients in &args.clients {
        results.push(run_one(&args, clients).await?);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&results)?);
    } else {
        println!(
            "{:>8} {:>6} {:>10} {:>12} {:>12} {:>12} {:>12}",
            "clients", "depth", "files", "create/s", "stat/s", "readdir/s", "unlink/s"
        );
        for r in &results {
            println!(
                "{:>8} {:>6} {:>10} {:>12.0} {:>12.0} {:>12.0} {:>12.0}",
                r.clients,
                r.depth,
                r.files_total,
                r.create_per_s,
                r.stat_per_s,
                r.readdir_entries_per_s,
                r.unlink_per_s
            );
        }
    }
    Ok(())
}

#[derive(Clone, Copy)]
enum Phase {
    Create,
    Stat,
    Readdir,
    Unlink,
}

async fn run_one(args: &BenchMdtArgs, clients: u32) -> Result<RunResult> {
    let cred = Credentials::root();
    let mut mdts = Vec::new();
    for _ in 0..clients {
        let cluster = Cluster::connect(&args.mgs, &args.fsname, crate::key::cluster_options()?)
            .await
            .with_context(|| format!("connecting to {}", args.mgs))?;
        mdts.push((cluster.mdt(0)?, cluster));
    }
    let (root_mdt, _) = &mdts[0];
    let top = format!("bench-mdt.{}.{}", std::process::id(), clients);
    let top_attr = root_mdt
        .mkdir(Fid::ROOT, top.as_bytes(), 0o755, &cred)
        .await?;
    // One directory per client, or one for all (`--shared`).
    let dir_count = if args.shared { 1 } else { clients };
    let mut dirs = Vec::new();
    for i in 0..dir_count {
        dirs.push(
            root_mdt
                .mkdir(top_attr.fid, format!("d{i}").as_bytes(), 0o755, &cred)
                .await?
                .fid,
        );
    }
    let mut rates = [0f64; 4];
    let phases = [Phase::Create, Phase::Stat, Phase::Readdir, Phase::Unlink];
    for (slot, phase) in phases.into_iter().enumerate() {
        let start = Instant::now();
        let mut tasks = Vec::new();
        for (c, (mdt, _)) in mdts.iter().enumerate() {
            let dir = dirs[if args.shared { 0 } else { c }];
            // Readdir: each client lists its own directory once (in shared mode, client 0
            // lists the shared one).
            let lanes = match phase {
                Phase::Readdir if args.shared && c > 0 => 0,
                Phase::Readdir => 1,
                _ => args.depth,
            };
            for lane in 0..lanes {
                let (mdt, cred) = (mdt.clone(), cred.clone());
                let share = LaneShare {
                    client: c as u32,
                    lane,
                    depth: args.depth,
                    files: args.files,
                };
                tasks.push(tokio::spawn(async move {
                    lane_work(mdt, dir, cred, phase, &share).await
                }));
            }
        }
        let mut done = 0u64;
        for t in tasks {
            done += t.await??;
        }
        rates[slot] = done as f64 / start.elapsed().as_secs_f64();
    }
    for i in 0..dir_count {
        root_mdt
            .rmdir(top_attr.fid, format!("d{i}").as_bytes(), &cred)
            .await?;
    }
    root_mdt.rmdir(Fid::ROOT, top.as_bytes(), &cred).await?;
    Ok(RunResult {
        clients,
        depth: args.depth,
        shared_dir: args.shared,
        files_total: u64::from(clients) * u64::from(args.files),
        create_per_s: rates[0],
        stat_per_s: rates[1],
        readdir_entries_per_s: rates[2],
        unlink_per_s: rates[3],
    })
}

/// The files one in-flight lane of one client handles: `lane, lane + depth, ...` below
/// `files`, named after `client`.
#[derive(Debug, Clone, Copy)]
struct LaneShare {
    /// The client (its names start with `c{client}-`).
    client: u32,
    /// The lane's first file.
    lane: u32,
    /// Lanes per client: the step between the lane's files.
    depth: u32,
    /// Files per client.
    files: u32,
}

/// One in-flight lane of one client: handles the files of `share` (or lists the
/// directory). Returns the number of operations (entries, for readdir) done.
async fn lane_work(
    mdt: Arc<MdtClient>,
    dir: Fid,
    cred: Credentials,
    phase: Phase,
    share: &LaneShare,
) -> Result<u64> {
    let LaneShare {
        client,
        lane,
        depth,
        files,
    } = *share;
    if let Phase::Readdir = phase {
        return Ok(mdt.readdir_all(dir, &cred).await?.len() as u64);
    }
    let mut i = lane;
    let mut done = 0;
    while i < files {
        let name = format!("c{client}-f{i}");
        match phase {
            Phase::Create => {
                let new = NewFile::exclusive(dir, name.as_bytes(), 0o100644);
                mdt.create(&new, &cred).await?;
            }
            Phase::Stat => {
                mdt.lookup(dir, name.as_bytes(), &cred).await?;
            }
            Phase::Readdir => {}
            Phase::Unlink => mdt.unlink(dir, name.as_bytes(), &cred).await?,
        }
        done += 1;
        i += depth;
    }
    Ok(done)
}
