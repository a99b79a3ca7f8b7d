//! Unit tests of the import's pieces that need no MDT: key mapping, layouts, batching,
//! checkpoints and the HEAD stage against an in-memory store.

use super::head::{head, timestamp_of};
use super::*;
use crate::meta::{GROUP, MTIME, OWNER, PERMISSIONS};
use object_store::memory::InMemory;
use object_store::{Attribute, Attributes, ObjectStoreExt, PutOptions, PutPayload};
use proptest::prelude::*;
use weft_proto::Timestamp;
use weft_proto::hsm::{ArchiveRef, ImportKind};
use weft_proto::layout::LayoutTemplate;

fn place(dir: &str, name: Option<&str>) -> KeyPlace {
    KeyPlace {
        dir: dir.into(),
        name: name.map(Into::into),
    }
}

#[test]
fn keys_map_to_places() {
    assert_eq!(place_of("a").unwrap(), place("", Some("a")));
    assert_eq!(place_of("a/b/c.txt").unwrap(), place("a/b", Some("c.txt")));
    assert_eq!(place_of("a/b/").unwrap(), place("a/b", None));
    assert_eq!(place_of("").unwrap(), place("", None));
    assert_eq!(place_of("/").unwrap(), place("", None));
    let long = "x".repeat(NAME_MAX);
    assert_eq!(
        place_of(&format!("d/{long}")).unwrap(),
        place("d", Some(&long))
    );
    for bad in [
        "a//b",
        "/a",
        "a/./b",
        "a/../b",
        "..",
        ".",
        "a/.",
        "a//",
        &format!("d/{}", "y".repeat(NAME_MAX + 1)),
    ] {
        assert!(place_of(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn keys_outside_the_prefix_are_refused() {
    let prefix = Path::from("data/set");
    assert_eq!(
        classify(&prefix, "data/set/x/y").unwrap(),
        place("x", Some("y"))
    );
    assert!(classify(&prefix, "data/settle/x").is_err());
    assert!(classify(&prefix, "other/x").is_err());
    assert_eq!(
        classify(&Path::default(), "x/y").unwrap(),
        place("x", Some("y"))
    );
    assert!(classify(&prefix, &format!("data/set/{}", "k/".repeat(600))).is_err());
}

#[test]
fn large_files_are_striped_by_chunk() {
    const GIB: u64 = 1 << 30;
    assert_eq!(layout_for(GIB, GIB, 8), None);
    assert_eq!(layout_for(0, GIB, 8), None);
    let l = layout_for(GIB + 1, GIB, 8).unwrap();
    assert_eq!(l, LayoutTemplate::raid0(2, IMPORT_STRIPE_SIZE, -1));
    let l = layout_for(100 * GIB, GIB, 8).unwrap();
    assert_eq!(l.components[0].stripe_count, 8);
    let l = layout_for(5 * GIB, GIB, 0).unwrap();
    assert_eq!(l.components[0].stripe_count, 1);
}

fn entry(name: &str) -> ImportEntry {
    ImportEntry {
        name: name.as_bytes().to_vec(),
        kind: ImportKind::Regular,
        mode: 0o644,
        uid: 0,
        gid: 0,
        atime: Timestamp::default(),
        mtime: Timestamp::default(),
        target: Vec::new(),
        archive: ArchiveRef {
            key: name.into(),
            etag: None,
            size: 0,
            modified: Timestamp::default(),
        },
        layout: None,
    }
}

fn entries_job(dir: &str, seq: u64) -> Job {
    Job::Entries {
        dir: dir.into(),
        entries: vec![(seq, entry(&format!("f{seq}")))],
    }
}

#[test]
fn batches_fill_per_directory_and_go_early_when_forced() {
    let mut b = Batcher::default();
    let mut seq = 0;
    for _ in 0..BATCH_MAX - 1 {
        b.add(entries_job("a", seq));
        b.add(entries_job("b", seq + 1));
        seq += 2;
    }
    assert!(b.take(false).is_none(), "no batch is full yet");
    b.add(entries_job("a", seq));
    match b.take(false) {
        Some(Job::Entries { dir, entries }) => {
            assert_eq!(dir, "a");
            assert_eq!(entries.len(), BATCH_MAX);
            // Listing order kept within the batch.
            assert!(entries.windows(2).all(|w| w[0].0 < w[1].0));
        }
        other => panic!("{other:?}"),
    }
    assert!(b.take(false).is_none());
    b.add(Job::Mkdir {
        seq: 999_999,
        dir: "m".into(),
    });
    assert!(matches!(b.take(false), Some(Job::Mkdir { .. })));
    match b.take(true) {
        Some(Job::Entries { dir, entries }) => {
            assert_eq!(dir, "b");
            assert_eq!(entries.len(), BATCH_MAX - 1);
        }
        other => panic!("{other:?}"),
    }
    assert!(b.is_empty());
    assert!(b.take(true).is_none());
}

#[test]
fn a_closed_directory_batch_goes_before_it_is_full() {
    let mut b = Batcher::default();
    for seq in 0..3 {
        b.add(entries_job("a", seq));
    }
    b.add(entries_job("b", 3));
    assert!(b.take(false).is_none());
    b.close("nothing open here");
    assert!(b.take(false).is_none());
    b.close("a");
    match b.take(false) {
        Some(Job::Entries { dir, entries }) => {
            assert_eq!(dir, "a");
            assert_eq!(entries.iter().map(|e| e.0).collect::<Vec<_>>(), [0, 1, 2]);
        }
        other => panic!("{other:?}"),
    }
    assert!(b.take(false).is_none(), "b is still open");
    assert!(!b.is_empty());
    // A later entry of a closed directory starts a batch of its own.
    b.add(entries_job("a", 4));
    b.close("a");
    assert!(matches!(b.take(false), Some(Job::Entries { dir, .. }) if dir == "a"));
}

#[test]
fn a_directory_is_done_once_the_listing_left_it_and_its_heads_are_back() {
    let mut w = Walk::default();
    let none: Vec<String> = Vec::new();
    // a/1, a/b/1, a/b/c/1, a/2 (a subdirectory's keys inside a's run), then d/1.
    assert_eq!(w.listed("a"), none);
    assert_eq!(w.listed("a/b"), none);
    assert_eq!(w.listed("a/b/c"), none);
    assert!(
        !w.headed("a/b"),
        "a/b's HEAD is back but the listing is still within it"
    );
    // Back in a: a/b/c and a/b are left; a/b's HEAD is back, a/b/c's is out.
    assert_eq!(w.listed("a"), ["a/b"]);
    assert!(w.headed("a/b/c"), "a/b/c's last HEAD");
    assert!(!w.headed("a"), "a's first HEAD: the listing is still in a");
    // A directory whose name extends another's is not inside it.
    assert_eq!(w.listed("ab"), none, "a's second HEAD is still out");
    assert!(w.headed("a"), "done once its last HEAD is back");
    assert_eq!(w.listed(""), none, "ab's HEAD is still out");
    assert!(w.headed("ab"));
    // The linked directory holds everything: never left.
    assert_eq!(w.listed("z"), none);
    assert!(!w.headed(""));
    assert!(!w.headed("z"));
    assert!(!w.headed("never listed"));
}

#[test]
fn a_directory_listed_again_is_not_done() {
    // An unordered listing (a local directory) comes back to a directory it left.
    let mut w = Walk::default();
    w.listed("x");
    w.listed("y");
    assert_eq!(w.listed("x"), none_vec());
    assert!(!w.headed("x"), "one of x's HEADs is still out");
    assert!(w.headed("y"));
    assert!(!w.headed("x"), "the listing is within x again");
}

fn none_vec() -> Vec<String> {
    Vec::new()
}

#[test]
fn the_checkpoint_is_the_end_of_the_settled_run() {
    let mut t = Tracker::default();
    let seqs: Vec<u64> = ["k0", "k1", "k2", "k3"].iter().map(|k| t.push(k)).collect();
    assert_eq!(seqs, [0, 1, 2, 3]);
    t.settle(2);
    assert_eq!(t.checkpoint(), None);
    t.settle(0);
    assert_eq!(t.checkpoint().as_deref(), Some("k0"));
    t.settle(1);
    assert_eq!(t.checkpoint().as_deref(), Some("k2"));
    assert_eq!(t.pending(), 1);
    t.settle(1); // settled twice: no effect
    t.settle(3);
    assert_eq!(t.checkpoint().as_deref(), Some("k3"));
    assert_eq!(t.pending(), 0);
    assert_eq!(t.push("k4"), 4);
}

proptest! {
    /// Whatever order entries settle in, the checkpoint never passes an unsettled key
    /// and reaches the last key once all are settled.
    #[test]
    fn checkpoints_never_pass_unsettled_keys(
        order in prop::sample::subsequence((0u64..40).collect::<Vec<_>>(), 40)
            .prop_shuffle()
    ) {
        let mut t = Tracker::default();
        for i in 0..40 {
            t.push(&format!("k{i:02}"));
        }
        let mut settled = std::collections::BTreeSet::new();
        for s in order {
            t.settle(s);
            settled.insert(s);
            let run = (0..40).take_while(|i| settled.contains(i)).count();
            let want = run.checked_sub(1).map(|i| format!("k{i:02}"));
            prop_assert_eq!(t.checkpoint(), want);
        }
    }
}

fn meta_attrs(pairs: &[(&'static str, &str)]) -> Attributes {
    let mut a = Attributes::new();
    for &(k, v) in pairs {
        a.insert(Attribute::Metadata(k.into()), v.to_string().into());
    }
    a
}

async fn put(store: &InMemory, key: &str, body: &'static [u8], attrs: Attributes) {
    let opts = PutOptions {
        attributes: attrs,
        ..Default::default()
    };
    store
        .put_opts(&Path::from(key), PutPayload::from_static(body), opts)
        .await
        .unwrap();
}

async fn listed(store: &InMemory, key: &str) -> ObjectMeta {
    store.head(&Path::from(key)).await.unwrap()
}

#[tokio::test]
async fn heads_read_fsx_metadata_and_symlink_targets() {
    let store = InMemory::new();
    put(
        &store,
        "p/dir/file",
        b"hello",
        meta_attrs(&[
            (PERMISSIONS, "0100600"),
            (OWNER, "1000"),
            (GROUP, "1001"),
            (MTIME, "1700000000000000007ns"),
        ]),
    )
    .await;
    put(
        &store,
        "p/link",
        b"dir/file",
        meta_attrs(&[(PERMISSIONS, "0120777")]),
    )
    .await;
    put(&store, "p/plain", b"", Attributes::new()).await;
    put(
        &store,
        "p/badlink",
        b"",
        meta_attrs(&[(PERMISSIONS, "0120777")]),
    )
    .await;
    put(
        &store,
        "p/dirobj",
        b"",
        meta_attrs(&[(PERMISSIONS, "0040755")]),
    )
    .await;
    let ctx = HeadCtx {
        store: &store,
        url: "memory:///p",
        chunk_size: 2,
        osts: 4,
    };
    let prefix = Path::from("p");

    let m = listed(&store, "p/dir/file").await;
    let place = classify(&prefix, m.location.as_ref()).unwrap();
    let Headed::Job(Job::Entries { dir, entries }) = head(&ctx, 7, place, m.clone()).await else {
        panic!("a file");
    };
    assert_eq!(dir, "dir");
    let (seq, e) = &entries[0];
    assert_eq!(*seq, 7);
    assert_eq!(e.name, b"file");
    assert_eq!(e.kind, ImportKind::Regular);
    assert_eq!((e.mode, e.uid, e.gid), (0o600, 1000, 1001));
    assert_eq!(e.mtime, Timestamp::new(1_700_000_000, 7).unwrap());
    // No file-atime: the object's time.
    let lm = &m.last_modified;
    assert_eq!(
        e.atime,
        timestamp_of(lm.timestamp(), lm.timestamp_subsec_nanos())
    );
    assert_eq!(e.archive.key, "p/dir/file");
    assert_eq!(e.archive.size, 5);
    assert_eq!(e.archive.etag, m.e_tag);
    // 5 bytes over a chunk size of 2: three stripes.
    assert_eq!(
        e.layout,
        Some(LayoutTemplate::raid0(3, IMPORT_STRIPE_SIZE, -1))
    );

    let m = listed(&store, "p/link").await;
    let place = classify(&prefix, m.location.as_ref()).unwrap();
    let Headed::Job(Job::Entries { dir, entries }) = head(&ctx, 8, place, m).await else {
        panic!("a symlink");
    };
    assert_eq!(dir, "");
    assert_eq!(entries[0].1.kind, ImportKind::Symlink);
    assert_eq!(entries[0].1.target, b"dir/file");
    assert_eq!(entries[0].1.mode, 0o777);
    assert_eq!(entries[0].1.layout, None);

    let m = listed(&store, "p/plain").await;
    let place = classify(&prefix, m.location.as_ref()).unwrap();
    let Headed::Job(Job::Entries { entries, .. }) = head(&ctx, 9, place, m).await else {
        panic!("an empty file");
    };
    assert_eq!(entries[0].1.mode, 0o644);
    assert_eq!((entries[0].1.uid, entries[0].1.gid), (0, 0));

    let m = listed(&store, "p/badlink").await;
    let place = classify(&prefix, m.location.as_ref()).unwrap();
    assert!(matches!(head(&ctx, 10, place, m).await, Headed::Failed(10)));

    let m = listed(&store, "p/dirobj").await;
    let place = classify(&prefix, m.location.as_ref()).unwrap();
    match head(&ctx, 11, place, m).await {
        Headed::Job(Job::Mkdir { seq: 11, dir }) => assert_eq!(dir, "dirobj"),
        _ => panic!("a directory"),
    }

    // Listed, then deleted before the HEAD: a zero-byte one reads as a directory marker
    // (as S3 lists `a/b/` as `a/b`), a non-empty one is gone.
    let mut gone = listed(&store, "p/dir/file").await;
    store.delete(&gone.location).await.unwrap();
    let place = classify(&prefix, gone.location.as_ref()).unwrap();
    assert!(matches!(
        head(&ctx, 12, place.clone(), gone.clone()).await,
        Headed::Gone(12)
    ));
    gone.size = 0;
    match head(&ctx, 13, place, gone).await {
        Headed::Job(Job::Mkdir { seq: 13, dir }) => assert_eq!(dir, "dir/file"),
        _ => panic!("a directory marker"),
    }
}

#[test]
fn listed_keys_give_up_past_their_bound() {
    let mut k = ListedKeys::new(2);
    k.add("a");
    k.add("b");
    assert!(!k.gave_up());
    k.add("a");
    assert!(
        k.gave_up(),
        "a third add passes the bound, even of a key seen"
    );
    assert_eq!(k.take(), None);
    let mut k = ListedKeys::new(3);
    k.add("x");
    k.add("x");
    let keys = k.take().unwrap();
    assert_eq!(keys.len(), 1);
    assert!(keys.contains("x"));
}
