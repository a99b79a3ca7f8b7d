//! The paged listing against a real S3 server (s3s-fs, in this process): pages of any
//! size give every key under the prefix once, in order, from a checkpoint on; the stores
//! without pages list the same.

use super::*;
use futures::TryStreamExt;
use object_store::aws::AmazonS3;
use object_store::memory::InMemory;
use object_store::{ObjectStoreExt, PutPayload};
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
