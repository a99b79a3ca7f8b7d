//! Crash tests of the cross-MDT operations (issue 6) against separate processes on
//! loopback: an MGS, an OSS and one MDS process per MDT (two MDTs).
//!
//! - For each cross-MDT operation other than the remote mkdir/rmdir of `dne.rs` (striped
//!   mkdir and rmdir, a hard link, an unlink and renames of names whose inode is on the
//!   other MDT), the coordinating MDS aborts at each failpoint (`cross_mdt.before_remote`,
//!   `cross_mdt.before_finish`) and is restarted: the client's call, resent across the
//!   restart, answers success, the namespace is as if the operation happened once, and
//!   `weft fsck --dry-run` finds nothing. Also: the coordinator restarted while the other
//!   MDT is down (the roll-forward and the client's resend both drive the intent).
//! - A seeded random mix of concurrent namespace operations over local, remote and
//!   striped directories while MDS processes are SIGKILLed and restarted: once the
//!   operations stop and the intents are rolled forward, `weft fsck --dry-run` finds
//!   nothing and every name listed can be stat'ed (and every file read).
//! - Regression tests of what the random mix found.

use crate::bin;
use crate::dne_common::{PLAIN, errno, root};

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use weft_client::{Client, ClientError};
use weft_proto::mdt::{Attr, DirEntry, DirHash, FileKind, MdtReply, MdtRequest};
use weft_proto::{Errno, Fid};
use weft_testkit::pattern;
use weft_testkit::{FSNAME, TestCluster};

const BEFORE_REMOTE: &str = "cross_mdt.before_remote";
const BEFORE_FINISH: &str = "cross_mdt.before_finish";

/// A cluster of one MGS, one OSS with one OST, and two MDS processes (MDT0, MDT1).
async fn two_mdts() -> TestCluster {
    TestCluster::start_mdts(bin(), 1, 2).await.unwrap()
}

async fn fs_client(tc: &TestCluster) -> Arc<Client> {
    tc.fs_client(Duration::from_secs(20)).await.unwrap()
}

/// Every entry of directory `fid` (all pages; a striped directory's shards merged).
async fn list(c: &Client, fid: Fid) -> Result<Vec<DirEntry>, ClientError> {
    let mut out = Vec::new();
    let mut cookie = 0;
    // Bounded: a few thousand entries at most in these tests.
    for _ in 0..1000 {
        let (page, eof) = c.readdir(fid, cookie, 64, false, &root()).await?;
        if let Some(last) = page.last() {
            cookie = last.cookie;
        }
        let empty = page.is_empty();
        out.extend(page);
        if eof || empty {
            return Ok(out);
        }
    }
    panic!("listing {fid} never ended");
}

async fn names(c: &Client, fid: Fid) -> BTreeSet<String> {
    list(c, fid)
        .await
        .unwrap()
        .iter()
        .map(|e| String::from_utf8_lossy(&e.name).into_owned())
        .collect()
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|n| n.to_string()).collect()
}

/// `weft fsck --dry-run` of the cluster: its exit status and output (bounded by 60 s).
async fn fsck_dry_run(tc: &TestCluster) -> (Option<i32>, String) {
    let spec = format!("{}:/{FSNAME}", tc.mgs_addr);
    tokio::task::spawn_blocking(move || {
        let mut child = Command::new(bin())
            .args(["fsck", "--dry-run", &spec])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("weft fsck did not exit within 60 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = child.wait_with_output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    })
    .await
    .unwrap()
}

/// `weft fsck --dry-run` finds no problem.
async fn assert_fsck_clean(tc: &TestCluster, what: &str) {
    let (code, out) = fsck_dry_run(tc).await;
    assert_eq!(
        code,
        Some(0),
        "{what}: weft fsck --dry-run found problems:\n{out}"
    );
}

/// Cross-MDT operations in progress on each MDT (what `weft fsck` reports).
async fn intents(tc: &TestCluster, c: &Client) -> BTreeMap<u32, u64> {
    let mut out = BTreeMap::new();
    for i in tc.mdt_indices() {
        out.insert(i, intents_on(c, i).await);
    }
    out
}

/// Cross-MDT operations in progress on MDT `index`.
async fn intents_on(c: &Client, index: u32) -> u64 {
    let req = MdtRequest::FsckInodes {
        after: None,
        max: 1,
    };
    match c.cluster().mdt(index).unwrap().call(req).await.unwrap() {
        MdtReply::FsckInodes { intents, .. } => intents,
        other => panic!("MDT{index}: unexpected reply {other:?}"),
    }
}

/// Waits (up to 30 s) until no MDT holds an intent: every cross-MDT operation finished.
async fn wait_no_intents(tc: &TestCluster, c: &Client) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = intents(tc, c).await;
        if left.values().all(|&n| n == 0) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "cross-MDT operations still in progress after 30 s: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// (directories, files) each MDT holds, by its counters.
async fn counters(tc: &TestCluster) -> BTreeMap<u32, (u64, u64)> {
    let mut out = BTreeMap::new();
    for i in tc.mdt_indices() {
        let dirs = tc.mdt_counter(i, "dirs").await.unwrap();
        let files = tc.mdt_counter(i, "files").await.unwrap();
        out.insert(i, (dirs, files));
    }
    out
}

/// Waits (up to 10 s: counters are published after each commit) for the counters to
/// equal `want`.
async fn wait_counters(tc: &TestCluster, want: &BTreeMap<u32, (u64, u64)>, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = counters(tc).await;
        if &got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: MDTs hold (directories, files) {got:?}, expected {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

// ---------------------------------------------------------------------------------------
// The coordinator aborts at each failpoint of each cross-MDT operation
// ---------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------
// A random mix of operations while MDS processes are killed
// ---------------------------------------------------------------------------------------

/// The names the workers make, remove, link and rename in every base directory.
const NAMES: [&str; 5] = ["a", "b", "c", "d", "e"];

/// Failures a race between the workers explains (two of them on the same name, a rename
/// of a directory across MDTs, a name being changed by a cross-MDT operation).
fn is_race(e: &ClientError) -> bool {
    matches!(
        e.errno(),
        Errno::NoEnt
            | Errno::Exist
            | Errno::NotEmpty
            | Errno::Busy
            | Errno::XDev
            | Errno::IsDir
            | Errno::NotDir
            | Errno::Stale
    )
}

/// One random namespace operation on the base directories `dirs` (path, FID): what it
/// was and how it ended.
async fn random_op(
    c: &Arc<Client>,
    rng: &mut StdRng,
    dirs: &[(String, Fid)],
    tag: &str,
) -> (String, Result<(), ClientError>) {
    let cred = root();
    let (dp, d) = dirs[rng.random_range(0..dirs.len())].clone();
    let (dp2, d2) = dirs[rng.random_range(0..dirs.len())].clone();
    let n = NAMES[rng.random_range(0..NAMES.len())];
    let n2 = NAMES[rng.random_range(0..NAMES.len())];
    let data = format!("mix {tag}").into_bytes();
    match rng.random_range(0..12) {
        0 => (
            format!("mkdir {dp}/{n}"),
            c.mkdir(d, n.as_bytes(), 0o755, &cred).await.map(drop),
        ),
        1 => {
            let mdt = rng.random_range(0..2);
            (
                format!("mkdir -i {mdt} {dp}/{n}"),
                c.mkdir_on(d, n.as_bytes(), 0o755, mdt, &cred)
                    .await
                    .map(drop),
            )
        }
        2 => (
            format!("mkdir -c 2 {dp}/{n}"),
            c.mkdir_striped(d, n.as_bytes(), 0o755, 2, DirHash::Fnv1a64, &cred)
                .await
                .map(drop),
        ),
        3 => (
            format!("rmdir {dp}/{n}"),
            c.rmdir(d, n.as_bytes(), &cred).await,
        ),
        4 | 5 => {
            let p = format!("{dp}/{n}");
            let r = c.write_file(&p, &data, &cred).await;
            (format!("create {p}"), r)
        }
        6 => (
            format!("unlink {dp}/{n}"),
            c.unlink(d, n.as_bytes(), &cred).await,
        ),
        7 => {
            let what = format!("link {dp}/{n} {dp2}/{n2}");
            match c.lookup(d, n.as_bytes(), &cred).await {
                Ok(a) if a.kind == FileKind::Directory => (what, Ok(())),
                Ok(a) => (
                    what,
                    c.link(a.fid, d2, n2.as_bytes(), &cred).await.map(drop),
                ),
                Err(e) => (what, Err(e)),
            }
        }
        8 | 9 => (
            format!("rename {dp}/{n} {dp2}/{n2}"),
            c.rename(d, n.as_bytes(), d2, n2.as_bytes(), PLAIN, &cred)
                .await,
        ),
        // Files inside the directories made, so that rmdir and renames over them meet
        // non-empty directories.
        10 => {
            let p = format!("{dp}/{n}/z");
            let r = c.write_file(&p, &data, &cred).await;
            (format!("create {p}"), r)
        }
        _ => {
            let what = format!("unlink {dp}/{n}/z");
            match c.lookup(d, n.as_bytes(), &cred).await {
                Ok(a) => (what, c.unlink(a.fid, b"z", &cred).await),
                Err(e) => (what, Err(e)),
            }
        }
    }
}

/// Walks the namespace from the root: every name listed answers a getattr with the
/// entry's type, and every regular file reads back whole with contents a worker wrote.
/// Returns the number of names.
async fn stat_everything(c: &Arc<Client>) -> usize {
    let mut todo = vec![("".to_string(), Fid::ROOT)];
    let mut seen = 0;
    while let Some((path, dir)) = todo.pop() {
        for e in list(c, dir).await.unwrap() {
            seen += 1;
            assert!(seen < 10_000, "the namespace should be small");
            let p = format!("{path}/{}", String::from_utf8_lossy(&e.name));
            let attr = c
                .getattr(e.fid)
                .await
                .unwrap_or_else(|err| panic!("{p} is listed but its stat fails: {err}"));
            assert_eq!(attr.kind, e.kind, "{p}: entry and inode types differ");
            match e.kind {
                FileKind::Directory => todo.push((p, e.fid)),
                FileKind::Regular => {
                    let data = c
                        .read_file(&p, &root())
                        .await
                        .unwrap_or_else(|err| panic!("{p}: read fails: {err}"));
                    assert_eq!(data.len() as u64, attr.size, "{p}: size");
                    assert!(data.starts_with(b"mix "), "{p}: contents {data:?}");
                }
                _ => {}
            }
        }
    }
    seen
}

/// Several workers run a seeded random mix of namespace operations over a local, a
/// remote and two striped directories (masters on either MDT) while the test SIGKILLs and
/// restarts an MDS three times (each at least once, at random moments). Races answer errors such as ENOENT or
/// EBUSY; nothing else may fail, every call returns, and once the operations stop and
/// the intents are rolled forward `weft fsck --dry-run` finds nothing and every name
/// listed can be stat'ed. `WEFT_MIX_SEED` replays a seed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_mix_of_cross_mdt_operations_with_mds_kills_leaves_a_sound_namespace() {
    const WORKERS: u64 = 4;
    const OPS_PER_WORKER: u32 = 5000;
    let seed: u64 = std::env::var("WEFT_MIX_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_261_124);
    eprintln!("random mix seed {seed} (replay with WEFT_MIX_SEED={seed})");
    let mut tc = two_mdts().await;
    let c = fs_client(&tc).await;
    let cred = root();
    let l0 = c.mkdir(Fid::ROOT, b"l0", 0o755, &cred).await.unwrap();
    let r1 = c.mkdir_on(Fid::ROOT, b"r1", 0o755, 1, &cred).await.unwrap();
    let s0 = c
        .mkdir_striped(Fid::ROOT, b"s0", 0o755, 2, DirHash::Fnv1a64, &cred)
        .await
        .unwrap();
    let s1 = c
        .mkdir_striped(r1.fid, b"s1", 0o755, 2, DirHash::Fnv1a64, &cred)
        .await
        .unwrap();
    assert_eq!(c.mdt_index_of(s1.fid).unwrap(), 1);
    let dirs: Arc<Vec<(String, Fid)>> = Arc::new(vec![
        ("/l0".into(), l0.fid),
        ("/r1".into(), r1.fid),
        ("/s0".into(), s0.fid),
        ("/r1/s1".into(), s1.fid),
    ]);

    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(40);
    let mut workers = Vec::new();
    for w in 0..WORKERS {
        let (c, dirs, stop, done) = (c.clone(), dirs.clone(), stop.clone(), done.clone());
        workers.push(tokio::spawn(async move {
            let mut rng = StdRng::seed_from_u64(seed.wrapping_add(w));
            let mut unexpected = Vec::new();
            let mut raced = BTreeMap::<String, u32>::new();
            for i in 0..OPS_PER_WORKER {
                if stop.load(Ordering::Relaxed) || Instant::now() > deadline {
                    break;
                }
                let tag = format!("w{w} op{i}");
                let op = random_op(&c, &mut rng, &dirs, &tag);
                match tokio::time::timeout(Duration::from_secs(45), op).await {
                    Ok((_, Ok(()))) => {}
                    Ok((_, Err(e))) if is_race(&e) => {
                        *raced.entry(format!("{:?}", e.errno())).or_default() += 1;
                    }
                    Ok((what, Err(e))) => unexpected.push(format!("{tag}: {what}: {e}")),
                    Err(_) => {
                        unexpected.push(format!("{tag}: an operation never returned"));
                        break;
                    }
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
            (unexpected, raced)
        }));
    }
    let progress = |n: u64| {
        let done = done.clone();
        async move {
            let until = Instant::now() + Duration::from_secs(20);
            let start = done.load(Ordering::Relaxed);
            while done.load(Ordering::Relaxed) < start + n && Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    // Each MDS is killed at least once; the third victim is either.
    let mut rng = StdRng::seed_from_u64(seed ^ 0x6b69_6c6c);
    let mut victims = [0, 1, rng.random_range(0..2u32)];
    victims.shuffle(&mut rng);
    let mut kills = Vec::new();
    for victim in victims {
        progress(20).await;
        tokio::time::sleep(Duration::from_millis(rng.random_range(200..1500))).await;
        let down = Duration::from_millis(rng.random_range(100..800));
        kills.push((victim, done.load(Ordering::Relaxed), down));
        tc.mds_process(victim).unwrap().kill().unwrap();
        tokio::time::sleep(down).await;
        tc.mds_process(victim).unwrap().restart().unwrap();
    }
    progress(20).await;
    stop.store(true, Ordering::Relaxed);
    let mut unexpected = Vec::new();
    let mut raced = BTreeMap::<String, u32>::new();
    for w in workers {
        let (u, r) = tokio::time::timeout(Duration::from_secs(50), w)
            .await
            .unwrap_or_else(|_| panic!("seed {seed}: a worker never finished"))
            .unwrap();
        unexpected.extend(u);
        for (k, n) in r {
            *raced.entry(k).or_default() += n;
        }
    }
    let ops = done.load(Ordering::Relaxed);
    eprintln!(
        "seed {seed}: {ops} operations, kills (MDT, after op, down for) {kills:?}, \
         race errors {raced:?}"
    );
    tc.wait_ready().await.unwrap();
    wait_no_intents(&tc, &c).await;
    let (code, out) = fsck_dry_run(&tc).await;
    assert!(
        code == Some(0) && unexpected.is_empty(),
        "seed {seed}: weft fsck --dry-run exit {code:?}:\n{out}\nunexpected failures: \
         {unexpected:#?}"
    );
    let names = stat_everything(&c).await;
    eprintln!("seed {seed}: {names} names in the end");
}

// ---------------------------------------------------------------------------------------
// What the random mix found
// ---------------------------------------------------------------------------------------

/// rename(2) of a name onto another name of the same inode does nothing (POSIX): across
/// MDTs too, both names stay and the link count stays 2. (The random mix found the source
/// name removed and the link count left at 2; unlinking the other name then left an inode
/// with no name.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rename_across_mdts_onto_another_name_of_the_same_inode_does_nothing() {
    let tc = two_mdts().await;
    let c = fs_client(&tc).await;
    let cred = root();
    let a = c.mkdir(Fid::ROOT, b"a", 0o755, &cred).await.unwrap();
    let b = c.mkdir_on(Fid::ROOT, b"b", 0o755, 1, &cred).await.unwrap();
    for (i, (from, to)) in [("/a/f", "/b/g"), ("/b/h", "/a/k")].into_iter().enumerate() {
        c.write_file(from, &pattern(0, 1000, u64::from(i as u8)), &cred)
            .await
            .unwrap();
        let f = c.resolve(from, true, &cred).await.unwrap();
        let (to_dir, to_name) = to.rsplit_once('/').unwrap();
        let (from_dir, from_name) = from.rsplit_once('/').unwrap();
        let dir = |p: &str| if p == "/a" { a.fid } else { b.fid };
        c.link(f.fid, dir(to_dir), to_name.as_bytes(), &cred)
            .await
            .unwrap();
        c.rename(
            dir(from_dir),
            from_name.as_bytes(),
            dir(to_dir),
            to_name.as_bytes(),
            PLAIN,
            &cred,
        )
        .await
        .unwrap();
        for p in [from, to] {
            assert_eq!(
                c.resolve(p, true, &cred).await.unwrap().fid,
                f.fid,
                "mv {from} {to}: {p} still names the file"
            );
        }
        assert_eq!(c.getattr(f.fid).await.unwrap().nlink, 2, "mv {from} {to}");
    }
    wait_no_intents(&tc, &c).await;
    assert_fsck_clean(&tc, "after the renames").await;
}

/// A striped directory renamed into a directory of another MDT (moved, or refused with
/// EXDEV) is still removed whole: ENOTEMPTY while its shards hold names, then the master
/// and every shard go. (The random mix found a striped directory moved to another MDT
/// removed by rmdir there as a plain remote directory: the master alone, whatever the
/// shards held, which were left orphaned.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_striped_directory_renamed_towards_another_mdt_is_removed_whole() {
    let tc = two_mdts().await;
    let c = fs_client(&tc).await;
    let cred = root();
    let a = c.mkdir(Fid::ROOT, b"a", 0o755, &cred).await.unwrap();
    let b = c.mkdir_on(Fid::ROOT, b"b", 0o755, 1, &cred).await.unwrap();
    let x = c
        .mkdir_striped(a.fid, b"x", 0o755, 2, DirHash::Fnv1a64, &cred)
        .await
        .unwrap();
    let shards = c.dir_stripes(x.fid).await.unwrap().unwrap().shards.clone();
    for i in 0..8u8 {
        c.write_file(&format!("/a/x/f{i}"), &pattern(0, 100, u64::from(i)), &cred)
            .await
            .unwrap();
    }
    let moved = c.rename(a.fid, b"x", b.fid, b"x", PLAIN, &cred).await;
    let (dir, path) = match moved.as_ref().map_err(ClientError::errno) {
        Ok(()) => (b.fid, "/b/x"),
        Err(Errno::XDev) => (a.fid, "/a/x"),
        Err(e) => panic!("rename of a striped directory to another MDT: {e:?}"),
    };
    assert_eq!(c.resolve(path, true, &cred).await.unwrap().fid, x.fid);
    assert_eq!(names(&c, x.fid).await.len(), 8, "{path} lists its names");
    assert_eq!(
        errno(c.rmdir(dir, b"x", &cred).await),
        Errno::NotEmpty,
        "rmdir {path} while its shards hold names"
    );
    assert_fsck_clean(&tc, &format!("{path} with its names")).await;
    for i in 0..8u8 {
        c.unlink(x.fid, format!("f{i}").as_bytes(), &cred)
            .await
            .unwrap();
    }
    c.rmdir(dir, b"x", &cred).await.unwrap();
    for fid in std::iter::once(x.fid).chain(shards) {
        let e = errno(c.getattr(fid).await);
        assert!(
            matches!(e, Errno::NoEnt | Errno::Stale),
            "{fid} remains: {e:?}"
        );
    }
    wait_no_intents(&tc, &c).await;
    assert_fsck_clean(&tc, &format!("after rmdir {path}")).await;
}

/// An rmdir of a directory's new name, racing with the move of that directory (holding a
/// file) from another MDT, must never succeed: the directory is not empty. (The random
/// mix found the rmdir answered success while the moved directory's ".." still named its
/// old parent: the other MDT answered "not in that parent" (ENOENT), taken for "removed
/// already", and the name went while the directory and its file stayed, orphaned.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmdir_racing_with_a_directory_moving_in_from_another_mdt_never_orphans_it() {
    let tc = two_mdts().await;
    let c = fs_client(&tc).await;
    let cred = root();
    let a = c.mkdir(Fid::ROOT, b"a", 0o755, &cred).await.unwrap();
    let r = c.mkdir_on(Fid::ROOT, b"r", 0o755, 1, &cred).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut moved = 0;
    for i in 0..40 {
        if Instant::now() > deadline {
            break;
        }
        let dir = c.mkdir(r.fid, b"c", 0o755, &cred).await.unwrap();
        c.write_file("/r/c/z", b"z", &cred).await.unwrap();
        let spin = {
            let c = c.clone();
            tokio::spawn(async move {
                // Until the name appears (or 2 s pass): rmdir of a non-empty directory.
                let until = Instant::now() + Duration::from_secs(2);
                loop {
                    let r = c.rmdir(a.fid, b"d", &root()).await;
                    match r.as_ref().map_err(ClientError::errno) {
                        Err(Errno::NoEnt) if Instant::now() < until => {}
                        _ => return r,
                    }
                }
            })
        };
        let mv = c.rename(r.fid, b"c", a.fid, b"d", PLAIN, &cred).await;
        let rm = spin.await.unwrap();
        assert!(
            !matches!(rm, Ok(())),
            "#{i}: rmdir /a/d succeeded although the directory moved there holds /a/d/z \
             (rename: {mv:?})"
        );
        wait_no_intents(&tc, &c).await;
        // Back to the start: the file and the directory go, wherever the directory is.
        let (parent, name) = match c.lookup(a.fid, b"d", &cred).await {
            Ok(_) => (a.fid, &b"d"[..]),
            Err(_) => (r.fid, &b"c"[..]),
        };
        assert_eq!(c.lookup(parent, name, &cred).await.unwrap().fid, dir.fid);
        c.unlink(dir.fid, b"z", &cred).await.unwrap();
        c.rmdir(parent, name, &cred).await.unwrap();
        moved += usize::from(mv.is_ok());
    }
    assert!(moved > 0, "the directory never moved");
    assert_fsck_clean(&tc, "after the races").await;
}
