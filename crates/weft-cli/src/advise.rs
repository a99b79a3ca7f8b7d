//! `weft advise`: the checkpoint and stripe advisor. `calibrate` measures the constants of
//! the models on a running file system and stores them on its MGS ([`calibrate`]);
//! `checkpoint`, `stripe` and `io` predict from them (the models are in `weft-advise`).
//! Every verb prints text, or JSON with `--json`, and draws its curve with `--plot FILE.svg`.

pub mod calibrate;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use serde::Serialize;
use std::path::{Path, PathBuf};
use weft_advise::checkpoint::CheckpointJob;
use weft_advise::dataset::DatasetJob;
use weft_advise::plot::{Plot, Series};
use weft_advise::stripe::StripeJob;
use weft_advise::units::{
    fmt_bytes_si, fmt_rate, fmt_secs, parse_count, parse_duration, parse_size,
};
use weft_advise::{Calibration, calib};

/// Flags of `weft advise`.
#[derive(Args, Debug)]
pub struct AdviseArgs {
    #[command(subcommand)]
    pub verb: AdviseVerb,
}

/// The advisor's verbs.
#[derive(Subcommand, Debug)]
pub enum AdviseVerb {
    /// Measure this file system's bandwidths and latencies (< 60 s), fit the models'
    /// constants and store them on the MGS.
    Calibrate(calibrate::CalibrateArgs),
    /// Checkpoint stall, GPU hours lost, what a target stall needs, layout and client knobs.
    Checkpoint(CheckpointArgs),
    /// Aligned stripe size and count for a shared file; POSIX against two-phase I/O.
    Stripe(StripeArgs),
    /// A training data set: epoch time, metadata load, whether DNE or PCC helps.
    Io(IoArgs),
}

/// Where the constants come from, and how to show the advice (every predicting verb).
#[derive(Args, Debug)]
pub struct Source {
    /// The file system whose stored calibration to use: HOST:PORT:/FSNAME or a path in a
    /// mount (without it or --calibration: the seed's example constants).
    #[arg(long)]
    pub fs: Option<String>,
    /// A calibration saved with `weft advise calibrate --json` (its `calibration` object).
    #[arg(long, conflicts_with = "fs")]
    pub calibration: Option<PathBuf>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Draw the curve as SVG to this file.
    #[arg(long)]
    pub plot: Option<PathBuf>,
}

/// Flags of `weft advise checkpoint`.
#[derive(Args, Debug)]
pub struct CheckpointArgs {
    /// Model parameters (e.g. 70e9).
    #[arg(long, value_parser = parse_count, required_unless_present = "bytes")]
    pub model_params: Option<f64>,
    /// Checkpoint bytes per parameter (weights and optimiser state).
    #[arg(long, default_value = "14", value_parser = parse_count)]
    pub bytes_per_param: f64,
    /// The checkpoint's size instead of parameters × bytes per parameter (e.g. 4G).
    #[arg(long, value_parser = parse_size, conflicts_with = "model_params")]
    pub bytes: Option<u64>,
    /// GPU ranks of the job.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub ranks: u32,
    /// GPUs (ranks) per node.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..))]
    pub gpus_per_node: u32,
    /// Ranks of each node that write.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..))]
    pub writers_per_node: u32,
    /// Time between checkpoints (e.g. 1h, 30m).
    #[arg(long, default_value = "1h", value_parser = parse_duration)]
    pub interval: f64,
    /// The stall wanted (e.g. 60s): the bandwidth and OSTs it needs.
    #[arg(long, value_parser = parse_duration)]
    pub target_stall: Option<f64>,
    /// Copies of the checkpoint written.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=16))]
    pub replicas: u32,
    /// All writers write one shared file (default: a file per writer).
    #[arg(long)]
    pub shared: bool,
    /// The stripe count to predict for (default: the advisor's choice).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=2000))]
    pub stripe_count: Option<u32>,
    #[command(flatten)]
    pub source: Source,
}

/// Flags of `weft advise stripe`.
#[derive(Args, Debug)]
pub struct StripeArgs {
    /// Bytes each writer writes per call (the aggregators' write size `W`).
    #[arg(long, value_parser = parse_size)]
    pub write_size: u64,
    /// Writer processes.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub writers: u32,
    /// Writer processes per client node.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..))]
    pub writers_per_node: u32,
    /// MPI-IO aggregators (compares two-phase I/O with POSIX).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub aggregators: Option<u32>,
    /// The stripe size in use now, to show what it costs.
    #[arg(long, value_parser = parse_size)]
    pub stripe_size: Option<u64>,
    #[command(flatten)]
    pub source: Source,
}

/// Flags of `weft advise io`.
#[derive(Args, Debug)]
pub struct IoArgs {
    /// Files in the data set.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub files: u64,
    /// Mean file size (e.g. 100K).
    #[arg(long, value_parser = parse_size)]
    pub file_size: u64,
    /// Reader processes.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub readers: u32,
    /// Reader processes per client node.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..))]
    pub readers_per_node: u32,
    /// MDTs serving the data set's directories.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub mdts: u32,
    /// Local cache per client node PCC could use (e.g. 100G; default none).
    #[arg(long, value_parser = parse_size)]
    pub cache_per_node: Option<u64>,
    #[command(flatten)]
    pub source: Source,
}

/// Runs a verb.
pub async fn run(args: AdviseArgs) -> Result<()> {
    match args.verb {
        AdviseVerb::Calibrate(a) => calibrate::run(a).await,
        AdviseVerb::Checkpoint(a) => checkpoint(a).await,
        AdviseVerb::Stripe(a) => stripe(a).await,
        AdviseVerb::Io(a) => io(a).await,
    }
}

/// The constants to advise with: a file's, the file system's stored ones, or the seed's.
async fn load(source: &Source) -> Result<Calibration> {
    if let Some(path) = &source.calibration {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let v: serde_json::Value = serde_json::from_str(&text)
            .with_context(|| format!("{} is not JSON", path.display()))?;
        // Either `calibrate --json`'s whole output or the calibration alone.
        let c = v.get("calibration").unwrap_or(&v).to_string();
        return Calibration::from_param(&c).with_context(|| path.display().to_string());
    }
    let Some(fs) = &source.fs else {
        return Ok(Calibration::seed());
    };
    let target = crate::admin::fspath::resolve(fs)?;
    let cluster = crate::admin::connect(&target.mgs, &target.fsname).await?;
    let config = cluster.config();
    let Some(value) = config.params.get(calib::PARAM_NAME) else {
        bail!(
            "{} has no calibration: run `weft advise calibrate {}` first",
            target.source,
            target.source
        );
    };
    Calibration::from_param(value)
        .with_context(|| format!("{}: {}", target.source, calib::PARAM_NAME))
}

/// Prints JSON or text, and draws the plot if asked.
fn emit<T: Serialize>(source: &Source, advice: &T, text: &str, plot: Plot) -> Result<()> {
    if let Some(path) = &source.plot {
        write_plot(&plot, path)?;
    }
    if source.json {
        println!("{}", serde_json::to_string_pretty(advice)?);
    } else {
        print!("{text}");
    }
    Ok(())
}

/// Writes a plot, with the path in the error.
pub(crate) fn write_plot(plot: &Plot, path: &Path) -> Result<()> {
    plot.write(path)
        .with_context(|| format!("drawing {}", path.display()))
}

fn constants_line(cal: &Calibration) -> String {
    if cal.date == "seed" {
        "constants: the seed's examples (no calibration given: use --fs or --calibration)\n"
            .to_string()
    } else {
        format!("constants: calibrated {} ({} OSTs)\n", cal.date, cal.osts)
    }
}

async fn checkpoint(a: CheckpointArgs) -> Result<()> {
    let mut cal = load(&a.source).await?;
    let (params, bytes_per_param) = match (a.bytes, a.model_params) {
        (Some(b), _) => (b as f64, 1.0),
        (None, Some(p)) => (p, a.bytes_per_param),
        (None, None) => bail!("give --model-params or --bytes"),
    };
    let job = CheckpointJob {
        params,
        bytes_per_param,
        ranks: a.ranks,
        gpus_per_node: a.gpus_per_node,
        writers_per_node: a.writers_per_node,
        interval: a.interval,
        target_stall: a.target_stall,
        replicas: a.replicas,
    };
    if let Some(k) = a.stripe_count
        && k > cal.osts
    {
        bail!("--stripe-count {k}: the file system has {} OSTs", cal.osts);
    }
    let advice = if a.shared || a.stripe_count.is_some() {
        job.advise_layout(&cal, a.shared, a.stripe_count)?
    } else {
        job.advise(&cal)?
    };
    cal.osts = cal.osts.max(1);
    let upto = advice
        .needed_osts
        .unwrap_or(cal.osts)
        .max(cal.osts)
        .saturating_mul(2)
        .min(4096);
    let plot = Plot {
        title: "checkpoint stall against OSTs".into(),
        x_label: "OSTs".into(),
        y_label: "stall (s)".into(),
        series: vec![Series {
            name: format!(
                "{} in {} writers",
                fmt_bytes_si(advice.checkpoint_bytes),
                advice.writers
            ),
            points: job.stall_curve(&cal, upto),
        }],
    };
    let mut t = constants_line(&cal);
    t += &format!(
        "checkpoint: {} x {}, {} writers on {} nodes, {} per file\n",
        fmt_bytes_si(advice.checkpoint_bytes),
        a.replicas,
        advice.writers,
        advice.nodes,
        fmt_bytes_si(advice.file_bytes)
    );
    t += &format!(
        "predicted: {} at {} over {} stripe(s) per file; stall {} every {}\n",
        fmt_bytes_si(advice.checkpoint_bytes * f64::from(a.replicas)),
        fmt_rate(advice.bandwidth),
        advice.stripe_count,
        fmt_secs(advice.stall_s),
        fmt_secs(a.interval)
    );
    t += &format!(
        "GPU hours lost per day: {:.1} ({:.2} % of the job's time)\n",
        advice.gpu_hours_lost_per_day,
        advice.fraction_lost * 100.0
    );
    if let Some(target) = advice.target_stall_s {
        t += &format!(
            "target {}: needs {}; ",
            fmt_secs(target),
            fmt_rate(advice.needed_bandwidth.unwrap_or(f64::INFINITY))
        );
        t += &match (advice.target_met, advice.needed_osts) {
            (Some(true), _) => "met by this file system\n".to_string(),
            (_, Some(n)) => format!("needs {n} OSTs of this kind (has {})\n", advice.osts),
            _ => format!(
                "no number of these OSTs reaches it (at most {} for these clients)\n",
                fmt_rate(advice.bandwidth_limit)
            ),
        };
    }
    t += &format!("layout:  {}\n", advice.setstripe);
    for p in &advice.set_param {
        t += &format!("clients: {p}\n");
    }
    emit(&a.source, &advice, &t, plot)
}

async fn stripe(a: StripeArgs) -> Result<()> {
    let cal = load(&a.source).await?;
    let job = StripeJob {
        write_size: a.write_size,
        writers: a.writers,
        writers_per_node: a.writers_per_node,
        aggregators: a.aggregators,
        current_stripe: a.stripe_size,
    };
    let advice = job.advise(&cal)?;
    let plot = Plot {
        title: "write bandwidth against stripe count".into(),
        x_label: "stripe count".into(),
        y_label: "bandwidth (MB/s)".into(),
        series: vec![Series {
            name: format!("{} writers", a.writers),
            points: job
                .bandwidth_curve(&cal, cal.osts.saturating_mul(2).clamp(2, 4096))
                .into_iter()
                .map(|(k, b)| (k, b / 1e6))
                .collect(),
        }],
    };
    let mut t = constants_line(&cal);
    if advice.aligned {
        t += &format!(
            "stripe size {} (W/{}: no two writers share a stripe), count {}\n",
            weft_advise::units::fmt_size_arg(advice.stripe_size),
            advice.stripes_per_write,
            advice.stripe_count
        );
    } else {
        t += &format!(
            "W = {} B is not a multiple of 64 KiB: no stripe size avoids shared stripes; \
             pad writes to a multiple of 64 KiB (using {} meanwhile)\n",
            a.write_size,
            weft_advise::units::fmt_size_arg(advice.stripe_size)
        );
    }
    t += &format!("layout: {}\n", advice.setstripe);
    t += &format!("predicted bandwidth: {}\n", fmt_rate(advice.bandwidth));
    t += &format!(
        "POSIX lock cost per round of writes: {}\n",
        fmt_secs(advice.posix_lock_s)
    );
    if let Some(tp) = advice.two_phase_s {
        t += &format!("two-phase (exchange + locks) per round: {}\n", fmt_secs(tp));
    }
    t += &format!("cheaper: {}\n", advice.cheaper);
    if let Some(c) = &advice.current {
        t += &format!(
            "now ({}): {:.1} % of writes share a stripe, POSIX lock cost {}, {:.1} % more \
             stripes touched (the seed formula would say {:.0} % lost)\n",
            weft_advise::units::fmt_size_arg(c.stripe_size),
            c.conflict_fraction * 100.0,
            fmt_secs(c.posix_lock_s),
            c.misalignment_loss * 100.0,
            c.seed_misalignment_loss * 100.0
        );
    }
    emit(&a.source, &advice, &t, plot)
}

async fn io(a: IoArgs) -> Result<()> {
    let cal = load(&a.source).await?;
    let job = DatasetJob {
        files: a.files,
        file_size: a.file_size,
        readers: a.readers,
        readers_per_node: a.readers_per_node,
        mdts: a.mdts,
        cache_per_node: a.cache_per_node.unwrap_or(0),
    };
    let advice = job.advise(&cal)?;
    let plot = Plot {
        title: "epoch time against readers".into(),
        x_label: "readers".into(),
        y_label: "epoch (s)".into(),
        series: vec![Series {
            name: format!("{} files", a.files),
            points: job.epoch_curve(&cal, a.readers.saturating_mul(2).clamp(2, 4096)),
        }],
    };
    let mut t = constants_line(&cal);
    t += &format!(
        "epoch: {} ({} of data at {}, {} of opens)\n",
        fmt_secs(advice.epoch_s),
        fmt_bytes_si(advice.dataset_bytes),
        fmt_rate(advice.read_bandwidth),
        fmt_secs(advice.metadata_time_s)
    );
    t += &format!(
        "metadata load: {:.0} opens/s, {:.0} % of {} MDT(s)\n",
        advice.opens_per_s,
        advice.mdt_load * 100.0,
        a.mdts
    );
    t += &format!(
        "DNE helps: {}; PCC helps: {}\n",
        if advice.dne_helps { "yes" } else { "no" },
        if advice.pcc_helps { "yes" } else { "no" }
    );
    for r in &advice.reasons {
        t += &format!("  {r}\n");
    }
    emit(&a.source, &advice, &t, plot)
}
