//! The client file API against separate server processes: striping, write-back, read-ahead,
//! consistency between two clients, truncate, holes, EOF, dead OSTs and damaged bulk.

use crate::bin;
use crate::support::RW;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use weft_client::{Client, OpenOptions};
use weft_proto::layout::LayoutTemplate;
use weft_proto::mdt::Credentials;
use weft_proto::{Errno, Fid};
use weft_testkit::TestCluster;
use weft_testkit::pattern;

fn root() -> Credentials {
    Credentials::root()
}

/// 64 KiB stripes over every OST, so small tests cross many stripe boundaries.
fn narrow() -> Option<LayoutTemplate> {
    Some(LayoutTemplate::raid0(-1, 64 << 10, -1))
}

async fn create(c: &Arc<Client>, name: &str) -> weft_client::File {
    c.open_in(Fid::ROOT, name.as_bytes(), RW, narrow(), &root())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unaligned_io_across_stripes_holes_and_eof() {
    let tc = TestCluster::start(bin(), 3).await.unwrap();
    let c = tc.fs_client(Duration::from_secs(10)).await.unwrap();
    let f = create(&c, "u").await;
    assert_eq!(f.layout().unwrap().components[0].osts.len(), 3);
    // An unaligned write spanning several 64 KiB stripes, and one far beyond (a hole).
    let a = pattern(1000, 300_000, 1);
    f.write_at(1000, &a).await.unwrap();
    let far = 5 << 20;
    f.write_at(far, b"tail").await.unwrap();
    assert_eq!(f.read_at(1000, 300_000).await.unwrap(), a);
    assert!(
        f.read_at(0, 1000).await.unwrap().iter().all(|&b| b == 0),
        "before the first write: zeros"
    );
    let hole = f.read_at(301_000, 100_000).await.unwrap();
    assert_eq!(hole.len(), 100_000);
    assert!(hole.iter().all(|&b| b == 0), "a hole reads as zeros");
    // At and past EOF.
    assert_eq!(f.read_at(far, 100).await.unwrap(), &b"tail"[..]);
    assert!(f.read_at(far + 4, 10).await.unwrap().is_empty());
    assert!(f.read_at(far + 1000, 10).await.unwrap().is_empty());
    f.close().await.unwrap();
    let attr = c.lookup(Fid::ROOT, b"u", &root()).await.unwrap();
    assert_eq!(attr.size, far + 4);
    // Reopened: same bytes (now from the OSTs, through read-ahead for the sequential read).
    let g = c
        .open_in(Fid::ROOT, b"u", OpenOptions::read(), None, &root())
        .await
        .unwrap();
    let mut all = Vec::new();
    let mut off = 0;
    loop {
        let chunk = g.read_at(off, 128 << 10).await.unwrap();
        if chunk.is_empty() {
            break;
        }
        off += chunk.len() as u64;
        all.extend_from_slice(&chunk);
    }
    assert_eq!(all.len() as u64, far + 4);
    assert_eq!(&all[1000..301_000], &a[..]);
    g.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncate_down_and_up() {
    let tc = TestCluster::start(bin(), 2).await.unwrap();
    let c = tc.fs_client(Duration::from_secs(10)).await.unwrap();
    let f = create(&c, "t").await;
    let data = pattern(0, 1 << 20, 2);
    f.write_at(0, &data).await.unwrap();
    f.truncate(100_000).await.unwrap();
    assert_eq!(f.read_at(0, 1 << 20).await.unwrap(), &data[..100_000]);
    f.truncate(700_000).await.unwrap();
    let back = f.read_at(0, 1 << 20).await.unwrap();
    assert_eq!(back.len(), 700_000);
    assert_eq!(&back[..100_000], &data[..100_000]);
    assert!(
        back[100_000..].iter().all(|&b| b == 0),
        "truncating up adds zeros, never old data"
    );
    f.close().await.unwrap();
    assert_eq!(
        c.lookup(Fid::ROOT, b"t", &root()).await.unwrap().size,
        700_000
    );
    // O_TRUNC at open empties the objects too.
    let punches = || {
        (0..2)
            .flat_map(|i| c.cluster().ost(i).unwrap().stats())
            .filter(|s| s.name == "punch")
            .map(|s| s.count)
            .sum::<u64>()
    };
    let before = punches();
    let g = c
        .open_in(Fid::ROOT, b"t", OpenOptions::create(0o644), None, &root())
        .await
        .unwrap();
    assert!(!g.created(), "an existing file was opened");
    assert!(
        punches() > before,
        "O_TRUNC of a file with data punched nothing"
    );
    g.write_at(10, b"x").await.unwrap();
    g.close().await.unwrap();
    let bytes = c.read_file("/t", &root()).await.unwrap();
    assert_eq!(&bytes[..], b"\0\0\0\0\0\0\0\0\0\0x");
    // A file this open creates has no objects: O_TRUNC sends no punch.
    let before = punches();
    let n = c
        .open_in(Fid::ROOT, b"new", OpenOptions::create(0o644), None, &root())
        .await
        .unwrap();
    assert!(n.created());
    assert_eq!(punches(), before);
    n.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clients_write_disjoint_ranges_and_see_each_other_after_close() {
    let tc = TestCluster::start(bin(), 4).await.unwrap();
    let a = tc.fs_client(Duration::from_secs(10)).await.unwrap();
    let b = tc.fs_client(Duration::from_secs(10)).await.unwrap();
    let fa = create(&a, "shared").await;
    let fb = b
        .open_in(Fid::ROOT, b"shared", RW, None, &root())
        .await
        .unwrap();
    // An N-to-1 checkpoint: each client writes every other 200 KB block, concurrently.
    let block = 200_000usize;
    let (wa, wb) = tokio::join!(
        async {
            for i in (0..20).step_by(2) {
                fa.write_at((i * block) as u64, &pattern((i * block) as u64, block, 0))
                    .await
                    .unwrap();
            }
            fa.close().await.unwrap();
        },
        async {
            for i in (1..20).step_by(2) {
                fb.write_at((i * block) as u64, &pattern((i * block) as u64, block, 0))
                    .await
                    .unwrap();
            }
            fb.close().await.unwrap();
        }
    );
    let _ = (wa, wb);
    let expect = pattern(0, 20 * block, 0);
    for client in [&a, &b] {
        let got = client.read_file("/shared", &root()).await.unwrap();
        assert_eq!(got.len(), expect.len());
        assert!(got == expect, "exact bytes from both writers");
    }
    // Close-to-open: B caches the file, A rewrites part of it, B reopens and sees it.
    let rb = b
        .open_in(Fid::ROOT, b"shared", OpenOptions::read(), None, &root())
        .await
        .unwrap();
    let _ = rb.read_at(0, 1 << 20).await.unwrap();
    let _ = rb.read_at(1 << 20, 1 << 20).await.unwrap();
    rb.close().await.unwrap();
    let wa = a
        .open_in(Fid::ROOT, b"shared", RW, None, &root())
        .await
        .unwrap();
    wa.write_at(10, b"CHANGED").await.unwrap();
    wa.close().await.unwrap();
    let got = b.read_file("/shared", &root()).await.unwrap();
    assert_eq!(&got[10..17], b"CHANGED");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stat_during_a_write_shows_the_bytes_written_so_far() {
    let tc = TestCluster::start(bin(), 2).await.unwrap();
    let writer = tc.fs_client(Duration::from_secs(10)).await.unwrap();
    let watcher = tc.fs_client(Duration::from_secs(10)).await.unwrap();
    let f = create(&writer, "ckpt").await;
    f.write_at(0, &pattern(0, 3_000_000, 3)).await.unwrap();
    f.fsync().await.unwrap();
    f.write_at(3_000_000, &pattern(3_000_000, 500_000, 3))
        .await
        .unwrap();
    // Not yet closed: the MDT's size may lag, the glimpse asks the OSTs.
    f.fsync().await.unwrap();
    let seen = watcher.lookup(Fid::ROOT, b"ckpt", &root()).await.unwrap();
    assert_eq!(seen.size, 3_500_000);
    f.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_ost_is_eio_at_the_right_call_and_is_used_again_after_restart() {
    let mut tc = TestCluster::start(bin(), 2).await.unwrap();
    let c = tc.fs_client(Duration::from_secs(2)).await.unwrap();
    let f = create(&c, "d").await;
    f.write_at(0, &pattern(0, 1 << 20, 4)).await.unwrap();
    f.fsync().await.unwrap();
    tc.oss.kill().unwrap();
    // A read needs the OSTs now: it fails.
    let g = c
        .open_in(Fid::ROOT, b"d", OpenOptions::read(), None, &root())
        .await
        .unwrap();
    assert_eq!(g.read_at(0, 4096).await.unwrap_err().errno(), Errno::Io);
    // A buffered write succeeds; its failure shows at fsync.
    f.write_at(0, b"lost?").await.unwrap();
    assert_eq!(f.fsync().await.unwrap_err().errno(), Errno::Io);
    tc.oss.restart().unwrap();
    tc.wait_ready().await.unwrap();
    f.write_at(0, b"again").await.unwrap();
    f.fsync().await.unwrap();
    assert_eq!(&g.read_at(0, 5).await.unwrap()[..], b"again");
    f.close().await.unwrap();
    g.close().await.unwrap();
}

/// A TCP transport that damages one byte of what the server sends, once, after a given
/// number of bytes: inside the bulk of a large read reply.
struct Corrupting {
    after: u64,
    seen: Arc<AtomicU64>,
    fired: Arc<AtomicU64>,
}

struct CorruptRead {
    inner: weft_rpc::transport::BoxRead,
    after: u64,
    seen: Arc<AtomicU64>,
    fired: Arc<AtomicU64>,
}

impl tokio::io::AsyncRead for CorruptRead {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        let got = (buf.filled().len() - before) as u64;
        let start = self.seen.fetch_add(got, Ordering::SeqCst);
        if self.fired.load(Ordering::SeqCst) == 0 && start <= self.after && self.after < start + got
        {
            self.fired.store(1, Ordering::SeqCst);
            let i = before + (self.after - start) as usize;
            buf.filled_mut()[i] ^= 0x5a;
        }
        r
    }
}

impl weft_rpc::Transport for Corrupting {
    fn connect<'a>(
        &'a self,
        addr: &'a str,
    ) -> weft_rpc::service::BoxFuture<
        'a,
        std::io::Result<(
            weft_rpc::transport::BoxRead,
            weft_rpc::transport::BoxWrite,
            std::net::SocketAddr,
        )>,
    > {
        Box::pin(async move {
            let (r, w, peer) = weft_rpc::TcpTransport.connect(addr).await?;
            let r = CorruptRead {
                inner: r,
                after: self.after,
                seen: self.seen.clone(),
                fired: self.fired.clone(),
            };
            Ok((Box::new(r) as weft_rpc::transport::BoxRead, w, peer))
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_bulk_payload_is_detected_and_read_again() {
    let tc = TestCluster::start(bin(), 1).await.unwrap();
    let writer = tc.fs_client(Duration::from_secs(10)).await.unwrap();
    let data = pattern(0, 3 << 20, 5);
    writer.write_file("/crc", &data, &root()).await.unwrap();
    let fired = Arc::new(AtomicU64::new(0));
    let seen = Arc::new(AtomicU64::new(0));
    // Every connection of this client counts into `seen`; 1 MiB in is inside the first
    // big read reply's bulk.
    let reader = tc
        .fs_client_with(Arc::new(Corrupting {
            after: 1 << 20,
            seen: seen.clone(),
            fired: fired.clone(),
        }))
        .await
        .unwrap();
    let got = reader.read_file("/crc", &root()).await.unwrap();
    assert_eq!(
        fired.load(Ordering::SeqCst),
        1,
        "a byte was damaged in flight"
    );
    assert!(got == data, "the damaged payload was never returned");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_memory_stays_within_its_knobs_and_knobs_change_at_run_time() {
    let tc = TestCluster::start(bin(), 2).await.unwrap();
    let c = tc.fs_client(Duration::from_secs(10)).await.unwrap();
    c.params().set("llite.*.max_cached_mb", "4").unwrap();
    c.params().set("osc.*.max_dirty_mb", "8").unwrap();
    c.params().set("osc.*.max_pages_per_rpc", "64").unwrap();
    c.params().set("osc.*.max_rpcs_in_flight", "2").unwrap();
    let data = pattern(0, 12 << 20, 6);
    // More than the dirty budget: writers wait for flushes instead of buffering it all.
    c.write_file("/big", &data[..6 << 20], &root())
        .await
        .unwrap();
    let f = c
        .open_in(Fid::ROOT, b"big", RW, None, &root())
        .await
        .unwrap();
    // One call larger than the whole dirty budget: buffered a part at a time.
    f.write_at(6 << 20, &data[6 << 20..]).await.unwrap();
    f.close().await.unwrap();
    let g = c
        .open_in(Fid::ROOT, b"big", OpenOptions::read(), None, &root())
        .await
        .unwrap();
    let mut off = 0u64;
    while off < data.len() as u64 {
        let chunk = g.read_at(off, 256 << 10).await.unwrap();
        assert_eq!(&chunk[..], &data[off as usize..off as usize + chunk.len()]);
        off += chunk.len() as u64;
        assert!(
            c.cached_bytes() <= 4 << 20,
            "cache {} over max_cached_mb",
            c.cached_bytes()
        );
    }
    g.close().await.unwrap();
    assert!(c.params().set("osc.*.max_rpcs_in_flight", "0").is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weft_bench_runs_both_modes_and_reports_json() {
    let tc = TestCluster::start(bin(), 2).await.unwrap();
    let spec = format!("{}:/{}", tc.mgs_addr, weft_testkit::FSNAME);
    for extra in [&[][..], &["--shared", "--shared-dir"][..]] {
        let mut args = vec![
            "bench",
            spec.as_str(),
            "--threads",
            "2",
            "--block",
            "4M",
            "--transfer",
            "1M",
            "--files",
            "20",
            "--json",
        ];
        args.extend_from_slice(extra);
        let out = std::process::Command::new(bin())
            .args(&args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(v["ior"]["write_mb_s"].as_f64().unwrap() > 0.0);
        assert!(v["ior"]["read_mb_s"].as_f64().unwrap() > 0.0);
        assert!(v["mdtest"]["create_per_s"].as_f64().unwrap() > 0.0);
        assert_eq!(
            v["ior"]["shared_file"],
            serde_json::json!(!extra.is_empty())
        );
    }
    // The benchmark cleans up after itself.
    let c = tc.client().await.unwrap();
    let left = c
        .mdt(0)
        .unwrap()
        .readdir_all(Fid::ROOT, &root())
        .await
        .unwrap();
    assert!(
        left.iter().all(|e| !e.name.starts_with(b"bench-")),
        "{left:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strided_readers_are_read_ahead_and_random_readers_are_not() {
    let mut tc = TestCluster::start(bin(), 2).await.unwrap();
    let c = tc.fs_client(Duration::from_secs(2)).await.unwrap();
    let data = pattern(0, 16 << 20, 7);
    c.write_file("/records", &data, &root()).await.unwrap();

    // Random reads: nothing is kept or fetched ahead.
    let r = c
        .open_in(Fid::ROOT, b"records", OpenOptions::read(), None, &root())
        .await
        .unwrap();
    for off in [9u64 << 20, 1 << 20, 13 << 20, 5 << 20] {
        assert_eq!(
            &r.read_at(off, 4096).await.unwrap()[..],
            &data[off as usize..off as usize + 4096]
        );
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(c.cached_bytes(), 0, "random reads are not read ahead");
    r.close().await.unwrap();

    // One 256 KiB record every 2 MiB: after three, the next records are fetched ahead.
    let s = c
        .open_in(Fid::ROOT, b"records", OpenOptions::read(), None, &root())
        .await
        .unwrap();
    let rec = 256 << 10;
    for k in 0..3u64 {
        let off = k * (2 << 20);
        assert_eq!(
            &s.read_at(off, rec).await.unwrap()[..],
            &data[off as usize..(off + rec) as usize]
        );
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while c.cached_bytes() < 7 << 20 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // With the OSTs gone, the next records still come from what was read ahead.
    tc.oss.kill().unwrap();
    for k in 3..6u64 {
        let off = k * (2 << 20);
        assert_eq!(
            &s.read_at(off, rec).await.unwrap()[..],
            &data[off as usize..(off + rec) as usize],
            "record {k}"
        );
    }
    assert_eq!(
        s.read_at(15 << 20, 4096).await.unwrap_err().errno(),
        Errno::Io,
        "what was not read ahead needs the OSTs"
    );
}

/// The wait-free paths the FUSE mount uses on its request threads (`try_write_buffered`,
/// `try_read_cached`) mixed with the ordinary ones give exactly the bytes written, decline
/// what they must not do (a write that does not extend the buffer, a read-only handle, a
/// jump), and are taken for a plain sequential writer and reader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_free_paths_agree_with_the_ordinary_ones() {
    let tc = TestCluster::start(bin(), 2).await.unwrap();
    let c = tc.fs_client(Duration::from_secs(10)).await.unwrap();
    // Small dirty budget: flush thresholds are crossed many times.
    c.params().set("osc.*.max_dirty_mb", "16").unwrap();
    let data = pattern(0, 40 << 20, 3);
    let f = create(&c, "fast").await;
    // Chunks of changing sizes, like a writer that is not page-aligned.
    let (mut at, mut fast, mut k) = (0usize, 0, 0usize);
    while at < data.len() {
        let n = [1 << 20, 4096, 777_777, 128 << 10][k % 4].min(data.len() - at);
        k += 1;
        if f.try_write_buffered(at as u64, &data[at..at + n]) {
            fast += 1;
        } else {
            f.write_at(at as u64, &data[at..at + n]).await.unwrap();
        }
        at += n;
    }
    assert!(
        fast > k / 2,
        "sequential writes mostly buffered wait-free ({fast} of {k})"
    );
    // Not an append to the buffer: declined, nothing changed.
    assert!(!f.try_write_buffered(5, b"xyz"));
    f.close().await.unwrap();

    let r = c
        .open_in(Fid::ROOT, b"fast", OpenOptions::read(), None, &root())
        .await
        .unwrap();
    assert!(
        !r.try_write_buffered(data.len() as u64, b"more"),
        "read-only handle"
    );
    // 128 KiB reads as the kernel sends them for one sequential reader: in order at
    // first, then each pair overtaking itself (several are in flight at once).
    let rec = 128u64 << 10;
    let mut order: Vec<u64> = (0..data.len() as u64 / rec).collect();
    for pair in order[16..].chunks_mut(2) {
        pair.reverse();
    }
    let mut out = vec![0u8; data.len()];
    let (mut hits, mut reads) = (0, 0);
    for k in order {
        reads += 1;
        let off = k * rec;
        let got = match r.try_read_cached(off, rec) {
            Some(b) => {
                hits += 1;
                b
            }
            None => {
                let b = r.read_at(off, rec).await.unwrap();
                // Let read-ahead fill the window before the next read.
                tokio::time::sleep(Duration::from_millis(2)).await;
                b
            }
        };
        assert_eq!(got.len() as u64, rec, "short read at {off}");
        out[off as usize..(off + rec) as usize].copy_from_slice(&got);
    }
    assert!(out == data, "bytes read back differ");
    assert!(
        hits > reads / 2,
        "read-ahead pages served wait-free, out-of-order reads too ({hits} of {reads})"
    );
    // At EOF: declined.
    assert!(r.try_read_cached(data.len() as u64, 4096).is_none());
    r.close().await.unwrap();
    // A handle that has not started streaming: declined at any offset but where it stands.
    let fresh = c
        .open_in(Fid::ROOT, b"fast", OpenOptions::read(), None, &root())
        .await
        .unwrap();
    assert!(fresh.try_read_cached(8 << 20, 4096).is_none());
    fresh.close().await.unwrap();
}
