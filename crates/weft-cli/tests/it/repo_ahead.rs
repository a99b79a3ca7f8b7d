//! Restore-ahead end to end (`llite.*.restore_ahead`): a directory of small objects in an
//! S3 bucket (s3s-fs) imported as released files; stats of every file load nothing; a
//! reader opening the files one by one in name order finds the next ones restored (or
//! being restored) in the background, each file is restored once, and every byte read is
//! the object's.

use crate::fuse_client_params::statahead_figures;
use crate::repo_s3::{BUCKET, LIMIT, PREFIX, bucket, hsm_state, link};
use crate::support::weft_env;
use bytes::Bytes;
use object_store::ObjectStoreExt;
use object_store::path::Path as StorePath;
use weft_testkit::{S3Server, TestCluster, pattern};

/// Files of the directory, and the size of each.
const FILES: usize = 64;
const SIZE: usize = 100_000;
/// `llite.*.restore_ahead` of the test.
const AHEAD: usize = 16;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_walking_released_files_has_the_next_ones_restored_ahead() {
    let server = S3Server::start_s3s_fs().unwrap();
    server.create_bucket(BUCKET).unwrap();
    let store = bucket(&server);
    for i in 0..FILES {
        let body = Bytes::from(pattern(0, SIZE + i, i as u64));
        store
            .put(
                &StorePath::from(format!("{PREFIX}/set/f{i:03}")),
                body.into(),
            )
            .await
            .unwrap();
    }
    let env = server.env();
    let tc = TestCluster::start_with_env(crate::bin(), 2, env.clone())
        .await
        .unwrap();
    let (tc, a, dir) = link(&server, tc);
    let (ok, out, err) = weft_env(&["repo", "import", &dir], &env, LIMIT);
    assert!(
        ok && out.contains(&format!("{FILES} created")),
        "{out}{err}"
    );

    // Stats of every name (a statahead scan of the directory) restore nothing.
    let restores = || async { tc.mdt_counter(0, "hsm_restores_started").await.unwrap() };
    let before = restores().await;
    for i in 0..FILES {
        let m = std::fs::metadata(a.path(&format!("data/set/f{i:03}"))).unwrap();
        assert_eq!(m.len(), (SIZE + i) as u64);
    }
    assert_eq!(restores().await, before, "stats loaded files");
    assert!(
        statahead_figures(&a.mnt)["scans"] > 0,
        "the stats scanned the directory"
    );
    assert_eq!(statahead_figures(&a.mnt)["restores_ahead"], 0);

    // Restore-ahead of AHEAD files for this mount (64 by default): reading the first
    // file loads the next AHEAD in the background, and no more.
    let inst = crate::fuse_client_params::instance_of(&a.mnt);
    let set = format!("llite.{inst}.restore_ahead={AHEAD}");
    let (ok, out, err) = crate::support::weft(&["set_param", &set]);
    assert!(ok, "{out}{err}");
    let path = |i: usize| a.path(&format!("data/set/f{i:03}"));
    let state = |i: usize| hsm_state(&path(i).display().to_string(), &env);
    assert!(std::fs::read(path(0)).unwrap() == pattern(0, SIZE, 0));
    weft_testkit::wait_until_async("the restores ahead of the first open", || async {
        restores().await - before == 1 + AHEAD as u64
    })
    .await;
    assert_eq!(statahead_figures(&a.mnt)["restores_ahead"], AHEAD as u64);
    for i in 1..=AHEAD {
        weft_testkit::wait_until("a file restored ahead is loaded", || {
            !state(i).contains("released")
        });
    }
    assert!(
        state(AHEAD + 1).contains("released"),
        "{}",
        state(AHEAD + 1)
    );

    // A reader of every file in listing order: each restored once, by it or ahead of it.
    let root = a.path("data/set");
    tokio::task::spawn_blocking(move || {
        for i in 0..FILES {
            let got = std::fs::read(root.join(format!("f{i:03}"))).unwrap();
            assert!(
                got == pattern(0, SIZE + i, i as u64),
                "file {i}: the object's bytes"
            );
        }
    })
    .await
    .unwrap();
    let ahead = statahead_figures(&a.mnt)["restores_ahead"];
    assert!(
        ahead > AHEAD as u64,
        "{ahead} of {FILES} files restored ahead of their opens"
    );
    assert_eq!(
        restores().await - before,
        FILES as u64,
        "each file restored once, by its reader or ahead of it"
    );
    drop((a, tc));
}
