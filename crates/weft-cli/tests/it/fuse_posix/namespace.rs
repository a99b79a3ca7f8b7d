//! Names, attributes, links, FIFOs, xattrs, statfs, errnos, other users' permissions, file
//! data, and a directory of thousands.

use super::*;

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
        check(unsafe { libc::posix_fallocate(fa.as_raw_fd(), 0, 8 << 20) }).unwrap();
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
