//! Directories moved to another parent across MDTs (rename(2) of a directory is never
//! EXDEV on one file system), against separate `weft mgs`, `weft oss` and one `weft mds`
//! process per MDT on loopback: every placement of the source name, the destination and
//! the directory's inode over two and three MDTs; the ancestor check across MDTs under the
//! rename lock, also with moves racing each other from two MDTs; replacements, refusals and
//! permissions; crashes of the coordinating MDS at each failpoint of a move, and with the
//! rename lock taken but nothing else done. `weft migrate -m` (a directory's metadata moved
//! to another MDT) while others read and write in it, and crashes of the coordinating MDS
//! in each of its phases. `weft fsck --dry-run` checks every directory's ".." afterwards.

use crate::bin;
use crate::dne_common::{PLAIN, errno, root, user};

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;
use weft_client::Client;
use weft_proto::mdt::{DirHash, FileKind, RenameFlags, SetAttr, TimeSet, XattrMode};
use weft_proto::{Errno, Fid};
use weft_testkit::{FSNAME, TestCluster};

async fn cluster(mdts: u32) -> (TestCluster, Arc<Client>) {
    let tc = TestCluster::start_mdts(bin(), 1, mdts).await.unwrap();
    let c = tc.fs_client(Duration::from_secs(20)).await.unwrap();
    (tc, c)
}

/// `weft fsck --dry-run` finds nothing wrong (names, link counts, every directory's
/// parent), waiting a little for intents still being finished.
async fn assert_fsck_clean(tc: &TestCluster) {
    let spec = format!("{}:/{FSNAME}", tc.mgs_addr);
    let mut last = String::new();
    for _ in 0..20 {
        let out = Command::new(bin())
            .args(["fsck", "--dry-run", &spec])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        if out.status.code() == Some(0) {
            return;
        }
        last = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("weft fsck --dry-run found problems:\n{last}");
}

/// Moves `name` from `from` to `to` and checks: the same directory under the new name,
/// gone from the old one, the parents' link counts moved by one, its contents intact.
async fn move_and_check(c: &Client, from: Fid, to: Fid, name: &[u8], what: &str) {
    let cred = root();
    let dir = c.lookup(from, name, &cred).await.unwrap();
    let (from_links, to_links) = (
        c.getattr(from).await.unwrap().nlink,
        c.getattr(to).await.unwrap().nlink,
    );
    let inside = c.lookup(dir.fid, b"f", &cred).await.unwrap().fid;
    c.rename(from, name, to, name, PLAIN, &cred)
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(
        c.lookup(to, name, &cred).await.unwrap().fid,
        dir.fid,
        "{what}"
    );
    assert_eq!(errno(c.lookup(from, name, &cred).await), Errno::NoEnt);
    assert_eq!(
        c.getattr(from).await.unwrap().nlink,
        from_links - 1,
        "{what}"
    );
    assert_eq!(c.getattr(to).await.unwrap().nlink, to_links + 1, "{what}");
    assert_eq!(
        c.lookup(dir.fid, b"f", &cred).await.unwrap().fid,
        inside,
        "{what}"
    );
}

/// Every placement over three MDTs: the source name's MDT (which coordinates), the
/// destination directory's and the moved directory's inode's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directories_move_between_directories_of_any_mdts() {
    let (tc, c) = cluster(3).await;
    let cred = root();
    // /m0, /m1, /m2: a directory on each MDT.
    let mut on = Vec::new();
    for i in 0..3u32 {
        let name = format!("m{i}");
        on.push(
            c.mkdir_on(Fid::ROOT, name.as_bytes(), 0o755, i, &cred)
                .await
                .unwrap()
                .fid,
        );
    }
    // (source parent's MDT, destination's MDT, inode's MDT).
    let mut n = 0;
    for (src, dst, ino) in [
        (0, 0, 1), // both parents here, the inode elsewhere (an intent sets "..")
        (0, 1, 0), // the inode here, the destination elsewhere
        (0, 1, 1), // the inode where the destination is
        (1, 0, 2), // all three apart
        (2, 2, 2), // all on MDT2, whose ancestors lead to MDT0
        (1, 2, 0),
    ] {
        n += 1;
        let name = format!("d{n}");
        let what = format!("{name}: name on MDT{src}, to MDT{dst}, inode on MDT{ino}");
        let (from, to) = if src == dst {
            let sub = format!("sub{n}");
            let to = c
                .mkdir(on[dst], sub.as_bytes(), 0o755, &cred)
                .await
                .unwrap()
                .fid;
            (on[src], to)
        } else {
            (on[src], on[dst])
        };
        let d = c
            .mkdir_on(from, name.as_bytes(), 0o755, ino as u32, &cred)
            .await
            .unwrap();
        assert_eq!(c.mdt_index_of(d.fid).unwrap(), ino as u32);
        c.write_file(&format!("/m{src}/{name}/f"), name.as_bytes(), &cred)
            .await
            .unwrap();
        move_and_check(&c, from, to, name.as_bytes(), &what).await;
        assert_eq!(c.mdt_index_of(d.fid).unwrap(), ino as u32, "{what}");
        assert_fsck_clean(&tc).await;
        // And back, so every coordinator plays the other part too.
        move_and_check(&c, to, from, name.as_bytes(), &what).await;
        assert_fsck_clean(&tc).await;
    }
    // A striped directory moves as one (its master's name and ".."; its shards stay).
    let s = c
        .mkdir_striped(on[1], b"striped", 0o755, 3, DirHash::Fnv1a64, &cred)
        .await
        .unwrap();
    for i in 0..12 {
        c.write_file(&format!("/m1/striped/f{i}"), b"x", &cred)
            .await
            .unwrap();
    }
    c.write_file("/m1/striped/f", b"f", &cred).await.unwrap();
    move_and_check(&c, on[1], on[2], b"striped", "a striped directory").await;
    assert_eq!(c.lookup(on[2], b"striped", &cred).await.unwrap().fid, s.fid);
    assert_eq!(
        &c.read_file("/m2/striped/f7", &cred).await.unwrap()[..],
        b"x"
    );
    assert_fsck_clean(&tc).await;
    // Removed from its new parent (on another MDT than its master) it goes whole: refused
    // while a shard holds a name, then the shards and the master.
    let shards = c.dir_stripes(s.fid).await.unwrap().unwrap().shards.clone();
    assert_eq!(
        errno(c.rmdir(on[2], b"striped", &cred).await),
        Errno::NotEmpty
    );
    for i in 0..12 {
        c.unlink(s.fid, format!("f{i}").as_bytes(), &cred)
            .await
            .unwrap();
    }
    c.unlink(s.fid, b"f", &cred).await.unwrap();
    c.rmdir(on[2], b"striped", &cred).await.unwrap();
    for fid in std::iter::once(s.fid).chain(shards) {
        assert!(c.getattr(fid).await.is_err(), "{fid} remains");
    }
    assert_fsck_clean(&tc).await;
}

/// A directory never becomes its own ancestor, whichever MDTs the chain crosses, and the
/// refusals of a local rename hold across MDTs: EEXIST with RENAME_NOREPLACE, ENOTEMPTY
/// over a non-empty directory, ENOTDIR over a file; an empty directory is replaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moves_across_mdts_refuse_what_a_local_rename_refuses() {
    let (tc, c) = cluster(2).await;
    let cred = root();
    // /a (MDT0) / r (MDT1) / b (MDT0) / c (MDT1)
    let a = c.mkdir(Fid::ROOT, b"a", 0o755, &cred).await.unwrap();
    let r = c.mkdir_on(a.fid, b"r", 0o755, 1, &cred).await.unwrap();
    let b = c.mkdir_on(r.fid, b"b", 0o755, 0, &cred).await.unwrap();
    let cc = c.mkdir_on(b.fid, b"c", 0o755, 1, &cred).await.unwrap();
    for (what, from, name, to) in [
        ("/a into /a/r/b/c", Fid::ROOT, &b"a"[..], cc.fid),
        ("/a into /a/r", Fid::ROOT, b"a", r.fid),
        ("/a/r into /a/r/b/c", a.fid, b"r", cc.fid),
        ("/a/r/b into /a/r/b/c", r.fid, b"b", cc.fid),
        ("/a/r/b into itself", r.fid, b"b", b.fid),
    ] {
        assert_eq!(
            errno(c.rename(from, name, to, b"x", PLAIN, &cred).await),
            Errno::Inval,
            "{what}"
        );
    }
    // Sideways is fine: /a/r/b/c to the root and back.
    c.rename(b.fid, b"c", Fid::ROOT, b"c", PLAIN, &cred)
        .await
        .unwrap();
    c.rename(Fid::ROOT, b"c", b.fid, b"c", PLAIN, &cred)
        .await
        .unwrap();

    // Destinations that exist, on the other MDT than the source.
    let src = c.mkdir(Fid::ROOT, b"src", 0o755, &cred).await.unwrap();
    c.mkdir(r.fid, b"empty", 0o755, &cred).await.unwrap();
    c.mkdir(r.fid, b"full", 0o755, &cred).await.unwrap();
    c.write_file("/a/r/full/f", b"f", &cred).await.unwrap();
    c.write_file("/a/r/file", b"f", &cred).await.unwrap();
    let noreplace = RenameFlags {
        noreplace: true,
        exchange: false,
    };
    assert_eq!(
        errno(
            c.rename(Fid::ROOT, b"src", r.fid, b"empty", noreplace, &cred)
                .await
        ),
        Errno::Exist
    );
    assert_eq!(
        errno(
            c.rename(Fid::ROOT, b"src", r.fid, b"full", PLAIN, &cred)
                .await
        ),
        Errno::NotEmpty
    );
    assert_eq!(
        errno(
            c.rename(Fid::ROOT, b"src", r.fid, b"file", PLAIN, &cred)
                .await
        ),
        Errno::NotDir
    );
    let r_links = c.getattr(r.fid).await.unwrap().nlink;
    c.rename(Fid::ROOT, b"src", r.fid, b"empty", PLAIN, &cred)
        .await
        .unwrap();
    assert_eq!(c.lookup(r.fid, b"empty", &cred).await.unwrap().fid, src.fid);
    assert_eq!(
        c.getattr(r.fid).await.unwrap().nlink,
        r_links,
        "one directory replaced another"
    );
    assert_eq!(
        errno(c.lookup(Fid::ROOT, b"src", &cred).await),
        Errno::NoEnt
    );
    assert_fsck_clean(&tc).await;

    // RENAME_EXCHANGE of a file and a directory in two directories of MDT0 moves the
    // directory under the rename lock, its new ancestors checked: EINVAL below itself.
    let exchange = RenameFlags {
        noreplace: false,
        exchange: true,
    };
    let e = c.mkdir(Fid::ROOT, b"e", 0o755, &cred).await.unwrap();
    let ed = c.mkdir(e.fid, b"d", 0o755, &cred).await.unwrap();
    c.write_file("/f", b"f", &cred).await.unwrap();
    c.write_file("/e/d/h", b"h", &cred).await.unwrap();
    assert_eq!(
        errno(
            c.rename(ed.fid, b"h", Fid::ROOT, b"e", exchange, &cred)
                .await
        ),
        Errno::Inval,
        "/e exchanged with /e/d/h would be below itself"
    );
    c.rename(Fid::ROOT, b"f", e.fid, b"d", exchange, &cred)
        .await
        .unwrap();
    assert_eq!(c.lookup(Fid::ROOT, b"f", &cred).await.unwrap().fid, ed.fid);
    assert_eq!(&c.read_file("/e/d", &cred).await.unwrap()[..], b"f");
    assert_eq!(&c.read_file("/f/h", &cred).await.unwrap()[..], b"h");
    assert_fsck_clean(&tc).await;
}

/// Permissions as for a local move: write and search on both parents (EACCES), write on
/// the moved directory itself, whose ".." changes (EACCES), and the sticky bit of the
/// source parent (EPERM for a stranger, allowed for the directory's owner).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moves_across_mdts_check_permissions_like_local_ones() {
    let (tc, c) = cluster(2).await;
    let cred = root();
    let (alice, bob) = (user(1000), user(2000));
    let t = c.mkdir(Fid::ROOT, b"t", 0o1777, &cred).await.unwrap();
    let open = c
        .mkdir_on(Fid::ROOT, b"open", 0o777, 1, &cred)
        .await
        .unwrap();
    let closed = c
        .mkdir_on(Fid::ROOT, b"closed", 0o755, 1, &cred)
        .await
        .unwrap();
    // Alice's directory in the sticky /t, its inode on MDT1.
    c.mkdir_on(t.fid, b"mine", 0o755, 1, &alice).await.unwrap();
    assert_eq!(
        errno(
            c.rename(t.fid, b"mine", open.fid, b"mine", PLAIN, &bob)
                .await
        ),
        Errno::Perm,
        "a stranger moves alice's directory out of a sticky directory"
    );
    assert_eq!(
        errno(
            c.rename(t.fid, b"mine", closed.fid, b"mine", PLAIN, &alice)
                .await
        ),
        Errno::Access,
        "no write permission on the destination"
    );
    c.rename(t.fid, b"mine", open.fid, b"mine", PLAIN, &alice)
        .await
        .unwrap();
    // A directory alice cannot write moves nowhere else (its ".." would change), though
    // both parents are writable for her.
    c.mkdir(t.fid, b"ro", 0o555, &alice).await.unwrap();
    assert_eq!(
        errno(c.rename(t.fid, b"ro", open.fid, b"ro", PLAIN, &alice).await),
        Errno::Access
    );
    // Within its directory it is renamed (its ".." stays).
    c.rename(t.fid, b"ro", t.fid, b"ro2", PLAIN, &alice)
        .await
        .unwrap();

    // Alice's file in the sticky /t, its inode on MDT1: its owner is asked there, within
    // /t and towards another MDT.
    c.write_file("/open/af", b"a", &alice).await.unwrap();
    c.rename(open.fid, b"af", t.fid, b"af", PLAIN, &alice)
        .await
        .unwrap();
    let af = c.lookup(t.fid, b"af", &cred).await.unwrap();
    assert_eq!(c.mdt_index_of(af.fid).unwrap(), 1);
    for (to, name) in [(t.fid, &b"bf"[..]), (open.fid, b"bf")] {
        assert_eq!(
            errno(c.rename(t.fid, b"af", to, name, PLAIN, &bob).await),
            Errno::Perm,
            "a stranger renames alice's file out of a sticky directory"
        );
    }
    c.rename(t.fid, b"af", t.fid, b"af2", PLAIN, &alice)
        .await
        .unwrap();
    c.rename(t.fid, b"af2", open.fid, b"af", PLAIN, &alice)
        .await
        .unwrap();
    assert_eq!(&c.read_file("/open/af", &alice).await.unwrap()[..], b"a");
    assert_fsck_clean(&tc).await;
}

/// Two MDTs move directories at once in opposite directions (`mv x y/` against `mv y x/`,
/// each coordinated by the MDT holding its name): the rename lock makes one of each pair
/// see the other's move, so the namespace never gets a loop — every directory stays
/// reachable from the root — and nothing is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opposite_moves_racing_from_two_mdts_never_make_a_loop() {
    let (tc, c) = cluster(2).await;
    let cred = root();
    let p0 = c.mkdir_on(Fid::ROOT, b"p0", 0o755, 0, &cred).await.unwrap();
    let p1 = c.mkdir_on(Fid::ROOT, b"p1", 0o755, 1, &cred).await.unwrap();
    let x = c.mkdir_on(p0.fid, b"x", 0o755, 1, &cred).await.unwrap();
    let y = c.mkdir_on(p1.fid, b"y", 0o755, 0, &cred).await.unwrap();
    const ROUNDS: usize = 40;
    // Each task moves its directory into the other one and back, as fast as it can.
    let mover = |name: &'static [u8], home: Fid, me: Fid, other: Fid| {
        let c = c.clone();
        tokio::spawn(async move {
            let (mut moved, mut refused) = (0, 0);
            for _ in 0..ROUNDS {
                match c.rename(home, name, other, name, PLAIN, &root()).await {
                    Ok(()) => {
                        moved += 1;
                        // Stay a moment, so that the other mover meets this one inside.
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        c.rename(other, name, home, name, PLAIN, &root())
                            .await
                            .unwrap();
                    }
                    // The other directory is inside this one right now.
                    Err(e) if e.errno() == Errno::Inval => refused += 1,
                    Err(e) => panic!("moving {me}: {e}"),
                }
            }
            (moved, refused)
        })
    };
    let a = mover(b"x", p0.fid, x.fid, y.fid);
    let b = mover(b"y", p1.fid, y.fid, x.fid);
    let (a, b) = (a.await.unwrap(), b.await.unwrap());
    eprintln!("x into y: {a:?}, y into x: {b:?} (moved, refused as a loop) of {ROUNDS} each");
    assert!(a.0 + b.0 > 0, "no move succeeded");
    // Both are back home and reachable.
    assert_eq!(c.lookup(p0.fid, b"x", &cred).await.unwrap().fid, x.fid);
    assert_eq!(c.lookup(p1.fid, b"y", &cred).await.unwrap().fid, y.fid);
    assert_fsck_clean(&tc).await;
}

/// Restarts the MDS of MDT `index` with `WEFT_FAILPOINT=point`, runs `call` (a client
/// request), checks that the MDS aborted at the failpoint, restarts it without and
/// returns the call's outcome (the client resends across the restart) once the cluster is
/// ready again.
async fn crash_at<T: Send + 'static>(
    tc: &mut TestCluster,
    index: u32,
    point: &str,
    call: impl std::future::Future<Output = T> + Send + 'static,
) -> T {
    let mds = tc.mds_process(index).unwrap();
    mds.set_env("WEFT_FAILPOINT", point);
    mds.restart().unwrap();
    tc.wait_ready().await.unwrap();
    let call = tokio::spawn(call);
    let mds = tc.mds_process(index).unwrap();
    let status = mds.wait_exit(Duration::from_secs(20)).await.unwrap();
    assert_eq!(
        status.signal(),
        Some(libc::SIGABRT),
        "the MDS of MDT{index} should abort at {point}: {status}\n{}",
        mds.log()
    );
    mds.remove_env("WEFT_FAILPOINT");
    mds.restart().unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(60), call)
        .await
        .expect("the client call never returned")
        .unwrap();
    tc.wait_ready().await.unwrap();
    outcome
}

/// Where the coordinating MDS dies in a directory move.
#[derive(Debug, Clone, Copy)]
enum Crash {
    /// After the rename lock was taken, before anything else (no intent left).
    Locked,
    /// With the intent written, before the other MDT was asked.
    BeforeRemote,
    /// With the other MDT's part done, before the intent is finished.
    BeforeFinish,
}

impl Crash {
    fn failpoint(self) -> &'static str {
        match self {
            Crash::Locked => "dir_move.locked",
            Crash::BeforeRemote => "cross_mdt.before_remote",
            Crash::BeforeFinish => "cross_mdt.before_finish",
        }
    }
}

/// The MDS of MDT1 aborts at `crash` while moving `/p1/d` (name on MDT1) into `/q` (on
/// `dst_on`), the directory's inode on `inode_on`; it is restarted without the failpoint.
/// The move is then done exactly once (or, crashing before any intent, not at all and the
/// client's resend does it), `weft fsck` finds nothing, and the rename lock is free again:
/// a directory move coordinated by MDT0 goes through.
async fn coordinator_crash_in_a_move(crash: Crash, dst_on: u32, inode_on: u32) {
    let (mut tc, c) = cluster(2).await;
    let cred = root();
    let q = c
        .mkdir_on(Fid::ROOT, b"q", 0o755, dst_on, &cred)
        .await
        .unwrap();
    let p1 = c.mkdir_on(Fid::ROOT, b"p1", 0o755, 1, &cred).await.unwrap();
    let d = c
        .mkdir_on(p1.fid, b"d", 0o755, inode_on, &cred)
        .await
        .unwrap();
    c.write_file("/p1/d/f", b"f", &cred).await.unwrap();

    let outcome = {
        let c = c.clone();
        crash_at(&mut tc, 1, crash.failpoint(), async move {
            c.rename(p1.fid, b"d", q.fid, b"d", PLAIN, &root()).await
        })
        .await
    };
    tc.wait_ready().await.unwrap();
    if let Err(e) = &outcome {
        // A resend that met the restarted MDS before it served its MDT again is the one
        // failure tolerated; the move is done all the same (checked below).
        eprintln!("{crash:?}: the client's call failed ({e})");
        assert!(
            !matches!(e.errno(), Errno::NoEnt | Errno::Exist | Errno::Busy),
            "{crash:?}: the resend was answered {e}, as if this client had not moved it"
        );
        if c.lookup(p1.fid, b"d", &cred).await.is_ok() {
            c.rename(p1.fid, b"d", q.fid, b"d", PLAIN, &cred)
                .await
                .unwrap();
        }
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while c.lookup(p1.fid, b"d", &cred).await.is_ok() {
        assert!(
            std::time::Instant::now() < deadline,
            "{crash:?}: not rolled forward"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(c.lookup(q.fid, b"d", &cred).await.unwrap().fid, d.fid);
    assert_eq!(&c.read_file("/q/d/f", &cred).await.unwrap()[..], b"f");
    assert_eq!(c.getattr(q.fid).await.unwrap().nlink, 3);
    assert_eq!(c.getattr(p1.fid).await.unwrap().nlink, 2);
    assert_fsck_clean(&tc).await;
    // The lock is free: MDT0 moves a directory (it would wait 30 s and answer EBUSY).
    let started = std::time::Instant::now();
    c.rename(q.fid, b"d", p1.fid, b"d", PLAIN, &cred)
        .await
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{crash:?}: the rename lock was still held"
    );
    assert_fsck_clean(&tc).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_rename_lock_is_released_when_its_mds_restarts() {
    coordinator_crash_in_a_move(Crash::Locked, 0, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_to_another_mdt_rolls_forward_after_a_crash_before_the_remote_step() {
    coordinator_crash_in_a_move(Crash::BeforeRemote, 0, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_to_another_mdt_rolls_forward_after_a_crash_before_finishing() {
    coordinator_crash_in_a_move(Crash::BeforeFinish, 0, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_of_an_inode_on_the_destination_mdt_rolls_forward_after_a_crash() {
    coordinator_crash_in_a_move(Crash::BeforeFinish, 0, 0).await;
}

/// Both parents on MDT1, the inode on MDT0: the entries move at once and an intent sets
/// the directory's ".." on MDT0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_between_directories_of_one_mdt_sets_the_parent_after_a_crash() {
    coordinator_crash_in_a_move(Crash::BeforeRemote, 1, 0).await;
}

// ---------------------------------------------------------------------------------------
// weft migrate -m
// ---------------------------------------------------------------------------------------

/// Every name below `dir` with what it is (file contents, symlink targets), by path.
async fn tree(c: &Arc<Client>, dir: Fid, path: &str, out: &mut Vec<(String, String)>) {
    let cred = root();
    let mut cookie = 0;
    loop {
        let (page, eof) = c.readdir(dir, cookie, 256, false, &cred).await.unwrap();
        if let Some(last) = page.last() {
            cookie = last.cookie;
        }
        for e in &page {
            let p = format!("{path}/{}", String::from_utf8_lossy(&e.name));
            let what = match e.kind {
                FileKind::Directory => {
                    Box::pin(tree(c, e.fid, &p, out)).await;
                    "dir".to_string()
                }
                FileKind::Regular => {
                    let data = c.read_file(&p, &cred).await.unwrap();
                    format!("file {}", String::from_utf8_lossy(&data))
                }
                k => format!("{k:?}"),
            };
            out.push((p, what));
        }
        if eof || page.is_empty() {
            break;
        }
    }
    out.sort();
}

/// The inodes `weft df -i` says each MDT uses.
fn df_inodes(tc: &TestCluster) -> Vec<u64> {
    let spec = format!("{}:/{FSNAME}", tc.mgs_addr);
    let out = Command::new(bin())
        .args(["df", "-i", "--json", &spec])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["mdts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["used"].as_u64().unwrap())
        .collect()
}

/// `weft migrate -m 1 FS/proj` of a tree on MDT0 (files, a hard link, a symlink, nested
/// directories, a remote and a striped subdirectory, an extended attribute, owner, mode
/// and times) while one task keeps reading files in it and another keeps creating files
/// in a subdirectory: every directory but the striped one ends on MDT1 with the same
/// names, contents and attributes; the reader never failed; the writer's files are all
/// there (it waited while the directory was copied); `weft fsck` finds nothing; MDT0 keeps
/// no directory of the tree. A second run changes nothing; a user other than root is
/// refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weft_migrate_m_moves_a_tree_to_another_mdt_while_it_is_used() {
    let (tc, c) = cluster(2).await;
    let cred = root();
    let proj = c.mkdir(Fid::ROOT, b"proj", 0o755, &cred).await.unwrap();
    for i in 0..300 {
        c.write_file(
            &format!("/proj/f{i}"),
            format!("data {i}").as_bytes(),
            &cred,
        )
        .await
        .unwrap();
    }
    let a = c.mkdir(proj.fid, b"a", 0o755, &cred).await.unwrap();
    let b = c.mkdir(a.fid, b"b", 0o700, &cred).await.unwrap();
    c.mkdir(b.fid, b"c", 0o755, &cred).await.unwrap();
    c.write_file("/proj/a/b/c/deep", b"deep", &cred)
        .await
        .unwrap();
    c.symlink(proj.fid, b"link", b"a/b", &cred).await.unwrap();
    let f0 = c.resolve("/proj/f0", true, &cred).await.unwrap();
    c.link(f0.fid, Fid::ROOT, b"f0-elsewhere", &cred)
        .await
        .unwrap();
    c.mkdir_on(proj.fid, b"r", 0o755, 1, &cred).await.unwrap();
    c.write_file("/proj/r/x", b"x", &cred).await.unwrap();
    c.mkdir_striped(proj.fid, b"s", 0o755, 2, DirHash::Fnv1a64, &cred)
        .await
        .unwrap();
    c.write_file("/proj/s/y", b"y", &cred).await.unwrap();
    c.setxattr(proj.fid, b"user.tag", b"v1", XattrMode::Any, &cred)
        .await
        .unwrap();
    let when = weft_proto::Timestamp {
        sec: 1_700_000_000,
        nsec: 5,
    };
    c.setattr(
        proj.fid,
        SetAttr {
            mode: Some(0o750),
            uid: Some(1000),
            mtime: Some(TimeSet::At(when)),
            ..SetAttr::default()
        },
        &cred,
    )
    .await
    .unwrap();
    let mut before = Vec::new();
    tree(&c, proj.fid, "/proj", &mut before).await;
    let dirs0 = tc.mdt_counter(0, "dirs").await.unwrap();
    let used_before = df_inodes(&tc);

    // Readers and a writer while the CLI migrates.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (c, stop) = (c.clone(), stop.clone());
        tokio::spawn(async move {
            let mut reads = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let i = reads % 300;
                let data = c.read_file(&format!("/proj/f{i}"), &root()).await.unwrap();
                assert_eq!(data, format!("data {i}").as_bytes());
                reads += 1;
            }
            reads
        })
    };
    let writer = {
        let (c, stop) = (c.clone(), stop.clone());
        tokio::spawn(async move {
            let mut made = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && made < 2000 {
                c.write_file(&format!("/proj/a/new{made}"), b"n", &root())
                    .await
                    .unwrap();
                made += 1;
            }
            made
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let spec = format!("{}:/{FSNAME}/proj", tc.mgs_addr);
    let out = tokio::task::spawn_blocking(move || {
        Command::new(bin())
            .args(["migrate", "-m", "1", &spec])
            .stdin(Stdio::null())
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "weft migrate -m: {stderr}");
    assert!(
        stderr.contains("/proj/s: a striped directory, left as it is"),
        "{stderr}"
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let reads = reader.await.unwrap();
    let made = writer.await.unwrap();
    eprintln!("{reads} reads and {made} creates during the migration");
    assert!(reads > 0 && made > 0);

    // Where everything is now.
    let moved = c.resolve("/proj", true, &cred).await.unwrap();
    assert_ne!(moved.fid, proj.fid, "a new directory has the name");
    for path in ["/proj", "/proj/a", "/proj/a/b", "/proj/a/b/c", "/proj/r"] {
        let a = c.resolve(path, true, &cred).await.unwrap();
        assert_eq!(c.mdt_index_of(a.fid).unwrap(), 1, "{path}");
    }
    let s = c.resolve("/proj/s", true, &cred).await.unwrap();
    assert!(
        c.dir_stripes(s.fid).await.unwrap().is_some(),
        "/proj/s stays striped"
    );
    // Attributes and extended attributes came along.
    assert_eq!(moved.mode & 0o7777, 0o750);
    assert_eq!(moved.uid, 1000);
    assert_eq!(moved.mtime, when);
    assert_eq!(
        c.getxattr(moved.fid, b"user.tag", &cred).await.unwrap(),
        b"v1"
    );
    assert_eq!(moved.nlink, 2 + 3, "a, r and s");
    assert_eq!(
        c.resolve("/proj/a/b", true, &cred).await.unwrap().mode & 0o7777,
        0o700
    );
    // The same names and contents, plus the writer's files.
    let mut after = Vec::new();
    tree(&c, moved.fid, "/proj", &mut after).await;
    let mut want = before.clone();
    for i in 0..made {
        want.push((format!("/proj/a/new{i}"), "file n".to_string()));
    }
    want.sort();
    assert_eq!(after, want);
    assert_eq!(c.getattr(f0.fid).await.unwrap().nlink, 2, "the hard link");
    // MDT0 keeps none of the tree's directories (the striped one's master stays).
    assert_eq!(tc.mdt_counter(0, "dirs").await.unwrap(), dirs0 - 4);
    assert_fsck_clean(&tc).await;
    // `weft df -i` counts each MDT's inodes: MDT1 gained what MDT0 lost.
    let used = df_inodes(&tc);
    for (i, used) in used.iter().enumerate() {
        let i = i as u32;
        let held =
            tc.mdt_counter(i, "dirs").await.unwrap() + tc.mdt_counter(i, "files").await.unwrap();
        assert_eq!(*used, held, "MDT{i}: weft df -i");
    }
    assert!(used[1] > used_before[1] + 3, "{used_before:?} -> {used:?}");

    // Again: nothing to do. Not root: EPERM.
    let again = c.migrate_dir(Fid::ROOT, b"proj", 1, &cred).await.unwrap();
    assert_eq!(again, moved.fid);
    assert_eq!(
        errno(c.migrate_dir(moved.fid, b"a", 0, &user(1000)).await),
        Errno::Perm
    );
    // And back to MDT0 through the library.
    let back = c.migrate_dir(Fid::ROOT, b"proj", 0, &cred).await.unwrap();
    assert_eq!(c.mdt_index_of(back).unwrap(), 0);
    let mut again = Vec::new();
    tree(&c, back, "/proj", &mut again).await;
    assert_eq!(again, want);
    assert_fsck_clean(&tc).await;
}

/// The MDS coordinating a migration (MDT0: `/proj` and its name are there) aborts at
/// `point`; restarted, it finishes the migration, and the client's call (resent across
/// the restart) is answered with the new directory.
async fn migration_survives_a_coordinator_crash(point: &str) {
    let (mut tc, c) = cluster(2).await;
    let cred = root();
    let proj = c.mkdir(Fid::ROOT, b"proj", 0o755, &cred).await.unwrap();
    let sub = c.mkdir(proj.fid, b"sub", 0o755, &cred).await.unwrap();
    for i in 0..50 {
        c.write_file(&format!("/proj/f{i}"), b"f", &cred)
            .await
            .unwrap();
    }
    let dirs0 = tc.mdt_counter(0, "dirs").await.unwrap();
    let outcome = {
        let c = c.clone();
        crash_at(&mut tc, 0, point, async move {
            c.migrate_dir(Fid::ROOT, b"proj", 1, &root()).await
        })
        .await
    };
    tc.wait_ready().await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let moved = loop {
        let a = c.resolve("/proj", true, &cred).await.unwrap();
        if c.mdt_index_of(a.fid).unwrap() == 1
            && tc.mdt_counter(0, "dirs").await.unwrap() == dirs0 - 1
        {
            break a;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{point}: not rolled forward"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    match outcome {
        Ok(fid) => assert_eq!(fid, moved.fid, "{point}: the reply names the new directory"),
        Err(e) => {
            eprintln!("{point}: the client's call failed ({e})");
            assert!(
                !matches!(e.errno(), Errno::NoEnt | Errno::Busy | Errno::Exist),
                "{point}: the resend was answered {e}"
            );
        }
    }
    assert_eq!(
        c.lookup(moved.fid, b"sub", &cred).await.unwrap().fid,
        sub.fid,
        "{point}: the subdirectory keeps its inode"
    );
    for i in 0..50 {
        c.lookup(moved.fid, format!("f{i}").as_bytes(), &cred)
            .await
            .unwrap();
    }
    assert!(
        c.getattr(proj.fid).await.is_err(),
        "{point}: the old directory is gone"
    );
    assert_fsck_clean(&tc).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_rolls_forward_after_a_crash_while_copying() {
    migration_survives_a_coordinator_crash("migrate.copied").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_rolls_forward_after_a_crash_before_the_switch() {
    migration_survives_a_coordinator_crash("cross_mdt.before_finish").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_rolls_forward_after_a_crash_after_the_switch() {
    migration_survives_a_coordinator_crash("migrate.switched").await;
}
