//! Sparse files through a real FUSE mount (`weft mount` over separate server processes):
//! reads inside a file that grew past a hole, reads through one descriptor after another
//! moved the end, hole punching and zeroing (`fallocate(2)`), `SEEK_DATA`/`SEEK_HOLE`,
//! on files of one stripe and striped over four OSTs, with ranges that cross stripe and
//! object boundaries.

use crate::bin;
use crate::fuse_common::{FuseMount, create_with_layout, fallocate, seek_data_or_hole};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::process::Command;
use weft_proto::layout::LayoutTemplate;
use weft_testkit::pattern;
use weft_testkit::{FSNAME, TestCluster};

const MIB: u64 = 1 << 20;
/// The block size of the OSTs' file systems (ext4, tmpfs): what a hole is made of.
const BLOCK: u64 = 4096;

/// The layouts every test runs on: the default one stripe of 1 MiB, and four stripes of
/// 64 KiB (ranges cross stripes and objects every 64 KiB).
fn layouts() -> [(&'static str, LayoutTemplate); 2] {
    [
        ("one-stripe", LayoutTemplate::raid0(1, MIB, -1)),
        ("four-stripes", LayoutTemplate::raid0(4, 64 << 10, -1)),
    ]
}

/// `lseek(2)` with `whence`; `None` for ENXIO, which is the only error expected.
fn seek(f: &File, offset: u64, whence: i32) -> Option<u64> {
    seek_data_or_hole(f, offset, whence)
        .unwrap_or_else(|e| panic!("lseek({offset}, {whence}): {e}"))
}

/// Reads `len` bytes at `offset` in one pread, asserting it is not short.
fn read_full(f: &File, offset: u64, len: u64) -> Vec<u8> {
    let mut buf = vec![0u8; len as usize];
    let n = f.read_at(&mut buf, offset).unwrap();
    assert_eq!(
        n as u64, len,
        "short read of {len:#x} at {offset:#x}: {n:#x}"
    );
    buf
}

/// The first offset in `expect` where `got` differs, for a readable failure.
fn first_difference(got: &[u8], expect: &[u8]) -> Option<usize> {
    got.iter().zip(expect).position(|(a, b)| a != b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_inside_a_file_that_grew_past_a_hole_is_not_short() {
    let tc = TestCluster::start(bin(), 4).await.unwrap();
    let m = FuseMount::start(&tc, "");
    let path = m.path("grown");
    tokio::task::spawn_blocking(move || {
        // The sequence of issue 29: the reader has cached the old end of file (the last
        // cache page ends short), then a write far past it leaves a hole.
        let f = OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        f.write_all_at(&vec![b'a'; 0xec6656], 0).unwrap();
        drop(f);
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        read_full(&f, 0xe96d23, 0x2f933);
        f.write_all_at(&vec![b'b'; 0x49fa], 0xffb606).unwrap();
        let got = read_full(&f, 0xea3eb7, 0xcf051);
        let split = (0xec6656 - 0xea3eb7) as usize;
        assert!(got[..split].iter().all(|&b| b == b'a'));
        assert!(
            got[split..].iter().all(|&b| b == 0),
            "the hole reads as zeros"
        );
        // A read that stays inside the page holding the old end (the kernel's 128 KiB
        // requests do), past that end: zeros, not nothing.
        assert!(read_full(&f, 0xec8000, 0x1000).iter().all(|&b| b == 0));
        assert_eq!(fs::metadata(&path).unwrap().len(), 0x1000000);
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_through_one_descriptor_sees_the_end_another_moved() {
    let tc = TestCluster::start(bin(), 4).await.unwrap();
    let m = FuseMount::start(&tc, "");
    let path = m.path("two-fds");
    tokio::task::spawn_blocking(move || {
        fs::write(&path, pattern(0, (2 * MIB) as usize, 1)).unwrap();
        let reader = File::open(&path).unwrap();
        let writer = OpenOptions::new().write(true).open(&path).unwrap();
        read_full(&reader, 0, 2 * MIB);
        // Extended through the other descriptor, past a hole.
        writer
            .write_all_at(&pattern(0, MIB as usize, 2), 5 * MIB)
            .unwrap();
        let got = read_full(&reader, MIB, 5 * MIB);
        assert_eq!(
            &got[..MIB as usize],
            &pattern(0, (2 * MIB) as usize, 1)[MIB as usize..]
        );
        assert!(got[MIB as usize..4 * MIB as usize].iter().all(|&b| b == 0));
        assert_eq!(&got[4 * MIB as usize..], &pattern(0, MIB as usize, 2)[..]);
        // Cut and grown again through the other descriptor: the reader follows both.
        writer.set_len(MIB / 2).unwrap();
        writer.set_len(3 * MIB).unwrap();
        let got = read_full(&reader, 0, 3 * MIB);
        assert_eq!(
            &got[..MIB as usize / 2],
            &pattern(0, (MIB / 2) as usize, 1)[..]
        );
        assert!(got[MIB as usize / 2..].iter().all(|&b| b == 0));
    })
    .await
    .unwrap();
}

/// Which 4 KiB blocks of a file hold data, as the OSTs' file systems allocate them: a
/// write allocates every block it touches; a punch frees the blocks it covers whole.
struct BlockModel {
    data: Vec<bool>,
}

impl BlockModel {
    fn write(&mut self, offset: u64, len: u64) {
        let (a, b) = (offset / BLOCK, (offset + len).div_ceil(BLOCK));
        if self.data.len() < b as usize {
            self.data.resize(b as usize, false);
        }
        for i in a..b {
            self.data[i as usize] = true;
        }
    }

    fn punch(&mut self, offset: u64, len: u64, size: u64) {
        let end = (offset + len).min(size);
        let (a, b) = (offset.div_ceil(BLOCK), end / BLOCK);
        // The file's last block, cut by its end, is freed by a punch reaching the end.
        let b = if end == size { end.div_ceil(BLOCK) } else { b };
        for i in a..b.min(self.data.len() as u64) {
            self.data[i as usize] = false;
        }
    }

    fn is_data(&self, offset: u64) -> bool {
        self.data
            .get((offset / BLOCK) as usize)
            .copied()
            .unwrap_or(false)
    }

    /// What SEEK_DATA (or SEEK_HOLE, with `hole`) must answer at `offset`.
    fn seek(&self, offset: u64, size: u64, hole: bool) -> Option<u64> {
        if offset >= size {
            return None;
        }
        let mut at = offset;
        while at < size {
            if self.is_data(at) != hole {
                return Some(at);
            }
            at = (at / BLOCK + 1) * BLOCK;
        }
        hole.then_some(size)
    }
}

/// Punches and zeroes ranges of a 24 MiB file at random (seeded) and checks every byte
/// and every SEEK_DATA/SEEK_HOLE answer against a model after each step.
fn punch_zero_and_seek(path: &Path, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let size = 24 * MIB;
    let mut shadow = pattern(0, size as usize, 7);
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    f.write_all_at(&shadow, 0).unwrap();
    let mut model = BlockModel { data: Vec::new() };
    model.write(0, size);
    f.sync_all().unwrap();
    for step in 0..40 {
        // Mostly unaligned ranges up to 3 MiB; some cover whole stripes and objects.
        let offset = rng.random_range(0..size);
        let len = rng.random_range(1..=3 * MIB).min(size - offset);
        let what = rng.random_range(0..4);
        match what {
            0 | 1 => {
                fallocate(
                    &f,
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    offset,
                    len,
                )
                .unwrap();
                model.punch(offset, len, size);
            }
            2 => {
                fallocate(&f, libc::FALLOC_FL_ZERO_RANGE, offset, len).unwrap();
                model.punch(offset, len, size);
            }
            _ => {
                // Data again, in the middle of holes.
                let data = pattern(0, len as usize, u64::from(step as u8));
                f.write_all_at(&data, offset).unwrap();
                shadow[offset as usize..(offset + len) as usize].copy_from_slice(&data);
                model.write(offset, len);
                continue;
            }
        }
        shadow[offset as usize..(offset + len) as usize].fill(0);
        assert_eq!(f.metadata().unwrap().len(), size, "the size is kept");
        let got = read_full(&f, 0, size);
        assert_eq!(
            first_difference(&got, &shadow),
            None,
            "step {step}: contents after {what} of {len:#x} at {offset:#x}"
        );
        for _ in 0..16 {
            let at = rng.random_range(0..size + MIB);
            for (whence, hole) in [(libc::SEEK_DATA, false), (libc::SEEK_HOLE, true)] {
                assert_eq!(
                    seek(&f, at, whence),
                    model.seek(at, size, hole),
                    "step {step}: lseek({at:#x}, {})",
                    if hole { "SEEK_HOLE" } else { "SEEK_DATA" }
                );
            }
        }
    }
    // A range zeroed past the end grows the file, as on a local file system; with
    // KEEP_SIZE it does not.
    fallocate(
        &f,
        libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE,
        size - 10,
        100,
    )
    .unwrap();
    assert_eq!(f.metadata().unwrap().len(), size);
    fallocate(&f, libc::FALLOC_FL_ZERO_RANGE, size - 10, 100).unwrap();
    assert_eq!(f.metadata().unwrap().len(), size + 90);
    assert!(read_full(&f, size - 10, 100).iter().all(|&b| b == 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn punched_and_zeroed_ranges_read_as_zeros_and_seek_finds_the_holes() {
    let tc = TestCluster::start(bin(), 4).await.unwrap();
    for (seed, (name, layout)) in layouts().into_iter().enumerate() {
        create_with_layout(&tc, name, layout).await;
        let m = FuseMount::start(&tc, "");
        let path = m.path(name);
        tokio::task::spawn_blocking(move || punch_zero_and_seek(&path, seed as u64))
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sparse_files_written_with_holes_report_them_and_copy_sparse() {
    let tc = TestCluster::start(bin(), 4).await.unwrap();
    create_with_layout(&tc, "striped", LayoutTemplate::raid0(4, 64 << 10, -1)).await;
    let m = FuseMount::start(&tc, "");
    let path = m.path("striped");
    let copy = m.dir.path().join("copy");
    tokio::task::spawn_blocking(move || {
        // Data at 1 MiB and at 10 MiB + 100 KiB (inside a stripe of the second round).
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        f.write_all_at(&pattern(0, (200 << 10) as usize, 3), MIB)
            .unwrap();
        f.write_all_at(&pattern(0, (8 << 10) as usize, 4), 10 * MIB + (100 << 10))
            .unwrap();
        f.set_len(16 * MIB).unwrap();
        // Buffered writes count without an fsync.
        assert_eq!(seek(&f, 0, libc::SEEK_DATA), Some(MIB));
        assert_eq!(seek(&f, MIB, libc::SEEK_HOLE), Some(MIB + (200 << 10)));
        assert_eq!(
            seek(&f, MIB + (200 << 10), libc::SEEK_DATA),
            Some(10 * MIB + (100 << 10))
        );
        assert_eq!(
            seek(&f, 10 * MIB + (100 << 10), libc::SEEK_HOLE),
            Some(10 * MIB + (108 << 10))
        );
        assert_eq!(seek(&f, 11 * MIB, libc::SEEK_DATA), None);
        assert_eq!(seek(&f, 11 * MIB, libc::SEEK_HOLE), Some(11 * MIB));
        assert_eq!(seek(&f, MIB + 5, libc::SEEK_DATA), Some(MIB + 5));
        assert_eq!(seek(&f, 16 * MIB, libc::SEEK_HOLE), None);
        drop(f);
        // cp --sparse=always keeps the holes: the copy (on the local disk) takes about
        // the data's blocks, not the file's 16 MiB.
        let out = Command::new("cp")
            .arg("--sparse=always")
            .arg(&path)
            .arg(&copy)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        assert_eq!(fs::read(&copy).unwrap(), fs::read(&path).unwrap());
        let blocks = fs::metadata(&copy).unwrap().blocks() * 512;
        assert!(blocks <= MIB, "the copy holds {blocks} bytes of blocks");
    })
    .await
    .unwrap();
}

/// Used kibibytes of every OST, as `weft df --json` shows them.
fn df_used_kib(tc: &TestCluster) -> u64 {
    let spec = format!("{}:/{FSNAME}", tc.mgs_addr);
    let out = Command::new(bin())
        .args(["df", "--json", &spec])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["summary"]["used"].as_u64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn punched_space_goes_back_to_the_osts_as_weft_df_shows() {
    // Each OST on a tmpfs of its own: nothing else moves the figures.
    let tc = TestCluster::start_with_ost_size(bin(), 4, Some(256 * MIB))
        .await
        .unwrap();
    create_with_layout(&tc, "big", LayoutTemplate::raid0(4, MIB, -1)).await;
    let m = FuseMount::start(&tc, "");
    let path = m.path("big");
    let tc = tokio::task::spawn_blocking(move || {
        let before = df_used_kib(&tc);
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        f.write_all_at(&pattern(0, (64 * MIB) as usize, 5), 0)
            .unwrap();
        f.sync_all().unwrap();
        let written = df_used_kib(&tc);
        assert!(written >= before + 63 * 1024, "{before} -> {written} KiB");
        // Everything but the first and last MiB, unaligned at both ends.
        fallocate(
            &f,
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            MIB - 1000,
            62 * MIB + 2000,
        )
        .unwrap();
        let punched = df_used_kib(&tc);
        assert!(
            punched + 61 * 1024 <= written,
            "punching 62 MiB freed only {} KiB",
            written - punched
        );
        assert_eq!(f.metadata().unwrap().len(), 64 * MIB);
        let got = read_full(&f, 0, 64 * MIB);
        let mut expect = pattern(0, (64 * MIB) as usize, 5);
        expect[(MIB - 1000) as usize..(63 * MIB + 1000) as usize].fill(0);
        assert_eq!(first_difference(&got, &expect), None);
        tc
    })
    .await
    .unwrap();
    drop(m);
    drop(tc);
}
