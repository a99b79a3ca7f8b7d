//! Golden tests of the formulas against hand-computed examples (the seed's among them),
//! property tests of the models and the fit, the `--json` schemas and an SVG plot.

use crate::Calibration;
use crate::checkpoint::CheckpointJob;
use crate::dataset::DatasetJob;
use crate::fit::{GridSample, fit_grid, fit_queue};
use crate::model::*;
use crate::plot::{Plot, Series};
use crate::stripe::{StripeJob, aligned_stripe};
use proptest::prelude::*;

/// The example: 70e9 parameters × 14 bytes, 1,024 ranks, 8 a node, hourly.
fn job_70b(target_stall: Option<f64>) -> CheckpointJob {
    CheckpointJob {
        params: 70e9,
        bytes_per_param: 14.0,
        ranks: 1024,
        gpus_per_node: 8,
        writers_per_node: 8,
        interval: 3600.0,
        target_stall,
        replicas: 1,
    }
}

fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * b.abs().max(1e-300)
}

#[test]
fn seed_examples() {
    // 100 TB at 200 GB/s is 500 s.
    assert!(close(
        checkpoint_stall(100e12, 1.0, 200e9, 1.0),
        500.0,
        1e-12
    ));
    // Two replicas at 80 % efficiency: 1,250 s.
    assert!(close(
        checkpoint_stall(100e12, 2.0, 200e9, 0.8),
        1250.0,
        1e-12
    ));
    // S(128), f = 0.001, B = 100 Gbit/s, C = 0.03: 0.999·128·100 / 4.81 = 2,658.46 Gbit/s.
    let s = striped_throughput(128.0, 100.0, 0.001, 0.03);
    assert!(close(s, 2658.4615, 1e-6), "{s}");
    assert_eq!(s.round(), 2658.0);
    // The coherency term: none is the seed's curve; with one it peaks and falls.
    assert_eq!(striped_throughput_usl(128.0, 100.0, 0.001, 0.03, 0.0), s);
    let usl = |n| striped_throughput_usl(n, 100.0, 0.0, 0.0, 0.25);
    assert!(close(usl(2.0), 200.0 / 1.5, 1e-12) && usl(4.0) < usl(2.0));
    // One OST: (1 − f)·B.
    assert!(close(
        striped_throughput(1.0, 100.0, 0.001, 0.03),
        99.9,
        1e-12
    ));
}

#[test]
fn queueing_corrected() {
    // The seed's curve is at its peak with an empty queue and falls as it deepens.
    assert_eq!(seed_queue_throughput(0.0, 1000.0, 2.0), 1000.0);
    assert!(close(seed_queue_throughput(2.0, 1000.0, 2.0), 250.0, 1e-12));
    // Little's law: half the peak at Q_max, 90 % at 9·Q_max, nothing with no RPC.
    assert_eq!(queue_throughput(0.0, 1000.0, 2.0), 0.0);
    assert!(close(queue_throughput(2.0, 1000.0, 2.0), 500.0, 1e-12));
    assert!(close(queue_throughput(18.0, 1000.0, 2.0), 900.0, 1e-12));
    assert!(close(depth_loss(8.0, 2.0), 0.2, 1e-12));
    // X_max = 1 GB/s, Q_max = 2 from exact samples.
    let samples: Vec<(f64, f64)> = [1.0, 2.0, 4.0, 8.0, 16.0]
        .iter()
        .map(|&q| (q, queue_throughput(q, 1e9, 2.0)))
        .collect();
    let (x, q) = fit_queue(&samples).unwrap();
    assert!(close(x, 1e9, 1e-9) && close(q, 2.0, 1e-9), "{x} {q}");
    assert!(fit_queue(&[(1.0, 5.0)]).is_err());
    assert!(fit_queue(&[(1.0, 5.0), (1.0, 6.0)]).is_err());
}

#[test]
fn rpc_depth_rules() {
    assert_eq!(seed_rpc_depth(1.0), 16.0);
    assert_eq!(seed_rpc_depth(15.0), 4.0);
    // 9·Q_max shared by the clients of one OST, rounded up, within 1..=256.
    assert_eq!(rpc_depth(1.0, 1.0), 9);
    assert_eq!(rpc_depth(4.0, 3.0), 12);
    assert_eq!(rpc_depth(1.0, 100.0), 1);
    assert_eq!(rpc_depth(100.0, 1.0), 256);
    assert_eq!(rpc_depth(f64::NAN, 1.0), 1);
}

#[test]
fn alignment_and_locks() {
    const K: u64 = 1024;
    // The seed's 6,400 %: a 256 KiB write into 16 MiB stripes.
    assert_eq!(seed_misalignment_loss(256 * K, 16 * K * K), 64.0);
    // Those writes never straddle a stripe: no extra stripes touched ...
    assert_eq!(misalignment_loss(256 * K, 16 * K * K), 0.0);
    // ... but 63 of 64 share a stripe with the next writer's: lock conflicts.
    assert!(close(
        conflict_fraction(256 * K, 16 * K * K),
        63.0 / 64.0,
        1e-12
    ));
    assert_eq!(conflict_fraction(K * K, 256 * K), 0.0);
    assert!(close(conflict_fraction(192 * K, 128 * K), 0.5, 1e-12));
    // 100 KiB writes, 64 KiB stripes: 2.5 stripes touched on average where 2 would do.
    assert!(close(misalignment_loss(100 * K, 64 * K), 0.2, 1e-12));
    // S = W/k: the smallest k that makes S a multiple of 64 KiB, at most 4 MiB.
    assert_eq!(aligned_stripe(256 * K), Some((1, 256 * K)));
    assert_eq!(aligned_stripe(16 * K * K), Some((4, 4 * K * K)));
    assert_eq!(aligned_stripe(12 * K * K), Some((3, 4 * K * K)));
    assert_eq!(aligned_stripe(5 * K * K), Some((2, 2560 * K)));
    assert_eq!(aligned_stripe(100 * K), None);
    // POSIX: the seed's P·(T_rpc + T_lock) when every write conflicts; one lock time when none do.
    assert!(close(
        posix_lock_cost(64.0, 1.0, 1e-4, 2e-4),
        64.0 * 3e-4,
        1e-12
    ));
    assert!(close(posix_lock_cost(64.0, 0.0, 1e-4, 2e-4), 3e-4, 1e-12));
    // Two-phase, 64 writers of 256 KiB to 16 aggregators at 1 GB/s, aligned:
    // 48·256 KiB exchanged (12.58 ms) + 4 rounds of 0.1 ms + one lock (0.3 ms).
    let t = two_phase_cost(64.0, 16.0, 48.0 * 262144.0, 1e9, 0.0, 1e-4, 2e-4);
    assert!(close(t, 0.012582912 + 4e-4 + 3e-4, 1e-9), "{t}");
    assert!(close(combine(5.0, 5.0, 1.0), 2.5, 1e-12));
    assert!(close(combine(1.0, 1e6, 16.0), 1.0, 1e-9));
}

#[test]
fn checkpoint_advice_with_seed_constants() {
    let cal = Calibration::seed();
    let job = job_70b(Some(1.0));
    let a = job.advise(&cal).unwrap();
    assert_eq!((a.nodes, a.writers, a.stripe_count), (128, 1024, 1));
    assert_eq!(a.checkpoint_bytes, 980e9);
    // 128 OSTs in use: S(128) = 2,658.46 Gbit/s = 332.31 GB/s (the 128 nodes' side is 28×
    // that and barely counts): 980 GB / 332.31 GB/s = 2.949 s, plus one create.
    assert!(close(a.bandwidth, 332.3077e9, 1e-3), "{}", a.bandwidth);
    assert!(close(a.stall_s, 2.9491 + 1e-3, 1e-3), "{}", a.stall_s);
    // 1,024 GPUs × 2.95 s × 24 checkpoints a day = 20.1 GPU hours.
    assert!(close(
        a.gpu_hours_lost_per_day,
        1024.0 * a.stall_s * 24.0 / 3600.0,
        1e-12
    ));
    assert!(close(a.gpu_hours_lost_per_day, 20.14, 1e-2));
    // 1 s needs 980 GB/s; S(N) tends to 0.999·12.5/0.03 = 416 GB/s: no OST count will do.
    assert_eq!(a.target_met, Some(false));
    assert_eq!(a.needed_osts, None);
    assert!(close(
        a.needed_bandwidth.unwrap(),
        980e9 / (1.0 - 1e-3),
        1e-9
    ));
    // 5 s is met with fewer OSTs: the smallest N with 980 GB / S(N) + 1 ms <= 5 s.
    let five = CheckpointJob {
        target_stall: Some(5.0),
        ..job.clone()
    }
    .advise(&cal)
    .unwrap();
    let n = five.needed_osts.unwrap();
    let stall = |n: f64| 1e-3 + 980e9 / cal.model_bw(128.0, 8.0, n);
    assert!(
        stall(f64::from(n)) <= 5.0 && stall(f64::from(n - 1)) > 5.0,
        "{n}"
    );
    assert_eq!(five.target_met, Some(true));
    assert!(a.setstripe.starts_with("weft setstripe -c 1 -S 4M"));
    assert!(
        a.set_param
            .iter()
            .any(|s| s.contains("max_rpcs_in_flight="))
    );
    // Bad input is refused, not panicked on.
    assert!(
        CheckpointJob {
            ranks: 0,
            ..job.clone()
        }
        .advise(&cal)
        .is_err()
    );
    assert!(
        CheckpointJob {
            interval: f64::NAN,
            ..job
        }
        .advise(&cal)
        .is_err()
    );
}

#[test]
fn few_writers_get_a_progressive_layout() {
    let cal = Calibration::seed();
    let job = CheckpointJob {
        params: 7e9,
        bytes_per_param: 14.0,
        ranks: 8,
        gpus_per_node: 8,
        writers_per_node: 8,
        interval: 1800.0,
        target_stall: None,
        replicas: 1,
    };
    let a = job.advise(&cal).unwrap();
    // 8 files of 12.25 GB over 128 OSTs: 16 stripes each, the first 256 MiB on one.
    assert_eq!(a.stripe_count, 16);
    assert_eq!(
        a.setstripe,
        "weft setstripe -E 256M -c 1 -S 4M -E -1 -c 16 -S 4M CHECKPOINT_DIR"
    );
}

fn seed_json<T: serde::Serialize>(v: &T) -> serde_json::Map<String, serde_json::Value> {
    match serde_json::to_value(v).unwrap() {
        serde_json::Value::Object(m) => m,
        other => panic!("not an object: {other}"),
    }
}

fn assert_schema(
    m: &serde_json::Map<String, serde_json::Value>,
    numbers: &[&str],
    strings: &[&str],
) {
    for k in numbers {
        assert!(
            m.get(*k).is_some_and(|v| v.is_number()),
            "{k} is not a number in {m:?}"
        );
    }
    for k in strings {
        assert!(
            m.get(*k).is_some_and(|v| v.is_string()),
            "{k} is not a string in {m:?}"
        );
    }
}

#[test]
fn json_schemas() {
    let cal = Calibration::seed();
    let job = job_70b(Some(60.0));
    let m = seed_json(&job.advise(&cal).unwrap());
    assert_schema(
        &m,
        &[
            "checkpoint_bytes",
            "nodes",
            "writers",
            "file_bytes",
            "osts",
            "stripe_count",
            "stripe_size",
            "bandwidth",
            "stall_s",
            "gpu_hours_lost_per_day",
            "fraction_lost",
            "target_stall_s",
            "needed_bandwidth",
            "needed_osts",
            "bandwidth_limit",
        ],
        &["calibration_date", "setstripe"],
    );
    assert!(m["target_met"].is_boolean() && m["set_param"].is_array());
    let s = StripeJob {
        write_size: 256 << 10,
        writers: 64,
        writers_per_node: 8,
        aggregators: Some(16),
        current_stripe: Some(16 << 20),
    };
    let m = seed_json(&s.advise(&cal).unwrap());
    assert_schema(
        &m,
        &[
            "write_size",
            "stripe_size",
            "stripes_per_write",
            "stripe_count",
            "bandwidth",
            "posix_lock_s",
            "two_phase_s",
        ],
        &["calibration_date", "setstripe", "cheaper"],
    );
    assert!(m["aligned"].is_boolean());
    let cur = m["current"].as_object().unwrap();
    assert_schema(
        cur,
        &[
            "stripe_size",
            "conflict_fraction",
            "misalignment_loss",
            "seed_misalignment_loss",
            "posix_lock_s",
        ],
        &[],
    );
    assert_eq!(cur["seed_misalignment_loss"], 64.0);
    let d = DatasetJob {
        files: 1_000_000,
        file_size: 100 << 10,
        readers: 64,
        readers_per_node: 8,
        mdts: 1,
        cache_per_node: 100 << 30,
    };
    let m = seed_json(&d.advise(&cal).unwrap());
    assert_schema(
        &m,
        &[
            "dataset_bytes",
            "nodes",
            "read_bandwidth",
            "data_time_s",
            "metadata_time_s",
            "epoch_s",
            "opens_per_s",
            "mdt_load",
            "mdts_needed",
        ],
        &["calibration_date"],
    );
    assert!(m["dne_helps"].is_boolean() && m["pcc_helps"].is_boolean() && m["reasons"].is_array());
    let m = seed_json(&cal);
    assert_schema(
        &m,
        &["b_single", "c_overhead", "f", "q_max", "eta", "t_lock"],
        &["date"],
    );
}

#[test]
fn stripe_advice_prefers_aligned_sizes() {
    let cal = Calibration::seed();
    let s = StripeJob {
        write_size: 256 << 10,
        writers: 64,
        writers_per_node: 8,
        aggregators: Some(16),
        current_stripe: Some(16 << 20),
    };
    let a = s.advise(&cal).unwrap();
    assert_eq!(
        (a.stripe_size, a.stripes_per_write, a.stripe_count),
        (256 << 10, 1, 16)
    );
    assert!(a.aligned);
    // Aligned, POSIX writers never conflict: one lock time; the 16 MiB stripes now cost
    // 1 + 63·63/64 lock times.
    assert!(close(a.posix_lock_s, 3e-4, 1e-12));
    let cur = a.current.unwrap();
    assert!(close(
        cur.posix_lock_s,
        (1.0 + 63.0 * 63.0 / 64.0) * 3e-4,
        1e-12
    ));
    assert_eq!(a.cheaper, "posix");
    let odd = StripeJob {
        write_size: 100 << 10,
        ..s
    }
    .advise(&cal)
    .unwrap();
    assert!(!odd.aligned && odd.stripe_size == 64 << 10);
}

#[test]
fn dataset_advice_finds_the_metadata_limit() {
    let cal = Calibration::seed();
    // 10 M files of 4 KiB: 41 GB read in a moment, 10 M opens at 50,000/s take 200 s.
    let d = DatasetJob {
        files: 10_000_000,
        file_size: 4 << 10,
        readers: 512,
        readers_per_node: 8,
        mdts: 1,
        cache_per_node: 0,
    };
    let a = d.advise(&cal).unwrap();
    assert!(close(a.metadata_time_s, 200.0, 1e-9));
    assert!(a.dne_helps && a.mdts_needed > 1 && !a.pcc_helps);
    assert_eq!(a.epoch_s, a.metadata_time_s);
    let more = DatasetJob {
        mdts: a.mdts_needed,
        ..d
    }
    .advise(&cal)
    .unwrap();
    assert!(!more.dne_helps, "{more:?}");
    assert!(
        DatasetJob {
            files: 0,
            ..more_input()
        }
        .advise(&cal)
        .is_err()
    );
}

fn more_input() -> DatasetJob {
    DatasetJob {
        files: 1,
        file_size: 1,
        readers: 1,
        readers_per_node: 1,
        mdts: 1,
        cache_per_node: 0,
    }
}

#[test]
fn calibration_round_trips_through_the_mgs_value() {
    let cal = Calibration::seed();
    let v = cal.to_param().unwrap();
    assert!(v.len() < 4096);
    assert_eq!(Calibration::from_param(&v).unwrap(), cal);
    assert!(Calibration::from_param("{").is_err());
    let bad = Calibration {
        c_overhead: 2.0,
        ..cal.clone()
    };
    assert!(Calibration::from_param(&serde_json::to_string(&bad).unwrap()).is_err());
    let bad = Calibration {
        b_single: f64::NAN,
        ..cal
    };
    assert!(bad.validate().is_err());
}

#[test]
fn an_svg_plot_is_written() {
    let cal = Calibration::seed();
    let job = job_70b(None);
    let plot = Plot {
        title: "checkpoint stall".into(),
        x_label: "OSTs".into(),
        y_label: "stall (s)".into(),
        series: vec![Series {
            name: "70e9 params".into(),
            points: job.stall_curve(&cal, 64),
        }],
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stall.svg");
    plot.write(&path).unwrap();
    let svg = std::fs::read_to_string(&path).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains("checkpoint stall") && svg.contains("70e9 params"));
    assert!(svg.contains("<polyline"), "a line is drawn");
    let empty = Plot {
        series: vec![],
        ..plot
    };
    assert!(empty.to_svg().is_err());
}

#[test]
fn the_fit_recovers_known_constants() {
    let truth = crate::fit::GridFit {
        server_single: 400e6,
        c_overhead: 0.5,
        kappa: 0.05,
        b_client: 300e6,
        c_client: 0.4,
        coupling: 2.0,
        eta: 1.0,
        max_rel_err: 0.0,
    };
    let mut samples = Vec::new();
    for w in [1, 2, 4, 8] {
        for s in [1, 2, 4] {
            samples.push(GridSample {
                writers: w,
                stripes: s,
                bw: truth.predict(f64::from(w), f64::from(s)),
            });
        }
    }
    let fit = fit_grid(&samples).unwrap();
    assert!(fit.max_rel_err < 0.01, "{fit:?}");
    // Also where it was not measured.
    for (w, s) in [(16.0, 4.0), (3.0, 3.0)] {
        let (p, t) = (fit.eta * fit.predict(w, s), truth.predict(w, s));
        assert!(close(p, t, 0.03), "{w} {s}: {p} vs {t}");
    }
    assert!(fit_grid(&samples[..5]).is_err());
}

proptest! {
    #[test]
    fn striping_is_monotone_and_bounded(c in 0.0f64..=1.0, f in 0.0f64..0.5, n in 1u32..10_000) {
        let b = 1e9;
        let s = striped_throughput(f64::from(n), b, f, c);
        let next = striped_throughput(f64::from(n + 1), b, f, c);
        prop_assert!(next >= s * (1.0 - 1e-12));
        if c > 0.0 {
            prop_assert!(s <= (1.0 - f) * b / c * (1.0 + 1e-9));
        }
        prop_assert!(s <= (1.0 - f) * b * f64::from(n) * (1.0 + 1e-12));
    }

    #[test]
    fn queueing_rises_to_its_peak(q in 0.01f64..1e4, qm in 0.01f64..1e3) {
        let x = queue_throughput(q, 1e9, qm);
        prop_assert!(x < 1e9 && x > 0.0);
        prop_assert!(queue_throughput(q * 2.0, 1e9, qm) > x);
    }

    #[test]
    fn losses_are_fractions(w in 1u64..(1 << 30), s in 1u64..(1 << 30)) {
        let l = misalignment_loss(w, s);
        prop_assert!((0.0..1.0).contains(&l));
        let c = conflict_fraction(w, s);
        prop_assert!((0.0..1.0).contains(&c));
    }

    #[test]
    fn aligned_stripes_divide_the_write(units in 1u64..4096) {
        let w = units * (64 << 10);
        let (k, s) = aligned_stripe(w).unwrap();
        prop_assert_eq!(k * s, w);
        prop_assert!(s % (64 << 10) == 0 && s <= 4 << 20);
        prop_assert_eq!(conflict_fraction(w, s), 0.0);
    }

    #[test]
    fn combining_is_below_the_slower_side(a in 1.0f64..1e12, b in 1.0f64..1e12, n in 1.0f64..16.0) {
        let x = combine(a, b, n);
        prop_assert!(x <= a.min(b) * (1.0 + 1e-9));
        prop_assert!(x >= a.min(b) / 2.0 * (1.0 - 1e-9));
    }
}
