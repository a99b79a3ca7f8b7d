//! The repository agent (auto import and auto export) against real S3-compatible servers
//! (s3s-fs and moto, the same test body for each) and a real file system whose MDS runs
//! the agent every 200 ms:
//!
//! - import `NEW,CHANGED,DELETED` on `/imp`: a new object becomes a file, a changed one
//!   changes the file (a read gets the new bytes, restored by the MDS's mover), a deleted
//!   one removes the file; a directory emptied by that goes, one holding a local file
//!   stays;
//! - export `NEW,CHANGED,DELETED` on `/exp`: a new file becomes an object (bytes and
//!   `file-permissions`) and the file `exists,archived`; a changed file updates it; a file
//!   open for writing is exported only once closed; a removed file's object is deleted;
//! - the MDS log never holds the secret key.
//!
//! Needs the `weft` binary (`cargo build -p weft-cli --bin weft`; `WEFT_BIN` overrides
//! where it is looked for) and the servers (`./test.sh` installs them; see
//! `weft_testkit::s3`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{bin, bucket, link, run};

use bytes::Bytes;
use object_store::path::Path as StorePath;
use object_store::{Attribute, GetOptions, ObjectStore, ObjectStoreExt};
use std::sync::Arc;
use std::time::{Duration, Instant};
use weft_client::{Client, OpenOptions};
use weft_proto::Fid;
use weft_proto::hsm::{HSM_ARCHIVED, HSM_DIRTY, HSM_EXISTS, RepoPolicy};
use weft_proto::mdt::Credentials;
use weft_testkit::s3::{ACCESS_KEY, SECRET_KEY};
use weft_testkit::{S3Server, TestCluster, eventually, wait_until_async};

const BUCKET: &str = "weft";
const ALL: RepoPolicy = RepoPolicy {
    new: true,
    changed: true,
    deleted: true,
};

/// The whole content of `name` in `dir`, read by a fresh client (no cached pages).
async fn read_fresh(cluster: &TestCluster, dir: Fid, name: &[u8]) -> Vec<u8> {
    let root = Credentials::root();
    let c = cluster.fs_client(Duration::from_secs(30)).await.unwrap();
    let a = c.lookup(dir, name, &root).await.unwrap();
    let f = c.open(a.fid, OpenOptions::read(), &root).await.unwrap();
    let size = f.size().await;
    let data = f.read_at(0, size).await.unwrap();
    f.close().await.unwrap();
    data.to_vec()
}

async fn write_file(client: &Arc<Client>, dir: Fid, name: &[u8], data: &[u8]) {
    let root = Credentials::root();
    let mut o = OpenOptions::create(0o640);
    o.truncate = true;
    let f = client.open_in(dir, name, o, None, &root).await.unwrap();
    f.write_at(0, data).await.unwrap();
    f.close().await.unwrap();
}

async fn object(store: &dyn ObjectStore, key: &str) -> Option<Vec<u8>> {
    match store.get(&StorePath::from(key)).await {
        Ok(g) => Some(g.bytes().await.unwrap().to_vec()),
        Err(object_store::Error::NotFound { .. }) => None,
        Err(e) => panic!("GET {key}: {e}"),
    }
}

async fn exists(client: &Client, dir: Fid, name: &[u8]) -> bool {
    client.lookup(dir, name, &Credentials::root()).await.is_ok()
}

/// The test body, the same for every server.
async fn agent_with(mut server: S3Server) {
    let t0 = Instant::now();
    server.create_bucket(BUCKET).unwrap();
    let mut cluster = TestCluster::start_with_env(&bin(), 2, server.env())
        .await
        .unwrap();
    cluster.mds.add_args(&["--repo-interval-ms", "200"]);
    cluster.mds.restart().unwrap();
    cluster.wait_ready().await.unwrap();
    let root = Credentials::root();
    let client = cluster.fs_client(Duration::from_secs(30)).await.unwrap();
    let store = bucket(&server, BUCKET);
    let s = store.as_ref();

    // --- Auto import -------------------------------------------------------------------
    let imp = client.mkdir(Fid::ROOT, b"imp", 0o755, &root).await.unwrap();
    let mut spec = server.spec("/imp", BUCKET, "imp");
    spec.import_policy = ALL;
    link(&client, spec, imp.fid).await;

    // NEW: an object appears, the file follows.
    let v1 = b"first version".to_vec();
    s.put(&StorePath::from("imp/a.txt"), v1.clone().into())
        .await
        .unwrap();
    let t = Instant::now();
    let a = eventually("a.txt imported", || client.lookup(imp.fid, b"a.txt", &root)).await;
    eprintln!("NEW object imported after {:?}", t.elapsed());
    assert_eq!(a.size, v1.len() as u64);
    assert_eq!(read_fresh(&cluster, imp.fid, b"a.txt").await, v1);

    // CHANGED: another version (another size), the file follows; a read restores it.
    let v2 = b"the second version, longer".to_vec();
    s.put(&StorePath::from("imp/a.txt"), v2.clone().into())
        .await
        .unwrap();
    let t = Instant::now();
    wait_until_async("a.txt updated", || async {
        client
            .lookup(imp.fid, b"a.txt", &root)
            .await
            .is_ok_and(|a| a.size == v2.len() as u64)
    })
    .await;
    eprintln!("CHANGED object imported after {:?}", t.elapsed());
    assert_eq!(read_fresh(&cluster, imp.fid, b"a.txt").await, v2);

    // DELETED: objects go, their files go; an emptied directory goes, one holding a local
    // file stays.
    for key in ["imp/d1/x", "imp/d2/y"] {
        s.put(&StorePath::from(key), Bytes::from_static(b"xy").into())
            .await
            .unwrap();
    }
    let d1 = eventually("d1 imported", || client.lookup(imp.fid, b"d1", &root)).await;
    let d2 = eventually("d2 imported", || client.lookup(imp.fid, b"d2", &root)).await;
    eventually("d1/x imported", || client.lookup(d1.fid, b"x", &root)).await;
    eventually("d2/y imported", || client.lookup(d2.fid, b"y", &root)).await;
    write_file(&client, d2.fid, b"local", b"mine").await;
    for key in ["imp/a.txt", "imp/d1/x", "imp/d2/y"] {
        s.delete(&StorePath::from(key)).await.unwrap();
    }
    let t = Instant::now();
    wait_until_async("a.txt, d1/x and d2/y removed", || async {
        !exists(&client, imp.fid, b"a.txt").await
            && !exists(&client, d1.fid, b"x").await
            && !exists(&client, d2.fid, b"y").await
    })
    .await;
    wait_until_async("d1 removed", || async {
        !exists(&client, imp.fid, b"d1").await
    })
    .await;
    eprintln!("DELETED objects carried after {:?}", t.elapsed());
    assert!(
        exists(&client, imp.fid, b"d2").await,
        "d2 holds a local file"
    );
    assert!(exists(&client, d2.fid, b"local").await);

    // --- Auto export -------------------------------------------------------------------
    let exp = client.mkdir(Fid::ROOT, b"exp", 0o755, &root).await.unwrap();
    let mut spec = server.spec("/exp", BUCKET, "exp");
    spec.export_policy = ALL;
    link(&client, spec, exp.fid).await;

    // NEW: a file written here becomes an object, with its mode; the file is archived.
    let n1 = b"new file, exported".to_vec();
    write_file(&client, exp.fid, b"new.txt", &n1).await;
    let t = Instant::now();
    let got = eventually("new.txt exported", || async {
        object(s, "exp/new.txt").await.ok_or("no object")
    })
    .await;
    eprintln!("NEW file exported after {:?}", t.elapsed());
    assert_eq!(got, n1);
    let head = s
        .get_opts(
            &StorePath::from("exp/new.txt"),
            GetOptions {
                head: true,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let perms = head
        .attributes
        .get(&Attribute::Metadata("file-permissions".into()))
        .map(|v| v.to_string());
    assert_eq!(perms.as_deref(), Some("0100640"), "{:?}", head.attributes);
    let want = HSM_EXISTS | HSM_ARCHIVED;
    wait_until_async("new.txt exists,archived", || async {
        client
            .lookup(exp.fid, b"new.txt", &root)
            .await
            .is_ok_and(|a| a.hsm_flags == want)
    })
    .await;

    // CHANGED: the object follows.
    let n2 = b"changed file, exported again".to_vec();
    write_file(&client, exp.fid, b"new.txt", &n2).await;
    let t = Instant::now();
    wait_until_async("new.txt exported again", || async {
        object(s, "exp/new.txt").await.as_deref() == Some(&n2[..])
    })
    .await;
    eprintln!("CHANGED file exported after {:?}", t.elapsed());

    // A file open for writing waits for its close (while a later file goes meanwhile).
    let root2 = Credentials::root();
    let held = client
        .open_in(
            exp.fid,
            b"held.txt",
            OpenOptions::create(0o644),
            None,
            &root2,
        )
        .await
        .unwrap();
    held.write_at(0, b"held").await.unwrap();
    held.fsync().await.unwrap();
    write_file(&client, exp.fid, b"later.txt", b"later").await;
    eventually("later.txt exported", || async {
        object(s, "exp/later.txt").await.ok_or("no object")
    })
    .await;
    // Two more sweeps' worth, to be sure.
    let marker = b"marker".to_vec();
    write_file(&client, exp.fid, b"marker.txt", &marker).await;
    eventually("marker.txt exported", || async {
        object(s, "exp/marker.txt").await.ok_or("no object")
    })
    .await;
    assert_eq!(object(s, "exp/held.txt").await, None, "exported while open");
    held.close().await.unwrap();
    let t = Instant::now();
    let got = eventually("held.txt exported after close", || async {
        object(s, "exp/held.txt").await.ok_or("no object")
    })
    .await;
    eprintln!("file exported {:?} after its close", t.elapsed());
    assert_eq!(got, b"held");

    // DELETED: the file goes, its object goes.
    client.unlink(exp.fid, b"new.txt", &root).await.unwrap();
    let t = Instant::now();
    wait_until_async("exp/new.txt deleted", || async {
        object(s, "exp/new.txt").await.is_none()
    })
    .await;
    eprintln!("DELETED file carried after {:?}", t.elapsed());
    assert!(object(s, "exp/later.txt").await.is_some());

    // A rename: a new object at the new key, the old key deleted.
    client
        .rename(
            exp.fid,
            b"later.txt",
            exp.fid,
            b"moved.txt",
            Default::default(),
            &root,
        )
        .await
        .unwrap();
    let t = Instant::now();
    wait_until_async("later.txt moved to moved.txt in the store", || async {
        object(s, "exp/later.txt").await.is_none()
            && object(s, "exp/moved.txt").await.as_deref() == Some(&b"later"[..])
    })
    .await;
    eprintln!("rename carried after {:?}", t.elapsed());
    let moved = client.lookup(exp.fid, b"moved.txt", &root).await.unwrap();
    let r = client.hsm_archive_ref(moved.fid).await.unwrap().unwrap();
    assert_eq!(r.key, "exp/moved.txt");

    // The store stops: errors logged with the repository's id, never credentials; the
    // file stays dirty.
    server.kill().unwrap();
    write_file(&client, exp.fid, b"moved.txt", b"while the store is down").await;
    eventually("the agent logs the store's failure", || async {
        let log = cluster.mds.log();
        if log
            .lines()
            .any(|l| l.contains("WARN") && l.contains("repo=2"))
        {
            Ok(())
        } else {
            let tail: Vec<&str> = log.lines().rev().take(15).collect();
            Err(tail.join("\n"))
        }
    })
    .await;
    let a = client.lookup(exp.fid, b"moved.txt", &root).await.unwrap();
    assert_ne!(a.hsm_flags & HSM_DIRTY, 0, "{:#x}", a.hsm_flags);

    // No credentials in the MDS's log.
    let log = cluster.mds.log();
    assert!(log.contains("repository agent started"), "{log}");
    assert!(
        !log.contains(SECRET_KEY),
        "the secret key is in the MDS log"
    );
    assert!(
        !log.contains(ACCESS_KEY),
        "the access key is in the MDS log"
    );

    // The MDS stops cleanly, its agent with it (while the agent's requests fail).
    let t = Instant::now();
    let status = cluster.mds.stop().unwrap();
    eprintln!("the MDS stopped in {:?}: {status}", t.elapsed());
    assert!(status.success(), "{status}");
    assert!(cluster.mds.log().contains("repository agent stopped"));
    eprintln!(
        "{:?}: the whole test took {:?}",
        server.kind(),
        t0.elapsed()
    );
}

#[test]
fn agent_s3s_fs() {
    run(async { agent_with(S3Server::start_s3s_fs().unwrap()).await });
}

#[test]
fn agent_moto() {
    run(async { agent_with(S3Server::start_moto().unwrap()).await });
}
