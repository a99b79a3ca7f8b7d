//! Listing through the target's API: objects are made by writes and punches, as clients
//! make them.

use crate::object::{object_file_name, object_path, subdir_name, subdir_of};
use crate::testutil::object;
use crate::{Ost, OstOptions};
use bytes::Bytes;
use std::collections::HashMap;
use std::sync::Arc;
use weft_proto::ost::{MAX_LIST_OBJECTS, OstReply, OstRequest};
use weft_proto::{Errno, ObjectId};

fn new_ost() -> (tempfile::TempDir, Arc<Ost>) {
    let dir = tempfile::tempdir().unwrap();
    let ost = Ost::open(
        dir.path(),
        OstOptions {
            index: 0,
            fsname: "listfs".into(),
        },
    )
    .unwrap();
    (dir, ost)
}

/// Creates `count` objects of assorted ids and sizes (some empty, some sparse); returns
/// each one's size.
async fn populate(ost: &Arc<Ost>, count: u32) -> HashMap<ObjectId, u64> {
    let mut made = HashMap::new();
    for n in 0..count {
        let id = object(n / 4 + 1, n % 2, n % 4);
        let size = match n % 3 {
            0 => u64::from(n),
            1 => 0,
            _ => (1 << 20) + u64::from(n),
        };
        if size == 0 {
            ost.punch(id, 0).await.unwrap();
        } else {
            ost.write(id, size - 1, Bytes::from_static(b"x"), false)
                .await
                .unwrap();
        }
        made.insert(id, size);
    }
    made
}

/// Every page of a listing with pages of `max`, checking each page's bounds and cursor.
async fn list_all(ost: &Arc<Ost>, max: u32) -> Vec<(ObjectId, u64)> {
    let mut all = Vec::new();
    let mut after = None;
    for _ in 0..100_000 {
        let (page, next) = ost.list_objects(after, max).await.unwrap();
        assert!(page.len() <= max.min(MAX_LIST_OBJECTS) as usize);
        all.extend(page.iter().copied());
        match next {
            Some(n) => {
                assert_ne!(Some(n), after, "the cursor moves");
                assert_eq!(page.last().map(|p| p.0), Some(n), "no object was destroyed");
                after = Some(n);
            }
            None => return all,
        }
    }
    panic!("the listing never ended");
}

/// The listing's order: hashed subdirectory, then object id.
fn key(id: &ObjectId) -> (usize, ObjectId) {
    (subdir_of(id), *id)
}

#[tokio::test]
async fn list_objects_pages_through_every_object_once_in_a_stable_order() {
    let (_d, ost) = new_ost();
    let made = populate(&ost, 300).await;
    let mut per_subdir = [0usize; 256];
    for id in made.keys() {
        per_subdir[subdir_of(id)] += 1;
    }
    assert!(
        per_subdir.iter().any(|n| *n >= 3),
        "small pages end inside a subdirectory"
    );
    let full = list_all(&ost, MAX_LIST_OBJECTS).await;
    assert_eq!(full.len(), made.len());
    assert!(
        full.windows(2).all(|w| key(&w[0].0) < key(&w[1].0)),
        "ordered by (subdirectory, id), no duplicates"
    );
    let listed: HashMap<ObjectId, u64> = full.iter().copied().collect();
    assert_eq!(listed, made, "every object once, with its size");
    for max in [1, 7, 64, 299, 300, 301] {
        assert_eq!(list_all(&ost, max).await, full, "pages of {max}");
    }
    assert_eq!(ost.stats().listed_objects, 300 * 7);
}

#[tokio::test]
async fn an_empty_ost_lists_nothing() {
    let (_d, ost) = new_ost();
    assert_eq!(
        ost.list_objects(None, 100).await.unwrap(),
        (Vec::new(), None)
    );
    // A cursor of an object that is not there is fine too.
    assert_eq!(
        ost.list_objects(Some(object(1, 0, 0)), 100).await.unwrap(),
        (Vec::new(), None)
    );
    assert_eq!(ost.stats().listed_objects, 0);
}

#[tokio::test]
async fn list_objects_skips_files_that_are_not_objects() {
    let (d, ost) = new_ost();
    let made = populate(&ost, 20).await;
    let real = object(1, 0, 0);
    let home = object_path(d.path(), &real);
    let dir = home.parent().unwrap();
    // What the durable recipe or an editor might leave, and plain strays.
    std::fs::write(dir.join(format!("{}.tmp", object_file_name(&real))), b"t").unwrap();
    std::fs::write(dir.join("junk"), b"j").unwrap();
    std::fs::write(dir.join("200000400-1F-0-c0-s0"), b"upper-case hex").unwrap();
    // A valid name in a subdirectory its hash does not pick: no request reaches it.
    let stray = object(9999, 0, 0);
    let wrong = subdir_name(subdir_of(&stray) + 1);
    std::fs::write(
        d.path()
            .join("O")
            .join(wrong)
            .join(object_file_name(&stray)),
        b"s",
    )
    .unwrap();
    // A directory under an object's name.
    let not_a_file = object(9998, 0, 0);
    std::fs::create_dir(object_path(d.path(), &not_a_file)).unwrap();
    for max in [1, 3, 100] {
        let listed: HashMap<ObjectId, u64> = list_all(&ost, max).await.into_iter().collect();
        assert_eq!(listed, made, "pages of {max}");
    }
}

#[tokio::test]
async fn the_cursor_survives_the_destroy_of_its_object() {
    let (_d, ost) = new_ost();
    let made = populate(&ost, 40).await;
    let (first, next) = ost.list_objects(None, 10).await.unwrap();
    let cursor = next.unwrap();
    ost.destroy(cursor).await.unwrap();
    let mut listed: Vec<(ObjectId, u64)> = first;
    let mut after = Some(cursor);
    while let Some(a) = after {
        let (page, next) = ost.list_objects(Some(a), 10).await.unwrap();
        listed.extend(page);
        after = next;
    }
    let listed: HashMap<ObjectId, u64> = listed.into_iter().collect();
    assert_eq!(
        listed.len(),
        40,
        "the destroyed object was listed before it went"
    );
    assert_eq!(listed, made);
}

#[tokio::test]
async fn list_objects_caps_the_page_and_refuses_zero() {
    let (_d, ost) = new_ost();
    let e = ost.list_objects(None, 0).await.unwrap_err();
    assert_eq!(e.errno, Errno::Inval);
    let count = MAX_LIST_OBJECTS + 5;
    for n in 0..count {
        ost.punch(object(n + 1, 0, 0), 0).await.unwrap();
    }
    let (page, next) = ost.list_objects(None, u32::MAX).await.unwrap();
    assert_eq!(page.len(), MAX_LIST_OBJECTS as usize);
    let (rest, end) = ost.list_objects(next, u32::MAX).await.unwrap();
    assert_eq!(rest.len(), 5);
    assert_eq!(end, None);
}

#[tokio::test]
async fn execute_serves_list_objects() {
    let (_d, ost) = new_ost();
    let made = populate(&ost, 5).await;
    let (reply, bulk) = ost
        .execute(
            OstRequest::ListObjects {
                after: None,
                max: 100,
            },
            Bytes::new(),
        )
        .await
        .unwrap();
    assert!(bulk.is_empty());
    let OstReply::Objects { objects, next } = reply else {
        panic!("unexpected reply {reply:?}");
    };
    assert_eq!(next, None);
    assert_eq!(objects.into_iter().collect::<HashMap<_, _>>(), made);
    assert_eq!(ost.stats().listed_objects, 5);
}
