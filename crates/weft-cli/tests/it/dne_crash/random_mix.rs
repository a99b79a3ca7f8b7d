//! A seeded random mix of namespace operations while MDS processes are killed, and what
//! the mixes found.

use super::*;

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
