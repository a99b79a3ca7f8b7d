//! `weft advise calibrate`: measures one file system through this process's client library
//! and fits the advisor's constants, then stores them on the MGS (`advise.calibration`, a
//! persistent parameter, with the date).
//!
//! What is measured, in a scratch directory removed at the end:
//! - metadata: create + close, open + close and getattr of small files one at a time
//!   (`t_create`, `t_open`, `t_rpc`), and opens from many tasks (`md_ops_per_s`);
//! - lock conflicts: two client instances writing the same 4 KiB in turn, against each
//!   writing its own file (`T_lock`);
//! - RPC depth: one writer, one stripe, `max_rpcs_in_flight` 1..16 (`Q_max`, `f`);
//! - the write grid: 1, 2, 4, 8 writers into one shared file of 1, 2, 4... stripes
//!   (`B_single`, `C_overhead`, `κ`, the clients' side and the coupling, `η`);
//! - reads of the widest file by a fresh client (`read_bw`) and a loopback TCP stream
//!   (`exchange_bw`, the two-phase exchange).

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use clap::Args;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;
use weft_advise::fit::{GridFit, GridSample, fit_grid, fit_queue};
use weft_advise::model::depth_loss;
use weft_advise::plot::{Plot, Series};
use weft_advise::units::{fmt_rate, fmt_secs, parse_size};
use weft_advise::{Calibration, calib};
use weft_client::{Client, OpenOptions};
use weft_proto::Fid;
use weft_proto::layout::LayoutTemplate;
use weft_proto::mdt::{AccessMode, Credentials, FileKind};

/// Flags of `weft advise calibrate`.
#[derive(Args, Debug)]
pub struct CalibrateArgs {
    /// The file system: HOST:PORT:/FSNAME[/DIR] or a directory in a mount.
    #[arg(default_value = "127.0.0.1:9400:/weft")]
    pub fs: String,
    /// Bytes written per point of the write grid (match the writes you will ask about:
    /// caches make small writes faster).
    #[arg(long, default_value = "128M", value_parser = parse_size)]
    pub size: u64,
    /// Most writer tasks in the grid (1, 2, 4, ... up to this).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub max_writers: u32,
    /// Writes per grid point: the point's bandwidth is over all of them (a loaded machine
    /// varies from one write to the next).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=10))]
    pub repeat: u32,
    /// Measure and print, but do not store the result on the MGS.
    #[arg(long)]
    pub no_store: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Draw measured and modelled bandwidth against writers as SVG to this file.
    #[arg(long)]
    pub plot: Option<PathBuf>,
}

/// Everything `calibrate` measured and fitted (`--json`).
#[derive(Debug, Serialize)]
struct Report {
    calibration: Calibration,
    /// The write grid, measured.
    grid: Vec<GridSample>,
    /// The grid fit (its largest relative error).
    fit: GridFit,
    /// `(max_rpcs_in_flight, bytes/s)` of the depth sweep.
    depth: Vec<(f64, f64)>,
    /// Whether the calibration was stored on the MGS.
    stored: bool,
    /// Seconds the measurement took.
    elapsed_s: f64,
}

/// Bytes per write call.
const TRANSFER: u64 = 4 << 20;
/// Stripe size of every file written.
const STRIPE: u64 = 4 << 20;
/// Small files for the metadata measurements.
const MD_FILES: u32 = 64;

const RW_CREATE: OpenOptions = OpenOptions {
    access: AccessMode::ReadWrite,
    create: Some(0o644),
    exclusive: false,
    truncate: false,
    append: false,
};

/// Runs the measurement, fits and stores.
pub async fn run(args: CalibrateArgs) -> Result<()> {
    if args.size < args.max_writers as u64 * (1 << 20) {
        bail!("--size must give each writer at least 1 MiB");
    }
    let started = Instant::now();
    let target = crate::admin::fspath::resolve(&args.fs)?;
    let client = crate::admin::fspath::connect_client(&target).await?;
    let cred = Credentials::root();
    let base = client
        .resolve(&target.inner, true, &cred)
        .await
        .with_context(|| format!("{}: no such directory", target.display(&target.inner)))?;
    let osts = u32::try_from(
        client
            .cluster()
            .config()
            .targets_of(weft_proto::TargetKind::Ost)
            .count(),
    )
    .unwrap_or(u32::MAX);
    if osts == 0 {
        bail!("{} has no OST", target.source);
    }
    let name = format!(".advise-calibrate.{}", std::process::id());
    let dir = client
        .mkdir(base.fid, name.as_bytes(), 0o700, &cred)
        .await?
        .fid;
    let measured = measure(&client, dir, &target, osts, &args).await;
    // The scratch directory goes whatever happened.
    let cleaned = cleanup(&client, dir).await;
    let cleaned = cleaned.and(
        client
            .rmdir(base.fid, name.as_bytes(), &cred)
            .await
            .map_err(Into::into),
    );
    let (calibration, grid, fit, depth) = measured?;
    cleaned.context("removing the scratch directory")?;
    let mut stored = false;
    if !args.no_store {
        client
            .cluster()
            .mgs()
            .set_param(calib::PARAM_NAME.to_string(), Some(calibration.to_param()?))
            .await
            .context("storing the calibration on the MGS")?;
        stored = true;
    }
    let report = Report {
        calibration,
        grid,
        fit,
        depth,
        stored,
        elapsed_s: started.elapsed().as_secs_f64(),
    };
    if let Some(path) = &args.plot {
        super::write_plot(&grid_plot(&report), path)?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_text(&report, &target.source);
    }
    Ok(())
}

type Measured = (Calibration, Vec<GridSample>, GridFit, Vec<(f64, f64)>);

async fn measure(
    client: &Arc<Client>,
    dir: Fid,
    target: &crate::admin::fspath::FsPath,
    osts: u32,
    args: &CalibrateArgs,
) -> Result<Measured> {
    let (t_create, t_open, t_rpc, md_ops_per_s) = metadata(client, dir).await?;
    let t_lock = (lock_conflict(client, dir, target).await? - t_rpc).max(0.0);
    // RPC depth sweep: one writer, one stripe, a quarter of the grid size per depth.
    let depth_default = client
        .params()
        .get(weft_client::params::Param::MaxRpcsInFlight);
    let mut depth = Vec::new();
    let sweep_bytes = (args.size / 4).max(1 << 20);
    for q in [1u64, 2, 4, 8, 16] {
        client
            .params()
            .set("osc.*.max_rpcs_in_flight", &q.to_string())
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let r = write_file(client, dir, &format!("depth.{q}"), sweep_bytes, 1, 1).await;
        depth.push((q as f64, sweep_bytes as f64 / r?));
    }
    client
        .params()
        .set("osc.*.max_rpcs_in_flight", &depth_default.to_string())
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let (_, q_max) = fit_queue(&depth)?;
    let f = depth_loss(depth_default as f64, q_max);
    // The write grid.
    let mut writers = vec![1u32];
    while writers.last().is_some_and(|&w| w * 2 <= args.max_writers) {
        writers.push(writers[writers.len() - 1] * 2);
    }
    let mut stripes = vec![1u32];
    while stripes.last().is_some_and(|&s| s * 2 <= osts) {
        stripes.push(stripes[stripes.len() - 1] * 2);
    }
    if stripes.last() != Some(&osts) {
        stripes.push(osts);
    }
    let mut grid = Vec::new();
    for &k in &stripes {
        for &w in &writers {
            let mut secs = 0.0;
            for r in 0..args.repeat {
                // A file of its own per repeat, all removed at the end: an unlinked
                // file's objects are destroyed in the background, and that destruction
                // would share the disk with the next write.
                let name = format!("grid.{w}.{k}.{r}");
                // Each write starts with the servers' page cache clean, as a checkpoint
                // an interval after the last one does (this node's: servers elsewhere
                // flush on their own).
                tokio::task::spawn_blocking(rustix::fs::sync).await?;
                secs += write_file(client, dir, &name, args.size, w, k).await?;
            }
            grid.push(GridSample {
                writers: w,
                stripes: k,
                bw: args.size as f64 * f64::from(args.repeat) / secs,
            });
        }
    }
    let fit = fit_grid(&grid)?;
    // Reads of the widest file by a fresh client (its cache empty).
    let widest = format!("grid.{}.{}.0", writers[writers.len() - 1], osts);
    let reader = crate::admin::fspath::connect_client(target).await?;
    let read_bw = args.size as f64
        / read_file(&reader, dir, &widest, args.size, writers[writers.len() - 1]).await?;
    let exchange_bw = loopback_bandwidth(args.size.min(256 << 20)).await?;
    let calibration = Calibration {
        date: utc_now(),
        osts,
        b_single: fit.server_single / (1.0 - f),
        c_overhead: fit.c_overhead,
        kappa: fit.kappa,
        f,
        q_max,
        rpc_depth: u32::try_from(depth_default).unwrap_or(u32::MAX),
        rpc_bytes: client.params().rpc_bytes(),
        b_client: fit.b_client,
        c_client: fit.c_client,
        coupling: fit.coupling,
        eta: fit.eta,
        read_bw,
        t_create,
        t_open,
        md_ops_per_s,
        t_rpc,
        t_lock,
        exchange_bw,
    };
    calibration.validate()?;
    Ok((calibration, grid, fit, depth))
}

/// `(t_create, t_open, t_rpc, opens per second with many tasks)`.
async fn metadata(client: &Arc<Client>, dir: Fid) -> Result<(f64, f64, f64, f64)> {
    let cred = Credentials::root();
    let md = client.mkdir(dir, b"md", 0o755, &cred).await?.fid;
    let start = Instant::now();
    let mut fids = Vec::new();
    for i in 0..MD_FILES {
        let f = client
            .open_in(md, format!("f{i}").as_bytes(), RW_CREATE, None, &cred)
            .await?;
        fids.push(f.fid());
        f.close().await?;
    }
    let t_create = start.elapsed().as_secs_f64() / f64::from(MD_FILES);
    let start = Instant::now();
    for i in 0..MD_FILES {
        client
            .open_in(
                md,
                format!("f{i}").as_bytes(),
                OpenOptions::read(),
                None,
                &cred,
            )
            .await?
            .close()
            .await?;
    }
    let t_open = start.elapsed().as_secs_f64() / f64::from(MD_FILES);
    let start = Instant::now();
    for fid in &fids {
        client.getattr(*fid).await?;
    }
    let t_rpc = start.elapsed().as_secs_f64() / fids.len() as f64;
    let tasks = 8u32;
    let start = Instant::now();
    let mut handles = Vec::new();
    for t in 0..tasks {
        let (client, cred) = (client.clone(), cred.clone());
        handles.push(tokio::spawn(async move {
            for i in 0..MD_FILES {
                let name = format!("f{}", (i + t * 7) % MD_FILES);
                client
                    .open_in(md, name.as_bytes(), OpenOptions::read(), None, &cred)
                    .await?
                    .close()
                    .await?;
            }
            anyhow::Ok(())
        }));
    }
    for h in handles {
        h.await??;
    }
    let md_ops_per_s = f64::from(tasks * MD_FILES) / start.elapsed().as_secs_f64();
    Ok((t_create, t_open, t_rpc, md_ops_per_s))
}

/// Seconds a conflicting 4 KiB write takes beyond a free one: two client instances write
/// the same bytes of one file in turn (each write revokes the other's lock), against each
/// writing its own file in turn.
async fn lock_conflict(
    client: &Arc<Client>,
    dir: Fid,
    target: &crate::admin::fspath::FsPath,
) -> Result<f64> {
    const ROUNDS: u32 = 40;
    let cred = Credentials::root();
    let other = crate::admin::fspath::connect_client(target).await?;
    let page = vec![7u8; 4096];
    let layout = Some(LayoutTemplate::raid0(1, STRIPE, -1));
    let mut per_write = [0f64; 2];
    for (slot, names) in [(0, ["lock.a", "lock.b"]), (1, ["lock.s", "lock.s"])] {
        let a = client
            .open_in(dir, names[0].as_bytes(), RW_CREATE, layout.clone(), &cred)
            .await?;
        let b = other
            .open_in(dir, names[1].as_bytes(), RW_CREATE, layout.clone(), &cred)
            .await?;
        // One untimed round takes the first locks.
        a.write_at(0, &page).await?;
        b.write_at(0, &page).await?;
        let start = Instant::now();
        for _ in 0..ROUNDS {
            a.write_at(0, &page).await?;
            b.write_at(0, &page).await?;
        }
        per_write[slot] = start.elapsed().as_secs_f64() / f64::from(2 * ROUNDS);
        a.close().await?;
        b.close().await?;
    }
    Ok(per_write[1] - per_write[0])
}

/// Seconds to create `name` striped over `stripes` OSTs and write `bytes` into it from
/// `writers` tasks (disjoint regions, [`TRANSFER`]-sized calls) through the last close.
async fn write_file(
    client: &Arc<Client>,
    dir: Fid,
    name: &str,
    bytes: u64,
    writers: u32,
    stripes: u32,
) -> Result<f64> {
    let cred = Credentials::root();
    let layout = Some(LayoutTemplate::raid0(stripes as i32, STRIPE, -1));
    let buf = Bytes::from((0..TRANSFER).map(|i| (i % 251) as u8).collect::<Vec<u8>>());
    let region = bytes / u64::from(writers);
    let start = Instant::now();
    client
        .open_in(dir, name.as_bytes(), RW_CREATE, layout, &cred)
        .await?
        .close()
        .await?;
    let mut tasks = Vec::new();
    for w in 0..writers {
        let (client, cred, buf, name) =
            (client.clone(), cred.clone(), buf.clone(), name.to_string());
        tasks.push(tokio::spawn(async move {
            let f = client
                .open_in(dir, name.as_bytes(), RW_CREATE, None, &cred)
                .await?;
            let base = u64::from(w) * region;
            let mut done = 0;
            while done < region {
                let n = TRANSFER.min(region - done) as usize;
                f.write_at(base + done, &buf[..n]).await?;
                done += n as u64;
            }
            f.close().await?;
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(start.elapsed().as_secs_f64())
}

/// Seconds for `readers` tasks to read `bytes` of `name` (disjoint regions).
async fn read_file(
    client: &Arc<Client>,
    dir: Fid,
    name: &str,
    bytes: u64,
    readers: u32,
) -> Result<f64> {
    let cred = Credentials::root();
    let region = bytes / u64::from(readers);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for r in 0..readers {
        let (client, cred, name) = (client.clone(), cred.clone(), name.to_string());
        tasks.push(tokio::spawn(async move {
            let f = client
                .open_in(dir, name.as_bytes(), OpenOptions::read(), None, &cred)
                .await?;
            let base = u64::from(r) * region;
            let mut done = 0;
            while done < region {
                let got = f.read_at(base + done, TRANSFER.min(region - done)).await?;
                if got.is_empty() {
                    bail!("short read of {name} at {}", base + done);
                }
                done += got.len() as u64;
            }
            f.close().await?;
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(start.elapsed().as_secs_f64())
}

/// Bytes/s of one loopback TCP stream (what a two-phase exchange between processes of one
/// node costs here; between nodes it is the network's).
async fn loopback_bandwidth(bytes: u64) -> Result<f64> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let reader = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await?;
        let mut buf = vec![0u8; 1 << 20];
        let mut got = 0u64;
        loop {
            let n = s.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            got += n as u64;
        }
        anyhow::Ok(got)
    });
    let chunk = vec![1u8; 1 << 20];
    let start = Instant::now();
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    let mut sent = 0u64;
    while sent < bytes {
        s.write_all(&chunk).await?;
        sent += chunk.len() as u64;
    }
    s.shutdown().await?;
    let got = reader.await??;
    Ok(got as f64 / start.elapsed().as_secs_f64())
}

/// Removes everything the measurement may have left in the scratch directory (names it
/// did not get to are missing: not an error); the caller's rmdir finds anything else.
async fn cleanup(client: &Arc<Client>, dir: Fid) -> Result<()> {
    let cred = Credentials::root();
    if let Ok(md) = client.lookup(dir, b"md", &cred).await {
        for i in 0..MD_FILES {
            let _ = client
                .unlink(md.fid, format!("f{i}").as_bytes(), &cred)
                .await;
        }
        client.rmdir(dir, b"md", &cred).await?;
    }
    // Every file the measurement made (lock, depth and grid files), whatever it got to.
    let mut names = Vec::new();
    let mut cookie = 0;
    loop {
        let (page, eof) = client.readdir(dir, cookie, 1024, false, &cred).await?;
        if let Some(last) = page.last() {
            cookie = last.cookie;
        }
        names.extend(
            page.into_iter()
                .filter(|e| e.kind != FileKind::Directory)
                .map(|e| e.name),
        );
        if eof {
            break;
        }
    }
    for n in names {
        let _ = client.unlink(dir, &n, &cred).await;
    }
    Ok(())
}

/// Now, UTC, as RFC 3339 (`2026-11-26T04:00:00Z`).
fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86400, secs % 86400);
    // Howard Hinnant's civil-from-days.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

fn grid_plot(r: &Report) -> Plot {
    let mut stripes: Vec<u32> = r.grid.iter().map(|s| s.stripes).collect();
    stripes.dedup();
    let mut series = Vec::new();
    for k in stripes {
        let measured: Vec<(f64, f64)> = r
            .grid
            .iter()
            .filter(|s| s.stripes == k)
            .map(|s| (f64::from(s.writers), s.bw / 1e6))
            .collect();
        let model = measured
            .iter()
            .map(|&(w, _)| (w, r.calibration.write_bw(1.0, w, f64::from(k)) / 1e6))
            .collect();
        series.push(Series {
            name: format!("{k} stripes, measured"),
            points: measured,
        });
        series.push(Series {
            name: format!("{k} stripes, model"),
            points: model,
        });
    }
    Plot {
        title: "write bandwidth against writers".into(),
        x_label: "writers".into(),
        y_label: "MB/s".into(),
        series,
    }
}

fn print_text(r: &Report, source: &str) {
    let c = &r.calibration;
    println!(
        "calibrated {source} at {} in {:.1} s ({} OSTs)",
        c.date, r.elapsed_s, c.osts
    );
    println!(
        "  B_single {}  C_overhead {:.3}  kappa {:.4}  f {:.3}  Q_max {:.2} RPCs  eta {:.3}",
        fmt_rate(c.b_single),
        c.c_overhead,
        c.kappa,
        c.f,
        c.q_max,
        c.eta
    );
    println!(
        "  client: B {} per writer, C {:.3}, coupling {:.2}; read {}",
        fmt_rate(c.b_client),
        c.c_client,
        c.coupling,
        fmt_rate(c.read_bw)
    );
    println!(
        "  metadata: create {}  open {}  getattr {}  {:.0} opens/s; T_lock {}; exchange {}",
        fmt_secs(c.t_create),
        fmt_secs(c.t_open),
        fmt_secs(c.t_rpc),
        c.md_ops_per_s,
        fmt_secs(c.t_lock),
        fmt_rate(c.exchange_bw)
    );
    println!("  writers stripes   measured      model");
    for s in &r.grid {
        println!(
            "  {:>7} {:>7} {:>10} {:>10}",
            s.writers,
            s.stripes,
            fmt_rate(s.bw),
            fmt_rate(c.write_bw(1.0, f64::from(s.writers), f64::from(s.stripes)))
        );
    }
    println!(
        "  largest model error {:.1} %; {}",
        r.fit.max_rel_err * 100.0,
        if r.stored {
            format!("stored on the MGS as {}", calib::PARAM_NAME)
        } else {
            "not stored (--no-store)".to_string()
        }
    );
}
