//! `weft advise` against a real cluster (separate server processes, 4 OSTs that share this
//! machine's one disk and CPUs): `calibrate` measures and stores the constants on the MGS,
//! then the checkpoint verb predicts from the stored constants. With `WEFT_ADVISE_VALIDATE=1`
//! the predicted write time of one shared 4 GiB file is checked against the time `weft
//! bench` measures for 1, 2 and 4 writers and 1, 2 and 4 stripes (±25 %): issue 27's check,
//! by hand on a quiet machine (beside CI's other tests one write's time varies by more than
//! that); the default run checks the verbs and the stored calibration at small sizes.
//!
//! Sizes: `WEFT_ADVISE_FILE_MIB` is the checkpoint file (4096 when validating, else 256),
//! `WEFT_ADVISE_CAL_MIB` each calibration write (when validating the file's size up to
//! 2048: calibrate with writes like the ones asked about; else 32), `WEFT_ADVISE_REPEAT`
//! how many writes are averaged, in the calibration and in each measured configuration
//! (default 1).

use crate::bin;
use crate::support::{weft, weft_run_env};
use std::time::Duration;
use weft_testkit::{FSNAME, TestCluster, wait_until_within};

fn env_mib(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&v| v > 0)
        .unwrap_or(default)
}

/// Waits until the objects of removed files are gone from the OSTs (the MDT destroys them
/// in the background after an unlink): a measured write must not share the disk with the
/// destruction of the previous run's gigabytes — the first write after `calibrate`'s
/// cleanup did, and took up to 2.8 times as long as the same write a minute later.
fn wait_for_destroys(tc: &TestCluster) {
    const LEFT: u64 = 64 << 20;
    wait_until_within(
        "the OSTs destroyed the removed files' objects",
        Duration::from_secs(120),
        || tc.ost_objects().1 <= LEFT,
    );
}

/// Seconds `weft bench` (an IOR-like write through the `weft` binary, as `calibrate`
/// runs) takes to write `bytes` into one shared file of `stripes` 4 MiB stripes from
/// `writers` tasks, through the last close.
fn measure(tc: &TestCluster, fs: &str, bytes: u64, writers: u32, stripes: u32) -> f64 {
    // On idle OSTs and from a clean page cache, as calibrate measures.
    wait_for_destroys(tc);
    rustix::fs::sync();
    let (ok, out, err) = weft(&[
        "bench",
        fs,
        "--mode",
        "ior",
        "--shared",
        "-t",
        &writers.to_string(),
        "-b",
        &format!("{}K", (bytes / u64::from(writers)) >> 10),
        "-c",
        &stripes.to_string(),
        "-S",
        "4M",
        "--json",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    bytes as f64 / (v["ior"]["write_mb_s"].as_f64().unwrap() * 1e6)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoint_predictions_match_measured_writes() {
    let validate = std::env::var_os("WEFT_ADVISE_VALIDATE").is_some();
    let file_mib = env_mib("WEFT_ADVISE_FILE_MIB", if validate { 4096 } else { 256 });
    let cal_mib = env_mib(
        "WEFT_ADVISE_CAL_MIB",
        if validate {
            file_mib.clamp(16, 2048)
        } else {
            32
        },
    );
    let repeat = env_mib("WEFT_ADVISE_REPEAT", 1).min(10);
    let tc = TestCluster::start(bin(), 4).await.unwrap();
    let fs = format!("{}:/{FSNAME}", tc.mgs_addr);
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("calibrate.svg");
    let out = weft_run_env(
        &[
            "advise",
            "calibrate",
            &fs,
            "--size",
            &format!("{cal_mib}M"),
            "--max-writers",
            "4",
            "--repeat",
            &repeat.to_string(),
            "--json",
            "--plot",
            svg.to_str().unwrap(),
        ],
        "",
        &[],
        Duration::from_secs(600),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["stored"], true);
    assert_eq!(report["calibration"]["osts"], 4);
    assert_eq!(report["grid"].as_array().unwrap().len(), 9, "{stdout}");
    eprintln!("calibration: {}", report["calibration"]);
    assert!(std::fs::read_to_string(&svg).unwrap().contains("<polyline"));
    // Stored on the MGS with the date, and read back from there by the verbs.
    let (ok, params, err) = weft(&["get_param", "--mgs", &tc.mgs_addr, "advise.calibration"]);
    assert!(ok, "{err}");
    let date = report["calibration"]["date"].as_str().unwrap();
    assert!(params.contains(date), "{params}");

    let bytes = file_mib << 20;
    // The ±25 % check against measured writes: by hand (see the module header; the
    // figures are in docs/advisor.md).
    let configs: &[(u32, u32)] = if validate {
        &[
            (1, 1),
            (1, 2),
            (1, 4),
            (2, 1),
            (2, 2),
            (2, 4),
            (4, 1),
            (4, 2),
            (4, 4),
        ]
    } else {
        &[(2, 2)]
    };
    let mut rows = Vec::new();
    for &(writers, stripes) in configs {
        {
            let w = writers.to_string();
            let (ok, out, err) = weft(&[
                "advise",
                "checkpoint",
                "--fs",
                &fs,
                "--bytes",
                &format!("{file_mib}M"),
                "--ranks",
                &w,
                "--gpus-per-node",
                &w,
                "--writers-per-node",
                &w,
                "--shared",
                "--stripe-count",
                &stripes.to_string(),
                "--json",
            ]);
            assert!(ok, "{err}");
            let advice: serde_json::Value = serde_json::from_str(&out).unwrap();
            assert_eq!(advice["calibration_date"], date);
            let predicted = advice["stall_s"].as_f64().unwrap();
            assert!(predicted > 0.0 && predicted.is_finite());
            if !validate {
                continue;
            }
            let mut measured = 0.0;
            for _ in 0..repeat {
                measured += measure(&tc, &fs, bytes, writers, stripes) / repeat as f64;
            }
            rows.push((writers, stripes, predicted, measured));
        }
    }
    let mut table = format!(
        "{file_mib} MiB, calibrated with {cal_mib} MiB writes\nwriters stripes predicted_s measured_s error\n"
    );
    for (w, k, p, m) in &rows {
        table += &format!(
            "{w:>7} {k:>7} {p:>11.2} {m:>10.2} {:>+5.1}%\n",
            (p - m) / m * 100.0
        );
    }
    eprintln!("{table}");
    for (w, k, p, m) in &rows {
        assert!(validate, "only measured when validating");
        assert!(
            (p - m).abs() <= 0.25 * m,
            "{w} writers, {k} stripes: predicted {p:.2} s, measured {m:.2} s\n{table}"
        );
    }
}

#[test]
fn advice_verbs_print_json_and_plots_without_a_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("stall.svg");
    let (ok, out, err) = weft(&[
        "advise",
        "checkpoint",
        "--model-params",
        "70e9",
        "--bytes-per-param",
        "14",
        "--ranks",
        "1024",
        "--writers-per-node",
        "8",
        "--interval",
        "1h",
        "--target-stall",
        "60s",
        "--json",
        "--plot",
        svg.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["calibration_date"], "seed");
    assert_eq!(v["checkpoint_bytes"], 980e9);
    assert_eq!(v["target_met"], true);
    assert!(std::fs::read_to_string(&svg).unwrap().contains("<polyline"));
    let (ok, out, err) = weft(&[
        "advise",
        "stripe",
        "--write-size",
        "256K",
        "--writers",
        "64",
        "--aggregators",
        "16",
        "--stripe-size",
        "16M",
    ]);
    assert!(ok, "{err}");
    assert!(
        out.contains("stripe size 256K") && out.contains("6400 % lost"),
        "{out}"
    );
    let (ok, out, err) = weft(&[
        "advise",
        "io",
        "--files",
        "10000000",
        "--file-size",
        "4K",
        "--readers",
        "512",
        "--json",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["dne_helps"], true);
    // Bad input: a clear error, no panic.
    let (ok, _, err) = weft(&["advise", "stripe", "--write-size", "0", "--writers", "4"]);
    assert!(!ok && err.contains("not a size"), "{err}");
    let (ok, _, err) = weft(&[
        "advise",
        "checkpoint",
        "--bytes",
        "1G",
        "--ranks",
        "1",
        "--interval",
        "1y",
    ]);
    assert!(!ok && err.contains("not a duration"), "{err}");
    let (ok, _, err) = weft(&[
        "advise",
        "io",
        "--files",
        "1",
        "--file-size",
        "1K",
        "--readers",
        "1",
        "--calibration",
        "/nonexistent.json",
    ]);
    assert!(!ok && err.contains("/nonexistent.json"), "{err}");
}
