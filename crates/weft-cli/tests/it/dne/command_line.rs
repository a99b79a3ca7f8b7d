//! The command line on several MDTs: `weft mkdir -i`, `getdirstripe`, `find`, `weft up`
//! with two MDTs, and `weft fsck`.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weft_mkdir_i_and_getdirstripe_on_spec_paths() {
    let tc = two_mdts(1).await;
    let spec = |p: &str| format!("{}:/{FSNAME}{p}", tc.mgs_addr);
    let (ok, _, err) = weft(&["mkdir", "-i", "1", &spec("/dir")]);
    assert!(ok, "weft mkdir -i 1: {err}");
    let (ok, out, err) = weft(&["getdirstripe", &spec("/dir")]);
    assert!(ok, "{err}");
    assert!(out.contains("lmv_stripe_offset: 1"), "{out}");
    assert!(out.contains("lmv_stripe_count: 0"), "{out}");
    let (ok, out, _) = weft(&["getdirstripe", "-i", &spec("/dir")]);
    assert!(ok);
    assert_eq!(out.trim(), "1");

    // Several paths, a mode, and directories that inherit their parent's MDT.
    let (ok, _, err) = weft(&["mkdir", "-m", "700", &spec("/plain"), &spec("/dir/inner")]);
    assert!(ok, "{err}");
    let (ok, _, err) = weft(&["mkdir", "--mdt-index", "0", &spec("/dir/back")]);
    assert!(ok, "{err}");
    let (ok, out, err) = weft(&[
        "getdirstripe",
        "--json",
        &spec("/"),
        &spec("/plain"),
        &spec("/dir/inner"),
        &spec("/dir/back"),
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let got: Vec<u64> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["mdt_index"].as_u64().unwrap())
        .collect();
    assert_eq!(got, [0, 0, 1, 0], "{out}");

    let c = fs_client(&tc).await;
    let dir = c.resolve("/dir", true, &root()).await.unwrap();
    assert_eq!(c.mdt_index_of(dir.fid).unwrap(), 1);
    let plain = c.resolve("/plain", true, &root()).await.unwrap();
    assert_eq!(plain.mode & 0o7777, 0o700);

    // Failures are reported.
    let (ok, _, err) = weft(&["mkdir", "-i", "9", &spec("/nowhere")]);
    assert!(!ok);
    assert!(err.contains("nowhere"), "{err}");
    let (ok, _, err) = weft(&["mkdir", "-i", "1", &spec("/dir")]);
    assert!(!ok, "an existing name");
    assert!(err.contains("dir"), "{err}");
    c.write_file("/dir/file", b"x", &root()).await.unwrap();
    let (ok, _, err) = weft(&["getdirstripe", &spec("/dir/file")]);
    assert!(!ok);
    assert!(err.contains("not a directory"), "{err}");
    check_consistent(&tc, &c).await;
}

/// `weft find` (like `lfs find`) walks remote directories as any other: their entries are
/// listed, searched and matched by `--mdt`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weft_find_descends_into_remote_directories() {
    let tc = two_mdts(1).await;
    let c = fs_client(&tc).await;
    let cred = root();
    let dir = c
        .mkdir_on(Fid::ROOT, b"dir", 0o755, 1, &cred)
        .await
        .unwrap();
    c.mkdir(dir.fid, b"sub", 0o755, &cred).await.unwrap();
    c.write_file("/dir/file", b"x", &cred).await.unwrap();
    c.write_file("/dir/sub/g", b"y", &cred).await.unwrap();
    c.write_file("/top", b"z", &cred).await.unwrap();
    let spec = format!("{}:/{FSNAME}", tc.mgs_addr);
    let found = |args: &[&str]| -> BTreeSet<String> {
        let mut all = vec!["find", spec.as_str()];
        all.extend_from_slice(args);
        let (ok, out, err) = weft(&all);
        assert!(ok, "weft {all:?}: {err}");
        out.lines()
            .map(|l| {
                l.strip_prefix(spec.as_str())
                    .unwrap_or(l)
                    .trim_start_matches('/')
                    .to_string()
            })
            .filter(|l| !l.is_empty())
            .collect()
    };
    // `getstripe -r` walks into the remote directory (a control for the scans below).
    let (ok, out, err) = weft(&["getstripe", "-r", &spec]);
    assert!(ok, "{err}");
    assert!(out.contains("dir/sub/g"), "{out}");

    let everything = found(&[]);
    assert_eq!(
        everything,
        ["dir", "dir/file", "dir/sub", "dir/sub/g", "top"]
            .map(String::from)
            .into(),
        "weft find of the whole file system"
    );
    assert_eq!(
        found(&["--mdt", "1"]),
        ["dir", "dir/file", "dir/sub", "dir/sub/g"]
            .map(String::from)
            .into(),
        "weft find --mdt 1"
    );
    assert_eq!(
        found(&["-type", "f"]),
        ["dir/file", "dir/sub/g", "top"].map(String::from).into(),
        "weft find -type f"
    );
}

/// `weft up --mdts 2`: both MDTs in one process still talk through the protocol; a remote
/// directory is made, used and removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weft_up_with_two_mdts_serves_remote_directories() {
    let dir = tempfile::tempdir().unwrap();
    let addr = format!("127.0.0.1:{}", weft_testkit::free_port().unwrap());
    let args = [
        "up",
        "--data",
        &dir.path().join("data").display().to_string(),
        "--listen",
        &addr,
        "--no-mount",
        "--mdts",
        "2",
        "--osts",
        "1",
    ]
    .map(String::from)
    .to_vec();
    let _up =
        weft_testkit::ServerProcess::start("up", bin(), args, dir.path().join("up.log")).unwrap();
    let spec = |p: &str| format!("{addr}:/weft{p}");
    // Wait until both MDTs serve: `weft mkdir -i 1` succeeds.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (ok, _, err) = weft(&["mkdir", "-i", "1", &spec("/remote")]);
        if ok {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "weft up never served MDT1: {err}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (ok, out, err) = weft(&["getdirstripe", &spec("/remote")]);
    assert!(ok, "{err}");
    assert!(out.contains("lmv_stripe_offset: 1"), "{out}");
    let c = Client::mount(&addr, "weft", Default::default())
        .await
        .unwrap();
    let cred = root();
    c.write_file("/remote/f", b"one process", &cred)
        .await
        .unwrap();
    assert_eq!(
        &c.read_file("/remote/f", &cred).await.unwrap()[..],
        b"one process"
    );
    let r = c.resolve("/remote", true, &cred).await.unwrap();
    assert_eq!(c.mdt_index_of(r.fid).unwrap(), 1);
    c.unlink(r.fid, b"f", &cred).await.unwrap();
    c.rmdir(Fid::ROOT, b"remote", &cred).await.unwrap();
    assert_eq!(
        errno(c.lookup(Fid::ROOT, b"remote", &cred).await),
        Errno::NoEnt
    );
}

/// `weft fsck` exit status and output.
fn fsck(tc: &TestCluster, dry_run: bool) -> (Option<i32>, String) {
    let spec = format!("{}:/{FSNAME}", tc.mgs_addr);
    let mut args = vec!["fsck"];
    if dry_run {
        args.push("--dry-run");
    }
    args.push(&spec);
    let out = Command::new(bin())
        .args(&args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// `weft fsck` finds nothing wrong in a namespace spread over two MDTs (a striped and a
/// remote directory, files renamed and hard-linked across MDTs), finds a wrong link count
/// and an orphan inode (made with its own repair requests), repairs both, and then finds
/// nothing again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fsck_finds_nothing_in_a_sound_namespace_and_repairs_what_it_finds() {
    let tc = two_mdts(2).await;
    let c = fs_client(&tc).await;
    let cred = root();
    let s = c
        .mkdir_striped(
            Fid::ROOT,
            b"s",
            0o755,
            2,
            weft_proto::mdt::DirHash::Fnv1a64,
            &cred,
        )
        .await
        .unwrap();
    let r = c.mkdir_on(Fid::ROOT, b"r", 0o755, 1, &cred).await.unwrap();
    for i in 0..20 {
        c.write_file(&format!("/s/f{i}"), b"data", &cred)
            .await
            .unwrap();
    }
    for i in 0..10 {
        let (from, to) = (format!("f{i}"), format!("g{i}"));
        c.rename(s.fid, from.as_bytes(), r.fid, to.as_bytes(), PLAIN, &cred)
            .await
            .unwrap();
    }
    let f10 = c.lookup(s.fid, b"f10", &cred).await.unwrap();
    c.link(f10.fid, r.fid, b"l10", &cred).await.unwrap();
    let (code, out) = fsck(&tc, true);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("0 problems"), "{out}");

    // A wrong link count, and a file whose only name is gone.
    let g0 = c.lookup(r.fid, b"g0", &cred).await.unwrap();
    let g1 = c.lookup(r.fid, b"g1", &cred).await.unwrap();
    let repair = |fid: Fid, repair: weft_proto::mdt::FsckRepair| {
        let c = c.clone();
        async move {
            c.cluster()
                .mdt_of(fid)
                .unwrap()
                .call(weft_proto::mdt::MdtRequest::FsckRepair { repair })
                .await
                .unwrap()
        }
    };
    repair(
        g0.fid,
        weft_proto::mdt::FsckRepair::SetNlink {
            fid: g0.fid,
            expected: 1,
            nlink: 5,
        },
    )
    .await;
    repair(
        r.fid,
        weft_proto::mdt::FsckRepair::RemoveEntry {
            parent: r.fid,
            name: b"g1".to_vec(),
            fid: g1.fid,
        },
    )
    .await;
    let (code, out) = fsck(&tc, true);
    assert_eq!(code, Some(4), "{out}");
    assert!(out.contains("link count 5"), "{out}");
    assert!(out.contains(&format!("orphan Regular {}", g1.fid)), "{out}");
    assert!(out.contains("2 problems"), "{out}");
    let (code, out) = fsck(&tc, false);
    assert_eq!(code, Some(1), "{out}");
    assert_eq!(c.getattr(g0.fid).await.unwrap().nlink, 1);
    assert!(c.getattr(g1.fid).await.is_err());
    // (The census of the other tests does not know striped directories' shards: fsck is
    // the check here.)
    let (code, out) = fsck(&tc, true);
    assert_eq!(code, Some(0), "{out}");

    // An object no file has (fsck lists OSTs again before calling one an orphan: this one
    // stays), then destroyed by the repair.
    let stray = weft_proto::ObjectId {
        fid: Fid {
            seq: 0x2_0000_7777,
            oid: 1,
            ver: 0,
        },
        component: 1,
        stripe: 0,
    };
    let ost = c.cluster().ost(0).unwrap();
    ost.write(
        stray,
        0,
        bytes::Bytes::from_static(b"stray"),
        true,
        weft_proto::Compression::Inherit,
    )
    .await
    .unwrap();
    let (code, out) = fsck(&tc, true);
    assert_eq!(code, Some(4), "{out}");
    assert!(
        out.contains(&format!(
            "OST0000: object {}:1:0 belongs to no file",
            stray.fid
        )),
        "{out}"
    );
    let (code, out) = fsck(&tc, false);
    assert_eq!(code, Some(1), "{out}");
    let (code, out) = fsck(&tc, true);
    assert_eq!(code, Some(0), "{out}");
}
