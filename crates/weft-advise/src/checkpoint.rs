//! `weft advise checkpoint`: how long a training job's checkpoint stalls its GPUs on this
//! file system, what bandwidth and how many OSTs a target stall needs, and the layout and
//! client settings to write it with.
//!
//! The checkpoint is `params × bytes_per_param` bytes written `replicas` times, a file per
//! writer (as sharded checkpoints are), by `writers_per_node` processes on each node.

use crate::Calibration;
use crate::Error;
use crate::model::{checkpoint_stall, rpc_depth};
use crate::units::fmt_size_arg;
use serde::Serialize;

/// What the job writes.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckpointJob {
    /// Model parameters.
    pub params: f64,
    /// Bytes per parameter in the checkpoint (weights, optimiser state: 14 for mixed-precision
    /// Adam with fp32 master weights... without gradients).
    pub bytes_per_param: f64,
    /// GPU ranks of the job.
    pub ranks: u32,
    /// GPUs (ranks) per node.
    pub gpus_per_node: u32,
    /// Ranks of a node that write.
    pub writers_per_node: u32,
    /// Seconds between checkpoints.
    pub interval: f64,
    /// The stall wanted, if any.
    pub target_stall: Option<f64>,
    /// Copies written.
    pub replicas: u32,
}

/// The advice, as printed and as `--json`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CheckpointAdvice {
    /// Calibration date the figures come from (`seed` without one).
    pub calibration_date: String,
    /// Bytes of one checkpoint (before replicas).
    pub checkpoint_bytes: f64,
    /// Client nodes.
    pub nodes: u32,
    /// Writer processes in all.
    pub writers: u32,
    /// Bytes each writer's file holds.
    pub file_bytes: f64,
    /// OSTs of the file system.
    pub osts: u32,
    /// Stripes per file of the suggested layout.
    pub stripe_count: u32,
    /// Stripe size of the suggested layout.
    pub stripe_size: u64,
    /// Predicted aggregate write bandwidth, bytes/s.
    pub bandwidth: f64,
    /// Predicted stall per checkpoint, seconds.
    pub stall_s: f64,
    /// GPU hours lost a day to checkpoint stalls.
    pub gpu_hours_lost_per_day: f64,
    /// Share of wall time lost.
    pub fraction_lost: f64,
    /// The target, if given.
    pub target_stall_s: Option<f64>,
    /// Bandwidth the target needs, bytes/s.
    pub needed_bandwidth: Option<f64>,
    /// OSTs (of the calibrated kind) the target needs; `None` if no number reaches it.
    pub needed_osts: Option<u32>,
    /// Whether this file system already meets the target.
    pub target_met: Option<bool>,
    /// Most bandwidth any number of such OSTs gives these clients, bytes/s.
    pub bandwidth_limit: f64,
    /// The `weft setstripe` command for the checkpoint directory.
    pub setstripe: String,
    /// The `weft set_param` commands for every client node.
    pub set_param: Vec<String>,
}

/// Largest OST count the search for a target looks at.
const MAX_OSTS: u32 = 100_000;

impl CheckpointJob {
    fn check(&self) -> Result<(), Error> {
        let finite = [self.params, self.bytes_per_param, self.interval];
        if finite.iter().any(|v| !(v.is_finite() && *v > 0.0)) {
            return Err(Error::Input(
                "sizes and the interval must be positive".into(),
            ));
        }
        if self.ranks == 0
            || self.gpus_per_node == 0
            || self.writers_per_node == 0
            || self.replicas == 0
        {
            return Err(Error::Input(
                "ranks, GPUs per node, writers per node and replicas must be positive".into(),
            ));
        }
        if self
            .target_stall
            .is_some_and(|t| !(t.is_finite() && t > 0.0))
        {
            return Err(Error::Input("the target stall must be positive".into()));
        }
        Ok(())
    }

    /// The advice for this job on the calibrated file system, a file per writer with the
    /// advisor's stripe count.
    pub fn advise(&self, cal: &Calibration) -> Result<CheckpointAdvice, Error> {
        self.advise_layout(cal, false, None)
    }

    /// The advice for a given layout: one file `shared` by every writer or a file each, and
    /// `stripes` per file (`None`: the advisor's choice).
    pub fn advise_layout(
        &self,
        cal: &Calibration,
        shared: bool,
        stripes: Option<u32>,
    ) -> Result<CheckpointAdvice, Error> {
        self.check()?;
        if stripes == Some(0) {
            return Err(Error::Input("the stripe count must be positive".into()));
        }
        let bytes = self.params * self.bytes_per_param;
        let nodes = self.ranks.div_ceil(self.gpus_per_node);
        let per_node = self
            .writers_per_node
            .min(self.gpus_per_node)
            .min(self.ranks);
        let writers = nodes.saturating_mul(per_node);
        let file_bytes = if shared {
            bytes
        } else {
            bytes / f64::from(writers)
        };
        let stripe_size: u64 = 4 << 20;
        // A file per writer: with as many files as OSTs, one stripe each spreads them; with
        // fewer, each file is striped over its share of the OSTs.
        let files = if shared { 1 } else { writers };
        let stripe_count = stripes.unwrap_or_else(|| cal.osts.div_ceil(files).clamp(1, cal.osts));
        let used = files.saturating_mul(stripe_count).min(cal.osts).max(1);
        let (n, p) = (f64::from(nodes), f64::from(per_node));
        let total = bytes * f64::from(self.replicas);
        let stall_at = |osts: f64| {
            cal.t_create + checkpoint_stall(total, 1.0, cal.model_bw(n, p, osts), cal.eta)
        };
        let bandwidth = cal.write_bw(n, p, f64::from(used));
        let stall_s = stall_at(f64::from(used));
        let per_day = 86400.0 / self.interval.max(stall_s);
        let gpu_hours_lost_per_day = f64::from(self.ranks) * stall_s * per_day / 3600.0;
        let bandwidth_limit = cal.write_bw(n, p, f64::from(MAX_OSTS));
        let (mut needed_bandwidth, mut needed_osts, mut target_met) = (None, None, None);
        if let Some(t) = self.target_stall {
            let data_time = t - cal.t_create;
            needed_bandwidth = Some(if data_time > 0.0 {
                total / data_time
            } else {
                f64::INFINITY
            });
            target_met = Some(stall_s <= t);
            // Smallest OST count whose stall meets the target (the stall falls as OSTs
            // are added, so a binary search).
            if stall_at(f64::from(MAX_OSTS)) <= t {
                let (mut lo, mut hi) = (1u32, MAX_OSTS);
                while lo < hi {
                    let mid = lo + (hi - lo) / 2;
                    if stall_at(f64::from(mid)) <= t {
                        hi = mid;
                    } else {
                        lo = mid + 1;
                    }
                }
                needed_osts = Some(lo);
            }
        }
        let clients_per_ost =
            (f64::from(writers) * f64::from(stripe_count) / f64::from(used)).min(f64::from(nodes));
        let depth = rpc_depth(cal.q_max, clients_per_ost);
        // Dirty data to keep every RPC slot of every OST a node writes to busy, twice over.
        let osts_per_node = if shared {
            stripe_count
        } else {
            per_node.saturating_mul(stripe_count).min(cal.osts)
        };
        let dirty_mb = ((u64::from(depth) * cal.rpc_bytes * u64::from(osts_per_node) * 2) >> 20)
            .clamp(64, 1 << 16);
        let setstripe = if stripe_count > 1 && file_bytes > 256.0 * 1048576.0 {
            // PFL: the small files of a checkpoint (metadata, RNG state) stay on one OST;
            // the shards' bulk spreads.
            format!(
                "weft setstripe -E 256M -c 1 -S {s} -E -1 -c {stripe_count} -S {s} CHECKPOINT_DIR",
                s = fmt_size_arg(stripe_size)
            )
        } else {
            format!(
                "weft setstripe -c {stripe_count} -S {} CHECKPOINT_DIR",
                fmt_size_arg(stripe_size)
            )
        };
        Ok(CheckpointAdvice {
            calibration_date: cal.date.clone(),
            checkpoint_bytes: bytes,
            nodes,
            writers,
            file_bytes,
            osts: cal.osts,
            stripe_count,
            stripe_size,
            bandwidth,
            stall_s,
            gpu_hours_lost_per_day,
            fraction_lost: stall_s / self.interval.max(stall_s),
            target_stall_s: self.target_stall,
            needed_bandwidth,
            needed_osts,
            target_met,
            bandwidth_limit,
            setstripe,
            set_param: vec![
                format!("weft set_param osc.*.max_rpcs_in_flight={depth}"),
                format!("weft set_param osc.*.max_dirty_mb={dirty_mb}"),
            ],
        })
    }

    /// Stall against OST count, for the plot: `(osts, seconds)` from 1 to `upto`.
    pub fn stall_curve(&self, cal: &Calibration, upto: u32) -> Vec<(f64, f64)> {
        let nodes = self.ranks.div_ceil(self.gpus_per_node.max(1));
        let per_node = self
            .writers_per_node
            .min(self.gpus_per_node)
            .min(self.ranks);
        let total = self.params * self.bytes_per_param * f64::from(self.replicas);
        (1..=upto.max(2))
            .map(|k| {
                let bw = cal.model_bw(f64::from(nodes), f64::from(per_node), f64::from(k));
                (
                    f64::from(k),
                    cal.t_create + checkpoint_stall(total, 1.0, bw, cal.eta),
                )
            })
            .collect()
    }
}
