//! A random-operation exerciser in the manner of fsx, for what fsx cannot do: one file
//! reached through several mounts of one file system, used one mount at a time with
//! close-to-open between them, and the operations fsx 0.3.2 lacks (`FALLOC_FL_ZERO_RANGE`,
//! `SEEK_DATA`/`SEEK_HOLE`). Every read, every size and every seek answer is checked
//! against a shadow copy of the file; a failure names the seed, the operation number and
//! the operations before it.

use crate::fuse_common::{fallocate, seek_data_or_hole};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

/// What a run does.
pub struct Config {
    /// The same file through each mount.
    pub paths: Vec<PathBuf>,
    /// Largest file size.
    pub flen: u64,
    /// Largest read, write, copy, punch or zeroed range.
    pub max_op: u64,
    /// Operations in all.
    pub ops: u64,
    /// Most operations in one open of the file (on one mount) before it is closed and
    /// opened again on a mount picked at random.
    pub ops_per_open: u64,
    pub seed: u64,
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Read,
    Write,
    Truncate,
    Allocate,
    Punch,
    ZeroRange { keep_size: bool },
    CopyRange,
    Fsync,
    Seek,
}

/// Relative weights, as in fsx's configurations of this crate.
const WEIGHTS: [(u32, Op); 10] = [
    (10, Op::Read),
    (10, Op::Write),
    (2, Op::Truncate),
    (1, Op::Allocate),
    (1, Op::Punch),
    (1, Op::ZeroRange { keep_size: true }),
    (1, Op::ZeroRange { keep_size: false }),
    (1, Op::CopyRange),
    (1, Op::Fsync),
    (2, Op::Seek),
];

/// How many of the last operations a failure report shows.
const HISTORY: usize = 40;

struct Run<'a> {
    cfg: &'a Config,
    rng: StdRng,
    shadow: Vec<u8>,
    history: VecDeque<String>,
    step: u64,
}

fn libc_result(r: libc::c_long) -> io::Result<u64> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as u64)
    }
}

/// Copies `len` bytes from `src` to `dst` in the same file with copy_file_range(2),
/// which may copy less per call.
fn copy_range(f: &File, src: u64, dst: u64, len: u64) -> io::Result<()> {
    let (mut src, mut dst, mut left) = (src as i64, dst as i64, len as usize);
    while left > 0 {
        let fd = f.as_raw_fd();
        // SAFETY: copy_file_range(2) between offsets of one open descriptor; the offset
        // pointers are to live locals.
        let r = unsafe { libc::copy_file_range(fd, &mut src, fd, &mut dst, left, 0) };
        let n = libc_result(r as libc::c_long)?;
        if n == 0 {
            return Err(io::Error::other("copy_file_range copied nothing"));
        }
        left -= n as usize;
    }
    Ok(())
}

impl Run<'_> {
    fn size(&self) -> u64 {
        self.shadow.len() as u64
    }

    fn note(&mut self, what: String) {
        if self.history.len() == HISTORY {
            self.history.pop_front();
        }
        self.history.push_back(format!("{:>7} {what}", self.step));
    }

    fn fail(&self, what: impl std::fmt::Display) -> String {
        let ops: Vec<&str> = self.history.iter().map(String::as_str).collect();
        format!(
            "exerciser seed {} failed at operation {}: {what}\nfile size {:#x}; last operations:\n{}",
            self.cfg.seed,
            self.step,
            self.size(),
            ops.join("\n")
        )
    }

    fn pick(&mut self) -> Op {
        let total: u32 = WEIGHTS.iter().map(|(w, _)| w).sum();
        let mut x = self.rng.random_range(0..total);
        for (w, op) in WEIGHTS {
            if x < w {
                return op;
            }
            x -= w;
        }
        Op::Read
    }

    /// A range of at most `max_op` bytes that ends within `limit`.
    fn range(&mut self, limit: u64) -> (u64, u64) {
        if limit == 0 {
            return (0, 0);
        }
        let offset = self.rng.random_range(0..limit);
        let len = self
            .rng
            .random_range(0..=self.cfg.max_op.min(limit - offset));
        (offset, len)
    }

    fn set_size(&mut self, size: u64) {
        self.shadow.resize(size as usize, 0);
    }

    fn zero(&mut self, offset: u64, len: u64) {
        let end = (offset + len).min(self.size());
        if offset < end {
            self.shadow[offset as usize..end as usize].fill(0);
        }
    }

    fn one(&mut self, f: &File, mount: usize) -> Result<(), String> {
        let op = self.pick();
        let flen = self.cfg.flen;
        let size = self.size();
        match op {
            Op::Read => {
                let (offset, len) = self.range(flen);
                self.note(format!("m{mount} read {offset:#x} +{len:#x}"));
                let mut buf = vec![0u8; len as usize];
                let n = f.read_at(&mut buf, offset).map_err(|e| self.fail(e))? as u64;
                let want = len.min(size.saturating_sub(offset));
                if n != want {
                    return Err(self.fail(format!("read returned {n:#x} bytes, not {want:#x}")));
                }
                let start = offset.min(size) as usize;
                let expect = &self.shadow[start..start + n as usize];
                if let Some(i) = buf[..n as usize]
                    .iter()
                    .zip(expect)
                    .position(|(a, b)| a != b)
                {
                    return Err(self.fail(format!(
                        "byte {:#x} reads {:#x}, not {:#x}",
                        offset + i as u64,
                        buf[i],
                        expect[i]
                    )));
                }
            }
            Op::Write => {
                let (offset, len) = self.range(flen);
                self.note(format!("m{mount} write {offset:#x} +{len:#x}"));
                let tag: u8 = self.rng.random();
                let data: Vec<u8> = (0..len)
                    .map(|i| (i as u8).wrapping_mul(29).wrapping_add(tag) | 1)
                    .collect();
                f.write_all_at(&data, offset).map_err(|e| self.fail(e))?;
                // A write of nothing changes nothing, not even the end of file.
                if len > 0 {
                    if offset + len > size {
                        self.set_size(offset + len);
                    }
                    self.shadow[offset as usize..(offset + len) as usize].copy_from_slice(&data);
                }
            }
            Op::Truncate => {
                let to = self.rng.random_range(0..=flen);
                self.note(format!("m{mount} truncate {size:#x} -> {to:#x}"));
                f.set_len(to).map_err(|e| self.fail(e))?;
                self.set_size(to);
            }
            Op::Allocate => {
                let (offset, len) = self.range(flen);
                self.note(format!("m{mount} fallocate {offset:#x} +{len:#x}"));
                if len > 0 {
                    fallocate(f, 0, offset, len).map_err(|e| self.fail(e))?;
                    self.set_size(size.max(offset + len));
                }
            }
            Op::Punch => {
                let (offset, len) = self.range(flen);
                self.note(format!("m{mount} punch {offset:#x} +{len:#x}"));
                if len > 0 {
                    let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
                    fallocate(f, mode, offset, len).map_err(|e| self.fail(e))?;
                    self.zero(offset, len);
                }
            }
            Op::ZeroRange { keep_size } => {
                let (offset, len) = self.range(flen);
                self.note(format!(
                    "m{mount} zero range {offset:#x} +{len:#x}{}",
                    if keep_size { " keep size" } else { "" }
                ));
                if len > 0 {
                    let mode = if keep_size {
                        libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE
                    } else {
                        libc::FALLOC_FL_ZERO_RANGE
                    };
                    fallocate(f, mode, offset, len).map_err(|e| self.fail(e))?;
                    if !keep_size {
                        self.set_size(size.max(offset + len));
                    }
                    self.zero(offset, len);
                }
            }
            Op::CopyRange => {
                // From inside the file to anywhere within the largest size, not
                // overlapping (the kernel refuses overlapping ranges of one file).
                let (src, len) = self.range(size);
                let dst = self.rng.random_range(0..=flen - len);
                self.note(format!("m{mount} copy {src:#x} +{len:#x} -> {dst:#x}"));
                if len == 0 || (dst < src + len && src < dst + len) {
                    return Ok(());
                }
                copy_range(f, src, dst, len).map_err(|e| self.fail(e))?;
                let data = self.shadow[src as usize..(src + len) as usize].to_vec();
                if dst + len > self.size() {
                    self.set_size(dst + len);
                }
                self.shadow[dst as usize..(dst + len) as usize].copy_from_slice(&data);
            }
            Op::Fsync => {
                self.note(format!("m{mount} fsync"));
                f.sync_all().map_err(|e| self.fail(e))?;
            }
            Op::Seek => {
                let at = self.rng.random_range(0..flen);
                let hole = self.rng.random_bool(0.5);
                let name = if hole { "SEEK_HOLE" } else { "SEEK_DATA" };
                self.note(format!("m{mount} lseek {at:#x} {name}"));
                let whence = if hole {
                    libc::SEEK_HOLE
                } else {
                    libc::SEEK_DATA
                };
                let found = seek_data_or_hole(f, at, whence).map_err(|e| self.fail(e))?;
                self.check_seek(at, hole, found)?;
            }
        }
        let now = f.metadata().map_err(|e| self.fail(e))?.len();
        if now != self.size() {
            return Err(self.fail(format!("fstat says {now:#x} bytes")));
        }
        Ok(())
    }

    /// A seek answer is right if what it skips over is a hole (zeros) and it lands in the
    /// file: data where data was asked for, and the end of the file counts as a hole.
    fn check_seek(&self, at: u64, hole: bool, found: Option<u64>) -> Result<(), String> {
        let size = self.size();
        let zeros = |a: u64, b: u64| self.shadow[a as usize..b as usize].iter().all(|&x| x == 0);
        match (found, hole) {
            (None, _) if at >= size => Ok(()),
            (None, false) if zeros(at, size) => Ok(()),
            (Some(d), false) if d >= at && d < size && zeros(at, d) => Ok(()),
            (Some(h), true) if h >= at && h <= size && (h == size || zeros(h, h + 1)) => Ok(()),
            _ => Err(self.fail(format!("lseek answered {found:x?}"))),
        }
    }
}

/// Runs the exerciser; the error describes the first mismatch.
pub fn run(cfg: &Config) -> Result<(), String> {
    let mut run = Run {
        cfg,
        rng: StdRng::seed_from_u64(cfg.seed),
        shadow: Vec::new(),
        history: VecDeque::new(),
        step: 0,
    };
    let first = &cfg.paths[0];
    File::create(first).map_err(|e| run.fail(format!("create {}: {e}", first.display())))?;
    while run.step < cfg.ops {
        let mount = run.rng.random_range(0..cfg.paths.len());
        let path = &cfg.paths[mount];
        run.note(format!("m{mount} open"));
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| run.fail(format!("open {}: {e}", path.display())))?;
        // What the last mount wrote and closed is what this open sees (close-to-open).
        let now = f.metadata().map_err(|e| run.fail(e))?.len();
        if now != run.size() {
            return Err(run.fail(format!("at open, fstat says {now:#x} bytes")));
        }
        let n = run.rng.random_range(1..=cfg.ops_per_open);
        for _ in 0..n {
            run.step += 1;
            run.one(&f, mount)?;
        }
        run.note(format!("m{mount} close"));
        drop(f);
    }
    Ok(())
}
