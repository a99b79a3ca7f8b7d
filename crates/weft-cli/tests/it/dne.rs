//! Remote directories (Lustre DNE `mkdir -i`) against separate processes on loopback: an
//! MGS, an OSS, and one MDS process per MDT (MDT0 holds the root, MDT1 the remote
//! directories). Every namespace operation across the MDT boundary; crashes of the
//! coordinating MDS at each failpoint of a remote mkdir and rmdir, and SIGKILL of the other
//! MDS, after which every operation is rolled forward exactly once and the namespace is
//! consistent (no dangling entry, no orphan directory, right link counts); `weft mkdir -i`
//! and `weft getdirstripe`.

use crate::bin;
use crate::dne_common::{PLAIN, errno, root, user};
use crate::support::weft;
use weft_testkit::eventually;

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use weft_client::{Client, ClientError, OpenOptions};
use weft_proto::mdt::{Attr, DirEntry, FileKind, RenameFlags};
use weft_proto::{Errno, Fid};
use weft_testkit::{FSNAME, TestCluster};

/// A cluster of one MGS, one OSS with `osts` OSTs, and two MDS processes (MDT0, MDT1).
async fn two_mdts(osts: u32) -> TestCluster {
    TestCluster::start_mdts(bin(), osts, 2).await.unwrap()
}

async fn fs_client(tc: &TestCluster) -> Arc<Client> {
    tc.fs_client(Duration::from_secs(20)).await.unwrap()
}

/// Every entry of directory `fid` (all pages).
async fn list(c: &Client, fid: Fid, plus: bool) -> Vec<DirEntry> {
    let mut out = Vec::new();
    let mut cookie = 0;
    loop {
        let (page, eof) = c.readdir(fid, cookie, 64, plus, &root()).await.unwrap();
        if let Some(last) = page.last() {
            cookie = last.cookie;
        }
        let empty = page.is_empty();
        out.extend(page);
        if eof || empty {
            return out;
        }
    }
}

fn names(entries: &[DirEntry]) -> BTreeSet<String> {
    entries
        .iter()
        .map(|e| String::from_utf8_lossy(&e.name).into_owned())
        .collect()
}

/// What a walk of the whole namespace found, by MDT.
#[derive(Debug, Default)]
struct Census {
    dirs: BTreeMap<u32, u64>,
    /// Inodes that are not directories, by MDT (a file with several names counts once).
    files: BTreeMap<u32, BTreeSet<Fid>>,
}

/// Walks the namespace from the root and checks that it is consistent: every entry's FID
/// answers a getattr on its MDT with the entry's type (no dangling entry), every
/// directory's link count is 2 plus its subdirectories, and every other inode's link count
/// is the number of its names. Counts directories and other inodes by the MDT holding
/// them (the root counts for MDT0).
async fn walk(c: &Client) -> Census {
    let mut census = Census::default();
    *census.dirs.entry(0).or_default() += 1;
    let mut todo = vec![("/".to_string(), Fid::ROOT)];
    let mut file_names: BTreeMap<Fid, (String, u32)> = BTreeMap::new();
    while let Some((path, dir)) = todo.pop() {
        let mut subdirs = 0u32;
        for e in list(c, dir, false).await {
            let name = String::from_utf8_lossy(&e.name).into_owned();
            let child = if path == "/" {
                format!("/{name}")
            } else {
                format!("{path}/{name}")
            };
            let attr = c
                .getattr(e.fid)
                .await
                .unwrap_or_else(|err| panic!("dangling entry {child} ({}): {err}", e.fid));
            assert_eq!(attr.kind, e.kind, "{child}: entry and inode types differ");
            let mdt = c.mdt_index_of(e.fid).unwrap();
            if e.kind == FileKind::Directory {
                subdirs += 1;
                *census.dirs.entry(mdt).or_default() += 1;
                todo.push((child, e.fid));
            } else {
                census.files.entry(mdt).or_default().insert(e.fid);
                file_names.entry(e.fid).or_insert((child, 0)).1 += 1;
            }
        }
        let nlink = c.getattr(dir).await.unwrap().nlink;
        assert_eq!(
            nlink,
            2 + subdirs,
            "{path}: link count {nlink} with {subdirs} subdirectories"
        );
    }
    for (fid, (path, names)) in file_names {
        let nlink = c.getattr(fid).await.unwrap().nlink;
        assert_eq!(
            nlink, names,
            "{path}: link count {nlink} with {names} names"
        );
    }
    census
}

/// Checks the namespace (see [`walk`]) and that each MDT holds exactly the directories and
/// files reachable in it (its `dirs` and `files` counters): nothing orphaned, nothing
/// created twice.
async fn check_consistent(tc: &TestCluster, c: &Client) -> Census {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let census = walk(c).await;
        let mut mismatch = Vec::new();
        for i in tc.mdt_indices() {
            let dirs = tc.mdt_counter(i, "dirs").await.unwrap();
            let files = tc.mdt_counter(i, "files").await.unwrap();
            let want_dirs = census.dirs.get(&i).copied().unwrap_or(0);
            let want_files = census.files.get(&i).map_or(0, |f| f.len() as u64);
            if dirs != want_dirs || files != want_files {
                mismatch.push(format!(
                    "MDT{i} holds {dirs} directories and {files} files, the namespace reaches \
                     {want_dirs} and {want_files}"
                ));
            }
        }
        if mismatch.is_empty() {
            return census;
        }
        // Counters are published after each commit: give a late one a moment.
        assert!(Instant::now() < deadline, "{}", mismatch.join("; "));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

// ---------------------------------------------------------------------------------------
// Every namespace operation across the MDT boundary
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_directory_namespace_operations_across_two_mds_processes() {
    let tc = two_mdts(2).await;
    let c = fs_client(&tc).await;
    let cred = root();
    let root_nlink = c.getattr(Fid::ROOT).await.unwrap().nlink;

    // mkdir_on: the inode is on MDT1, the name in the root (MDT0).
    let r = c.mkdir_on(Fid::ROOT, b"r", 0o750, 1, &cred).await.unwrap();
    assert_eq!(r.kind, FileKind::Directory);
    assert_eq!(r.mode & 0o7777, 0o750);
    assert_eq!(r.nlink, 2);
    assert_eq!(c.mdt_index_of(r.fid).unwrap(), 1);
    assert_eq!(
        c.getattr(Fid::ROOT).await.unwrap().nlink,
        root_nlink + 1,
        "the root's link count counts the remote directory"
    );

    // lookup / getattr / readdir (plus and plain) of the remote entry.
    let looked = c.lookup(Fid::ROOT, b"r", &cred).await.unwrap();
    assert_eq!(looked.fid, r.fid);
    assert_eq!(looked.kind, FileKind::Directory);
    assert_eq!(looked.mode & 0o7777, 0o750);
    assert_eq!(c.getattr(r.fid).await.unwrap().fid, r.fid);
    assert_eq!(c.resolve("/r", true, &cred).await.unwrap().fid, r.fid);
    let plus = list(&c, Fid::ROOT, true).await;
    let e = plus.iter().find(|e| e.name == b"r").expect("r listed");
    assert_eq!(e.fid, r.fid);
    assert_eq!(e.kind, FileKind::Directory);
    let a = e
        .attr
        .as_ref()
        .expect("readdirplus fills a remote entry's attributes");
    assert_eq!(
        (a.fid, a.kind, a.mode & 0o7777),
        (r.fid, FileKind::Directory, 0o750)
    );
    let plain = list(&c, Fid::ROOT, false).await;
    assert!(plain.iter().any(|e| e.name == b"r" && e.fid == r.fid));

    // Files and subdirectories made inside live on MDT1 and read back.
    let sub = c.mkdir(r.fid, b"sub", 0o755, &cred).await.unwrap();
    assert_eq!(c.mdt_index_of(sub.fid).unwrap(), 1);
    assert_eq!(c.getattr(r.fid).await.unwrap().nlink, 3);
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
    c.write_file("/r/f", &data, &cred).await.unwrap();
    c.write_file("/r/sub/g", b"inner", &cred).await.unwrap();
    assert_eq!(&c.read_file("/r/f", &cred).await.unwrap()[..], &data[..]);
    assert_eq!(&c.read_file("/r/sub/g", &cred).await.unwrap()[..], b"inner");
    let f = c.lookup(r.fid, b"f", &cred).await.unwrap();
    assert_eq!(c.mdt_index_of(f.fid).unwrap(), 1);
    assert_eq!(f.size, data.len() as u64);
    let g = c.resolve("/r/sub/g", true, &cred).await.unwrap();
    assert_eq!(c.mdt_index_of(g.fid).unwrap(), 1);
    let sl = c.symlink(r.fid, b"sl", b"sub/g", &cred).await.unwrap();
    assert_eq!(c.mdt_index_of(sl.fid).unwrap(), 1);
    assert_eq!(c.readlink(sl.fid).await.unwrap(), b"sub/g");
    assert_eq!(c.resolve("/r/sl", true, &cred).await.unwrap().fid, g.fid);
    let inside = list(&c, r.fid, true).await;
    assert_eq!(names(&inside), ["f", "sl", "sub"].map(String::from).into());
    assert!(inside.iter().all(|e| e.attr.is_some()));
    // Renames and links inside the remote directory are local to MDT1.
    c.rename(r.fid, b"f", sub.fid, b"f2", PLAIN, &cred)
        .await
        .unwrap();
    c.link(f.fid, r.fid, b"hard", &cred).await.unwrap();
    assert_eq!(c.getattr(f.fid).await.unwrap().nlink, 2);
    c.unlink(r.fid, b"hard", &cred).await.unwrap();
    c.rename(sub.fid, b"f2", r.fid, b"f", PLAIN, &cred)
        .await
        .unwrap();
    assert_eq!(&c.read_file("/r/f", &cred).await.unwrap()[..], &data[..]);

    // Local things in the root, for the cross-MDT cases.
    let l = c.mkdir(Fid::ROOT, b"l", 0o755, &cred).await.unwrap();
    c.write_file("/lf", b"local", &cred).await.unwrap();
    let lf = c.lookup(Fid::ROOT, b"lf", &cred).await.unwrap();
    assert_eq!(c.mdt_index_of(lf.fid).unwrap(), 0);

    // Rename of the remote directory within its directory.
    c.rename(Fid::ROOT, b"r", Fid::ROOT, b"r2", PLAIN, &cred)
        .await
        .unwrap();
    assert_eq!(errno(c.lookup(Fid::ROOT, b"r", &cred).await), Errno::NoEnt);
    assert_eq!(c.lookup(Fid::ROOT, b"r2", &cred).await.unwrap().fid, r.fid);
    assert_eq!(
        &c.read_file("/r2/sub/g", &cred).await.unwrap()[..],
        b"inner"
    );
    assert_eq!(c.getattr(Fid::ROOT).await.unwrap().nlink, root_nlink + 2);
    let noreplace = RenameFlags {
        noreplace: true,
        exchange: false,
    };
    assert_eq!(
        errno(
            c.rename(Fid::ROOT, b"r2", Fid::ROOT, b"l", noreplace, &cred)
                .await
        ),
        Errno::Exist
    );
    c.rename(Fid::ROOT, b"r2", Fid::ROOT, b"r", noreplace, &cred)
        .await
        .unwrap();
    assert_eq!(c.lookup(Fid::ROOT, b"r", &cred).await.unwrap().fid, r.fid);

    // Directories move across MDTs (under the rename lock): each there and back.
    let moves: [(&str, Fid, &[u8], Fid); 3] = [
        ("a directory of MDT0 into MDT1's", Fid::ROOT, b"l", r.fid),
        ("a directory of MDT1 to the root", r.fid, b"sub", Fid::ROOT),
        (
            "the remote directory's entry into another directory of MDT0",
            Fid::ROOT,
            b"r",
            l.fid,
        ),
    ];
    for (what, from, name, to) in moves {
        let fid = c.lookup(from, name, &cred).await.unwrap().fid;
        c.rename(from, name, to, name, PLAIN, &cred)
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(c.lookup(to, name, &cred).await.unwrap().fid, fid, "{what}");
        assert_eq!(errno(c.lookup(from, name, &cred).await), Errno::NoEnt);
        check_consistent(&tc, &c).await;
        c.rename(to, name, from, name, PLAIN, &cred).await.unwrap();
    }
    // RENAME_EXCHANGE of names on two MDTs is not supported: EXDEV, nothing changed.
    let exchange = RenameFlags {
        noreplace: false,
        exchange: true,
    };
    assert_eq!(
        errno(
            c.rename(Fid::ROOT, b"r", Fid::ROOT, b"l", exchange, &cred)
                .await
        ),
        Errno::XDev
    );
    assert_eq!(c.lookup(Fid::ROOT, b"l", &cred).await.unwrap().fid, l.fid);
    assert_eq!(c.lookup(r.fid, b"sub", &cred).await.unwrap().fid, sub.fid);
    assert_eq!(c.lookup(Fid::ROOT, b"r", &cred).await.unwrap().fid, r.fid);
    assert_eq!(errno(c.lookup(l.fid, b"r", &cred).await), Errno::NoEnt);
    assert_eq!(c.getattr(Fid::ROOT).await.unwrap().nlink, root_nlink + 2);
    assert_eq!(c.getattr(r.fid).await.unwrap().nlink, 3);
    // Files (DNE step 3) do: the name moves, the inode stays on its MDT; hard links too.
    c.rename(r.fid, b"f", Fid::ROOT, b"f", PLAIN, &cred)
        .await
        .unwrap();
    assert_eq!(c.lookup(Fid::ROOT, b"f", &cred).await.unwrap().fid, f.fid);
    assert_eq!(c.mdt_index_of(f.fid).unwrap(), 1);
    assert_eq!(&c.read_file("/f", &cred).await.unwrap()[..], &data[..]);
    c.rename(Fid::ROOT, b"f", r.fid, b"f", PLAIN, &cred)
        .await
        .unwrap();
    c.link(f.fid, Fid::ROOT, b"hard", &cred).await.unwrap();
    assert_eq!(c.getattr(f.fid).await.unwrap().nlink, 2);
    c.unlink(Fid::ROOT, b"hard", &cred).await.unwrap();
    c.link(lf.fid, r.fid, b"hard", &cred).await.unwrap();
    c.unlink(r.fid, b"hard", &cred).await.unwrap();
    assert_eq!(c.lookup(r.fid, b"f", &cred).await.unwrap().fid, f.fid);
    assert_eq!(c.lookup(Fid::ROOT, b"lf", &cred).await.unwrap().fid, lf.fid);
    assert_eq!(c.getattr(f.fid).await.unwrap().nlink, 1);
    assert_eq!(c.getattr(lf.fid).await.unwrap().nlink, 1);

    // unlink of the remote name: EISDIR.
    assert_eq!(errno(c.unlink(Fid::ROOT, b"r", &cred).await), Errno::IsDir);

    // rmdir of the non-empty remote directory: ENOTEMPTY, nothing changed, no intent left.
    assert_eq!(
        errno(c.rmdir(Fid::ROOT, b"r", &cred).await),
        Errno::NotEmpty
    );
    assert_eq!(c.lookup(Fid::ROOT, b"r", &cred).await.unwrap().fid, r.fid);
    assert_eq!(c.getattr(Fid::ROOT).await.unwrap().nlink, root_nlink + 2);
    assert_eq!(c.getattr(r.fid).await.unwrap().nlink, 3);
    assert_eq!(&c.read_file("/r/f", &cred).await.unwrap()[..], &data[..]);
    c.rename(Fid::ROOT, b"r", Fid::ROOT, b"r3", PLAIN, &cred)
        .await
        .expect("no intent is left on the name after a refused rmdir");
    c.rename(Fid::ROOT, b"r3", Fid::ROOT, b"r", PLAIN, &cred)
        .await
        .unwrap();

    // Unknown MDT: EINVAL, nothing made. Existing names: EEXIST.
    assert_eq!(
        errno(c.mkdir_on(Fid::ROOT, b"nowhere", 0o755, 7, &cred).await),
        Errno::Inval
    );
    assert_eq!(
        errno(c.lookup(Fid::ROOT, b"nowhere", &cred).await),
        Errno::NoEnt
    );
    for existing in [&b"r"[..], b"l", b"lf"] {
        assert_eq!(
            errno(c.mkdir_on(Fid::ROOT, existing, 0o755, 1, &cred).await),
            Errno::Exist,
            "mkdir_on over {}",
            String::from_utf8_lossy(existing)
        );
    }
    assert_eq!(
        errno(c.mkdir(Fid::ROOT, b"r", 0o755, &cred).await),
        Errno::Exist
    );
    assert_eq!(
        errno(c.mknod(Fid::ROOT, b"r", 0o010644, 0, &cred).await),
        Errno::Exist
    );
    assert_eq!(
        errno(c.symlink(Fid::ROOT, b"r", b"x", &cred).await),
        Errno::Exist
    );
    assert_eq!(
        errno(c.mkdir_on(r.fid, b"sub", 0o755, 0, &cred).await),
        Errno::Exist
    );
    // mkdir_on the parent's own MDT is a plain mkdir.
    let zero = c
        .mkdir_on(Fid::ROOT, b"zero", 0o755, 0, &cred)
        .await
        .unwrap();
    assert_eq!(c.mdt_index_of(zero.fid).unwrap(), 0);
    let one = c.mkdir_on(r.fid, b"one", 0o755, 1, &cred).await.unwrap();
    assert_eq!(c.mdt_index_of(one.fid).unwrap(), 1);
    c.rmdir(r.fid, b"one", &cred).await.unwrap();

    check_consistent(&tc, &c).await;

    // Empty it, then rmdir removes it on both MDTs.
    c.unlink(r.fid, b"f", &cred).await.unwrap();
    c.unlink(r.fid, b"sl", &cred).await.unwrap();
    c.unlink(sub.fid, b"g", &cred).await.unwrap();
    c.rmdir(r.fid, b"sub", &cred).await.unwrap();
    let dirs1 = tc.mdt_counter(1, "dirs").await.unwrap();
    c.rmdir(Fid::ROOT, b"r", &cred).await.unwrap();
    assert_eq!(errno(c.lookup(Fid::ROOT, b"r", &cred).await), Errno::NoEnt);
    let gone = errno(c.getattr(r.fid).await);
    assert!(
        matches!(gone, Errno::NoEnt | Errno::Stale),
        "getattr of the removed directory on MDT1: {gone:?}"
    );
    assert_eq!(c.getattr(Fid::ROOT).await.unwrap().nlink, root_nlink + 2);
    assert!(!names(&list(&c, Fid::ROOT, true).await).contains("r"));
    assert_eq!(tc.mdt_counter(1, "dirs").await.unwrap(), dirs1 - 1);
    assert_eq!(errno(c.rmdir(Fid::ROOT, b"r", &cred).await), Errno::NoEnt);
    // The name is free again, for a remote directory as for anything else.
    let again = c.mkdir_on(Fid::ROOT, b"r", 0o755, 1, &cred).await.unwrap();
    assert_ne!(again.fid, r.fid);
    check_consistent(&tc, &c).await;
}

/// A remote directory whose parent is itself remote: MDT1 coordinates a directory on MDT0.
/// Directory renames whose destination's ancestors leave the MDT walk them across MDTs
/// (a directory never moves below itself).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_remote_directories_and_renames_whose_ancestors_leave_the_mdt() {
    let tc = two_mdts(1).await;
    let c = fs_client(&tc).await;
    let cred = root();
    let r = c.mkdir_on(Fid::ROOT, b"r", 0o755, 1, &cred).await.unwrap();
    // Back to MDT0, coordinated by MDT1.
    let back = c.mkdir_on(r.fid, b"back", 0o755, 0, &cred).await.unwrap();
    assert_eq!(c.mdt_index_of(back.fid).unwrap(), 0);
    assert_eq!(c.getattr(r.fid).await.unwrap().nlink, 3);
    assert_eq!(c.lookup(r.fid, b"back", &cred).await.unwrap().fid, back.fid);
    c.write_file("/r/back/deep", b"deep", &cred).await.unwrap();
    let deep = c.resolve("/r/back/deep", true, &cred).await.unwrap();
    assert_eq!(c.mdt_index_of(deep.fid).unwrap(), 0);
    let plus = list(&c, r.fid, true).await;
    assert!(
        plus.iter()
            .any(|e| e.name == b"back" && e.attr.as_ref().is_some_and(|a| a.fid == back.fid))
    );

    // /x (MDT0) into /r/back (MDT0): same MDT, but the destination's ancestors pass
    // through MDT1: the ancestor check walks them there. A file moves too.
    let x = c.mkdir(Fid::ROOT, b"x", 0o755, &cred).await.unwrap();
    c.write_file("/xf", b"xf", &cred).await.unwrap();
    c.rename(Fid::ROOT, b"x", back.fid, b"x", PLAIN, &cred)
        .await
        .unwrap();
    assert_eq!(c.lookup(back.fid, b"x", &cred).await.unwrap().fid, x.fid);
    c.rename(Fid::ROOT, b"xf", back.fid, b"xf", PLAIN, &cred)
        .await
        .unwrap();
    assert_eq!(&c.read_file("/r/back/xf", &cred).await.unwrap()[..], b"xf");
    // /r (MDT1) below itself through /r/back (MDT0): EINVAL, found across both MDTs.
    assert_eq!(
        errno(c.rename(Fid::ROOT, b"r", x.fid, b"r", PLAIN, &cred).await),
        Errno::Inval
    );
    c.rmdir(back.fid, b"x", &cred).await.unwrap();
    // Inside the remote directory (all on MDT1), whose ancestors lead to MDT0.
    c.mkdir(r.fid, b"a", 0o755, &cred).await.unwrap();
    let b = c.mkdir(r.fid, b"b", 0o755, &cred).await.unwrap();
    c.rename(r.fid, b"a", b.fid, b"a", PLAIN, &cred)
        .await
        .unwrap();
    c.rename(b.fid, b"a", r.fid, b"a2", PLAIN, &cred)
        .await
        .unwrap();
    check_consistent(&tc, &c).await;

    // rmdir of the nested remote directory (MDT1 asks MDT0): ENOTEMPTY, then removed.
    assert_eq!(errno(c.rmdir(r.fid, b"back", &cred).await), Errno::NotEmpty);
    c.unlink(back.fid, b"deep", &cred).await.unwrap();
    c.unlink(back.fid, b"xf", &cred).await.unwrap();
    c.rmdir(r.fid, b"back", &cred).await.unwrap();
    assert_eq!(errno(c.lookup(r.fid, b"back", &cred).await), Errno::NoEnt);
    assert_eq!(c.getattr(r.fid).await.unwrap().nlink, 4, "a2 and b remain");
    check_consistent(&tc, &c).await;
}

/// rename(2) of a directory over an existing empty directory replaces it, or, where the
/// MDTs cannot do that, answers EXDEV (tools then copy). EISDIR means "a non-directory over
/// a directory": `mv -T` gives up with a wrong message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_directory_renamed_over_an_empty_directory_is_not_eisdir() {
    let tc = two_mdts(1).await;
    let c = fs_client(&tc).await;
    let cred = root();
    // The control: a local directory over a local empty one is replaced.
    c.mkdir(Fid::ROOT, b"a", 0o755, &cred).await.unwrap();
    c.mkdir(Fid::ROOT, b"b", 0o755, &cred).await.unwrap();
    c.rename(Fid::ROOT, b"a", Fid::ROOT, b"b", PLAIN, &cred)
        .await
        .unwrap();
    c.mkdir_on(Fid::ROOT, b"r0", 0o755, 1, &cred).await.unwrap();
    let r = c.mkdir_on(Fid::ROOT, b"r", 0o755, 1, &cred).await.unwrap();
    let l = c.mkdir(Fid::ROOT, b"l", 0o755, &cred).await.unwrap();
    let remote_over_local = c
        .rename(Fid::ROOT, b"r", Fid::ROOT, b"l", PLAIN, &cred)
        .await;
    c.mkdir(Fid::ROOT, b"l2", 0o755, &cred).await.unwrap();
    let local_over_remote = c
        .rename(Fid::ROOT, b"l2", Fid::ROOT, b"r0", PLAIN, &cred)
        .await;
    for (what, res) in [
        (
            "the remote directory /r over the empty local /l",
            &remote_over_local,
        ),
        (
            "the local directory /l2 over the empty remote /r0",
            &local_over_remote,
        ),
    ] {
        assert!(
            matches!(
                res.as_ref().map_err(ClientError::errno),
                Ok(()) | Err(Errno::XDev)
            ),
            "rename of {what}: {res:?}"
        );
    }
    if remote_over_local.is_ok() {
        assert_eq!(c.lookup(Fid::ROOT, b"l", &cred).await.unwrap().fid, r.fid);
        assert!(c.getattr(l.fid).await.is_err());
    }
    check_consistent(&tc, &c).await;
}

/// Permission checks of remote mkdir and rmdir as an unprivileged user are those of a local
/// mkdir and rmdir: write and search permission on the parent (EACCES), the sticky bit
/// (EPERM), and the new directory belongs to its creator.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_mkdir_and_rmdir_check_permissions_like_local_ones() {
    let tc = two_mdts(1).await;
    let c = fs_client(&tc).await;
    let cred = root();
    let (alice, bob) = (user(1000), user(2000));

    // A root-owned 0755 directory refuses others, locally as remotely.
    let closed = c.mkdir(Fid::ROOT, b"closed", 0o755, &cred).await.unwrap();
    assert_eq!(
        errno(c.mkdir(closed.fid, b"a", 0o755, &alice).await),
        Errno::Access
    );
    assert_eq!(
        errno(c.mkdir_on(closed.fid, b"a", 0o755, 1, &alice).await),
        Errno::Access
    );
    c.mkdir_on(closed.fid, b"rootdir", 0o777, 1, &cred)
        .await
        .unwrap();
    assert_eq!(
        errno(c.rmdir(closed.fid, b"rootdir", &alice).await),
        Errno::Access
    );
    assert!(c.lookup(closed.fid, b"rootdir", &cred).await.is_ok());
    // Search permission on the parent too.
    let nox = c.mkdir(Fid::ROOT, b"nox", 0o776, &cred).await.unwrap();
    assert_eq!(
        errno(c.mkdir_on(nox.fid, b"a", 0o755, 1, &alice).await),
        Errno::Access
    );

    // A sticky world-writable directory (/tmp-like).
    let t = c.mkdir(Fid::ROOT, b"t", 0o1777, &cred).await.unwrap();
    let mine = c.mkdir_on(t.fid, b"mine", 0o755, 1, &alice).await.unwrap();
    assert_eq!((mine.uid, mine.gid), (1000, 1000), "owned by its creator");
    assert_eq!(c.mdt_index_of(mine.fid).unwrap(), 1);
    c.mkdir(t.fid, b"local", 0o755, &alice).await.unwrap();
    // Bob may remove neither (local: EPERM; remote: the same).
    assert_eq!(errno(c.rmdir(t.fid, b"local", &bob).await), Errno::Perm);
    assert_eq!(errno(c.rmdir(t.fid, b"mine", &bob).await), Errno::Perm);
    assert_eq!(c.lookup(t.fid, b"mine", &cred).await.unwrap().fid, mine.fid);
    // Alice cannot write in the remote directory of root's, nor bob in alice's.
    assert_eq!(
        errno(c.mkdir(mine.fid, b"x", 0o755, &bob).await),
        Errno::Access
    );
    c.mkdir(mine.fid, b"x", 0o755, &alice).await.unwrap();
    // ENOTEMPTY for its owner, then removed.
    assert_eq!(
        errno(c.rmdir(t.fid, b"mine", &alice).await),
        Errno::NotEmpty
    );
    c.rmdir(mine.fid, b"x", &alice).await.unwrap();
    c.rmdir(t.fid, b"mine", &alice).await.unwrap();
    // The owner of the sticky directory may remove others' entries.
    c.mkdir_on(t.fid, b"bobs", 0o755, 1, &bob).await.unwrap();
    c.rmdir(t.fid, b"bobs", &cred).await.unwrap();
    assert_eq!(errno(c.lookup(t.fid, b"bobs", &cred).await), Errno::NoEnt);
    check_consistent(&tc, &c).await;
}

/// In a sticky directory, renaming an entry follows the sticky rule: its owner (or the
/// directory's) may rename it, others get EPERM. For a remote directory the MDT holding the
/// name asks the directory's MDT for its owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sticky_directory_rename_of_a_remote_directory_follows_the_sticky_rule() {
    let tc = two_mdts(1).await;
    let c = fs_client(&tc).await;
    let cred = root();
    let (alice, bob) = (user(1000), user(2000));
    let t = c.mkdir(Fid::ROOT, b"t", 0o1777, &cred).await.unwrap();
    c.mkdir(t.fid, b"local", 0o755, &alice).await.unwrap();
    let remote = c
        .mkdir_on(t.fid, b"remote", 0o755, 1, &alice)
        .await
        .unwrap();

    // The local directory: bob is refused with EPERM, alice renames her own.
    assert_eq!(
        errno(
            c.rename(t.fid, b"local", t.fid, b"local2", PLAIN, &bob)
                .await
        ),
        Errno::Perm
    );
    c.rename(t.fid, b"local", t.fid, b"local2", PLAIN, &alice)
        .await
        .unwrap();

    // The remote directory: its owner is asked on its MDT; bob is refused, nothing moved.
    assert_eq!(
        errno(
            c.rename(t.fid, b"remote", t.fid, b"remote2", PLAIN, &bob)
                .await
        ),
        Errno::Perm
    );
    assert_eq!(
        c.lookup(t.fid, b"remote", &cred).await.unwrap().fid,
        remote.fid
    );
    assert_eq!(
        errno(c.lookup(t.fid, b"remote2", &cred).await),
        Errno::NoEnt
    );
    // Alice renames her own, and root may.
    c.rename(t.fid, b"remote", t.fid, b"remote2", PLAIN, &alice)
        .await
        .unwrap();
    c.rename(t.fid, b"remote2", t.fid, b"remote3", PLAIN, &cred)
        .await
        .unwrap();
    check_consistent(&tc, &c).await;
}

// ---------------------------------------------------------------------------------------
// Pending intents
// ---------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------
// Crashes of the coordinator at each failpoint
// ---------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------
// The command line
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weft_mkdir_i_and_getdirstripe_on_spec_paths() {
    let tc = two_mdts(1).await;
    let spec = |p: &str| format!("{}:/{FSNAME}{p}", tc.mgs_addr);
    let (ok, _, err) = weft(&["mkdir", "-i", "1", &spec("/dir")]);
    assert!(ok, "weft mkdir -i 1: {err}");
    let (ok, out, err) = weft(&["getdirstripe", &spec("/dir")]);
    assert!(ok, "{err}");
    assert!(out.contains("lmv_stripe_offset: 1"), "{out}");
    assert!(out.contains("lmv_stripe_count: 0"), "{out}");
    let (ok, out, _) = weft(&["getdirstripe", "-i", &spec("/dir")]);
    assert!(ok);
    assert_eq!(out.trim(), "1");

    // Several paths, a mode, and directories that inherit their parent's MDT.
    let (ok, _, err) = weft(&["mkdir", "-m", "700", &spec("/plain"), &spec("/dir/inner")]);
    assert!(ok, "{err}");
    let (ok, _, err) = weft(&["mkdir", "--mdt-index", "0", &spec("/dir/back")]);
    assert!(ok, "{err}");
    let (ok, out, err) = weft(&[
        "getdirstripe",
        "--json",
        &spec("/"),
        &spec("/plain"),
        &spec("/dir/inner"),
        &spec("/dir/back"),
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let got: Vec<u64> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["mdt_index"].as_u64().unwrap())
        .collect();
    assert_eq!(got, [0, 0, 1, 0], "{out}");

    let c = fs_client(&tc).await;
    let dir = c.resolve("/dir", true, &root()).await.unwrap();
    assert_eq!(c.mdt_index_of(dir.fid).unwrap(), 1);
    let plain = c.resolve("/plain", true, &root()).await.unwrap();
    assert_eq!(plain.mode & 0o7777, 0o700);

    // Failures are reported.
    let (ok, _, err) = weft(&["mkdir", "-i", "9", &spec("/nowhere")]);
    assert!(!ok);
    assert!(err.contains("nowhere"), "{err}");
    let (ok, _, err) = weft(&["mkdir", "-i", "1", &spec("/dir")]);
    assert!(!ok, "an existing name");
    assert!(err.contains("dir"), "{err}");
    c.write_file("/dir/file", b"x", &root()).await.unwrap();
    let (ok, _, err) = weft(&["getdirstripe", &spec("/dir/file")]);
    assert!(!ok);
    assert!(err.contains("not a directory"), "{err}");
    check_consistent(&tc, &c).await;
}

/// `weft find` (like `lfs find`) walks remote directories as any other: their entries are
/// listed, searched and matched by `--mdt`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weft_find_descends_into_remote_directories() {
    let tc = two_mdts(1).await;
    let c = fs_client(&tc).await;
    let cred = root();
    let dir = c
        .mkdir_on(Fid::ROOT, b"dir", 0o755, 1, &cred)
        .await
        .unwrap();
    c.mkdir(dir.fid, b"sub", 0o755, &cred).await.unwrap();
    c.write_file("/dir/file", b"x", &cred).await.unwrap();
    c.write_file("/dir/sub/g", b"y", &cred).await.unwrap();
    c.write_file("/top", b"z", &cred).await.unwrap();
    let spec = format!("{}:/{FSNAME}", tc.mgs_addr);
    let found = |args: &[&str]| -> BTreeSet<String> {
        let mut all = vec!["find", spec.as_str()];
        all.extend_from_slice(args);
        let (ok, out, err) = weft(&all);
        assert!(ok, "weft {all:?}: {err}");
        out.lines()
            .map(|l| {
                l.strip_prefix(spec.as_str())
                    .unwrap_or(l)
                    .trim_start_matches('/')
                    .to_string()
            })
            .filter(|l| !l.is_empty())
            .collect()
    };
    // `getstripe -r` walks into the remote directory (a control for the scans below).
    let (ok, out, err) = weft(&["getstripe", "-r", &spec]);
    assert!(ok, "{err}");
    assert!(out.contains("dir/sub/g"), "{out}");

    let everything = found(&[]);
    assert_eq!(
        everything,
        ["dir", "dir/file", "dir/sub", "dir/sub/g", "top"]
            .map(String::from)
            .into(),
        "weft find of the whole file system"
    );
    assert_eq!(
        found(&["--mdt", "1"]),
        ["dir", "dir/file", "dir/sub", "dir/sub/g"]
            .map(String::from)
            .into(),
        "weft find --mdt 1"
    );
    assert_eq!(
        found(&["-type", "f"]),
        ["dir/file", "dir/sub/g", "top"].map(String::from).into(),
        "weft find -type f"
    );
}

/// `weft up --mdts 2`: both MDTs in one process still talk through the protocol; a remote
/// directory is made, used and removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weft_up_with_two_mdts_serves_remote_directories() {
    let dir = tempfile::tempdir().unwrap();
    let addr = format!("127.0.0.1:{}", weft_testkit::free_port().unwrap());
    let args = [
        "up",
        "--data",
        &dir.path().join("data").display().to_string(),
        "--listen",
        &addr,
        "--no-mount",
        "--mdts",
        "2",
        "--osts",
        "1",
    ]
    .map(String::from)
    .to_vec();
    let _up =
        weft_testkit::ServerProcess::start("up", bin(), args, dir.path().join("up.log")).unwrap();
    let spec = |p: &str| format!("{addr}:/weft{p}");
    // Wait until both MDTs serve: `weft mkdir -i 1` succeeds.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (ok, _, err) = weft(&["mkdir", "-i", "1", &spec("/remote")]);
        if ok {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "weft up never served MDT1: {err}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (ok, out, err) = weft(&["getdirstripe", &spec("/remote")]);
    assert!(ok, "{err}");
    assert!(out.contains("lmv_stripe_offset: 1"), "{out}");
    let c = Client::mount(&addr, "weft", Default::default())
        .await
        .unwrap();
    let cred = root();
    c.write_file("/remote/f", b"one process", &cred)
        .await
        .unwrap();
    assert_eq!(
        &c.read_file("/remote/f", &cred).await.unwrap()[..],
        b"one process"
    );
    let r = c.resolve("/remote", true, &cred).await.unwrap();
    assert_eq!(c.mdt_index_of(r.fid).unwrap(), 1);
    c.unlink(r.fid, b"f", &cred).await.unwrap();
    c.rmdir(Fid::ROOT, b"remote", &cred).await.unwrap();
    assert_eq!(
        errno(c.lookup(Fid::ROOT, b"remote", &cred).await),
        Errno::NoEnt
    );
}

/// `weft fsck` exit status and output.
fn fsck(tc: &TestCluster, dry_run: bool) -> (Option<i32>, String) {
    let spec = format!("{}:/{FSNAME}", tc.mgs_addr);
    let mut args = vec!["fsck"];
    if dry_run {
        args.push("--dry-run");
    }
    args.push(&spec);
    let out = Command::new(bin())
        .args(&args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// `weft fsck` finds nothing wrong in a namespace spread over two MDTs (a striped and a
/// remote directory, files renamed and hard-linked across MDTs), finds a wrong link count
/// and an orphan inode (made with its own repair requests), repairs both, and then finds
/// nothing again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fsck_finds_nothing_in_a_sound_namespace_and_repairs_what_it_finds() {
    let tc = two_mdts(2).await;
    let c = fs_client(&tc).await;
    let cred = root();
    let s = c
        .mkdir_striped(
            Fid::ROOT,
            b"s",
            0o755,
            2,
            weft_proto::mdt::DirHash::Fnv1a64,
            &cred,
        )
        .await
        .unwrap();
    let r = c.mkdir_on(Fid::ROOT, b"r", 0o755, 1, &cred).await.unwrap();
    for i in 0..20 {
        c.write_file(&format!("/s/f{i}"), b"data", &cred)
            .await
            .unwrap();
    }
    for i in 0..10 {
        let (from, to) = (format!("f{i}"), format!("g{i}"));
        c.rename(s.fid, from.as_bytes(), r.fid, to.as_bytes(), PLAIN, &cred)
            .await
            .unwrap();
    }
    let f10 = c.lookup(s.fid, b"f10", &cred).await.unwrap();
    c.link(f10.fid, r.fid, b"l10", &cred).await.unwrap();
    let (code, out) = fsck(&tc, true);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("0 problems"), "{out}");

    // A wrong link count, and a file whose only name is gone.
    let g0 = c.lookup(r.fid, b"g0", &cred).await.unwrap();
    let g1 = c.lookup(r.fid, b"g1", &cred).await.unwrap();
    let repair = |fid: Fid, repair: weft_proto::mdt::FsckRepair| {
        let c = c.clone();
        async move {
            c.cluster()
                .mdt_of(fid)
                .unwrap()
                .call(weft_proto::mdt::MdtRequest::FsckRepair { repair })
                .await
                .unwrap()
        }
    };
    repair(
        g0.fid,
        weft_proto::mdt::FsckRepair::SetNlink {
            fid: g0.fid,
            expected: 1,
            nlink: 5,
        },
    )
    .await;
    repair(
        r.fid,
        weft_proto::mdt::FsckRepair::RemoveEntry {
            parent: r.fid,
            name: b"g1".to_vec(),
            fid: g1.fid,
        },
    )
    .await;
    let (code, out) = fsck(&tc, true);
    assert_eq!(code, Some(4), "{out}");
    assert!(out.contains("link count 5"), "{out}");
    assert!(out.contains(&format!("orphan Regular {}", g1.fid)), "{out}");
    assert!(out.contains("2 problems"), "{out}");
    let (code, out) = fsck(&tc, false);
    assert_eq!(code, Some(1), "{out}");
    assert_eq!(c.getattr(g0.fid).await.unwrap().nlink, 1);
    assert!(c.getattr(g1.fid).await.is_err());
    // (The census of the other tests does not know striped directories' shards: fsck is
    // the check here.)
    let (code, out) = fsck(&tc, true);
    assert_eq!(code, Some(0), "{out}");
}
