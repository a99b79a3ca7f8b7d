//! An MDT opened on a damaged redo log (`mdt.redo`): frame parsing and checksums, replay
//! of each frame's table changes into the store, then everything the open reads from the
//! store those changes wrote (the meta record, reply records, the root, orphans), and a
//! shutdown. The store is redb in memory, fresh for each input; the log is a file under
//! /dev/shm.
//!
//! The input is the log: raw (the first byte's low bit clear), or frames the harness
//! assembles with correct lengths and checksums from pieces of the input (so the fuzzer
//! reaches the replay instead of failing checksums). Nothing may panic, hang or allocate
//! beyond what the log holds.

#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use weft_mdt::{Mdt, MdtOptions, MemoryCluster};

fn rt() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("runtime: {e}"))
    })
}

fn dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = PathBuf::from(format!("/dev/shm/weft-fuzz-redo-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
        d
    })
}

/// Frames from pieces: `[lsn: u8][len: u16 LE][body]...`, each body prefixed with its LSN
/// (small, so frames newer than the store are the rule) and framed as `RedoLog::append`
/// does: length and CRC32C, little-endian.
fn frames(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while data.len() >= 3 {
        let lsn = u64::from(data[0]);
        let len = usize::from(u16::from_le_bytes([data[1], data[2]]));
        data = &data[3..];
        let take = len.min(data.len());
        let mut body = lsn.to_le_bytes().to_vec();
        body.extend_from_slice(&data[..take]);
        data = &data[take..];
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        out.extend_from_slice(&weft_proto::checksum::crc32c(&body).to_le_bytes());
        out.extend_from_slice(&body);
    }
    out
}

/// Writes a starting corpus into `$WEFT_FUZZ_SEEDS` (run the target once with it set and
/// `-runs=0`): logs whose frames put a meta record and the root inode, as commits do.
fn write_seeds() {
    let Some(out) = std::env::var_os("WEFT_FUZZ_SEEDS").map(PathBuf::from) else {
        return;
    };
    let _ = std::fs::create_dir_all(&out);
    let put32 = |v: &mut Vec<u8>, b: &[u8]| {
        v.extend_from_slice(&(b.len() as u32).to_le_bytes());
        v.extend_from_slice(b);
    };
    let change = |table: u8, key: &[u8], value: Option<&[u8]>| {
        let mut c = Vec::new();
        match value {
            Some(v) => {
                c.push(1);
                put32(&mut c, key);
                put32(&mut c, v);
            }
            None => {
                c.push(0);
                put32(&mut c, key);
            }
        }
        let mut part = vec![table];
        put32(&mut part, &c);
        part
    };
    let meta = weft_mdt::store::Meta {
        format_version: weft_mdt::store::FORMAT_VERSION,
        fsname: "fuzzfs".into(),
        index: 0,
        uuid: uuid::Uuid::from_u128(9),
        cur_seq: 0x2_0000_0400,
        next_oid: 5,
        free_seqs: vec![weft_proto::fid::FidSeqRange {
            start: 0x2_0000_0401,
            end: 0x2_0000_0402,
        }],
        next_destroy: 1,
        dirs: 1,
        files: 1,
    };
    let now = weft_proto::time::Timestamp {
        sec: 1_700_000_000,
        nsec: 0,
    };
    let mut root =
        weft_mdt::store::Inode::new(weft_proto::mdt::FileKind::Directory, 0o755, 0, 0, now);
    root.nlink = 2;
    root.parent = weft_proto::Fid::ROOT;
    let file = weft_mdt::store::Inode::new(weft_proto::mdt::FileKind::Regular, 0o644, 0, 0, now);
    let file_fid = weft_proto::Fid {
        seq: 0x2_0000_0400,
        oid: 1,
        ver: 0,
    };
    let mut body = Vec::new();
    body.extend(change(
        13,
        weft_mdt::store::META_KEY,
        Some(&weft_mdt::store::encode(&meta).unwrap_or_default()),
    ));
    body.extend(change(
        0,
        &weft_proto::Fid::ROOT.to_bytes(),
        Some(&weft_mdt::store::encode(&root).unwrap_or_default()),
    ));
    body.extend(change(
        0,
        &file_fid.to_bytes(),
        Some(&weft_mdt::store::encode(&file).unwrap_or_default()),
    ));
    let dirent = weft_mdt::store::Dirent {
        fid: file_fid,
        kind: weft_proto::mdt::FileKind::Regular,
    };
    body.extend(change(
        1,
        &weft_mdt::store::dirent_key(weft_proto::Fid::ROOT, b"f"),
        Some(&weft_mdt::store::encode(&dirent).unwrap_or_default()),
    ));
    body.extend(change(3, &file_fid.to_bytes(), Some(b"")));
    let mut second = change(
        1,
        &weft_mdt::store::dirent_key(weft_proto::Fid::ROOT, b"f"),
        None,
    );
    second.extend(change(2, b"xattr-key", Some(b"value")));
    let mut input = vec![1u8];
    for (lsn, b) in [(1u8, &body), (2, &second)] {
        input.push(lsn);
        input.extend_from_slice(&(b.len() as u16).to_le_bytes());
        input.extend_from_slice(b);
    }
    let _ = std::fs::write(out.join("meta-root-file"), &input);
    let mut framed = vec![0u8];
    framed.extend(frames(&input[1..]));
    let _ = std::fs::write(out.join("raw-meta-root-file"), &framed);
}

fuzz_target!(|data: &[u8]| {
    static SEEDS: std::sync::Once = std::sync::Once::new();
    SEEDS.call_once(write_seeds);
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let log = if mode & 1 == 0 {
        rest.to_vec()
    } else {
        frames(rest)
    };
    let dir = dir();
    if std::fs::write(dir.join(weft_mdt::redo::REDO_FILE), &log).is_err() {
        return;
    }
    let opts = MdtOptions {
        fsname: "fuzzfs".into(),
        index: u32::from(mode >> 1 & 1),
        ..MdtOptions::default()
    };
    let cluster = Arc::new(MemoryCluster::new(2));
    let opened = Mdt::open_with_backend(dir, opts, cluster, redb::backends::InMemoryBackend::new());
    if let Ok(mdt) = opened {
        let _ = mdt.stats();
        rt().block_on(mdt.shutdown());
    }
});
