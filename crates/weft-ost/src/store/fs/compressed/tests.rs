//! Compressed objects against a byte model: random writes, reads, punches and truncates
//! of realistic sizes across chunk boundaries, and data/hole search at chunk granularity.

use super::*;
use proptest::prelude::*;
use std::os::unix::fs::MetadataExt;

/// Log-like text: compresses well, never all zeros.
fn text(seed: u64, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 128);
    let mut i = seed;
    while out.len() < len {
        out.extend_from_slice(
            format!(
                "{{\"ts\":{},\"level\":\"info\",\"user\":{},\"msg\":\"GET /api/items/{}\"}}\n",
                1_700_000_000 + i,
                i % 97,
                i % 1013
            )
            .as_bytes(),
        );
        i += 1;
    }
    out.truncate(len);
    out
}

fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn new_object() -> (tempfile::TempDir, File) {
    let dir = tempfile::tempdir().unwrap();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(dir.path().join("obj"))
        .unwrap();
    set_meta(&file, Meta::default()).unwrap();
    (dir, file)
}

fn open(file: &File) -> Compressed<'_> {
    Compressed::new(file, meta(file).unwrap().unwrap()).unwrap()
}

/// What seek must answer, from the model: a chunk holds data iff it has a nonzero byte.
fn model_seek(model: &[u8], offset: u64, hole: bool) -> Option<u64> {
    let size = model.len() as u64;
    if offset >= size {
        return None;
    }
    let mut c = offset / CHUNK64;
    loop {
        let start = c * CHUNK64;
        if start >= size {
            return if hole { Some(size) } else { None };
        }
        let end = (start + CHUNK64).min(size);
        let data = model[start as usize..end as usize].iter().any(|&b| b != 0);
        if data != hole {
            return Some(offset.max(start));
        }
        c += 1;
    }
}

#[test]
fn text_stores_small_and_reads_back() {
    let (_d, file) = new_object();
    let data = text(1, 8 << 20);
    let mut obj = open(&file);
    for (i, part) in data.chunks(1 << 20).enumerate() {
        obj.write((i as u64) << 20, part).unwrap();
    }
    let obj = open(&file);
    assert_eq!(obj.size, data.len() as u64);
    assert_eq!(obj.read(0, data.len()).unwrap(), data);
    let stored = file.metadata().unwrap().blocks() * 512;
    assert!(stored * 3 < data.len() as u64, "{stored} bytes stored");
    // A read past the end is short, and at the end empty.
    assert_eq!(obj.read(data.len() as u64 - 10, 100).unwrap().len(), 10);
    assert!(obj.read(data.len() as u64, 100).unwrap().is_empty());
}

#[test]
fn noise_is_stored_raw_and_zeros_as_holes() {
    let (_d, file) = new_object();
    let mut obj = open(&file);
    let data = noise(7, 3 * CHUNK + 100);
    obj.write(0, &data).unwrap();
    obj.write(10 * CHUNK64, &vec![0u8; 2 * CHUNK]).unwrap();
    assert_eq!(obj.size, 12 * CHUNK64);
    let blocks = file.metadata().unwrap().blocks() * 512;
    // Three raw slots and one of 100 bytes; the zero chunks take nothing.
    assert!(blocks <= 4 * SLOT64, "{blocks}");
    assert_eq!(obj.seek(4 * CHUNK64, false).unwrap(), None);
    assert_eq!(obj.seek(0, true).unwrap(), Some(4 * CHUNK64));
    assert_eq!(obj.read(0, data.len()).unwrap(), data);
}

#[test]
fn damaged_chunk_is_an_error() {
    let (_d, file) = new_object();
    let mut obj = open(&file);
    obj.write(0, &text(3, 2 * CHUNK)).unwrap();
    file.write_all_at(b"xx", SLOT64 + 30).unwrap();
    let obj = open(&file);
    assert!(obj.read(0, CHUNK).is_ok());
    let e = obj.read(CHUNK64, 10).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidData);
}

#[derive(Debug, Clone)]
enum Op {
    Write {
        offset: u64,
        len: usize,
        noisy: bool,
        seed: u64,
    },
    Zeros {
        offset: u64,
        len: usize,
    },
    Punch {
        offset: u64,
        len: u64,
    },
    Truncate {
        size: u64,
    },
    Read {
        offset: u64,
        len: usize,
    },
    Seek {
        offset: u64,
        hole: bool,
    },
}

/// Objects of up to `max` bytes (tens of MiB); operations up to 1 MiB.
fn op(max: u64) -> impl Strategy<Value = Op> {
    // Offsets near chunk boundaries half of the time.
    let offset = prop_oneof![
        0..max,
        (0..max / CHUNK64, -3i64..3).prop_map(|(c, d)| (c * CHUNK64).saturating_add_signed(d)),
    ];
    let len = prop_oneof![1usize..4096, 1usize..(1 << 20), Just(CHUNK)];
    prop_oneof![
        4 => (offset.clone(), len.clone(), any::<bool>(), any::<u64>())
            .prop_map(|(offset, len, noisy, seed)| Op::Write { offset, len, noisy, seed }),
        1 => (offset.clone(), len.clone()).prop_map(|(offset, len)| Op::Zeros { offset, len }),
        1 => (offset.clone(), 1u64..(2 << 20)).prop_map(|(offset, len)| Op::Punch { offset, len }),
        1 => offset.clone().prop_map(|size| Op::Truncate { size }),
        2 => (offset.clone(), len).prop_map(|(offset, len)| Op::Read { offset, len }),
        2 => (offset, any::<bool>()).prop_map(|(offset, hole)| Op::Seek { offset, hole }),
    ]
}

fn run(ops: &[Op]) -> Result<(), TestCaseError> {
    let (_d, file) = new_object();
    let mut model: Vec<u8> = Vec::new();
    for op in ops {
        let mut obj = open(&file);
        match *op {
            Op::Write {
                offset,
                len,
                noisy,
                seed,
            } => {
                let data = if noisy {
                    noise(seed, len)
                } else {
                    text(seed, len)
                };
                obj.write(offset, &data).unwrap();
                let end = offset as usize + len;
                if model.len() < end {
                    model.resize(end, 0);
                }
                model[offset as usize..end].copy_from_slice(&data);
            }
            Op::Zeros { offset, len } => {
                obj.write(offset, &vec![0u8; len]).unwrap();
                let end = offset as usize + len;
                if model.len() < end {
                    model.resize(end, 0);
                }
                model[offset as usize..end].fill(0);
            }
            Op::Punch { offset, len } => {
                obj.punch(offset, len).unwrap();
                let end = (offset + len).min(model.len() as u64) as usize;
                if (offset as usize) < end {
                    model[offset as usize..end].fill(0);
                }
            }
            Op::Truncate { size } => {
                obj.set_size(size).unwrap();
                model.resize(size as usize, 0);
            }
            Op::Read { offset, len } => {
                let got = obj.read(offset, len).unwrap();
                let lo = (offset as usize).min(model.len());
                let hi = (offset as usize + len).min(model.len());
                prop_assert!(got[..] == model[lo..hi], "read {len} at {offset}");
            }
            Op::Seek { offset, hole } => {
                prop_assert_eq!(
                    obj.seek(offset, hole).unwrap(),
                    model_seek(&model, offset, hole),
                    "seek {} hole {}",
                    offset,
                    hole
                );
            }
        }
        prop_assert_eq!(open(&file).size, model.len() as u64);
    }
    let obj = open(&file);
    let all = obj.read(0, model.len()).unwrap();
    prop_assert!(all[..] == model[..], "whole object differs");
    // The recorded slot bytes are what the slots hold, and what the file takes at most.
    let mut stored = 0;
    for slot in 0..obj.phys.div_ceil(SLOT64) {
        stored += obj.slot_extent(slot).unwrap();
    }
    prop_assert_eq!(obj.stored, stored);
    prop_assert!(stored <= file.metadata().unwrap().blocks() * 512);
    // Every chunk not all zeros is stored; the rest is holes.
    let mut at = 0;
    while let Some(d) = obj.seek(at, false).unwrap() {
        prop_assert_eq!(Some(d), model_seek(&model, at, false));
        at = obj.seek(d, true).unwrap().unwrap();
    }
    Ok(())
}

/// Cases of the model test: `WEFT_LZ4_FULL=1` runs many more.
fn cases() -> u32 {
    if std::env::var_os("WEFT_LZ4_FULL").is_some() {
        200
    } else {
        12
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn compressed_object_matches_model(ops in proptest::collection::vec(op(24 << 20), 1..40)) {
        run(&ops)?;
    }
}
