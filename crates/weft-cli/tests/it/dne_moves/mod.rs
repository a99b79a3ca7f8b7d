//! Directories moved to another parent across MDTs (rename(2) of a directory is never
//! EXDEV on one file system), against separate `weft mgs`, `weft oss` and one `weft mds`
//! process per MDT on loopback: every placement of the source name, the destination and
//! the directory's inode over two and three MDTs; the ancestor check across MDTs under the
//! rename lock, also with moves racing each other from two MDTs; replacements, refusals and
//! permissions; crashes of the coordinating MDS at each failpoint of a move, and with the
//! rename lock taken but nothing else done. `weft migrate -m` (a directory's metadata moved
//! to another MDT) while others read and write in it, and crashes of the coordinating MDS
//! in each of its phases. `weft fsck --dry-run` checks every directory's ".." afterwards.

use crate::bin;
use crate::dne_common::{PLAIN, errno, root, user};

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;
use weft_client::Client;
use weft_proto::mdt::{DirHash, FileKind, RenameFlags, SetAttr, TimeSet, XattrMode};
use weft_proto::{Errno, Fid};
use weft_testkit::{FSNAME, TestCluster};

mod migrations;
mod move_crashes;
mod moves;

async fn cluster(mdts: u32) -> (TestCluster, Arc<Client>) {
    let tc = TestCluster::start_mdts(bin(), 1, mdts).await.unwrap();
    let c = tc.fs_client(Duration::from_secs(20)).await.unwrap();
    (tc, c)
}

/// `weft fsck --dry-run` finds nothing wrong (names, link counts, every directory's
/// parent), waiting a little for intents still being finished.
async fn assert_fsck_clean(tc: &TestCluster) {
    let spec = format!("{}:/{FSNAME}", tc.mgs_addr);
    let mut last = String::new();
    for _ in 0..20 {
        let out = Command::new(bin())
            .args(["fsck", "--dry-run", &spec])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        if out.status.code() == Some(0) {
            return;
        }
        last = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("weft fsck --dry-run found problems:\n{last}");
}

/// Moves `name` from `from` to `to` and checks: the same directory under the new name,
/// gone from the old one, the parents' link counts moved by one, its contents intact.
async fn move_and_check(c: &Client, from: Fid, to: Fid, name: &[u8], what: &str) {
    let cred = root();
    let dir = c.lookup(from, name, &cred).await.unwrap();
    let (from_links, to_links) = (
        c.getattr(from).await.unwrap().nlink,
        c.getattr(to).await.unwrap().nlink,
    );
    let inside = c.lookup(dir.fid, b"f", &cred).await.unwrap().fid;
    c.rename(from, name, to, name, PLAIN, &cred)
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(
        c.lookup(to, name, &cred).await.unwrap().fid,
        dir.fid,
        "{what}"
    );
    assert_eq!(errno(c.lookup(from, name, &cred).await), Errno::NoEnt);
    assert_eq!(
        c.getattr(from).await.unwrap().nlink,
        from_links - 1,
        "{what}"
    );
    assert_eq!(c.getattr(to).await.unwrap().nlink, to_links + 1, "{what}");
    assert_eq!(
        c.lookup(dir.fid, b"f", &cred).await.unwrap().fid,
        inside,
        "{what}"
    );
}

/// Restarts the MDS of MDT `index` with `WEFT_FAILPOINT=point`, runs `call` (a client
/// request), checks that the MDS aborted at the failpoint, restarts it without and
/// returns the call's outcome (the client resends across the restart) once the cluster is
/// ready again.
async fn crash_at<T: Send + 'static>(
    tc: &mut TestCluster,
    index: u32,
    point: &str,
    call: impl std::future::Future<Output = T> + Send + 'static,
) -> T {
    let mds = tc.mds_process(index).unwrap();
    mds.set_env("WEFT_FAILPOINT", point);
    mds.restart().unwrap();
    tc.wait_ready().await.unwrap();
    let call = tokio::spawn(call);
    let mds = tc.mds_process(index).unwrap();
    let status = mds.wait_exit(Duration::from_secs(20)).await.unwrap();
    assert_eq!(
        status.signal(),
        Some(libc::SIGABRT),
        "the MDS of MDT{index} should abort at {point}: {status}\n{}",
        mds.log()
    );
    mds.remove_env("WEFT_FAILPOINT");
    mds.restart().unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(60), call)
        .await
        .expect("the client call never returned")
        .unwrap();
    tc.wait_ready().await.unwrap();
    outcome
}
