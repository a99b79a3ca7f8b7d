//! POSIX behaviour through a real FUSE mount (`weft mount` over separate server processes):
//! namespace operations, attributes, rename variants, links, FIFOs, xattrs, statfs, large
//! directories, data, exact errnos, permissions of other users, and two mounts of one file
//! system seeing each other's changes.

use crate::bin;
use crate::fuse_common::{FuseMount, check, cpath, errno, run_as};
use std::collections::BTreeSet;
use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use weft_testkit::TestCluster;
use weft_testkit::pattern;
use weft_testkit::wait_until;

fn set_xattr(p: &Path, name: &str, value: &[u8], flags: i32) -> std::io::Result<()> {
    let n = std::ffi::CString::new(name).unwrap();
    // SAFETY: valid NUL-terminated strings and a buffer of the given length.
    check(unsafe {
        libc::setxattr(
            cpath(p).as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            flags,
        )
    })
}

fn get_xattr(p: &Path, name: &str) -> std::io::Result<Vec<u8>> {
    let n = std::ffi::CString::new(name).unwrap();
    let mut buf = vec![0u8; 4096];
    // SAFETY: valid NUL-terminated strings and a buffer of the given length.
    let r = unsafe {
        libc::getxattr(
            cpath(p).as_ptr(),
            n.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    buf.truncate(r as usize);
    Ok(buf)
}

fn list_xattr(p: &Path) -> Vec<String> {
    let mut buf = vec![0u8; 4096];
    // SAFETY: a valid path and a buffer of the given length.
    let r = unsafe { libc::listxattr(cpath(p).as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    assert!(r >= 0, "listxattr: {}", std::io::Error::last_os_error());
    buf.truncate(r as usize);
    buf.split(|&b| b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect()
}

fn rename2(a: &Path, b: &Path, flags: u32) -> std::io::Result<()> {
    // SAFETY: valid NUL-terminated paths.
    check(unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            cpath(a).as_ptr(),
            libc::AT_FDCWD,
            cpath(b).as_ptr(),
            flags,
        )
    })
}

fn utimens(p: &Path, atime: libc::timespec, mtime: libc::timespec) -> std::io::Result<()> {
    let t = [atime, mtime];
    // SAFETY: a valid path and a two-element timespec array.
    check(unsafe { libc::utimensat(libc::AT_FDCWD, cpath(p).as_ptr(), t.as_ptr(), 0) })
}

fn ts(sec: i64, nsec: i64) -> libc::timespec {
    libc::timespec {
        tv_sec: sec,
        tv_nsec: nsec,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_attributes_links_fifos_xattrs_and_statfs() {
    let tc = TestCluster::start(bin(), 2).await.unwrap();
    let m = FuseMount::start(&tc, "");
    tokio::task::spawn_blocking(move || {
        // mkdir / rmdir, with the umask applied to the mode.
        // SAFETY: umask has no preconditions.
        let old = unsafe { libc::umask(0o022) };
        let d = m.path("dir");
        fs::DirBuilder::new().mode(0o777).create(&d).unwrap();
        let md = fs::metadata(&d).unwrap();
        assert!(md.is_dir());
        assert_eq!(md.mode() & 0o7777, 0o755, "umask 022 applied to mkdir 0777");
        assert_eq!(md.nlink(), 2);
        fs::create_dir(d.join("sub")).unwrap();
        assert_eq!(fs::metadata(&d).unwrap().nlink(), 3);
        fs::remove_dir(d.join("sub")).unwrap();
        assert_eq!(fs::metadata(&d).unwrap().nlink(), 2);

        // create / stat / unlink.
        let f = d.join("file");
        let mut fh = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o666)
            .open(&f)
            .unwrap();
        fh.write_all(b"hello weft").unwrap();
        drop(fh);
        // SAFETY: umask has no preconditions.
        unsafe { libc::umask(old) };
        let mf = fs::metadata(&f).unwrap();
        assert!(mf.is_file());
        assert_eq!(mf.len(), 10);
        assert_eq!(mf.mode() & 0o7777, 0o644);
        assert_eq!((mf.uid(), mf.gid(), mf.nlink()), (0, 0, 1));
        assert_eq!(fs::read(&f).unwrap(), b"hello weft");
        let now = std::time::SystemTime::now();
        let mtime = mf.modified().unwrap();
        assert!(now.duration_since(mtime).unwrap_or_default() < Duration::from_secs(60));

        // chmod, chown, utimensat with explicit times, UTIME_OMIT and UTIME_NOW.
        fs::set_permissions(&f, fs::Permissions::from_mode(0o4751)).unwrap();
        assert_eq!(fs::metadata(&f).unwrap().mode() & 0o7777, 0o4751);
        std::os::unix::fs::chown(&f, Some(1234), Some(5678)).unwrap();
        let mf = fs::metadata(&f).unwrap();
        assert_eq!((mf.uid(), mf.gid()), (1234, 5678));
        utimens(&f, ts(1_000_000_000, 5), ts(1_100_000_000, 7)).unwrap();
        let mf = fs::metadata(&f).unwrap();
        assert_eq!((mf.atime(), mf.atime_nsec()), (1_000_000_000, 5));
        assert_eq!((mf.mtime(), mf.mtime_nsec()), (1_100_000_000, 7));
        utimens(&f, ts(0, libc::UTIME_OMIT), ts(0, libc::UTIME_NOW)).unwrap();
        let mf = fs::metadata(&f).unwrap();
        assert_eq!(mf.atime(), 1_000_000_000, "UTIME_OMIT kept atime");
        assert!(mf.mtime() > 1_600_000_000, "UTIME_NOW set mtime");
        std::os::unix::fs::chown(&f, Some(0), Some(0)).unwrap();

        // Hard links: one inode, two names.
        let l = d.join("hard");
        fs::hard_link(&f, &l).unwrap();
        let (a, b) = (fs::metadata(&f).unwrap(), fs::metadata(&l).unwrap());
        assert_eq!(a.ino(), b.ino());
        assert_eq!(a.nlink(), 2);
        fs::remove_file(&l).unwrap();
        assert_eq!(fs::metadata(&f).unwrap().nlink(), 1);

        // Symlinks, relative and absolute, read and followed.
        let s = d.join("sym");
        std::os::unix::fs::symlink("file", &s).unwrap();
        assert_eq!(fs::read_link(&s).unwrap(), Path::new("file"));
        assert!(fs::symlink_metadata(&s).unwrap().file_type().is_symlink());
        assert_eq!(fs::read(&s).unwrap(), b"hello weft");
        let abs = d.join("abs");
        std::os::unix::fs::symlink(&f, &abs).unwrap();
        assert_eq!(fs::read(&abs).unwrap(), b"hello weft");

        // mknod: a FIFO, usable as one.
        let p = d.join("fifo");
        // SAFETY: a valid path.
        check(unsafe { libc::mkfifo(cpath(&p).as_ptr(), 0o640) }).unwrap();
        let mp = fs::metadata(&p).unwrap();
        assert!(mp.file_type().is_fifo());
        assert_eq!(mp.mode() & 0o777, 0o640);
        let pc = p.clone();
        let writer = std::thread::spawn(move || fs::write(pc, b"through the pipe").unwrap());
        assert_eq!(fs::read(&p).unwrap(), b"through the pipe");
        writer.join().unwrap();

        // Rename: plain, replacing, RENAME_NOREPLACE, RENAME_EXCHANGE, across directories.
        let (x, y) = (d.join("x"), d.join("y"));
        fs::write(&x, b"x").unwrap();
        fs::write(&y, b"y").unwrap();
        rename2(&x, &y, libc::RENAME_EXCHANGE).unwrap();
        assert_eq!(fs::read(&x).unwrap(), b"y");
        assert_eq!(fs::read(&y).unwrap(), b"x");
        assert_eq!(errno(rename2(&x, &y, libc::RENAME_NOREPLACE)), libc::EEXIST);
        fs::rename(&x, &y).unwrap();
        assert_eq!(fs::read(&y).unwrap(), b"y");
        assert_eq!(errno(fs::metadata(&x)), libc::ENOENT);
        rename2(&y, &x, libc::RENAME_NOREPLACE).unwrap();
        fs::create_dir(m.path("other")).unwrap();
        fs::rename(&x, m.path("other/moved")).unwrap();
        assert_eq!(fs::read(m.path("other/moved")).unwrap(), b"y");
        fs::rename(m.path("other"), d.join("other2")).unwrap();
        assert_eq!(fs::read(d.join("other2/moved")).unwrap(), b"y");

        // Extended attributes.
        set_xattr(&f, "user.color", b"blue", 0).unwrap();
        assert_eq!(get_xattr(&f, "user.color").unwrap(), b"blue");
        assert_eq!(
            errno(set_xattr(&f, "user.color", b"red", libc::XATTR_CREATE)),
            libc::EEXIST
        );
        assert_eq!(
            errno(set_xattr(&f, "user.none", b"x", libc::XATTR_REPLACE)),
            libc::ENODATA
        );
        set_xattr(&f, "user.color", b"red", libc::XATTR_REPLACE).unwrap();
        set_xattr(&f, "user.empty", b"", 0).unwrap();
        let names: BTreeSet<String> = list_xattr(&f).into_iter().collect();
        assert_eq!(
            names,
            ["user.color", "user.empty"]
                .into_iter()
                .map(String::from)
                .collect()
        );
        assert_eq!(get_xattr(&f, "user.color").unwrap(), b"red");
        let n = std::ffi::CString::new("user.color").unwrap();
        // SAFETY: valid NUL-terminated strings.
        check(unsafe { libc::removexattr(cpath(&f).as_ptr(), n.as_ptr()) }).unwrap();
        assert_eq!(errno(get_xattr(&f, "user.color")), libc::ENODATA);

        // statfs: real numbers from the OSTs and the MDT.
        // SAFETY: a zeroed statvfs is a valid out-parameter.
        let mut sv: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: a valid path and out-parameter.
        check(unsafe { libc::statvfs(cpath(&m.mnt).as_ptr(), &mut sv) }).unwrap();
        assert!(sv.f_blocks > 0 && sv.f_bfree <= sv.f_blocks && sv.f_bavail <= sv.f_bfree);
        assert!(sv.f_files > 0 && sv.f_ffree <= sv.f_files);
        assert_eq!(sv.f_namemax, 255);
        assert!(sv.f_bsize > 0);

        // unlink and rmdir leave nothing behind.
        for name in ["file", "sym", "abs", "fifo"] {
            fs::remove_file(d.join(name)).unwrap();
        }
        fs::remove_file(d.join("other2/moved")).unwrap();
        fs::remove_dir(d.join("other2")).unwrap();
        fs::remove_dir(&d).unwrap();
        assert_eq!(fs::read_dir(&m.mnt).unwrap().count(), 0);
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_the_errnos_of_a_local_file_system() {
    let tc = TestCluster::start(bin(), 1).await.unwrap();
    let m = FuseMount::start(&tc, "");
    tokio::task::spawn_blocking(move || {
        let d = m.path("e");
        fs::create_dir(&d).unwrap();
        fs::write(d.join("f"), b"x").unwrap();
        assert_eq!(errno(fs::metadata(d.join("missing"))), libc::ENOENT);
        assert_eq!(errno(fs::create_dir(&d)), libc::EEXIST);
        assert_eq!(
            errno(
                fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(d.join("f"))
            ),
            libc::EEXIST
        );
        assert_eq!(errno(fs::remove_dir(&d)), libc::ENOTEMPTY);
        assert_eq!(errno(fs::remove_dir(d.join("f"))), libc::ENOTDIR);
        assert_eq!(errno(fs::remove_file(&d)), libc::EISDIR);
        assert_eq!(errno(fs::metadata(d.join("f/below"))), libc::ENOTDIR);
        assert_eq!(
            errno(fs::OpenOptions::new().write(true).open(&d)),
            libc::EISDIR
        );
        let long = "n".repeat(256);
        assert_eq!(errno(fs::write(d.join(&long), b"x")), libc::ENAMETOOLONG);
        assert_eq!(errno(fs::create_dir(d.join(&long))), libc::ENAMETOOLONG);
        assert_eq!(errno(fs::metadata(d.join(&long))), libc::ENAMETOOLONG);
        let max = "m".repeat(255);
        fs::write(d.join(&max), b"ok").unwrap();
        assert_eq!(fs::read(d.join(&max)).unwrap(), b"ok");
        std::os::unix::fs::symlink("loop2", d.join("loop1")).unwrap();
        std::os::unix::fs::symlink("loop1", d.join("loop2")).unwrap();
        assert_eq!(errno(fs::read(d.join("loop1"))), libc::ELOOP);
        assert_eq!(errno(fs::rename(&d, d.join("inside"))), libc::EINVAL);
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_users_get_eacces_and_eperm_by_mode_owner_and_groups() {
    let tc = TestCluster::start(bin(), 1).await.unwrap();
    let m = FuseMount::start(&tc, "");
    tokio::task::spawn_blocking(move || {
        let mnt = m.mnt.display().to_string();
        // Root's private directory and file.
        fs::create_dir(m.path("private")).unwrap();
        fs::set_permissions(m.path("private"), fs::Permissions::from_mode(0o700)).unwrap();
        fs::write(m.path("rootfile"), b"secret").unwrap();
        fs::set_permissions(m.path("rootfile"), fs::Permissions::from_mode(0o600)).unwrap();
        // A directory shared with group 2000 only.
        fs::create_dir(m.path("team")).unwrap();
        std::os::unix::fs::chown(m.path("team"), Some(0), Some(2000)).unwrap();
        fs::set_permissions(m.path("team"), fs::Permissions::from_mode(0o770)).unwrap();
        // A home for user 1000.
        fs::create_dir(m.path("home")).unwrap();
        std::os::unix::fs::chown(m.path("home"), Some(1000), Some(1000)).unwrap();

        let (code, err) = run_as(1000, 1000, &[], &format!("cat {mnt}/rootfile"));
        assert_ne!(code, 0);
        assert!(err.contains("Permission denied"), "EACCES expected: {err}");
        let (code, err) = run_as(1000, 1000, &[], &format!("ls {mnt}/private"));
        assert_ne!(code, 0);
        assert!(err.contains("Permission denied"), "EACCES expected: {err}");
        let (code, err) = run_as(1000, 1000, &[], &format!("touch {mnt}/newfile"));
        assert_ne!(code, 0);
        assert!(err.contains("Permission denied"), "EACCES expected: {err}");
        // Not the owner: chmod and chown are EPERM, not EACCES.
        let (code, err) = run_as(1000, 1000, &[], &format!("chmod 777 {mnt}/rootfile"));
        assert_ne!(code, 0);
        assert!(
            err.contains("Operation not permitted"),
            "EPERM expected: {err}"
        );
        // Supplementary groups count.
        let (code, err) = run_as(1000, 1000, &[], &format!("touch {mnt}/team/x"));
        assert_ne!(code, 0, "not in group 2000: {err}");
        let (code, err) = run_as(1000, 1000, &[2000], &format!("touch {mnt}/team/x"));
        assert_eq!(code, 0, "in group 2000: {err}");
        // The owner does what owners do; files are created with the caller's ids.
        let script = format!(
            "set -e; umask 027; cd {mnt}/home; echo hi > mine; mkdir d; chmod 600 mine; \
             ln -s mine link; mv mine renamed; cat renamed"
        );
        let (code, err) = run_as(1000, 1000, &[], &script);
        assert_eq!(code, 0, "{err}");
        let md = fs::metadata(m.path("home/renamed")).unwrap();
        assert_eq!((md.uid(), md.gid(), md.mode() & 0o777), (1000, 1000, 0o600));
        let dd = fs::metadata(m.path("home/d")).unwrap();
        assert_eq!(dd.mode() & 0o777, 0o750, "umask 027 applied");
        assert_eq!(fs::metadata(m.path("team/x")).unwrap().uid(), 1000);
        // A write by a non-owner clears setuid and setgid.
        fs::write(m.path("suid"), b"x").unwrap();
        fs::set_permissions(m.path("suid"), fs::Permissions::from_mode(0o6777)).unwrap();
        let (code, err) = run_as(1000, 1000, &[], &format!("echo more >> {mnt}/suid"));
        assert_eq!(code, 0, "{err}");
        assert_eq!(fs::metadata(m.path("suid")).unwrap().mode() & 0o7777, 0o777);
        assert_eq!(fs::read(m.path("suid")).unwrap(), b"xmore\n");
        // Sticky directory: others' files cannot be removed.
        fs::create_dir(m.path("tmp")).unwrap();
        fs::set_permissions(m.path("tmp"), fs::Permissions::from_mode(0o1777)).unwrap();
        fs::write(m.path("tmp/roots"), b"r").unwrap();
        let (code, err) = run_as(1000, 1000, &[], &format!("rm -f {mnt}/tmp/roots"));
        assert_ne!(code, 0);
        assert!(
            err.contains("Operation not permitted"),
            "EPERM expected: {err}"
        );
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_data_round_trips_with_append_truncate_and_unlinked_open_files() {
    let tc = TestCluster::start(bin(), 3).await.unwrap();
    let m = FuseMount::start(&tc, "");
    tokio::task::spawn_blocking(move || {
        // 9 MiB + a bit, in writes the kernel splits into 1 MiB requests.
        let data: Vec<u8> = (0..9 * 1024 * 1024 + 4321u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        let p = m.path("big");
        fs::write(&p, &data).unwrap();
        assert_eq!(fs::metadata(&p).unwrap().len(), data.len() as u64);
        assert!(fs::read(&p).unwrap() == data, "content differs");
        // Random-access read.
        let mut f = fs::File::open(&p).unwrap();
        f.seek(SeekFrom::Start(5_000_000)).unwrap();
        let mut buf = vec![0; 10_000];
        f.read_exact(&mut buf).unwrap();
        assert!(buf[..] == data[5_000_000..5_010_000]);

        // O_APPEND and stat while a writer is open in this mount.
        let a = m.path("append");
        fs::write(&a, b"one,").unwrap();
        let mut w = fs::OpenOptions::new().append(true).open(&a).unwrap();
        w.write_all(b"two,").unwrap();
        assert_eq!(
            fs::metadata(&a).unwrap().len(),
            8,
            "stat sees buffered writes"
        );
        w.write_all(b"three").unwrap();
        w.sync_all().unwrap();
        drop(w);
        assert_eq!(fs::read(&a).unwrap(), b"one,two,three");

        // O_TRUNC, ftruncate down and up (zeros), truncate(2) by path.
        let mut t = fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(&a)
            .unwrap();
        assert_eq!(fs::metadata(&a).unwrap().len(), 0);
        t.write_all(b"abcdef").unwrap();
        t.set_len(3).unwrap();
        t.set_len(5).unwrap();
        drop(t);
        assert_eq!(fs::read(&a).unwrap(), b"abc\0\0");
        // SAFETY: a valid path.
        check(unsafe { libc::truncate(cpath(&a).as_ptr(), 1) }).unwrap();
        assert_eq!(fs::read(&a).unwrap(), b"a");

        // A sparse file: a hole reads as zeros.
        let s = m.path("sparse");
        let mut sf = fs::File::create(&s).unwrap();
        sf.seek(SeekFrom::Start(3 << 20)).unwrap();
        sf.write_all(b"end").unwrap();
        drop(sf);
        let got = fs::read(&s).unwrap();
        assert_eq!(got.len(), (3 << 20) + 3);
        assert!(got[..3 << 20].iter().all(|&b| b == 0));

        // fallocate grows the size; fsync and fdatasync succeed.
        let fa = fs::OpenOptions::new().write(true).open(&s).unwrap();
        // SAFETY: a valid open descriptor.
        check(unsafe { libc::posix_fallocate(fa.as_raw_fd_for_test(), 0, 8 << 20) }).unwrap();
        fa.sync_data().unwrap();
        fa.sync_all().unwrap();
        drop(fa);
        assert_eq!(fs::metadata(&s).unwrap().len(), 8 << 20);

        // An unlinked file stays readable and writable while open.
        let u = m.path("unlinked");
        fs::write(&u, b"still here").unwrap();
        let mut keep = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&u)
            .unwrap();
        fs::remove_file(&u).unwrap();
        assert_eq!(errno(fs::metadata(&u)), libc::ENOENT);
        let mut s = String::new();
        keep.read_to_string(&mut s).unwrap();
        assert_eq!(s, "still here");
        keep.write_all(b"!").unwrap();
        keep.seek(SeekFrom::Start(0)).unwrap();
        s.clear();
        keep.read_to_string(&mut s).unwrap();
        assert_eq!(s, "still here!");
    })
    .await
    .unwrap();
}

trait RawFd {
    fn as_raw_fd_for_test(&self) -> i32;
}

impl RawFd for fs::File {
    fn as_raw_fd_for_test(&self) -> i32 {
        std::os::fd::AsRawFd::as_raw_fd(self)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_of_thousands_lists_every_entry_once_with_attributes() {
    let tc = TestCluster::start(bin(), 1).await.unwrap();
    let m = FuseMount::start(&tc, "");
    tokio::task::spawn_blocking(move || {
        let d = m.path("many");
        fs::create_dir(&d).unwrap();
        let n = 3000;
        let mut want = BTreeSet::new();
        for i in 0..n {
            let name = format!("entry-{i:05}-{}", "x".repeat(i % 40));
            if i % 10 == 0 {
                fs::create_dir(d.join(&name)).unwrap();
            } else {
                fs::File::create(d.join(&name)).unwrap();
            }
            want.insert(name);
        }
        let mut got = BTreeSet::new();
        for e in fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let name = e.file_name().into_string().unwrap();
            let is_dir = e.file_type().unwrap().is_dir();
            assert_eq!(is_dir, name[6..11].parse::<usize>().unwrap() % 10 == 0);
            assert!(got.insert(name), "listed twice");
        }
        assert_eq!(got, want);
        // `ls -la` style: `.` and `..` included, and attributes for every entry.
        let out = Command::new("ls")
            .arg("-la")
            .arg(&d)
            .stderr(Stdio::inherit())
            .output()
            .unwrap();
        assert!(out.status.success());
        let listing = String::from_utf8_lossy(&out.stdout);
        let lines: Vec<&str> = listing.lines().skip(1).collect();
        assert_eq!(lines.len(), n + 2);
        assert!(lines.iter().any(|l| l.ends_with(" .")));
        assert!(lines.iter().any(|l| l.ends_with(" ..")));
        assert_eq!(fs::metadata(&d).unwrap().nlink(), 2 + n as u64 / 10);
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_mounts_see_each_others_changes() {
    let tc = TestCluster::start(bin(), 2).await.unwrap();
    let a = FuseMount::start(&tc, "");
    let b = FuseMount::start(&tc, "attr_timeout=0.2,entry_timeout=0.2");
    tokio::task::spawn_blocking(move || {
        fs::create_dir(a.path("shared")).unwrap();
        wait_until("B sees A's mkdir", || b.path("shared").is_dir());
        // Written and closed in A: B's next open reads it (close-to-open).
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        fs::write(a.path("shared/f"), &data).unwrap();
        wait_until("B sees A's file and size", || {
            fs::metadata(b.path("shared/f")).is_ok_and(|m| m.len() == data.len() as u64)
        });
        assert!(fs::read(b.path("shared/f")).unwrap() == data);
        // Rewritten in B: A's next open sees the new bytes, not its cached pages.
        assert!(fs::read(a.path("shared/f")).unwrap() == data);
        fs::write(b.path("shared/f"), b"rewritten by B").unwrap();
        wait_until("A reads B's rewrite", || {
            fs::read(a.path("shared/f")).is_ok_and(|d| d == b"rewritten by B")
        });
        // Renames, attributes and removals travel too.
        fs::rename(b.path("shared/f"), b.path("shared/g")).unwrap();
        wait_until("A sees B's rename", || {
            !a.path("shared/f").exists() && a.path("shared/g").exists()
        });
        fs::set_permissions(a.path("shared/g"), fs::Permissions::from_mode(0o600)).unwrap();
        wait_until("B sees A's chmod", || {
            fs::metadata(b.path("shared/g")).is_ok_and(|m| m.mode() & 0o777 == 0o600)
        });
        fs::remove_file(a.path("shared/g")).unwrap();
        wait_until("B sees A's unlink", || !b.path("shared/g").exists());
        let inos = (
            fs::metadata(a.path("shared")).unwrap().ino(),
            fs::metadata(b.path("shared")).unwrap().ino(),
        );
        assert_eq!(inos.0, inos.1, "inode numbers are the same on every mount");
    })
    .await
    .unwrap();
}

/// Several threads making metadata calls one after another, big reads and writes, and an
/// fsync, all at once: every answer right, whichever way the mount's threads read the
/// kernel's requests (taking turns at one polled descriptor, the default, or each sleeping
/// on its own, `poll_us=0`), and the mount goes away cleanly on unmount.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_are_answered_with_and_without_polling_readers() {
    let tc = TestCluster::start(bin(), 2).await.unwrap();
    for opts in ["", "poll_us=1000,threads=2", "poll_us=0"] {
        let mut m = FuseMount::start(&tc, opts);
        let root = m.path(&format!("mix-{}", opts.replace([',', '='], "_")));
        fs::create_dir(&root).unwrap();
        let big: Vec<u8> = (0..4_000_000u32).map(|i| (i % 253) as u8).collect();
        let workers: Vec<_> = (0..4)
            .map(|t| {
                let dir = root.join(format!("t{t}"));
                let big = big.clone();
                std::thread::spawn(move || {
                    fs::create_dir(&dir).unwrap();
                    for i in 0..200 {
                        let f = dir.join(format!("f{i}"));
                        fs::write(&f, format!("{t}:{i}")).unwrap();
                        assert_eq!(
                            fs::metadata(&f).unwrap().len(),
                            format!("{t}:{i}").len() as u64
                        );
                    }
                    // One big file per thread, synced and read back whole.
                    let b = dir.join("big");
                    let mut w = fs::File::create(&b).unwrap();
                    w.write_all(&big).unwrap();
                    w.sync_all().unwrap();
                    drop(w);
                    assert!(fs::read(&b).unwrap() == big);
                    let names: BTreeSet<String> = fs::read_dir(&dir)
                        .unwrap()
                        .map(|e| e.unwrap().file_name().into_string().unwrap())
                        .collect();
                    assert_eq!(names.len(), 201);
                    for i in 0..200 {
                        let f = dir.join(format!("f{i}"));
                        assert_eq!(fs::read_to_string(&f).unwrap(), format!("{t}:{i}"));
                        fs::remove_file(&f).unwrap();
                    }
                    fs::remove_file(&b).unwrap();
                    fs::remove_dir(&dir).unwrap();
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        assert_eq!(fs::read_dir(&root).unwrap().count(), 0, "{opts}");
        fs::remove_dir(&root).unwrap();
        assert!(m.unmount(), "{opts}: {}", m.log());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mount_helper_and_umount_and_weft_up_mount() {
    let tc = TestCluster::start(bin(), 1).await.unwrap();
    // `mount -t fuse.weft` runs /sbin/mount.fuse.weft; here the same binary under that name.
    let dir = tempfile::tempdir().unwrap();
    let helper = dir.path().join("mount.fuse.weft");
    std::os::unix::fs::symlink(bin(), &helper).unwrap();
    let mnt = dir.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let log = dir.path().join("daemon.log");
    let status = Command::new(&helper)
        .arg(format!("{}:/{}", tc.mgs_addr, weft_testkit::FSNAME))
        .arg(&mnt)
        .args(["-o", "rw,_netdev,noatime"])
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    // The helper returned only once mounted.
    let mounted = weft_fuse::is_mounted(&mnt);
    if !mounted {
        let _ = weft_fuse::unmount(&mnt, true);
    }
    assert!(mounted, "{}", fs::read_to_string(&log).unwrap_or_default());
    let wrote = fs::write(mnt.join("via-helper"), b"x");
    let umount = Command::new(bin())
        .arg("umount")
        .arg(&mnt)
        .status()
        .unwrap();
    if !umount.success() {
        let _ = weft_fuse::unmount(&mnt, true);
    }
    wrote.unwrap();
    assert!(umount.success());
    assert!(!weft_fuse::is_mounted(&mnt));

    // `weft up --mount DIR`: serves, mounts, and unmounts on SIGTERM.
    let data = dir.path().join("data");
    let up_mnt = dir.path().join("up-mnt");
    let addr = format!("127.0.0.1:{}", weft_testkit::free_port().unwrap());
    let mut up = weft_testkit::ServerProcess::start(
        "up",
        bin(),
        vec![
            "up".into(),
            "--data".into(),
            data.display().to_string(),
            "--listen".into(),
            addr.clone(),
            "--mount".into(),
            up_mnt.display().to_string(),
        ],
        dir.path().join("up.log"),
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !weft_fuse::is_mounted(&up_mnt) {
        if Instant::now() > deadline {
            up.kill().unwrap();
            panic!("weft up did not mount: {}", up.log());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let wrote = fs::write(up_mnt.join("hello"), b"from weft up");
    let read = fs::read(up_mnt.join("hello"));
    // The mount calls the MDT of its own process, which records no reply for its changes
    // (it never resends); a client over TCP gets its changes recorded (to answer a resend
    // after a broken connection).
    let changed = fs::create_dir(up_mnt.join("d"))
        .and_then(|()| fs::rename(up_mnt.join("d"), up_mnt.join("e")))
        .and_then(|()| fs::remove_dir(up_mnt.join("e")));
    let remote = weft_client::Cluster::connect(&addr, "weft", Default::default())
        .await
        .unwrap();
    let after_mount = weft_testkit::mdt_counter(&remote, 0, "reply_records").await;
    let cred = weft_proto::mdt::Credentials::root();
    let mkdir = remote
        .mdt(0)
        .unwrap()
        .mkdir(weft_proto::Fid::ROOT, b"tcp", 0o755, &cred)
        .await;
    let after_tcp = weft_testkit::mdt_counter(&remote, 0, "reply_records").await;
    let status = up.stop().unwrap();
    if weft_fuse::is_mounted(&up_mnt) {
        let _ = weft_fuse::unmount(&up_mnt, true);
        panic!("weft up left its mount behind: {}", up.log());
    }
    wrote.unwrap();
    assert_eq!(read.unwrap(), b"from weft up");
    changed.unwrap();
    mkdir.unwrap();
    assert_eq!(after_mount.unwrap(), 0, "{}", up.log());
    assert!(after_tcp.unwrap() >= 1);
    assert!(status.success(), "{}", up.log());
    assert!(up.log().contains("mounted at"), "{}", up.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writeback_cache_and_direct_io_mounts_keep_data_right() {
    let tc = TestCluster::start(bin(), 2).await.unwrap();
    let wb = FuseMount::start(&tc, "writeback_cache");
    let dio = FuseMount::start(&tc, "direct_io");
    tokio::task::spawn_blocking(move || {
        // Write-only, unaligned partial pages: the kernel reads around them in this mode.
        let p = wb.path("wb");
        fs::write(&p, vec![b'a'; 10_000]).unwrap();
        let mut f = fs::OpenOptions::new().write(true).open(&p).unwrap();
        f.seek(SeekFrom::Start(4095)).unwrap();
        f.write_all(b"XYZ").unwrap();
        f.seek(SeekFrom::Start(12_000)).unwrap();
        f.write_all(b"tail").unwrap();
        drop(f);
        let mut want = vec![b'a'; 10_000];
        want[4095..4098].copy_from_slice(b"XYZ");
        want.resize(12_000, 0);
        want.extend_from_slice(b"tail");
        assert!(fs::read(&p).unwrap() == want);
        wait_until(
            "the direct_io mount reads what the writeback mount wrote",
            || fs::read(dio.path("wb")).is_ok_and(|d| d == want),
        );
        // Two threads writing disjoint halves of one file through direct I/O.
        let q = dio.path("n-to-1");
        fs::File::create(&q).unwrap();
        let chunk = 2 << 20;
        let writers: Vec<_> = (0..2u8)
            .map(|i| {
                let q = q.clone();
                std::thread::spawn(move || {
                    let mut f = fs::OpenOptions::new().write(true).open(&q).unwrap();
                    f.seek(SeekFrom::Start(u64::from(i) * chunk as u64))
                        .unwrap();
                    f.write_all(&vec![b'0' + i; chunk]).unwrap();
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        let got = fs::read(&q).unwrap();
        assert_eq!(got.len(), 2 * chunk);
        assert!(got[..chunk].iter().all(|&b| b == b'0'));
        assert!(got[chunk..].iter().all(|&b| b == b'1'));
    })
    .await
    .unwrap();
}

/// A shared mapping of the first `len` bytes of a file, unmapped on drop.
struct Mapping {
    ptr: *mut u8,
    len: usize,
}

impl Mapping {
    fn new(f: &fs::File, len: usize, writable: bool) -> Self {
        let prot = if writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        // SAFETY: a new mapping of an open descriptor at an address the kernel picks;
        // the result is checked for MAP_FAILED before use.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED,
                f.as_raw_fd_for_test(),
                0,
            )
        };
        assert_ne!(ptr, libc::MAP_FAILED, "{}", std::io::Error::last_os_error());
        Self {
            ptr: ptr.cast(),
            len,
        }
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: the mapping is `len` bytes long and lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`, and the mapping is writable when this is called.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    fn msync(&self) {
        // SAFETY: the range is exactly the mapping.
        check(unsafe { libc::msync(self.ptr.cast(), self.len, libc::MS_SYNC) }).unwrap();
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`; no slice of it outlives self.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mmap_reads_and_shared_writes_reach_another_mount_after_msync_and_close() {
    let tc = TestCluster::start(bin(), 2).await.unwrap();
    let a = FuseMount::start(&tc, "");
    let b = FuseMount::start(&tc, "attr_timeout=0.2,entry_timeout=0.2");
    tokio::task::spawn_blocking(move || {
        let len = (3 << 20) + 1234;
        let data = pattern(0, len, 1);
        fs::write(a.path("mapped"), &data).unwrap();
        // B maps what A wrote and closed.
        wait_until("B sees A's file", || {
            fs::metadata(b.path("mapped")).is_ok_and(|m| m.len() == len as u64)
        });
        {
            let f = fs::File::open(b.path("mapped")).unwrap();
            let m = Mapping::new(&f, len, false);
            assert!(m.bytes() == &data[..], "B's mapping differs from A's data");
        }
        // A stores through a shared writable mapping: page, stripe and end boundaries.
        let mut want = data.clone();
        {
            let f = fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(a.path("mapped"))
                .unwrap();
            let mut m = Mapping::new(&f, len, true);
            for off in [0, 4094, (1 << 20) - 1, (2 << 20) + 7, len - 3] {
                m.bytes_mut()[off..off + 3].copy_from_slice(b"MAP");
                want[off..off + 3].copy_from_slice(b"MAP");
            }
            assert!(m.bytes() == &want[..]);
            m.msync();
        }
        assert!(fs::read(a.path("mapped")).unwrap() == want);
        wait_until("B reads A's stores after msync and close", || {
            fs::read(b.path("mapped")).is_ok_and(|d| d == want)
        });
        // ...and sees them through a new mapping too; B's stores travel back to A.
        {
            let f = fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(b.path("mapped"))
                .unwrap();
            let mut m = Mapping::new(&f, len, true);
            assert!(m.bytes() == &want[..], "B's new mapping is stale");
            m.bytes_mut()[100..104].copy_from_slice(b"from");
            want[100..104].copy_from_slice(b"from");
            m.msync();
        }
        wait_until("A reads B's mmap stores", || {
            fs::read(a.path("mapped")).is_ok_and(|d| d == want)
        });
        assert_eq!(fs::metadata(a.path("mapped")).unwrap().len(), len as u64);
    })
    .await
    .unwrap();
}

/// Object files on the cluster's OSTs, and the bytes they take on disk.
fn ost_objects(tc: &TestCluster) -> (usize, u64) {
    fn walk(dir: &Path, acc: &mut (usize, u64)) {
        let Ok(rd) = fs::read_dir(dir) else { return };
        for e in rd.flatten() {
            let Ok(meta) = e.metadata() else { continue };
            if meta.is_dir() {
                walk(&e.path(), acc);
            } else {
                acc.0 += 1;
                acc.1 += meta.blocks() * 512;
            }
        }
    }
    let mut acc = (0, 0);
    for i in 0..tc.osts {
        walk(&tc.dir.path().join(format!("ost{i}")).join("O"), &mut acc);
    }
    acc
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sparse_file_over_4_gib_reads_back_with_holes_as_zeros() {
    let tc = TestCluster::start(bin(), 2).await.unwrap();
    let m = FuseMount::start(&tc, "");
    let tc = std::sync::Arc::new(tc);
    let tc2 = tc.clone();
    tokio::task::spawn_blocking(move || {
        use std::os::unix::fs::FileExt;
        let p = m.path("big-sparse");
        let five = 5u64 << 30;
        let four = 4u64 << 30;
        let f = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&p)
            .unwrap();
        f.write_all_at(b"at five GiB", five).unwrap();
        f.write_all_at(b"across 4 GiB", four - 6).unwrap();
        drop(f);
        let size = five + 11;
        let meta = fs::metadata(&p).unwrap();
        assert_eq!(meta.len(), size);
        let f = fs::File::open(&p).unwrap();
        let mut buf = [0u8; 12];
        f.read_exact_at(&mut buf[..11], five).unwrap();
        assert_eq!(&buf[..11], b"at five GiB");
        f.read_exact_at(&mut buf, four - 6).unwrap();
        assert_eq!(&buf, b"across 4 GiB");
        // Holes below, between and above the 4 GiB line read as zeros.
        let mut hole = vec![1u8; 64 << 10];
        for at in [0, 3 << 30, four + 100, five - (64 << 10)] {
            f.read_exact_at(&mut hole, at).unwrap();
            assert!(hole.iter().all(|&b| b == 0), "hole at {at} is not zeros");
            hole.fill(1);
        }
        assert_eq!(f.read_at(&mut buf, size).unwrap(), 0, "EOF at the size");
        // SEEK_DATA/SEEK_HOLE report the objects' holes (4 KiB blocks): the first data is
        // the block of "across 4 GiB", which ends in the block after it; past the end is
        // ENXIO.
        let fd = f.as_raw_fd_for_test();
        // SAFETY: lseek on an open descriptor.
        let data_at = unsafe { libc::lseek(fd, 4096, libc::SEEK_DATA) };
        assert_eq!(data_at as u64, four - 4096);
        // SAFETY: as above.
        let hole_at = unsafe { libc::lseek(fd, 0, libc::SEEK_HOLE) };
        assert_eq!(hole_at, 0);
        // SAFETY: as above.
        let hole_at = unsafe { libc::lseek(fd, (four - 6) as i64, libc::SEEK_HOLE) };
        assert_eq!(hole_at as u64, four + 4096);
        // SAFETY: as above.
        let past = check(unsafe { libc::lseek(fd, size as i64, libc::SEEK_DATA) } as i32);
        assert_eq!(errno(past), libc::ENXIO);
        // Only the written bytes take space: on the OSTs' disks and in st_blocks.
        let (objects, on_disk) = ost_objects(&tc2);
        assert!(objects >= 1);
        assert!(on_disk < 1 << 20, "{on_disk} bytes on the OSTs' disks");
        let blocks = meta.blocks();
        assert!(
            blocks > 0 && blocks * 512 < 1 << 20,
            "st_blocks {blocks} for {on_disk} bytes on the OSTs' disks"
        );
        // A file without holes takes at least its size (`du`, `tar --sparse` trust it).
        let dense = m.path("dense");
        fs::write(&dense, pattern(0, 3 << 20, 3)).unwrap();
        let blocks = fs::metadata(&dense).unwrap().blocks();
        assert!(blocks * 512 >= 3 << 20, "st_blocks {blocks} for 3 MiB");
        let held = fs::File::open(&dense).unwrap();
        assert!(
            held.metadata().unwrap().blocks() * 512 >= 3 << 20,
            "while open"
        );
    })
    .await
    .unwrap();
    drop(tc);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_unlinked_by_another_mount_stays_usable_until_the_last_close() {
    let tc = std::sync::Arc::new(TestCluster::start(bin(), 2).await.unwrap());
    let a = FuseMount::start(&tc, "");
    let b = FuseMount::start(&tc, "attr_timeout=0.2,entry_timeout=0.2");
    let tc2 = tc.clone();
    tokio::task::spawn_blocking(move || {
        let inodes_used = |m: &FuseMount| {
            // SAFETY: statvfs is plain data; all zeros is a valid value.
            let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
            // SAFETY: statvfs fills the struct it is given; the path is a valid C string.
            check(unsafe { libc::statvfs(cpath(&m.mnt).as_ptr(), &mut st) }).unwrap();
            st.f_files - st.f_ffree
        };
        let before = inodes_used(&a);
        assert_eq!(ost_objects(&tc2).0, 0);
        let data = pattern(0, 2 << 20, 7);
        fs::write(a.path("doomed"), &data).unwrap();
        assert_eq!(inodes_used(&a), before + 1);
        let objects = ost_objects(&tc2).0;
        assert!(objects >= 1);
        let mut keep = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(a.path("doomed"))
            .unwrap();
        // B unlinks it while A has it open.
        wait_until("B sees the file", || b.path("doomed").exists());
        fs::remove_file(b.path("doomed")).unwrap();
        wait_until("A no longer finds the name", || !a.path("doomed").exists());
        let mut got = Vec::new();
        keep.read_to_end(&mut got).unwrap();
        assert!(got == data, "the unlinked file's data changed");
        keep.write_all(b"appended after unlink").unwrap();
        keep.sync_all().unwrap();
        keep.seek(SeekFrom::Start(data.len() as u64)).unwrap();
        let mut tail = String::new();
        keep.read_to_string(&mut tail).unwrap();
        assert_eq!(tail, "appended after unlink");
        assert_eq!(
            keep.metadata().unwrap().len(),
            data.len() as u64 + 21,
            "fstat of the unlinked file"
        );
        assert_eq!(ost_objects(&tc2).0, objects, "objects kept while open");
        assert_eq!(inodes_used(&a), before + 1, "the orphan inode is kept");
        // The last close destroys the inode and, in the background, its objects.
        drop(keep);
        wait_until("the orphan inode is gone", || inodes_used(&a) == before);
        wait_until("the objects are destroyed", || ost_objects(&tc2).0 == 0);
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncates_and_explicit_times_are_not_undone_by_another_descriptor_or_close() {
    let tc = TestCluster::start(bin(), 2).await.unwrap();
    let m = FuseMount::start(&tc, "");
    tokio::task::spawn_blocking(move || {
        // Two descriptors: one wrote, the other truncates; stat and the first one's close
        // must not bring the old size back.
        let p = m.path("shrunk");
        let mut w = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&p)
            .unwrap();
        w.write_all(&[b'w'; 100]).unwrap();
        let t = fs::OpenOptions::new().write(true).open(&p).unwrap();
        t.set_len(10).unwrap();
        assert_eq!(w.metadata().unwrap().len(), 10, "fstat after the truncate");
        assert_eq!(fs::metadata(&p).unwrap().len(), 10);
        drop(t);
        drop(w);
        assert_eq!(fs::read(&p).unwrap(), [b'w'; 10]);

        // Times set on a descriptor that wrote (`cp -p`) stay after its close.
        let q = m.path("stamped");
        let f = fs::File::create(&q).unwrap();
        (&f).write_all(b"written, then stamped").unwrap();
        let then = std::time::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
        f.set_times(fs::FileTimes::new().set_accessed(then).set_modified(then))
            .unwrap();
        drop(f);
        let meta = fs::metadata(&q).unwrap();
        assert_eq!(meta.mtime(), 1_000_000_000, "close re-stamped the mtime");
        assert_eq!(meta.atime(), 1_000_000_000);
        let copy = m.path("copied");
        let st = Command::new("cp")
            .arg("-p")
            .arg(&q)
            .arg(&copy)
            .status()
            .unwrap();
        assert!(st.success());
        assert_eq!(fs::metadata(&copy).unwrap().mtime(), 1_000_000_000);
        assert_eq!(fs::read(&copy).unwrap(), b"written, then stamped");
    })
    .await
    .unwrap();
}

/// Entries of the large-directory test: 10,000 by default (debug builds create a few
/// hundred a second); `WEFT_DIR_ENTRIES=1000000 cargo test --release -p weft-cli --test
/// fuse_posix -- many_entries --nocapture` is the full-size run.
fn dir_entries() -> usize {
    std::env::var("WEFT_DIR_ENTRIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_of_many_entries_lists_and_finds_every_one() {
    let n = dir_entries();
    let tc = TestCluster::start(bin(), 1).await.unwrap();
    let limit = Duration::from_secs(240).max(Duration::from_millis(n as u64 * 20));
    let m = FuseMount::start_with_watchdog(&tc, "", limit);
    tokio::task::spawn_blocking(move || {
        let d = m.path("many");
        fs::create_dir(&d).unwrap();
        let name = |i: usize| format!("f{i:07}");
        // Four creators at once, as a job's ranks would (mknod: no open/close round trips).
        let started = Instant::now();
        let creators: Vec<_> = (0..4)
            .map(|k| {
                let d = d.clone();
                std::thread::spawn(move || {
                    for i in (k..n).step_by(4) {
                        let p = cpath(&d.join(name(i)));
                        // SAFETY: a valid path; mknod of a regular file needs no device.
                        check(unsafe { libc::mknod(p.as_ptr(), libc::S_IFREG | 0o644, 0) })
                            .unwrap();
                    }
                })
            })
            .collect();
        for c in creators {
            c.join().unwrap();
        }
        let created = started.elapsed();
        // Every entry listed exactly once (a small first page with attributes, then pages of
        // 1024 fetched ahead without them).
        let started = Instant::now();
        let mut seen = vec![false; n];
        for e in fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let s = e.file_name().into_string().unwrap();
            let i: usize = s[1..].parse().unwrap();
            assert_eq!(s, name(i));
            assert!(!std::mem::replace(&mut seen[i], true), "{s} listed twice");
        }
        let listed = started.elapsed();
        let missing = seen.iter().filter(|&&s| !s).count();
        assert_eq!(missing, 0, "{missing} entries not listed");
        // Lookups by name, spread over the directory, and one that is not there.
        for i in (0..n).step_by((n / 997).max(1)) {
            assert!(fs::metadata(d.join(name(i))).unwrap().is_file());
        }
        assert_eq!(errno(fs::metadata(d.join(name(n)))), libc::ENOENT);
        assert_eq!(fs::metadata(&d).unwrap().nlink(), 2);
        eprintln!(
            "{n} entries: created in {created:.1?} ({:.0}/s), listed in {listed:.1?}",
            n as f64 / created.as_secs_f64()
        );
    })
    .await
    .unwrap();
}

/// The names `readdir(3)` returns from `dir` until the end, `.` and `..` left out.
fn read_rest(dir: *mut libc::DIR) -> Vec<String> {
    read_some(dir, usize::MAX)
}

/// The next `n` names `readdir(3)` returns from `dir` (fewer at the end), `.` and `..`
/// left out.
fn read_some(dir: *mut libc::DIR, n: usize) -> Vec<String> {
    let mut names = Vec::new();
    while names.len() < n {
        // SAFETY: `dir` is an open stream; the entry readdir returns stays valid until the
        // next call on it, and its name is NUL-terminated.
        let name = unsafe {
            let e = libc::readdir(dir);
            if e.is_null() {
                break;
            }
            std::ffi::CStr::from_ptr((*e).d_name.as_ptr())
                .to_string_lossy()
                .into_owned()
        };
        if name != "." && name != ".." {
            names.push(name);
        }
    }
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seekdir_and_rewinddir_go_back_in_a_listing_fetched_ahead() {
    let tc = TestCluster::start(bin(), 1).await.unwrap();
    let m = FuseMount::start(&tc, "");
    tokio::task::spawn_blocking(move || {
        let d = m.path("seek");
        fs::create_dir(&d).unwrap();
        let n = 5000;
        for i in 0..n {
            let p = cpath(&d.join(format!("e{i:05}")));
            // SAFETY: a valid path; mknod of a regular file needs no device.
            check(unsafe { libc::mknod(p.as_ptr(), libc::S_IFREG | 0o644, 0) }).unwrap();
        }
        let dp = cpath(&d);
        // SAFETY: a valid path; the stream is closed below.
        let dir = unsafe { libc::opendir(dp.as_ptr()) };
        assert!(!dir.is_null());
        // Positions taken inside the first page, at a page boundary's neighbourhood and
        // deep in the pages fetched ahead.
        let marks_at = [10, 63, 64, 65, 700, 1100, 2500, 4999];
        let mut first = Vec::new();
        let mut marks = Vec::new();
        loop {
            let k = first.len();
            if marks_at.contains(&k) {
                // SAFETY: `dir` is open.
                marks.push((k, unsafe { libc::telldir(dir) }));
            }
            // SAFETY: as in `read_rest`, one entry at a time.
            let e = unsafe { libc::readdir(dir) };
            if e.is_null() {
                break;
            }
            // SAFETY: the entry just returned, NUL-terminated.
            let name = unsafe { std::ffi::CStr::from_ptr((*e).d_name.as_ptr()) };
            let name = name.to_string_lossy().into_owned();
            if name != "." && name != ".." {
                first.push(name);
            }
        }
        let distinct: BTreeSet<&String> = first.iter().collect();
        assert_eq!((first.len(), distinct.len()), (n, n), "every entry once");
        assert_eq!(marks.len(), marks_at.len());
        // Back to each position, latest first: the listing goes on from there as before.
        for (k, pos) in marks.iter().rev() {
            // SAFETY: `dir` is open; `pos` came from telldir on it.
            unsafe { libc::seekdir(dir, *pos) };
            assert_eq!(read_rest(dir), first[*k..], "after seekdir to entry {k}");
        }
        // From the middle of a listing, while pages are being fetched ahead of it: back,
        // and forward past them.
        for (k, pos) in &marks {
            // SAFETY: `dir` is open.
            unsafe { libc::rewinddir(dir) };
            assert_eq!(read_some(dir, 1100), first[..1100]);
            // SAFETY: `dir` is open; `pos` came from telldir on it.
            unsafe { libc::seekdir(dir, *pos) };
            assert_eq!(
                read_rest(dir),
                first[*k..],
                "after reading 1100, seekdir to {k}"
            );
        }
        // SAFETY: `dir` is open.
        unsafe { libc::rewinddir(dir) };
        assert_eq!(read_rest(dir), first, "after rewinddir");
        // SAFETY: opened above, closed once.
        assert_eq!(unsafe { libc::closedir(dir) }, 0);
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_is_read_through_every_other_descriptor_at_once() {
    let tc = TestCluster::start(bin(), 2).await.unwrap();
    let m = FuseMount::start(&tc, "");
    tokio::task::spawn_blocking(move || {
        use std::os::unix::fs::FileExt;
        let p = m.path("shared-fds");
        fs::write(&p, vec![b'a'; 100_000]).unwrap();
        let w = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&p)
            .unwrap();
        let r = fs::File::open(&p).unwrap();
        let mut all = vec![0u8; 100_000];
        r.read_exact_at(&mut all, 0).unwrap();
        // A partial page written through `w`, still buffered in w's handle when read.
        w.write_all_at(b"XYZ", 50_001).unwrap();
        let mut got = [0u8; 10];
        r.read_exact_at(&mut got, 50_000).unwrap();
        assert_eq!(&got, b"aXYZaaaaaa", "through the kernel's pages");
        // Without the kernel's pages (memory pressure drops them the same way).
        w.write_all_at(b"123", 70_001).unwrap();
        // SAFETY: fadvise on an open descriptor.
        let rc =
            unsafe { libc::posix_fadvise(r.as_raw_fd_for_test(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        assert_eq!(rc, 0);
        r.read_exact_at(&mut got, 70_000).unwrap();
        assert_eq!(&got, b"a123aaaaaa", "through another descriptor");
        let fresh = fs::File::open(&p).unwrap();
        fresh.read_exact_at(&mut got, 50_000).unwrap();
        assert_eq!(&got, b"aXYZaaaaaa", "through a new descriptor");
    })
    .await
    .unwrap();
}
