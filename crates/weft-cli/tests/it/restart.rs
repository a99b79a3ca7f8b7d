//! Fault tests: every server process is killed (SIGKILL) and restarted, and every change it
//! acknowledged is still there; object destruction survives OST and MDT restarts.

use crate::bin;
use bytes::Bytes;
use std::time::{Duration, Instant};
use weft_client::NewFile;
use weft_proto::mdt::{Credentials, XattrMode};
use weft_proto::{Compression, Errno, Fid, ObjectId, TargetId};
use weft_testkit::TestCluster;
use weft_testkit::eventually;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_changes_survive_kill_and_restart_of_every_process() {
    let mut tc = TestCluster::start(bin(), 2).await.unwrap();
    let client = tc.client().await.unwrap();
    let cred = Credentials::root();
    let mdt = client.mdt(0).unwrap();

    // Metadata: many creates acknowledged in groups, then SIGKILL of the MDS.
    let dir = mdt.mkdir(Fid::ROOT, b"keep", 0o750, &cred).await.unwrap();
    let mut fids = Vec::new();
    for i in 0..200 {
        fids.push(
            mdt.create(
                &NewFile::exclusive(dir.fid, format!("f{i}").as_bytes(), 0o100640),
                &cred,
            )
            .await
            .unwrap()
            .attr
            .fid,
        );
    }
    mdt.setxattr(dir.fid, b"user.k", b"v", XattrMode::Any, &cred)
        .await
        .unwrap();
    mdt.symlink(dir.fid, b"sl", b"f1", &cred).await.unwrap();

    // Objects: data on both OSTs, then SIGKILL of the OSS.
    let obj = |i: u32| ObjectId {
        fid: fids[0],
        component: 0,
        stripe: i,
    };
    let payload: Vec<u8> = (0..(3 << 20)).map(|i: u32| (i % 251) as u8).collect();
    for i in 0..2 {
        client
            .ost(i)
            .unwrap()
            .write(
                obj(i),
                4096,
                Bytes::from(payload.clone()),
                true,
                Compression::Inherit,
            )
            .await
            .unwrap();
    }

    // Configuration: a pool and a parameter, then SIGKILL of the MGS.
    client.mgs().pool_new("fast".into()).await.unwrap();
    client.mgs().pool_add("fast".into(), vec![1]).await.unwrap();
    client
        .mgs()
        .set_param("osc.*.max_dirty_mb".into(), Some("512".into()))
        .await
        .unwrap();

    tc.mds.kill().unwrap();
    tc.oss.kill().unwrap();
    tc.mgs.kill().unwrap();
    tc.mgs.restart().unwrap();
    tc.oss.restart().unwrap();
    tc.mds.restart().unwrap();
    tc.wait_ready().await.unwrap();

    // The old client reconnects by itself.
    let entries = eventually("the restarted MDS lists the directory", || {
        mdt.readdir_all(dir.fid, &cred)
    })
    .await;
    assert_eq!(entries.len(), 201);
    for (i, fid) in fids.iter().enumerate() {
        assert_eq!(
            mdt.lookup(dir.fid, format!("f{i}").as_bytes(), &cred)
                .await
                .unwrap()
                .fid,
            *fid
        );
    }
    assert_eq!(mdt.getxattr(dir.fid, b"user.k", &cred).await.unwrap(), b"v");
    assert_eq!(mdt.getattr(dir.fid).await.unwrap().mode & 0o7777, 0o750);
    for i in 0..2 {
        let ost = client.ost(i).unwrap();
        let (data, attr) = eventually("the restarted OSS reads the object", || {
            ost.read(obj(i), 0, 4 << 20)
        })
        .await;
        assert_eq!(attr.size, 4096 + payload.len() as u64);
        assert!(
            data[..4096].iter().all(|&b| b == 0),
            "the hole reads as zeros"
        );
        assert!(data[4096..] == payload[..]);
    }
    let fresh = tc.client().await.unwrap();
    let config = fresh.config();
    assert_eq!(config.pools.get("fast"), Some(&vec![1]));
    assert_eq!(
        config.params.get("osc.*.max_dirty_mb").map(String::as_str),
        Some("512")
    );
    assert!(config.target(TargetId::ost(1)).is_some());
    // New FIDs after the restart never collide with old ones.
    let newer = mdt
        .create(&NewFile::exclusive(dir.fid, b"after", 0o100644), &cred)
        .await
        .unwrap();
    assert!(!fids.contains(&newer.attr.fid));
}

/// The MDS answers namespace changes before its disk holds them (the redo log keeps them):
/// a SIGKILL loses none of them. (What a sync keeps when the log is lost too:
/// `fuse_client_params.rs`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_answered_before_they_were_durable_survive_an_mds_kill() {
    let mut tc = TestCluster::start(bin(), 1).await.unwrap();
    tc.hold_mds_commits().await.unwrap();
    let redo = tc.dir.path().join("mdt0").join(weft_mdt::redo::REDO_FILE);
    let log_len = || std::fs::metadata(&redo).unwrap().len();
    let client = tc.client().await.unwrap();
    let cred = Credentials::root();
    let mdt = eventually("the client finds MDT0", || async { client.mdt(0) }).await;
    let dir = eventually("a mkdir after the restart", || {
        mdt.mkdir(Fid::ROOT, b"d", 0o755, &cred)
    })
    .await;

    // Fewer changes than make a durable commit on their own.
    let mut fids = Vec::new();
    for i in 0..20 {
        let name = format!("f{i}");
        let c = mdt
            .create(
                &NewFile::exclusive(dir.fid, name.as_bytes(), 0o100644),
                &cred,
            )
            .await
            .unwrap();
        fids.push(c.attr.fid);
    }
    mdt.setxattr(fids[3], b"user.k", b"v", XattrMode::Any, &cred)
        .await
        .unwrap();
    mdt.rename(dir.fid, b"f5", dir.fid, b"g5", Default::default(), &cred)
        .await
        .unwrap();
    mdt.unlink(dir.fid, b"f7", &cred).await.unwrap();
    mdt.link(fids[8], dir.fid, b"h8", &cred).await.unwrap();
    assert!(log_len() > 0, "the changes are in the redo log");

    tc.mds.kill().unwrap();
    tc.mds.restart().unwrap();
    tc.wait_ready().await.unwrap();

    let entries = eventually("the restarted MDS lists the directory", || {
        mdt.readdir_all(dir.fid, &cred)
    })
    .await;
    let mut names: Vec<String> = entries
        .iter()
        .map(|e| String::from_utf8_lossy(&e.name).into_owned())
        .collect();
    names.sort();
    let mut want: Vec<String> = (0..20)
        .filter(|i| *i != 5 && *i != 7)
        .map(|i| format!("f{i}"))
        .chain(["g5".to_string(), "h8".to_string()])
        .collect();
    want.sort();
    assert_eq!(names, want);
    for (i, fid) in fids.iter().enumerate().filter(|(i, _)| *i != 5 && *i != 7) {
        let found = mdt.lookup(dir.fid, format!("f{i}").as_bytes(), &cred).await;
        assert_eq!(found.unwrap().fid, *fid);
    }
    assert_eq!(
        mdt.lookup(dir.fid, b"g5", &cred).await.unwrap().fid,
        fids[5]
    );
    assert_eq!(mdt.getattr(fids[8]).await.unwrap().nlink, 2);
    assert_eq!(mdt.getxattr(fids[3], b"user.k", &cred).await.unwrap(), b"v");
    assert!(tc.mds.log().contains("replayed the redo log"));
    // New FIDs never meet the ones handed out before the kill.
    let after = mdt
        .create(&NewFile::exclusive(dir.fid, b"after", 0o100644), &cred)
        .await
        .unwrap();
    assert!(!fids.contains(&after.attr.fid));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_of_unlinked_files_are_destroyed_even_when_the_ost_was_down() {
    let mut tc = TestCluster::start(bin(), 2).await.unwrap();
    let client = tc.client().await.unwrap();
    let cred = Credentials::root();
    let mdt = client.mdt(0).unwrap();
    let template = weft_proto::LayoutTemplate::raid0(-1, 1 << 20, -1);
    let c = mdt
        .create(
            &NewFile::exclusive(Fid::ROOT, b"victim", 0o100644).with_layout(&template),
            &cred,
        )
        .await
        .unwrap();
    let layout = c.layout.unwrap();
    let objects: Vec<(u32, ObjectId)> = layout.objects(c.attr.fid).collect();
    assert_eq!(objects.len(), 2, "stripe count -1 uses both OSTs");
    for (ost, obj) in &objects {
        client
            .ost(*ost)
            .unwrap()
            .write(
                *obj,
                0,
                Bytes::from_static(b"doomed"),
                true,
                Compression::Inherit,
            )
            .await
            .unwrap();
    }

    // The OSS is down when the file is unlinked; the MDS restarts before the OSS is back.
    tc.oss.kill().unwrap();
    mdt.unlink(Fid::ROOT, b"victim", &cred).await.unwrap();
    tc.mds.kill().unwrap();
    tc.mds.restart().unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    tc.oss.restart().unwrap();
    tc.wait_ready().await.unwrap();

    for (ost, obj) in &objects {
        let ost = client.ost(*ost).unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if ost.getattr(*obj).await.is_ok_and(|a| !a.exists) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "object {obj} still exists a minute after unlink"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    assert_eq!(
        mdt.lookup(Fid::ROOT, b"victim", &cred)
            .await
            .unwrap_err()
            .errno(),
        Errno::NoEnt
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_ost_surfaces_as_an_error_and_a_restarted_one_serves_again() {
    let mut tc = TestCluster::start(bin(), 1).await.unwrap();
    let client = tc
        .client_with_timeout(Duration::from_secs(3))
        .await
        .unwrap();
    let ost = client.ost(0).unwrap();
    let obj = ObjectId {
        fid: Fid {
            seq: 0x2_0000_0400,
            oid: 9,
            ver: 0,
        },
        component: 0,
        stripe: 0,
    };
    ost.write(
        obj,
        0,
        Bytes::from_static(b"hello"),
        false,
        Compression::Inherit,
    )
    .await
    .unwrap();
    tc.oss.kill().unwrap();
    let err = ost.read(obj, 0, 5).await.unwrap_err();
    assert_eq!(err.errno(), Errno::Io, "{err}");
    tc.oss.restart().unwrap();
    let (data, _) = eventually("the restarted OSS reads the object", || ost.read(obj, 0, 5)).await;
    assert_eq!(&data[..], b"hello");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_changes_in_flight_across_an_mds_kill_all_succeed_once() {
    let mut tc = TestCluster::start(bin(), 1).await.unwrap();
    let fs = tc.fs_client(Duration::from_secs(10)).await.unwrap();
    let cred = Credentials::root();
    let dir = fs
        .mkdir(Fid::ROOT, b"stream", 0o755, &cred)
        .await
        .unwrap()
        .fid;
    // Four writers keep creating and renaming while the MDS is killed and restarted: every
    // call must succeed (resent with its number; the MDT answers a resend of a change it
    // made from its record instead of failing with EEXIST or ENOENT).
    let mut writers = Vec::new();
    for w in 0..4u32 {
        let fs = fs.clone();
        let cred = cred.clone();
        writers.push(tokio::spawn(async move {
            for i in 0..150u32 {
                let a = format!("w{w}.{i}");
                fs.mkdir(dir, a.as_bytes(), 0o755, &cred).await?;
                let b = format!("w{w}.{i}.renamed");
                fs.rename(
                    dir,
                    a.as_bytes(),
                    dir,
                    b.as_bytes(),
                    Default::default(),
                    &cred,
                )
                .await?;
            }
            Ok::<_, weft_client::ClientError>(())
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    tc.mds.kill().unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    tc.mds.restart().unwrap();
    for w in writers {
        w.await.unwrap().unwrap();
    }
    let names: std::collections::BTreeSet<String> = fs
        .cluster()
        .mdt(0)
        .unwrap()
        .readdir_all(dir, &cred)
        .await
        .unwrap()
        .into_iter()
        .map(|e| String::from_utf8(e.name).unwrap())
        .collect();
    let want: std::collections::BTreeSet<String> = (0..4)
        .flat_map(|w| (0..150).map(move |i| format!("w{w}.{i}.renamed")))
        .collect();
    assert_eq!(names, want);
}

/// Open replay: files a client holds open across a kill and restart of the MDS keep
/// working — more writes, flush and close record the right size, and a file unlinked while
/// open still reads back whole and closes (the MDT kept the orphan for its client).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_files_are_opened_again_after_an_mds_restart() {
    use weft_client::OpenOptions;
    use weft_proto::mdt::AccessMode;
    let mut tc = TestCluster::start(bin(), 1).await.unwrap();
    let fs = tc.fs_client(Duration::from_secs(10)).await.unwrap();
    let cred = Credentials::root();
    let rw = OpenOptions {
        access: AccessMode::ReadWrite,
        create: Some(0o644),
        exclusive: true,
        truncate: false,
        append: false,
    };
    let data: Vec<u8> = (0..3u32 << 20).map(|i| (i % 251) as u8).collect();
    let (head, tail) = data.split_at(1 << 20);
    let ckpt = fs
        .open_in(Fid::ROOT, b"ckpt", rw, None, &cred)
        .await
        .unwrap();
    ckpt.write_at(0, head).await.unwrap();
    ckpt.flush().await.unwrap();
    let scratch = fs
        .open_in(Fid::ROOT, b"scratch", rw, None, &cred)
        .await
        .unwrap();
    scratch.write_at(0, &data).await.unwrap();
    scratch.flush().await.unwrap();
    fs.unlink(Fid::ROOT, b"scratch", &cred).await.unwrap();

    tc.mds.kill().unwrap();
    tc.mds.restart().unwrap();

    ckpt.write_at(head.len() as u64, tail).await.unwrap();
    eventually("the checkpoint flushes", || ckpt.flush()).await;
    ckpt.close().await.unwrap();
    let back = fs.read_file("/ckpt", &cred).await.unwrap();
    assert!(back == data, "the checkpoint reads back whole");
    assert_eq!(
        fs.getattr(ckpt.fid()).await.unwrap().size,
        data.len() as u64
    );

    assert!(scratch.read_at(0, data.len() as u64).await.unwrap() == data);
    scratch.close().await.unwrap();
    // Its last close destroys the orphan.
    assert_eq!(
        fs.getattr(scratch.fid()).await.unwrap_err().errno(),
        Errno::Stale
    );
}

/// An OSS restart is a pause, not an error (issue 25): a loop that creates a file, writes
/// 16 KiB, fsyncs and closes it keeps going while the only OSS is killed and restarted 3 s
/// later. Every create succeeds (no ENOSPC from an MDT that lost sight of its OSTs), and
/// every acknowledged file reads back whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creating_and_writing_files_across_an_oss_restart_sees_a_pause_not_an_error() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use weft_client::OpenOptions;
    use weft_proto::mdt::AccessMode;
    let mut tc = TestCluster::start(bin(), 2).await.unwrap();
    let fs = tc.fs_client(Duration::from_secs(30)).await.unwrap();
    let cred = Credentials::root();
    let dir = fs
        .mkdir(Fid::ROOT, b"loop", 0o755, &cred)
        .await
        .unwrap()
        .fid;
    let body = |i: u32| -> Vec<u8> { (0..16384u32).map(|b| (b ^ i) as u8).collect() };
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (fs, cred, stop) = (fs.clone(), cred.clone(), stop.clone());
        tokio::spawn(async move {
            let mut done = 0u32;
            let mut slowest = Duration::ZERO;
            while !stop.load(Ordering::Relaxed) {
                let started = Instant::now();
                let name = format!("f{done}");
                let opts = OpenOptions {
                    access: AccessMode::ReadWrite,
                    create: Some(0o644),
                    exclusive: true,
                    truncate: false,
                    append: false,
                };
                let f = fs.open_in(dir, name.as_bytes(), opts, None, &cred).await?;
                f.write_at(0, &body(done)).await?;
                f.fsync().await?;
                f.close().await?;
                slowest = slowest.max(started.elapsed());
                done += 1;
            }
            Ok::<_, weft_client::ClientError>((done, slowest))
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    tc.oss.kill().unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    tc.oss.restart().unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    let (done, slowest) = writer
        .await
        .unwrap()
        .expect("no file operation fails across the OSS restart");
    eprintln!("{done} files across the OSS restart; the longest pause was {slowest:?}");
    assert!(done > 0);
    for i in 0..done {
        let back = fs.read_file(&format!("/loop/f{i}"), &cred).await.unwrap();
        assert!(back == body(i), "f{i} reads back as written");
    }
}

/// A loop of create, write (64 KiB to 256 KiB of random bytes, striped over both OSTs),
/// fsync and close through a real FUSE mount, run by a child shell (`dd conv=fsync`) while
/// `fault` acts on the cluster; then every file the loop had acknowledged reads back as the
/// copy it wrote from. The loop runs in a process of its own: a test process with threads
/// blocked in the mount cannot start a server again (see `campaign.rs`).
async fn fuse_writes_across(
    tc: &mut TestCluster,
    m: &crate::fuse_common::FuseMount,
    dir: &str,
    fault: impl AsyncFnOnce(&mut TestCluster),
) -> usize {
    let dst = m.path(dir);
    std::fs::create_dir(&dst).unwrap();
    let (ok, _, err) = crate::support::weft(&[
        "setstripe",
        "-c",
        "-1",
        "-S",
        "64K",
        &dst.display().to_string(),
    ]);
    assert!(ok, "{err}");
    let src = m.dir.path().join(format!("src-{dir}"));
    std::fs::create_dir(&src).unwrap();
    let script = r#"i=0; while [ ! -e "$1/stop" ]; do
        head -c $((65536 + (i * 37813) % 196608)) /dev/urandom > "$1/f$i" || exit 2
        dd if="$1/f$i" of="$2/f$i" bs=64k conv=fsync status=none || { echo "f$i failed"; exit 1; }
        echo "f$i" >> "$1/acked"; i=$((i + 1)); done"#;
    let writer = std::process::Command::new("sh")
        .args(["-c", script, "sh"])
        .arg(&src)
        .arg(&dst)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    fault(tc).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    std::fs::write(src.join("stop"), b"").unwrap();
    let out = tokio::task::block_in_place(|| writer.wait_with_output()).unwrap();
    assert!(
        out.status.success(),
        "{}{}\n--- mount log ---\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        m.log()
    );
    let acked = std::fs::read_to_string(src.join("acked")).unwrap();
    for name in acked.lines() {
        let back = std::fs::read(dst.join(name)).unwrap();
        assert!(
            back == std::fs::read(src.join(name)).unwrap(),
            "{name} reads back as fsynced"
        );
    }
    acked.lines().count()
}

/// Through a real FUSE mount, a server restart or a short freeze is a pause for
/// applications, never an error (issue 25): files are created, written, fsynced and closed
/// in a loop while the OSS is killed (SIGKILL) and restarted 3 s later, then while the
/// OSS, and then the MDS, is frozen (SIGSTOP) for 3 s. No call fails and every fsynced
/// byte reads back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fsynced_writes_through_a_mount_ride_out_an_oss_kill_and_server_freezes() {
    let mut tc = TestCluster::start(bin(), 2).await.unwrap();
    let m = crate::fuse_common::FuseMount::start(&tc, "");
    let hold = Duration::from_secs(3);
    let files = fuse_writes_across(&mut tc, &m, "kill", async |tc| {
        tc.oss.kill().unwrap();
        tokio::time::sleep(hold).await;
        tc.oss.restart().unwrap();
    })
    .await;
    eprintln!("OSS kill: {files} files fsynced across it");
    for (what, dir) in [("OSS", "oss-freeze"), ("MDS", "mds-freeze")] {
        let files = fuse_writes_across(&mut tc, &m, dir, async |tc| {
            let p = if what == "OSS" { &tc.oss } else { &tc.mds };
            p.pause().unwrap();
            tokio::time::sleep(hold).await;
            p.resume().unwrap();
        })
        .await;
        eprintln!("{what} freeze: {files} files fsynced across it");
    }
}
