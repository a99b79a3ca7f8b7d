//! Two mounts of one file system, concurrent requests, the mount helper, writeback-cache
//! and direct-I/O mounts, and shared mmap across mounts.

use super::*;

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
                f.as_raw_fd(),
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
