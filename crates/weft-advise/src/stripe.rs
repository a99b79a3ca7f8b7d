//! `weft advise stripe`: the stripe size and count for a shared file written in `W`-byte
//! pieces at rank-strided offsets, and the lock cost of POSIX (independent) writes against
//! MPI-IO two-phase aggregation.
//!
//! The stripe size is `S = W/k` for the smallest whole `k` that makes `S` at most 4 MiB and
//! a multiple of 64 KiB: then no two writers share a stripe, so no extent lock conflicts.

use crate::Calibration;
use crate::Error;
use crate::model::{
    conflict_fraction, misalignment_loss, posix_lock_cost, seed_misalignment_loss, two_phase_cost,
};
use crate::units::fmt_size_arg;
use serde::Serialize;

/// Stripe sizes are multiples of this (64 KiB).
pub const STRIPE_UNIT: u64 = 64 << 10;
/// The largest stripe size the advice aims for: a few bulk RPCs per stripe.
const STRIPE_TARGET: u64 = 4 << 20;

/// The pattern of writes.
#[derive(Debug, Clone, PartialEq)]
pub struct StripeJob {
    /// Bytes each writer writes per call (`W`).
    pub write_size: u64,
    /// Writer processes.
    pub writers: u32,
    /// Writer processes per client node.
    pub writers_per_node: u32,
    /// MPI-IO aggregators, if two-phase I/O is an option.
    pub aggregators: Option<u32>,
    /// The stripe size in use now, to show what it costs.
    pub current_stripe: Option<u64>,
}

/// The advice, as printed and as `--json`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StripeAdvice {
    /// Calibration date the figures come from.
    pub calibration_date: String,
    /// `W`.
    pub write_size: u64,
    /// Suggested stripe size (`W/k`).
    pub stripe_size: u64,
    /// `k`: stripes per write.
    pub stripes_per_write: u64,
    /// Suggested stripe count.
    pub stripe_count: u32,
    /// Whether `W` could be aligned at all (a multiple of 64 KiB).
    pub aligned: bool,
    /// The `weft setstripe` command.
    pub setstripe: String,
    /// Predicted bandwidth of the writers over the stripes, bytes/s.
    pub bandwidth: f64,
    /// POSIX independent writes: lock cost of one round of writes, seconds.
    pub posix_lock_s: f64,
    /// Two-phase: exchange plus lock cost of one round, seconds (with aggregators).
    pub two_phase_s: Option<f64>,
    /// Which is cheaper: `posix` or `two-phase`.
    pub cheaper: String,
    /// The current stripe size's costs, if one was given.
    pub current: Option<CurrentStripe>,
}

/// What the stripe size in use costs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CurrentStripe {
    /// The stripe size.
    pub stripe_size: u64,
    /// Share of writes sharing a stripe with another writer's (lock conflicts).
    pub conflict_fraction: f64,
    /// Throughput lost to extra stripes touched, in [0, 1).
    pub misalignment_loss: f64,
    /// The seed formula's loss `S/W`, for comparison (may exceed 1: absurd).
    pub seed_misalignment_loss: f64,
    /// POSIX lock cost of one round with this stripe size, seconds.
    pub posix_lock_s: f64,
}

/// `(k, S)`: the smallest `k` with `S = W/k` a multiple of 64 KiB and at most 4 MiB;
/// `None` if `W` is not a multiple of 64 KiB.
pub fn aligned_stripe(write: u64) -> Option<(u64, u64)> {
    if write == 0 || !write.is_multiple_of(STRIPE_UNIT) {
        return None;
    }
    let units = write / STRIPE_UNIT;
    let min_k = write.div_ceil(STRIPE_TARGET).max(1);
    (min_k..=units)
        .find(|k| units.is_multiple_of(*k))
        .map(|k| (k, write / k))
}

impl StripeJob {
    /// The advice for this pattern on the calibrated file system.
    pub fn advise(&self, cal: &Calibration) -> Result<StripeAdvice, Error> {
        if self.write_size == 0
            || self.writers == 0
            || self.writers_per_node == 0
            || self.aggregators == Some(0)
        {
            return Err(Error::Input(
                "write size, writers and aggregators must be positive".into(),
            ));
        }
        let (aligned, k, stripe_size) = match aligned_stripe(self.write_size) {
            Some((k, s)) => (true, k, s),
            // Not alignable: the stripe unit nearest below W (or one unit), and say so.
            None => {
                let s = (self.write_size / STRIPE_UNIT).max(1) * STRIPE_UNIT;
                (false, 1, s.min(STRIPE_TARGET))
            }
        };
        let lockers = self.aggregators.unwrap_or(self.writers).min(self.writers);
        let stripe_count = lockers.min(cal.osts).max(1);
        let p = f64::from(self.writers);
        let (nodes, per_node) = self.nodes();
        let bandwidth = cal.write_bw(nodes, per_node, f64::from(stripe_count));
        let phi = conflict_fraction(self.write_size, stripe_size);
        let posix_lock_s = posix_lock_cost(p, phi, cal.t_rpc, cal.t_lock);
        let two_phase_s = self.aggregators.map(|a| {
            let a = f64::from(a.min(self.writers));
            // Each aggregator collects P/A writes, one of them its own.
            let moved = self.write_size as f64 * (p - a).max(0.0);
            // Aggregators write P/A·W contiguous bytes: aligned when S divides that.
            let agg_write = self
                .write_size
                .saturating_mul(u64::from(self.writers) / a as u64);
            let phi_a = conflict_fraction(agg_write, stripe_size);
            two_phase_cost(p, a, moved, cal.exchange_bw, phi_a, cal.t_rpc, cal.t_lock)
        });
        let cheaper = match two_phase_s {
            Some(t) if t < posix_lock_s => "two-phase",
            _ => "posix",
        };
        let current = self.current_stripe.map(|s| CurrentStripe {
            stripe_size: s,
            conflict_fraction: conflict_fraction(self.write_size, s),
            misalignment_loss: misalignment_loss(self.write_size, s),
            seed_misalignment_loss: seed_misalignment_loss(self.write_size, s),
            posix_lock_s: posix_lock_cost(
                p,
                conflict_fraction(self.write_size, s),
                cal.t_rpc,
                cal.t_lock,
            ),
        });
        Ok(StripeAdvice {
            calibration_date: cal.date.clone(),
            write_size: self.write_size,
            stripe_size,
            stripes_per_write: k,
            stripe_count,
            aligned,
            setstripe: format!(
                "weft setstripe -c {stripe_count} -S {} FILE",
                fmt_size_arg(stripe_size)
            ),
            bandwidth,
            posix_lock_s,
            two_phase_s,
            cheaper: cheaper.into(),
            current,
        })
    }

    /// Client nodes and writers per node.
    fn nodes(&self) -> (f64, f64) {
        let per = self.writers_per_node.clamp(1, self.writers.max(1));
        (f64::from(self.writers.div_ceil(per)), f64::from(per))
    }

    /// Modelled bandwidth against stripe count, for the plot: `(count, bytes/s)`.
    pub fn bandwidth_curve(&self, cal: &Calibration, upto: u32) -> Vec<(f64, f64)> {
        let (nodes, per_node) = self.nodes();
        (1..=upto.max(2))
            .map(|k| (f64::from(k), cal.write_bw(nodes, per_node, f64::from(k))))
            .collect()
    }
}
