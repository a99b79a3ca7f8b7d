//! Compressed objects on disk: a sparse file of fixed-stride slots, slot `i` at offset
//! `i * SLOT` holding logical bytes `[i * CHUNK, (i + 1) * CHUNK)` as one encoded chunk
//! (`chunk.rs`) followed by a hole, so the blocks a chunk takes are its compressed size
//! rounded to 4 KiB while addressing stays arithmetic (no index). A slot never written,
//! or whose chunk became all zeros, is a hole and reads as zeros; data and hole search
//! works at chunk granularity.
//!
//! The logical size and the bytes the slots take (each chunk's encoded length rounded to
//! 4 KiB; what `compress_stored_bytes` adds up, without the file system's own metadata)
//! live in the `user.weft.lz4` extended attribute (two u64 LE), whose presence is what
//! makes an object compressed: it is set when the object is created and never removed. Partial-chunk writes, punches and truncates read, decode, change,
//! re-encode and rewrite the chunks they touch; the caller serialises them per object.
//! Order for a crash: data is written before the size grows, and cut before it shrinks.

use super::chunk::{self, BadChunk, CHUNK, SLOT};
use bytes::Bytes;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// The extended attribute holding a compressed object's logical size.
pub const LZ4_XATTR: &str = "user.weft.lz4";

const CHUNK64: u64 = CHUNK as u64;
const SLOT64: u64 = SLOT as u64;

fn corrupt(slot: u64, e: BadChunk) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("compressed chunk {slot}: {e}"),
    )
}

/// What the `user.weft.lz4` attribute of a compressed object holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Meta {
    /// The logical size.
    pub size: u64,
    /// Bytes the written slots take (encoded chunks rounded to 4 KiB).
    pub stored: u64,
}

impl Meta {
    /// Parses the attribute's value.
    pub fn parse(buf: &[u8]) -> io::Result<Meta> {
        let word = |at: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&buf[at..at + 8]);
            u64::from_le_bytes(w)
        };
        if buf.len() != 16 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{LZ4_XATTR} of {} bytes", buf.len()),
            ));
        }
        Ok(Meta {
            size: word(0),
            stored: word(8),
        })
    }
}

/// The attribute of a compressed object, `None` when the object is not compressed.
pub fn meta(file: &File) -> io::Result<Option<Meta>> {
    let mut buf = [0u8; 16];
    match rustix::fs::fgetxattr(file, LZ4_XATTR, &mut buf) {
        Ok(n) => Meta::parse(&buf[..n]).map(Some),
        Err(rustix::io::Errno::NODATA) => Ok(None),
        Err(rustix::io::Errno::RANGE) => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{LZ4_XATTR} longer than 16 bytes"),
        )),
        Err(e) => Err(e.into()),
    }
}

/// Records the attribute (and with it that the object is compressed).
pub fn set_meta(file: &File, m: Meta) -> io::Result<()> {
    let mut buf = [0u8; 16];
    buf[..8].copy_from_slice(&m.size.to_le_bytes());
    buf[8..].copy_from_slice(&m.stored.to_le_bytes());
    rustix::fs::fsetxattr(file, LZ4_XATTR, &buf, rustix::fs::XattrFlags::empty())?;
    Ok(())
}

/// Deallocates `[offset, offset + len)` of the file, keeping its size.
fn punch_file(file: &File, offset: u64, len: u64) -> io::Result<()> {
    rustix::fs::fallocate(
        file,
        rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE,
        offset,
        len,
    )?;
    Ok(())
}

/// Largest slot buffer a thread keeps between reads (bigger reads allocate their own).
const KEEP_SLOT_BUFFER: usize = 64 * SLOT;

thread_local! {
    /// Each thread's buffer for the raw slots of a read, kept between reads: a fresh
    /// zeroed allocation of a megabyte per read cost page faults and page clearing
    /// comparable to the decoding itself.
    static SLOT_BUFFER: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Reads `n` whole slots from slot `first` and gives them to `f`; what lies past the
/// file's end reads as zeros.
fn with_slots<R>(file: &File, first: u64, n: usize, f: impl FnOnce(&[u8]) -> R) -> io::Result<R> {
    let len = n * SLOT;
    if n > 1 {
        // One read-ahead of the whole span: left to the kernel's window, a cold span of
        // short extents between holes is fetched a little at a time, one wait each.
        let _ = rustix::fs::fadvise(
            file,
            first * SLOT64,
            std::num::NonZeroU64::new(len as u64),
            rustix::fs::Advice::WillNeed,
        );
    }
    SLOT_BUFFER.with(|cell| {
        // A read inside `f` (none today) would find the buffer taken and use its own.
        let mut own = Vec::new();
        let mut kept = cell.try_borrow_mut().ok();
        let buf = match kept.as_deref_mut() {
            Some(b) if len <= KEEP_SLOT_BUFFER => b,
            _ => &mut own,
        };
        // Zeroed only when it grows; each read overwrites what it uses.
        if buf.len() < len {
            buf.resize(len, 0);
        }
        let buf = &mut buf[..len];
        let mut done = 0;
        while done < len {
            match file.read_at(&mut buf[done..], first * SLOT64 + done as u64) {
                Ok(0) => break,
                Ok(k) => done += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        buf[done..].fill(0);
        Ok(f(buf))
    })
}

/// One compressed object file, for one operation: its descriptor and sizes.
pub struct Compressed<'a> {
    file: &'a File,
    /// The logical size.
    pub size: u64,
    /// Bytes the slots take.
    pub stored: u64,
    /// As the attribute holds it.
    recorded: Meta,
    /// The file's size (slots past it were never written).
    phys: u64,
}

impl<'a> Compressed<'a> {
    /// The compressed object in `file` described by `m`.
    pub fn new(file: &'a File, m: Meta) -> io::Result<Self> {
        let phys = file.metadata()?.len();
        Ok(Self {
            file,
            size: m.size,
            stored: m.stored,
            recorded: m,
            phys,
        })
    }

    /// Stores the sizes in the attribute if they changed.
    fn record(&mut self) -> io::Result<()> {
        let now = Meta {
            size: self.size,
            stored: self.stored,
        };
        if now != self.recorded {
            set_meta(self.file, now)?;
            self.recorded = now;
        }
        Ok(())
    }

    /// The bytes slot `slot` takes now (its encoded chunk rounded to 4 KiB).
    fn slot_extent(&self, slot: u64) -> io::Result<u64> {
        let at = slot * SLOT64;
        if at >= self.phys {
            return Ok(0);
        }
        let mut head = [0u8; chunk::HEADER];
        let n = self.file.read_at(&mut head, at)?;
        Ok(chunk::extent(&head[..n]) as u64)
    }

    /// Decodes chunk `slot` into `out` ([`CHUNK`] bytes); returns its logical length.
    fn load(&self, slot: u64, out: &mut [u8]) -> io::Result<usize> {
        if slot * SLOT64 >= self.phys {
            out.fill(0);
            return Ok(0);
        }
        with_slots(self.file, slot, 1, |raw| chunk::decode(raw, out))?.map_err(|e| corrupt(slot, e))
    }

    /// Stores `data` (at most [`CHUNK`] bytes) as chunk `slot`: trailing zeros are not
    /// kept, and a chunk of zeros becomes a hole.
    fn store(&mut self, slot: u64, data: &[u8]) -> io::Result<()> {
        let at = slot * SLOT64;
        let len = data.iter().rposition(|&b| b != 0).map_or(0, |p| p + 1);
        let old = self.slot_extent(slot)?;
        if len == 0 {
            if at < self.phys {
                punch_file(self.file, at, SLOT64)?;
            }
            self.stored = self.stored.saturating_sub(old);
            return Ok(());
        }
        let enc = chunk::encode(&data[..len]);
        self.file.write_all_at(&enc, at)?;
        self.stored = (self.stored + (enc.len() as u64).next_multiple_of(4096)).saturating_sub(old);
        // What an earlier, longer chunk left behind in the slot goes.
        let tail = (enc.len() as u64).next_multiple_of(4096);
        if at < self.phys && tail < SLOT64 {
            punch_file(self.file, at + tail, SLOT64 - tail)?;
        }
        self.phys = self.phys.max(at + enc.len() as u64);
        Ok(())
    }

    /// Reads up to `len` bytes at `offset` (fewer at the logical end).
    pub fn read(&self, offset: u64, len: usize) -> io::Result<Bytes> {
        let want = (len as u64).min(self.size.saturating_sub(offset)) as usize;
        if want == 0 {
            return Ok(Bytes::new());
        }
        let end = offset + want as u64;
        let first = offset / CHUNK64;
        let last = (end - 1) / CHUNK64;
        // Slots past the file's end are holes: no need to read them.
        let stored = (last + 1)
            .min(self.phys.div_ceil(SLOT64))
            .saturating_sub(first);
        let mut out = chunk::zeros(want);
        with_slots(self.file, first, stored as usize, |raw| {
            let mut scratch = Vec::new();
            for (i, slot_bytes) in raw.chunks(SLOT).enumerate() {
                let slot = first + i as u64;
                let start = slot * CHUNK64;
                let lo = offset.max(start);
                let hi = end.min(start + CHUNK64);
                let dst = &mut out[(lo - offset) as usize..(hi - offset) as usize];
                if dst.len() == CHUNK {
                    chunk::decode(slot_bytes, dst).map_err(|e| corrupt(slot, e))?;
                } else {
                    scratch.resize(CHUNK, 0);
                    chunk::decode(slot_bytes, &mut scratch).map_err(|e| corrupt(slot, e))?;
                    dst.copy_from_slice(&scratch[(lo - start) as usize..(hi - start) as usize]);
                }
            }
            Ok::<_, io::Error>(())
        })??;
        Ok(Bytes::from(out))
    }

    /// Applies `f` to the logical bytes `[lo, hi)` of chunk `slot` (within the chunk),
    /// reading the chunk first unless the range covers it or lies past the logical end.
    fn modify(
        &mut self,
        slot: u64,
        lo: usize,
        hi: usize,
        scratch: &mut [u8],
        f: impl FnOnce(&mut [u8]),
    ) -> io::Result<()> {
        let start = slot * CHUNK64;
        if (lo == 0 && hi == CHUNK) || start >= self.size {
            scratch.fill(0);
        } else {
            self.load(slot, scratch)?;
        }
        f(&mut scratch[lo..hi]);
        self.store(slot, scratch)
    }

    /// Calls `f(slot, lo, hi, pos)` for each chunk the range `[offset, end)` touches:
    /// `[lo, hi)` within the chunk, `pos` the range's offset of `lo`.
    fn each_chunk(
        offset: u64,
        end: u64,
        mut f: impl FnMut(u64, usize, usize, usize) -> io::Result<()>,
    ) -> io::Result<()> {
        let mut at = offset;
        while at < end {
            let slot = at / CHUNK64;
            let start = slot * CHUNK64;
            let hi = end.min(start + CHUNK64);
            f(
                slot,
                (at - start) as usize,
                (hi - start) as usize,
                (at - offset) as usize,
            )?;
            at = hi;
        }
        Ok(())
    }

    /// Writes `data` at `offset`, growing the logical size as needed.
    pub fn write(&mut self, offset: u64, data: &[u8]) -> io::Result<()> {
        let end = offset + data.len() as u64;
        let mut scratch = vec![0u8; CHUNK];
        Self::each_chunk(offset, end, |slot, lo, hi, pos| {
            if lo == 0 && hi == CHUNK {
                // A whole chunk: no need to copy it first.
                return self.store(slot, &data[pos..pos + CHUNK]);
            }
            self.modify(slot, lo, hi, &mut scratch, |dst| {
                dst.copy_from_slice(&data[pos..pos + (hi - lo)]);
            })
        })?;
        self.size = self.size.max(end);
        self.record()
    }

    /// Makes `[offset, offset + len)` read as zeros, freeing whole chunks.
    pub fn punch(&mut self, offset: u64, len: u64) -> io::Result<()> {
        let end = offset.saturating_add(len).min(self.size);
        let mut scratch = vec![0u8; CHUNK];
        Self::each_chunk(offset, end, |slot, lo, hi, _| {
            if lo == 0 && (hi == CHUNK || slot * CHUNK64 + hi as u64 >= self.size) {
                return self.store(slot, &[]);
            }
            self.modify(slot, lo, hi, &mut scratch, |dst| dst.fill(0))
        })?;
        self.record()
    }

    /// Sets the logical size: bytes past a smaller size are dropped, so growing it again
    /// reads zeros.
    pub fn set_size(&mut self, size: u64) -> io::Result<()> {
        if size < self.size {
            let keep = size.div_ceil(CHUNK64);
            let cut = (size % CHUNK64) as usize;
            if cut != 0 {
                let mut scratch = vec![0u8; CHUNK];
                self.modify(keep - 1, cut, CHUNK, &mut scratch, |dst| dst.fill(0))?;
            }
            if self.phys > keep * SLOT64 {
                // Count out the slots that go, skipping holes.
                let mut at = keep * SLOT64;
                while let Some(p) = self.next_data(at)? {
                    let slot = p / SLOT64;
                    self.stored = self.stored.saturating_sub(self.slot_extent(slot)?);
                    at = (slot + 1) * SLOT64;
                }
                self.file.set_len(keep * SLOT64)?;
                self.phys = keep * SLOT64;
            }
        }
        self.size = size;
        self.record()
    }

    /// The file offset of the next data at or after `at` (`None`: none).
    fn next_data(&self, at: u64) -> io::Result<Option<u64>> {
        if at >= self.phys {
            return Ok(None);
        }
        match rustix::fs::seek(self.file, rustix::fs::SeekFrom::Data(at)) {
            Ok(p) => Ok(Some(p)),
            Err(rustix::io::Errno::NXIO) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Whether chunk `slot` holds data (its slot starts with written bytes).
    fn has_data(&self, slot: u64) -> io::Result<bool> {
        let at = slot * SLOT64;
        Ok(self.next_data(at)?.is_some_and(|p| p < at + SLOT64))
    }

    /// Where the next data (or hole, with `hole`) at or after `offset` starts, at chunk
    /// granularity; `None` at or past the logical end (which counts as a hole).
    pub fn seek(&self, offset: u64, hole: bool) -> io::Result<Option<u64>> {
        if offset >= self.size {
            return Ok(None);
        }
        let mut slot = offset / CHUNK64;
        if !hole {
            let Some(found) = self.next_data(slot * SLOT64)? else {
                return Ok(None);
            };
            let data = offset.max(found / SLOT64 * CHUNK64);
            return Ok((data < self.size).then_some(data));
        }
        // Data slots are contiguous data runs: jump to the end of each run and look at the
        // slot it ends in.
        loop {
            let start = slot * CHUNK64;
            if start >= self.size {
                return Ok(Some(self.size.max(offset)));
            }
            if !self.has_data(slot)? {
                return Ok(Some(offset.max(start)));
            }
            let end = match rustix::fs::seek(self.file, rustix::fs::SeekFrom::Hole(slot * SLOT64)) {
                Ok(p) => p,
                Err(rustix::io::Errno::NXIO) => self.phys,
                Err(e) => return Err(e.into()),
            };
            // The run ends inside slot `end / SLOT` (that slot has data, the next is
            // looked at) or at its start (that slot is looked at).
            slot = end.div_ceil(SLOT64).max(slot + 1);
        }
    }
}

#[cfg(test)]
mod tests;
