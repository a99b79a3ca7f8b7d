//! Auto import by event notifications (S3 → SQS), against moto (its S3 sends the bucket's
//! events to its own SQS; s3s-fs sends none) and a real file system whose MDS sweeps
//! every 200 ms but lists a repository with an event queue only once an hour: after the
//! first listing, every change below comes through the queue.
//!
//! - `weft repo create --events`: a queue that does not exist is refused with a clear
//!   error (nothing linked); a real one is kept and shown by `weft repo show`;
//!   `weft repo update` refuses a missing queue too, and `--no-events` puts a repository
//!   back on listings;
//! - NEW, CHANGED and DELETED objects (a key with a space and a `+`, a directory emptied
//!   by a deletion) reach the namespace through the queue;
//! - two repositories on one bucket share the queue: each gets the changes under its own
//!   prefix, a key under neither prefix goes nowhere;
//! - a message that is no S3 event is dropped and the queue goes on;
//! - the agent's and mover's counters show through `weft get_param`;
//! - the queue's server going away and coming back: errors counted, then followed again;
//! - the MDS log never holds the credentials;
//! - a listing that failed is tried again at the next sweep (s3s-fs's faults);
//! - `az://`: a container's blob events through a storage queue (Azurite's Blob and
//!   Queue services; Azurite has no Event Grid, so the test puts each event in the queue
//!   as Event Grid delivers it: the event's JSON in Event Grid's schema, base64).
//!
//! Needs the `weft` binary (`cargo build -p weft-cli --bin weft`) and moto (`./test.sh`
//! installs it; see `weft_testkit::s3`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{bin, bucket, link, run};

use object_store::ObjectStoreExt;
use object_store::aws::AwsCredential;
use object_store::path::Path as StorePath;
use std::sync::Arc;
use std::time::{Duration, Instant};
use weft_client::{Client, OpenOptions};
use weft_proto::Fid;
use weft_proto::hsm::RepoPolicy;
use weft_proto::mdt::Credentials;
use weft_repo::events::Sqs;
use weft_repo::store::AwsAccess;
use weft_testkit::s3::{ACCESS_KEY, REGION, SECRET_KEY};
use weft_testkit::s3_faults::{Fault, Matching};
use weft_testkit::{
    AzureServer, FSNAME, S3Server, TestCluster, eventually, wait_until_async,
    wait_until_async_within,
};

const BUCKET: &str = "weft";
const ALL: RepoPolicy = RepoPolicy {
    new: true,
    changed: true,
    deleted: true,
};

/// The test servers' credentials, for this process's own SQS calls.
fn access() -> AwsAccess {
    AwsAccess {
        bucket: BUCKET.into(),
        credentials: Arc::new(object_store::StaticCredentialProvider::new(AwsCredential {
            key_id: ACCESS_KEY.into(),
            secret_key: SECRET_KEY.into(),
            token: None,
        })),
        region: REGION.into(),
    }
}

async fn read_all(client: &Arc<Client>, dir: Fid, name: &[u8]) -> Vec<u8> {
    let root = Credentials::root();
    let a = client.lookup(dir, name, &root).await.unwrap();
    let f = client
        .open(a.fid, OpenOptions::read(), &root)
        .await
        .unwrap();
    let data = f.read_at(0, f.size().await).await.unwrap();
    f.close().await.unwrap();
    data.to_vec()
}

async fn exists(client: &Client, dir: Fid, name: &[u8]) -> bool {
    client.lookup(dir, name, &Credentials::root()).await.is_ok()
}

/// `weft get_param NAME` of the cluster at `mgs`: the value as a number.
fn param(mgs: &str, name: &str) -> u64 {
    let out = std::process::Command::new(bin())
        .args(["get_param", "-n", "--mgs", mgs, name])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "get_param {name}: {text}");
    text.trim()
        .parse()
        .unwrap_or_else(|_| panic!("get_param {name}: {text:?}"))
}

/// `weft repo ARGS` with `env` (a store's credentials) as its environment: the exit status
/// and what it printed (both streams).
fn weft_repo(env: &[(String, String)], args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(bin())
        .arg("repo")
        .args(args)
        .envs(env.iter().cloned())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn the_auto_import_follows_the_buckets_event_queue() {
    run(async {
        let server = S3Server::start_moto().unwrap();
        let queue = bucket_with_queue(&server).await;
        let sqs = Sqs::new(&queue, &access()).unwrap();
        let s = bucket(&server, BUCKET);
        s.put(&StorePath::from("ev/early.txt"), "before the link".into())
            .await
            .unwrap();

        let (cluster, client) = cluster_for(&server).await;
        let root = Credentials::root();

        // `repo create --events`: a missing queue is refused, nothing linked.
        let fs_path = |p: &str| format!("{}:/{FSNAME}{p}", cluster.mgs_addr);
        let endpoint = server.endpoint();
        let create = |path: String, prefix: &str, q: String| {
            vec![
                "create".to_string(),
                path,
                format!("s3://{BUCKET}/{prefix}"),
                "--endpoint".into(),
                endpoint.clone(),
                "--region".into(),
                REGION.into(),
                "--path-style".into(),
                "--import-policy".into(),
                "NEW,CHANGED,DELETED".into(),
                "--events".into(),
                q,
            ]
        };
        let missing = format!("{}/123456789012/no-such-queue", server.endpoint());
        let args = create(fs_path("/nope"), "nope", missing);
        let (ok, out) = weft_repo(
            &server.env(),
            &args.iter().map(String::as_str).collect::<Vec<_>>(),
        );
        assert!(!ok, "a missing queue was accepted: {out}");
        assert!(out.contains("the event queue does not answer"), "{out}");
        assert!(!out.contains(SECRET_KEY), "{out}");
        assert!(
            !exists(&client, Fid::ROOT, b"nope").await,
            "a directory was made"
        );

        // Two repositories on the bucket, one queue: /ev (prefix ev) by the CLI, /ev2
        // (prefix other) through the MGS.
        let args = create(fs_path("/ev"), "ev", queue.clone());
        let (ok, out) = weft_repo(
            &server.env(),
            &args.iter().map(String::as_str).collect::<Vec<_>>(),
        );
        assert!(ok, "{out}");
        let (ok, out) = weft_repo(&server.env(), &["show", &fs_path("/ev")]);
        assert!(
            ok && out.contains(&format!("events:          {queue}")),
            "{out}"
        );
        let ev = client.lookup(Fid::ROOT, b"ev", &root).await.unwrap();
        let ev2 = client.mkdir(Fid::ROOT, b"ev2", 0o755, &root).await.unwrap();
        let mut spec = server.spec("/ev2", BUCKET, "other");
        spec.import_policy = ALL;
        spec.events = Some(queue.clone());
        link(&client, spec, ev2.fid).await;

        // The first (and, within the hour, only) listing brings the early object.
        eventually("early.txt imported by the first listing", || {
            client.lookup(ev.fid, b"early.txt", &root)
        })
        .await;

        // NEW, through the queue only.
        let name = "with space+plus.txt";
        let v1 = b"first version".to_vec();
        s.put(&StorePath::from(format!("ev/{name}")), v1.clone().into())
            .await
            .unwrap();
        s.put(&StorePath::from("ev/d/x"), "x".into()).await.unwrap();
        s.put(&StorePath::from("other/b.txt"), "b".into())
            .await
            .unwrap();
        s.put(&StorePath::from("stray.txt"), "nobody's".into())
            .await
            .unwrap();
        let t = Instant::now();
        let a = eventually("the new object imported from its event", || {
            client.lookup(ev.fid, name.as_bytes(), &root)
        })
        .await;
        eprintln!("NEW by event after {:?}", t.elapsed());
        assert_eq!(a.size, v1.len() as u64);
        assert_eq!(read_all(&client, ev.fid, name.as_bytes()).await, v1);
        let d = eventually("d imported", || client.lookup(ev.fid, b"d", &root)).await;
        eventually("d/x imported", || client.lookup(d.fid, b"x", &root)).await;
        eventually("other/b.txt imported into /ev2", || {
            client.lookup(ev2.fid, b"b.txt", &root)
        })
        .await;
        assert!(!exists(&client, ev.fid, b"b.txt").await);
        assert!(!exists(&client, ev2.fid, b"stray.txt").await);
        assert!(!exists(&client, ev.fid, b"stray.txt").await);

        // A message that is no S3 event: dropped, the queue goes on.
        sqs.send("this is not an event").await.unwrap();

        // CHANGED.
        let v2 = b"the second version, longer".to_vec();
        s.put(&StorePath::from(format!("ev/{name}")), v2.clone().into())
            .await
            .unwrap();
        let t = Instant::now();
        wait_until_async("the changed object updated from its event", || async {
            client
                .lookup(ev.fid, name.as_bytes(), &root)
                .await
                .is_ok_and(|a| a.size == v2.len() as u64)
        })
        .await;
        eprintln!("CHANGED by event after {:?}", t.elapsed());
        let fresh = cluster.fs_client(Duration::from_secs(30)).await.unwrap();
        assert_eq!(read_all(&fresh, ev.fid, name.as_bytes()).await, v2);

        // DELETED: the files go, and d, emptied.
        s.delete(&StorePath::from(format!("ev/{name}")))
            .await
            .unwrap();
        s.delete(&StorePath::from("ev/d/x")).await.unwrap();
        let t = Instant::now();
        wait_until_async("the deleted objects' files removed", || async {
            !exists(&client, ev.fid, name.as_bytes()).await && !exists(&client, ev.fid, b"d").await
        })
        .await;
        eprintln!("DELETED by event after {:?}", t.elapsed());
        assert!(exists(&client, ev.fid, b"early.txt").await);
        assert!(exists(&client, ev2.fid, b"b.txt").await);

        // Every message was handled and deleted.
        wait_until_async("the queue emptied", || async {
            sqs.receive(10, Duration::ZERO, Duration::from_secs(1))
                .await
                .unwrap()
                .is_empty()
        })
        .await;

        // `repo update`: a missing queue refused; /ev2 without its queue lists again at
        // every sweep, so a new object comes by the listing.
        let missing = format!("{}/123456789012/no-such-queue", server.endpoint());
        let (ok, out) = weft_repo(
            &server.env(),
            &["update", &fs_path("/ev"), "--events", &missing],
        );
        assert!(
            !ok && out.contains("the event queue does not answer"),
            "{out}"
        );
        let (ok, out) = weft_repo(&server.env(), &["update", &fs_path("/ev2"), "--no-events"]);
        assert!(ok && out.contains("events -"), "{out}");
        let (ok, out) = weft_repo(&server.env(), &["show", &fs_path("/ev2")]);
        assert!(ok && out.contains("events:          -\n"), "{out}");
        let (_, out) = weft_repo(&server.env(), &["show", &fs_path("/ev")]);
        assert!(out.contains(&format!("events:          {queue}")), "{out}");
        s.put(&StorePath::from("other/c.txt"), "c".into())
            .await
            .unwrap();
        eventually("other/c.txt imported into /ev2 by a listing", || {
            client.lookup(ev2.fid, b"c.txt", &root)
        })
        .await;

        // The agent's and the mover's counters, through MDT0's parameters.
        let mdt0 = format!("mdt.{FSNAME}-MDT0000");
        let mgs = cluster.mgs_addr.clone();
        let p = |name: &str| param(&mgs, &format!("{mdt0}.{name}"));
        assert!(
            p("repo_agent.events") >= 6,
            "events: {}",
            p("repo_agent.events")
        );
        assert!(p("repo_agent.imported") >= 5);
        assert!(p("repo_agent.deleted") >= 3);
        assert!(
            p("repo_agent.errors") >= 1,
            "the bad message counts as an error"
        );
        assert!(p("repo_agent.sweeps") >= 1);
        assert!(p("mover.chunks") >= 2, "two reads restored chunks");
        // The OSS's mover copied them (its OSTs hold every chunk's objects).
        assert!(p("mover.handed_off") >= 2, "{}", p("mover.handed_off"));

        let log = cluster.mds.log();
        assert!(log.contains("following the bucket's event queue"), "{log}");
        assert!(
            log.contains("no S3 event"),
            "the bad message was not reported"
        );
        assert!(
            !log.contains(SECRET_KEY),
            "the secret key is in the MDS log"
        );
        assert!(
            !log.contains(ACCESS_KEY),
            "the access key is in the MDS log"
        );
        drop(s);
        let _ = server;
    });
}

/// A file system reaching `server` whose MDS sweeps every 200 ms but lists a repository
/// with an event queue only once an hour, and a client of it.
async fn cluster_for(server: &S3Server) -> (TestCluster, Arc<Client>) {
    cluster_with_env(server.env()).await
}

/// [`cluster_for`] a store reached with the environment `env`.
async fn cluster_with_env(env: Vec<(String, String)>) -> (TestCluster, Arc<Client>) {
    let mut cluster = TestCluster::start_with_env(&bin(), 2, env).await.unwrap();
    cluster.mds.add_args(&[
        "--repo-interval-ms",
        "200",
        "--repo-events-sweep-ms",
        "3600000",
    ]);
    cluster.mds.restart().unwrap();
    cluster.wait_ready().await.unwrap();
    let client = cluster.fs_client(Duration::from_secs(30)).await.unwrap();
    (cluster, client)
}

/// Makes the bucket, the queue `weft-events` and the bucket's notification to it on
/// `server`; answers the queue's URL.
async fn bucket_with_queue(server: &S3Server) -> String {
    server.create_bucket(BUCKET).unwrap();
    let queue = Sqs::create_queue(&server.endpoint(), "weft-events", &access())
        .await
        .unwrap();
    let arn = Sqs::new(&queue, &access()).unwrap().arn().await.unwrap();
    server.notify_queue(BUCKET, &arn).unwrap();
    queue
}

/// The queue's server goes away and comes back (moto keeps nothing: the bucket, queue and
/// notification are made again, at the same URLs): the receiver counts its errors, backs
/// off, and follows the queue again once it answers; the MDS serves throughout.
#[test]
fn the_receiver_outlives_the_queue_going_away() {
    run(async {
        let mut server = S3Server::start_moto().unwrap();
        let queue = bucket_with_queue(&server).await;
        let (cluster, client) = cluster_for(&server).await;
        let root = Credentials::root();
        let ev = client.mkdir(Fid::ROOT, b"ev", 0o755, &root).await.unwrap();
        let mut spec = server.spec("/ev", BUCKET, "ev");
        spec.import_policy = ALL;
        spec.events = Some(queue.clone());
        link(&client, spec, ev.fid).await;
        let mdt0 = format!("mdt.{FSNAME}-MDT0000");
        let mgs = cluster.mgs_addr.clone();
        let p = |name: &str| param(&mgs, &format!("{mdt0}.{name}"));
        wait_until_async("the agent follows the queue", || async {
            cluster
                .mds
                .log()
                .contains("following the bucket's event queue")
        })
        .await;
        bucket(&server, BUCKET)
            .put(&StorePath::from("ev/a"), "a".into())
            .await
            .unwrap();
        eventually("a imported from its event", || {
            client.lookup(ev.fid, b"a", &root)
        })
        .await;

        // Gone: receives fail, counted; the MDS still serves.
        let errors = p("repo_agent.errors");
        server.kill().unwrap();
        wait_until_async("receive errors counted", || async {
            p("repo_agent.errors") > errors
        })
        .await;
        assert!(exists(&client, ev.fid, b"a").await);

        // Back (empty, as moto starts): made again, and followed again.
        server.restart().unwrap();
        assert_eq!(
            bucket_with_queue(&server).await,
            queue,
            "the same queue URL"
        );
        let s = bucket(&server, BUCKET);
        s.put(&StorePath::from("ev/b"), "bee".into()).await.unwrap();
        wait_until_async_within(
            "b imported once the queue answers again",
            Duration::from_secs(90),
            || async { exists(&client, ev.fid, b"b").await },
        )
        .await;
        assert_eq!(read_all(&client, ev.fid, b"b").await, b"bee");
        assert!(
            cluster.mds.log().contains("event queue:"),
            "the failed receives were logged"
        );
    });
}

/// A repository with an event queue whose listing failed is listed again at the next
/// sweep, not at the next safety-net listing (an hour away here): an object put before
/// the link, of which no event tells, is imported once the store answers listings again.
/// The store is s3s-fs in this process (every GET fails while the fault rule stands; the
/// listing is a GET), the queue moto's.
#[test]
fn a_failed_listing_is_tried_again_at_the_next_sweep() {
    run(async {
        let store = S3Server::start_s3s_fs().unwrap();
        let moto = S3Server::start_moto().unwrap();
        store.create_bucket(BUCKET).unwrap();
        bucket(&store, BUCKET)
            .put(&StorePath::from("ev/quiet"), "told by no event".into())
            .await
            .unwrap();
        let queue = Sqs::create_queue(&moto.endpoint(), "weft-events", &access())
            .await
            .unwrap();
        let faults = store.faults().unwrap();
        let gets = Matching {
            path_contains: None,
            method: Some("GET".into()),
        };
        faults.add(Fault::InternalError, gets.clone(), None);

        let (cluster, client) = cluster_for(&store).await;
        let root = Credentials::root();
        let ev = client.mkdir(Fid::ROOT, b"ev", 0o755, &root).await.unwrap();
        let mut spec = store.spec("/ev", BUCKET, "ev");
        spec.import_policy = ALL;
        spec.events = Some(queue);
        link(&client, spec, ev.fid).await;
        wait_until_async("the first listing failed", || async {
            cluster.mds.log().contains("auto import: ")
        })
        .await;
        assert!(!exists(&client, ev.fid, b"quiet").await);
        let failed_gets = faults.requests_matching(&gets);

        // The store answers again: listed at the next sweep.
        faults.clear();
        wait_until_async("quiet imported by the listing tried again", || async {
            exists(&client, ev.fid, b"quiet").await
        })
        .await;
        assert_eq!(
            read_all(&client, ev.fid, b"quiet").await,
            b"told by no event"
        );
        assert!(
            faults.requests_matching(&gets) > failed_gets,
            "listed again"
        );
    });
}

/// The message Event Grid puts in a storage queue for a blob event: the event's JSON in
/// Event Grid's schema, base64.
fn event_grid_message(kind: &str, container: &str, key: &str) -> String {
    let data = serde_json::json!({ "api": "PutBlob", "blobType": "BlockBlob" });
    event_grid_event(kind, container, key, data)
}

/// The message Event Grid puts in a storage queue for a hierarchical namespace's rename of
/// `source` (a URL) to `key` in container `data` (`BlobRenamed`, `DirectoryRenamed`).
fn event_grid_rename(kind: &str, key: &str, source: &str) -> String {
    let data =
        serde_json::json!({ "api": "RenamePath", "sourceUrl": source, "destinationUrl": "" });
    event_grid_event(kind, "data", key, data)
}

/// An Event Grid event of type `Microsoft.Storage.KIND` on `key` of `container`, with
/// `data`, as a queue message (base64 of its JSON).
fn event_grid_event(kind: &str, container: &str, key: &str, data: serde_json::Value) -> String {
    use base64::Engine;
    let event = serde_json::json!({
        "topic": "/subscriptions/0/resourceGroups/g/providers/Microsoft.Storage/storageAccounts/devstoreaccount1",
        "subject": format!("/blobServices/default/containers/{container}/blobs/{key}"),
        "eventType": format!("Microsoft.Storage.{kind}"),
        "id": format!("{kind}-{key}"),
        "data": data,
        "dataVersion": "",
        "metadataVersion": "1",
        "eventTime": "2026-11-28T00:00:00Z"
    });
    base64::engine::general_purpose::STANDARD.encode(event.to_string())
}

/// `az://` with `--events`: NEW, CHANGED and DELETED blobs, and a hierarchical namespace's
/// renames and directory deletes, reach the namespace through the container's storage
/// queue, a message that is no event is dropped, a missing queue is refused at `repo
/// create`, and the account key appears in no log.
#[test]
fn the_auto_import_follows_an_azure_containers_event_queue() {
    run(async {
        use weft_repo::events::AzureQueue;
        use weft_repo::store::AzureAccess;
        use weft_testkit::azurite::{ACCOUNT, ACCOUNT_KEY};
        let az = AzureServer::start().unwrap();
        az.create_container("data").unwrap();
        let blobs = az.client("data").unwrap();
        let access = AzureAccess {
            container: "data".into(),
            account: ACCOUNT.into(),
            key: Some(ACCOUNT_KEY.into()),
        };
        let queue_url = az.queue_url("weft-events");
        let queue = AzureQueue::new(&queue_url, &access).unwrap();
        queue.create().await.unwrap();
        blobs
            .put(&StorePath::from("ev/early.txt"), "before the link".into())
            .await
            .unwrap();

        let (cluster, client) = cluster_with_env(az.env()).await;
        let root = Credentials::root();
        let fs_path = |p: &str| format!("{}:/{FSNAME}{p}", cluster.mgs_addr);
        let create = |path: &str, q: &str| {
            let fs = fs_path(path);
            let endpoint = az.endpoint();
            let args = [
                "create",
                fs.as_str(),
                "az://data/ev",
                "--endpoint",
                endpoint.as_str(),
                "--import-policy",
                "NEW,CHANGED,DELETED",
                "--events",
                q,
            ];
            weft_repo(&az.env(), &args)
        };
        let (ok, out) = create("/nope", &az.queue_url("no-such-queue"));
        assert!(!ok, "a missing queue was accepted: {out}");
        assert!(out.contains("the event queue does not answer"), "{out}");
        assert!(!out.contains(ACCOUNT_KEY), "{out}");
        let (ok, out) = create("/az", &queue_url);
        assert!(ok, "{out}");
        let dir = client.lookup(Fid::ROOT, b"az", &root).await.unwrap();
        eventually("early.txt imported by the first listing", || {
            client.lookup(dir.fid, b"early.txt", &root)
        })
        .await;

        // A blob written, then its event as Event Grid would send it.
        let put = |key: &'static str, body: Vec<u8>| {
            let (blobs, queue) = (blobs.clone(), queue.clone());
            async move {
                blobs.put(&StorePath::from(key), body.into()).await.unwrap();
                let event = event_grid_message("BlobCreated", "data", key);
                queue.send(&event).await.unwrap();
            }
        };
        // NEW.
        let v1 = b"first version".to_vec();
        put("ev/new file.txt", v1.clone()).await;
        // Outside the prefix, and another container's: nowhere.
        put("stray.txt", b"nobody's".to_vec()).await;
        queue
            .send(&event_grid_message("BlobCreated", "other", "ev/x"))
            .await
            .unwrap();
        queue.send("this is not an event").await.unwrap();
        let t = Instant::now();
        let a = eventually("the new blob imported from its event", || {
            client.lookup(dir.fid, b"new file.txt", &root)
        })
        .await;
        eprintln!("NEW by event after {:?}", t.elapsed());
        assert_eq!(a.size, v1.len() as u64);
        assert_eq!(read_all(&client, dir.fid, b"new file.txt").await, v1);
        assert!(!exists(&client, dir.fid, b"stray.txt").await);
        assert!(!exists(&client, dir.fid, b"x").await);

        // CHANGED.
        let v2 = b"the second version, longer".to_vec();
        put("ev/new file.txt", v2.clone()).await;
        wait_until_async("the changed blob updated from its event", || async {
            client
                .lookup(dir.fid, b"new file.txt", &root)
                .await
                .is_ok_and(|a| a.size == v2.len() as u64)
        })
        .await;
        let fresh = cluster.fs_client(Duration::from_secs(30)).await.unwrap();
        assert_eq!(read_all(&fresh, dir.fid, b"new file.txt").await, v2);

        // DELETED.
        blobs
            .delete(&StorePath::from("ev/new file.txt"))
            .await
            .unwrap();
        queue
            .send(&event_grid_message(
                "BlobDeleted",
                "data",
                "ev/new file.txt",
            ))
            .await
            .unwrap();
        wait_until_async("the deleted blob's file removed", || async {
            !exists(&client, dir.fid, b"new file.txt").await
        })
        .await;
        assert!(exists(&client, dir.fid, b"early.txt").await);

        // A hierarchical namespace's renames and directory deletes (the blobs moved as the
        // rename leaves them, then its event): a file renamed, a directory renamed, a
        // directory deleted.
        for key in [
            "ev/runs/a/1.bin",
            "ev/runs/a/2.bin",
            "ev/logs/x.log",
            "ev/old.txt",
        ] {
            put(key, key.as_bytes().to_vec()).await;
        }
        let runs = eventually("the directories imported", || async {
            let runs = client.lookup(dir.fid, b"runs", &root).await?;
            let a = client.lookup(runs.fid, b"a", &root).await?;
            client.lookup(a.fid, b"2.bin", &root).await?;
            let logs = client.lookup(dir.fid, b"logs", &root).await?;
            client.lookup(logs.fid, b"x.log", &root).await?;
            client.lookup(dir.fid, b"old.txt", &root).await?;
            Ok::<_, weft_client::ClientError>(runs)
        })
        .await;
        let endpoint = az.endpoint();
        let url = |key: &str| format!("{endpoint}/data/{}", key.replace(' ', "%20"));
        let moved = |from: &str, to: &str| {
            let (blobs, from, to) = (blobs.clone(), from.to_string(), to.to_string());
            async move {
                let body = blobs.get(&StorePath::from(from.as_str())).await.unwrap();
                let body = body.bytes().await.unwrap();
                blobs
                    .put(&StorePath::from(to.as_str()), body.into())
                    .await
                    .unwrap();
                blobs.delete(&StorePath::from(from.as_str())).await.unwrap();
            }
        };
        moved("ev/old.txt", "ev/new name.txt").await;
        queue
            .send(&event_grid_rename(
                "BlobRenamed",
                "ev/new name.txt",
                &url("ev/old.txt"),
            ))
            .await
            .unwrap();
        moved("ev/runs/a/1.bin", "ev/runs/b/1.bin").await;
        moved("ev/runs/a/2.bin", "ev/runs/b/2.bin").await;
        queue
            .send(&event_grid_rename(
                "DirectoryRenamed",
                "ev/runs/b",
                &url("ev/runs/a"),
            ))
            .await
            .unwrap();
        blobs
            .delete(&StorePath::from("ev/logs/x.log"))
            .await
            .unwrap();
        queue
            .send(&event_grid_message("DirectoryDeleted", "data", "ev/logs"))
            .await
            .unwrap();
        wait_until_async("the renames and the directory delete applied", || async {
            let b = client.lookup(runs.fid, b"b", &root).await;
            exists(&client, dir.fid, b"new name.txt").await
                && !exists(&client, dir.fid, b"old.txt").await
                && !exists(&client, runs.fid, b"a").await
                && !exists(&client, dir.fid, b"logs").await
                && match b {
                    Ok(b) => {
                        exists(&client, b.fid, b"1.bin").await
                            && exists(&client, b.fid, b"2.bin").await
                    }
                    Err(_) => false,
                }
        })
        .await;
        assert_eq!(
            read_all(&client, dir.fid, b"new name.txt").await,
            b"ev/old.txt"
        );
        let b = client.lookup(runs.fid, b"b", &root).await.unwrap();
        assert_eq!(read_all(&client, b.fid, b"2.bin").await, b"ev/runs/a/2.bin");

        // The linked prefix itself renamed away: nothing is under it any more, which the
        // sweep the event asks for (the regular one is an hour away) finds, removing every
        // file it had imported.
        let keys: Vec<String> = {
            use futures::TryStreamExt;
            use object_store::ObjectStore;
            let listed: Vec<_> = blobs
                .list(Some(&StorePath::from("ev")))
                .try_collect()
                .await
                .unwrap();
            listed.into_iter().map(|m| m.location.to_string()).collect()
        };
        assert!(keys.len() >= 4, "{keys:?}");
        for key in &keys {
            moved(key, &key.replacen("ev/", "gone/", 1)).await;
        }
        queue
            .send(&event_grid_rename("DirectoryRenamed", "gone", &url("ev")))
            .await
            .unwrap();
        wait_until_async("the files of the prefix renamed away removed", || async {
            !exists(&client, dir.fid, b"early.txt").await
                && !exists(&client, dir.fid, b"new name.txt").await
                && !exists(&client, b.fid, b"1.bin").await
                && !exists(&client, b.fid, b"2.bin").await
        })
        .await;

        // Every message was handled and deleted.
        wait_until_async("the queue emptied", || async {
            queue
                .receive(32, Duration::from_secs(1))
                .await
                .unwrap()
                .is_empty()
        })
        .await;
        let log = cluster.mds.log();
        assert!(log.contains("following the bucket's event queue"), "{log}");
        assert!(
            log.contains("the linked prefix was moved as a whole"),
            "{log}"
        );
        assert!(
            log.contains("no Event Grid event"),
            "the bad message was not reported"
        );
        assert!(
            !log.contains(ACCOUNT_KEY),
            "the account key is in the MDS log"
        );
    });
}
