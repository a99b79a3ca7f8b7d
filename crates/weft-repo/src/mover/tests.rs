//! Unit tests of the mover: chunks restored from a store on disk into in-memory OST objects,
//! and the pure functions it splits and checks with.

use super::copy::spans_on;
use super::fetch::{etag_core, quoted};
use super::handoff::by_server;
use super::*;
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutPayload};
use weft_client::io::fake::MemObjects;
use weft_proto::Fid;
use weft_proto::hsm::{ArchiveRef, RepoPolicy};
use weft_proto::layout::{EOF, Layout, LayoutComponent};
use weft_proto::time::Timestamp;

const FID: Fid = Fid {
    seq: 0x200000400,
    oid: 7,
    ver: 0,
};

fn layout(stripe: u64, osts: u32) -> Layout {
    Layout {
        generation: 1,
        components: vec![LayoutComponent {
            id: 1,
            start: 0,
            end: EOF,
            stripe_size: stripe,
            stripe_count: osts as i32,
            pool: None,
            osts: (0..osts).collect(),
            object_fid: None,
            compress: Default::default(),
        }],
    }
}

fn repo(dir: &std::path::Path) -> Repo {
    Repo {
        id: 1,
        spec: RepoSpec {
            path: "/data".into(),
            url: format!("file://{}", dir.display()),
            endpoint: None,
            region: None,
            path_style: false,
            import_policy: RepoPolicy::default(),
            export_policy: RepoPolicy::default(),
            import_metadata: false,
            events: None,
            chunk_size: 1 << 30,
        },
        dir: Fid::ROOT,
        created: Timestamp::default(),
        tiering: None,
    }
}

fn config() -> MoverConfig {
    MoverConfig {
        sub_range: 10_000,
        in_flight: 3,
        attempts: 2,
        backoff: Duration::from_millis(1),
        ost_retry: Duration::from_millis(10),
        role: MoverRole::Mds,
    }
}

/// The bytes the file holds, read back from the objects through the layout.
fn file_bytes(mem: &MemObjects, layout: &Layout, len: u64) -> Vec<u8> {
    let pieces = weft_client::layout::map_range(layout, FID, 0, len).unwrap();
    let mut out = Vec::new();
    for p in pieces {
        let obj = mem.object(p.ost, p.object).unwrap_or_default();
        let (s, e) = (p.object_offset as usize, (p.object_offset + p.len) as usize);
        let mut part = obj
            .get(s.min(obj.len())..e.min(obj.len()))
            .unwrap_or(&[])
            .to_vec();
        part.resize(p.len as usize, 0);
        out.extend(part);
    }
    out
}

async fn setup(data: &[u8]) -> (tempfile::TempDir, MemObjects, Mover, ArchiveRef) {
    let dir = tempfile::tempdir().unwrap();
    let r = repo(dir.path());
    let store = RepoStore::open(&r.spec).unwrap();
    let key = Path::from("obj");
    store
        .store()
        .put(&key, PutPayload::from(data.to_vec()))
        .await
        .unwrap();
    let meta = store.store().head(&key).await.unwrap();
    let archive = ArchiveRef {
        key: "obj".into(),
        etag: meta.e_tag.clone(),
        size: data.len() as u64,
        modified: Timestamp::default(),
    };
    let mem = MemObjects::new();
    let mover = Mover::for_tests(vec![r], Arc::new(mem.clone()), config());
    (dir, mem, mover, archive)
}

fn chunk(layout: &Layout, archive: &ArchiveRef, start: u64, end: u64) -> RestoreChunk {
    RestoreChunk {
        fid: FID,
        layout: layout.clone(),
        repo: 1,
        archive: archive.clone(),
        start,
        end,
    }
}

#[tokio::test]
async fn chunks_land_where_the_layout_puts_them() {
    let data: Vec<u8> = (0..123_457u32).map(|i| (i * 31 % 251) as u8).collect();
    let (_dir, mem, mover, archive) = setup(&data).await;
    let l = layout(16 << 10, 3);
    let n = data.len() as u64;
    mover
        .restore_chunk(chunk(&l, &archive, 40_000, 90_001))
        .await
        .unwrap();
    mover
        .restore_chunk(chunk(&l, &archive, 0, 40_000))
        .await
        .unwrap();
    mover
        .restore_chunk(chunk(&l, &archive, 90_001, n))
        .await
        .unwrap();
    assert_eq!(file_bytes(&mem, &l, n), data);
    let s = mover.stats();
    assert_eq!((s.chunks, s.chunk_errors), (3, 0));
    assert_eq!((s.bytes_fetched, s.bytes_written), (n, n));
    assert!(
        !mem.calls_of(weft_client::io::Op::Sync).is_empty(),
        "objects synced"
    );
}

#[tokio::test]
async fn changed_missing_and_unknown_are_refused() {
    let data = vec![7u8; 50_000];
    let (dir, mem, mover, archive) = setup(&data).await;
    let l = layout(16 << 10, 2);
    let mut other = archive.clone();
    other.etag = Some("\"not-the-tag\"".into());
    let e = mover
        .restore_chunk(chunk(&l, &other, 0, 50_000))
        .await
        .unwrap_err();
    assert_eq!(e.errno, Errno::Stale, "{e:?}");
    let mut smaller = archive.clone();
    smaller.size = 60_000;
    smaller.etag = None;
    let e = mover
        .restore_chunk(chunk(&l, &smaller, 0, 10))
        .await
        .unwrap_err();
    assert_eq!(e.errno, Errno::Stale, "{e:?}");
    let mut gone = archive.clone();
    gone.key = "nothing-here".into();
    gone.etag = None;
    let e = mover
        .restore_chunk(chunk(&l, &gone, 0, 10))
        .await
        .unwrap_err();
    assert_eq!(e.errno, Errno::NoEnt, "{e:?}");
    let mut c = chunk(&l, &archive, 0, 10);
    c.repo = 9;
    let e = mover.restore_chunk(c).await.unwrap_err();
    assert_eq!(e.errno, Errno::NoEnt, "{e:?}");
    let e = mover
        .restore_chunk(chunk(&l, &archive, 10, 50_001))
        .await
        .unwrap_err();
    assert_eq!(e.errno, Errno::Inval, "{e:?}");
    assert!(
        mem.calls_of(weft_client::io::Op::Write).is_empty(),
        "nothing written"
    );
    drop(dir);
}

#[test]
fn a_chunk_splits_by_the_servers_of_its_osts() {
    // OSTs 0 and 1 on server a, 2 on b, 3 unknown.
    let address = |ost: u32| match ost {
        0 | 1 => Some("a"),
        2 => Some("b"),
        _ => None,
    };
    let l = layout(1 << 20, 4);
    let pieces =
        |start: u64, end: u64| weft_client::layout::map_range(&l, FID, start, end - start).unwrap();
    // Within stripe 1 (OST 1); across stripes 0 and 1 (both on a).
    assert_eq!(
        by_server(&pieces(1 << 20, 2 << 20), address),
        [(Some("a"), vec![1])]
    );
    assert_eq!(
        by_server(&pieces(100, (2 << 20) - 1), address),
        [(Some("a"), vec![0, 1])]
    );
    // Two rounds of the stripes: a, b and the unknown OST, each once.
    assert_eq!(
        by_server(&pieces(0, 8 << 20), address),
        [
            (Some("a"), vec![0, 1]),
            (Some("b"), vec![2]),
            (None, vec![3])
        ]
    );
    assert_eq!(by_server(&[], address), []);
    // The file ranges of a server's OSTs, adjacent stripes joined.
    let p = pieces(100, (8 << 20) - 5);
    assert_eq!(spans_on(&p, &[0, 1]), [(100, 2 << 20), (4 << 20, 6 << 20)]);
    assert_eq!(
        spans_on(&p, &[3]),
        [(3 << 20, 4 << 20), (7 << 20, (8 << 20) - 5)]
    );
    assert_eq!(spans_on(&p, &[0, 1, 2, 3]), [(100, (8 << 20) - 5)]);
    assert_eq!(spans_on(&p, &[9]), []);
}

#[tokio::test]
async fn parts_on_some_osts_fill_only_their_stripes() {
    let data: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let (_dir, mem, mover, archive) = setup(&data).await;
    let l = layout(16 << 10, 3);
    let n = data.len() as u64;
    mover
        .restore_part(chunk(&l, &archive, 0, n), &[1])
        .await
        .unwrap();
    let s = mover.stats();
    let on_1: u64 = weft_client::layout::map_range(&l, FID, 0, n)
        .unwrap()
        .iter()
        .filter(|p| p.ost == 1)
        .map(|p| p.len)
        .sum();
    assert_eq!((s.bytes_fetched, s.bytes_written), (on_1, on_1));
    assert!(
        mem.calls_of(weft_client::io::Op::Write)
            .iter()
            .all(|c| c.ost == 1),
        "only OST 1 written"
    );
    mover
        .restore_part(chunk(&l, &archive, 0, n), &[0, 2])
        .await
        .unwrap();
    assert_eq!(file_bytes(&mem, &l, n), data);
    assert_eq!(mover.stats().bytes_fetched, n);
    // A chunk too large for a part is refused before anything is listed.
    let mut big = chunk(&l, &archive, 0, n);
    big.end = MAX_PART_CHUNK + 1;
    let e = mover.restore_part(big, &[0]).await.unwrap_err();
    assert_eq!(e.errno, Errno::Inval);
}

#[test]
fn entity_tags_compare_without_quotes() {
    assert_eq!(etag_core("\"abc\""), "abc");
    assert_eq!(etag_core("W/\"abc\""), "abc");
    assert_eq!(quoted("abc"), "\"abc\"");
    assert_eq!(quoted("\"abc\""), "\"abc\"");
}
