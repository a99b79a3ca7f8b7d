//! Released files over a fake MDT whose restores copy an archive into the fake objects:
//! nothing is on the OSTs until a restore puts it there, so a read that skipped its
//! restore reads zeros and fails the comparison.

use super::{FakeArchive, KIB, MIB, Rig, pattern, striped};
use std::collections::BTreeMap;
use weft_proto::hsm::HSM_RELEASED;
use weft_proto::mdt::{AccessMode, FileKind};

/// A released file of `size` bytes over 4 stripes of 64 KiB, open for reading; its bytes.
fn released_file(size: u64) -> (Rig, Vec<u8>, super::File) {
    let rig = Rig::new(striped(64 * KIB, 4));
    let data = pattern(size as usize);
    *rig.mdt.archive.lock() = Some(FakeArchive {
        data: data.clone(),
        layout: rig.layout.clone(),
        objects: rig.objects.clone(),
        asked: Vec::new(),
        restored: BTreeMap::new(),
    });
    let mut attr = crate::test_attrs::attr(rig.fid, FileKind::Regular);
    attr.size = size;
    attr.hsm_flags = HSM_RELEASED;
    let f = rig.open_with_attr(AccessMode::Read, attr);
    (rig, data, f)
}

fn asked(rig: &Rig) -> Vec<(u64, u64)> {
    rig.mdt
        .archive
        .lock()
        .as_ref()
        .map(|a| a.asked.clone())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_sequential_reader_of_a_released_file_reads_the_archive() {
    let size = 6 * MIB + 5 * KIB;
    let (rig, data, f) = released_file(size);
    assert!(f.is_released());
    let mut at = 0;
    while at < size {
        let got = f.read_at(at, 128 * KIB).await.unwrap();
        let end = (at + 128 * KIB).min(size);
        assert_eq!(&got[..], &data[at as usize..end as usize], "at {at}");
        at = end;
        rig.quiesce(size).await;
    }
    assert!(!f.is_released(), "the last restore said the file is whole");
    // Once whole, reads go straight to the objects.
    let before = asked(&rig).len();
    assert_eq!(f.read_at(0, 4 * KIB).await.unwrap(), &data[..4096]);
    assert_eq!(asked(&rig).len(), before);
}

#[tokio::test]
async fn a_read_in_the_middle_restores_only_its_range() {
    let size = 16 * MIB;
    let (rig, data, f) = released_file(size);
    let at = 9 * MIB + 100;
    let got = f.read_at(at, 4 * KIB).await.unwrap();
    assert_eq!(&got[..], &data[at as usize..at as usize + 4096]);
    let asked = asked(&rig);
    assert!(!asked.is_empty());
    assert!(
        asked.iter().all(|&(a, b)| a >= 8 * MIB && b <= 11 * MIB),
        "only the neighbourhood of the read was restored: {asked:?}"
    );
    assert!(f.is_released());
}
