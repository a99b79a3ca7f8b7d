//! Remote directories through a real FUSE mount of a file system with two MDTs (each in an
//! MDS process of its own): `weft mkdir -i 1` in the mount, then plain POSIX calls and
//! tools inside and around the remote directory.

use crate::bin;
use crate::fuse_common::{FuseMount, errno};
use crate::support::weft;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;
use weft_testkit::TestCluster;
use weft_testkit::wait_until;

fn p(path: &Path) -> String {
    path.display().to_string()
}

/// The MDT `weft getdirstripe -i` reports for a directory.
fn mdt_of(path: &Path) -> u32 {
    let (ok, out, err) = weft(&["getdirstripe", "-i", &p(path)]);
    assert!(ok, "getdirstripe {}: {err}", path.display());
    out.trim().parse().unwrap()
}

/// Runs a command and asserts it succeeded; returns its standard output.
fn sh(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The size `ls -l` shows for `name` in its listing of a directory.
fn ls_size(listing: &str, name: &str) -> Option<u64> {
    listing.lines().find_map(|l| {
        let cols: Vec<&str> = l.split_whitespace().collect();
        (cols.len() >= 9 && cols[8..].join(" ") == name).then(|| cols[4].parse().unwrap())
    })
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_directory_through_the_mount_with_posix_calls_and_tools() {
    let tc = TestCluster::start_mdts(bin(), 2, 2).await.unwrap();
    let m = FuseMount::start(&tc, "");
    let root_nlink = fs::metadata(&m.mnt).unwrap().nlink();
    let r = m.path("r");

    // `weft mkdir -i 1` on a path in the mount.
    let (ok, _, err) = weft(&["mkdir", "-i", "1", &p(&r)]);
    assert!(ok, "weft mkdir -i 1: {err}");
    let (ok, out, err) = weft(&["getdirstripe", &p(&r)]);
    assert!(ok, "{err}");
    assert!(out.contains("lmv_stripe_offset: 1"), "{out}");
    assert_eq!(mdt_of(&m.mnt), 0);
    assert!(fs::metadata(&r).unwrap().is_dir());
    wait_until("the root's link count counts the remote directory", || {
        fs::metadata(&m.mnt).unwrap().nlink() == root_nlink + 1
    });

    // Plain POSIX calls inside it.
    fs::create_dir(r.join("sub")).unwrap();
    assert_eq!(mdt_of(&r.join("sub")), 1, "a subdirectory stays on MDT1");
    let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    fs::write(r.join("a"), &data).unwrap();
    fs::write(r.join("sub/b"), b"hello").unwrap();
    assert_eq!(fs::read(r.join("a")).unwrap(), data);
    assert_eq!(fs::read(r.join("sub/b")).unwrap(), b"hello");
    let listing = sh("ls", &["-l", &p(&r)]);
    assert_eq!(ls_size(&listing, "a"), Some(100_000), "{listing}");
    assert!(ls_size(&listing, "sub").is_some(), "{listing}");
    let listing = sh("ls", &["-l", &p(&m.mnt)]);
    assert!(ls_size(&listing, "r").is_some(), "{listing}");
    assert_eq!(fs::metadata(&r).unwrap().nlink(), 3);
    assert_eq!(fs::metadata(r.join("sub")).unwrap().nlink(), 2);
    assert_eq!(fs::metadata(r.join("a")).unwrap().len(), 100_000);

    // Renames within the remote directory.
    fs::rename(r.join("a"), r.join("a2")).unwrap();
    fs::rename(r.join("sub/b"), r.join("b")).unwrap();
    fs::rename(r.join("sub"), r.join("sub2")).unwrap();
    assert_eq!(names(&r), ["a2", "b", "sub2"]);
    assert_eq!(fs::read(r.join("a2")).unwrap(), data);

    // The remote directory renamed within its parent.
    fs::rename(&r, m.path("r2")).unwrap();
    assert_eq!(errno(fs::metadata(&r)), libc::ENOENT);
    assert_eq!(fs::read(m.path("r2/b")).unwrap(), b"hello");
    assert_eq!(mdt_of(&m.path("r2")), 1);
    fs::rename(m.path("r2"), &r).unwrap();

    // Across the MDT boundary: a file's name moves (its inode stays on MDT1) and hard
    // links are made (DNE step 3); a directory moves too (rename(2), never EXDEV): its
    // name changes MDT, its inode and everything in it stay where they are.
    fs::rename(r.join("a2"), m.path("a2")).unwrap();
    assert_eq!(fs::read(m.path("a2")).unwrap(), data);
    assert_eq!(errno(fs::metadata(r.join("a2"))), libc::ENOENT);
    fs::write(m.path("top"), b"top").unwrap();
    fs::hard_link(m.path("top"), r.join("top")).unwrap();
    assert_eq!(fs::metadata(m.path("top")).unwrap().nlink(), 2);
    assert_eq!(fs::read(r.join("top")).unwrap(), b"top");
    fs::remove_file(r.join("top")).unwrap();
    wait_until("the link count drops", || {
        fs::metadata(m.path("top")).unwrap().nlink() == 1
    });
    fs::write(r.join("sub2/c"), b"c").unwrap();
    let sub2 = fs::metadata(r.join("sub2")).unwrap();
    let (root_links, r_links) = (
        fs::metadata(&m.mnt).unwrap().nlink(),
        fs::metadata(&r).unwrap().nlink(),
    );
    fs::rename(r.join("sub2"), m.path("moved")).unwrap();
    let moved = fs::metadata(m.path("moved")).unwrap();
    assert_eq!(
        moved.ino(),
        sub2.ino(),
        "rename(2) moved the directory itself"
    );
    assert_eq!(fs::read(m.path("moved/c")).unwrap(), b"c");
    assert_eq!(mdt_of(&m.path("moved")), 1, "the inode stays on MDT1");
    assert_eq!(errno(fs::metadata(r.join("sub2"))), libc::ENOENT);
    assert_eq!(fs::metadata(&m.mnt).unwrap().nlink(), root_links + 1);
    assert_eq!(fs::metadata(&r).unwrap().nlink(), r_links - 1);
    // ".." of the moved directory is its new parent.
    assert_eq!(
        fs::metadata(m.path("moved/..")).unwrap().ino(),
        fs::metadata(&m.mnt).unwrap().ino()
    );
    // `mv` of a directory from the root into MDT1's directory, and back.
    fs::create_dir(m.path("d0")).unwrap();
    fs::write(m.path("d0/f"), b"f").unwrap();
    let d0 = fs::metadata(m.path("d0")).unwrap().ino();
    sh("mv", &[&p(&m.path("d0")), &p(&r.join("d0"))]);
    assert_eq!(fs::metadata(r.join("d0")).unwrap().ino(), d0);
    assert_eq!(fs::read(r.join("d0/f")).unwrap(), b"f");
    assert_eq!(mdt_of(&r.join("d0")), 0);
    // Never below itself, whatever MDTs the chain crosses.
    assert_eq!(
        errno(fs::rename(&r, r.join("d0/r"))),
        libc::EINVAL,
        "a directory moved below itself"
    );
    sh("rm", &["-r", &p(&r.join("d0"))]);
    fs::rename(m.path("moved"), r.join("sub2")).unwrap();
    sh("mv", &[&p(&r.join("sub2")), &p(&m.path("moved"))]);
    assert_eq!(fs::read(m.path("moved/c")).unwrap(), b"c");

    // Removing: unlink(2) of the directory, rmdir of a non-empty one, `rm -r`, rmdir.
    assert_eq!(errno(fs::remove_file(&r)), libc::EISDIR);
    assert_eq!(errno(fs::remove_dir(&r)), libc::ENOTEMPTY);
    fs::create_dir_all(r.join("tree/x/y")).unwrap();
    for i in 0..20 {
        fs::write(r.join(format!("tree/x/f{i}")), vec![i as u8; 1000 * i]).unwrap();
    }
    fs::write(r.join("tree/x/y/z"), b"z").unwrap();
    sh("rm", &["-r", &p(&r.join("tree"))]);
    assert_eq!(names(&r), ["b"]);
    fs::remove_file(r.join("b")).unwrap();
    fs::remove_dir(&r).unwrap();
    assert_eq!(errno(fs::metadata(&r)), libc::ENOENT);

    // `rm -r` of a whole remote directory tree.
    let (ok, _, err) = weft(&["mkdir", "-i", "1", &p(&m.path("r3"))]);
    assert!(ok, "{err}");
    fs::create_dir_all(m.path("r3/d/e")).unwrap();
    fs::write(m.path("r3/d/e/f"), b"f").unwrap();
    sh("rm", &["-r", &p(&m.path("r3"))]);
    assert_eq!(errno(fs::metadata(m.path("r3"))), libc::ENOENT);

    let mut left = names(&m.mnt);
    left.retain(|n| !n.starts_with('.'));
    assert_eq!(left, ["a2", "moved", "top"]);
    wait_until("the root's link count is back", || {
        fs::metadata(&m.mnt).unwrap().nlink() == root_nlink + 1
    });
    // Nothing is left on MDT1 but the inodes of a2 and of /moved and its file, whose
    // names moved to the root.
    assert_eq!(tc.mdt_counter(1, "dirs").await.unwrap(), 1);
    assert_eq!(tc.mdt_counter(1, "files").await.unwrap(), 2);
}

/// `weft migrate -m 1 MOUNT/proj` through a mount: the tree lists the same afterwards
/// (names, modes, sizes, times) through paths whose dentries the kernel still has (the
/// old directories answer ESTALE and the kernel looks the path up again), its
/// directories are on MDT1, and creates and reads in it go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weft_migrate_m_through_the_mount() {
    let tc = TestCluster::start_mdts(bin(), 1, 2).await.unwrap();
    let m = FuseMount::start(&tc, "");
    let proj = m.path("proj");
    fs::create_dir_all(proj.join("a/b")).unwrap();
    for i in 0..50 {
        fs::write(proj.join(format!("a/f{i}")), format!("{i}")).unwrap();
    }
    fs::write(proj.join("a/b/deep"), b"deep").unwrap();
    std::os::unix::fs::symlink("a/b", proj.join("link")).unwrap();
    let before = sh("ls", &["-lR", "--time-style=full-iso", &p(&proj)]);
    let a_ino = fs::metadata(proj.join("a")).unwrap().ino();
    assert_eq!(mdt_of(&proj), 0);

    let (ok, _, err) = weft(&["migrate", "-m", "1", &p(&proj)]);
    assert!(ok, "weft migrate -m: {err}");
    let after = sh("ls", &["-lR", "--time-style=full-iso", &p(&proj)]);
    assert_eq!(after, before, "the tree lists the same");
    for d in ["proj", "proj/a", "proj/a/b"] {
        assert_eq!(mdt_of(&m.path(d)), 1, "{d}");
    }
    // Through the paths the kernel still has: creates and reads go on.
    fs::write(proj.join("a/after"), b"after").unwrap();
    assert_eq!(fs::read(proj.join("a/f7")).unwrap(), b"7");
    assert_eq!(fs::read(proj.join("link/deep")).unwrap(), b"deep");
    assert_ne!(
        fs::metadata(proj.join("a")).unwrap().ino(),
        a_ino,
        "a new directory has the name"
    );
    sh("rm", &["-r", &p(&proj)]);
    assert_eq!(tc.mdt_counter(1, "dirs").await.unwrap(), 0);
}

/// A striped directory (`weft mkdir -c 2`) through a mount: names spread over both MDTs
/// and every namespace call works on them as in a plain directory — creates, listings
/// (`ls`, `find`), renames and hard links between names on different MDTs, directories
/// made in it and moved between its shards and out of it, `setdirstripe -D` inherited,
/// `rm -r` and rmdir.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn striped_directory_through_the_mount() {
    let tc = TestCluster::start_mdts(bin(), 1, 2).await.unwrap();
    let m = FuseMount::start(&tc, "");
    let s = m.path("s");
    let (ok, _, err) = weft(&["mkdir", "-c", "2", &p(&s)]);
    assert!(ok, "weft mkdir -c 2: {err}");
    let (ok, out, err) = weft(&["getdirstripe", &p(&s)]);
    assert!(ok, "{err}");
    assert!(out.contains("fnv_1a_64"), "{out}");
    for i in 0..200 {
        fs::write(s.join(format!("f{i}")), format!("{i}")).unwrap();
    }
    let listed = names(&s);
    assert_eq!(listed.len(), 200);
    let found = sh("find", &[&p(&s), "-type", "f"]);
    assert_eq!(found.lines().count(), 200);
    // Files are created on the MDT of their name's shard: both MDTs hold some.
    let on1 = tc.mdt_counter(1, "files").await.unwrap();
    assert!(on1 > 20 && on1 < 180, "{on1} of 200 files on MDT1");

    // Renames and hard links between every pair of names (whichever shards they are on).
    for i in 0..20 {
        fs::rename(s.join(format!("f{i}")), s.join(format!("g{i}"))).unwrap();
        fs::hard_link(s.join(format!("g{i}")), s.join(format!("h{i}"))).unwrap();
        assert_eq!(fs::metadata(s.join(format!("h{i}"))).unwrap().nlink(), 2);
        fs::remove_file(s.join(format!("g{i}"))).unwrap();
        assert_eq!(
            fs::read(s.join(format!("h{i}"))).unwrap(),
            format!("{i}").as_bytes()
        );
    }
    // The checkpoint pattern: write a temporary name, rename it over the final one.
    for i in 20..40 {
        fs::write(s.join("ckpt.tmp"), format!("new {i}")).unwrap();
        fs::rename(s.join("ckpt.tmp"), s.join(format!("f{i}"))).unwrap();
        assert_eq!(
            fs::read(s.join(format!("f{i}"))).unwrap(),
            format!("new {i}").as_bytes()
        );
    }
    // Directories in it, moved between names on different MDTs and out of it.
    for i in 0..10 {
        let d = s.join(format!("d{i}"));
        fs::create_dir(&d).unwrap();
        fs::write(d.join("x"), b"x").unwrap();
        let ino = fs::metadata(&d).unwrap().ino();
        fs::rename(&d, s.join(format!("e{i}"))).unwrap();
        assert_eq!(fs::metadata(s.join(format!("e{i}"))).unwrap().ino(), ino);
        assert_eq!(fs::read(s.join(format!("e{i}/x"))).unwrap(), b"x");
    }
    fs::rename(s.join("e0"), m.path("e0")).unwrap();
    assert_eq!(fs::read(m.path("e0/x")).unwrap(), b"x");
    fs::rename(m.path("e0"), s.join("e0")).unwrap();
    assert_eq!(names(&s).iter().filter(|n| n.starts_with('e')).count(), 10);

    // A default for new subdirectories, inherited through the mount.
    let (ok, _, err) = weft(&["setdirstripe", "-D", "-c", "2", &p(&s)]);
    assert!(ok, "{err}");
    fs::create_dir(s.join("sub")).unwrap();
    let (ok, out, err) = weft(&["getdirstripe", &p(&s.join("sub"))]);
    assert!(ok, "{err}");
    assert!(out.contains("fnv_1a_64"), "sub is striped too: {out}");
    fs::write(s.join("sub/z"), b"z").unwrap();

    assert_eq!(errno(fs::remove_dir(&s)), libc::ENOTEMPTY);
    sh("rm", &["-r", &p(&s)]);
    assert_eq!(errno(fs::metadata(&s)), libc::ENOENT);
    wait_until("MDT1 holds nothing", || {
        let rt = tokio::runtime::Handle::current();
        let (dirs, files) = tokio::task::block_in_place(|| {
            rt.block_on(async {
                (
                    tc.mdt_counter(1, "dirs").await.unwrap(),
                    tc.mdt_counter(1, "files").await.unwrap(),
                )
            })
        });
        dirs == 0 && files == 0
    });
}
