//! Fitting the models' constants to measurements: the write-bandwidth grid (writers ×
//! stripes) for `B_single·(1−f)`, `C_overhead`, `B_client`, `C_client` and the coupling, by
//! least squares on the logarithm (relative errors count alike at every size); the RPC
//! depth sweep for `X_max` and `Q_max`, by linear regression of `1/X` on `1/Q`.

use crate::Error;
use crate::model::{client_throughput, combine, striped_throughput_usl};
use serde::{Deserialize, Serialize};

/// One measured write: `writers` processes of one client node into a file striped over
/// `stripes` OSTs, at `bw` bytes/s.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GridSample {
    /// Writer processes (tasks) of the node.
    pub writers: u32,
    /// Stripes of the file, each on its own OST.
    pub stripes: u32,
    /// Measured bandwidth, bytes/s.
    pub bw: f64,
}

/// The constants fitted from a grid.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GridFit {
    /// `(1 − f)·B_single`: one OST's bandwidth at the measured depth.
    pub server_single: f64,
    /// `C_overhead`.
    pub c_overhead: f64,
    /// `κ`, the coherency term.
    pub kappa: f64,
    /// One writer's bandwidth when the servers are not the limit.
    pub b_client: f64,
    /// Contention between writers of the node.
    pub c_client: f64,
    /// Coupling exponent of the two sides, in [1, 16].
    pub coupling: f64,
    /// Geometric mean of measured over modelled bandwidth.
    pub eta: f64,
    /// Largest relative error of the model over the samples.
    pub max_rel_err: f64,
}

impl GridFit {
    /// The modelled bandwidth of `writers` over `stripes`.
    pub fn predict(&self, writers: f64, stripes: f64) -> f64 {
        combine(
            client_throughput(writers, self.b_client, self.c_client),
            striped_throughput_usl(
                stripes,
                self.server_single,
                0.0,
                self.c_overhead,
                self.kappa,
            ),
            self.coupling,
        )
    }
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

fn logit(p: f64) -> f64 {
    let p = p.clamp(1e-6, 1.0 - 1e-6);
    (p / (1.0 - p)).ln()
}

/// Unconstrained parameters → constants: logs for bandwidths, sigmoids for fractions and
/// the coupling.
fn decode(x: &[f64; 6]) -> GridFit {
    GridFit {
        server_single: x[0].exp(),
        c_overhead: sigmoid(x[1]),
        kappa: sigmoid(x[5]),
        b_client: x[2].exp(),
        c_client: sigmoid(x[3]),
        coupling: 1.0 + 15.0 * sigmoid(x[4]),
        eta: 1.0,
        max_rel_err: 0.0,
    }
}

fn sse(fit: &GridFit, samples: &[GridSample]) -> f64 {
    samples
        .iter()
        .map(|s| {
            let r = (fit.predict(f64::from(s.writers), f64::from(s.stripes)) / s.bw).ln();
            r * r
        })
        .sum::<f64>()
}

/// Fits the bandwidth model to a grid of at least 6 samples with positive bandwidths.
pub fn fit_grid(samples: &[GridSample]) -> Result<GridFit, Error> {
    if samples.len() < 6 {
        return Err(Error::Fit(format!(
            "{} samples; the model has 6 constants",
            samples.len()
        )));
    }
    if samples
        .iter()
        .any(|s| !(s.bw.is_finite() && s.bw > 0.0) || s.writers == 0 || s.stripes == 0)
    {
        return Err(Error::Fit("a sample has no positive bandwidth".into()));
    }
    let top = samples.iter().map(|s| s.bw).fold(0.0, f64::max);
    let cost = |x: &[f64; 6]| sse(&decode(x), samples);
    let mut best: Option<([f64; 6], f64)> = None;
    // A few starts: each side the limit, and both alike.
    for (cs, cc, n, k) in [
        (0.5, 0.5, 0.0, 0.01),
        (0.1, 0.9, -2.0, 0.001),
        (0.9, 0.1, 2.0, 0.1),
        (0.5, 0.5, 3.0, 0.05),
        (0.2, 0.2, -1.0, 0.2),
    ] {
        let start = [
            (top * 1.5).ln(),
            logit(cs),
            (top * 1.5).ln(),
            logit(cc),
            n,
            logit(k),
        ];
        let (x, c) = nelder_mead(&cost, start, 3000);
        if best.as_ref().is_none_or(|(_, b)| c < *b) {
            best = Some((x, c));
        }
    }
    let Some((mut x, mut c)) = best else {
        return Err(Error::Fit("no fit".into()));
    };
    // Restarting the simplex from its best point gets it out of collapsed directions.
    for _ in 0..6 {
        let (x2, c2) = nelder_mead(&cost, x, 3000);
        if c2 >= c * (1.0 - 1e-9) {
            break;
        }
        (x, c) = (x2, c2);
    }
    let mut fit = decode(&x);
    let log_mean = samples
        .iter()
        .map(|s| (s.bw / fit.predict(f64::from(s.writers), f64::from(s.stripes))).ln())
        .sum::<f64>()
        / samples.len() as f64;
    fit.eta = log_mean.exp();
    fit.max_rel_err = samples
        .iter()
        .map(|s| {
            let p = fit.eta * fit.predict(f64::from(s.writers), f64::from(s.stripes));
            (p - s.bw).abs() / s.bw
        })
        .fold(0.0, f64::max);
    if ![fit.server_single, fit.b_client, fit.eta]
        .iter()
        .all(|v| v.is_finite() && *v > 0.0)
    {
        return Err(Error::Fit("the fit diverged".into()));
    }
    Ok(fit)
}

/// Minimises `f` from `start` with the Nelder–Mead simplex (no derivatives needed; the
/// cost is smooth but its constants span orders of magnitude).
pub fn nelder_mead<const N: usize>(
    f: &dyn Fn(&[f64; N]) -> f64,
    start: [f64; N],
    iterations: usize,
) -> ([f64; N], f64) {
    let mut simplex: Vec<([f64; N], f64)> = Vec::with_capacity(N + 1);
    simplex.push((start, f(&start)));
    for i in 0..N {
        let mut p = start;
        p[i] += if p[i].abs() > 1.0 {
            0.2 * p[i].abs()
        } else {
            0.5
        };
        simplex.push((p, f(&p)));
    }
    let clean = |v: f64| if v.is_nan() { f64::INFINITY } else { v };
    for s in &mut simplex {
        s.1 = clean(s.1);
    }
    for _ in 0..iterations {
        simplex.sort_by(|a, b| a.1.total_cmp(&b.1));
        let (best, worst) = (simplex[0].1, simplex[N].1);
        if (worst - best).abs() <= 1e-12 * (1.0 + best.abs()) {
            break;
        }
        let mut centroid = [0.0; N];
        for (p, _) in &simplex[..N] {
            for i in 0..N {
                centroid[i] += p[i] / N as f64;
            }
        }
        let towards = |t: f64| {
            let mut p = centroid;
            for i in 0..N {
                p[i] = centroid[i] + t * (simplex[N].0[i] - centroid[i]);
            }
            p
        };
        let r = towards(-1.0);
        let fr = clean(f(&r));
        if fr < simplex[0].1 {
            let e = towards(-2.0);
            let fe = clean(f(&e));
            simplex[N] = if fe < fr { (e, fe) } else { (r, fr) };
        } else if fr < simplex[N - 1].1 {
            simplex[N] = (r, fr);
        } else {
            let c = towards(0.5);
            let fc = clean(f(&c));
            if fc < simplex[N].1 {
                simplex[N] = (c, fc);
            } else {
                let b = simplex[0].0;
                for s in simplex.iter_mut().skip(1) {
                    for (x, &bx) in s.0.iter_mut().zip(&b) {
                        *x = bx + 0.5 * (*x - bx);
                    }
                    s.1 = clean(f(&s.0));
                }
            }
        }
    }
    simplex.sort_by(|a, b| a.1.total_cmp(&b.1));
    simplex[0]
}

/// `X_max` and `Q_max` of [`crate::model::queue_throughput`] from `(depth, bytes/s)`
/// samples: `1/X = 1/X_max + (Q_max/X_max)·(1/Q)` is a line in `1/Q`. `Q_max` is kept
/// at least 0.01 (a server that needs no queue) and `X_max` at least the best sample.
pub fn fit_queue(samples: &[(f64, f64)]) -> Result<(f64, f64), Error> {
    let pts: Vec<(f64, f64)> = samples
        .iter()
        .filter(|(q, x)| q.is_finite() && x.is_finite() && *q > 0.0 && *x > 0.0)
        .map(|(q, x)| (1.0 / q, 1.0 / x))
        .collect();
    if pts.len() < 2 {
        return Err(Error::Fit("the depth sweep needs two depths".into()));
    }
    let n = pts.len() as f64;
    let (mx, my) = (
        pts.iter().map(|p| p.0).sum::<f64>() / n,
        pts.iter().map(|p| p.1).sum::<f64>() / n,
    );
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    if sxx <= 0.0 {
        return Err(Error::Fit(
            "the depth sweep needs two different depths".into(),
        ));
    }
    let slope = (sxy / sxx).max(0.0);
    let best = samples.iter().map(|s| s.1).fold(0.0, f64::max);
    let intercept = my - slope * mx;
    let x_max = if intercept > 0.0 {
        (1.0 / intercept).max(best)
    } else {
        best
    };
    let q_max = (slope * x_max).max(0.01);
    Ok((x_max, q_max))
}
