//! LZ4 compression of OST data through a real FUSE mount: with `obdfilter.*.compress=lz4`
//! stored on the MGS, a text-like file striped over two OSTs reads back byte for byte
//! after a remount, `weft df` and `get_param` show it stored at least 2x smaller, and
//! random reads, writes, punches, hole searches and truncates over it match a byte model.

use crate::bin;
use crate::fuse_common::{FuseMount, create_with_layout, fallocate, seek_data_or_hole};
use crate::support::{weft, write_synced};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, MetadataExt};

use weft_proto::layout::LayoutTemplate;
use weft_testkit::{FSNAME, TestCluster, wait_until_async};

const MIB: usize = 1 << 20;
/// The file's size: 24 MiB, 12 MiB per OST.
const SIZE: usize = 24 * MIB;

/// Log-like JSON lines, as an application would write them.
fn text(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = StdRng::seed_from_u64(seed);
    let levels = ["info", "warn", "debug", "error"];
    let paths = ["/api/items", "/api/users", "/healthz", "/static/app.js"];
    let mut out = Vec::with_capacity(len + 256);
    let mut ts = 1_763_000_000_000u64;
    while out.len() < len {
        ts += rng.random_range(1..500);
        let line = format!(
            "{{\"ts\":{ts},\"level\":\"{}\",\"req\":\"{:08x}\",\"path\":\"{}/{}\",\"status\":{},\"ms\":{}}}\n",
            levels[rng.random_range(0..levels.len())],
            rng.random::<u32>(),
            paths[rng.random_range(0..paths.len())],
            rng.random_range(0..5000),
            [200, 200, 200, 404, 500][rng.random_range(0..5)],
            rng.random_range(0..900),
        );
        out.extend_from_slice(line.as_bytes());
    }
    out.truncate(len);
    out
}

fn read_all(f: &File, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    let mut done = 0;
    while done < len {
        let n = f.read_at(&mut buf[done..], done as u64).unwrap();
        assert!(n > 0, "short file: {done} of {len}");
        done += n;
    }
    buf
}

/// The compressed figures `weft df --json` gives: logical and stored KiB of the summary.
fn df_compressed(spec: &str) -> Option<(u64, u64)> {
    let (ok, out, err) = weft(&["df", "--json", spec]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let c = &v["summary"]["compressed"];
    Some((c["logical"].as_u64()?, c["stored"].as_u64()?))
}

/// Stores `obdfilter.*.compress=lz4` on the MGS and waits until each of the `osts` OSTs
/// applies it.
async fn compress_every_ost(mgs: &str, osts: usize) {
    let (ok, _, err) = weft(&["set_param", "--mgs", mgs, "-P", "obdfilter.*.compress=lz4"]);
    assert!(ok, "{err}");
    wait_until_async("every OST compresses", || async {
        let (ok, out, err) = weft(&["get_param", "--mgs", mgs, "obdfilter.*.compress"]);
        assert!(ok, "{err}");
        // Each OST's live value (the stored setting is listed too, under its own name).
        out.lines()
            .filter(|l| l.contains("-OST") && l.ends_with("=lz4"))
            .count()
            == osts
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compressed_files_read_back_store_smaller_and_take_random_io() {
    let tc = TestCluster::start(bin(), 2).await.unwrap();
    let mgs = tc.mgs_addr.clone();
    let spec = format!("{mgs}:/{FSNAME}");
    compress_every_ost(&mgs, 2).await;
    assert_eq!(df_compressed(&spec), None, "nothing compressed yet");

    create_with_layout(&tc, "log.json", LayoutTemplate::raid0(2, MIB as u64, -1)).await;
    let mut m = FuseMount::start(&tc, "");
    let path = m.path("log.json");
    let data = text(SIZE, 1);
    let written = data.clone();
    tokio::task::spawn_blocking(move || {
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        for (i, part) in written.chunks(MIB).enumerate() {
            f.write_all_at(part, (i * MIB) as u64).unwrap();
        }
        f.sync_all().unwrap();
    })
    .await
    .unwrap();
    // A fresh mount reads from the OSTs, not the writer's cache.
    assert!(m.unmount());
    let m = FuseMount::start(&tc, "");
    let path = m.path("log.json");
    let expect = data.clone();
    let blocks = tokio::task::spawn_blocking(move || {
        let f = File::open(&path).unwrap();
        let got = read_all(&f, SIZE);
        assert!(got == expect, "data differs after a remount");
        f.metadata().unwrap().blocks()
    })
    .await
    .unwrap();
    assert!(
        blocks * 512 * 2 <= SIZE as u64,
        "{blocks} blocks for {SIZE} bytes"
    );
    let (logical, stored) = df_compressed(&spec).expect("df shows compression");
    assert_eq!(logical, (SIZE / 1024) as u64);
    assert!(stored * 2 <= logical, "{stored} KiB stored of {logical}");
    let (ok, out, err) = weft(&["get_param", "--mgs", &mgs, "obdfilter.*.compress_ratio"]);
    assert!(ok, "{err}");
    for line in out.lines() {
        let ratio: f64 = line.split('=').nth(1).unwrap().parse().unwrap();
        assert!(ratio >= 2.0, "{out}");
    }
    let (ok, out, _) = weft(&["df", &spec]);
    assert!(ok && out.contains("ratio"), "{out}");

    // Random I/O against a byte model, across chunk, stripe and object boundaries.
    let path = m.path("log.json");
    tokio::task::spawn_blocking(move || {
        let mut model = data;
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let mut rng = StdRng::seed_from_u64(7);
        for i in 0..150u64 {
            let len = [1, 100, 4096, 65536, 70_000, 300_000][rng.random_range(0..6)];
            let offset = rng.random_range(0..(model.len() + 100_000));
            match rng.random_range(0..10) {
                0..=3 => {
                    let buf = text(len, 100 + i);
                    f.write_all_at(&buf, offset as u64).unwrap();
                    if model.len() < offset + len {
                        model.resize(offset + len, 0);
                    }
                    model[offset..offset + len].copy_from_slice(&buf);
                }
                4 => {
                    fallocate(
                        &f,
                        libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                        offset as u64,
                        len as u64,
                    )
                    .unwrap();
                    let end = (offset + len).min(model.len());
                    if offset < end {
                        model[offset..end].fill(0);
                    }
                }
                5 if i % 3 == 0 => {
                    let size = rng.random_range(SIZE / 2..SIZE + MIB);
                    f.set_len(size as u64).unwrap();
                    model.resize(size, 0);
                }
                _ => {
                    let mut buf = vec![0u8; len];
                    let n = f.read_at(&mut buf, offset as u64).unwrap();
                    let want = model.len().saturating_sub(offset).min(len);
                    assert_eq!(n, want, "read of {len} at {offset}");
                    assert!(
                        n == 0 || buf[..n] == model[offset..offset + n],
                        "read of {len} at {offset} differs"
                    );
                }
            }
        }
        // Holes found are zeros in the model; data found is where the model has some.
        let mut at = 0;
        while let Some(d) = seek_data_or_hole(&f, at, libc::SEEK_DATA).unwrap() {
            assert!(
                model[at as usize..d as usize].iter().all(|&b| b == 0),
                "hole {at}..{d}"
            );
            let h = seek_data_or_hole(&f, d, libc::SEEK_HOLE).unwrap().unwrap();
            assert!(h > d && h <= model.len() as u64);
            at = h;
        }
        assert!(model[at as usize..].iter().all(|&b| b == 0));
        let got = read_all(&f, model.len());
        assert!(got == model, "whole file differs after random I/O");
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setstripe_compress_chooses_per_directory_and_file_over_the_ost_setting() {
    let tc = TestCluster::start(bin(), 2).await.unwrap();
    let mgs = tc.mgs_addr.clone();
    let spec = format!("{mgs}:/{FSNAME}");
    let m = FuseMount::start(&tc, "");
    let dir = |rel: &str| m.path(rel).to_string_lossy().into_owned();
    std::fs::create_dir(m.path("packed")).unwrap();
    std::fs::create_dir(m.path("plain")).unwrap();

    // A bad choice is refused and changes nothing.
    let (ok, _, err) = weft(&["setstripe", "--compress", "zstd", &dir("packed")]);
    assert!(!ok && err.contains("unknown compression"), "{err}");

    // OSTs leave objects plain; the directory asks for LZ4, and its subdirectories
    // made afterwards inherit that.
    let (ok, _, err) = weft(&[
        "setstripe",
        "-c",
        "2",
        "-S",
        "1M",
        "--compress",
        "lz4",
        &dir("packed"),
    ]);
    assert!(ok, "{err}");
    let (ok, out, err) = weft(&["getstripe", "-d", &dir("packed")]);
    assert!(ok && out.contains("compr_type:    lz4"), "{out}{err}");
    std::fs::create_dir(m.path("packed/sub")).unwrap();
    let a = text(8 * MIB, 11);
    let b = text(4 * MIB, 12);
    let (pa, pb) = (m.path("packed/a.json"), m.path("packed/sub/b.json"));
    let (wa, wb) = (a.clone(), b.clone());
    tokio::task::spawn_blocking(move || {
        write_synced(&pa, &wa);
        write_synced(&pb, &wb);
    })
    .await
    .unwrap();
    let (ok, out, err) = weft(&["getstripe", &dir("packed/sub/b.json")]);
    assert!(ok && out.contains("lmm_compr_type:    lz4"), "{out}{err}");
    let (logical, stored) = df_compressed(&spec).expect("the directory's files are compressed");
    assert_eq!(logical, (12 * MIB / 1024) as u64);
    assert!(stored * 2 <= logical, "{stored} KiB stored of {logical}");
    // A file outside it is not.
    let c = text(2 * MIB, 13);
    let (pc, wc) = (m.path("c.json"), c.clone());
    tokio::task::spawn_blocking(move || write_synced(&pc, &wc))
        .await
        .unwrap();
    assert_eq!(df_compressed(&spec).unwrap().0, (12 * MIB / 1024) as u64);

    // With the OSTs compressing by default, a directory that says `none` keeps its
    // files plain, and a file created with its own layout can ask for LZ4 in it.
    compress_every_ost(&mgs, 2).await;
    let (ok, _, err) = weft(&["setstripe", "-Z", "none", &dir("plain")]);
    assert!(ok, "{err}");
    let (ok, _, err) = weft(&["setstripe", "-c", "1", "-Z", "lz4", &dir("plain/own.json")]);
    assert!(ok, "{err}");
    let (d, own) = (text(4 * MIB, 14), text(MIB, 15));
    let (pd, po, wd, wo) = (
        m.path("plain/d.json"),
        m.path("plain/own.json"),
        d.clone(),
        own.clone(),
    );
    tokio::task::spawn_blocking(move || {
        write_synced(&pd, &wd);
        let f = OpenOptions::new().write(true).open(&po).unwrap();
        f.write_all_at(&wo, 0).unwrap();
        f.sync_all().unwrap();
    })
    .await
    .unwrap();
    let (ok, out, err) = weft(&["getstripe", &dir("plain/d.json")]);
    assert!(ok && out.contains("lmm_compr_type:    none"), "{out}{err}");
    assert_eq!(
        df_compressed(&spec).unwrap().0,
        (13 * MIB / 1024) as u64,
        "only own.json joined the compressed bytes"
    );

    // Every file reads back whole from a fresh mount.
    drop(m);
    let m = FuseMount::start(&tc, "");
    let files = [
        (m.path("packed/a.json"), a),
        (m.path("packed/sub/b.json"), b),
        (m.path("c.json"), c),
        (m.path("plain/d.json"), d),
        (m.path("plain/own.json"), own),
    ];
    tokio::task::spawn_blocking(move || {
        for (path, want) in files {
            let got = read_all(&File::open(&path).unwrap(), want.len());
            assert!(got == want, "{} differs", path.display());
        }
    })
    .await
    .unwrap();
}
