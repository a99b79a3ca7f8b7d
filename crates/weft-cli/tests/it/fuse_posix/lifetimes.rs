//! Sparse files over 4 GiB, unlinked files kept until their last close, truncates and times
//! across descriptors, large directories and seekdir, writes seen through every descriptor.

use super::*;

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
        let fd = f.as_raw_fd();
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
        let (objects, on_disk) = tc2.ost_objects();
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
        assert_eq!(tc2.ost_objects().0, 0);
        let data = pattern(0, 2 << 20, 7);
        fs::write(a.path("doomed"), &data).unwrap();
        assert_eq!(inodes_used(&a), before + 1);
        let objects = tc2.ost_objects().0;
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
        assert_eq!(tc2.ost_objects().0, objects, "objects kept while open");
        assert_eq!(inodes_used(&a), before + 1, "the orphan inode is kept");
        // The last close destroys the inode and, in the background, its objects.
        drop(keep);
        wait_until("the orphan inode is gone", || inodes_used(&a) == before);
        wait_until("the objects are destroyed", || tc2.ost_objects().0 == 0);
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
        let rc = unsafe { libc::posix_fadvise(r.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
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
