//! Crash tests of the cross-MDT operations (issue 6) against separate processes on
//! loopback: an MGS, an OSS and one MDS process per MDT (two MDTs).
//!
//! - For each cross-MDT operation other than the remote mkdir/rmdir of `dne.rs` (striped
//!   mkdir and rmdir, a hard link, an unlink and renames of names whose inode is on the
//!   other MDT), the coordinating MDS aborts at each failpoint (`cross_mdt.before_remote`,
//!   `cross_mdt.before_finish`) and is restarted: the client's call, resent across the
//!   restart, answers success, the namespace is as if the operation happened once, and
//!   `weft fsck --dry-run` finds nothing.
//! - A seeded random mix of concurrent namespace operations over local, remote and
//!   striped directories while MDS processes are SIGKILLed and restarted: once the
//!   operations stop and the intents are rolled forward, `weft fsck --dry-run` finds
//!   nothing and every name listed can be stat'ed (and every file read).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use weft_client::{Client, ClientError};
use weft_proto::mdt::RenameFlags;
use weft_proto::mdt::{Attr, Credentials, DirEntry, DirHash, MdtReply, MdtRequest};
use weft_proto::{Errno, Fid};
use weft_testkit::{FSNAME, TestCluster};

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_weft"))
}

fn root() -> Credentials {
    Credentials::root()
}

fn errno<T: std::fmt::Debug>(r: Result<T, ClientError>) -> Errno {
    r.expect_err("expected an error").errno()
}

const PLAIN: RenameFlags = RenameFlags {
    noreplace: false,
    exchange: false,
};

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

/// Recognisable contents for file number `n`.
fn pattern(len: usize, n: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i % 251) as u8 ^ n.wrapping_mul(37))
        .collect()
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
        let req = MdtRequest::FsckInodes {
            after: None,
            max: 1,
        };
        match c.cluster().mdt(i).unwrap().call(req).await.unwrap() {
            MdtReply::FsckInodes { intents, .. } => {
                out.insert(i, intents);
            }
            other => panic!("MDT{i}: unexpected reply {other:?}"),
        }
    }
    out
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

async fn set_up(c: &Arc<Client>, coordinator: u32, op: Op) -> Scene {
    let cred = root();
    let a = c
        .mkdir_on(Fid::ROOT, b"a", 0o755, coordinator, &cred)
        .await
        .unwrap();
    let b = c
        .mkdir_on(Fid::ROOT, b"b", 0o755, 1 - coordinator, &cred)
        .await
        .unwrap();
    assert_eq!(c.mdt_index_of(a.fid).unwrap(), coordinator);
    assert_eq!(c.mdt_index_of(b.fid).unwrap(), 1 - coordinator);
    let (f_path, victim_path) = match op {
        Op::MkdirStriped | Op::RmdirStriped => (None, None),
        Op::Link | Op::Unlink => (Some("/b/f"), None),
        Op::Rename => (Some("/a/f"), None),
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
        c.write_file(p, &pattern(F_LEN, 1), &cred).await.unwrap();
        scene.f = Some(c.resolve(p, true, &cred).await.unwrap());
    }
    if let Some(p) = victim_path {
        c.write_file(p, &pattern(G_LEN, 2), &cred).await.unwrap();
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
        Op::Unlink => c.unlink(s.a, b"l", &cred).await.map(|()| None),
        Op::Rename | Op::RenameReplace => c
            .rename(s.a, b"f", s.b, b"g", PLAIN, &cred)
            .await
            .map(|()| None),
        Op::RenameOverRemoteName => c
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
    coordinator: u32,
    reply: Option<Attr>,
    before: &BTreeMap<u32, (u64, u64)>,
) {
    let cred = root();
    let other = 1 - coordinator;
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
        Op::RmdirStriped => (&[], &[]),
        Op::Unlink => (&[], &["f"]),
        Op::Link => (&["l"], &["f"]),
        Op::Rename | Op::RenameReplace => (&[], &["g"]),
        Op::RenameOverRemoteName => (&["v"], &["v"]),
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
            assert_eq!(c.mdt_index_of(x.fid).unwrap(), coordinator);
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
                c.write_file(&p, &pattern(1000, i), &cred).await.unwrap();
                assert_eq!(
                    c.read_file(&p, &cred).await.unwrap().to_vec(),
                    pattern(1000, i)
                );
            }
            assert_eq!(names(c, x.fid).await.len(), 6);
            for i in 0..6u8 {
                c.unlink(x.fid, format!("n{i}").as_bytes(), &cred)
                    .await
                    .unwrap();
            }
            want.get_mut(&coordinator).unwrap().0 += 2;
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
            want.get_mut(&coordinator).unwrap().0 -= 2;
            want.get_mut(&other).unwrap().0 -= 1;
        }
        Op::Link => {
            let f = s.f.as_ref().unwrap().fid;
            let l = c.lookup(s.a, b"l", &cred).await.unwrap();
            assert_eq!(l.fid, f);
            let r = reply.expect("link answers the attributes");
            assert_eq!((r.fid, r.nlink), (f, 2), "the reply");
            assert_eq!(nlink(f).await, 2, "one link added");
            assert_eq!(read("/a/l").await, pattern(F_LEN, 1));
            assert_eq!(read("/b/f").await, pattern(F_LEN, 1));
        }
        Op::Unlink => {
            let f = s.f.as_ref().unwrap().fid;
            assert_eq!(errno(c.lookup(s.a, b"l", &cred).await), Errno::NoEnt);
            assert_eq!(nlink(f).await, 1, "one link dropped");
            assert_eq!(read("/b/f").await, pattern(F_LEN, 1));
        }
        Op::Rename | Op::RenameReplace => {
            let f = s.f.as_ref().unwrap().fid;
            assert_eq!(errno(c.lookup(s.a, b"f", &cred).await), Errno::NoEnt);
            assert_eq!(c.lookup(s.b, b"g", &cred).await.unwrap().fid, f);
            assert_eq!(c.mdt_index_of(f).unwrap(), coordinator, "the inode stays");
            assert_eq!(nlink(f).await, 1);
            assert_eq!(read("/b/g").await, pattern(F_LEN, 1));
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
            assert_eq!(read("/a/v").await, pattern(F_LEN, 1));
            assert_eq!(read("/b/v").await, pattern(G_LEN, 2));
        }
    }
    if op != Op::MkdirStriped && op != Op::RmdirStriped {
        assert_eq!(a_nlink, 2);
    }
    wait_counters(tc, &want, &format!("after {op:?}")).await;
}

/// The MDS of MDT `coordinator` runs with `WEFT_FAILPOINT=point` and aborts there during
/// `op`; it is restarted without the failpoint. The client's call (resent across the
/// restart) must succeed with the right answer, the operation must be done exactly once,
/// no intent may be left, and `weft fsck --dry-run` must find nothing.
async fn coordinator_crash(coordinator: u32, op: Op, point: &str) {
    let mut tc = two_mdts().await;
    let c = fs_client(&tc).await;
    let scene = set_up(&c, coordinator, op).await;
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
    check_done(&tc, &c, op, &scene, coordinator, reply, &before).await;
    assert_fsck_clean(&tc, &format!("{op:?} at {point} on MDT{coordinator}")).await;
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
    // MDT1 coordinating (its directories are remote ones, the other MDT is MDT0).
    striped_mkdir_crash_of_mdt1_before_finish: 1, MkdirStriped, BEFORE_FINISH;
    striped_rmdir_crash_of_mdt1_before_remote: 1, RmdirStriped, BEFORE_REMOTE;
    remote_link_crash_of_mdt1_before_finish: 1, Link, BEFORE_FINISH;
    remote_unlink_crash_of_mdt1_before_remote: 1, Unlink, BEFORE_REMOTE;
    rename_replacing_crash_of_mdt1_before_finish: 1, RenameReplace, BEFORE_FINISH;
    rename_over_remote_name_crash_of_mdt1_before_remote: 1, RenameOverRemoteName, BEFORE_REMOTE;
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
        c.write_file(from, &pattern(1000, i as u8), &cred)
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
