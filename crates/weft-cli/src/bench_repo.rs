//! `weft bench-repo`: the data repository benchmark of issue 23. Two datasets in an S3
//! bucket (by default 20,000 objects of 128 KiB and 4 of 1 GiB), and for each:
//!
//! - `populate`: PUT with patterned bytes (unless `--skip-populate`);
//! - `import`: a repository association for a fresh directory, and
//!   `weft_repo::import::import` of every object as a released file, timed (objects/s);
//! - `epoch1` (lazy: every read restores from the bucket through the MDS's data mover) and
//!   `epoch2` (loaded): every file read whole through the mount by `--workers` threads;
//! - `straight-write`/`straight-read`: the same bytes written into a plain directory of the
//!   mount and read with the same reader (what epoch 2 is compared with);
//! - `copy-download`/`copy-read`/`copy-then-read`: every object downloaded to
//!   `--local-dir` (`--workers` objects at a time, ranged GETs for large ones), then read
//!   from the local disk with the same reader;
//! - `direct`: ranged GETs of every object into memory, `--workers × 4` in flight;
//! - with `--rounds N`, N − 1 more rounds of `epoch1` (every file released again first,
//!   and the straight copy read again, `straight-reread`, see `rounds`) and `direct`, in
//!   turn: the goals then compare the medians of each phase's rounds.
//!
//! Every read path checks every byte against the object's pattern, so no figure is for
//! wrong data. The kernel's caches are dropped (`sync; echo 3 > drop_caches`, which needs
//! root) before every phase except `copy-read`, which reads what was just downloaded as
//! a job would. MB/s are 10^6 bytes per second.

mod data;
mod rounds;
mod s3;

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use clap::Args;
use data::{Dataset, Moved, Obj};
use serde::Serialize;
use std::path::PathBuf;
use std::time::Instant;
use weft_client::Client;
use weft_proto::Fid;
use weft_proto::hsm::{RepoPolicy, RepoSpec};
use weft_proto::mdt::Credentials;
use weft_proto::mgs::{MgsReply, MgsRequest};
use weft_repo::import::{ImportOptions, import};

/// Flags of `weft bench-repo`.
#[derive(Args, Debug)]
pub struct BenchRepoArgs {
    /// The S3 server's endpoint (`http://127.0.0.1:9000`). Credentials come from the
    /// environment (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`); the MDS needs them too.
    #[arg(long)]
    pub endpoint: String,
    /// The bucket (it must exist).
    #[arg(long)]
    pub bucket: String,
    /// The key prefix of both datasets (`PREFIX/small/...`, `PREFIX/large/...`).
    #[arg(long, default_value = "bench-repo")]
    pub prefix: String,
    /// The store's region (default: `AWS_REGION`, `AWS_DEFAULT_REGION`, else us-east-1).
    #[arg(long)]
    pub region: Option<String>,
    /// The mount point of the file system `--fs` (its root).
    #[arg(long)]
    pub mount: PathBuf,
    /// The file system: `HOST:PORT:/FSNAME`.
    #[arg(long, default_value = "127.0.0.1:9400:/weft")]
    pub fs: String,
    /// A local directory for copy-then-read's downloads (a subdirectory is made and
    /// removed).
    #[arg(long)]
    pub local_dir: PathBuf,
    /// Objects of the small dataset.
    #[arg(long, default_value_t = 20_000)]
    pub small_count: u64,
    /// Size of each small object (K, M, G suffixes).
    #[arg(long, default_value = "128K", value_parser = crate::bench_io::parse_size)]
    pub small_size: u64,
    /// Objects of the large dataset.
    #[arg(long, default_value_t = 4)]
    pub large_count: u64,
    /// Size of each large object.
    #[arg(long, default_value = "1G", value_parser = crate::bench_io::parse_size)]
    pub large_size: u64,
    /// Reader threads (and concurrent downloads; the direct reader keeps 4 × this many
    /// GETs in flight).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub workers: u32,
    /// Size of one ranged GET of the copy and direct readers.
    #[arg(long, default_value = "8M", value_parser = crate::bench_io::parse_size)]
    pub range_size: u64,
    /// PUTs in flight while populating.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub put_in_flight: u32,
    /// `ImportEntries` batches in flight during the import.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub import_parallel: u32,
    /// Keys per listing page the import asks for (0: the import's default; AWS S3
    /// answers at most 1,000).
    #[arg(long, default_value_t = 0)]
    pub list_page: usize,
    /// The repository's chunk size (imported files larger than this are striped over
    /// several OSTs).
    #[arg(long, default_value = "1G", value_parser = crate::bench_io::parse_size)]
    pub chunk_size: u64,
    /// The objects are in the bucket already (from an earlier run with the same sizes).
    #[arg(long)]
    pub skip_populate: bool,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Stop after the import (populate and import only; no reads).
    #[arg(long)]
    pub import_only: bool,
    /// Rounds of the first epoch and the direct reader: after the first, every file is
    /// released again and both are measured again, in turn; the goals compare medians.
    /// Each dataset must be larger than the mount's data cache (`llite.*.max_cached_mb`),
    /// which the dataset's straight copy read before each round pushes its files out of.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=50))]
    pub rounds: u32,
}

#[derive(Debug, Serialize)]
struct Row {
    dataset: &'static str,
    phase: &'static str,
    files: u64,
    bytes: u64,
    seconds: f64,
    mb_s: f64,
    files_s: f64,
}

#[derive(Debug, Serialize)]
struct ImportFigures {
    objects: u64,
    created: u64,
    seconds: f64,
    objects_s: f64,
}

#[derive(Debug, Serialize)]
struct Goal {
    goal: String,
    value: f64,
    target: f64,
    met: bool,
}

#[derive(Debug, Serialize)]
struct Report {
    workers: u32,
    small: (u64, u64),
    large: (u64, u64),
    range_size: u64,
    /// Rounds of `epoch1` and `direct` (their goals compare medians).
    rounds: u32,
    cache_drop: bool,
    rows: Vec<Row>,
    import: Option<ImportFigures>,
    goals: Vec<Goal>,
}

impl Report {
    fn add(&mut self, dataset: Dataset, phase: &'static str, m: Moved) -> &Row {
        let s = m.elapsed.as_secs_f64().max(1e-9);
        self.rows.push(Row {
            dataset: dataset.name(),
            phase,
            files: m.files,
            bytes: m.bytes,
            seconds: m.elapsed.as_secs_f64(),
            mb_s: m.bytes as f64 / 1e6 / s,
            files_s: m.files as f64 / s,
        });
        let row = &self.rows[self.rows.len() - 1];
        eprintln!(
            "bench-repo: {:<6} {:<15} {:>9.2} s {:>9.1} MB/s {:>9.0} files/s",
            row.dataset, row.phase, row.seconds, row.mb_s, row.files_s
        );
        row
    }

    /// The figure of `phase`, the median of its rounds when it ran more than once.
    fn mb_s(&self, dataset: Dataset, phase: &str) -> Option<f64> {
        let mut all: Vec<f64> = self
            .rows
            .iter()
            .filter(|r| r.dataset == dataset.name() && r.phase == phase)
            .map(|r| r.mb_s)
            .collect();
        (!all.is_empty()).then(|| rounds::median(&mut all))
    }

    fn goal(&mut self, goal: String, value: f64, target: f64, met: bool) {
        self.goals.push(Goal {
            goal,
            value,
            target,
            met,
        });
    }
}

/// Runs every phase (see the module header) and prints the figures and the goals.
pub async fn run(args: BenchRepoArgs) -> Result<()> {
    if std::env::var_os("AWS_ACCESS_KEY_ID").is_none()
        || std::env::var_os("AWS_SECRET_ACCESS_KEY").is_none()
    {
        bail!("set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY for the S3 server");
    }
    let (mgs, fsname) = weft_fuse::parse_source(&args.fs).map_err(anyhow::Error::msg)?;
    let region = args
        .region
        .clone()
        .or_else(|| std::env::var("AWS_REGION").ok())
        .or_else(|| std::env::var("AWS_DEFAULT_REGION").ok())
        .unwrap_or_else(|| "us-east-1".to_string());
    let prefix = args.prefix.trim_matches('/').to_string();
    let bucket = s3::Bucket::open(&args.endpoint, &args.bucket, &region, &prefix)?;
    let workers = args.workers as usize;
    let sets: Vec<(Dataset, Vec<Obj>)> = [
        (Dataset::Small, args.small_count, args.small_size),
        (Dataset::Large, args.large_count, args.large_size),
    ]
    .into_iter()
    .filter(|&(_, count, _)| count > 0)
    .map(|(d, count, size)| (d, data::objects(d, count, size)))
    .collect();
    if sets.is_empty() {
        bail!("both datasets are empty");
    }
    let mut report = Report {
        workers: args.workers,
        small: (args.small_count, args.small_size),
        large: (args.large_count, args.large_size),
        range_size: args.range_size,
        rounds: args.rounds,
        cache_drop: data::drop_caches(),
        rows: Vec::new(),
        import: None,
        goals: Vec::new(),
    };
    if !report.cache_drop {
        eprintln!(
            "bench-repo: cannot drop the page cache (not root?): figures include cached reads"
        );
    }

    if !args.skip_populate {
        for (d, objs) in &sets {
            let m = bucket
                .populate(objs, args.put_in_flight as usize)
                .await
                .with_context(|| format!("populating the {} dataset", d.name()))?;
            report.add(*d, "populate", m);
        }
    }

    // A fresh directory linked to the bucket, and a plain one beside it.
    let client = Client::mount(&mgs, &fsname, crate::key::client_options()?)
        .await
        .with_context(|| format!("cannot reach file system '{fsname}' at {mgs}"))?;
    let root = Credentials::root();
    let base_name = format!(
        "bench-repo.{}.{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs()
    );
    let base = client
        .mkdir(Fid::ROOT, base_name.as_bytes(), 0o755, &root)
        .await
        .with_context(|| format!("cannot make /{base_name}"))?;
    let linked = client.mkdir(base.fid, b"repo", 0o755, &root).await?;
    client.mkdir(base.fid, b"straight", 0o755, &root).await?;
    let mnt_base = args.mount.join(&base_name);
    if !mnt_base.join("repo").is_dir() {
        bail!(
            "{} does not show /{base_name}: is {} a mount of {}?",
            mnt_base.display(),
            args.mount.display(),
            args.fs
        );
    }
    let spec = RepoSpec {
        path: format!("/{base_name}/repo"),
        url: if prefix.is_empty() {
            format!("s3://{}", args.bucket)
        } else {
            format!("s3://{}/{prefix}", args.bucket)
        },
        endpoint: Some(args.endpoint.clone()),
        region: Some(region.clone()),
        path_style: true,
        import_policy: RepoPolicy::default(),
        export_policy: RepoPolicy::default(),
        import_metadata: false,
        events: None,
        chunk_size: args.chunk_size,
    };
    let id = match client
        .cluster()
        .mgs()
        .connection()
        .call(
            &MgsRequest::RepoCreate {
                spec,
                dir: linked.fid,
            },
            Bytes::new(),
        )
        .await
        .context("creating the repository association")?
    {
        (MgsReply::RepoId(id), _) => id,
        (other, _) => bail!("the MGS answered RepoCreate with {other:?}"),
    };
    let repo = client
        .cluster()
        .refresh()
        .await?
        .repo(id)
        .cloned()
        .with_context(|| format!("repository {id} is not in the MGS's configuration"))?;

    // The import: both datasets in one listing.
    let expected: u64 = sets.iter().map(|(_, o)| o.len() as u64).sum();
    report.cache_drop &= data::drop_caches();
    let t = Instant::now();
    let opts = ImportOptions {
        parallel: args.import_parallel as usize,
        list_page: args.list_page,
        ..ImportOptions::default()
    };
    let p = import(&client, &repo, &opts, &|_| {})
        .await
        .context("the import failed")?;
    let took = t.elapsed();
    if p.failed > 0 || p.conflicts > 0 || p.created < expected {
        bail!(
            "the import created {} files of {expected} ({} listed, {} failed, {} conflicts)",
            p.created,
            p.listed,
            p.failed,
            p.conflicts
        );
    }
    let imp = ImportFigures {
        objects: p.listed,
        created: p.created,
        seconds: took.as_secs_f64(),
        objects_s: p.listed as f64 / took.as_secs_f64().max(1e-9),
    };
    eprintln!(
        "bench-repo: import of {} objects in {:.2} s: {:.0} objects/s",
        imp.objects, imp.seconds, imp.objects_s
    );
    report.import = Some(imp);
    if args.import_only {
        goals(&mut report, &[]);
        print(&report, args.json)?;
        return Ok(());
    }

    // Epochs 1 and 2 through the mount.
    let repo_mnt = mnt_base.join("repo");
    for phase in ["epoch1", "epoch2"] {
        for (d, objs) in &sets {
            let m = read_cold(&mut report, &repo_mnt, objs, workers)
                .with_context(|| format!("{phase} of the {} dataset", d.name()))?;
            report.add(*d, phase, m);
        }
    }

    // The same bytes written straight into weftfs.
    let straight = mnt_base.join("straight");
    for (d, objs) in &sets {
        let jobs = data::jobs(&straight, objs);
        let m = tokio::task::block_in_place(|| data::write_all(&jobs, workers, false))
            .with_context(|| format!("writing the {} dataset into weftfs", d.name()))?;
        report.add(*d, "straight-write", m);
        let m = read_cold(&mut report, &straight, objs, workers)
            .with_context(|| format!("reading the {} dataset written into weftfs", d.name()))?;
        report.add(*d, "straight-read", m);
    }

    // Copy-then-read; the downloads are removed after each dataset.
    let local = args.local_dir.join(&base_name);
    for (d, objs) in &sets {
        report.cache_drop &= data::drop_caches();
        let down = bucket
            .download(objs, &local, workers, args.range_size)
            .await
            .with_context(|| format!("downloading the {} dataset", d.name()))?;
        report.add(*d, "copy-download", down);
        let jobs = data::jobs(&local, objs);
        let read = tokio::task::block_in_place(|| data::read_all(&jobs, workers))
            .with_context(|| format!("reading the downloaded {} dataset", d.name()))?;
        report.add(*d, "copy-read", read);
        report.add(
            *d,
            "copy-then-read",
            Moved {
                files: read.files,
                bytes: read.bytes,
                elapsed: down.elapsed + read.elapsed,
            },
        );
        std::fs::remove_dir_all(&local)
            .with_context(|| format!("cannot remove {}", local.display()))?;
    }

    // The direct ranged-GET reader.
    for (d, objs) in &sets {
        direct(&bucket, &mut report, *d, objs, &args).await?;
    }

    // More rounds of the first epoch and the direct reader, in turn.
    let linked_path = format!("/{base_name}/repo");
    for round in 2..=args.rounds {
        for (d, objs) in &sets {
            rounds::release_all(&client, &linked_path, objs)
                .await
                .with_context(|| format!("releasing the {} dataset again", d.name()))?;
            // The straight copy pushes the released files out of the mount's data cache.
            let m = read_cold(&mut report, &straight, objs, workers)
                .with_context(|| format!("reading the {} dataset written into weftfs", d.name()))?;
            // Its own name: a figure of its own, not one of straight-read's samples.
            report.add(*d, "straight-reread", m);
            let before = rounds::restored_bytes(client.cluster()).await?;
            let m = read_cold(&mut report, &repo_mnt, objs, workers)
                .with_context(|| format!("epoch1 round {round} of the {} dataset", d.name()))?;
            let loaded = rounds::restored_bytes(client.cluster())
                .await?
                .saturating_sub(before);
            if loaded < m.bytes {
                bail!(
                    "epoch1 round {round} of the {} dataset: the MDTs loaded {loaded} bytes from \
                     the store for {} bytes read: part of it came from a cache (is the dataset \
                     smaller than the mount's llite.*.max_cached_mb?)",
                    d.name(),
                    m.bytes
                );
            }
            report.add(*d, "epoch1", m);
            direct(&bucket, &mut report, *d, objs, &args).await?;
        }
    }

    goals(&mut report, &sets);
    print(&report, args.json)?;
    eprintln!(
        "bench-repo: left /{base_name} in the file system (repository {id}, linked at /{base_name}/repo)"
    );
    Ok(())
}

/// Every file of `objs` below `dir` read whole by `workers` threads, the caches dropped
/// first.
fn read_cold(
    report: &mut Report,
    dir: &std::path::Path,
    objs: &[Obj],
    workers: usize,
) -> Result<Moved> {
    let jobs = data::jobs(dir, objs);
    report.cache_drop &= data::drop_caches();
    tokio::task::block_in_place(|| data::read_all(&jobs, workers))
}

/// The direct reader's phase over dataset `d` (`objs`), the caches dropped first.
async fn direct(
    bucket: &s3::Bucket,
    report: &mut Report,
    d: Dataset,
    objs: &[Obj],
    args: &BenchRepoArgs,
) -> Result<()> {
    report.cache_drop &= data::drop_caches();
    let m = bucket
        .direct(objs, args.workers as usize * 4, args.range_size)
        .await
        .with_context(|| format!("direct reads of the {} dataset", d.name()))?;
    report.add(d, "direct", m);
    Ok(())
}

/// The goals, from the figures.
fn goals(report: &mut Report, sets: &[(Dataset, Vec<Obj>)]) {
    if let Some(objects_s) = report.import.as_ref().map(|i| i.objects_s) {
        report.goal(
            "import objects/s >= 5000".into(),
            objects_s,
            5000.0,
            objects_s >= 5000.0,
        );
    }
    for (d, _) in sets {
        let n = d.name();
        let get = |phase| report.mb_s(*d, phase).unwrap_or(0.0);
        let (e1, e2) = (get("epoch1"), get("epoch2"));
        let (copy, direct, straight) = (get("copy-then-read"), get("direct"), get("straight-read"));
        report.goal(
            format!("{n}: epoch1 MB/s > copy-then-read MB/s"),
            e1,
            copy,
            e1 > copy,
        );
        report.goal(
            format!("{n}: epoch1 MB/s >= 0.8 x direct MB/s"),
            e1,
            0.8 * direct,
            e1 >= 0.8 * direct,
        );
        report.goal(
            format!("{n}: epoch2 MB/s >= 0.9 x straight-read MB/s"),
            e2,
            0.9 * straight,
            e2 >= 0.9 * straight,
        );
    }
}

fn print(report: &Report, json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(report)?);
        return Ok(());
    }
    println!(
        "weft bench-repo: small {} x {} B, large {} x {} B, {} workers, ranges {} B, caches {}",
        report.small.0,
        report.small.1,
        report.large.0,
        report.large.1,
        report.workers,
        report.range_size,
        if report.cache_drop {
            "dropped before each phase (not before copy-read)"
        } else {
            "NOT dropped (not root)"
        }
    );
    println!(
        "{:<8} {:<15} {:>10} {:>10} {:>10}",
        "dataset", "phase", "seconds", "MB/s", "files/s"
    );
    if let Some(i) = &report.import {
        println!(
            "{:<8} {:<15} {:>10.2} {:>10} {:>10.0}",
            "all", "import", i.seconds, "-", i.objects_s
        );
    }
    for r in &report.rows {
        println!(
            "{:<8} {:<15} {:>10.2} {:>10.1} {:>10.0}",
            r.dataset, r.phase, r.seconds, r.mb_s, r.files_s
        );
    }
    println!();
    if report.rounds > 1 {
        println!(
            "{} rounds of epoch1 and direct: the goals compare medians",
            report.rounds
        );
    }
    println!("{:<48} {:>10} {:>10}  met", "goal", "value", "target");
    for g in &report.goals {
        println!(
            "{:<48} {:>10.1} {:>10.1}  {}",
            g.goal,
            g.value,
            g.target,
            if g.met { "yes" } else { "NO" }
        );
    }
    Ok(())
}
