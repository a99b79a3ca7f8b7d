//! Directory listing: stable cookies, paging, hash collisions, big directories.

use super::harness::{H, root};
use crate::store::{self, Dirent};
use std::collections::{BTreeSet, HashSet};
use weft_proto::Fid;
use weft_proto::mdt::{FileKind, MdtReply, MdtRequest};

/// Inserts entries with chosen hashes straight into the store (bypassing the hash).
fn insert_raw(h: &H, dir: Fid, entries: &[(u64, String)]) {
    let db = h.mdt.db();
    let txn = db.begin_write().unwrap();
    {
        let mut t = txn.open_table(store::DIRENTS).unwrap();
        let v = store::encode(&Dirent {
            fid: Fid {
                seq: 77,
                oid: 1,
                ver: 0,
            },
            kind: FileKind::Regular,
        })
        .unwrap();
        for (hash, name) in entries {
            t.insert(
                store::dirent_key_hashed(dir, *hash, name.as_bytes()).as_slice(),
                v.as_slice(),
            )
            .unwrap();
        }
    }
    txn.commit().unwrap();
}

#[tokio::test]
async fn readdir_lists_everything_once_in_pages_with_plus() {
    let h = H::new().await;
    let d = h.mkdir(Fid::ROOT, "d").await;
    for i in 0..50 {
        h.create(d, &format!("f{i}")).await;
    }
    let names = h.list(d, 7).await;
    assert_eq!(names.len(), 50);
    assert_eq!(names.iter().collect::<HashSet<_>>().len(), 50);
    let req = MdtRequest::ReadDir {
        fid: d,
        cookie: 0,
        max_entries: 100,
        plus: true,
        cred: root(),
    };
    let MdtReply::Entries { entries, eof } = h.run(req).await.unwrap() else {
        panic!()
    };
    assert!(eof);
    assert!(
        entries
            .iter()
            .all(|e| e.attr.as_ref().is_some_and(|a| a.fid == e.fid) && e.cookie >= 3)
    );
    assert!(!entries.iter().any(|e| e.name == b"." || e.name == b".."));
}

#[tokio::test]
async fn readdir_with_concurrent_inserts_and_deletes_never_repeats_or_skips_survivors() {
    let h = H::new().await;
    let d = h.mkdir(Fid::ROOT, "d").await;
    for i in 0..300 {
        h.create(d, &format!("old{i}")).await;
    }
    let mut cookie = 0;
    let mut seen = Vec::new();
    let mut round = 0;
    loop {
        let req = MdtRequest::ReadDir {
            fid: d,
            cookie,
            max_entries: 13,
            plus: false,
            cred: root(),
        };
        let MdtReply::Entries { entries, eof } = h.run(req).await.unwrap() else {
            panic!()
        };
        for e in &entries {
            seen.push(String::from_utf8(e.name.clone()).unwrap());
            cookie = e.cookie;
        }
        if eof {
            break;
        }
        // Between pages: delete two old entries (multiples of 3) and add two new ones.
        for k in 0..2 {
            let victim = (round * 2 + k) * 3;
            if victim < 300 {
                h.unlink_as(d, &format!("old{victim}"), &root())
                    .await
                    .unwrap();
            }
            h.create(d, &format!("new{round}_{k}")).await;
        }
        round += 1;
    }
    let unique: BTreeSet<_> = seen.iter().cloned().collect();
    assert_eq!(unique.len(), seen.len(), "an entry was listed twice");
    for i in (0..300).filter(|i| i % 3 != 0) {
        assert!(
            unique.contains(&format!("old{i}")),
            "survivor old{i} skipped"
        );
    }
}

#[tokio::test]
async fn equal_hash_groups_are_never_split_across_pages() {
    let h = H::new().await;
    let d = h.mkdir(Fid::ROOT, "d").await;
    let mut raw = vec![
        (10, "a".to_string()),
        (20, "b1".into()),
        (20, "b2".into()),
        (20, "b3".into()),
    ];
    raw.push((30, "c".into()));
    raw.extend((0..5).map(|i| (40, format!("big{i}"))));
    insert_raw(&h, d, &raw);
    let mut pages = Vec::new();
    let mut cookie = 0;
    loop {
        let req = MdtRequest::ReadDir {
            fid: d,
            cookie,
            max_entries: 2,
            plus: false,
            cred: root(),
        };
        let MdtReply::Entries { entries, eof } = h.run(req).await.unwrap() else {
            panic!()
        };
        let names: Vec<String> = entries
            .iter()
            .map(|e| String::from_utf8(e.name.clone()).unwrap())
            .collect();
        if let Some(e) = entries.last() {
            cookie = e.cookie;
        }
        pages.push(names);
        if eof {
            break;
        }
    }
    let flat: Vec<&String> = pages.iter().flatten().collect();
    assert_eq!(flat.len(), 10);
    assert_eq!(pages[0], vec!["a"]);
    assert_eq!(pages[1], vec!["b1", "b2", "b3"]);
    assert_eq!(pages[2], vec!["c"]);
    assert_eq!(pages[3].len(), 5);
}

#[tokio::test]
async fn a_huge_directory_lists_by_range_scan() {
    let h = H::new().await;
    let d = h.mkdir(Fid::ROOT, "huge").await;
    let n = 100_000u64;
    let raw: Vec<(u64, String)> = (0..n)
        .map(|i| {
            (
                crate::names::name_hash(format!("e{i}").as_bytes()),
                format!("e{i}"),
            )
        })
        .collect();
    insert_raw(&h, d, &raw);
    let names = h.list(d, 4096).await;
    assert_eq!(names.len() as u64, n);
    assert_eq!(names.iter().collect::<HashSet<_>>().len() as u64, n);
}
