//! The path verbs through a real FUSE mount over separate server processes: `setstripe` /
//! `getstripe` round trips (plain, `-c -1` directory defaults, PFL components instantiated
//! only when written), `find` against a brute-force walk, `migrate` while other readers
//! keep reading, and `df` on a path.

use crate::bin;
use crate::fuse_common::FuseMount;
use crate::support::{weft, weft_stdin};
use std::collections::BTreeSet;
use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use weft_client::{LayoutOf, OpenOptions};
use weft_proto::mdt::Credentials;
use weft_testkit::TestCluster;
use weft_testkit::pattern;
use weft_testkit::wait_until;

fn p(path: &Path) -> String {
    path.display().to_string()
}

/// The layout `weft getstripe --json` reports for one file.
fn json_layout(path: &Path) -> serde_json::Value {
    let (ok, out, err) = weft(&["getstripe", "-d", "--json", &p(path)]);
    assert!(ok, "getstripe {}: {err}", path.display());
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v[0].clone()
}

fn component_osts(layout: &serde_json::Value, i: usize) -> Vec<u64> {
    layout["layout"]["components"][i]["osts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setstripe_and_getstripe_round_trip_through_the_mount() {
    let tc = TestCluster::start(bin(), 4).await.unwrap();
    let m = FuseMount::start(&tc, "");
    let dir = m.path("wide");
    fs::create_dir(&dir).unwrap();

    // `-c -1` on a directory: its default, inherited by new files and subdirectories.
    let (ok, _, err) = weft(&["setstripe", "-c", "-1", "-S", "4M", &p(&dir)]);
    assert!(ok, "{err}");
    let (ok, out, _) = weft(&["getstripe", "-d", &p(&dir)]);
    assert!(ok);
    assert!(
        out.contains("stripe_count:  -1 stripe_size:   4194304"),
        "{out}"
    );
    fs::write(dir.join("f"), b"data").unwrap();
    fs::create_dir(dir.join("sub")).unwrap();
    fs::write(dir.join("sub/g"), b"more").unwrap();
    for f in ["f", "sub/g"] {
        let (ok, out, err) = weft(&["getstripe", "-c", &p(&dir.join(f))]);
        assert!(ok, "{err}");
        assert_eq!(out.trim(), "4", "{f} is striped over every OST");
        let (_, out, _) = weft(&["getstripe", "-S", &p(&dir.join(f))]);
        assert_eq!(out.trim(), "4194304");
    }
    let l = json_layout(&dir.join("f"));
    assert_eq!(
        component_osts(&l, 0).into_iter().collect::<BTreeSet<_>>(),
        (0..4).collect()
    );
    // Listing a directory shows its files' layouts.
    let (ok, out, _) = weft(&["getstripe", "-r", &p(&dir)]);
    assert!(ok);
    assert!(
        out.contains("wide/f\n") && out.contains("wide/sub/g\n"),
        "{out}"
    );

    // A new file with an explicit layout: count, size and an OST list.
    let f2 = m.path("listed");
    let (ok, _, err) = weft(&["setstripe", "-o", "1,3", "-S", "128K", &p(&f2)]);
    assert!(ok, "{err}");
    let l = json_layout(&f2);
    assert_eq!(component_osts(&l, 0), vec![1, 3]);
    assert_eq!(l["layout"]["components"][0]["stripe_size"], 131072);
    // Its data goes where the layout says, and reads back.
    let data = pattern(0, 1 << 20, 7);
    fs::write(&f2, &data).unwrap();
    assert_eq!(fs::read(&f2).unwrap(), data);
    // A file with data keeps its layout; -d on a file and bad sizes are refused.
    let (ok, _, err) = weft(&["setstripe", "-c", "2", &p(&f2)]);
    assert!(!ok && err.contains("EEXIST"), "{err}");
    let (ok, _, _) = weft(&["setstripe", "-S", "1000", &p(&m.path("bad"))]);
    assert!(!ok);
    assert!(!m.path("bad").exists());

    // -d removes the directory's default: new files take the file system's default again.
    let (ok, _, err) = weft(&["setstripe", "-d", &p(&dir)]);
    assert!(ok, "{err}");
    fs::write(dir.join("after"), b"x").unwrap();
    let (_, out, _) = weft(&["getstripe", "-c", &p(&dir.join("after"))]);
    assert_eq!(out.trim(), "1");

    // `df PATH` finds the file system from the mount.
    let (ok, out, err) = weft(&["df", &p(&m.mnt)]);
    assert!(ok, "{err}");
    assert!(out.contains("OST0003"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pfl_components_are_instantiated_only_when_written() {
    let tc = TestCluster::start(bin(), 4).await.unwrap();
    let m = FuseMount::start(&tc, "");
    let f = m.path("pfl");
    let (ok, _, err) = weft(&[
        "setstripe",
        "-E",
        "1M",
        "-c",
        "1",
        "-S",
        "1M",
        "-E",
        "8M",
        "-c",
        "2",
        "-E",
        "-1",
        "-c",
        "-1",
        "-S",
        "4M",
        &p(&f),
    ]);
    assert!(ok, "{err}");
    let init = |l: &serde_json::Value| -> Vec<bool> {
        l["layout"]["components"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| !c["osts"].as_array().unwrap().is_empty())
            .collect()
    };
    let l = json_layout(&f);
    assert_eq!(init(&l), [true, false, false], "only the first at create");
    assert_eq!(l["layout"]["components"][1]["stripe_size"], 1 << 20);

    // 3 MiB reaches the second component only.
    let head = pattern(0, 3 << 20, 1);
    fs::write(&f, &head).unwrap();
    let l = json_layout(&f);
    assert_eq!(init(&l), [true, true, false]);
    assert_eq!(component_osts(&l, 1).len(), 2);

    // A write at 20 MiB instantiates the last one; the gap reads as zeros.
    let tail = pattern(0, 100_000, 2);
    {
        let mut h = fs::OpenOptions::new().write(true).open(&f).unwrap();
        std::io::Seek::seek(&mut h, std::io::SeekFrom::Start(20 << 20)).unwrap();
        h.write_all(&tail).unwrap();
    }
    let l = json_layout(&f);
    assert_eq!(init(&l), [true, true, true]);
    assert_eq!(component_osts(&l, 2).len(), 4);
    let got = fs::read(&f).unwrap();
    assert_eq!(got.len(), (20 << 20) + tail.len());
    assert_eq!(&got[..head.len()], &head[..]);
    assert!(got[head.len()..20 << 20].iter().all(|&b| b == 0));
    assert_eq!(&got[20 << 20..], &tail[..]);

    // Growing a file by truncate instantiates nothing: the extent of a component without
    // objects reads as zeros.
    let g = m.path("pfl-sparse");
    let (ok, _, err) = weft(&[
        "setstripe",
        "-E",
        "1M",
        "-c",
        "1",
        "-E",
        "-1",
        "-c",
        "2",
        &p(&g),
    ]);
    assert!(ok, "{err}");
    fs::write(&g, b"head").unwrap();
    fs::OpenOptions::new()
        .write(true)
        .open(&g)
        .unwrap()
        .set_len(5 << 20)
        .unwrap();
    let got = fs::read(&g).unwrap();
    assert_eq!(got.len(), 5 << 20);
    assert_eq!(&got[..4], b"head");
    assert!(got[4..].iter().all(|&b| b == 0));
    assert_eq!(init(&json_layout(&g)), [true, false]);
}

/// Every regular file under `root` matching a predicate, by walking the mount.
fn walk(root: &Path, out: &mut BTreeSet<String>, keep: &dyn Fn(&Path, &fs::Metadata) -> bool) {
    for e in fs::read_dir(root).unwrap() {
        let e = e.unwrap();
        let md = fs::symlink_metadata(e.path()).unwrap();
        if keep(&e.path(), &md) {
            out.insert(p(&e.path()));
        }
        if md.is_dir() {
            walk(&e.path(), out, keep);
        }
    }
}

fn lines(s: &str) -> BTreeSet<String> {
    s.lines().map(str::to_string).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn find_equals_a_brute_force_walk() {
    let tc = TestCluster::start(bin(), 4).await.unwrap();
    let m = FuseMount::start(&tc, "");
    let root = m.path("tree");
    fs::create_dir(&root).unwrap();
    // 3 levels, files of several sizes and names, some striped wider, a symlink.
    let mut n = 0u64;
    for a in 0..4 {
        let da = root.join(format!("d{a}"));
        fs::create_dir(&da).unwrap();
        if a == 1 {
            let (ok, _, err) = weft(&["setstripe", "-c", "2", &p(&da)]);
            assert!(ok, "{err}");
        }
        for b in 0..3 {
            let db = da.join(format!("e{b}"));
            fs::create_dir(&db).unwrap();
            for i in 0..12 {
                n += 1;
                let name = if i % 3 == 0 {
                    format!("shard-{n:04}.bin")
                } else {
                    format!("meta-{n:04}.json")
                };
                fs::write(db.join(name), vec![7u8; (n as usize * 997) % 40_000]).unwrap();
            }
        }
    }
    std::os::unix::fs::symlink("d0", root.join("link")).unwrap();

    // Name, type and size: the same answers as GNU find through the mount.
    for (weft_preds, gnu_preds) in [
        (vec!["--type", "f"], vec!["-type", "f"]),
        (vec!["--type", "d"], vec!["-type", "d"]),
        (vec!["--type", "l"], vec!["-type", "l"]),
        (vec!["--name", "shard-*.bin"], vec!["-name", "shard-*.bin"]),
        (
            vec!["--type", "f", "--size", "+20k"],
            vec!["-type", "f", "-size", "+20k"],
        ),
        (
            vec!["-size", "-3k", "-type", "f"],
            vec!["-size", "-3k", "-type", "f"],
        ),
        (vec!["--mtime", "-1"], vec!["-mtime", "-1"]),
        (
            vec!["--maxdepth", "2", "--name", "e*"],
            vec!["-maxdepth", "2", "-name", "e*"],
        ),
    ] {
        let mut args = vec!["find", root.to_str().unwrap()];
        args.extend(&weft_preds);
        let (ok, out, err) = weft(&args);
        assert!(ok, "{err}");
        let gnu = Command::new("find")
            .arg(&root)
            .args(&gnu_preds)
            .output()
            .unwrap();
        let want = lines(&String::from_utf8_lossy(&gnu.stdout));
        assert!(
            !want.is_empty() || weft_preds == ["--type", "l"],
            "{gnu_preds:?}"
        );
        assert_eq!(lines(&out), want, "weft find {weft_preds:?}");
    }

    // Layout predicates against the layouts read one by one.
    let fs2 = tc
        .fs_client(std::time::Duration::from_secs(10))
        .await
        .unwrap();
    let cred = Credentials::root();
    let mut layouts = Vec::new();
    let mut files = BTreeSet::new();
    walk(&root, &mut files, &|_, md| md.is_file());
    for f in &files {
        let inner = f.strip_prefix(m.mnt.to_str().unwrap()).unwrap();
        let attr = fs2.resolve(inner, false, &cred).await.unwrap();
        let LayoutOf::File(Some(l)) = fs2.layout_of(attr.fid).await.unwrap() else {
            panic!("{f} has no layout");
        };
        layouts.push((f.clone(), l));
    }
    for ost in 0..4u32 {
        let want: BTreeSet<String> = layouts
            .iter()
            .filter(|(_, l)| l.components.iter().any(|c| c.osts.contains(&ost)))
            .map(|(f, _)| f.clone())
            .collect();
        let (ok, out, err) = weft(&["find", &p(&root), "--ost", &ost.to_string()]);
        assert!(ok, "{err}");
        assert_eq!(lines(&out), want, "--ost {ost}");
    }
    let two: BTreeSet<String> = layouts
        .iter()
        .filter(|(_, l)| l.components[0].osts.len() == 2)
        .map(|(f, _)| f.clone())
        .collect();
    assert_eq!(two.len(), 36, "d1's files have 2 stripes");
    let (_, out, _) = weft(&["find", &p(&root), "--stripe-count", "2", "--type", "f"]);
    assert_eq!(lines(&out), two);
    let (_, out, _) = weft(&["find", &p(&root), "--mdt", "0", "--type", "f"]);
    assert_eq!(lines(&out), files);
    let (ok, _, err) = weft(&["find", &p(&root), "--bogus", "1"]);
    assert!(!ok && err.contains("unknown predicate"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_restripes_while_others_read() {
    let tc = TestCluster::start(bin(), 4).await.unwrap();
    let m = FuseMount::start(&tc, "");
    let f = m.path("ckpt");
    let (ok, _, err) = weft(&["setstripe", "-c", "1", "-i", "0", &p(&f)]);
    assert!(ok, "{err}");
    let data = Arc::new(pattern(0, 24 << 20, 11));
    fs::write(&f, &*data).unwrap();
    let before = json_layout(&f);
    assert_eq!(component_osts(&before, 0), vec![0]);

    // A library client that opened before the migration keeps its old layout throughout.
    let fs2 = tc
        .fs_client(std::time::Duration::from_secs(10))
        .await
        .unwrap();
    let cred = Credentials::root();
    let held = fs2
        .open_path("/ckpt", OpenOptions::read(), &cred)
        .await
        .unwrap();

    // Readers through the mount: whole-file reads in a loop, every byte checked.
    let stop = Arc::new(AtomicBool::new(false));
    let rounds = Arc::new(AtomicU64::new(0));
    let reader = {
        let (f, data, stop, rounds) = (f.clone(), data.clone(), stop.clone(), rounds.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let mut got = Vec::new();
                fs::File::open(&f).unwrap().read_to_end(&mut got).unwrap();
                assert!(got == *data, "a reader saw wrong bytes during migration");
                rounds.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    while rounds.load(Ordering::Relaxed) == 0 {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let (ok, _, err) = weft(&["migrate", "-c", "4", "-S", "1M", &p(&f)]);
    assert!(ok, "{err}");
    let r0 = rounds.load(Ordering::Relaxed);
    while rounds.load(Ordering::Relaxed) < r0 + 2 {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    stop.store(true, Ordering::Relaxed);
    reader.join().unwrap();

    let after = json_layout(&f);
    assert_eq!(
        component_osts(&after, 0)
            .into_iter()
            .collect::<BTreeSet<_>>(),
        (0..4).collect()
    );
    assert_eq!(fs::read(&f).unwrap(), *data);
    assert_eq!(fs::metadata(&f).unwrap().size(), data.len() as u64);
    // The handle opened before the swap still reads the old objects, which therefore
    // still exist; they go once it closes.
    let old = held.read_at(0, data.len() as u64).await.unwrap();
    assert!(old[..] == data[..]);
    let objects_on_ost0 = || {
        let mut n = 0;
        for d in fs::read_dir(tc.dir.path().join("ost0/O")).unwrap() {
            n += fs::read_dir(d.unwrap().path()).unwrap().count();
        }
        n
    };
    let pinned = objects_on_ost0();
    held.close().await.unwrap();
    wait_until(
        "the old objects are destroyed after the last reader closes",
        || objects_on_ost0() < pinned,
    );
    assert_eq!(fs::read(&f).unwrap(), *data);

    // A file open for writing is not migrated, and keeps its layout and bytes.
    let g = m.path("busy");
    fs::write(&g, b"abc").unwrap();
    let before = json_layout(&g);
    let mut w = fs::OpenOptions::new().append(true).open(&g).unwrap();
    let (ok, _, err) = weft(&["migrate", "-c", "2", &p(&g)]);
    assert!(!ok && err.contains("EBUSY"), "{err}");
    w.write_all(b"def").unwrap();
    drop(w);
    assert_eq!(json_layout(&g)["layout"], before["layout"]);
    assert_eq!(fs::read(&g).unwrap(), b"abcdef");

    // Paths from standard input (as `weft find ... | weft migrate ...`); no options keeps
    // the layout's parameters.
    let (ok, found, err) = weft(&["find", &p(&m.mnt), "--ost", "0", "--type", "f"]);
    assert!(ok, "{err}");
    let (ok, _, err) = weft_stdin(&["migrate", "-o", "2,3"], &found);
    assert!(ok, "{err}");
    let (_, left, _) = weft(&["find", &p(&m.mnt), "--ost", "0", "--type", "f"]);
    assert_eq!(left, "", "OST0 was drained");
    assert_eq!(fs::read(&f).unwrap(), *data);
    assert_eq!(fs::read(&g).unwrap(), b"abcdef");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weft_bench_runs_in_a_directory_of_a_mount() {
    let tc = TestCluster::start(bin(), 2).await.unwrap();
    let m = FuseMount::start(&tc, "");
    let dir = m.path("jobs/bench");
    fs::create_dir_all(&dir).unwrap();
    fs::write(m.path("jobs/keep"), b"x").unwrap();
    let (ok, out, err) = weft(&[
        "bench",
        &p(&dir),
        "--threads",
        "2",
        "--block",
        "4M",
        "--transfer",
        "1M",
        "--files",
        "20",
        "--json",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    for k in ["write_mb_s", "read_mb_s"] {
        assert!(v["ior"][k].as_f64().unwrap() > 0.0, "{out}");
    }
    for k in ["create_per_s", "stat_per_s", "read_per_s", "remove_per_s"] {
        assert!(v["mdtest"][k].as_f64().unwrap() > 0.0, "{out}");
    }
    // It worked in that directory and cleaned up after itself.
    assert_eq!(fs::read_dir(&dir).unwrap().count(), 0);
    assert_eq!(fs::read(m.path("jobs/keep")).unwrap(), b"x");
    let (ok, _, err) = weft(&["bench", &p(&m.path("jobs/keep"))]);
    assert!(!ok && err.contains("not a directory"), "{err}");
}

/// `weft df PATH` on a mount counts what was written, to the block: every OST on a tmpfs of
/// its own, so nothing else moves the figures.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn df_counts_what_was_written_through_the_mount() {
    let tc = TestCluster::start_with_ost_size(bin(), 2, Some(64 << 20))
        .await
        .unwrap();
    let m = FuseMount::start(&tc, "");
    let df = |inodes: bool| {
        let mut args = vec!["df", "--json"];
        if inodes {
            args.push("-i");
        }
        let mnt = p(&m.mnt);
        args.push(&mnt);
        let (ok, out, err) = weft(&args);
        assert!(ok, "{err}");
        serde_json::from_str::<serde_json::Value>(&out).unwrap()
    };
    let used = |v: &serde_json::Value, ost: usize| v["osts"][ost]["used"].as_u64().unwrap();
    let (blocks0, inodes0) = (df(false), df(true));

    // 5 MiB plus a partial block on OST1 alone; the close writes it back.
    let f = m.path("on-ost1");
    let (ok, _, err) = weft(&["setstripe", "-c", "1", "-i", "1", &p(&f)]);
    assert!(ok, "{err}");
    fs::write(&f, pattern(0, (5 << 20) + 100, 3)).unwrap();
    let (blocks1, inodes1) = (df(false), df(true));

    // In 1 KiB units: 5 MiB and one 4 KiB block for the last 100 bytes.
    assert_eq!(used(&blocks1, 1) - used(&blocks0, 1), 5 * 1024 + 4);
    assert_eq!(
        used(&blocks1, 0),
        used(&blocks0, 0),
        "OST0 holds none of it"
    );
    let summary = |v: &serde_json::Value| v["summary"]["used"].as_u64().unwrap();
    assert_eq!(summary(&blocks1) - summary(&blocks0), 5 * 1024 + 4);
    // One object, and at most the directories that hold it.
    let new_inodes = used(&inodes1, 1) - used(&inodes0, 1);
    assert!((1..=3).contains(&new_inodes), "{new_inodes} new inodes");
    // The MDT row counts the new file among its inodes.
    assert!(
        inodes1["mdts"][0]["used"].as_u64().unwrap() > inodes0["mdts"][0]["used"].as_u64().unwrap()
    );
}
