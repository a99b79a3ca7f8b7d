//! `weft migrate -m`: a tree moves to another MDT while it is used, and a migration rolls
//! forward after a crash at each of its failpoints.

use super::*;

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
