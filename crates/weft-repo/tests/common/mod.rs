//! What the weft-repo integration tests share: the `weft` binary, a plain S3 client of a
//! test server's bucket, and linking a directory to a repository.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use bytes::Bytes;
use object_store::ObjectStore;
use std::path::PathBuf;
use std::sync::Arc;
use weft_client::Client;
use weft_proto::Fid;
use weft_proto::hsm::RepoSpec;
use weft_proto::mgs::{MgsReply, MgsRequest};
use weft_testkit::S3Server;
use weft_testkit::s3::{ACCESS_KEY, REGION, SECRET_KEY};

/// The `weft` binary the test cluster runs.
pub fn bin() -> PathBuf {
    let path = std::env::var_os("WEFT_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let target = std::env::var_os("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"));
            target.join("debug/weft")
        });
    assert!(
        path.is_file(),
        "{} does not exist: build it first with `cargo build -p weft-cli --bin weft` \
         (or point WEFT_BIN at a weft binary)",
        path.display()
    );
    path
}

/// A store client of `server`'s bucket, made by hand (the test's own reads and writes;
/// this process needs no credentials in its environment).
pub fn bucket(server: &S3Server, name: &str) -> Arc<dyn ObjectStore> {
    server.client(name).unwrap()
}

pub async fn link(client: &Client, spec: RepoSpec, dir: Fid) -> u32 {
    match client
        .cluster()
        .mgs()
        .connection()
        .call(&MgsRequest::RepoCreate { spec, dir }, Bytes::new())
        .await
        .unwrap()
    {
        (MgsReply::RepoId(id), _) => id,
        (other, _) => panic!("RepoCreate answered {other:?}"),
    }
}

/// The test servers' credentials in this process's environment, where `RepoStore::open`
/// (as any process reaching a store) takes them. Every test calls this first, before it
/// starts any thread.
pub fn credentials_in_env() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        for (k, v) in [
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY),
            ("AWS_SECRET_ACCESS_KEY", SECRET_KEY),
            ("AWS_REGION", REGION),
            ("AWS_ALLOW_HTTP", "true"),
            ("AWS_EC2_METADATA_DISABLED", "true"),
        ] {
            // SAFETY: every test sets these first, under this Once, before it starts a
            // runtime or any thread of its own (other tests wait on the Once); the values
            // are the same for every test.
            unsafe { std::env::set_var(k, v) };
        }
    });
}

/// Runs `body` on a runtime of its own, after [`credentials_in_env`].
pub fn run(body: impl std::future::Future<Output = ()>) {
    credentials_in_env();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap()
        .block_on(body);
}
