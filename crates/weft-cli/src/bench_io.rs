//! `weft bench`: IOR-like and mdtest-like workloads through the client library, the way an
//! application on a mount would drive it.
//!
//! The target is `HOST:PORT:/FSNAME[/DIR]` or a directory inside a mount: either way the
//! workloads run through this process's own client library instance, in that directory.
//!
//! IOR mode: N tasks write `--block` bytes each in `--transfer`-sized calls, to a file per
//! task or to disjoint regions of one shared file, close (which flushes), then read it all
//! back; rates count from the first write to the last close. mdtest mode: N tasks create,
//! stat, read (open, read, close) and remove `--files` files each, in one directory per task
//! or one shared directory.

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use std::io::IsTerminal;
use std::sync::Arc;
use std::time::Instant;
use weft_client::{Client, OpenOptions};
use weft_proto::Fid;
use weft_proto::layout::LayoutTemplate;
use weft_proto::mdt::{AccessMode, Credentials};

/// Flags of `weft bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Where to run: MGS_HOST:PORT:/FSNAME[/DIR], or a directory inside a mount.
    #[arg(default_value = "127.0.0.1:9400:/weft")]
    pub fs: String,
    /// Which workloads: ior, mdtest or both.
    #[arg(long, default_value = "both", value_parser = ["ior", "mdtest", "both"])]
    pub mode: String,
    /// Parallel tasks.
    #[arg(long, short = 't', default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub threads: u32,
    /// IOR: one shared file with a disjoint block per task (default: a file per task).
    #[arg(long)]
    pub shared: bool,
    /// IOR: bytes each task writes and reads (K, M, G suffixes).
    #[arg(long, short = 'b', default_value = "64M", value_parser = parse_size)]
    pub block: u64,
    /// IOR: bytes per write and read call.
    #[arg(long, default_value = "4M", value_parser = parse_size)]
    pub transfer: u64,
    /// IOR: stripe count of the files (-1 = every OST).
    #[arg(long, short = 'c', default_value_t = -1, allow_negative_numbers = true)]
    pub stripe_count: i32,
    /// IOR: stripe size.
    #[arg(long, short = 'S', default_value = "4M", value_parser = parse_size)]
    pub stripe_size: u64,
    /// mdtest: files per task.
    #[arg(long, short = 'n', default_value_t = 2000)]
    pub files: u32,
    /// mdtest: all tasks in one directory (default: one directory per task).
    #[arg(long)]
    pub shared_dir: bool,
    /// mdtest: stripe each test directory over this many MDTs (a striped directory, names
    /// hashed with fnv_1a_64); 1 = a plain directory.
    #[arg(long, default_value_t = 1)]
    pub dir_stripe_count: u32,
    /// mdtest: skip the read phase (open, read, close).
    #[arg(long)]
    pub no_read: bool,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// A size like `4M` or `1G` (powers of 1024).
pub fn parse_size(s: &str) -> Result<u64, String> {
    weft_advise::units::parse_size(s).map_err(|e| e.to_string())
}

#[derive(Debug, Default, Serialize)]
struct IorResult {
    tasks: u32,
    shared_file: bool,
    block_bytes: u64,
    transfer_bytes: u64,
    stripe_count: i32,
    stripe_size: u64,
    write_mb_s: f64,
    read_mb_s: f64,
}

#[derive(Debug, Default, Serialize)]
struct MdtestResult {
    tasks: u32,
    files_per_task: u32,
    shared_dir: bool,
    dir_stripe_count: u32,
    /// Requests each MDT served in each phase (create, stat, read, remove), by MDT index.
    mdt_requests: Vec<(u32, [u64; 4])>,
    create_per_s: f64,
    stat_per_s: f64,
    read_per_s: f64,
    remove_per_s: f64,
}

#[derive(Debug, Default, Serialize)]
struct BenchResult {
    ior: Option<IorResult>,
    mdtest: Option<MdtestResult>,
}

fn progress(total: u64, what: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    if let Ok(style) = ProgressStyle::with_template("{msg:>14} [{bar:40}] {pos}/{len} {per_sec}") {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(what.to_string());
    bar
}

/// Runs the chosen workloads and prints the figures.
pub async fn run(args: BenchArgs) -> Result<()> {
    if args.transfer > args.block {
        bail!("--transfer must not exceed --block");
    }
    let target = crate::admin::fspath::resolve(&args.fs)?;
    let client = Client::mount(&target.mgs, &target.fsname, crate::key::client_options()?)
        .await
        .with_context(|| format!("mounting {}", target.source))?;
    let base = client
        .resolve(&target.inner, true, &Credentials::root())
        .await
        .with_context(|| format!("{}: no such directory", target.display(&target.inner)))?;
    if base.kind != weft_proto::mdt::FileKind::Directory {
        bail!("{} is not a directory", target.display(&target.inner));
    }
    let base = base.fid;
    let jobid: Arc<str> = format!("weft-bench.{}", std::process::id()).into();
    // Every request of the run goes in a context naming its job (`*.job_stats`).
    let client = client.for_job(Some(jobid));
    let result = async {
        let mut result = BenchResult::default();
        if args.mode != "mdtest" {
            result.ior = Some(ior(&client, base, &args).await?);
        }
        if args.mode != "ior" {
            result.mdtest = Some(mdtest(&client, base, &args).await?);
        }
        anyhow::Ok(result)
    }
    .await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&result)?);
        return Ok(());
    }
    if let Some(r) = &result.ior {
        println!(
            "ior: {} tasks, {}, block {} MiB, transfer {} MiB, stripes {} x {} MiB: write {:.0} MB/s, read {:.0} MB/s",
            r.tasks,
            if r.shared_file {
                "one shared file"
            } else {
                "file per task"
            },
            r.block_bytes >> 20,
            r.transfer_bytes >> 20,
            r.stripe_count,
            r.stripe_size >> 20,
            r.write_mb_s,
            r.read_mb_s
        );
    }
    if let Some(r) = &result.mdtest {
        println!(
            "mdtest: {} tasks x {} files ({}): create {:.0}/s, stat {:.0}/s, read {:.0}/s, remove {:.0}/s",
            r.tasks,
            r.files_per_task,
            if r.shared_dir {
                "shared directory"
            } else {
                "directory per task"
            },
            r.create_per_s,
            r.stat_per_s,
            r.read_per_s,
            r.remove_per_s
        );
        if r.mdt_requests.len() > 1 {
            for (slot, phase) in ["create", "stat", "read", "remove"].iter().enumerate() {
                let counts: Vec<u64> = r.mdt_requests.iter().map(|(_, c)| c[slot]).collect();
                let mean = counts.iter().sum::<u64>() as f64 / counts.len() as f64;
                let spread = counts
                    .iter()
                    .map(|&c| (c as f64 - mean).abs() / mean.max(1.0) * 100.0)
                    .fold(0f64, f64::max);
                let per: Vec<String> = r
                    .mdt_requests
                    .iter()
                    .map(|(i, c)| format!("MDT{i}: {}", c[slot]))
                    .collect();
                println!(
                    "  {phase:>6} requests per MDT: {} (largest deviation from the mean {spread:.1}%)",
                    per.join(", ")
                );
            }
        }
    }
    Ok(())
}

/// Requests served so far by each MDT (every operation), by index.
async fn mdt_request_counts(client: &Client) -> Result<Vec<(u32, u64)>> {
    let config = client.cluster().config();
    let mut out = Vec::new();
    for t in config.targets_of(weft_proto::TargetKind::Mdt) {
        let mdt = client.cluster().mdt(t.id.index)?;
        let stats = mdt.connection().connection().await?.stats().await?;
        out.push((t.id.index, stats.ops.iter().map(|o| o.count).sum()));
    }
    out.sort_unstable();
    Ok(out)
}

async fn ior(client: &Arc<Client>, base: Fid, args: &BenchArgs) -> Result<IorResult> {
    let cred = Credentials::root();
    let top = client
        .mkdir(
            base,
            format!("bench-ior.{}", std::process::id()).as_bytes(),
            0o755,
            &cred,
        )
        .await?;
    let layout = Some(LayoutTemplate::raid0(
        args.stripe_count,
        args.stripe_size,
        -1,
    ));
    // One buffer shared by every write call: the data is not what is measured.
    let buf = Bytes::from(
        (0..args.transfer)
            .map(|i| (i % 251) as u8)
            .collect::<Vec<u8>>(),
    );
    let total = u64::from(args.threads) * args.block;
    let rw = OpenOptions {
        access: AccessMode::ReadWrite,
        create: Some(0o644),
        exclusive: false,
        truncate: false,
        append: false,
    };
    if args.shared {
        // Create the shared file once, with its layout, before the tasks open it.
        client
            .open_in(top.fid, b"shared", rw, layout.clone(), &cred)
            .await?
            .close()
            .await?;
    }
    let name = |t: u32| {
        if args.shared {
            "shared".to_string()
        } else {
            format!("file.{t}")
        }
    };

    let bar = progress(total >> 20, "ior write MiB");
    let start = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..args.threads {
        let (client, cred, buf, layout, bar) = (
            client.clone(),
            cred.clone(),
            buf.clone(),
            layout.clone(),
            bar.clone(),
        );
        let (name, block, transfer) = (name(t), args.block, args.transfer);
        let base = if args.shared { u64::from(t) * block } else { 0 };
        tasks.push(tokio::spawn(async move {
            let f = client
                .open_in(top.fid, name.as_bytes(), rw, layout, &cred)
                .await?;
            let mut done = 0;
            while done < block {
                let n = transfer.min(block - done) as usize;
                f.write_at(base + done, &buf[..n]).await?;
                done += n as u64;
                bar.inc(n as u64 >> 20);
            }
            f.close().await?;
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    let write_s = start.elapsed().as_secs_f64();
    bar.finish_and_clear();

    let bar = progress(total >> 20, "ior read MiB");
    let start = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..args.threads {
        let (client, cred, bar) = (client.clone(), cred.clone(), bar.clone());
        let (name, block, transfer) = (name(t), args.block, args.transfer);
        let base = if args.shared { u64::from(t) * block } else { 0 };
        tasks.push(tokio::spawn(async move {
            let f = client
                .open_in(top.fid, name.as_bytes(), OpenOptions::read(), None, &cred)
                .await?;
            let mut done = 0;
            while done < block {
                let got = f.read_at(base + done, transfer.min(block - done)).await?;
                if got.is_empty() {
                    bail!("short read at {}", base + done);
                }
                done += got.len() as u64;
                bar.inc(got.len() as u64 >> 20);
            }
            f.close().await?;
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    let read_s = start.elapsed().as_secs_f64();
    bar.finish_and_clear();

    for t in 0..if args.shared { 1 } else { args.threads } {
        client.unlink(top.fid, name(t).as_bytes(), &cred).await?;
    }
    client
        .rmdir(
            base,
            format!("bench-ior.{}", std::process::id()).as_bytes(),
            &cred,
        )
        .await?;
    let mb = total as f64 / 1e6;
    Ok(IorResult {
        tasks: args.threads,
        shared_file: args.shared,
        block_bytes: args.block,
        transfer_bytes: args.transfer,
        stripe_count: args.stripe_count,
        stripe_size: args.stripe_size,
        write_mb_s: mb / write_s,
        read_mb_s: mb / read_s,
    })
}

#[derive(Clone, Copy, PartialEq)]
enum MdPhase {
    Create,
    Stat,
    Read,
    Remove,
}

async fn mdtest(client: &Arc<Client>, base: Fid, args: &BenchArgs) -> Result<MdtestResult> {
    let cred = Credentials::root();
    let top_name = format!("bench-mdtest.{}", std::process::id());
    let top = client
        .mkdir(base, top_name.as_bytes(), 0o755, &cred)
        .await?;
    let dirs = if args.shared_dir { 1 } else { args.threads };
    let mut dir_fids = Vec::new();
    for d in 0..dirs {
        let name = format!("dir.{d}");
        let made = if args.dir_stripe_count > 1 {
            client
                .mkdir_striped(
                    top.fid,
                    name.as_bytes(),
                    0o755,
                    args.dir_stripe_count,
                    weft_proto::mdt::DirHash::Fnv1a64,
                    &cred,
                )
                .await?
        } else {
            client.mkdir(top.fid, name.as_bytes(), 0o755, &cred).await?
        };
        dir_fids.push(made.fid);
    }
    let mut mdt_requests: Vec<(u32, [u64; 4])> = mdt_request_counts(client)
        .await?
        .into_iter()
        .map(|(i, _)| (i, [0; 4]))
        .collect();
    let total = u64::from(args.threads) * u64::from(args.files);
    let mut rates = [0f64; 4];
    for (slot, phase) in [
        MdPhase::Create,
        MdPhase::Stat,
        MdPhase::Read,
        MdPhase::Remove,
    ]
    .into_iter()
    .enumerate()
    {
        let label = ["create", "stat", "read", "remove"][slot];
        if args.no_read && matches!(phase, MdPhase::Read) {
            continue;
        }
        let before = mdt_request_counts(client).await?;
        let bar = progress(total, label);
        let start = Instant::now();
        let mut tasks = Vec::new();
        for t in 0..args.threads {
            let dir = dir_fids[if args.shared_dir { 0 } else { t as usize }];
            let (client, cred, bar, files) =
                (client.clone(), cred.clone(), bar.clone(), args.files);
            tasks.push(tokio::spawn(async move {
                for i in 0..files {
                    let name = format!("f.{t}.{i}");
                    match phase {
                        MdPhase::Create => {
                            let create = OpenOptions {
                                access: AccessMode::Write,
                                create: Some(0o644),
                                exclusive: true,
                                truncate: false,
                                append: false,
                            };
                            client
                                .open_in(dir, name.as_bytes(), create, None, &cred)
                                .await?
                                .close()
                                .await?;
                        }
                        MdPhase::Stat => {
                            client.lookup(dir, name.as_bytes(), &cred).await?;
                        }
                        MdPhase::Read => {
                            let f = client
                                .open_in(dir, name.as_bytes(), OpenOptions::read(), None, &cred)
                                .await?;
                            f.read_at(0, 4096).await?;
                            f.close().await?;
                        }
                        MdPhase::Remove => client.unlink(dir, name.as_bytes(), &cred).await?,
                    }
                    bar.inc(1);
                }
                anyhow::Ok(())
            }));
        }
        for t in tasks {
            t.await??;
        }
        rates[slot] = total as f64 / start.elapsed().as_secs_f64();
        bar.finish_and_clear();
        let after = mdt_request_counts(client).await?;
        for ((i, b), (_, a)) in before.iter().zip(&after) {
            if let Some((_, c)) = mdt_requests.iter_mut().find(|(m, _)| m == i) {
                c[slot] = a.saturating_sub(*b);
            }
        }
    }
    for d in 0..dirs {
        client
            .rmdir(top.fid, format!("dir.{d}").as_bytes(), &cred)
            .await?;
    }
    client.rmdir(base, top_name.as_bytes(), &cred).await?;
    Ok(MdtestResult {
        tasks: args.threads,
        files_per_task: args.files,
        shared_dir: args.shared_dir,
        dir_stripe_count: args.dir_stripe_count,
        mdt_requests,
        create_per_s: rates[0],
        stat_per_s: rates[1],
        read_per_s: rates[2],
        remove_per_s: rates[3],
    })
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_parse_with_units() {
        assert_eq!(parse_size("4M"), Ok(4 << 20));
        assert_eq!(parse_size("1g"), Ok(1 << 30));
        assert_eq!(parse_size("512"), Ok(512));
        assert!(parse_size("0").is_err() && parse_size("4Q").is_err() && parse_size("x").is_err());
        assert!(parse_size("99999999999T").is_err());
    }
}
