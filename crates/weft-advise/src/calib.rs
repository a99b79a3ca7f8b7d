//! The constants the models take, as `weft advise calibrate` measured them on one file
//! system (or the seed's example constants when there is no calibration), how they are
//! stored on the MGS, and the predictions made from them.

use crate::Error;
use crate::model::{client_throughput, combine, striped_throughput_usl};
use serde::{Deserialize, Serialize};

/// The MGS parameter holding the calibration (one JSON value, `weft set_param -P`).
pub const PARAM_NAME: &str = "advise.calibration";

/// Largest value the MGS stores for one parameter.
const PARAM_VALUE_MAX: usize = 4096;

/// Every fitted constant. Bandwidths in bytes/s, times in seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// When it was measured (UTC, RFC 3339), or `seed` for the seed's example constants.
    pub date: String,
    /// OSTs of the file system measured.
    pub osts: u32,
    /// `B_single`: one OST's bandwidth to one client with unlimited RPC depth.
    pub b_single: f64,
    /// `C_overhead`: contention between OSTs (0 additive, 1 one shared resource).
    pub c_overhead: f64,
    /// `κ`: coherency loss between OSTs' streams (0: none; see
    /// [`crate::model::striped_throughput_usl`]).
    #[serde(default)]
    pub kappa: f64,
    /// `f`: the fraction of `B_single` lost per stream at the client's RPC depth.
    pub f: f64,
    /// `Q_max`: the RPC depth at which one OST gives half its peak.
    pub q_max: f64,
    /// The RPC depth (`max_rpcs_in_flight`) the bandwidths were measured at.
    pub rpc_depth: u32,
    /// Bytes per bulk RPC.
    pub rpc_bytes: u64,
    /// One writer process's bandwidth when the servers are not the limit.
    pub b_client: f64,
    /// Contention between the writer processes of one client node.
    pub c_client: f64,
    /// How the clients' and servers' sides combine (1: they share one resource, times add;
    /// large: separate hardware, the slower side alone limits).
    pub coupling: f64,
    /// `η`: measured bandwidth over modelled, over the calibration (geometric mean).
    pub eta: f64,
    /// Aggregate read bandwidth of one client node (many readers, every OST).
    pub read_bw: f64,
    /// Create + close of one empty file, one at a time.
    pub t_create: f64,
    /// Open + close of an existing file, one at a time.
    pub t_open: f64,
    /// Metadata operations (opens) per second one client node reaches with many tasks.
    pub md_ops_per_s: f64,
    /// One small RPC's round trip (a getattr).
    pub t_rpc: f64,
    /// `T_lock`: what a conflicting extent lock adds to a write beyond `t_rpc` (the
    /// revocation and grant).
    pub t_lock: f64,
    /// Bytes/s between processes for MPI-IO two-phase exchange (loopback TCP here).
    pub exchange_bw: f64,
}

impl Calibration {
    /// The seed's example constants (`B = 100 Gbit/s`, `f = 0.001`, `C = 0.03`) with
    /// typical HPC metadata and lock times, for advice without a calibrated file system.
    pub fn seed() -> Self {
        Self {
            date: "seed".into(),
            osts: 128,
            b_single: 100e9 / 8.0,
            c_overhead: 0.03,
            kappa: 0.0,
            f: 0.001,
            q_max: 1.0,
            rpc_depth: 8,
            rpc_bytes: 4 << 20,
            b_client: 12.5e9,
            c_client: 0.05,
            coupling: 4.0,
            eta: 1.0,
            read_bw: 25e9,
            t_create: 1e-3,
            t_open: 5e-4,
            md_ops_per_s: 50_000.0,
            t_rpc: 1e-4,
            t_lock: 2e-4,
            exchange_bw: 12.5e9,
        }
    }

    /// Checks every constant is finite and in range (after a fit, or read back from the MGS).
    pub fn validate(&self) -> Result<(), Error> {
        let positive = [
            ("b_single", self.b_single),
            ("q_max", self.q_max),
            ("b_client", self.b_client),
            ("coupling", self.coupling),
            ("eta", self.eta),
            ("read_bw", self.read_bw),
            ("t_create", self.t_create),
            ("t_open", self.t_open),
            ("md_ops_per_s", self.md_ops_per_s),
            ("t_rpc", self.t_rpc),
            ("exchange_bw", self.exchange_bw),
        ];
        for (name, v) in positive {
            if !(v.is_finite() && v > 0.0) {
                return Err(Error::Calibration(format!("{name} = {v} is not positive")));
            }
        }
        let fractions = [
            ("c_overhead", self.c_overhead),
            ("f", self.f),
            ("c_client", self.c_client),
        ];
        for (name, v) in fractions {
            if !(0.0..=1.0).contains(&v) {
                return Err(Error::Calibration(format!("{name} = {v} is not in [0, 1]")));
            }
        }
        if !(self.kappa.is_finite() && (0.0..=1.0).contains(&self.kappa)) {
            return Err(Error::Calibration(format!("kappa = {}", self.kappa)));
        }
        if !(self.t_lock.is_finite() && self.t_lock >= 0.0) {
            return Err(Error::Calibration(format!("t_lock = {}", self.t_lock)));
        }
        if self.osts == 0 || self.rpc_depth == 0 || self.rpc_bytes == 0 {
            return Err(Error::Calibration(
                "osts, rpc_depth and rpc_bytes must be positive".into(),
            ));
        }
        Ok(())
    }

    /// The value stored on the MGS under [`PARAM_NAME`].
    pub fn to_param(&self) -> Result<String, Error> {
        let s = serde_json::to_string(self).map_err(|e| Error::Calibration(e.to_string()))?;
        if s.len() > PARAM_VALUE_MAX {
            return Err(Error::Calibration(format!(
                "{} bytes do not fit one MGS parameter",
                s.len()
            )));
        }
        Ok(s)
    }

    /// Reads a stored calibration back, checked.
    pub fn from_param(value: &str) -> Result<Self, Error> {
        if value.len() > PARAM_VALUE_MAX {
            return Err(Error::Calibration("stored value too large".into()));
        }
        let c: Self = serde_json::from_str(value)
            .map_err(|e| Error::Calibration(format!("stored calibration unreadable: {e}")))?;
        c.validate()?;
        Ok(c)
    }

    /// The servers' side: `S(k)` for `k` OSTs in use.
    pub fn server_bw(&self, osts: f64) -> f64 {
        striped_throughput_usl(
            osts.max(1.0),
            self.b_single,
            self.f,
            self.c_overhead,
            self.kappa,
        )
    }

    /// The clients' side: `nodes` client nodes with `per_node` writers each.
    pub fn client_bw(&self, nodes: f64, per_node: f64) -> f64 {
        nodes.max(1.0) * client_throughput(per_node.max(1.0), self.b_client, self.c_client)
    }

    /// Aggregate write bandwidth of `nodes × per_node` writers over `osts` OSTs, before `η`.
    pub fn model_bw(&self, nodes: f64, per_node: f64, osts: f64) -> f64 {
        combine(
            self.client_bw(nodes, per_node),
            self.server_bw(osts),
            self.coupling,
        )
    }

    /// Achievable write bandwidth: [`Calibration::model_bw`] times `η`.
    pub fn write_bw(&self, nodes: f64, per_node: f64, osts: f64) -> f64 {
        self.model_bw(nodes, per_node, osts) * self.eta
    }

    /// Predicted time to write `bytes` from `nodes × per_node` writers over `osts` OSTs,
    /// with `files_per_writer` files created by each writer (their creates run in parallel
    /// across writers), through the final close.
    pub fn write_time(
        &self,
        bytes: f64,
        nodes: f64,
        per_node: f64,
        osts: f64,
        files_per_writer: f64,
    ) -> f64 {
        files_per_writer * self.t_create
            + crate::model::checkpoint_stall(
                bytes,
                1.0,
                self.model_bw(nodes, per_node, osts),
                self.eta,
            )
    }
}
