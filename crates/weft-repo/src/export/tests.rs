//! Unit tests of the export's pieces that need no MDT: path and key mapping, which files
//! go, and uploads (single and multipart, failures aborted) to an in-memory store.

use super::*;
use crate::meta::{PERMISSIONS, S_IFREG};
use object_store::memory::InMemory;
use object_store::{Attribute, ObjectStoreExt};
use weft_proto::hsm::{HSM_ARCHIVED, HSM_LOST};

#[test]
fn paths_relative_to_the_linked_directory() {
    assert_eq!(relative_path("/data", "/data").unwrap(), "");
    assert_eq!(relative_path("/data/", "/data/").unwrap(), "");
    assert_eq!(relative_path("/data", "/data/a/b").unwrap(), "a/b");
    assert_eq!(relative_path("/", "/a/b").unwrap(), "a/b");
    assert_eq!(relative_path("/", "/").unwrap(), "");
    for bad in ["/database/x", "/other", "/data/../etc", "/data/./x", "data"] {
        assert_eq!(
            relative_path("/data", bad).map_err(|e| e.errno()),
            Err(Errno::Inval),
            "{bad}"
        );
    }
}

#[test]
fn keys_under_the_prefix() {
    let prefix = Path::from("bucket-prefix/set");
    assert_eq!(
        key_for(&prefix, "a/b.txt").unwrap().as_ref(),
        "bucket-prefix/set/a/b.txt"
    );
    assert_eq!(key_for(&Path::default(), "a").unwrap().as_ref(), "a");
    assert!(key_for(&prefix, "").is_err());
    assert!(key_for(&prefix, "bad\u{1}name").is_err());
    assert!(key_for(&prefix, &"k".repeat(KEY_MAX)).is_err());
}

#[test]
fn new_and_dirty_files_go() {
    use FileKind::*;
    assert!(wants_export(Regular, 0));
    assert!(wants_export(Symlink, 0));
    assert!(wants_export(Regular, HSM_EXISTS | HSM_DIRTY));
    assert!(wants_export(Regular, HSM_EXISTS | HSM_DIRTY | HSM_LOST));
    assert!(!wants_export(Regular, HSM_EXISTS | HSM_ARCHIVED));
    assert!(!wants_export(Regular, HSM_NOARCHIVE));
    assert!(!wants_export(
        Regular,
        HSM_EXISTS | HSM_DIRTY | HSM_RELEASED
    ));
    assert!(!wants_export(Directory, 0));
}

/// A regular file's attributes with HSM flags `flags`, open `open` times.
fn file_attr(flags: u32, open: u32) -> Attr {
    Attr {
        fid: Fid::ROOT,
        kind: FileKind::Regular,
        mode: 0o644,
        nlink: 1,
        uid: 0,
        gid: 0,
        size: 1,
        blocks: 0,
        atime: Timestamp::default(),
        mtime: Timestamp::default(),
        ctime: Timestamp::default(),
        rdev: 0,
        data_version: 1,
        hsm_flags: flags,
        archive_id: 0,
        project_id: 0,
        open_count: open,
    }
}

#[test]
fn options_select_by_policy_and_openness() {
    let all = ExportOptions::default();
    let new = file_attr(0, 0);
    let changed = file_attr(HSM_EXISTS | HSM_DIRTY, 0);
    let clean = file_attr(HSM_EXISTS | HSM_ARCHIVED, 0);
    let open_new = file_attr(0, 1);
    assert!(all.selects(FileKind::Regular, &new));
    assert!(all.selects(FileKind::Regular, &changed));
    assert!(!all.selects(FileKind::Regular, &clean));
    assert!(all.selects(FileKind::Regular, &open_new));
    let closed_only = ExportOptions {
        skip_open: true,
        ..ExportOptions::default()
    };
    assert!(!closed_only.selects(FileKind::Regular, &open_new));
    assert!(closed_only.selects(FileKind::Regular, &new));
    let changed_only = ExportOptions {
        skip_new: true,
        ..ExportOptions::default()
    };
    assert!(!changed_only.selects(FileKind::Regular, &new));
    assert!(changed_only.selects(FileKind::Regular, &changed));
    let new_only = ExportOptions {
        skip_changed: true,
        ..ExportOptions::default()
    };
    assert!(new_only.selects(FileKind::Regular, &new));
    assert!(!new_only.selects(FileKind::Regular, &changed));
    assert!(!all.selects(FileKind::Directory, &new));
}

fn data(n: usize) -> Bytes {
    Bytes::from((0..n).map(|i| (i * 7 % 251) as u8).collect::<Vec<u8>>())
}

fn reader(
    body: Bytes,
    step: usize,
) -> impl FnMut(u64, u64) -> futures::future::Ready<Result<Bytes, RepoError>> {
    // Reads at most `step` bytes at a time, as a client read may end short.
    move |offset, len| {
        let start = (offset as usize).min(body.len());
        let end = (start + (len as usize).min(step)).min(body.len());
        futures::future::ready(Ok(body.slice(start..end)))
    }
}

fn attrs() -> Attributes {
    FileMeta {
        mode: S_IFREG | 0o640,
        uid: 5,
        gid: 6,
        atime: Timestamp::default(),
        mtime: Timestamp::default(),
    }
    .encode()
}

#[tokio::test]
async fn small_files_go_in_one_put_with_their_metadata() {
    let store = InMemory::new();
    let key = Path::from("p/small");
    let body = data(1000);
    let (put, n) = upload(
        &store,
        "mem",
        &key,
        1000,
        attrs(),
        4096,
        reader(body.clone(), 300),
    )
    .await
    .unwrap();
    assert_eq!(n, 1000);
    let got = store.get(&key).await.unwrap();
    assert_eq!(Some(&got.meta.e_tag), Some(&put.e_tag));
    let perms = got
        .attributes
        .get(&Attribute::Metadata(PERMISSIONS.into()))
        .map(|v| v.as_ref().to_string());
    assert_eq!(perms.as_deref(), Some("0100640"));
    assert_eq!(got.bytes().await.unwrap(), body);
}

#[tokio::test]
async fn large_files_go_in_parts() {
    let store = InMemory::new();
    let key = Path::from("p/large");
    let body = data(10_000);
    let (put, n) = upload(
        &store,
        "mem",
        &key,
        10_000,
        attrs(),
        1024,
        reader(body.clone(), 700),
    )
    .await
    .unwrap();
    assert_eq!(n, 10_000);
    assert!(put.e_tag.is_some());
    let got = store.get(&key).await.unwrap();
    assert!(
        got.attributes
            .get(&Attribute::Metadata(PERMISSIONS.into()))
            .is_some()
    );
    assert_eq!(got.bytes().await.unwrap(), body);
}

#[tokio::test]
async fn a_file_that_shrank_ends_early() {
    let store = InMemory::new();
    let key = Path::from("p/shrunk");
    let body = data(2500);
    let (_, n) = upload(
        &store,
        "mem",
        &key,
        10_000,
        attrs(),
        1024,
        reader(body.clone(), 4096),
    )
    .await
    .unwrap();
    assert_eq!(n, 2500);
    assert_eq!(store.get(&key).await.unwrap().bytes().await.unwrap(), body);
}

#[tokio::test]
async fn a_failed_read_leaves_no_object() {
    let store = InMemory::new();
    let key = Path::from("p/failed");
    let body = data(10_000);
    let mut inner = reader(body, 4096);
    let failing = move |offset: u64, len: u64| {
        if offset >= 5000 {
            futures::future::ready(Err(RepoError::Client(ClientError::Invalid("EIO".into()))))
        } else {
            inner(offset, len)
        }
    };
    let r = upload(&store, "mem", &key, 10_000, attrs(), 1024, failing).await;
    assert!(r.is_err());
    assert!(matches!(
        store.head(&key).await,
        Err(object_store::Error::NotFound { .. })
    ));
    // The same for a file read in a single PUT.
    let r = upload(&store, "mem", &key, 10, attrs(), 1024, |_, _| {
        futures::future::ready(Err(RepoError::Client(ClientError::Invalid("EIO".into()))))
    })
    .await;
    assert!(r.is_err());
    assert!(store.head(&key).await.is_err());
}

#[tokio::test]
async fn stores_without_user_metadata_get_the_object_alone() {
    let dir = tempfile::tempdir().unwrap();
    let store = object_store::local::LocalFileSystem::new_with_prefix(dir.path()).unwrap();
    let key = Path::from("p/f");
    let body = data(3000);
    upload(
        &store,
        "file",
        &key,
        3000,
        attrs(),
        4096,
        reader(body.clone(), 4096),
    )
    .await
    .unwrap();
    assert_eq!(store.get(&key).await.unwrap().bytes().await.unwrap(), body);
    let key = Path::from("p/g");
    upload(
        &store,
        "file",
        &key,
        3000,
        attrs(),
        1000,
        reader(body.clone(), 4096),
    )
    .await
    .unwrap();
    assert_eq!(store.get(&key).await.unwrap().bytes().await.unwrap(), body);
}

#[tokio::test]
async fn empty_files_are_empty_objects() {
    let store = InMemory::new();
    let key = Path::from("p/empty");
    let (_, n) = upload(&store, "mem", &key, 0, attrs(), 1024, |_, _| {
        futures::future::ready(Err(RepoError::Client(ClientError::Invalid(
            "an empty file is not read".into(),
        ))))
    })
    .await
    .unwrap();
    assert_eq!(n, 0);
    assert_eq!(store.head(&key).await.unwrap().size, 0);
}
