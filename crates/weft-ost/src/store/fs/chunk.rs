//! The chunk codec of compressed objects: one chunk of up to [`CHUNK`] logical bytes as
//! one slot's bytes (a header, then the LZ4 block, or the raw bytes when they do not
//! shrink), and back.
//!
//! ```text
//! offset  0  magic  b"wlz1"
//!         4  flags  u32 LE (bit 0: payload stored raw)
//!         8  stored u32 LE: payload bytes after the header
//!        12  length u32 LE: logical bytes of the chunk (<= CHUNK); the rest reads as zeros
//!        16  crc    u32 LE: CRC32C of bytes 0..16 and the payload
//!        20  payload
//! ```
//!
//! An encoded chunk is never longer than [`SLOT`]. A slot whose first [`HEADER`] bytes are
//! all zero was never written (a hole) and reads as zeros.

use std::fmt;

/// Logical bytes per chunk (and per slot).
pub const CHUNK: usize = 64 << 10;
/// Bytes of the header in front of each chunk's payload.
pub const HEADER: usize = 20;
/// The stride of slots in the object file: a raw chunk with its header fits, rounded up
/// to whole 4 KiB blocks.
pub const SLOT: usize = CHUNK + 4096;

const MAGIC: [u8; 4] = *b"wlz1";
const FLAG_RAW: u32 = 1;

/// Why a slot's bytes are not a chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadChunk(pub String);

impl fmt::Display for BadChunk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn le32(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(w)
}

/// `len` zero bytes, written rather than allocated zeroed: the allocator (jemalloc) serves
/// a zeroed allocation of megabytes it had freed by handing the pages back to the kernel
/// and faulting fresh ones in, which cost compressed reads as much as decoding them.
#[allow(clippy::slow_vector_initialization)] // the "slow" form is the fast one here
pub fn zeros(len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len);
    v.resize(len, 0);
    v
}

/// Encodes `data` (at most [`CHUNK`] bytes) as a slot's bytes: header and LZ4 block, or
/// header and the raw bytes when compression does not save at least one 4 KiB block.
pub fn encode(data: &[u8]) -> Vec<u8> {
    debug_assert!(data.len() <= CHUNK);
    let data = &data[..data.len().min(CHUNK)];
    let mut out = zeros(HEADER + lz4_flex::block::get_maximum_output_size(data.len()));
    let compressed = lz4_flex::block::compress_into(data, &mut out[HEADER..]).ok();
    let (flags, stored) = match compressed {
        // Worth it only when it stores fewer blocks than the raw bytes would.
        Some(n) if (HEADER + n).div_ceil(4096) < (HEADER + data.len()).div_ceil(4096) => (0, n),
        _ => {
            out.truncate(HEADER);
            out.extend_from_slice(data);
            (FLAG_RAW, data.len())
        }
    };
    out.truncate(HEADER + stored);
    out[0..4].copy_from_slice(&MAGIC);
    out[4..8].copy_from_slice(&flags.to_le_bytes());
    out[8..12].copy_from_slice(&(stored as u32).to_le_bytes());
    out[12..16].copy_from_slice(&(data.len() as u32).to_le_bytes());
    let crc = crc32c::crc32c_append(crc32c::crc32c(&out[0..16]), &out[HEADER..]);
    out[16..20].copy_from_slice(&crc.to_le_bytes());
    out
}

/// The bytes a slot starting with `head` takes on disk: its header and payload rounded up
/// to 4 KiB (0 for a slot never written, a whole slot when the header is damaged).
pub fn extent(head: &[u8]) -> usize {
    if head.len() < HEADER || head[..HEADER].iter().all(|&b| b == 0) {
        return 0;
    }
    let stored = le32(head, 8) as usize;
    if head[0..4] != MAGIC || stored > SLOT - HEADER {
        return SLOT;
    }
    (HEADER + stored).next_multiple_of(4096)
}

/// Decodes a slot's bytes (`slot` may be longer than the chunk, or shorter than
/// [`HEADER`] at the end of the file) into `out` ([`CHUNK`] bytes): the chunk's bytes, then
/// zeros. Returns the chunk's logical length (0 for a slot never written).
pub fn decode(slot: &[u8], out: &mut [u8]) -> Result<usize, BadChunk> {
    debug_assert_eq!(out.len(), CHUNK);
    if slot.len() < HEADER || slot[..HEADER].iter().all(|&b| b == 0) {
        out.fill(0);
        return Ok(0);
    }
    if slot[0..4] != MAGIC {
        return Err(BadChunk(format!("bad chunk magic {:02x?}", &slot[0..4])));
    }
    let flags = le32(slot, 4);
    let stored = le32(slot, 8) as usize;
    let len = le32(slot, 12) as usize;
    let crc = le32(slot, 16);
    if flags & !FLAG_RAW != 0 || len > CHUNK || stored > SLOT - HEADER {
        return Err(BadChunk(format!(
            "bad chunk header (flags {flags:#x}, {stored} stored, {len} long)"
        )));
    }
    let Some(payload) = slot.get(HEADER..HEADER + stored) else {
        return Err(BadChunk(format!(
            "chunk of {stored} bytes cut short at {}",
            slot.len() - HEADER
        )));
    };
    if crc32c::crc32c_append(crc32c::crc32c(&slot[0..16]), payload) != crc {
        return Err(BadChunk("chunk checksum mismatch".into()));
    }
    if flags & FLAG_RAW != 0 {
        if stored != len {
            return Err(BadChunk(format!("raw chunk of {stored} bytes, {len} long")));
        }
        out[..len].copy_from_slice(payload);
    } else {
        match lz4_flex::block::decompress_into(payload, &mut out[..len]) {
            Ok(n) if n == len => {}
            Ok(n) => return Err(BadChunk(format!("chunk of {len} bytes decoded to {n}"))),
            Err(e) => return Err(BadChunk(format!("LZ4 block: {e}"))),
        }
    }
    out[len..].fill(0);
    Ok(len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn roundtrip(data: &[u8]) -> Vec<u8> {
        let slot = encode(data);
        assert!(slot.len() <= SLOT);
        let mut out = vec![0xaa; CHUNK];
        let n = decode(&slot, &mut out).unwrap();
        assert_eq!(n, data.len());
        assert!(out[n..].iter().all(|&b| b == 0));
        out.truncate(n);
        out
    }

    #[test]
    fn text_compresses_and_noise_stays_raw() {
        let text: Vec<u8> = b"{\"level\":\"info\",\"msg\":\"request served\",\"ms\":12}\n"
            .iter()
            .copied()
            .cycle()
            .take(CHUNK)
            .collect();
        let slot = encode(&text);
        assert!(slot.len() < CHUNK / 4, "{} bytes", slot.len());
        assert_eq!(roundtrip(&text), text);
        let mut x = 0x1234_5678_u32;
        let noise: Vec<u8> = (0..CHUNK)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect();
        let slot = encode(&noise);
        assert_eq!(slot.len(), HEADER + CHUNK, "stored raw");
        assert_eq!(roundtrip(&noise), noise);
    }

    #[test]
    fn holes_and_damage() {
        let mut out = vec![1u8; CHUNK];
        assert_eq!(decode(&[0u8; SLOT], &mut out), Ok(0));
        assert!(out.iter().all(|&b| b == 0));
        assert_eq!(decode(&[], &mut out), Ok(0));
        let good = encode(&[7u8; 5000]);
        for at in [0, 5, 9, 13, 17, HEADER + 1] {
            let mut bad = good.clone();
            bad[at] ^= 0x40;
            assert!(decode(&bad, &mut out).is_err(), "flipped byte {at}");
        }
        assert!(decode(&good[..good.len() - 1], &mut out).is_err());
    }

    proptest! {
        #[test]
        fn any_chunk_roundtrips(
            runs in proptest::collection::vec((any::<u8>(), 1usize..3000), 0..60),
            noise in proptest::collection::vec(any::<u8>(), 0..2000),
        ) {
            let mut data: Vec<u8> = runs.iter().flat_map(|&(b, n)| std::iter::repeat_n(b, n)).collect();
            data.extend_from_slice(&noise);
            data.truncate(CHUNK);
            prop_assert_eq!(roundtrip(&data), data);
        }

        #[test]
        fn garbage_never_panics(slot in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut out = vec![0u8; CHUNK];
            let _ = decode(&slot, &mut out);
        }
    }
}
