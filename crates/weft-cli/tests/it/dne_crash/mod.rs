//! Crash tests of the cross-MDT operations (issue 6) against separate processes on
//! loopback: an MGS, an OSS and one MDS process per MDT (two MDTs).
//!
//! - For each cross-MDT operation other than the remote mkdir/rmdir of `dne/` (striped
//!   mkdir and rmdir, a hard link, an unlink and renames of names whose inode is on the
//!   other MDT), the coordinating MDS aborts at each failpoint (`cross_mdt.before_remote`,
//!   `cross_mdt.before_finish`) and is restarted: the client's call, resent across the
//!   restart, answers success, the namespace is as if the operation happened once, and
//!   `weft fsck --dry-run` finds nothing. Also: the coordinator restarted while the other
//!   MDT is down (the roll-forward and the client's resend both drive the intent).
//! - A seeded random mix of concurrent namespace operations over local, remote and
//!   striped directories while MDS processes are SIGKILLed and restarted: once the
//!   operations stop and the intents are rolled forward, `weft fsck --dry-run` finds
//!   nothing and every name listed can be stat'ed (and every file read).
//! - Regression tests of what the random mix found.

use crate::bin;
use crate::dne_common::{PLAIN, errno, root};

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use weft_client::{Client, ClientError};
use weft_proto::mdt::{Attr, DirEntry, DirHash, FileKind, MdtReply, MdtRequest};
use weft_proto::{Errno, Fid};
use weft_testkit::pattern;
use weft_testkit::{FSNAME, TestCluster};

mod at_failpoints;
mod random_mix;

const BEFORE_REMOTE: &str = "cross_mdt.before_remote";
const BEFORE_FINISH: &str = "cross_mdt.before_finish";

/// A cluster of one MGS, one OSS with one OST, and two MDS processes (MDT0, MDT1).
async fn two_mdts() -> TestCluster {
    TestCluster::start_mdts(bin(), 1, 2).await.unwrap()
}

async fn fs_client(tc: &TestCluster) -> Arc<Client> {
    tc.fs_client(Duration::from_secs(20)).await.unwrap()
}

/// Every entry of directory `fid` (all pages; a striped directory's shards merged).
async fn list(c: &Client, fid: Fid) -> Result<Vec<DirEntry>, ClientError> {
    let mut out = Vec::new();
    let mut cookie = 0;
    // Bounded: a few thousand entries at most in these tests.
    for _ in 0..1000 {
        let (page, eof) = c.readdir(fid, cookie, 64, false, &root()).await?;
        if let Some(last) = page.last() {
            cookie = last.cookie;
        }
        let empty = page.is_empty();
        out.extend(page);
        if eof || empty {
            return Ok(out);
        }
    }
    panic!("listing {fid} never ended");
}

async fn names(c: &Client, fid: Fid) -> BTreeSet<String> {
    list(c, fid)
        .await
        .unwrap()
        .iter()
        .map(|e| String::from_utf8_lossy(&e.name).into_owned())
        .collect()
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|n| n.to_string()).collect()
}

/// `weft fsck --dry-run` of the cluster: its exit status and output (bounded by 60 s).
async fn fsck_dry_run(tc: &TestCluster) -> (Option<i32>, String) {
    let spec = format!("{}:/{FSNAME}", tc.mgs_addr);
    tokio::task::spawn_blocking(move || {
        let mut child = Command::new(bin())
            .args(["fsck", "--dry-run", &spec])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("weft fsck did not exit within 60 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = child.wait_with_output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    })
    .await
    .unwrap()
}

/// `weft fsck --dry-run` finds no problem.
async fn assert_fsck_clean(tc: &TestCluster, what: &str) {
    let (code, out) = fsck_dry_run(tc).await;
    assert_eq!(
        code,
        Some(0),
        "{what}: weft fsck --dry-run found problems:\n{out}"
    );
}

/// Cross-MDT operations in progress on each MDT (what `weft fsck` reports).
async fn intents(tc: &TestCluster, c: &Client) -> BTreeMap<u32, u64> {
    let mut out = BTreeMap::new();
    for i in tc.mdt_indices() {
        out.insert(i, intents_on(c, i).await);
    }
    out
}

/// Cross-MDT operations in progress on MDT `index`.
async fn intents_on(c: &Client, index: u32) -> u64 {
    let req = MdtRequest::FsckInodes {
        after: None,
        max: 1,
    };
    match c.cluster().mdt(index).unwrap().call(req).await.unwrap() {
        MdtReply::FsckInodes { intents, .. } => intents,
        other => panic!("MDT{index}: unexpected reply {other:?}"),
    }
}

/// Waits (up to 30 s) until no MDT holds an intent: every cross-MDT operation finished.
async fn wait_no_intents(tc: &TestCluster, c: &Client) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = intents(tc, c).await;
        if left.values().all(|&n| n == 0) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "cross-MDT operations still in progress after 30 s: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// (directories, files) each MDT holds, by its counters.
async fn counters(tc: &TestCluster) -> BTreeMap<u32, (u64, u64)> {
    let mut out = BTreeMap::new();
    for i in tc.mdt_indices() {
        let dirs = tc.mdt_counter(i, "dirs").await.unwrap();
        let files = tc.mdt_counter(i, "files").await.unwrap();
        out.insert(i, (dirs, files));
    }
    out
}

/// Waits (up to 10 s: counters are published after each commit) for the counters to
/// equal `want`.
async fn wait_counters(tc: &TestCluster, want: &BTreeMap<u32, (u64, u64)>, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = counters(tc).await;
        if &got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: MDTs hold (directories, files) {got:?}, expected {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
