//! The I/O models the advisor predicts with: the seed formulas practitioners use (kept where
//! they are right, with their names) and the corrected ones where they are not.
//!
//! Units everywhere: bytes, seconds, bytes per second; counts are `f64` so the formulas can
//! be evaluated (and plotted) between integers.
//!
//! What was changed from the seed and why is in `docs/advisor.md`; in short:
//! - [`checkpoint_stall`] and [`striped_throughput`] are the seed's, unchanged; the latter
//!   gains a coherency term in [`striped_throughput_usl`] because striping over OSTs that
//!   share hardware can lose bandwidth, which the seed's curve cannot show.
//! - The seed's OSS queueing `T_max / (1 + Q/Q_max)²` falls as the queue deepens and is at
//!   its peak with nothing queued; [`queue_throughput`] is the closed-queue (Little's law)
//!   curve `X_max · Q / (Q + Q_max)` instead, with `Q_max` the depth giving half the peak.
//! - The seed's RPC depth rule `16 / log2(N + 1)` ignores the server it sizes for;
//!   [`rpc_depth`] shares the depth that saturates one OST among the clients writing to it.
//! - The seed's POSIX and two-phase costs charge every writer a serialised lock even when
//!   the writes are stripe-aligned and never conflict; [`posix_lock_cost`] and
//!   [`two_phase_cost`] charge serialisation only for the conflicting fraction.
//! - The seed's misalignment loss `S/W` gives 6,400 % for a 256 KiB write into a 16 MiB
//!   stripe; [`misalignment_loss`] is the extra stripes touched (below 100 %), and the real
//!   cost of small writes in large stripes, shared stripes, is [`conflict_fraction`].

/// Checkpoint stall (seed, unchanged): `T = M · N_replicas / (BW_write · η)` seconds for
/// `bytes` written `replicas` times at `bandwidth` bytes/s with efficiency `eta` (0, 1].
pub fn checkpoint_stall(bytes: f64, replicas: f64, bandwidth: f64, eta: f64) -> f64 {
    bytes * replicas / (bandwidth * eta)
}

/// Striped throughput (seed, unchanged): `S(N) = (1−f)·N·B / (1 + (N−1)·C)`, the
/// bandwidth of `n` OSTs each giving `b_single` alone, `f` the fraction lost per stream and
/// `c` the contention between OSTs (0: additive, 1: they share one resource).
pub fn striped_throughput(n: f64, b_single: f64, f: f64, c: f64) -> f64 {
    (1.0 - f) * n * b_single / (1.0 + (n - 1.0) * c)
}

/// Striped throughput with the universal scalability law's coherency term `κ·N·(N−1)`
/// added to the seed's denominator (`κ = 0` is the seed's [`striped_throughput`]): OSTs
/// that share a disk or CPUs lose bandwidth as streams are added (seeks, cache thrash), so
/// the curve can fall past a peak at `N* = √((1 − C)/κ)`, which the seed's cannot.
pub fn striped_throughput_usl(n: f64, b_single: f64, f: f64, c: f64, kappa: f64) -> f64 {
    (1.0 - f) * n * b_single / (1.0 + (n - 1.0) * c + kappa * n * (n - 1.0))
}

/// The same curve for `p` client writer processes, each giving `b_client` alone, with
/// contention `c` between them (the clients' side of a write).
pub fn client_throughput(p: f64, b_client: f64, c: f64) -> f64 {
    p * b_client / (1.0 + (p - 1.0) * c)
}

/// Two stages every byte passes, combined: `(a^−n + b^−n)^(−1/n)`. `n = 1` when both
/// sides spend one shared resource (the harmonic sum: times add); large `n` when they are
/// pipelined on separate hardware (the minimum).
pub fn combine(a: f64, b: f64, n: f64) -> f64 {
    // Scaled by the larger so the powers do not overflow for large n.
    let m = a.max(b);
    if m <= 0.0 {
        return 0.0;
    }
    let (x, y) = (a / m, b / m);
    m * (x.powf(-n) + y.powf(-n)).powf(-1.0 / n)
}

/// The seed's OSS queueing curve `T_max / (1 + Q/Q_max)²`, kept only to show in the docs
/// and tests why it was replaced: it is largest with an empty queue.
pub fn seed_queue_throughput(q: f64, t_max: f64, q_max: f64) -> f64 {
    t_max / (1.0 + q / q_max).powi(2)
}

/// Corrected OSS queueing: one OST's bandwidth with `q` RPCs in flight,
/// `X_max · Q / (Q + Q_max)`. From Little's law: each RPC takes `R₀ + Q/X_max` (its own
/// service plus the queue ahead of it), so `Q_max = X_max · R₀` (in RPCs) is the depth at
/// which half the peak is reached.
pub fn queue_throughput(q: f64, x_max: f64, q_max: f64) -> f64 {
    x_max * q / (q + q_max)
}

/// The fraction lost per stream at RPC depth `q`: `f = Q_max / (q + Q_max)`, so that
/// `(1 − f) · X_max` is [`queue_throughput`] at that depth.
pub fn depth_loss(q: f64, q_max: f64) -> f64 {
    q_max / (q + q_max)
}

/// The seed's client RPC depth rule `16 / log2(N_clients + 1)`.
pub fn seed_rpc_depth(clients: f64) -> f64 {
    16.0 / (clients + 1.0).log2()
}

/// Corrected RPC depth for one client: the depth that gives an OST 90 % of its peak
/// (`9 · Q_max` by [`queue_throughput`]) shared by the `clients_per_ost` clients writing to
/// it, rounded up, within the client's limits 1..=256.
pub fn rpc_depth(q_max: f64, clients_per_ost: f64) -> u32 {
    let want = 9.0 * q_max / clients_per_ost.max(1.0);
    if want.is_nan() {
        return 1;
    }
    want.ceil().clamp(1.0, 256.0) as u32
}

/// The fraction of `W`-byte writes at rank-strided offsets (`rank · W`) that share a
/// stripe of `S` bytes with another writer's write: 0 when `S` divides `W`.
pub fn conflict_fraction(write: u64, stripe: u64) -> f64 {
    if write == 0 || stripe == 0 {
        return 0.0;
    }
    if write.is_multiple_of(stripe) {
        return 0.0;
    }
    // A write [rW, (r+1)W) shares its last stripe with the next writer when (r+1)W is not
    // on a stripe boundary; over the ranks that is the share of multiples of W that are
    // not multiples of S: 1 − gcd(W, S)/S.
    1.0 - gcd(write, stripe) as f64 / stripe as f64
}

/// Greatest common divisor.
pub fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// Misalignment loss, bounded: the share of the stripes a `W`-byte write at a random
/// offset touches beyond the `⌈W/S⌉` an aligned one needs (each extra stripe is an extra
/// RPC and a lock), as a fraction of throughput in [0, 1).
pub fn misalignment_loss(write: u64, stripe: u64) -> f64 {
    if write == 0 || stripe == 0 {
        return 0.0;
    }
    let aligned = write.div_ceil(stripe) as f64;
    // Over offsets that are multiples of gcd(W, S): the expected stripes touched is
    // (W + S − g) / S.
    let g = gcd(write, stripe) as f64;
    let touched = (write as f64 + stripe as f64 - g) / stripe as f64;
    (1.0 - aligned / touched).max(0.0)
}

/// The seed's misalignment loss `S / W` (the stripe's size over the write's, "a 256 KiB
/// write into a 16 MiB stripe loses 6,400 %"): a loss of throughput above 100 % means
/// negative time; kept for the docs and tests.
pub fn seed_misalignment_loss(write: u64, stripe: u64) -> f64 {
    if write == 0 {
        return 0.0;
    }
    stripe as f64 / write as f64
}

/// POSIX (independent) I/O on a shared file: every writer takes its extent lock at once in
/// parallel (one RPC and one grant, `t_rpc + t_lock`), and the conflicting share `phi` of
/// them is serialised behind the other writers' (the seed's `P·(T_rpc + T_lock)` is
/// `phi = 1`): `(1 + (P − 1)·phi) · (t_rpc + t_lock)` per round of writes.
pub fn posix_lock_cost(writers: f64, phi: f64, t_rpc: f64, t_lock: f64) -> f64 {
    (1.0 + (writers - 1.0).max(0.0) * phi) * (t_rpc + t_lock)
}

/// MPI-IO two-phase (collective buffering): the writers' data is exchanged to `A`
/// aggregators (`bytes_moved` over `exchange_bw` bytes/s plus one latency `t_rpc` per
/// message round, `⌈P/A⌉`), then the aggregators lock as in [`posix_lock_cost`] with their
/// own conflicting share `phi_a` (the seed's `A·T_lock + T_exchange` serialises every
/// aggregator).
pub fn two_phase_cost(
    writers: f64,
    aggregators: f64,
    bytes_moved: f64,
    exchange_bw: f64,
    phi_a: f64,
    t_rpc: f64,
    t_lock: f64,
) -> f64 {
    let rounds = (writers / aggregators.max(1.0)).ceil();
    bytes_moved / exchange_bw + rounds * t_rpc + posix_lock_cost(aggregators, phi_a, t_rpc, t_lock)
}
