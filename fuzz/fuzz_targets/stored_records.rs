//! Everything a server reads back from its own disk, damaged: the first byte of the input
//! picks what the rest is.
//!
//! - MDT records (`weft_mdt::store::decode` of every record type the tables hold, the
//!   directory-entry key split, the archive reference kept in an xattr);
//! - layouts and layout templates as stored and sent (decode, `validate`), and for the
//!   layouts that validate the client's striping math over them (`weft_client::layout`);
//! - the MGS state file (`mgs_state.json`: header, checksum, JSON body, invariants) through
//!   `Mgs::open`;
//! - an OST data directory's identity (`target.json`) and data-version reservation
//!   (`dv_reserve.json`) through `FsStore::open`;
//! - an OST object file with its extended attributes (`user.weft.lz4`: compressed-object
//!   sizes, whose chunks are then decoded: header, CRC, LZ4 block; `user.weft.dv`: data
//!   version), read, searched, punched, truncated and written through the `ObjectStore`
//!   trait as the OST would.
//!
//! Files go to a directory under /dev/shm (tmpfs, which keeps `user.*` xattrs), one per
//! fuzzing process. Nothing may panic or allocate beyond what the files hold.

#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use weft_mdt::store::{self, DestroyRecord, Dirent, Inode, InodeAttrs, Meta};
use weft_ost::ObjectStore;
use weft_ost::direct::CacheLimits;
use weft_ost::store::fs::FsStore;
use weft_proto::hsm::ArchiveRef;
use weft_proto::layout::{Layout, LayoutTemplate};
use weft_proto::{Fid, ObjectId};

/// Reads the input a piece at a time; runs out into zeros.
struct Input<'a>(&'a [u8]);

impl<'a> Input<'a> {
    fn byte(&mut self) -> u8 {
        let (b, rest) = self.0.split_first().map_or((0, &[][..]), |(b, r)| (*b, r));
        self.0 = rest;
        b
    }
    fn u64(&mut self) -> u64 {
        let mut w = [0u8; 8];
        for b in &mut w {
            *b = self.byte();
        }
        u64::from_le_bytes(w)
    }
    fn take(&mut self, n: usize) -> &'a [u8] {
        let n = n.min(self.0.len());
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        a
    }
    /// A length-prefixed piece (one byte of length, times `unit`).
    fn piece(&mut self, unit: usize) -> &'a [u8] {
        let n = usize::from(self.byte()) * unit;
        self.take(n)
    }
}

/// This process's scratch directory (fuzzing processes may run side by side).
fn scratch() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = PathBuf::from(format!("/dev/shm/weft-fuzz-stored-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
        d
    })
}

fn mdt_records(data: &[u8]) {
    let _ = store::decode::<Inode>("inodes", data);
    let _ = store::decode::<InodeAttrs>("inodes", data);
    let _ = store::decode::<Dirent>("dirents", data);
    let _ = store::decode::<DestroyRecord>("destroy_log", data);
    let _ = store::decode::<Meta>("meta", data);
    let _ = store::decode::<weft_mdt::replies::Recorded>("replies", data);
    let _ = store::decode::<weft_proto::mdt::DirDefault>("dir_defaults", data);
    let _ = store::decode::<weft_proto::mdt::DirStripes>("dir_stripes", data);
    let _ = store::split_dirent_key(data);
    let _ = postcard::from_bytes::<ArchiveRef>(data);
    if let Ok(inode) = store::decode::<Inode>("inodes", data) {
        // What the MDT hands out of a record: its attributes and layout.
        let _ = inode.attr(Fid::ROOT, 1);
        if let Some(l) = &inode.layout {
            layout_math(l, data);
        }
    }
}

/// The client's striping math over a layout that passed validation, at offsets the
/// input picks (lengths bounded as the client's I/O is).
fn layout_math(layout: &Layout, data: &[u8]) {
    if layout.validate().is_err() {
        return;
    }
    let mut input = Input(data);
    let fid = Fid::ROOT;
    for _ in 0..4 {
        // Offsets as files have them (below 2^63), lengths up to 64 MiB.
        let offset = input.u64() >> 1;
        let len = input.u64() % (64 << 20);
        let _ = weft_client::layout::map_range(layout, fid, offset, len);
        let _ = weft_client::layout::map_sparse(layout, fid, offset, len);
        let _ = weft_client::layout::has_hole(layout, offset, len);
        for comp in &layout.components {
            let stripes = comp.osts.len().max(1) as u32;
            let stripe = (input.byte() as u32) % stripes;
            let _ = weft_client::layout::object_size_for(comp, stripe, offset);
            let _ = weft_client::layout::file_end_for(comp, stripe, input.u64() >> 1);
            if offset >= comp.start {
                let _ = weft_client::layout::object_offset_from(comp, stripe, offset);
            }
            let _ = weft_client::layout::file_offset_of(comp, stripe, input.u64() >> 1);
        }
        let _ = layout.objects(fid).count();
    }
}

fn layouts(data: &[u8]) {
    if let Ok(l) = weft_proto::decode::<Layout>(data) {
        layout_math(&l, data);
    }
    if let Ok(t) = weft_proto::decode::<LayoutTemplate>(data) {
        let _ = t.validate();
    }
}

/// The MGS state file: `raw` as is, or with the header's length and checksum made right
/// so the body reaches the JSON parser and the invariant checks.
fn mgs_state(fix: bool, data: &[u8]) {
    let dir = scratch().join("mgs");
    let _ = std::fs::create_dir_all(&dir);
    let bytes = if fix {
        let mut out = format!(
            "weft-mgs-state 1 {} {:08x}\n",
            data.len(),
            weft_proto::checksum::crc32c(data)
        )
        .into_bytes();
        out.extend_from_slice(data);
        out.push(b'\n');
        out
    } else {
        data.to_vec()
    };
    if std::fs::write(dir.join(weft_mgs::STATE_FILE), &bytes).is_err() {
        return;
    }
    // A state that loads is opened and dropped (no runtime: no background task).
    if let Ok(mgs) = weft_mgs::Mgs::open(&dir, None) {
        let _ = mgs.fsname();
    }
}

/// An OST data directory with the input's identity and reservation files.
fn ost_dir(data: &[u8]) {
    let mut input = Input(data);
    let dir = scratch().join("ost-dir");
    let _ = std::fs::remove_dir_all(&dir);
    if std::fs::create_dir_all(dir.join("O")).is_err() {
        return;
    }
    let identity = input.piece(2);
    let _ = std::fs::write(dir.join(weft_ost::IDENTITY_FILE), identity);
    let _ = std::fs::write(dir.join(weft_ost::RESERVE_FILE), input.0);
    let index = u32::from(identity.first().copied().unwrap_or(0) & 1);
    if let Ok((store, _identity)) =
        FsStore::open(&dir, "fuzzfs", index, Arc::new(CacheLimits::default()))
    {
        let _ = store.version_reserve();
        let _ = store.list(None, 16);
    }
}

/// The OST store whose object files each input writes (formatted once).
fn object_store() -> &'static FsStore {
    static STORE: OnceLock<FsStore> = OnceLock::new();
    STORE.get_or_init(|| {
        let dir = scratch().join("ost-objects");
        FsStore::open(&dir, "fuzzfs", 0, Arc::new(CacheLimits::default()))
            .unwrap_or_else(|e| panic!("formatting {}: {e}", dir.display()))
            .0
    })
}

/// An object file as the input says: body, `user.weft.lz4` (or none), `user.weft.dv` (or
/// none); then what the OST does with objects.
fn ost_object(data: &[u8]) {
    let store = object_store();
    let mut input = Input(data);
    let id = ObjectId {
        fid: Fid {
            seq: 0x2_0000_0400,
            oid: 1,
            ver: 0,
        },
        component: 0,
        stripe: 0,
    };
    let path = weft_ost::object_path(store.dir(), &id);
    let ctl = input.byte();
    let lz4 = (ctl & 1 != 0).then(|| {
        // Usually sizes about what the file holds (so reads reach the chunks).
        let mut m = input.take(16).to_vec();
        if ctl & 2 == 0 && m.len() == 16 {
            let size = u64::from_le_bytes(m[..8].try_into().unwrap_or_default()) % (4 << 20);
            m[..8].copy_from_slice(&size.to_le_bytes());
        }
        m
    });
    let dv = (ctl & 4 != 0).then(|| input.piece(1).to_vec());
    // The body: a few slots (64 KiB + 4 KiB apart) with the input's bytes at their starts,
    // so that chunk headers land where the decoder looks.
    let slots = usize::from(ctl >> 4 & 3) + 1;
    let slot = (64 << 10) + 4096;
    let mut body = Vec::new();
    for i in 0..slots {
        let piece = input.piece(64);
        if piece.is_empty() && i > 0 {
            break;
        }
        body.resize(i * slot, 0);
        body.extend_from_slice(piece);
    }
    if let Some(parent) = path.parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    let _ = std::fs::remove_file(&path);
    if std::fs::write(&path, &body).is_err() {
        return;
    }
    if let Some(m) = &lz4 {
        let _ = rustix::fs::setxattr(&path, "user.weft.lz4", m, rustix::fs::XattrFlags::empty());
    }
    if let Some(v) = &dv {
        let _ = rustix::fs::setxattr(&path, "user.weft.dv", v, rustix::fs::XattrFlags::empty());
    }
    let off = |input: &mut Input<'_>| input.u64() % (512 << 10);
    let _ = store.stat(&id);
    let _ = store.version(&id);
    let _ = store.read(&id, off(&mut input), (off(&mut input) as usize).max(1));
    let _ = store.read(&id, 0, 4 << 20);
    let _ = store.seek(&id, off(&mut input), false);
    let _ = store.seek(&id, off(&mut input), true);
    match input.byte() % 4 {
        0 => {
            let _ = store.punch(&id, off(&mut input), off(&mut input));
        }
        1 => {
            let _ = store.set_size(&id, off(&mut input), None);
        }
        2 => {
            let n = usize::from(input.byte()) * 97;
            let _ = store.write(&id, off(&mut input), &Bytes::from(vec![0x5a; n]), None);
        }
        _ => {}
    }
    let _ = store.read(&id, 0, 1 << 20);
    let _ = store.list(None, 4);
}

/// Writes a starting corpus of valid encodings into `$WEFT_FUZZ_SEEDS` (run the target
/// once with it set and `-runs=0`): each mode's input made from the crates' own encoders
/// and a freshly formatted MGS and OST directory.
fn write_seeds() {
    let Some(out) = std::env::var_os("WEFT_FUZZ_SEEDS").map(PathBuf::from) else {
        return;
    };
    let _ = std::fs::create_dir_all(&out);
    let put = |name: &str, mode: u8, body: &[u8]| {
        let mut b = vec![mode];
        b.extend_from_slice(body);
        let _ = std::fs::write(out.join(name), b);
    };
    let now = weft_proto::time::Timestamp {
        sec: 1_700_000_000,
        nsec: 5,
    };
    let layout = Layout {
        generation: 1,
        components: vec![
            weft_proto::layout::LayoutComponent {
                id: 1,
                start: 0,
                end: 4 << 20,
                stripe_size: 1 << 20,
                stripe_count: 2,
                pool: None,
                osts: vec![0, 1],
                object_fid: None,
                compress: weft_proto::Compression::Inherit,
            },
            weft_proto::layout::LayoutComponent {
                id: 2,
                start: 4 << 20,
                end: weft_proto::layout::EOF,
                stripe_size: 1 << 20,
                stripe_count: 1,
                pool: Some("p".into()),
                osts: Vec::new(),
                object_fid: None,
                compress: weft_proto::Compression::Inherit,
            },
        ],
    };
    let mut inode = Inode::new(weft_proto::mdt::FileKind::Regular, 0o644, 1, 2, now);
    inode.layout = Some(layout.clone());
    put("inode", 0, &store::encode(&inode).unwrap_or_default());
    let d = Dirent {
        fid: Fid::ROOT,
        kind: weft_proto::mdt::FileKind::Directory,
    };
    put("dirent", 0, &store::encode(&d).unwrap_or_default());
    let id = ObjectId {
        fid: Fid::ROOT,
        component: 1,
        stripe: 0,
    };
    let r = DestroyRecord {
        fid: Fid::ROOT,
        objects: vec![(0, id)],
    };
    put("destroy", 0, &store::encode(&r).unwrap_or_default());
    put(
        "layout",
        1,
        &weft_proto::encode(&layout).unwrap_or_default(),
    );
    put(
        "template",
        1,
        &weft_proto::encode(&LayoutTemplate::raid0(2, 1 << 20, -1)).unwrap_or_default(),
    );
    // A formatted MGS's state file: its body (mode 2 adds the header) and all of it.
    let mgs = scratch().join("seed-mgs");
    let _ = std::fs::remove_dir_all(&mgs);
    if weft_mgs::Mgs::open(&mgs, Some("fuzzfs")).is_ok()
        && let Ok(file) = std::fs::read(mgs.join(weft_mgs::STATE_FILE))
    {
        let nl = file.iter().position(|b| *b == b'\n').unwrap_or(0);
        let body = file
            .get(nl + 1..file.len().saturating_sub(1))
            .unwrap_or_default();
        put("mgs-body", 2, body);
        put("mgs-file", 3, &file);
    }
    // A formatted OST's identity (padded to an even length) and reservation.
    let ost = scratch().join("seed-ost");
    let _ = std::fs::remove_dir_all(&ost);
    if FsStore::open(&ost, "fuzzfs", 0, Arc::new(CacheLimits::default())).is_ok() {
        let mut identity = std::fs::read(ost.join(weft_ost::IDENTITY_FILE)).unwrap_or_default();
        if identity.len() % 2 == 1 {
            identity.push(b' ');
        }
        let mut b = vec![(identity.len() / 2).min(255) as u8];
        b.extend_from_slice(&identity);
        b.extend(std::fs::read(ost.join(weft_ost::RESERVE_FILE)).unwrap_or_default());
        put("ost-dir", 4, &b);
    }
    // Compressed objects: one raw chunk and one LZ4 chunk in slots 0 and 1.
    let chunk = |data: &[u8], compress: bool| {
        let payload = if compress {
            lz4_flex::block::compress(data)
        } else {
            data.to_vec()
        };
        let mut c = b"wlz1".to_vec();
        c.extend_from_slice(&u32::from(!compress).to_le_bytes());
        c.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        c.extend_from_slice(&(data.len() as u32).to_le_bytes());
        let crc = crc32c::crc32c_append(crc32c::crc32c(&c), &payload);
        c.extend_from_slice(&crc.to_le_bytes());
        c.extend_from_slice(&payload);
        c.resize(c.len().next_multiple_of(64), 0);
        c
    };
    let raw = chunk(b"stored as it is, since it does not shrink", false);
    let packed = chunk(&[7u8; 3000], true);
    let mut b = vec![1 | (1 << 4)];
    b.extend_from_slice(&((64u64 << 10) + 3000).to_le_bytes());
    b.extend_from_slice(&8192u64.to_le_bytes());
    for c in [&raw, &packed] {
        b.push((c.len() / 64) as u8);
        b.extend_from_slice(c);
    }
    b.extend_from_slice(&[0u8; 40]);
    put("ost-object", 5, &b);
}

fuzz_target!(|data: &[u8]| {
    static SEEDS: std::sync::Once = std::sync::Once::new();
    SEEDS.call_once(write_seeds);
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 6 {
        0 => mdt_records(rest),
        1 => layouts(rest),
        2 => mgs_state(true, rest),
        3 => mgs_state(false, rest),
        4 => ost_dir(rest),
        _ => ost_object(rest),
    }
});
