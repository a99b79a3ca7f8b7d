//! `weft bench-mdt`: create, stat (lookup) and unlink rates of one MDT through the protocol,
//! with 1..N concurrent clients, each its own connection and its own directory (or one
//! shared), optionally in directories pre-filled to given sizes (`--prefill`).

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
    /// Directory sizes to measure at, comma separated and increasing (e.g.
    /// `0,100000,1000000`): each directory is filled with that many other entries before
    /// the files are created, stated and unlinked on top (cost against directory size).
    #[arg(long, value_delimiter = ',')]
    pub prefill: Vec<u64>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Serialize)]
struct RunResult {
    clients: u32,
    depth: u32,
    shared_dir: bool,
    /// Entries each directory held before the measured files were created.
    dir_entries: u64,
    files_total: u64,
    create_per_s: f64,
    stat_per_s: f64,
    readdir_entries_per_s: f64,
    unlink_per_s: f64,
}

/// Runs every client count (and directory size) in turn and reports the rates.
pub async fn run(args: BenchMdtArgs) -> Result<()> {
    if args.clients.iter().any(|&c| c == 0 || c > 1024) {
        bail!("--clients values must be between 1 and 1024");
    }
    if args.prefill.windows(2).any(|w| w[0] >= w[1]) {
        bail!("--prefill sizes must be listed in increasing order");
    }
    let mut results = Vec::new();
    for &clients in &args.clients {
        results.extend(run_clients(&args, clients).await?);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&results)?);
    } else {
        println!(
            "{:>8} {:>6} {:>10} {:>10} {:>12} {:>12} {:>12} {:>12}",
            "clients", "depth", "entries", "files", "create/s", "stat/s", "readdir/s", "unlink/s"
        );
        for r in &results {
            println!(
                "{:>8} {:>6} {:>10} {:>10} {:>12.0} {:>12.0} {:>12.0} {:>12.0}",
                r.clients,
                r.depth,
                r.dir_entries,
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

#[derive(Debug, Clone, Copy)]
enum Phase {
    Create,
    Stat,
    Readdir,
    Unlink,
}

/// The clients of one run: each its own connection to MDT0, and the directories they work in.
struct Bench {
    mdts: Vec<Arc<MdtClient>>,
    /// Keeps each client's connection open.
    _clusters: Vec<Arc<Cluster>>,
    /// One directory per client, or one for all (`--shared`).
    dirs: Vec<Fid>,
    depth: u32,
    cred: Credentials,
}

impl Bench {
    /// The directory client `c` works in.
    fn dir_of(&self, c: usize) -> Fid {
        self.dirs[c % self.dirs.len()]
    }

    /// Runs `phase` on every client with `depth` lanes each (one lane per directory for
    /// readdir), lane `l` of client `c` handling `share(c, l)`; returns the operations done
    /// (entries, for readdir) per second.
    async fn phase(&self, phase: Phase, share: impl Fn(u32, u32) -> LaneShare) -> Result<f64> {
        let start = Instant::now();
        let mut tasks = Vec::new();
        for (c, mdt) in self.mdts.iter().enumerate() {
            let lanes = match phase {
                // Each directory is listed once, by the first client working in it.
                Phase::Readdir if c >= self.dirs.len() => 0,
                Phase::Readdir => 1,
                _ => self.depth,
            };
            for lane in 0..lanes {
                let (mdt, dir, cred) = (mdt.clone(), self.dir_of(c), self.cred.clone());
                let share = share(c as u32, lane);
                tasks.push(tokio::spawn(async move {
                    lane_work(mdt, dir, cred, phase, &share).await
                }));
            }
        }
        let mut done = 0u64;
        for t in tasks {
            done += t.await??;
        }
        Ok(done as f64 / start.elapsed().as_secs_f64())
    }

    /// Creates (`Phase::Create`) or unlinks (`Phase::Unlink`) the filler entries
    /// `p{from}..p{to}` of every directory, spread over all clients' lanes.
    async fn filler(&self, phase: Phase, from: u64, to: u64) -> Result<()> {
        let per_dir = (self.mdts.len() / self.dirs.len()) as u64;
        let lanes = per_dir * u64::from(self.depth);
        self.phase(phase, |c, lane| LaneShare {
            prefix: "p".into(),
            first: from
                + (u64::from(c) / self.dirs.len() as u64) * u64::from(self.depth)
                + u64::from(lane),
            step: lanes,
            end: to,
        })
        .await
        .map(drop)
    }
}

/// One client count: for each directory size of `--prefill`, fills the directories up to
/// it and measures create, stat, readdir and unlink of the files on top.
async fn run_clients(args: &BenchMdtArgs, clients: u32) -> Result<Vec<RunResult>> {
    let cred = Credentials::root();
    let mut mdts = Vec::new();
    let mut clusters = Vec::new();
    for _ in 0..clients {
        let cluster = Cluster::connect(&args.mgs, &args.fsname, crate::key::cluster_options()?)
            .await
            .with_context(|| format!("connecting to {}", args.mgs))?;
        mdts.push(cluster.mdt(0)?);
        clusters.push(cluster);
    }
    let root_mdt = mdts[0].clone();
    let top = format!("bench-mdt.{}.{}", std::process::id(), clients);
    let top_attr = root_mdt
        .mkdir(Fid::ROOT, top.as_bytes(), 0o755, &cred)
        .await?;
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
    let bench = Bench {
        mdts,
        _clusters: clusters,
        dirs,
        depth: args.depth,
        cred: cred.clone(),
    };
    let sizes = if args.prefill.is_empty() {
        vec![0]
    } else {
        args.prefill.clone()
    };
    let mut results = Vec::new();
    let mut filled = 0;
    for size in sizes {
        if size > filled {
            tracing::info!(from = filled, to = size, "filling the directories");
            bench.filler(Phase::Create, filled, size).await?;
            filled = size;
        }
        let files = args.files;
        let depth = args.depth;
        let mine = |c: u32, lane: u32| LaneShare {
            prefix: format!("c{c}-f"),
            first: u64::from(lane),
            step: u64::from(depth),
            end: u64::from(files),
        };
        let mut rates = [0f64; 4];
        let phases = [Phase::Create, Phase::Stat, Phase::Readdir, Phase::Unlink];
        for (slot, phase) in phases.into_iter().enumerate() {
            // Logged with their times, so that a profile of the server can be cut by phase
            // (`perf report --time`).
            tracing::info!(phase = ?phase, entries = size, "phase started");
            rates[slot] = bench.phase(phase, mine).await?;
            tracing::info!(phase = ?phase, entries = size, rate = rates[slot], "phase done");
        }
        results.push(RunResult {
            clients,
            depth,
            shared_dir: args.shared,
            dir_entries: size,
            files_total: u64::from(clients) * u64::from(files),
            create_per_s: rates[0],
            stat_per_s: rates[1],
            readdir_entries_per_s: rates[2],
            unlink_per_s: rates[3],
        });
    }
    bench.filler(Phase::Unlink, 0, filled).await?;
    for i in 0..dir_count {
        root_mdt
            .rmdir(top_attr.fid, format!("d{i}").as_bytes(), &cred)
            .await?;
    }
    root_mdt.rmdir(Fid::ROOT, top.as_bytes(), &cred).await?;
    Ok(results)
}

/// The entries one in-flight lane handles: `{prefix}{i}` for `i` from `first` below `end`
/// in steps of `step`.
#[derive(Debug, Clone)]
struct LaneShare {
    prefix: String,
    first: u64,
    step: u64,
    end: u64,
}

/// One in-flight lane of one client: handles the entries of `share` (or lists the
/// directory). Returns the number of operations (entries, for readdir) done.
async fn lane_work(
    mdt: Arc<MdtClient>,
    dir: Fid,
    cred: Credentials,
    phase: Phase,
    share: &LaneShare,
) -> Result<u64> {
    if let Phase::Readdir = phase {
        return Ok(mdt.readdir_all(dir, &cred).await?.len() as u64);
    }
    let mut done = 0;
    for i in (share.first..share.end).step_by(share.step.max(1) as usize) {
        let name = format!("{}{i}", share.prefix);
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
    }
    Ok(done)
}
