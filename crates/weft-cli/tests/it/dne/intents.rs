//! Pending intents: a name reserved while the other MDT has not answered, and what that
//! blocks.

use super::*;

/// Waits until the MDT holding `parent` reports a cross-MDT operation pending on `name`:
/// a rename onto it answers EBUSY (a rename of a missing name checks intents first).
async fn wait_pending(c: &Client, parent: Fid, name: &[u8]) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = c
            .rename(parent, b"no-such-name", parent, name, PLAIN, &root())
            .await;
        match r.map_err(|e| e.errno()) {
            Err(Errno::Busy) => return,
            Err(Errno::NoEnt) => {}
            other => panic!("unexpected answer while waiting for an intent: {other:?}"),
        }
        assert!(
            Instant::now() < deadline,
            "no intent on the name after 20 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// While the other MDT is down, a remote mkdir and a remote rmdir wait with their intent
/// stored: the name is reserved (EEXIST for creates, EBUSY for renames), and both finish
/// once the MDT is back, even across a restart of the coordinator meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_intents_reserve_their_name_until_the_other_mdt_answers() {
    let mut tc = two_mdts(1).await;
    let c = fs_client(&tc).await;
    let other = fs_client(&tc).await;
    let cred = root();
    let victim = c
        .mkdir_on(Fid::ROOT, b"victim", 0o755, 1, &cred)
        .await
        .unwrap();
    c.write_file("/lf", b"x", &cred).await.unwrap();
    let lf = c.lookup(Fid::ROOT, b"lf", &cred).await.unwrap();
    let root_nlink = c.getattr(Fid::ROOT).await.unwrap().nlink;

    tc.mds_process(1).unwrap().kill().unwrap();
    let mk = {
        let c = c.clone();
        tokio::spawn(async move { c.mkdir_on(Fid::ROOT, b"pend", 0o700, 1, &root()).await })
    };
    let rm = {
        let c = c.clone();
        tokio::spawn(async move { c.rmdir(Fid::ROOT, b"victim", &root()).await })
    };
    wait_pending(&other, Fid::ROOT, b"pend").await;
    wait_pending(&other, Fid::ROOT, b"victim").await;

    // The name being made: not visible yet, and reserved.
    assert_eq!(
        errno(other.lookup(Fid::ROOT, b"pend", &cred).await),
        Errno::NoEnt
    );
    assert_eq!(
        errno(other.mkdir(Fid::ROOT, b"pend", 0o755, &cred).await),
        Errno::Exist
    );
    assert_eq!(
        errno(other.mkdir_on(Fid::ROOT, b"pend", 0o755, 1, &cred).await),
        Errno::Exist
    );
    assert_eq!(
        errno(other.mknod(Fid::ROOT, b"pend", 0o010644, 0, &cred).await),
        Errno::Exist
    );
    assert_eq!(
        errno(other.symlink(Fid::ROOT, b"pend", b"x", &cred).await),
        Errno::Exist
    );
    assert_eq!(
        errno(other.link(lf.fid, Fid::ROOT, b"pend", &cred).await),
        Errno::Exist
    );
    let excl = OpenOptions {
        exclusive: true,
        ..OpenOptions::create(0o644)
    };
    assert_eq!(
        errno(
            other
                .open_in(Fid::ROOT, b"pend", excl, None, &cred)
                .await
                .map(|_| ())
        ),
        Errno::Exist
    );
    assert_eq!(
        errno(
            other
                .rename(Fid::ROOT, b"lf", Fid::ROOT, b"pend", PLAIN, &cred)
                .await
        ),
        Errno::Busy
    );
    // The name being removed: reserved too.
    assert_eq!(
        errno(
            other
                .rename(Fid::ROOT, b"victim", Fid::ROOT, b"v2", PLAIN, &cred)
                .await
        ),
        Errno::Busy
    );
    assert_eq!(
        errno(other.rmdir(Fid::ROOT, b"victim", &cred).await),
        Errno::Busy
    );
    assert_eq!(
        errno(other.mkdir(Fid::ROOT, b"victim", 0o755, &cred).await),
        Errno::Exist
    );
    assert!(!mk.is_finished() && !rm.is_finished());

    // The coordinator restarts while both wait: the intents are durable, and the clients
    // resend.
    tc.mds.kill().unwrap();
    tc.mds.restart().unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    tc.mds_process(1).unwrap().restart().unwrap();
    let made = tokio::time::timeout(Duration::from_secs(40), mk)
        .await
        .expect("the remote mkdir never finished")
        .unwrap();
    let removed = tokio::time::timeout(Duration::from_secs(40), rm)
        .await
        .expect("the remote rmdir never finished")
        .unwrap();
    tc.wait_ready().await.unwrap();
    let pend = eventually("lookup pend", || other.lookup(Fid::ROOT, b"pend", &cred)).await;
    assert_eq!(pend.mode & 0o7777, 0o700);
    assert_eq!(c.mdt_index_of(pend.fid).unwrap(), 1);
    match made {
        Ok(a) => assert_eq!(a.fid, pend.fid),
        Err(e) => panic!("the remote mkdir failed although it was done: {e}"),
    }
    if let Err(e) = removed {
        panic!("the remote rmdir failed although it was done: {e}");
    }
    assert_eq!(
        errno(other.lookup(Fid::ROOT, b"victim", &cred).await),
        Errno::NoEnt
    );
    assert!(other.getattr(victim.fid).await.is_err());
    assert_eq!(other.getattr(Fid::ROOT).await.unwrap().nlink, root_nlink);
    // No intent is left: the names rename and are made again.
    other
        .rename(Fid::ROOT, b"pend", Fid::ROOT, b"pend2", PLAIN, &cred)
        .await
        .unwrap();
    other
        .mkdir_on(Fid::ROOT, b"victim", 0o755, 1, &cred)
        .await
        .unwrap();
    check_consistent(&tc, &other).await;
}

/// A directory whose only content is a remote mkdir in progress is not empty: removing it
/// (or renaming another directory over it) would leave the directory made on the other
/// MDT with no name, and fail the mkdir.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_with_a_remote_mkdir_in_progress_cannot_be_removed() {
    let mut tc = two_mdts(1).await;
    let c = fs_client(&tc).await;
    let other = fs_client(&tc).await;
    let cred = root();
    let p = c.mkdir(Fid::ROOT, b"p", 0o755, &cred).await.unwrap();
    let p2 = c.mkdir(Fid::ROOT, b"p2", 0o755, &cred).await.unwrap();
    c.mkdir(Fid::ROOT, b"q", 0o755, &cred).await.unwrap();
    tc.mds_process(1).unwrap().kill().unwrap();
    let mkdirs: Vec<_> = [p.fid, p2.fid]
        .into_iter()
        .map(|parent| {
            let c = c.clone();
            tokio::spawn(async move { c.mkdir_on(parent, b"x", 0o755, 1, &root()).await })
        })
        .collect();
    wait_pending(&other, p.fid, b"x").await;
    wait_pending(&other, p2.fid, b"x").await;

    let rmdir = other.rmdir(Fid::ROOT, b"p", &cred).await;
    let over = other
        .rename(Fid::ROOT, b"q", Fid::ROOT, b"p2", PLAIN, &cred)
        .await;
    tc.mds_process(1).unwrap().restart().unwrap();
    let mut made = Vec::new();
    for m in mkdirs {
        made.push(
            tokio::time::timeout(Duration::from_secs(40), m)
                .await
                .expect("the remote mkdir never finished")
                .unwrap(),
        );
    }
    tc.wait_ready().await.unwrap();
    // What became of the directories made on MDT1.
    let reachable = walk(&c).await.dirs.get(&1).copied().unwrap_or(0);
    let on_mdt1 = tc.mdt_counter(1, "dirs").await.unwrap();
    let state = format!(
        "the remote mkdirs answered {made:?}; MDT1 holds {on_mdt1} directories, \
         {reachable} reachable"
    );
    assert!(
        matches!(
            rmdir.as_ref().map_err(ClientError::errno),
            Err(Errno::NotEmpty | Errno::Busy)
        ),
        "rmdir of /p while a remote mkdir of /p/x is in progress: {rmdir:?}; {state}"
    );
    assert!(
        matches!(
            over.as_ref().map_err(ClientError::errno),
            Err(Errno::NotEmpty | Errno::Busy)
        ),
        "rename of /q over /p2 while a remote mkdir of /p2/x is in progress: {over:?}; \
         {state}"
    );
    for (parent, m) in [p.fid, p2.fid].into_iter().zip(made) {
        let x = m.expect("the remote mkdir succeeds");
        assert_eq!(c.lookup(parent, b"x", &cred).await.unwrap().fid, x.fid);
    }
    check_consistent(&tc, &c).await;
}

/// A file made in a remote directory gets the layout a file in a local directory with the
/// same defaults gets: the root's default layout applies to every directory without one of
/// its own, wherever its inode lives, and follows changes of the root's default.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_in_remote_directories_follow_the_root_default_layout() {
    let tc = two_mdts(2).await;
    let c = fs_client(&tc).await;
    let cred = root();
    let stripes = |fid: Fid| {
        let c = c.clone();
        async move {
            match c.layout_of(fid).await.unwrap() {
                weft_client::LayoutOf::File(Some(l)) => l.components[0].osts.len(),
                other => panic!("no file layout: {other:?}"),
            }
        }
    };
    // Directories made before the root gets a default, and after, under the root and
    // under a plain directory.
    c.mkdir(Fid::ROOT, b"early_local", 0o755, &cred)
        .await
        .unwrap();
    c.mkdir_on(Fid::ROOT, b"early_remote", 0o755, 1, &cred)
        .await
        .unwrap();
    let a = c.mkdir(Fid::ROOT, b"a", 0o755, &cred).await.unwrap();
    c.write_file("/before", b"x", &cred).await.unwrap();
    let fs_default = stripes(c.lookup(Fid::ROOT, b"before", &cred).await.unwrap().fid).await;
    assert_eq!(
        fs_default, 1,
        "the file system default stripes over one OST"
    );
    c.set_layout(
        Fid::ROOT,
        Some(weft_proto::LayoutTemplate::raid0(-1, 1 << 20, -1)),
        &cred,
    )
    .await
    .unwrap();
    c.mkdir(a.fid, b"local", 0o755, &cred).await.unwrap();
    c.mkdir_on(a.fid, b"remote", 0o755, 1, &cred).await.unwrap();
    // Other MDTs learn the root's default from MDT0 within their poll interval (2 s):
    // wait until a file made in a directory of MDT1 gets it.
    let deadline = Instant::now() + weft_testkit::WAIT_LIMIT;
    for probe in 0.. {
        let path = format!("/early_remote/probe{probe}");
        c.write_file(&path, b"p", &cred).await.unwrap();
        let f = c.resolve(&path, true, &cred).await.unwrap();
        if stripes(f.fid).await == 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "MDT1 never learned the root's default"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut got = BTreeMap::new();
    for dir in ["early_local", "early_remote", "a/local", "a/remote"] {
        let path = format!("/{dir}/f");
        c.write_file(&path, b"data", &cred).await.unwrap();
        let f = c.resolve(&path, true, &cred).await.unwrap();
        got.insert(dir, stripes(f.fid).await);
    }
    assert_eq!(got["early_local"], 2, "the root's default: every OST");
    assert_eq!(got["a/local"], 2);
    assert_eq!(
        (got["early_remote"], got["a/remote"]),
        (got["early_local"], got["a/local"]),
        "stripe counts of files in remote directories vs local ones: {got:?}"
    );
}
