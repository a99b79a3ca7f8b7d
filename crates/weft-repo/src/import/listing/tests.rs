//! The paged listing against a real S3 server (s3s-fs, in this process): pages of any
//! size give every key under the prefix once, in order, from a checkpoint on; the stores
//! without pages list the same.

use super::*;
use futures::TryStreamExt;
use object_store::aws::AmazonS3;
use object_store::memory::InMemory;
use object_store::{ObjectStoreExt, PutPayload};
use proptest::prelude::*;
use weft_testkit::S3Server;

fn s3(server: &S3Server, bucket: &str) -> Arc<AmazonS3> {
    server.client(bucket).unwrap()
}

async fn keys(
    store: &dyn ObjectStore,
    pages: Option<&Arc<dyn PaginatedListStore>>,
    prefix: &Path,
    after: Option<&str>,
    page: usize,
) -> Vec<String> {
    let after = after.map(Path::from);
    objects(store, pages, prefix, after.as_ref(), page)
        .map_ok(|m| m.location.to_string())
        .try_collect()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_of_any_size_list_every_key_once_in_order() {
    let server = S3Server::start_s3s_fs().unwrap();
    server.create_bucket("pages").unwrap();
    let s3 = s3(&server, "pages");
    let mut want = Vec::new();
    for i in 0..23 {
        let key = format!("p/d{}/k{i:03}", i % 3);
        s3.put(&Path::from(key.as_str()), PutPayload::from_static(b"x"))
            .await
            .unwrap();
        want.push(key);
    }
    // Outside the prefix, and a prefix of the prefix: never listed.
    for key in ["q/k", "pp/k", "p0"] {
        s3.put(&Path::from(key), PutPayload::from_static(b"y"))
            .await
            .unwrap();
    }
    want.sort();
    let store: &dyn ObjectStore = s3.as_ref();
    let pages: Arc<dyn PaginatedListStore> = s3.clone();
    let prefix = Path::from("p");
    for page in [1, 4, 23, 24, LIST_PAGE] {
        assert_eq!(keys(store, Some(&pages), &prefix, None, page).await, want);
    }
    let after = &want[10];
    assert_eq!(
        keys(store, Some(&pages), &prefix, Some(after), 4).await,
        want[11..]
    );
    // The store's own listing agrees.
    assert_eq!(keys(store, None, &prefix, None, 4).await, want);
    assert_eq!(keys(store, None, &prefix, Some(after), 4).await, want[11..]);
    // A listing dropped part-way stops its page fetcher.
    let mut early = objects(store, Some(&pages), &prefix, None, 2);
    assert!(early.try_next().await.unwrap().is_some());
    drop(early);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_error_ends_the_listing_with_it() {
    let server = S3Server::start_s3s_fs().unwrap();
    // No such bucket: the first page fails.
    let s3 = s3(&server, "missing");
    let pages: Arc<dyn PaginatedListStore> = s3.clone();
    let got: Vec<_> = objects(s3.as_ref(), Some(&pages), &Path::from("p"), None, 5)
        .collect()
        .await;
    assert_eq!(got.len(), 1);
    assert!(got[0].is_err());
}

/// Puts a one-byte object at each key.
async fn put_all(s3: &AmazonS3, keys: &[String]) {
    for key in keys {
        s3.put(&Path::from(key.as_str()), PutPayload::from_static(b"w"))
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_walk_gives_every_key_once_in_order_from_any_checkpoint() {
    let server = S3Server::start_s3s_fs().unwrap();
    server.create_bucket("walk").unwrap();
    let s3 = s3(&server, "walk");
    // Objects beside directories, names that sort between a directory and its neighbours
    // ('-' and '.' before '/', '0' after it), a chain of single directories, deep keys.
    let mut want: Vec<String> = [
        "w/a",
        "w/d1-x",
        "w/d1.txt",
        "w/d1/deep/e/f",
        "w/d10/k",
        "w/d2/m/n/o",
        "w/z",
    ]
    .iter()
    .map(|k| k.to_string())
    .chain((0..5).map(|i| format!("w/d1/k{i}")))
    .collect();
    put_all(&s3, &want).await;
    // Outside the prefix: never listed.
    put_all(&s3, &["wx/k".to_string(), "w0".to_string()]).await;
    want.sort();
    let store: &dyn ObjectStore = s3.as_ref();
    let pages: Arc<dyn PaginatedListStore> = s3.clone();
    let prefix = Path::from("w");
    // Pages of 1 to 3 keys: levels over a page are listed flat, the others walked.
    for page in [1, 2, 3, 50, LIST_PAGE] {
        assert_eq!(keys(store, Some(&pages), &prefix, None, page).await, want);
    }
    // Walked: one listing per directory (w/, w/d1/, w/d1/deep/, w/d1/deep/e/, w/d10/,
    // w/d2/, w/d2/m/, w/d2/m/n/).
    let faults = server.faults().unwrap();
    let before = faults.requests();
    assert_eq!(keys(store, Some(&pages), &prefix, None, 50).await, want);
    assert_eq!(faults.requests() - before, 8);
    // From every key given, and from points between keys (inside a directory, before a
    // directory's name, past the last key).
    for (i, after) in want.iter().enumerate() {
        for page in [2, 50] {
            assert_eq!(
                keys(store, Some(&pages), &prefix, Some(after), page).await,
                want[i + 1..],
                "after {after} in pages of {page}"
            );
        }
    }
    for after in ["w/d1", "w/d1/k2a", "w/d1/deep", "w/d2/m", "w/zz", "w/0"] {
        let rest: Vec<String> = want
            .iter()
            .filter(|k| k.as_str() > after)
            .cloned()
            .collect();
        assert_eq!(
            keys(store, Some(&pages), &prefix, Some(after), 50).await,
            rest,
            "after {after}"
        );
    }
    // The whole bucket (no prefix) is walked the same way.
    let mut all = want.clone();
    all.extend(["w0".to_string(), "wx/k".to_string()]);
    all.sort();
    assert_eq!(
        keys(store, Some(&pages), &Path::default(), None, 50).await,
        all
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_walk_of_small_directories_goes_flat() {
    let server = S3Server::start_s3s_fs().unwrap();
    server.create_bucket("small").unwrap();
    let s3 = s3(&server, "small");
    // A directory per sample, one key each.
    let dirs = 200;
    let mut want: Vec<String> = (0..dirs).map(|i| format!("s/{i:03}/x")).collect();
    want.push("s/top".to_string());
    put_all(&s3, &want).await;
    want.sort();
    let faults = server.faults().unwrap();
    let store: &dyn ObjectStore = s3.as_ref();
    let pages: Arc<dyn PaginatedListStore> = s3.clone();
    let prefix = Path::from("s");
    let before = faults.requests();
    assert_eq!(keys(store, Some(&pages), &prefix, None, 1000).await, want);
    let listings = faults.requests() - before;
    // The probe's listings, the directories fetched ahead when it ended, and one flat
    // listing of the rest: not one request per directory.
    let most = 1 + walk::WALK_PROBE + walk::WALK_AHEAD as u64 + 1;
    assert!(
        listings <= most,
        "{listings} listings for {dirs} directories of one key (at most {most} expected)"
    );
    // From a checkpoint inside the directories, the same.
    let after = &want[120];
    assert_eq!(
        keys(store, Some(&pages), &prefix, Some(after), 1000).await,
        want[121..]
    );
}

#[tokio::test]
async fn stores_without_pages_list_through_object_store() {
    let mem = InMemory::new();
    for key in ["a/1", "a/2", "a/3", "b/1"] {
        mem.put(&Path::from(key), PutPayload::from_static(b"z"))
            .await
            .unwrap();
    }
    assert_eq!(
        keys(&mem, None, &Path::from("a"), None, 1).await,
        ["a/1", "a/2", "a/3"]
    );
    assert_eq!(
        keys(&mem, None, &Path::from("a"), Some("a/1"), 1).await,
        ["a/2", "a/3"]
    );
    assert_eq!(keys(&mem, None, &Path::default(), None, 1).await.len(), 4);
}

/// Random key trees: names that sort around `/` ('-' and '.' before it, '0' after), one to
/// four levels; a key that would be another's directory is left out (s3s-fs keeps objects
/// as files, so `a/d` and `a/d/x` cannot both exist).
fn key_tree() -> impl Strategy<Value = Vec<String>> {
    let dir = prop::sample::select(vec!["d", "d-", "d.", "d0", "e"]);
    let leaf = prop::sample::select(vec!["d", "d-", "d.x", "d0", "f", "z"]);
    let key = (prop::collection::vec(dir, 0..4), leaf).prop_map(|(dirs, leaf)| {
        let mut k = String::from("t/");
        for d in dirs {
            k.push_str(d);
            k.push('/');
        }
        k.push_str(leaf);
        k
    });
    prop::collection::btree_set(key, 1..40).prop_map(|set| {
        let keys: Vec<String> = set.iter().cloned().collect();
        keys.iter()
            .filter(|k| !keys.iter().any(|o| o.starts_with(&format!("{k}/"))))
            .cloned()
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    /// The walk gives what a sorted filter of the keys gives, from any checkpoint (a key
    /// of the tree or any point between keys), in pages of any size.
    #[test]
    fn the_walk_lists_any_tree_like_a_sorted_filter(
        keys_in in key_tree(),
        page in prop::sample::select(vec![1usize, 2, 3, 5, 50]),
        after_pick in prop::option::of(any::<prop::sample::Index>()),
        between in any::<bool>(),
    ) {
        static SERVER: std::sync::OnceLock<S3Server> = std::sync::OnceLock::new();
        static BUCKETS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let server = SERVER.get_or_init(|| S3Server::start_s3s_fs().unwrap());
        let bucket = format!(
            "prop{}",
            BUCKETS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        server.create_bucket(&bucket).unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let s3 = s3(server, &bucket);
        // A point between keys: a key with a suffix that sorts right after it.
        let after = after_pick.map(|i| {
            let k = i.get(&keys_in).clone();
            if between { format!("{k}-") } else { k }
        });
        let want: Vec<String> = keys_in
            .iter()
            .filter(|k| after.as_ref().is_none_or(|a| k.as_str() > a.as_str()))
            .cloned()
            .collect();
        let got = rt.block_on(async {
            put_all(&s3, &keys_in).await;
            let pages: Arc<dyn PaginatedListStore> = s3.clone();
            keys(s3.as_ref(), Some(&pages), &Path::from("t"), after.as_deref(), page).await
        });
        prop_assert_eq!(got, want);
    }
}
