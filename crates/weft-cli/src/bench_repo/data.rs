//! The benchmark's data: the objects of the two datasets, their byte pattern (cheap to make
//! and to check, different for every object), and the local readers and writers (OS
//! threads taking files from a shared queue, 1 MiB buffers, every byte checked).

use anyhow::{Context, Result, bail};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The size of one read or write call of the local readers and writers.
pub const IO_BUF: usize = 1 << 20;
/// Small objects are spread over this many directories (`small/dNN/`), as an image data
/// set's class directories.
pub const SMALL_DIRS: u64 = 100;

/// One of the two datasets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dataset {
    Small,
    Large,
}

impl Dataset {
    pub fn name(self) -> &'static str {
        match self {
            Dataset::Small => "small",
            Dataset::Large => "large",
        }
    }
}

/// One object of a dataset, and the file it becomes.
#[derive(Debug, Clone)]
pub struct Obj {
    /// Its path below the prefix and below the linked directory: `small/d07/000107.bin`.
    pub rel: String,
    pub size: u64,
    /// Selects its byte pattern.
    pub seed: u64,
}

/// The objects of `dataset`: `count` objects of `size` bytes each.
pub fn objects(dataset: Dataset, count: u64, size: u64) -> Vec<Obj> {
    (0..count)
        .map(|i| {
            let rel = match dataset {
                Dataset::Small => format!("small/d{:02}/{i:06}.bin", i % SMALL_DIRS),
                Dataset::Large => format!("large/{i:03}.bin"),
            };
            let tag = match dataset {
                Dataset::Small => 1u64,
                Dataset::Large => 2,
            };
            Obj {
                rel,
                size,
                seed: splitmix((tag << 40) | i),
            }
        })
        .collect()
}

fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The 8-byte word `w` (little endian, at byte offset `8 * w`) of the pattern `seed`.
#[inline]
fn word(seed: u64, w: u64) -> u64 {
    let x = w.wrapping_add(seed).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^ (x >> 29)
}

#[inline]
fn byte(seed: u64, pos: u64) -> u8 {
    word(seed, pos / 8).to_le_bytes()[(pos % 8) as usize]
}

/// Fills `buf` with the pattern `seed` from byte `offset` of the object.
pub fn fill(seed: u64, offset: u64, buf: &mut [u8]) {
    let head = (((8 - offset % 8) % 8) as usize).min(buf.len());
    let (h, rest) = buf.split_at_mut(head);
    for (i, b) in h.iter_mut().enumerate() {
        *b = byte(seed, offset + i as u64);
    }
    let start = offset + head as u64;
    let tail_start = start + (rest.len() / 8 * 8) as u64;
    let mut chunks = rest.chunks_exact_mut(8);
    for (i, c) in (&mut chunks).enumerate() {
        c.copy_from_slice(&word(seed, start / 8 + i as u64).to_le_bytes());
    }
    let tail = chunks.into_remainder();
    for (i, b) in tail.iter_mut().enumerate() {
        *b = byte(seed, tail_start + i as u64);
    }
}

/// The pattern `seed` from `offset`, `len` bytes.
pub fn pattern(seed: u64, offset: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    fill(seed, offset, &mut v);
    v
}

/// Checks `buf` against the pattern `seed` from byte `offset`: the offset of the first
/// byte that differs, if any.
pub fn check(seed: u64, offset: u64, buf: &[u8]) -> Option<u64> {
    let head = (((8 - offset % 8) % 8) as usize).min(buf.len());
    let start = offset + head as u64;
    let chunks = buf[head..].chunks_exact(8);
    let tail_at = head + (buf.len() - head) / 8 * 8;
    // Every word compared and the differences folded: no branch per word.
    let mut diff = 0u64;
    for (i, c) in chunks.enumerate() {
        let mut a = [0u8; 8];
        a.copy_from_slice(c);
        diff |= u64::from_le_bytes(a) ^ word(seed, start / 8 + i as u64);
    }
    let bad_bytes = |range: std::ops::Range<usize>| {
        range
            .into_iter()
            .find(|&i| buf[i] != byte(seed, offset + i as u64))
    };
    if diff != 0 {
        return bad_bytes(0..buf.len()).map(|i| offset + i as u64);
    }
    bad_bytes(0..head)
        .or_else(|| bad_bytes(tail_at..buf.len()))
        .map(|i| offset + i as u64)
}

/// A file a reader reads: where, how big, which pattern.
#[derive(Debug, Clone)]
pub struct FileJob {
    pub path: PathBuf,
    pub size: u64,
    pub seed: u64,
}

/// The files of `objs` below `dir`.
pub fn jobs(dir: &Path, objs: &[Obj]) -> Vec<FileJob> {
    objs.iter()
        .map(|o| FileJob {
            path: dir.join(&o.rel),
            size: o.size,
            seed: o.seed,
        })
        .collect()
}

/// What a phase moved and how long it took.
#[derive(Debug, Clone, Copy, Default)]
pub struct Moved {
    pub files: u64,
    pub bytes: u64,
    pub elapsed: Duration,
}

/// Reads every file of `jobs` whole with `workers` threads (each takes the next file from
/// a shared queue; 1 MiB reads), checking every byte against its pattern and its size.
pub fn read_all(jobs: &[FileJob], workers: usize) -> Result<Moved> {
    let next = AtomicUsize::new(0);
    let start = Instant::now();
    let bytes = run_workers(workers, || {
        let mut buf = vec![0u8; IO_BUF];
        let mut total = 0u64;
        while let Some(job) = jobs.get(next.fetch_add(1, Ordering::Relaxed)) {
            total += read_one(job, &mut buf)?;
        }
        Ok(total)
    })?;
    Ok(Moved {
        files: jobs.len() as u64,
        bytes,
        elapsed: start.elapsed(),
    })
}

fn read_one(job: &FileJob, buf: &mut [u8]) -> Result<u64> {
    let mut f = std::fs::File::open(&job.path)
        .with_context(|| format!("cannot open {}", job.path.display()))?;
    let mut offset = 0u64;
    loop {
        // Fill the whole buffer (short reads happen) so that checks stay word-aligned.
        let mut n = 0;
        while n < buf.len() {
            match f.read(&mut buf[n..]) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(e).with_context(|| {
                        format!(
                            "reading {} at offset {}",
                            job.path.display(),
                            offset + n as u64
                        )
                    });
                }
            }
        }
        if n == 0 {
            break;
        }
        if let Some(at) = check(job.seed, offset, &buf[..n]) {
            bail!(
                "{}: the byte at offset {at} differs from the object's pattern",
                job.path.display()
            );
        }
        offset += n as u64;
    }
    if offset != job.size {
        bail!(
            "{}: read {offset} bytes, the object has {}",
            job.path.display(),
            job.size
        );
    }
    Ok(offset)
}

/// Writes every file of `jobs` (their directories made first) with `workers` threads, in
/// 1 MiB writes of the pattern, each file closed after an `fsync` when `sync` is set.
pub fn write_all(jobs: &[FileJob], workers: usize, sync: bool) -> Result<Moved> {
    let mut dirs: Vec<&Path> = jobs.iter().filter_map(|j| j.path.parent()).collect();
    dirs.sort_unstable();
    dirs.dedup();
    for d in dirs {
        std::fs::create_dir_all(d).with_context(|| format!("cannot create {}", d.display()))?;
    }
    let next = AtomicUsize::new(0);
    let start = Instant::now();
    let bytes = run_workers(workers, || {
        let mut buf = vec![0u8; IO_BUF];
        let mut total = 0u64;
        while let Some(job) = jobs.get(next.fetch_add(1, Ordering::Relaxed)) {
            let mut f = std::fs::File::create(&job.path)
                .with_context(|| format!("cannot create {}", job.path.display()))?;
            let mut offset = 0u64;
            while offset < job.size {
                let n = (job.size - offset).min(IO_BUF as u64) as usize;
                fill(job.seed, offset, &mut buf[..n]);
                f.write_all(&buf[..n])
                    .with_context(|| format!("writing {}", job.path.display()))?;
                offset += n as u64;
            }
            if sync {
                f.sync_all()
                    .with_context(|| format!("fsync of {}", job.path.display()))?;
            }
            total += offset;
        }
        Ok(total)
    })?;
    Ok(Moved {
        files: jobs.len() as u64,
        bytes,
        elapsed: start.elapsed(),
    })
}

/// Runs `work` on `workers` scoped threads; the sum of their results, or the first error.
fn run_workers(workers: usize, work: impl Fn() -> Result<u64> + Sync) -> Result<u64> {
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers.max(1)).map(|_| s.spawn(&work)).collect();
        let mut total = 0;
        let mut first_err = None;
        for h in handles {
            match h.join() {
                Ok(Ok(n)) => total += n,
                Ok(Err(e)) => {
                    first_err.get_or_insert(e);
                }
                Err(_) => {
                    first_err.get_or_insert(anyhow::anyhow!("a worker thread panicked"));
                }
            }
        }
        first_err.map_or(Ok(total), Err)
    })
}

/// Empties the kernel's page cache, dentries and inodes (`sync`, then
/// `echo 3 > /proc/sys/vm/drop_caches`); false when that is not allowed (not root).
pub fn drop_caches() -> bool {
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3\n").is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_check_at_any_offset_and_differ_between_objects() {
        let whole = pattern(7, 0, 10_000);
        for (off, len) in [(0, 10_000), (3, 100), (8, 16), (13, 1), (9_990, 10)] {
            assert_eq!(
                pattern(7, off, len),
                whole[off as usize..off as usize + len]
            );
            assert_eq!(
                check(7, off, &whole[off as usize..off as usize + len]),
                None
            );
        }
        let mut bad = whole.clone();
        bad[5_001] ^= 1;
        assert_eq!(check(7, 0, &bad), Some(5_001));
        assert_eq!(check(7, 4_999, &bad[4_999..5_003]), Some(5_001));
        assert!(check(8, 0, &whole).is_some());
        let objs = objects(Dataset::Small, 3, 10);
        assert_ne!(objs[0].seed, objs[1].seed);
        assert_eq!(objs[2].rel, "small/d02/000002.bin");
    }

    #[test]
    fn files_written_read_back_and_a_changed_byte_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let mut objs = objects(Dataset::Small, 5, 3 << 19);
        objs.extend(objects(Dataset::Large, 1, 7));
        let jobs = jobs(dir.path(), &objs);
        let w = write_all(&jobs, 3, false).unwrap();
        assert_eq!((w.files, w.bytes), (6, 5 * (3 << 19) + 7));
        let r = read_all(&jobs, 2).unwrap();
        assert_eq!((r.files, r.bytes), (6, w.bytes));
        let mut data = std::fs::read(&jobs[1].path).unwrap();
        data[(1 << 20) + 3] ^= 0x40;
        std::fs::write(&jobs[1].path, &data).unwrap();
        let e = read_all(&jobs, 2).unwrap_err().to_string();
        assert!(e.contains("offset 1048579"), "{e}");
        std::fs::write(&jobs[0].path, &data[..10]).unwrap();
        assert!(read_all(&jobs[..1], 1).is_err());
    }
}
