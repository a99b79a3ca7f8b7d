//! Remote directories (Lustre DNE `mkdir -i`) against separate processes on loopback: an
//! MGS, an OSS, and one MDS process per MDT (MDT0 holds the root, MDT1 the remote
//! directories). Every namespace operation across the MDT boundary; crashes of the
//! coordinating MDS at each failpoint of a remote mkdir and rmdir, and SIGKILL of the other
//! MDS, after which every operation is rolled forward exactly once and the namespace is
//! consistent (no dangling entry, no orphan directory, right link counts); `weft mkdir -i`
//! and `weft getdirstripe`.

use crate::bin;
use crate::dne_common::{PLAIN, errno, root, user};
use crate::support::weft;
use weft_testkit::eventually;

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use weft_client::{Client, ClientError, OpenOptions};
use weft_proto::mdt::{Attr, DirEntry, FileKind, RenameFlags};
use weft_proto::{Errno, Fid};
use weft_testkit::{FSNAME, TestCluster};

mod command_line;
mod coordinator_crashes;
mod intents;
mod namespace_ops;

/// A cluster of one MGS, one OSS with `osts` OSTs, and two MDS processes (MDT0, MDT1).
async fn two_mdts(osts: u32) -> TestCluster {
    TestCluster::start_mdts(bin(), osts, 2).await.unwrap()
}

async fn fs_client(tc: &TestCluster) -> Arc<Client> {
    tc.fs_client(Duration::from_secs(20)).await.unwrap()
}

/// Every entry of directory `fid` (all pages).
async fn list(c: &Client, fid: Fid, plus: bool) -> Vec<DirEntry> {
    let mut out = Vec::new();
    let mut cookie = 0;
    loop {
        let (page, eof) = c.readdir(fid, cookie, 64, plus, &root()).await.unwrap();
        if let Some(last) = page.last() {
            cookie = last.cookie;
        }
        let empty = page.is_empty();
        out.extend(page);
        if eof || empty {
            return out;
        }
    }
}

fn names(entries: &[DirEntry]) -> BTreeSet<String> {
    entries
        .iter()
        .map(|e| String::from_utf8_lossy(&e.name).into_owned())
        .collect()
}

/// What a walk of the whole namespace found, by MDT.
#[derive(Debug, Default)]
struct Census {
    dirs: BTreeMap<u32, u64>,
    /// Inodes that are not directories, by MDT (a file with several names counts once).
    files: BTreeMap<u32, BTreeSet<Fid>>,
}

/// Walks the namespace from the root and checks that it is consistent: every entry's FID
/// answers a getattr on its MDT with the entry's type (no dangling entry), every
/// directory's link count is 2 plus its subdirectories, and every other inode's link count
/// is the number of its names. Counts directories and other inodes by the MDT holding
/// them (the root counts for MDT0).
async fn walk(c: &Client) -> Census {
    let mut census = Census::default();
    *census.dirs.entry(0).or_default() += 1;
    let mut todo = vec![("/".to_string(), Fid::ROOT)];
    let mut file_names: BTreeMap<Fid, (String, u32)> = BTreeMap::new();
    while let Some((path, dir)) = todo.pop() {
        let mut subdirs = 0u32;
        for e in list(c, dir, false).await {
            let name = String::from_utf8_lossy(&e.name).into_owned();
            let child = if path == "/" {
                format!("/{name}")
            } else {
                format!("{path}/{name}")
            };
            let attr = c
                .getattr(e.fid)
                .await
                .unwrap_or_else(|err| panic!("dangling entry {child} ({}): {err}", e.fid));
            assert_eq!(attr.kind, e.kind, "{child}: entry and inode types differ");
            let mdt = c.mdt_index_of(e.fid).unwrap();
            if e.kind == FileKind::Directory {
                subdirs += 1;
                *census.dirs.entry(mdt).or_default() += 1;
                todo.push((child, e.fid));
            } else {
                census.files.entry(mdt).or_default().insert(e.fid);
                file_names.entry(e.fid).or_insert((child, 0)).1 += 1;
            }
        }
        let nlink = c.getattr(dir).await.unwrap().nlink;
        assert_eq!(
            nlink,
            2 + subdirs,
            "{path}: link count {nlink} with {subdirs} subdirectories"
        );
    }
    for (fid, (path, names)) in file_names {
        let nlink = c.getattr(fid).await.unwrap().nlink;
        assert_eq!(
            nlink, names,
            "{path}: link count {nlink} with {names} names"
        );
    }
    census
}

/// Checks the namespace (see [`walk`]) and that each MDT holds exactly the directories and
/// files reachable in it (its `dirs` and `files` counters): nothing orphaned, nothing
/// created twice.
async fn check_consistent(tc: &TestCluster, c: &Client) -> Census {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let census = walk(c).await;
        let mut mismatch = Vec::new();
        for i in tc.mdt_indices() {
            let dirs = tc.mdt_counter(i, "dirs").await.unwrap();
            let files = tc.mdt_counter(i, "files").await.unwrap();
            let want_dirs = census.dirs.get(&i).copied().unwrap_or(0);
            let want_files = census.files.get(&i).map_or(0, |f| f.len() as u64);
            if dirs != want_dirs || files != want_files {
                mismatch.push(format!(
                    "MDT{i} holds {dirs} directories and {files} files, the namespace reaches \
                     {want_dirs} and {want_files}"
                ));
            }
        }
        if mismatch.is_empty() {
            return census;
        }
        // Counters are published after each commit: give a late one a moment.
        assert!(Instant::now() < deadline, "{}", mismatch.join("; "));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
