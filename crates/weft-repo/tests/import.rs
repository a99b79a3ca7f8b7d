//! The import pipeline end to end against a real S3 server (s3s-fs, in this process) and
//! a real file system (the `weft` servers of a `TestCluster`): objects in several
//! directories, some with FSx metadata, a symlink and a directory (an empty object with a
//! directory mode), listed in small pages (so many pages, each fetched ahead), imported by
//! two imports at once (two users of the same directories): every object becomes exactly
//! one file with its real size, attributes and `exists,archived,released` state, nothing
//! fails or conflicts, and an import resumed after a checkpoint key lists only what
//! follows it.
//!
//! Needs the `weft` binary (`cargo build -p weft-cli --bin weft`; `WEFT_BIN` overrides
//! where it is looked for).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{bin, bucket, link, run};

use futures::StreamExt;
use object_store::path::Path as StorePath;
use object_store::{ObjectStoreExt, PutOptions, PutPayload};
use std::time::{Duration, Instant};
use weft_proto::Fid;
use weft_proto::Timestamp;
use weft_proto::hsm::{HSM_ARCHIVED, HSM_EXISTS, HSM_RELEASED};
use weft_proto::mdt::{Credentials, FileKind};
use weft_repo::import::seen::Seen;
use weft_repo::import::{ImportOptions, ImportProgress, import};
use weft_repo::meta::{FileMeta, S_IFDIR, S_IFLNK, S_IFREG};
use weft_testkit::{S3Server, TestCluster};

const BUCKET: &str = "weft";
/// Files per directory (`d0` to `d3`, and `d3/sub`), and the symlink's directory.
const DIRS: [(&str, usize); 5] = [
    ("d0", 70),
    ("d1", 45),
    ("d2", 20),
    ("d3", 9),
    ("d3/sub", 33),
];
/// Every this many files carries FSx metadata.
const WITH_META: usize = 5;

fn meta_of(i: usize) -> FileMeta {
    FileMeta {
        mode: S_IFREG | 0o600,
        uid: 1234,
        gid: 567,
        atime: Timestamp {
            sec: 1_600_000_000,
            nsec: 5,
        },
        mtime: Timestamp {
            sec: 1_700_000_000 + i as i64,
            nsec: 7,
        },
    }
}

fn body(i: usize) -> Vec<u8> {
    vec![b'a' + (i % 26) as u8; i * 3 + 1]
}

async fn import_with(server: S3Server) {
    let t0 = Instant::now();
    server.create_bucket(BUCKET).unwrap();
    let cluster = TestCluster::start_with_env(&bin(), 2, server.env())
        .await
        .unwrap();
    let root = Credentials::root();
    let client = cluster.fs_client(Duration::from_secs(30)).await.unwrap();
    let other = cluster.fs_client(Duration::from_secs(30)).await.unwrap();
    let store = bucket(&server, BUCKET);

    // The objects: files (every WITH_META-th with metadata), a symlink, a marker.
    let mut files = Vec::new();
    for (dir, n) in DIRS {
        for j in 0..n {
            files.push((format!("{dir}/f{j:03}"), files.len()));
        }
    }
    let puts = files.iter().map(|(rel, i)| {
        let store = store.clone();
        let key = StorePath::from(format!("ds/{rel}"));
        let opts = PutOptions {
            attributes: if i % WITH_META == 0 {
                meta_of(*i).encode()
            } else {
                Default::default()
            },
            ..Default::default()
        };
        async move {
            store
                .put_opts(&key, PutPayload::from(body(*i)), opts)
                .await
                .unwrap()
        }
    });
    futures::stream::iter(puts)
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
    // A symlink, and a directory as FSx exports one: an empty object with a directory
    // mode.
    for (key, mode, body) in [
        ("ds/d1/link", S_IFLNK | 0o777, &b"../d0/f000"[..]),
        ("ds/empty", S_IFDIR | 0o755, &b""[..]),
    ] {
        let meta = FileMeta { mode, ..meta_of(0) };
        let opts = PutOptions {
            attributes: meta.encode(),
            ..Default::default()
        };
        store
            .put_opts(&StorePath::from(key), PutPayload::from(body.to_vec()), opts)
            .await
            .unwrap();
    }
    let entries = files.len() as u64 + 1;
    let objects = entries + 1;

    let imp = client.mkdir(Fid::ROOT, b"imp", 0o755, &root).await.unwrap();
    let id = link(&client, server.spec("/imp", BUCKET, "ds"), imp.fid).await;
    let repo = client
        .cluster()
        .refresh()
        .await
        .unwrap()
        .repo(id)
        .cloned()
        .unwrap();

    // Two imports at once, in pages of 16 keys.
    let opts = ImportOptions {
        parallel: 4,
        list_page: 16,
        ..Default::default()
    };
    let (a, b) = tokio::join!(
        import(&client, &repo, &opts, &|_| {}),
        import(&other, &repo, &opts, &|_| {})
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    for p in [&a, &b] {
        assert_eq!(p.listed, objects, "{p:?}");
        assert_eq!((p.failed, p.conflicts, p.updated), (0, 0, 0), "{p:?}");
        assert_eq!(p.created + p.unchanged, entries, "{p:?}");
    }
    assert_eq!(a.created + b.created, entries, "{a:?} {b:?}");

    // Every file: its size, its attributes, released.
    let mut dirs = std::collections::HashMap::new();
    for (dir, _) in DIRS {
        let mut parent = imp.fid;
        for name in dir.split('/') {
            parent = client
                .lookup(parent, name.as_bytes(), &root)
                .await
                .unwrap()
                .fid;
        }
        dirs.insert(dir, parent);
    }
    for (rel, i) in &files {
        let (dir, name) = rel.rsplit_once('/').unwrap();
        let a = client
            .lookup(dirs[dir], name.as_bytes(), &root)
            .await
            .unwrap();
        assert_eq!(a.kind, FileKind::Regular, "{rel}");
        assert_eq!(a.size, body(*i).len() as u64, "{rel}");
        assert_eq!(
            a.hsm_flags,
            HSM_EXISTS | HSM_ARCHIVED | HSM_RELEASED,
            "{rel}"
        );
        assert_eq!(a.archive_id, id, "{rel}");
        if i % WITH_META == 0 {
            let m = meta_of(*i);
            assert_eq!((a.mode, a.uid, a.gid), (0o600, 1234, 567), "{rel}");
            assert_eq!((a.atime, a.mtime), (m.atime, m.mtime), "{rel}");
        } else {
            assert_eq!((a.mode, a.uid, a.gid), (0o644, 0, 0), "{rel}");
        }
    }
    let l = client.lookup(dirs["d1"], b"link", &root).await.unwrap();
    assert_eq!(l.kind, FileKind::Symlink);
    assert_eq!(client.readlink(l.fid).await.unwrap(), b"../d0/f000");
    assert_eq!(l.uid, 1234);
    let e = client.lookup(imp.fid, b"empty", &root).await.unwrap();
    assert_eq!(e.kind, FileKind::Directory);

    // Resumed after a checkpoint: only the keys after it, all unchanged.
    let mut keys: Vec<String> = files.iter().map(|(r, _)| format!("ds/{r}")).collect();
    keys.extend(["ds/d1/link".to_string(), "ds/empty".to_string()]);
    keys.sort();
    let after = keys[50].clone();
    let resumed = ImportOptions {
        resume_after: Some(after.clone()),
        list_page: 7,
        ..Default::default()
    };
    let p = import(&client, &repo, &resumed, &|_| {}).await.unwrap();
    let want = ImportProgress {
        listed: keys.len() as u64 - 51,
        unchanged: keys.len() as u64 - 51 - 1,
        last_key: keys.last().cloned(),
        ..Default::default()
    };
    assert_eq!(p, want, "resumed after {after}");

    // With a memory of what earlier imports settled (the agent's): the first import
    // settles every entry, the next skips them all without a HEAD; then a changed object
    // is updated, a new one created, and a file removed here stays removed while its
    // object is unchanged.
    let seen = std::sync::Arc::new(parking_lot::Mutex::new(Seen::default()));
    let remembering = ImportOptions {
        seen: Some(seen.clone()),
        ..Default::default()
    };
    let p = import(&client, &repo, &remembering, &|_| {}).await.unwrap();
    assert_eq!(
        (p.listed, p.unchanged, p.skipped),
        (objects, entries, 0),
        "{p:?}"
    );
    // The directory marker is not remembered (it is looked at again each time).
    assert_eq!(seen.lock().len() as u64, entries);
    let p = import(&client, &repo, &remembering, &|_| {}).await.unwrap();
    assert_eq!((p.listed, p.skipped), (objects, entries), "{p:?}");
    assert_eq!(
        (p.created, p.updated, p.unchanged, p.failed),
        (0, 0, 0, 0),
        "{p:?}"
    );
    store
        .put(
            &StorePath::from("ds/d0/f001"),
            PutPayload::from(b"changed".to_vec()),
        )
        .await
        .unwrap();
    store
        .put(
            &StorePath::from("ds/d2/new"),
            PutPayload::from(b"new".to_vec()),
        )
        .await
        .unwrap();
    client.unlink(dirs["d0"], b"f002", &root).await.unwrap();
    let p = import(&client, &repo, &remembering, &|_| {}).await.unwrap();
    assert_eq!(
        (p.listed, p.created, p.updated),
        (objects + 1, 1, 1),
        "{p:?}"
    );
    assert_eq!(p.skipped, entries - 1, "{p:?}");
    let changed = client.lookup(dirs["d0"], b"f001", &root).await.unwrap();
    assert_eq!(changed.size, 7);
    assert!(client.lookup(dirs["d2"], b"new", &root).await.is_ok());
    assert!(client.lookup(dirs["d0"], b"f002", &root).await.is_err());
    eprintln!("the import test took {:?}", t0.elapsed());
}

#[test]
fn imports_in_pages_concurrently_with_metadata_and_resumes() {
    run(async { import_with(S3Server::start_s3s_fs().unwrap()).await });
}
