//! The target over its production store (a data directory): round trips, limits,
//! identity and format, data versions across restarts, `O_DIRECT` and a model test.

use super::space::fits;
use super::*;
use crate::direct::MAX_MAX_IO_MB;
use crate::fdcache::DEFAULT_CAPACITY;
use crate::object::object_path;
use crate::store::fs::format_reserve;
pub(super) use crate::testutil::oid;
use weft_proto::frame::MAX_BULK;
use weft_proto::ost::{OstReply, OstRequest};

pub(super) fn opts() -> OstOptions {
    OstOptions {
        index: 3,
        fsname: "testfs".into(),
    }
}

pub(super) fn new_ost() -> (tempfile::TempDir, Arc<Ost>) {
    let dir = tempfile::tempdir().unwrap();
    let ost = Ost::open(dir.path(), opts()).unwrap();
    (dir, ost)
}

#[tokio::test]
async fn write_then_read_round_trips() {
    let (_d, ost) = new_ost();
    let attr = ost
        .write(oid(1), 0, Bytes::from_static(b"hello world"), false)
        .await
        .unwrap();
    assert!(attr.exists);
    assert_eq!(attr.size, 11);
    let (rattr, data) = ost.read(oid(1), 6, 100).await.unwrap();
    assert_eq!(&data[..], b"world", "short read at EOF");
    assert_eq!(rattr.size, 11);
    assert_eq!(rattr.data_version, attr.data_version);
    let (_, data) = ost.read(oid(1), 11, 10).await.unwrap();
    assert!(data.is_empty());
    let (_, data) = ost.read(oid(1), u64::MAX, 10).await.unwrap();
    assert!(data.is_empty(), "reading far past EOF returns nothing");
}

#[tokio::test]
async fn missing_object_reads_empty_and_does_not_exist() {
    let (_d, ost) = new_ost();
    let (attr, data) = ost.read(oid(9), 0, 4096).await.unwrap();
    assert!(!attr.exists);
    assert!(data.is_empty());
    assert_eq!(ost.getattr(oid(9)).await.unwrap(), ObjectAttr::default());
}

#[tokio::test]
async fn holes_read_as_zeros() {
    let (_d, ost) = new_ost();
    ost.write(oid(1), 1 << 20, Bytes::from_static(b"x"), false)
        .await
        .unwrap();
    let (attr, data) = ost.read(oid(1), 0, 4096).await.unwrap();
    assert_eq!(attr.size, (1 << 20) + 1);
    assert_eq!(data.len(), 4096);
    assert!(data.iter().all(|b| *b == 0));
    assert!(
        attr.blocks < 1024,
        "the hole is sparse: {} blocks",
        attr.blocks
    );
}

#[tokio::test]
async fn punch_shrinks_and_extends() {
    let (_d, ost) = new_ost();
    ost.write(oid(1), 0, Bytes::from(vec![7u8; 8192]), false)
        .await
        .unwrap();
    let a = ost.punch(oid(1), 100).await.unwrap();
    assert_eq!(a.size, 100);
    let b = ost.punch(oid(1), 5000).await.unwrap();
    assert_eq!(b.size, 5000);
    let (_, data) = ost.read(oid(1), 0, 8192).await.unwrap();
    assert_eq!(data.len(), 5000);
    assert!(data[..100].iter().all(|x| *x == 7));
    assert!(
        data[100..].iter().all(|x| *x == 0),
        "extended part reads as zeros"
    );
    let c = ost.punch(oid(2), 42).await.unwrap();
    assert!(c.exists && c.size == 42, "punch creates a missing object");
    assert!(
        matches!(ost.punch(oid(3), MAX_OBJECT_SIZE + 1).await, Err(e) if e.errno == Errno::FBig)
    );
}

#[tokio::test]
async fn destroy_is_idempotent_and_forgets_data() {
    let (_d, ost) = new_ost();
    ost.write(oid(1), 0, Bytes::from_static(b"data"), false)
        .await
        .unwrap();
    ost.destroy(oid(1)).await.unwrap();
    ost.destroy(oid(1)).await.unwrap();
    ost.destroy(oid(2)).await.unwrap();
    assert!(!ost.getattr(oid(1)).await.unwrap().exists);
    // Recreating after destroy starts from empty, not from a stale cached descriptor.
    ost.write(oid(1), 2, Bytes::from_static(b"z"), false)
        .await
        .unwrap();
    let (_, data) = ost.read(oid(1), 0, 10).await.unwrap();
    assert_eq!(&data[..], b"\0\0z");
}

#[tokio::test]
async fn destroy_many_removes_every_object_named_and_only_those() {
    let (_d, ost) = new_ost();
    // Objects spread over many of the hashed directories, some of them twice.
    for n in 0..200 {
        ost.write(oid(n), 0, Bytes::from_static(b"data"), false)
            .await
            .unwrap();
    }
    let doomed: Vec<ObjectId> = (0..150).map(oid).chain([oid(7), oid(5000)]).collect();
    ost.destroy_many(doomed).await.unwrap();
    for n in 0..200 {
        assert_eq!(
            ost.getattr(oid(n)).await.unwrap().exists,
            n >= 150,
            "object {n}"
        );
    }
    // Again: nothing left to remove is not an error.
    ost.destroy_many((0..150).map(oid).collect()).await.unwrap();
    // A descriptor cached before the destroy is not reused by a later write.
    ost.write(oid(3), 1, Bytes::from_static(b"z"), false)
        .await
        .unwrap();
    let (_, data) = ost.read(oid(3), 0, 10).await.unwrap();
    assert_eq!(&data[..], b"\0z");
}

#[tokio::test]
async fn destroy_many_refuses_more_than_a_batch() {
    let (_d, ost) = new_ost();
    ost.write(oid(1), 0, Bytes::from_static(b"kept"), false)
        .await
        .unwrap();
    let too_many = (0..=MAX_DESTROY_BATCH as u32).map(oid).collect();
    let e = ost.destroy_many(too_many).await.unwrap_err();
    assert_eq!(e.errno, Errno::Inval);
    assert!(
        ost.getattr(oid(1)).await.unwrap().exists,
        "nothing was destroyed"
    );
}

#[tokio::test]
async fn data_version_strictly_increases_and_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let ost = Ost::open(dir.path(), opts()).unwrap();
    let mut last = 0;
    for i in 0..5u64 {
        let a = ost
            .write(oid(1), i, Bytes::from_static(b"a"), false)
            .await
            .unwrap();
        assert!(a.data_version > last);
        last = a.data_version;
    }
    let p = ost.punch(oid(1), 1).await.unwrap();
    assert!(p.data_version > last);
    last = p.data_version;
    assert_eq!(
        ost.getattr(oid(1)).await.unwrap().data_version,
        last,
        "reads do not change it"
    );
    drop(ost);
    let ost = Ost::open(dir.path(), opts()).unwrap();
    let after = ost.getattr(oid(1)).await.unwrap().data_version;
    assert!(after >= last, "never goes backwards across a restart");
    let w = ost
        .write(oid(1), 0, Bytes::from_static(b"b"), false)
        .await
        .unwrap();
    assert!(w.data_version > after);
    // Stable while nothing changes.
    assert_eq!(
        ost.getattr(oid(1)).await.unwrap().data_version,
        w.data_version
    );
}

#[test]
fn reopen_checks_identity() {
    let dir = tempfile::tempdir().unwrap();
    let uuid = Ost::open(dir.path(), opts()).unwrap().uuid();
    assert_eq!(Ost::open(dir.path(), opts()).unwrap().uuid(), uuid);
    let e = Ost::open(
        dir.path(),
        OstOptions {
            index: 3,
            fsname: "other".into(),
        },
    )
    .unwrap_err();
    assert!(matches!(e, OstError::WrongFsname { .. }), "{e}");
    assert!(e.to_string().contains("testfs"), "{e}");
    let e = Ost::open(
        dir.path(),
        OstOptions {
            index: 4,
            fsname: "testfs".into(),
        },
    )
    .unwrap_err();
    assert!(
        matches!(
            e,
            OstError::WrongIndex {
                found: 3,
                requested: 4
            }
        ),
        "{e}"
    );
    let e = Ost::open(
        dir.path(),
        OstOptions {
            index: 3,
            fsname: "bad/name".into(),
        },
    )
    .unwrap_err();
    assert!(matches!(e, OstError::InvalidFsname(_)), "{e}");
}

#[test]
fn a_directory_is_served_by_one_target_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let ost = Ost::open(dir.path(), opts()).unwrap();
    assert!(matches!(
        Ost::open(dir.path(), opts()),
        Err(OstError::Busy(_))
    ));
    drop(ost);
    Ost::open(dir.path(), opts()).unwrap();
}

#[test]
fn refuses_foreign_directories() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("precious.txt"), b"user data").unwrap();
    assert!(matches!(
        Ost::open(dir.path(), opts()),
        Err(OstError::NotEmpty(_))
    ));

    let mdt = tempfile::tempdir().unwrap();
    let id = Identity {
        format_version: FORMAT_VERSION,
        fsname: "testfs".into(),
        kind: "mdt".into(),
        index: 3,
        uuid: Uuid::new_v4(),
    };
    id.store(mdt.path()).unwrap();
    assert!(matches!(
        Ost::open(mdt.path(), opts()),
        Err(OstError::WrongKind { .. })
    ));

    let corrupt = tempfile::tempdir().unwrap();
    std::fs::write(corrupt.path().join(crate::IDENTITY_FILE), b"\0\0garbage").unwrap();
    assert!(matches!(
        Ost::open(corrupt.path(), opts()),
        Err(OstError::Corrupt { .. })
    ));
}

#[test]
fn identity_file_is_readable_json() {
    let dir = tempfile::tempdir().unwrap();
    let ost = Ost::open(dir.path(), opts()).unwrap();
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join(crate::IDENTITY_FILE)).unwrap())
            .unwrap();
    assert_eq!(v["kind"], "ost");
    assert_eq!(v["fsname"], "testfs");
    assert_eq!(v["index"], 3);
    assert_eq!(v["format_version"], 1);
    assert_eq!(v["uuid"], ost.uuid().to_string());
    assert_eq!(
        std::fs::read_dir(dir.path().join("O")).unwrap().count(),
        256
    );
}

#[tokio::test]
async fn statfs_reports_the_real_device() {
    let (d, ost) = new_ost();
    let s = ost.statfs().await.unwrap();
    let real = rustix::fs::statvfs(d.path()).unwrap();
    assert!(s.bsize > 0 && s.blocks > 0 && s.bavail > 0 && s.files > 0 && s.namelen > 0);
    assert_eq!(s.blocks, real.f_blocks);
    assert!(s.bfree >= s.bavail);
}

#[tokio::test]
async fn big_offsets() {
    let (_d, ost) = new_ost();
    let a = ost
        .write(oid(1), 1 << 40, Bytes::from_static(b"far"), false)
        .await
        .unwrap();
    assert_eq!(a.size, (1 << 40) + 3);
    let (_, data) = ost.read(oid(1), 1 << 40, 10).await.unwrap();
    assert_eq!(&data[..], b"far");
    let e = ost
        .write(oid(1), MAX_OBJECT_SIZE, Bytes::from_static(b"x"), false)
        .await
        .unwrap_err();
    assert_eq!(e.errno, Errno::FBig);
    let e = ost
        .write(oid(1), u64::MAX, Bytes::from_static(b"x"), false)
        .await
        .unwrap_err();
    assert_eq!(e.errno, Errno::FBig);
    // Near the limit the kernel may refuse first: either way it is EFBIG, never a panic.
    if let Err(e) = ost
        .write(oid(1), MAX_OBJECT_SIZE - 1, Bytes::from_static(b"x"), false)
        .await
    {
        assert_eq!(e.errno, Errno::FBig, "{e}");
    }
}

#[tokio::test]
async fn oversized_read_is_invalid() {
    let (_d, ost) = new_ost();
    let e = ost.read(oid(1), 0, MAX_BULK + 1).await.unwrap_err();
    assert_eq!(e.errno, Errno::Inval);
}

#[tokio::test]
async fn parallel_writes_to_disjoint_ranges_give_exact_bytes() {
    let (_d, ost) = new_ost();
    const CHUNK: usize = 64 << 10;
    const N: usize = 32;
    let mut tasks = Vec::new();
    for i in 0..N {
        let ost = Arc::clone(&ost);
        tasks.push(tokio::spawn(async move {
            let data = Bytes::from(vec![i as u8 + 1; CHUNK]);
            ost.write(oid(1), (i * CHUNK) as u64, data, i % 4 == 0)
                .await
                .unwrap()
                .data_version
        }));
    }
    let mut versions = Vec::new();
    for t in tasks {
        versions.push(t.await.unwrap());
    }
    versions.sort_unstable();
    versions.dedup();
    assert_eq!(versions.len(), N, "every write got its own version");
    let (attr, data) = ost.read(oid(1), 0, (N * CHUNK) as u32).await.unwrap();
    assert_eq!(attr.size, (N * CHUNK) as u64);
    assert_eq!(
        attr.data_version,
        *versions.last().unwrap(),
        "the object keeps the newest version"
    );
    for (i, chunk) in data.chunks(CHUNK).enumerate() {
        assert!(
            chunk.iter().all(|b| *b == i as u8 + 1),
            "chunk {i} corrupted"
        );
    }
}

#[tokio::test]
async fn execute_dispatches_and_counts_bulk() {
    let (_d, ost) = new_ost();
    let (r, _) = ost
        .execute(
            OstRequest::Write {
                object: oid(5),
                offset: 0,
                sync: true,
                compress: Default::default(),
            },
            Bytes::from(vec![1u8; 10000]),
        )
        .await
        .unwrap();
    assert!(matches!(r, OstReply::Attr(a) if a.size == 10000));
    let (r, bulk) = ost
        .execute(
            OstRequest::Read {
                object: oid(5),
                offset: 0,
                len: 100,
            },
            Bytes::new(),
        )
        .await
        .unwrap();
    assert!(matches!(r, OstReply::Data { attr } if attr.exists));
    assert_eq!(bulk.len(), 100);
    assert!(matches!(
        ost.execute(OstRequest::StatFs, Bytes::new())
            .await
            .unwrap()
            .0,
        OstReply::StatFs(_)
    ));
    assert_eq!(
        ost.execute(
            OstRequest::Sync {
                object: Some(oid(5))
            },
            Bytes::new()
        )
        .await
        .unwrap()
        .0,
        OstReply::Ok
    );
    assert_eq!(
        ost.execute(OstRequest::Sync { object: None }, Bytes::new())
            .await
            .unwrap()
            .0,
        OstReply::Ok
    );
    assert_eq!(
        ost.execute(OstRequest::Destroy { object: oid(5) }, Bytes::new())
            .await
            .unwrap()
            .0,
        OstReply::Ok
    );
    let e = ost
        .execute(
            OstRequest::GetAttr { object: oid(5) },
            Bytes::from_static(b"x"),
        )
        .await
        .unwrap_err();
    assert_eq!(e.errno, Errno::Proto);
    let s = ost.stats();
    assert_eq!(
        (s.write_bytes, s.read_bytes, s.writes, s.reads),
        (10000, 100, 1, 1)
    );
    assert_eq!(s.brw[2].writes, 1, "10000 bytes is in the <=16 KiB bucket");
}

#[test]
fn space_check_keeps_a_reserve() {
    let gib = 1u64 << 30;
    assert!(fits(1 << 20, 10 * gib, 100 * gib));
    assert!(
        !fits(10 * gib, 10 * gib, 100 * gib),
        "the reserve is kept back"
    );
    assert!(!fits(1, 0, 100 * gib));
    assert!(
        fits(1, 2 * gib, 10_000 * gib),
        "the reserve is capped at 1 GiB"
    );
    assert!(!fits(u64::MAX, u64::MAX, u64::MAX));
}

#[tokio::test]
async fn many_objects_overflow_the_descriptor_cache_safely() {
    let (_d, ost) = new_ost();
    for i in 0..(DEFAULT_CAPACITY as u32 + 50) {
        ost.write(oid(i), 0, Bytes::copy_from_slice(&i.to_le_bytes()), false)
            .await
            .unwrap();
    }
    for i in [0u32, 1, 500, DEFAULT_CAPACITY as u32 + 49] {
        let (_, data) = ost.read(oid(i), 0, 4).await.unwrap();
        assert_eq!(&data[..], &i.to_le_bytes());
    }
}

#[test]
fn an_interrupted_format_is_resumed() {
    let dir = tempfile::tempdir().unwrap();
    // What a crash during format can leave: some subdirectories, the reservation, a temp file.
    std::fs::create_dir_all(dir.path().join("O/00")).unwrap();
    format_reserve(dir.path()).unwrap();
    std::fs::write(dir.path().join("target.json.tmp"), b"{").unwrap();
    let ost = Ost::open(dir.path(), opts()).unwrap();
    assert_eq!(ost.index(), 3);
    assert_eq!(
        std::fs::read_dir(dir.path().join("O")).unwrap().count(),
        256
    );

    // But an object directory with objects in it is not ours to format.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("O/07")).unwrap();
    std::fs::write(dir.path().join("O/07/200000400-1-0-c0-s0"), b"data").unwrap();
    assert!(matches!(
        Ost::open(dir.path(), opts()),
        Err(OstError::NotEmpty(_))
    ));
}

#[tokio::test]
async fn an_object_without_a_version_gets_a_fresh_one() {
    let (d, ost) = new_ost();
    let w = ost
        .write(oid(1), 0, Bytes::from_static(b"abc"), false)
        .await
        .unwrap();
    let f = std::fs::File::open(object_path(d.path(), &oid(1))).unwrap();
    rustix::fs::fremovexattr(&f, crate::DV_XATTR).unwrap();
    let a = ost.getattr(oid(1)).await.unwrap();
    assert!(a.data_version > w.data_version);
    assert_eq!(
        ost.getattr(oid(1)).await.unwrap().data_version,
        a.data_version,
        "and keeps it"
    );
}

#[tokio::test]
async fn read_reports_the_version_of_the_data_it_returns() {
    let (_d, ost) = new_ost();
    let w = ost
        .write(oid(1), 0, Bytes::from_static(b"abc"), true)
        .await
        .unwrap();
    let (a, _) = ost.read(oid(1), 0, 3).await.unwrap();
    assert_eq!(a.data_version, w.data_version);
    assert!(a.blocks > 0);
}

/// `len` bytes of a pattern in a buffer starting `skew` bytes after a page boundary (the RPC
/// layer receives bulk page-aligned: skew 0).
fn bulk_at(len: usize, skew: usize, seed: u8) -> Bytes {
    let (mut v, pad) = weft_proto::frame::aligned_vec(len + skew);
    let pad = pad + skew;
    v.resize(pad, 0);
    v.extend((0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)));
    Bytes::from(v).slice(pad..)
}

#[tokio::test]
async fn large_aligned_io_bypasses_the_page_cache_and_agrees_with_buffered_io() {
    let (_d, ost) = new_ost();
    let mut model = vec![0u8; 0];
    let put = |model: &mut Vec<u8>, at: usize, data: &[u8]| {
        if model.len() < at + data.len() {
            model.resize(at + data.len(), 0);
        }
        model[at..at + data.len()].copy_from_slice(data);
    };
    let big = bulk_at(2 << 20, 0, 1);
    ost.write(oid(1), 0, big.clone(), false).await.unwrap();
    put(&mut model, 0, &big);
    assert_eq!(ost.stats().direct_writes, 1, "2 MiB, aligned: direct");
    // Small and unaligned writes are buffered, and land in pages a direct read must see.
    ost.write(oid(1), 1000, Bytes::from_static(b"buffered bytes"), false)
        .await
        .unwrap();
    put(&mut model, 1000, b"buffered bytes");
    let skewed = bulk_at(2 << 20, 64, 7);
    ost.write(oid(1), 2 << 20, skewed.clone(), false)
        .await
        .unwrap();
    put(&mut model, 2 << 20, &skewed);
    ost.write(oid(1), (4 << 20) + 3, Bytes::from_static(b"tail"), false)
        .await
        .unwrap();
    put(&mut model, (4 << 20) + 3, b"tail");
    assert_eq!(
        ost.stats().direct_writes,
        1,
        "unaligned buffer or small: buffered"
    );

    // A direct read over dirty pages, one that ends past EOF (short), an unaligned one.
    let (attr, all) = ost.read(oid(1), 0, 8 << 20).await.unwrap();
    assert_eq!(attr.size, model.len() as u64);
    assert!(all[..] == model[..], "whole object");
    let (_, part) = ost.read(oid(1), 1 << 20, 3 << 20).await.unwrap();
    assert!(part[..] == model[1 << 20..4 << 20]);
    let (_, odd) = ost.read(oid(1), 999, 3 << 20).await.unwrap();
    assert!(odd[..] == model[999..999 + (3 << 20)]);
    assert_eq!(ost.stats().direct_reads, 2, "aligned offsets only");

    // With the limits at their largest everything is cached again.
    ost.cache_limits().set(true, MAX_MAX_IO_MB).unwrap();
    ost.cache_limits().set(false, MAX_MAX_IO_MB).unwrap();
    let again = bulk_at(2 << 20, 0, 9);
    ost.write(oid(1), 0, again.clone(), false).await.unwrap();
    put(&mut model, 0, &again);
    let (_, all) = ost.read(oid(1), 0, 8 << 20).await.unwrap();
    assert!(all[..] == model[..]);
    let s = ost.stats();
    assert_eq!((s.direct_reads, s.direct_writes), (2, 1));
    assert!(ost.cache_limits().set(false, MAX_MAX_IO_MB + 1).is_err());
    assert_eq!(ost.cache_limits().get(), (MAX_MAX_IO_MB, MAX_MAX_IO_MB));
}
