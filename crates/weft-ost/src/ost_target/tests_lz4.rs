//! Compressed objects through the target over its production store: what compression
//! saves and how it is counted, hole search and punching at chunk granularity, objects
//! keeping the form they were created with, and the usage figures after a restart.

use super::tests::{new_ost, oid, opts};
use super::*;
use crate::store::memory::MemoryStore;

fn text(len: usize) -> Bytes {
    let mut out = Vec::with_capacity(len + 100);
    let mut i = 0u64;
    while out.len() < len {
        out.extend_from_slice(
            format!(
                "{{\"seq\":{i},\"level\":\"warn\",\"msg\":\"disk {} is slow\"}}\n",
                i % 13
            )
            .as_bytes(),
        );
        i += 1;
    }
    out.truncate(len);
    Bytes::from(out)
}

#[tokio::test]
async fn compressed_objects_store_less_and_read_back() {
    let (_d, ost) = new_ost();
    let data = text(4 << 20);
    ost.write(oid(1), 0, data.clone(), false).await.unwrap();
    ost.set_compress(true).unwrap();
    assert!(ost.compress());
    for (i, part) in data.chunks(1 << 20).enumerate() {
        ost.write(oid(2), (i as u64) << 20, data.slice_ref(part), true)
            .await
            .unwrap();
    }
    let plain = ost.getattr(oid(1)).await.unwrap();
    let packed = ost.getattr(oid(2)).await.unwrap();
    assert_eq!(packed.size, data.len() as u64, "logical size");
    assert!(
        packed.blocks * 4 < plain.blocks,
        "{} blocks compressed, {} plain",
        packed.blocks,
        plain.blocks
    );
    let (_, got) = ost.read(oid(2), 0, data.len() as u32).await.unwrap();
    assert_eq!(got, data);
    let s = ost.stats();
    assert_eq!(s.compressed_logical, data.len() as u64);
    // The slots' bytes, without the file system's own blocks (extent tree, attributes).
    assert!(s.compressed_stored <= packed.blocks * 512);
    assert!(s.compressed_stored + (64 << 10) > packed.blocks * 512);
    // Object 1 was created plain and stays plain.
    ost.write(oid(1), 100, Bytes::from_static(b"abc"), false)
        .await
        .unwrap();
    assert_eq!(ost.stats().compressed_logical, data.len() as u64);
    // The listing shows logical sizes.
    let (objects, _) = ost.list_objects(None, 10).await.unwrap();
    assert!(
        objects.contains(&(oid(2), data.len() as u64)),
        "{objects:?}"
    );
    // Destroying takes the object out of the figures.
    ost.destroy(oid(2)).await.unwrap();
    let s = ost.stats();
    assert_eq!((s.compressed_logical, s.compressed_stored), (0, 0));
}

#[tokio::test]
async fn holes_and_punches_work_by_chunk() {
    let (_d, ost) = new_ost();
    ost.set_compress(true).unwrap();
    let id = oid(3);
    let mb = 1u64 << 20;
    ost.write(id, 4 * mb, text(mb as usize), false)
        .await
        .unwrap();
    // Truncating up leaves a hole at the end.
    ost.punch(id, 8 * mb).await.unwrap();
    assert_eq!(ost.seek(id, 0, false).await.unwrap(), Some(4 * mb));
    assert_eq!(ost.seek(id, 0, true).await.unwrap(), Some(0));
    assert_eq!(ost.seek(id, 4 * mb, true).await.unwrap(), Some(5 * mb));
    assert_eq!(ost.seek(id, 5 * mb, false).await.unwrap(), None);
    assert_eq!(ost.seek(id, 9 * mb, true).await.unwrap(), Some(9 * mb));
    // A punch frees whole chunks and zeroes the parts of the others.
    let before = ost.getattr(id).await.unwrap().blocks;
    let a = ost.punch_range(id, 4 * mb + 1000, 256 << 10).await.unwrap();
    assert_eq!(a.size, 8 * mb);
    assert!(a.blocks < before, "{} -> {}", before, a.blocks);
    let (_, got) = ost.read(id, 4 * mb, 300 << 10).await.unwrap();
    let want = text(mb as usize);
    assert_eq!(got[..1000], want[..1000]);
    assert!(got[1000..1000 + (256 << 10)].iter().all(|&b| b == 0));
    assert_eq!(
        got[1000 + (256 << 10)..],
        want[1000 + (256 << 10)..300 << 10]
    );
    assert_eq!(
        ost.seek(id, 4 * mb, true).await.unwrap(),
        Some(4 * mb + (64 << 10))
    );
    // Truncating down and up again reads zeros past the cut.
    ost.punch(id, 4 * mb + 10).await.unwrap();
    ost.punch(id, 6 * mb).await.unwrap();
    let (_, got) = ost.read(id, 4 * mb, 100).await.unwrap();
    assert_eq!(got[..10], want[..10]);
    assert!(got[10..].iter().all(|&b| b == 0));
}

#[tokio::test]
async fn concurrent_writes_into_one_chunk_all_land() {
    let (_d, ost) = new_ost();
    ost.set_compress(true).unwrap();
    let id = oid(4);
    let writes = (0..32u64).map(|i| {
        let ost = Arc::clone(&ost);
        tokio::spawn(async move {
            ost.write(
                id,
                i * 1000,
                Bytes::from(vec![b'a' + i as u8 % 26; 1000]),
                false,
            )
            .await
            .unwrap();
        })
    });
    for w in writes.collect::<Vec<_>>() {
        w.await.unwrap();
    }
    let (_, got) = ost.read(id, 0, 32_000).await.unwrap();
    for i in 0..32usize {
        assert!(
            got[i * 1000..(i + 1) * 1000]
                .iter()
                .all(|&b| b == b'a' + i as u8 % 26),
            "write {i} lost"
        );
    }
}

#[tokio::test]
async fn usage_is_counted_again_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = text(3 << 20);
    let stats = {
        let ost = Ost::open(dir.path(), opts()).unwrap();
        ost.set_compress(true).unwrap();
        ost.write(oid(5), 0, data.clone(), true).await.unwrap();
        ost.write(oid(6), 1 << 20, data.clone(), true)
            .await
            .unwrap();
        ost.punch(oid(6), 2 << 20).await.unwrap();
        ost.stats()
    };
    assert_eq!(stats.compressed_logical, (3 << 20) + (2 << 20));
    let ost = Ost::open(dir.path(), opts()).unwrap();
    assert!(!ost.compress(), "compression is a run-time setting");
    let again = ost.stats();
    assert_eq!(
        (again.compressed_logical, again.compressed_stored),
        (stats.compressed_logical, stats.compressed_stored)
    );
    let (_, got) = ost.read(oid(5), 0, data.len() as u32).await.unwrap();
    assert_eq!(got, data);
}

#[test]
fn a_store_without_compression_refuses_it() {
    let ost = Ost::with_store(Arc::new(MemoryStore::new()), opts()).unwrap();
    assert!(ost.set_compress(true).is_err());
    assert!(ost.set_compress(false).is_ok());
    assert!(!ost.compress());
}

/// A layout's choice (sent with each write and punch) decides how a new object is
/// created, over the target's setting; `Inherit` follows the setting; existing objects
/// keep their form whatever a later request asks.
#[tokio::test]
async fn the_requests_choice_decides_how_new_objects_are_created() {
    let (_d, ost) = new_ost();
    let data = text(1 << 20);
    let compressed = |ost: &Arc<Ost>| ost.stats().compressed_logical;
    // Setting off: Lz4 compresses, Inherit and Off do not.
    ost.write_from(LOCAL, oid(1), 0, data.clone(), false, Compression::Lz4)
        .await
        .unwrap();
    assert_eq!(compressed(&ost), 1 << 20);
    ost.write_from(LOCAL, oid(2), 0, data.clone(), false, Compression::Inherit)
        .await
        .unwrap();
    ost.write_from(LOCAL, oid(3), 0, data.clone(), false, Compression::Off)
        .await
        .unwrap();
    assert_eq!(compressed(&ost), 1 << 20);
    // A punch that creates an object follows the same rule.
    ost.punch_with(oid(4), 1 << 20, Compression::Lz4)
        .await
        .unwrap();
    assert_eq!(compressed(&ost), 2 << 20);
    // Setting on: Off stays plain, Inherit compresses.
    ost.set_compress(true).unwrap();
    ost.write_from(LOCAL, oid(5), 0, data.clone(), false, Compression::Off)
        .await
        .unwrap();
    assert_eq!(compressed(&ost), 2 << 20);
    ost.write_from(LOCAL, oid(6), 0, data.clone(), false, Compression::Inherit)
        .await
        .unwrap();
    assert_eq!(compressed(&ost), 3 << 20);
    // Existing objects keep their form.
    ost.write_from(
        LOCAL,
        oid(3),
        1 << 20,
        data.clone(),
        false,
        Compression::Lz4,
    )
    .await
    .unwrap();
    ost.write_from(
        LOCAL,
        oid(1),
        1 << 20,
        data.clone(),
        false,
        Compression::Off,
    )
    .await
    .unwrap();
    assert_eq!(compressed(&ost), 4 << 20, "object 1 grew compressed");
    for (id, len) in [(1, 2 << 20), (3, 2 << 20), (5, 1 << 20), (6, 1 << 20)] {
        let (_, got) = ost.read(oid(id), 0, 4 << 20).await.unwrap();
        assert_eq!(got.len(), len, "object {id}");
        assert_eq!(got.slice(..1 << 20), data, "object {id}");
    }
}
