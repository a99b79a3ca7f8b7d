//! The coordinator aborts at each failpoint of each cross-MDT operation; the operation rolls
//! forward exactly once after the restart.

use super::*;

/// The cross-MDT operations, on `/a` (a directory of the coordinating MDT) and `/b` (a
/// remote directory on the other MDT).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    /// `mkdir -c 2 /a/x`: the master and a shard on the coordinator, a shard on the other.
    MkdirStriped,
    /// `rmdir /a/x` of such a striped directory.
    RmdirStriped,
    /// `ln /b/f /a/l` (IntentKind::Link).
    Link,
    /// `rm /a/l`, where `/a/l` is a second name of `/b/f` (IntentKind::Unlink).
    Unlink,
    /// `mv /a/f /b/g` (IntentKind::Rename).
    Rename,
    /// `mv /a/f /b/g` over an existing `/b/g`.
    RenameReplace,
    /// `mv /a/f /a/v`, where `/a/v` is a second name of `/b/v` (IntentKind::LinkDropped).
    RenameOverRemoteName,
    /// `rm /a/l`, the only name of an inode of the other MDT (moved there from `/b/f`):
    /// the inode and its objects are destroyed.
    UnlinkLast,
    /// `mv /a/f /a/v`, where `/a/v` is the only name of an inode of the other MDT (moved
    /// there from `/b/v`): LinkDropped destroys it.
    RenameOverRemoteLastName,
    /// `mv /a/f /b/g`, where `/b/g` is a second name of `/a/h`: the MDT of `/b` replaces
    /// the name and drops the link of `/a/h` on the MDT of `/a` (its own LinkDropped
    /// intent, while the rename's intent waits on the MDT of `/a`). The MDS of `/b`
    /// aborts.
    RenameOntoRemoteName,
}

impl Op {
    /// The MDT coordinating the intent whose failpoints abort, when `/a` is on `a_mdt`.
    fn coordinator(self, a_mdt: u32) -> u32 {
        match self {
            Op::RenameOntoRemoteName => 1 - a_mdt,
            _ => a_mdt,
        }
    }
}

/// The files and directories an operation starts from.
struct Scene {
    a: Fid,
    b: Fid,
    /// `/a/f` or `/b/f` (the file the operation links, unlinks or moves).
    f: Option<Attr>,
    /// The inode the operation replaces or drops a name of (`/b/g`, `/b/v`).
    victim: Option<Attr>,
    /// The striped directory `/a/x` and its shards.
    striped: Option<(Fid, Vec<Fid>)>,
}

const F_LEN: usize = 200_000;
const G_LEN: usize = 70_000;

async fn set_up(c: &Arc<Client>, a_mdt: u32, op: Op) -> Scene {
    let cred = root();
    let a = c
        .mkdir_on(Fid::ROOT, b"a", 0o755, a_mdt, &cred)
        .await
        .unwrap();
    let b = c
        .mkdir_on(Fid::ROOT, b"b", 0o755, 1 - a_mdt, &cred)
        .await
        .unwrap();
    assert_eq!(c.mdt_index_of(a.fid).unwrap(), a_mdt);
    assert_eq!(c.mdt_index_of(b.fid).unwrap(), 1 - a_mdt);
    let (f_path, victim_path) = match op {
        Op::MkdirStriped | Op::RmdirStriped => (None, None),
        Op::Link | Op::Unlink | Op::UnlinkLast => (Some("/b/f"), None),
        Op::Rename => (Some("/a/f"), None),
        Op::RenameOverRemoteLastName => (Some("/a/f"), Some("/b/v")),
        Op::RenameOntoRemoteName => (Some("/a/f"), Some("/a/h")),
        Op::RenameReplace => (Some("/a/f"), Some("/b/g")),
        Op::RenameOverRemoteName => (Some("/a/f"), Some("/b/v")),
    };
    let mut scene = Scene {
        a: a.fid,
        b: b.fid,
        f: None,
        victim: None,
        striped: None,
    };
    if let Some(p) = f_path {
        c.write_file(p, &pattern(0, F_LEN, 1), &cred).await.unwrap();
        scene.f = Some(c.resolve(p, true, &cred).await.unwrap());
    }
    if let Some(p) = victim_path {
        c.write_file(p, &pattern(0, G_LEN, 2), &cred).await.unwrap();
        scene.victim = Some(c.resolve(p, true, &cred).await.unwrap());
    }
    match op {
        Op::RmdirStriped => {
            let x = c
                .mkdir_striped(a.fid, b"x", 0o755, 2, DirHash::Fnv1a64, &cred)
                .await
                .unwrap();
            let shards = c.dir_stripes(x.fid).await.unwrap().unwrap().shards.clone();
            scene.striped = Some((x.fid, shards));
        }
        Op::Unlink => {
            let f = scene.f.as_ref().unwrap().fid;
            c.link(f, a.fid, b"l", &cred).await.unwrap();
        }
        Op::RenameOverRemoteName => {
            let v = scene.victim.as_ref().unwrap().fid;
            c.link(v, a.fid, b"v", &cred).await.unwrap();
        }
        Op::UnlinkLast => c
            .rename(b.fid, b"f", a.fid, b"l", PLAIN, &cred)
            .await
            .unwrap(),
        Op::RenameOverRemoteLastName => c
            .rename(b.fid, b"v", a.fid, b"v", PLAIN, &cred)
            .await
            .unwrap(),
        Op::RenameOntoRemoteName => {
            let h = scene.victim.as_ref().unwrap().fid;
            c.link(h, b.fid, b"g", &cred).await.unwrap();
        }
        _ => {}
    }
    scene
}

/// The operation, as a client calls it; its reply's attributes if it has some.
async fn run(c: &Client, op: Op, s: &Scene) -> Result<Option<Attr>, ClientError> {
    let cred = root();
    let f = s.f.as_ref().map(|f| f.fid);
    match op {
        Op::MkdirStriped => c
            .mkdir_striped(s.a, b"x", 0o750, 2, DirHash::Fnv1a64, &cred)
            .await
            .map(Some),
        Op::RmdirStriped => c.rmdir(s.a, b"x", &cred).await.map(|()| None),
        Op::Link => c.link(f.unwrap(), s.a, b"l", &cred).await.map(Some),
        Op::Unlink | Op::UnlinkLast => c.unlink(s.a, b"l", &cred).await.map(|()| None),
        Op::Rename | Op::RenameReplace | Op::RenameOntoRemoteName => c
            .rename(s.a, b"f", s.b, b"g", PLAIN, &cred)
            .await
            .map(|()| None),
        Op::RenameOverRemoteName | Op::RenameOverRemoteLastName => c
            .rename(s.a, b"f", s.a, b"v", PLAIN, &cred)
            .await
            .map(|()| None),
    }
}

/// Checks that `op` happened exactly once: names, link counts, contents, counters.
async fn check_done(
    tc: &TestCluster,
    c: &Arc<Client>,
    op: Op,
    s: &Scene,
    a_mdt: u32,
    reply: Option<Attr>,
    before: &BTreeMap<u32, (u64, u64)>,
) {
    let cred = root();
    let other = 1 - a_mdt;
    let read = |path: &'static str| {
        let c = c.clone();
        async move { c.read_file(path, &root()).await.unwrap().to_vec() }
    };
    let gone = |fid: Fid| {
        let c = c.clone();
        async move {
            let e = errno(c.getattr(fid).await);
            assert!(
                matches!(e, Errno::NoEnt | Errno::Stale),
                "{fid} should be gone: {e:?}"
            );
        }
    };
    let nlink = |fid: Fid| {
        let c = c.clone();
        async move { c.getattr(fid).await.unwrap().nlink }
    };
    let (in_a, in_b): (&[&str], &[&str]) = match op {
        Op::MkdirStriped => (&["x"], &[]),
        Op::RmdirStriped | Op::UnlinkLast => (&[], &[]),
        Op::Unlink => (&[], &["f"]),
        Op::Link => (&["l"], &["f"]),
        Op::Rename | Op::RenameReplace => (&[], &["g"]),
        Op::RenameOverRemoteName => (&["v"], &["v"]),
        Op::RenameOverRemoteLastName => (&["v"], &[]),
        Op::RenameOntoRemoteName => (&["h"], &["g"]),
    };
    assert_eq!(names(c, s.a).await, set(in_a), "the names in /a");
    assert_eq!(names(c, s.b).await, set(in_b), "the names in /b");
    let mut want = before.clone();
    let a_nlink = c.getattr(s.a).await.unwrap().nlink;
    match op {
        Op::MkdirStriped => {
            let x = c.lookup(s.a, b"x", &cred).await.unwrap();
            assert_eq!(reply.map(|r| r.fid), Some(x.fid), "the reply names /a/x");
            assert_eq!(x.mode & 0o7777, 0o750);
            assert_eq!(c.mdt_index_of(x.fid).unwrap(), a_mdt);
            let stripes = c.dir_stripes(x.fid).await.unwrap().expect("striped");
            let mdts: BTreeSet<u32> = stripes
                .shards
                .iter()
                .map(|&sh| c.mdt_index_of(sh).unwrap())
                .collect();
            assert_eq!(mdts, BTreeSet::from([0, 1]), "a shard on each MDT");
            assert_eq!(a_nlink, 3, "/a counts x once");
            // The directory works: names land in both shards and read back.
            for i in 0..6u8 {
                let p = format!("/a/x/n{i}");
                c.write_file(&p, &pattern(0, 1000, u64::from(i)), &cred)
                    .await
                    .unwrap();
                assert_eq!(
                    c.read_file(&p, &cred).await.unwrap().to_vec(),
                    pattern(0, 1000, u64::from(i))
                );
            }
            assert_eq!(names(c, x.fid).await.len(), 6);
            for i in 0..6u8 {
                c.unlink(x.fid, format!("n{i}").as_bytes(), &cred)
                    .await
                    .unwrap();
            }
            want.get_mut(&a_mdt).unwrap().0 += 2;
            want.get_mut(&other).unwrap().0 += 1;
        }
        Op::RmdirStriped => {
            let (master, shards) = s.striped.as_ref().unwrap();
            assert_eq!(errno(c.lookup(s.a, b"x", &cred).await), Errno::NoEnt);
            gone(*master).await;
            for &sh in shards {
                gone(sh).await;
            }
            assert_eq!(a_nlink, 2);
            // The name is free again.
            c.mkdir(s.a, b"x", 0o755, &cred).await.unwrap();
            c.rmdir(s.a, b"x", &cred).await.unwrap();
            want.get_mut(&a_mdt).unwrap().0 -= 2;
            want.get_mut(&other).unwrap().0 -= 1;
        }
        Op::Link => {
            let f = s.f.as_ref().unwrap().fid;
            let l = c.lookup(s.a, b"l", &cred).await.unwrap();
            assert_eq!(l.fid, f);
            let r = reply.expect("link answers the attributes");
            assert_eq!((r.fid, r.nlink), (f, 2), "the reply");
            assert_eq!(nlink(f).await, 2, "one link added");
            assert_eq!(read("/a/l").await, pattern(0, F_LEN, 1));
            assert_eq!(read("/b/f").await, pattern(0, F_LEN, 1));
        }
        Op::Unlink => {
            let f = s.f.as_ref().unwrap().fid;
            assert_eq!(errno(c.lookup(s.a, b"l", &cred).await), Errno::NoEnt);
            assert_eq!(nlink(f).await, 1, "one link dropped");
            assert_eq!(read("/b/f").await, pattern(0, F_LEN, 1));
        }
        Op::UnlinkLast => {
            assert_eq!(errno(c.lookup(s.a, b"l", &cred).await), Errno::NoEnt);
            gone(s.f.as_ref().unwrap().fid).await;
            want.get_mut(&other).unwrap().1 -= 1;
        }
        Op::Rename | Op::RenameReplace => {
            let f = s.f.as_ref().unwrap().fid;
            assert_eq!(errno(c.lookup(s.a, b"f", &cred).await), Errno::NoEnt);
            assert_eq!(c.lookup(s.b, b"g", &cred).await.unwrap().fid, f);
            assert_eq!(c.mdt_index_of(f).unwrap(), a_mdt, "the inode stays");
            assert_eq!(nlink(f).await, 1);
            assert_eq!(read("/b/g").await, pattern(0, F_LEN, 1));
            if op == Op::RenameReplace {
                gone(s.victim.as_ref().unwrap().fid).await;
                want.get_mut(&other).unwrap().1 -= 1;
            }
        }
        Op::RenameOverRemoteName => {
            let f = s.f.as_ref().unwrap().fid;
            let v = s.victim.as_ref().unwrap().fid;
            assert_eq!(errno(c.lookup(s.a, b"f", &cred).await), Errno::NoEnt);
            assert_eq!(c.lookup(s.a, b"v", &cred).await.unwrap().fid, f);
            assert_eq!(c.lookup(s.b, b"v", &cred).await.unwrap().fid, v);
            assert_eq!(nlink(f).await, 1);
            assert_eq!(nlink(v).await, 1, "the replaced name's inode lost one link");
            assert_eq!(read("/a/v").await, pattern(0, F_LEN, 1));
            assert_eq!(read("/b/v").await, pattern(0, G_LEN, 2));
        }
        Op::RenameOverRemoteLastName => {
            let f = s.f.as_ref().unwrap().fid;
            assert_eq!(errno(c.lookup(s.a, b"f", &cred).await), Errno::NoEnt);
            assert_eq!(c.lookup(s.a, b"v", &cred).await.unwrap().fid, f);
            assert_eq!(nlink(f).await, 1);
            gone(s.victim.as_ref().unwrap().fid).await;
            assert_eq!(read("/a/v").await, pattern(0, F_LEN, 1));
            want.get_mut(&other).unwrap().1 -= 1;
        }
        Op::RenameOntoRemoteName => {
            let (f, h) = (s.f.as_ref().unwrap().fid, s.victim.as_ref().unwrap().fid);
            assert_eq!(errno(c.lookup(s.a, b"f", &cred).await), Errno::NoEnt);
            assert_eq!(c.lookup(s.b, b"g", &cred).await.unwrap().fid, f);
            assert_eq!(c.lookup(s.a, b"h", &cred).await.unwrap().fid, h);
            assert_eq!(nlink(f).await, 1);
            assert_eq!(nlink(h).await, 1, "the replaced name's inode lost one link");
            assert_eq!(read("/b/g").await, pattern(0, F_LEN, 1));
            assert_eq!(read("/a/h").await, pattern(0, G_LEN, 2));
        }
    }
    if op != Op::MkdirStriped && op != Op::RmdirStriped {
        assert_eq!(a_nlink, 2);
    }
    wait_counters(tc, &want, &format!("after {op:?}")).await;
}

/// `op` runs on `/a` (on MDT `a_mdt`) and `/b` (on the other MDT) while the MDS
/// coordinating its intent runs with `WEFT_FAILPOINT=point` and aborts there; it is
/// restarted without the failpoint. The client's call (resent across the
/// restart) must succeed with the right answer, the operation must be done exactly once,
/// no intent may be left, and `weft fsck --dry-run` must find nothing.
async fn coordinator_crash(a_mdt: u32, op: Op, point: &str) {
    let mut tc = two_mdts().await;
    let c = fs_client(&tc).await;
    let scene = set_up(&c, a_mdt, op).await;
    let coordinator = op.coordinator(a_mdt);
    assert_fsck_clean(&tc, &format!("{op:?}: before the crash")).await;
    let before = counters(&tc).await;

    let mds = tc.mds_process(coordinator).unwrap();
    mds.set_env("WEFT_FAILPOINT", point);
    mds.restart().unwrap();
    tc.wait_ready().await.unwrap();
    let scene = Arc::new(scene);
    let call = {
        let (c, scene) = (c.clone(), scene.clone());
        tokio::spawn(async move { run(&c, op, &scene).await })
    };
    let mds = tc.mds_process(coordinator).unwrap();
    let status = mds.wait_exit(Duration::from_secs(20)).await.unwrap();
    assert_eq!(
        status.signal(),
        Some(libc::SIGABRT),
        "MDS of MDT{coordinator} should abort at {point} during {op:?}: {status}\n{}",
        mds.log()
    );
    assert!(mds.log().contains("failpoint reached"));
    mds.remove_env("WEFT_FAILPOINT");
    mds.restart().unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(45), call)
        .await
        .unwrap_or_else(|_| panic!("{op:?} at {point}: the client's call never returned"))
        .unwrap();
    tc.wait_ready().await.unwrap();
    let reply = outcome.unwrap_or_else(|e| {
        panic!("{op:?} at {point} on MDT{coordinator}: the client's call (resent) failed: {e}")
    });
    wait_no_intents(&tc, &c).await;
    check_done(&tc, &c, op, &scene, a_mdt, reply, &before).await;
    assert_fsck_clean(&tc, &format!("{op:?} at {point} on MDT{coordinator}")).await;
}

/// `op` waits for the other MDT, which is down (its intent stored), while the
/// coordinator's MDS is SIGKILLed and restarted: the restarted MDS rolls the intent
/// forward and the client's resend attaches to it, so two drivers wait for the other MDT,
/// each on its own back-off. When it is back the operation must still happen exactly
/// once: the second driver's request may not be applied again once the first finished.
async fn coordinator_restart_while_the_other_mdt_is_down(a_mdt: u32, op: Op) {
    let mut tc = two_mdts().await;
    let c = fs_client(&tc).await;
    let scene = Arc::new(set_up(&c, a_mdt, op).await);
    let coordinator = op.coordinator(a_mdt);
    assert_eq!(coordinator, a_mdt, "the client's MDT coordinates");
    let other = 1 - coordinator;
    let before = counters(&tc).await;

    tc.mds_process(other).unwrap().kill().unwrap();
    let call = {
        let (c, scene) = (c.clone(), scene.clone());
        tokio::spawn(async move { run(&c, op, &scene).await })
    };
    // The intent is stored: the operation waits for the other MDT.
    let deadline = Instant::now() + Duration::from_secs(20);
    while intents_on(&c, coordinator).await == 0 {
        assert!(Instant::now() < deadline, "{op:?}: no intent after 20 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!call.is_finished(), "{op:?} finished with MDT{other} down");
    tc.mds_process(coordinator).unwrap().kill().unwrap();
    tc.mds_process(coordinator).unwrap().restart().unwrap();
    // Long enough for the client to resend and for both drivers to back off a few times.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    tc.mds_process(other).unwrap().restart().unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(45), call)
        .await
        .unwrap_or_else(|_| panic!("{op:?}: the client's call never returned"))
        .unwrap();
    tc.wait_ready().await.unwrap();
    let reply =
        outcome.unwrap_or_else(|e| panic!("{op:?}: the client's call (resent) failed: {e}"));
    wait_no_intents(&tc, &c).await;
    // The slower driver's requests reach the other MDT up to 5 s (its longest back-off)
    // after it is back: give them that time to do harm.
    tokio::time::sleep(Duration::from_secs(6)).await;
    check_done(&tc, &c, op, &scene, a_mdt, reply, &before).await;
    assert_fsck_clean(&tc, &format!("{op:?} with MDT{coordinator} restarted")).await;
}

macro_rules! peer_down_tests {
    ($($name:ident: $op:ident;)*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                coordinator_restart_while_the_other_mdt_is_down(0, Op::$op).await;
            }
        )*
    };
}

peer_down_tests! {
    striped_mkdir_with_coordinator_restart_while_the_other_mdt_is_down: MkdirStriped;
    striped_rmdir_with_coordinator_restart_while_the_other_mdt_is_down: RmdirStriped;
    remote_link_with_coordinator_restart_while_the_other_mdt_is_down: Link;
    remote_unlink_with_coordinator_restart_while_the_other_mdt_is_down: Unlink;
    rename_to_other_mdt_with_coordinator_restart_while_the_other_mdt_is_down: Rename;
    rename_replacing_with_coordinator_restart_while_the_other_mdt_is_down: RenameReplace;
    rename_over_remote_name_with_coordinator_restart_while_the_other_mdt_is_down: RenameOverRemoteName;
}

macro_rules! crash_tests {
    ($($name:ident: $mdt:expr, $op:ident, $point:expr;)*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                coordinator_crash($mdt, Op::$op, $point).await;
            }
        )*
    };
}

crash_tests! {
    striped_mkdir_crash_before_remote: 0, MkdirStriped, BEFORE_REMOTE;
    striped_mkdir_crash_before_finish: 0, MkdirStriped, BEFORE_FINISH;
    striped_rmdir_crash_before_remote: 0, RmdirStriped, BEFORE_REMOTE;
    striped_rmdir_crash_before_finish: 0, RmdirStriped, BEFORE_FINISH;
    remote_link_crash_before_remote: 0, Link, BEFORE_REMOTE;
    remote_link_crash_before_finish: 0, Link, BEFORE_FINISH;
    remote_unlink_crash_before_remote: 0, Unlink, BEFORE_REMOTE;
    remote_unlink_crash_before_finish: 0, Unlink, BEFORE_FINISH;
    rename_to_other_mdt_crash_before_remote: 0, Rename, BEFORE_REMOTE;
    rename_to_other_mdt_crash_before_finish: 0, Rename, BEFORE_FINISH;
    rename_replacing_on_other_mdt_crash_before_remote: 0, RenameReplace, BEFORE_REMOTE;
    rename_replacing_on_other_mdt_crash_before_finish: 0, RenameReplace, BEFORE_FINISH;
    rename_over_remote_name_crash_before_remote: 0, RenameOverRemoteName, BEFORE_REMOTE;
    rename_over_remote_name_crash_before_finish: 0, RenameOverRemoteName, BEFORE_FINISH;
    remote_unlink_of_last_name_crash_before_remote: 0, UnlinkLast, BEFORE_REMOTE;
    remote_unlink_of_last_name_crash_before_finish: 0, UnlinkLast, BEFORE_FINISH;
    rename_over_remote_last_name_crash_before_remote: 0, RenameOverRemoteLastName, BEFORE_REMOTE;
    rename_over_remote_last_name_crash_before_finish: 0, RenameOverRemoteLastName, BEFORE_FINISH;
    // The MDS of /b (MDT1) aborts while dropping the link of the name it replaced.
    rename_onto_remote_name_crash_of_destination_before_remote: 0, RenameOntoRemoteName, BEFORE_REMOTE;
    rename_onto_remote_name_crash_of_destination_before_finish: 0, RenameOntoRemoteName, BEFORE_FINISH;
    // MDT1 coordinating (its directories are remote ones, the other MDT is MDT0).
    striped_mkdir_crash_of_mdt1_before_finish: 1, MkdirStriped, BEFORE_FINISH;
    striped_rmdir_crash_of_mdt1_before_remote: 1, RmdirStriped, BEFORE_REMOTE;
    remote_link_crash_of_mdt1_before_finish: 1, Link, BEFORE_FINISH;
    remote_unlink_crash_of_mdt1_before_remote: 1, Unlink, BEFORE_REMOTE;
    rename_replacing_crash_of_mdt1_before_finish: 1, RenameReplace, BEFORE_FINISH;
    rename_over_remote_name_crash_of_mdt1_before_remote: 1, RenameOverRemoteName, BEFORE_REMOTE;
}
