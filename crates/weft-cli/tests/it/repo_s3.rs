//! Data repositories end to end, as a user drives them: real stores (the S3-compatible
//! s3s-fs and moto, and Azurite for `az://`: the same test body for each), real `weft
//! mgs`/`mds`/`oss` processes with the store's credentials in the MDS's environment, the
//! `weft repo` and `weft hsm_*` verbs, and two FUSE mounts.
//!
//! - Import: 10,000 objects under nested keys, FSx metadata keys and an FSx symlink become
//!   released files with the objects' attributes.
//! - Lazy load: two mounts read one released file at once, one from the start and one from
//!   the middle; both get the object's bytes, and the MDT runs one restore for them.
//! - Export: a new file and a changed imported one are uploaded with FSx's metadata and
//!   read back by a plain client of the store; release then read restores the same
//!   bytes.
//! - A store that dies while a file is loading: the reader gets EIO in bounded time, and a
//!   read after the store is back succeeds (s3s-fs, whose data survives a restart).
//! - The store's secret appears in no output and no log.

use crate::fuse_common::FuseMount;
use crate::support::weft_env;
use bytes::Bytes;
use object_store::path::Path as StorePath;
use object_store::{Attribute, Attributes, ObjectStore, ObjectStoreExt, PutOptions};
use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::sync::Arc;
use std::time::{Duration, Instant};
use weft_repo::meta::KeyStyle;
use weft_testkit::s3::{REGION, SECRET_KEY};
use weft_testkit::{AzureServer, S3Server, TestCluster, pattern};

pub(crate) const BUCKET: &str = "data";
pub(crate) const PREFIX: &str = "ds";
/// Objects of the import test, spread over 50 directories.
const SMALL_OBJECTS: usize = 10_000;
/// The file two mounts load at once: several restore units of the MDT (32 MiB) and not a
/// multiple of anything.
const BIG: usize = (70 << 20) + 4_321;
/// Longest one `weft` command may run: moto (Python) answers the 10,000 HEADs of an import
/// at a few hundred a second on CI's two busy cores.
pub(crate) const LIMIT: Duration = Duration::from_secs(600);

/// A plain S3 client of the bucket (the test's own reads and writes).
pub(crate) fn bucket(server: &S3Server) -> Arc<dyn ObjectStore> {
    server.client(BUCKET).unwrap()
}

/// FSx's metadata keys, spelled as the store takes them.
fn fsx_metadata(style: KeyStyle, mode: &str, uid: u32, gid: u32, mtime_ns: u64) -> Attributes {
    let mut a = Attributes::new();
    for (k, v) in [
        ("file-permissions", mode.to_string()),
        ("file-owner", uid.to_string()),
        ("file-group", gid.to_string()),
        ("file-mtime", format!("{mtime_ns}ns")),
        ("file-atime", format!("{mtime_ns}ns")),
    ] {
        a.insert(Attribute::Metadata(style.spell(k)), v.into());
    }
    a
}

fn small_key(i: usize) -> String {
    format!("{PREFIX}/small/d{:02}/f{i:05}", i % 50)
}

fn small_body(i: usize) -> Vec<u8> {
    pattern(0, 100 + i % 900, i as u64)
}

/// Fills the bucket: the small objects (every 100th with FSx metadata), a big object, an
/// object deep in the tree and an FSx symlink to the big one.
async fn populate(store: &Arc<dyn ObjectStore>, style: KeyStyle) {
    use futures::StreamExt;
    futures::stream::iter(0..SMALL_OBJECTS)
        .map(|i| {
            let store = store.clone();
            async move {
                let path = StorePath::from(small_key(i));
                let opts = PutOptions {
                    attributes: if i % 100 == 0 {
                        fsx_metadata(style, "0100640", 1000, 100, 1_700_000_000_123_456_789)
                    } else {
                        Attributes::new()
                    },
                    ..Default::default()
                };
                store
                    .put_opts(&path, small_body(i).into(), opts)
                    .await
                    .unwrap();
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
    let big = Bytes::from(pattern(0, BIG, 7));
    store
        .put(&StorePath::from(format!("{PREFIX}/big.bin")), big.into())
        .await
        .unwrap();
    store
        .put(
            &StorePath::from(format!("{PREFIX}/a/b/c/deep.txt")),
            Bytes::from_static(b"deep\n").into(),
        )
        .await
        .unwrap();
    let opts = PutOptions {
        attributes: fsx_metadata(style, "0120777", 0, 0, 1_600_000_000_000_000_000),
        ..Default::default()
    };
    store
        .put_opts(
            &StorePath::from(format!("{PREFIX}/link")),
            Bytes::from_static(b"big.bin").into(),
            opts,
        )
        .await
        .unwrap();
}

/// A cluster whose MDS reaches `server`, a mount, and repository 1 linked at
/// `MNT/data` to `s3://data/ds`.
async fn linked(server: &S3Server) -> (TestCluster, FuseMount, String) {
    let tc = TestCluster::start_with_env(crate::bin(), 4, server.env())
        .await
        .unwrap();
    link(server, tc)
}

/// A store the round trip runs against: the test's own client of the bucket (or
/// container), the environment that reaches it, `weft repo create`'s arguments after
/// the path, and the secret nothing may print.
struct Target {
    name: String,
    store: Arc<dyn ObjectStore>,
    env: Vec<(String, String)>,
    create: Vec<String>,
    secret: String,
    /// How the store spells FSx's metadata keys.
    style: KeyStyle,
}

impl Target {
    /// Bucket `data` of an S3 server (made here), linked as `s3://data/ds`.
    fn s3(server: &S3Server) -> Self {
        server.create_bucket(BUCKET).unwrap();
        Self {
            name: format!("{:?}", server.kind()),
            store: bucket(server),
            env: server.env(),
            create: s3_create_args(server),
            secret: SECRET_KEY.to_string(),
            style: KeyStyle::Fsx,
        }
    }

    /// Container `data` of an Azurite server (made here), linked as `az://data/ds`.
    fn azure(server: &AzureServer) -> Self {
        server.create_container(BUCKET).unwrap();
        Self {
            name: "Azurite".to_string(),
            store: server.client(BUCKET).unwrap(),
            env: server.env(),
            create: vec![
                format!("az://{BUCKET}/{PREFIX}"),
                "--endpoint".to_string(),
                server.endpoint(),
            ],
            secret: weft_testkit::azurite::ACCOUNT_KEY.to_string(),
            style: KeyStyle::Identifiers,
        }
    }

    /// A cluster whose MDS reaches the store, a mount, and repository 1 linked at
    /// `MNT/data`.
    async fn linked(&self) -> (TestCluster, FuseMount, String) {
        let tc = TestCluster::start_with_env(crate::bin(), 4, self.env.clone())
            .await
            .unwrap();
        link_to(tc, &self.create, &self.env, &self.secret)
    }

    /// The mode's metadata key as the store spells it.
    fn permissions_key(&self) -> std::borrow::Cow<'static, str> {
        self.style.spell(weft_repo::meta::PERMISSIONS)
    }

    fn assert_no_secret(&self, outputs: &[&str]) {
        assert_no_secret(&self.secret, outputs);
    }
}

/// `weft repo create`'s arguments after the path for `s3://data/ds` on `server`.
fn s3_create_args(server: &S3Server) -> Vec<String> {
    [
        &format!("s3://{BUCKET}/{PREFIX}"),
        "--endpoint",
        &server.endpoint(),
        "--region",
        REGION,
        "--path-style",
    ]
    .map(String::from)
    .to_vec()
}

/// A mount of `tc` and repository 1 linked at `MNT/data` to `s3://data/ds` on `server`.
pub(crate) fn link(server: &S3Server, tc: TestCluster) -> (TestCluster, FuseMount, String) {
    link_to(tc, &s3_create_args(server), &server.env(), SECRET_KEY)
}

/// A mount of `tc` and repository 1 linked at `MNT/data` by `weft repo create MNT/data
/// CREATE...` run with `env`, whose output must not show `secret`.
fn link_to(
    tc: TestCluster,
    create: &[String],
    env: &[(String, String)],
    secret: &str,
) -> (TestCluster, FuseMount, String) {
    let a = FuseMount::start(&tc, "");
    let dir = a.path("data").display().to_string();
    let mut args = vec!["repo", "create", &dir];
    args.extend(create.iter().map(String::as_str));
    let (ok, out, err) = weft_env(&args, env, LIMIT);
    assert!(ok, "repo create: {out}{err}");
    assert_no_secret(secret, &[&out, &err]);
    (tc, a, dir)
}

fn assert_no_secret(secret: &str, outputs: &[&str]) {
    for o in outputs {
        assert!(!o.contains(secret), "the secret key was printed: {o}");
    }
}

pub(crate) fn hsm_state(path: &str, env: &[(String, String)]) -> String {
    let (ok, out, err) = weft_env(&["hsm_state", path], env, LIMIT);
    assert!(ok, "hsm_state {path}: {out}{err}");
    out
}

/// Reads a whole file in 1 MiB calls starting at `from` (wrapping to the start).
fn read_from(path: &std::path::Path, from: u64) -> Vec<u8> {
    let mut f = fs::File::open(path).unwrap();
    let len = f.metadata().unwrap().len();
    let mut out = vec![0u8; len as usize];
    let mut buf = vec![0u8; 1 << 20];
    for (a, b) in [(from, len), (0, from)] {
        f.seek(SeekFrom::Start(a)).unwrap();
        let mut at = a;
        while at < b {
            let want = ((b - at) as usize).min(buf.len());
            let n = f.read(&mut buf[..want]).unwrap();
            assert!(n > 0, "short read at {at} of {}", path.display());
            out[at as usize..at as usize + n].copy_from_slice(&buf[..n]);
            at += n as u64;
        }
    }
    out
}

/// Import, lazy load through two mounts, export, release and restore.
async fn repository_round_trip(target: Target) {
    let store = target.store.clone();
    let t = Instant::now();
    populate(&store, target.style).await;
    eprintln!("{}: bucket filled in {:?}", target.name, t.elapsed());
    let env = target.env.clone();
    let (tc, a, dir) = target.linked().await;

    // Import.
    let t = Instant::now();
    let (ok, out, err) = weft_env(&["repo", "import", &dir], &env, LIMIT);
    eprintln!("import: {:?}: {out}", t.elapsed());
    assert!(ok, "repo import: {out}{err}");
    target.assert_no_secret(&[&out, &err]);
    let objects = SMALL_OBJECTS + 3;
    assert!(
        out.contains(&format!("{objects} created")),
        "every object became a file: {out}"
    );
    let mut names = 0;
    for d in fs::read_dir(a.path("data/small")).unwrap() {
        names += fs::read_dir(d.unwrap().path()).unwrap().count();
    }
    assert_eq!(names, SMALL_OBJECTS);
    // FSx's metadata keys, and the defaults without them.
    let m = fs::metadata(a.path(&format!("data/small/d00/f{:05}", 0))).unwrap();
    assert_eq!(m.permissions().mode() & 0o7777, 0o640);
    assert_eq!((m.uid(), m.gid()), (1000, 100));
    assert_eq!((m.mtime(), m.mtime_nsec()), (1_700_000_000, 123_456_789));
    assert_eq!(m.len(), small_body(0).len() as u64);
    assert_eq!(m.blocks(), 0, "a released file takes no space");
    let m = fs::metadata(a.path("data/small/d01/f00001")).unwrap();
    assert_eq!(m.permissions().mode() & 0o7777, 0o644);
    assert_eq!(
        fs::read_link(a.path("data/link")).unwrap(),
        std::path::Path::new("big.bin")
    );
    assert_eq!(fs::read(a.path("data/a/b/c/deep.txt")).unwrap(), b"deep\n");
    let state = hsm_state(&a.path("data/big.bin").display().to_string(), &env);
    assert!(
        state.contains("released exists archived"),
        "imported files are released: {state}"
    );
    // A second import changes nothing.
    let (ok, out, err) = weft_env(&["repo", "import", &dir], &env, LIMIT);
    assert!(ok, "{out}{err}");
    assert!(out.contains(&format!("{objects} unchanged")), "{out}");

    // Two mounts read the big file at once, from the start and from the middle.
    let b = FuseMount::start(&tc, "");
    let restores = tc.mdt_counter(0, "hsm_restores_started").await.unwrap();
    let (pa, pb) = (a.path("data/big.bin"), b.path("data/big.bin"));
    let from_start = std::thread::spawn(move || read_from(&pa, 0));
    let from_middle = std::thread::spawn(move || read_from(&pb, 37 << 20));
    let want = pattern(0, BIG, 7);
    assert!(
        from_start.join().unwrap() == want,
        "mount A read other bytes"
    );
    assert!(
        from_middle.join().unwrap() == want,
        "mount B read other bytes"
    );
    assert_eq!(
        tc.mdt_counter(0, "hsm_restores_started").await.unwrap() - restores,
        1,
        "one restore served both readers"
    );
    let state = hsm_state(&a.path("data/big.bin").display().to_string(), &env);
    assert!(!state.contains("released"), "loaded: {state}");
    // Small files, through the other mount.
    for i in (0..SMALL_OBJECTS).step_by(97) {
        let p = b.path(&format!("data/small/d{:02}/f{i:05}", i % 50));
        assert_eq!(fs::read(&p).unwrap(), small_body(i), "{}", p.display());
    }

    // Export: a new file and a changed imported one.
    fs::create_dir(a.path("data/out")).unwrap();
    let new = pattern(0, (9 << 20) + 17, 11);
    fs::write(a.path("data/out/new.bin"), &new).unwrap();
    let changed_path = a.path("data/small/d03/f00003");
    let mut changed = small_body(3);
    changed.extend_from_slice(b" and more");
    fs::write(&changed_path, &changed).unwrap();
    let state = hsm_state(&changed_path.display().to_string(), &env);
    assert!(
        state.contains("dirty"),
        "a changed archived file is dirty: {state}"
    );
    let (ok, out, err) = weft_env(&["repo", "export", &dir], &env, LIMIT);
    assert!(ok, "repo export: {out}{err}");
    target.assert_no_secret(&[&out, &err]);
    assert!(out.contains("2 exported"), "{out}");
    let got = store
        .get(&StorePath::from(format!("{PREFIX}/out/new.bin")))
        .await
        .unwrap();
    let attrs = got.attributes.clone();
    assert!(got.bytes().await.unwrap() == new, "the new object's bytes");
    assert_eq!(
        attrs
            .get(&Attribute::Metadata(target.permissions_key()))
            .map(|v| v.as_ref().to_string()),
        Some("0100644".to_string()),
        "FSx's metadata keys go with it"
    );
    let got = store
        .get(&StorePath::from(small_key(3)))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(&got[..], &changed[..]);
    let new_path = a.path("data/out/new.bin").display().to_string();
    let state = hsm_state(&new_path, &env);
    assert!(
        state.contains("exists archived") && !state.contains("dirty"),
        "{state}"
    );

    // Release, then read through the other mount: the same bytes come back.
    let (ok, out, err) = weft_env(&["hsm_release", &new_path], &env, LIMIT);
    assert!(ok, "hsm_release: {out}{err}");
    assert!(hsm_state(&new_path, &env).contains("released"));
    assert_eq!(fs::metadata(&new_path).unwrap().blocks(), 0);
    assert!(fs::read(b.path("data/out/new.bin")).unwrap() == new);
    assert!(!hsm_state(&new_path, &env).contains("released"));

    // Nothing printed or logged the secret.
    target.assert_no_secret(&[&a.log(), &b.log(), &tc.mds.log(), &tc.mgs.log()]);
    drop((a, b, tc));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_s3s_fs_bucket_imports_loads_exports_and_restores() {
    let server = S3Server::start_s3s_fs().unwrap();
    repository_round_trip(Target::s3(&server)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_moto_bucket_imports_loads_exports_and_restores() {
    let server = S3Server::start_moto().unwrap();
    repository_round_trip(Target::s3(&server)).await;
}

/// `az://`: Azure's metadata names are C# identifiers, so FSx's keys are spelled with `_`
/// (`file_permissions`); everything else is the S3 round trip.
#[tokio::test(flavor = "multi_thread")]
async fn an_azurite_container_imports_loads_exports_and_restores() {
    let server = AzureServer::start().unwrap();
    repository_round_trip(Target::azure(&server)).await;
}

/// A store that dies while a released file is read: EIO within a bounded time, nothing
/// wrong served; after it is back, the read succeeds.
#[tokio::test(flavor = "multi_thread")]
async fn a_store_that_dies_mid_load_gives_eio_and_a_later_read_succeeds() {
    let mut server = S3Server::start_s3s_fs().unwrap();
    server.create_bucket(BUCKET).unwrap();
    let store = bucket(&server);
    let data = Bytes::from(pattern(0, BIG, 5));
    store
        .put(
            &StorePath::from(format!("{PREFIX}/big.bin")),
            data.clone().into(),
        )
        .await
        .unwrap();
    let env = server.env();
    let (tc, a, dir) = linked(&server).await;
    let (ok, out, err) = weft_env(&["repo", "import", &dir], &env, LIMIT);
    assert!(ok, "{out}{err}");

    server.kill().unwrap();
    let t = Instant::now();
    let r = fs::read(a.path("data/big.bin"));
    assert_eq!(
        r.as_ref().err().and_then(|e| e.raw_os_error()),
        Some(libc::EIO),
        "a read with the store gone fails with EIO"
    );
    assert!(
        t.elapsed() < Duration::from_secs(120),
        "bounded: {:?}",
        t.elapsed()
    );
    assert!(hsm_state(&a.path("data/big.bin").display().to_string(), &env).contains("released"));

    server.restart().unwrap();
    weft_testkit::wait_until_async("the store answers again", || async {
        store
            .head(&StorePath::from(format!("{PREFIX}/big.bin")))
            .await
            .is_ok()
    })
    .await;
    assert!(fs::read(a.path("data/big.bin")).unwrap() == data);
    drop((a, tc));
}
