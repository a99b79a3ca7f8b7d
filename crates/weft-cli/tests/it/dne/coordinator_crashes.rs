//! Crashes of the coordinating MDS at each failpoint of a remote mkdir and rmdir, and
//! SIGKILL of the other MDS: every operation rolls forward exactly once.

use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Mkdir,
    Rmdir,
}

/// The MDS of MDT `coordinator` runs with `WEFT_FAILPOINT=point` and aborts there during
/// `op` on `/p/x` (`/p` on the coordinator, `x` on the other MDT); it is restarted without
/// the failpoint, and the operation must be rolled forward: done exactly once, the
/// namespace consistent, the parent's link count right, no intent left on the name.
async fn coordinator_crash(coordinator: u32, op: Op, point: &str) {
    let mut tc = two_mdts(1).await;
    let c = fs_client(&tc).await;
    let cred = root();
    let target = 1 - coordinator;
    let p = c
        .mkdir_on(Fid::ROOT, b"p", 0o755, coordinator, &cred)
        .await
        .unwrap();
    assert_eq!(c.mdt_index_of(p.fid).unwrap(), coordinator);
    let old = match op {
        Op::Mkdir => None,
        Op::Rmdir => Some(c.mkdir_on(p.fid, b"x", 0o755, target, &cred).await.unwrap()),
    };
    let before = check_consistent(&tc, &c).await;
    let dirs_before = tc.mdt_counter(target, "dirs").await.unwrap();

    let mds = tc.mds_process(coordinator).unwrap();
    mds.set_env("WEFT_FAILPOINT", point);
    mds.restart().unwrap();
    tc.wait_ready().await.unwrap();
    let call = {
        let c = c.clone();
        tokio::spawn(async move {
            match op {
                Op::Mkdir => c
                    .mkdir_on(p.fid, b"x", 0o750, target, &root())
                    .await
                    .map(Some),
                Op::Rmdir => c.rmdir(p.fid, b"x", &root()).await.map(|()| None::<Attr>),
            }
        })
    };
    let mds = tc.mds_process(coordinator).unwrap();
    let status = mds.wait_exit(Duration::from_secs(20)).await.unwrap();
    assert_eq!(
        status.signal(),
        Some(libc::SIGABRT),
        "MDS of MDT{coordinator} should abort at {point}: {status}\n{}",
        mds.log()
    );
    assert!(mds.log().contains("failpoint reached"));
    mds.remove_env("WEFT_FAILPOINT");
    mds.restart().unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(45), call)
        .await
        .expect("the client call never returned")
        .unwrap();
    tc.wait_ready().await.unwrap();

    // Rolled forward, exactly once.
    let after = eventually("getattr /p", || c.getattr(p.fid)).await;
    let dirs = tc.mdt_counter(target, "dirs").await.unwrap();
    match op {
        Op::Mkdir => {
            let x = c.lookup(p.fid, b"x", &cred).await.unwrap();
            assert_eq!(c.mdt_index_of(x.fid).unwrap(), target);
            assert_eq!(x.mode & 0o7777, 0o750);
            assert_eq!(after.nlink, 3, "/p counts x once");
            assert_eq!(
                dirs,
                dirs_before + 1,
                "exactly one directory made on MDT{target}"
            );
            if let Ok(Some(a)) = &outcome {
                assert_eq!(a.fid, x.fid, "the reply names the directory made");
            }
            // No intent left: the name renames.
            c.rename(p.fid, b"x", p.fid, b"y", PLAIN, &cred)
                .await
                .unwrap();
            c.rename(p.fid, b"y", p.fid, b"x", PLAIN, &cred)
                .await
                .unwrap();
        }
        Op::Rmdir => {
            let old = old.unwrap();
            assert_eq!(errno(c.lookup(p.fid, b"x", &cred).await), Errno::NoEnt);
            assert!(c.getattr(old.fid).await.is_err(), "the inode is gone");
            assert_eq!(after.nlink, 2);
            assert_eq!(
                dirs,
                dirs_before - 1,
                "the directory is gone from MDT{target}"
            );
            // No intent left: the name is free.
            c.mkdir(p.fid, b"x", 0o755, &cred).await.unwrap();
            c.rmdir(p.fid, b"x", &cred).await.unwrap();
        }
    }
    let census = check_consistent(&tc, &c).await;
    let delta = match op {
        Op::Mkdir => 1,
        Op::Rmdir => -1,
    };
    assert_eq!(
        census.dirs.get(&target).copied().unwrap_or(0) as i64,
        before.dirs.get(&target).copied().unwrap_or(0) as i64 + delta
    );
    // The client resent its request and was answered (from the intent or the reply
    // record). The one failure tolerated is a resend that met the restarted MDS before it
    // served its MDT again (the handshake is refused, which the client does not retry);
    // an answer that contradicts what was done is not.
    if let Err(e) = outcome {
        eprintln!(
            "{op:?} at {point} on MDT{coordinator}: the client's call failed ({e}) but was done"
        );
        assert!(
            !matches!(
                e.errno(),
                Errno::Exist | Errno::NoEnt | Errno::Busy | Errno::NotEmpty
            ) || e.to_string().contains("not served here"),
            "{op:?} at {point}: the resend was answered {e}, as if this client had not done it"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_mkdir_rolls_forward_after_a_coordinator_crash_before_the_remote_step() {
    coordinator_crash(0, Op::Mkdir, "cross_mdt.before_remote").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_mkdir_rolls_forward_after_a_coordinator_crash_before_finishing() {
    coordinator_crash(0, Op::Mkdir, "cross_mdt.before_finish").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_rmdir_rolls_forward_after_a_coordinator_crash_before_the_remote_step() {
    coordinator_crash(0, Op::Rmdir, "cross_mdt.before_remote").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_rmdir_rolls_forward_after_a_coordinator_crash_before_finishing() {
    coordinator_crash(0, Op::Rmdir, "cross_mdt.before_finish").await;
}

/// The same with MDT1 coordinating: a directory on MDT0 whose name is in a remote directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_remote_mkdir_rolls_forward_after_a_crash_of_mdt1_coordinating() {
    coordinator_crash(1, Op::Mkdir, "cross_mdt.before_remote").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_remote_rmdir_rolls_forward_after_a_crash_of_mdt1_coordinating() {
    coordinator_crash(1, Op::Rmdir, "cross_mdt.before_finish").await;
}

/// The coordinator crashes before finishing a remote mkdir and takes a moment to serve
/// its MDT again (here: its start-up poll of a hung OSS; a busy node does the same). The
/// client's resend must still be answered with the directory made, not fail with the
/// handshake refusal ("target MDT0000 is not served here", ENOENT) of a server that listens
/// but has not opened its MDT yet: the mkdir was done, and rolled forward.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resent_remote_mkdir_is_answered_when_the_coordinator_restarts_slowly() {
    let mut tc = two_mdts(1).await;
    let c = fs_client(&tc).await;
    tc.mds.set_env("WEFT_FAILPOINT", "cross_mdt.before_finish");
    tc.mds.restart().unwrap();
    tc.wait_ready().await.unwrap();
    tc.oss.pause().unwrap();
    let call = {
        let c = c.clone();
        tokio::spawn(async move { c.mkdir_on(Fid::ROOT, b"x", 0o755, 1, &root()).await })
    };
    let status = tc.mds.wait_exit(Duration::from_secs(20)).await.unwrap();
    assert_eq!(status.signal(), Some(libc::SIGABRT), "{}", tc.mds.log());
    tc.mds.remove_env("WEFT_FAILPOINT");
    tc.mds.restart().unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(45), call)
        .await
        .expect("the client call never returned")
        .unwrap();
    tc.oss.resume().unwrap();
    tc.wait_ready().await.unwrap();
    let x = c.lookup(Fid::ROOT, b"x", &root()).await.unwrap();
    assert_eq!(
        c.mdt_index_of(x.fid).unwrap(),
        1,
        "the mkdir was rolled forward"
    );
    match outcome {
        Ok(a) => assert_eq!(a.fid, x.fid),
        Err(e) => panic!("the resent remote mkdir failed although it was done: {e}"),
    }
    check_consistent(&tc, &c).await;
}

/// SIGKILL of the MDS holding the remote directories (twice) while a client makes and
/// removes remote directories in a loop: every operation finishes with success once it is
/// back, and the namespace holds exactly what the loop left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_mkdir_rmdir_loop_survives_sigkill_of_the_other_mds() {
    let mut tc = two_mdts(1).await;
    let c = fs_client(&tc).await;
    let cred = root();
    let p = c.mkdir(Fid::ROOT, b"p", 0o755, &cred).await.unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let looping = {
        let (c, stop, done) = (c.clone(), stop.clone(), done.clone());
        tokio::spawn(async move {
            let mut kept = BTreeSet::new();
            let mut slowest = Duration::ZERO;
            let mut i = 0u32;
            while !stop.load(Ordering::Relaxed) {
                let started = Instant::now();
                let name = format!("d{i}");
                c.mkdir_on(p.fid, name.as_bytes(), 0o755, 1, &root())
                    .await
                    .unwrap_or_else(|e| panic!("mkdir_on {name}: {e}"));
                if i.is_multiple_of(3) {
                    kept.insert(name);
                } else {
                    c.rmdir(p.fid, name.as_bytes(), &root())
                        .await
                        .unwrap_or_else(|e| panic!("rmdir {name}: {e}"));
                }
                slowest = slowest.max(started.elapsed());
                done.fetch_add(1, Ordering::Relaxed);
                i += 1;
            }
            (kept, slowest)
        })
    };
    let progress = |n: u64| {
        let done = done.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(30);
            let start = done.load(Ordering::Relaxed);
            while done.load(Ordering::Relaxed) < start + n {
                assert!(Instant::now() < deadline, "the loop made no progress");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    for round in 0..2 {
        progress(10).await;
        tc.mds_process(1).unwrap().kill().unwrap();
        tokio::time::sleep(Duration::from_millis(300 + 400 * round)).await;
        tc.mds_process(1).unwrap().restart().unwrap();
    }
    progress(10).await;
    stop.store(true, Ordering::Relaxed);
    let (kept, slowest) = tokio::time::timeout(Duration::from_secs(40), looping)
        .await
        .expect("the loop never finished")
        .unwrap();
    assert!(
        slowest >= Duration::from_millis(250),
        "no operation waited for the killed MDS (slowest {slowest:?}): the kills missed"
    );
    tc.wait_ready().await.unwrap();
    let entries = list(&c, p.fid, true).await;
    assert_eq!(names(&entries), kept);
    for e in &entries {
        let a = e
            .attr
            .as_ref()
            .expect("attributes of every remote directory");
        assert_eq!(c.mdt_index_of(a.fid).unwrap(), 1);
    }
    assert_eq!(c.getattr(p.fid).await.unwrap().nlink, 2 + kept.len() as u32);
    let census = check_consistent(&tc, &c).await;
    assert_eq!(census.dirs.get(&1).copied(), Some(kept.len() as u64));
}
