//! Directories moved between directories of any MDTs: what a local rename allows and
//! refuses, permissions, and opposite moves racing from two MDTs.

use super::*;

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
