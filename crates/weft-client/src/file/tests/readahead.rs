//! Read-ahead over fake objects: a sequential reader's window is fetched ahead and then
//! served from the cache, each byte fetched once; a random reader fetches only what it
//! asks for; read errors reach the reader.

use super::{File, KIB, MIB, Rig, pattern, striped};
use crate::cache::CACHE_PAGE;
use crate::io::Op;
use crate::io::failing::{Fault, Rule};
use weft_proto::Errno;
use weft_proto::mdt::AccessMode;

/// A file of `size` bytes striped over `count` OSTs in 64 KiB stripes, open for reading,
/// and its bytes.
fn stored_file(count: u32, size: u64) -> (Rig, Vec<u8>, File) {
    let rig = Rig::new(striped(64 * KIB, count));
    let data = pattern(size as usize);
    rig.store(&data);
    let f = rig.open(AccessMode::Read, size);
    (rig, data, f)
}

/// Bytes the objects were asked for so far.
fn bytes_read(rig: &Rig) -> u64 {
    rig.objects.calls_of(Op::Read).iter().map(|c| c.len).sum()
}

#[tokio::test]
async fn sequential_reads_are_read_ahead_and_served_from_the_cache() {
    let size = 8 * MIB;
    let (rig, data, f) = stored_file(4, size);

    // Read on in 128 KiB calls. The first fetches its page; from the second on the window
    // (1 MiB, doubling up to 4 MiB, cut to whole pages) runs ahead, so from the second
    // page on every page is cached before the reader reaches it.
    let mut at = 0;
    while at < size {
        let (first, last) = (at / CACHE_PAGE, (at + 128 * KIB - 1) / CACHE_PAGE);
        if at >= CACHE_PAGE {
            assert!(
                (first..=last).all(|i| rig.client.cache().contains(rig.fid, i)),
                "the pages at {at} were read ahead"
            );
        }
        let got = f.read_at(at, 128 * KIB).await.unwrap();
        assert_eq!(&got[..], &data[at as usize..(at + 128 * KIB) as usize]);
        at += 128 * KIB;
        rig.quiesce(size).await;
    }
    assert_eq!(bytes_read(&rig), size, "each byte is fetched exactly once");
    assert!(
        rig.objects
            .calls_of(Op::Read)
            .iter()
            .all(|c| c.len == 64 * KIB),
        "read-ahead sends whole stripe-sized RPCs"
    );
}

#[tokio::test]
async fn a_cached_sequential_read_needs_no_wait_and_no_object_read() {
    let size = 4 * MIB;
    let (rig, data, f) = stored_file(2, size);
    f.read_at(0, 64 * KIB).await.unwrap();
    rig.quiesce(size).await;
    rig.objects.clear_calls();
    // The rest of page 0 is cached: served on the caller's thread, no object read.
    let got = f.try_read_cached(64 * KIB, 64 * KIB).unwrap();
    assert_eq!(&got[..], &data[64 * KIB as usize..128 * KIB as usize]);
    assert!(
        rig.objects
            .calls_of(Op::Read)
            .iter()
            .all(|c| c.offset >= MIB / 2)
    );
    // A jump is not served from the cache.
    assert!(f.try_read_cached(3 * MIB, 4 * KIB).is_none());
}

#[tokio::test]
async fn random_reads_fetch_only_what_they_ask_for() {
    let size = 8 * MIB;
    let (rig, data, f) = stored_file(4, size);
    let mut asked = 0;
    for (at, len) in [
        (5 * MIB, 4 * KIB),
        (2 * MIB + 100, 10_000),
        (7 * MIB, 64 * KIB),
    ] {
        let got = f.read_at(at, len).await.unwrap();
        assert_eq!(&got[..], &data[at as usize..(at + len) as usize]);
        asked += len;
        rig.quiesce(size).await;
    }
    assert_eq!(bytes_read(&rig), asked, "no read-ahead for a random reader");
    assert_eq!(
        rig.client.cached_bytes(),
        0,
        "random reads bypass the cache"
    );
}

#[tokio::test]
async fn reads_past_the_end_are_short_and_holes_read_as_zeros() {
    let rig = Rig::new(striped(64 * KIB, 4));
    let size = 300 * KIB;
    // Only the first stripe was ever written: the other objects do not exist.
    let data = pattern(64 * KIB as usize);
    rig.store(&data);
    let f = rig.open(AccessMode::Read, size);
    let got = f.read_at(0, MIB).await.unwrap();
    assert_eq!(got.len() as u64, size);
    assert_eq!(&got[..64 * KIB as usize], &data[..]);
    assert!(got[64 * KIB as usize..].iter().all(|&b| b == 0));
}

#[tokio::test]
async fn a_failed_object_read_reaches_the_reader() {
    let rig = Rig::new(striped(64 * KIB, 4));
    let size = MIB;
    rig.store(&pattern(size as usize));
    rig.failing
        .fail(Rule::nth(Some(Op::Read), 1, Fault::Io).on_ost(2));
    let f = rig.open(AccessMode::Read, size);
    // Bytes [128 KiB, 192 KiB) are the third stripe's: OST 2.
    let err = f.read_at(128 * KIB, 64 * KIB).await.unwrap_err();
    assert_eq!(err.errno(), Errno::Io);
    // The fault was once: the same read now succeeds.
    assert!(f.read_at(128 * KIB, 64 * KIB).await.is_ok());
    assert_eq!(rig.failing.failed(), 1);
}
