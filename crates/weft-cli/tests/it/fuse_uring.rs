//! FUSE over io_uring through a real mount (`-o uring=on`, Linux 6.14+ with the fuse
//! module's `enable_uring`, which the test switches on and restores): the mount says which
//! transport it uses (`llite.*.fuse_transport`) and counts what came through the rings,
//! and file work gives the same results over the ring as over `/dev/fuse`.

use crate::bin;
use crate::fuse_client_params::instance_of;
use crate::fuse_common::{EnableUring, FuseMount};
use crate::support::weft;
use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use weft_testkit::TestCluster;

/// The value of `llite.INST.NAME` on this node.
fn param(inst: &str, name: &str) -> String {
    let full = format!("llite.{inst}.{name}");
    let (ok, out, err) = weft(&["get_param", &full]);
    assert!(ok, "{err}");
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("{full}=")))
        .unwrap_or_else(|| panic!("no {full}: {out}"))
        .to_string()
}

/// Creates, writes, reads back, lists, renames, stats and removes files on `m`, from
/// several threads at once (so that requests come from both CPUs' queues).
fn file_work(m: &FuseMount, tag: &str) {
    let dir = m.path(tag);
    fs::create_dir(&dir).unwrap();
    // One big file: 3 MiB and a bit, written in pieces and whole.
    let big: Vec<u8> = (0..(3 << 20) + 4321u32).map(|i| (i % 251) as u8).collect();
    let a = dir.join("big");
    fs::write(&a, &big).unwrap();
    assert_eq!(fs::read(&a).unwrap(), big);
    let mut f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&a)
        .unwrap();
    f.seek(SeekFrom::Start(1 << 20)).unwrap();
    f.write_all(b"over io_uring").unwrap();
    f.sync_all().unwrap();
    let mut back = vec![0u8; 13];
    f.seek(SeekFrom::Start(1 << 20)).unwrap();
    f.read_exact(&mut back).unwrap();
    assert_eq!(&back, b"over io_uring");
    drop(f);
    assert_eq!(fs::metadata(&a).unwrap().len(), big.len() as u64);

    // Small files from four threads.
    std::thread::scope(|s| {
        for t in 0..4 {
            let dir = &dir;
            s.spawn(move || {
                for i in 0..40 {
                    let p = dir.join(format!("t{t}-{i}"));
                    let body = format!("thread {t} file {i}");
                    fs::write(&p, &body).unwrap();
                    assert_eq!(fs::read_to_string(&p).unwrap(), body);
                    assert_eq!(fs::metadata(&p).unwrap().len(), body.len() as u64);
                }
            });
        }
    });
    let mut names: Vec<String> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names.len(), 161, "{names:?}");
    assert!(names.contains(&"big".to_string()));

    // Rename, unlink, stat of what is gone.
    let b = dir.join("renamed");
    fs::rename(&a, &b).unwrap();
    assert_eq!(
        fs::metadata(&a).map(drop).map_err(|e| e.raw_os_error()),
        Err(Some(libc::ENOENT))
    );
    let st = fs::metadata(&b).unwrap();
    assert_eq!(st.len(), big.len() as u64);
    assert_eq!(st.nlink(), 1);
    for t in 0..4 {
        for i in 0..40 {
            fs::remove_file(dir.join(format!("t{t}-{i}"))).unwrap();
        }
    }
    fs::remove_file(&b).unwrap();
    assert_eq!(fs::read_dir(&dir).unwrap().count(), 0);
    fs::remove_dir(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mount_serves_over_io_uring_and_over_dev_fuse() {
    let Some(_uring) = EnableUring::acquire() else {
        eprintln!("skipped: this kernel has no FUSE over io_uring (no enable_uring parameter)");
        return;
    };
    let tc = TestCluster::start(bin(), 2).await.unwrap();

    let ring = FuseMount::start(&tc, "uring=on");
    let inst = instance_of(&ring.mnt);
    assert_eq!(param(&inst, "fuse_transport"), "uring");
    file_work(&ring, "ring");
    let served: u64 = param(&inst, "fuse_ring_requests").parse().unwrap();
    assert!(served > 500, "only {served} requests came through the ring");

    // `auto` (the default outside the tests) takes the ring when the kernel offers it.
    let auto = FuseMount::start(&tc, "uring=auto");
    assert_eq!(param(&instance_of(&auto.mnt), "fuse_transport"), "uring");
    fs::write(auto.path("auto"), b"auto").unwrap();
    assert_eq!(fs::read(ring.path("auto")).unwrap(), b"auto");
    fs::remove_file(auto.path("auto")).unwrap();
    drop(auto);

    let dev = FuseMount::start(&tc, "uring=off");
    let inst = instance_of(&dev.mnt);
    assert_eq!(param(&inst, "fuse_transport"), "dev_fuse");
    file_work(&dev, "dev");
    assert_eq!(param(&inst, "fuse_ring_requests"), "0");
}
