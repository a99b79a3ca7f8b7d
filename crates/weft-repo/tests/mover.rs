//! The data mover against real S3-compatible servers (s3s-fs and moto, the same test body
//! for each) and a real file system (`weft mgs`, `mds`, `oss` processes): an object
//! restored into a file striped over several OSTs, in pieces and out of order — copied by
//! the mover itself, handed to the OSS's mover, and copied by the MDS's mover again when
//! the OSS serves without one — reads back byte for byte; a changed object, a missing one
//! and a stopped server are errors (ESTALE, ENOENT, EIO within a bounded time) whichever
//! mover meets them, never wrong bytes.
//!
//! Needs the `weft` binary (`cargo build -p weft-cli --bin weft`; `WEFT_BIN` overrides
//! where it is looked for) and the servers (`./test.sh` installs them; see
//! `weft_testkit::s3`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{bin, bucket, link, run};

use bytes::Bytes;
use object_store::ObjectStoreExt;
use object_store::path::Path as StorePath;
use std::time::{Duration, Instant};
use weft_client::OpenOptions;
use weft_proto::hsm::{ArchiveRef, RestoreChunk};
use weft_proto::layout::LayoutTemplate;
use weft_proto::mdt::{AccessMode, Credentials};
use weft_proto::{Errno, Fid};
use weft_repo::{Mover, MoverConfig, MoverRole};
use weft_testkit::s3::{ACCESS_KEY, SECRET_KEY};
use weft_testkit::{S3Server, TestCluster, ost_counter, pattern};

const BUCKET: &str = "weft";
const KEY: &str = "data/big.bin";
/// About 20 MiB, not a multiple of the stripe size nor of the mover's sub-range.
const SIZE: u64 = (20 << 20) + 12_345;
const SEED: u64 = 23;
/// The longest a restore from a stopped server may take to fail.
const DEAD_STORE_LIMIT: Duration = Duration::from_secs(60);

fn mover_config() -> MoverConfig {
    MoverConfig {
        // Several sub-ranges per chunk, each across stripes.
        sub_range: 3 << 20,
        in_flight: 4,
        ..MoverConfig::default()
    }
}

async fn restore_range(
    mover: &Mover,
    fid: Fid,
    layout: &weft_proto::layout::Layout,
    repo: u32,
    archive: &ArchiveRef,
    start: u64,
    end: u64,
) -> Result<(), weft_proto::WireError> {
    mover
        .restore_chunk(RestoreChunk {
            fid,
            layout: layout.clone(),
            repo,
            archive: archive.clone(),
            start,
            end,
        })
        .await
}

/// Puts the test object (SIZE bytes of the pattern at KEY) into `store`: its bytes, and
/// its archive reference as an import would make it.
async fn put_object(store: &dyn object_store::ObjectStore) -> (Bytes, ArchiveRef) {
    let data = Bytes::from(pattern(0, SIZE as usize, SEED));
    store
        .put(&StorePath::from(KEY), data.clone().into())
        .await
        .unwrap();
    let meta = store.head(&StorePath::from(KEY)).await.unwrap();
    assert_eq!(meta.size, SIZE);
    let archive = ArchiveRef {
        key: KEY.into(),
        etag: meta.e_tag.clone(),
        size: SIZE,
        modified: weft_proto::time::Timestamp::default(),
    };
    (data, archive)
}

/// The test body, the same for every server.
async fn restores_from(mut server: S3Server) {
    eprintln!(
        "{:?} answered {:?} after it started",
        server.kind(),
        server.started_in()
    );
    server.create_bucket(BUCKET).unwrap();
    let mut cluster = TestCluster::start_with_env(&bin(), 4, server.env())
        .await
        .unwrap();
    let root = Credentials::root();

    // The object, as an import would have found it.
    let store = bucket(&server, BUCKET);
    let (data, archive) = put_object(&*store).await;
    assert!(
        archive.etag.is_some(),
        "{:?} gives no entity tag",
        server.kind()
    );

    // The repository association and a file striped over every OST in 1 MiB stripes.
    let client = cluster.fs_client(Duration::from_secs(30)).await.unwrap();
    let dir = client
        .mkdir(Fid::ROOT, b"data", 0o755, &root)
        .await
        .unwrap();
    let spec = server.spec("/data", BUCKET, "data");
    let repo = link(&client, spec, dir.fid).await;
    let file = client
        .open_in(
            dir.fid,
            b"big.bin",
            OpenOptions::create(0o644),
            Some(LayoutTemplate::raid0(4, 1 << 20, -1)),
            &root,
        )
        .await
        .unwrap();
    let (fid, layout) = (file.fid(), file.layout().unwrap());
    // Its size, as an import gives it (the data is not on the OSTs).
    file.truncate(SIZE).await.unwrap();
    file.close().await.unwrap();
    assert_eq!(layout.components[0].osts.len(), 4, "{layout:?}");

    // An MDS's mover (a cluster client of its own) hands the chunks to the OSS, whose OSTs
    // they all are; a mover in the OSS role copies what it is given itself.
    let view = cluster.client().await.unwrap();
    let mover = Mover::with_config(view.clone(), mover_config());
    let copier = Mover::with_config(
        view.clone(),
        MoverConfig {
            role: MoverRole::Oss,
            ..mover_config()
        },
    );
    let (mid_start, mid_end) = ((5 << 20) + 4321, (13 << 20) + 7);
    restore_range(&copier, fid, &layout, repo, &archive, mid_start, mid_end)
        .await
        .unwrap();
    restore_range(&mover, fid, &layout, repo, &archive, mid_end, SIZE)
        .await
        .unwrap();
    restore_range(&mover, fid, &layout, repo, &archive, 0, mid_start)
        .await
        .unwrap();
    let copied = mid_end - mid_start;
    let stats = copier.stats();
    assert_eq!((stats.chunks, stats.handed_off), (1, 0), "{stats:?}");
    assert_eq!((stats.bytes_fetched, stats.bytes_written), (copied, copied));
    let stats = mover.stats();
    assert_eq!((stats.chunks, stats.chunk_errors), (2, 0), "{stats:?}");
    assert_eq!(stats.handed_off, 2, "{stats:?}");
    assert_eq!((stats.bytes_fetched, stats.bytes_written), (0, 0));
    // The OSS counts them on the OST it was sent each to (the first piece's).
    let mut restores = 0;
    for i in 0..4 {
        restores += ost_counter(&view, i, "restores").await.unwrap();
    }
    assert_eq!(restores, 2);

    // Read back through a fresh client: byte for byte.
    let reader = cluster.fs_client(Duration::from_secs(30)).await.unwrap();
    let f = reader.open(fid, OpenOptions::read(), &root).await.unwrap();
    assert_eq!(f.size().await, SIZE);
    let back = f.read_at(0, SIZE).await.unwrap();
    f.close().await.unwrap();
    assert!(back == data, "restored bytes differ from the object");

    // A missing object: ENOENT, nothing read.
    let mut missing = archive.clone();
    missing.key = "data/no-such-object".into();
    let e = restore_range(&mover, fid, &layout, repo, &missing, 0, 4096)
        .await
        .unwrap_err();
    assert_eq!(e.errno, Errno::NoEnt, "{e:?}");

    // A repository that does not exist: ENOENT.
    let e = restore_range(&mover, fid, &layout, repo + 100, &archive, 0, 4096)
        .await
        .unwrap_err();
    assert_eq!(e.errno, Errno::NoEnt, "{e:?}");

    // The object changed since it was imported (same size, other bytes): ESTALE, and the
    // file keeps its bytes.
    store
        .put(
            &StorePath::from(KEY),
            Bytes::from(pattern(0, SIZE as usize, SEED + 1)).into(),
        )
        .await
        .unwrap();
    let now = store.head(&StorePath::from(KEY)).await.unwrap();
    assert_ne!(
        now.e_tag, archive.etag,
        "the store gave the new object the old tag"
    );
    let e = restore_range(&mover, fid, &layout, repo, &archive, 0, SIZE)
        .await
        .unwrap_err();
    assert_eq!(e.errno, Errno::Stale, "{e:?}");
    let f = reader.open(fid, OpenOptions::read(), &root).await.unwrap();
    let back = f.read_at(0, SIZE).await.unwrap();
    f.close().await.unwrap();
    assert!(back == data, "a refused restore changed the file");

    // The same through a mover that copies itself: ESTALE, counted.
    let e = restore_range(&copier, fid, &layout, repo, &archive, 0, 4096)
        .await
        .unwrap_err();
    assert_eq!(e.errno, Errno::Stale, "{e:?}");
    assert!(copier.stats().stale >= 1, "{:?}", copier.stats());
    let mut current = archive.clone();
    current.etag = now.e_tag.clone();
    let data = Bytes::from(pattern(0, SIZE as usize, SEED + 1));

    // An OSS serving without a data mover answers ENOSYS: the MDS's mover copies the
    // chunks itself (into a file emptied first), and hands that server nothing for a while.
    cluster.oss.add_args(&["--no-data-mover"]);
    cluster.oss.restart().unwrap();
    cluster.wait_ready().await.unwrap();
    let emptying = OpenOptions {
        access: AccessMode::Write,
        truncate: true,
        ..OpenOptions::read()
    };
    let f = reader.open(fid, emptying, &root).await.unwrap();
    f.truncate(SIZE).await.unwrap();
    f.close().await.unwrap();
    let fallback = Mover::with_config(view.clone(), mover_config());
    restore_range(&fallback, fid, &layout, repo, &current, 0, mid_start)
        .await
        .unwrap();
    restore_range(&fallback, fid, &layout, repo, &current, mid_start, SIZE)
        .await
        .unwrap();
    let stats = fallback.stats();
    assert_eq!((stats.chunks, stats.handed_off), (2, 0), "{stats:?}");
    assert_eq!((stats.bytes_fetched, stats.bytes_written), (SIZE, SIZE));
    let f = reader.open(fid, OpenOptions::read(), &root).await.unwrap();
    let back = f.read_at(0, SIZE).await.unwrap();
    f.close().await.unwrap();
    assert!(
        back == data,
        "bytes the MDS's mover copied differ from the object"
    );

    // The store stops: EIO, within a bounded time, with no credentials in the message.
    server.kill().unwrap();
    let started = Instant::now();
    let e = restore_range(&fallback, fid, &layout, repo, &current, 0, 1 << 20)
        .await
        .unwrap_err();
    let took = started.elapsed();
    eprintln!("a restore from the stopped server failed after {took:?}: {e:?}");
    assert_eq!(e.errno, Errno::Io, "{e:?}");
    assert!(took < DEAD_STORE_LIMIT, "took {took:?}");
    assert!(
        !e.message.contains(SECRET_KEY) && !e.message.contains(ACCESS_KEY),
        "{e:?}"
    );
    assert!(fallback.stats().retries >= 1);
}

#[test]
fn restores_from_s3s_fs() {
    run(async { restores_from(S3Server::start_s3s_fs().unwrap()).await });
}

#[test]
fn restores_from_moto() {
    run(async { restores_from(S3Server::start_moto().unwrap()).await });
}

/// A file striped over OSTs of two OSS processes (OSTs 0 and 1 in the cluster's, OST 2 in
/// a second): the MDS's mover hands each server its part of every chunk (only the bytes of
/// its own OSTs, fetched by that server), and the file reads back byte for byte.
#[test]
fn a_chunk_over_two_servers_is_split_between_them() {
    run(async {
        let server = S3Server::start_s3s_fs().unwrap();
        server.create_bucket(BUCKET).unwrap();
        let cluster = TestCluster::start_with_env(&bin(), 2, server.env())
            .await
            .unwrap();
        let root = Credentials::root();
        let oss2_dir = cluster.dir.path().join("ost2");
        let mut oss2 = weft_testkit::ServerProcess::start_with_env(
            "oss2",
            &bin(),
            vec![
                "oss".into(),
                "--mgs".into(),
                cluster.mgs_addr.clone(),
                "--listen".into(),
                format!("127.0.0.1:{}", weft_testkit::free_port().unwrap()),
                "--ost".into(),
                format!("2={}", oss2_dir.display()),
            ],
            server.env(),
            cluster.dir.path().join("oss2.log"),
        )
        .unwrap();

        let (data, archive) = put_object(&*bucket(&server, BUCKET)).await;
        let client = cluster.fs_client(Duration::from_secs(30)).await.unwrap();
        let dir = client
            .mkdir(Fid::ROOT, b"data", 0o755, &root)
            .await
            .unwrap();
        let repo = link(&client, server.spec("/data", BUCKET, "data"), dir.fid).await;
        // Once the MDT places stripes on the new OST, a file over all three.
        let mut attempt = 0;
        let (fid, layout) = loop {
            attempt += 1;
            let name = format!("big{attempt}.bin");
            let file = client
                .open_in(
                    dir.fid,
                    name.as_bytes(),
                    OpenOptions::create(0o644),
                    Some(LayoutTemplate::raid0(3, 1 << 20, -1)),
                    &root,
                )
                .await
                .unwrap();
            let layout = file.layout().unwrap();
            file.truncate(SIZE).await.unwrap();
            file.close().await.unwrap();
            if layout.components[0].osts.len() == 3 {
                break (file.fid(), layout);
            }
            assert!(
                attempt < 200,
                "OST2 never placed: {layout:?}\n{}",
                oss2.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };

        let view = cluster.client().await.unwrap();
        let mover = Mover::with_config(view.clone(), mover_config());
        let mid = (9 << 20) + 77;
        restore_range(&mover, fid, &layout, repo, &archive, mid, SIZE)
            .await
            .unwrap();
        restore_range(&mover, fid, &layout, repo, &archive, 0, mid)
            .await
            .unwrap();
        let stats = mover.stats();
        assert_eq!((stats.chunks, stats.chunk_errors), (2, 0), "{stats:?}");
        assert_eq!(stats.handed_off, 4, "two parts per chunk: {stats:?}");
        assert_eq!((stats.bytes_fetched, stats.bytes_written), (0, 0));
        // Each server copied the bytes of its own OSTs (counted on the OST each part was
        // sent to).
        let mut restored = [0u64; 3];
        for (i, r) in restored.iter_mut().enumerate() {
            *r = ost_counter(&view, i as u32, "restored_bytes")
                .await
                .unwrap();
        }
        let on_2: u64 = weft_client::layout::map_range(&layout, fid, 0, SIZE)
            .unwrap()
            .iter()
            .filter(|p| p.ost == 2)
            .map(|p| p.len)
            .sum();
        assert!(on_2 > 0 && on_2 < SIZE);
        assert_eq!(restored[2], on_2, "{restored:?}");
        assert_eq!(restored[0] + restored[1], SIZE - on_2, "{restored:?}");

        let reader = cluster.fs_client(Duration::from_secs(30)).await.unwrap();
        let f = reader.open(fid, OpenOptions::read(), &root).await.unwrap();
        let back = f.read_at(0, SIZE).await.unwrap();
        f.close().await.unwrap();
        assert!(back == data, "restored bytes differ from the object");
        oss2.stop().unwrap();
    });
}
