//! What the MDT does when its store fails, on a redb backend that fails on command
//! ([`crate::failing_backend`]): the promise of `commit.rs` that a store failure aborts
//! the whole batch, answers every operation in it with EIO and reverts its handle changes.

use super::harness::{create_req, opts, root};
use crate::commit::{Origin, Outcome, Pending, WriteOp};
use crate::failing_backend::{FailSwitch, FailingBackend, IoKinds};
use crate::{Mdt, MemoryCluster};
use redb::backends::InMemoryBackend;
use std::sync::Arc;
use tokio::sync::oneshot;
use weft_proto::mdt::{AccessMode, MdtReply, MdtRequest, OpenFlags};
use weft_proto::{Errno, Fid};

fn create(name: &str, open: bool) -> MdtRequest {
    let flags = OpenFlags {
        access: AccessMode::ReadWrite,
        truncate: false,
    };
    create_req(name, open.then_some(flags))
}

fn lookup(name: &str) -> MdtRequest {
    MdtRequest::Lookup {
        parent: Fid::ROOT,
        name: name.into(),
        cred: root(),
    }
}

/// A pending operation of connection `conn` and where its outcome arrives.
fn pending(conn: u64, op: WriteOp) -> (Pending, oneshot::Receiver<Outcome>) {
    let (reply, rx) = oneshot::channel();
    let p = Pending {
        conn,
        op,
        reply: Some(reply),
    };
    (p, rx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_store_aborts_the_batch_and_reverts_its_handle_changes() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = Arc::new(MemoryCluster::new(4));
    let disk = Arc::new(InMemoryBackend::new());
    let switch = FailSwitch::new();
    let backend = FailingBackend::new(disk.clone(), switch.clone());
    let mdt = Mdt::open_with_backend(dir.path(), opts(), cluster.clone(), backend).unwrap();

    // File "a" open on connection 1, durable.
    let h1 = match mdt.execute(1, create("a", true)).await.unwrap() {
        MdtReply::Created {
            handle: Some(h), ..
        } => h,
        other => panic!("create replied {other:?}"),
    };
    mdt.execute(1, MdtRequest::Sync).await.unwrap();
    assert_eq!(mdt.handles_of(1), vec![h1]);

    // One batch opens a new file, closes "a" and must be durable; the disk refuses it.
    switch.fail_now(IoKinds::WRITE.or(IoKinds::SYNC).or(IoKinds::SET_LEN));
    let (create_b, create_rx) = pending(1, WriteOp::Req(create("b", true), Origin::default()));
    let close = MdtRequest::Close {
        handle: h1,
        size: None,
        blocks: None,
        modified: false,
    };
    let (close_a, close_rx) = pending(1, WriteOp::Req(close, Origin::default()));
    let (sync, sync_rx) = pending(0, WriteOp::Sync);
    let m = mdt.clone();
    tokio::task::spawn_blocking(move || m.committer().run_batch(vec![create_b, close_a, sync]))
        .await
        .unwrap();
    for rx in [create_rx, close_rx, sync_rx] {
        match rx.await.unwrap() {
            Outcome::Done(Err(e)) => assert_eq!(e.errno, Errno::Io),
            Outcome::Done(Ok(r)) => panic!("an operation of the failed batch succeeded: {r:?}"),
            _ => panic!("an operation of the failed batch was handed back"),
        }
    }
    assert!(switch.failures() > 0);
    // The new file's handle is gone and the closed one is open again.
    assert_eq!(mdt.handles_of(1), vec![h1]);
    assert_eq!(mdt.stats().open_handles, 1);

    // redb refuses everything after an I/O error until the store is opened again: later
    // changes fail cleanly with EIO.
    switch.heal();
    let later = mdt.execute(1, create("c", false)).await;
    assert_eq!(later.map_err(|e| e.errno).err(), Some(Errno::Io));
    mdt.shutdown().await;
    drop(mdt);

    // A restart finds what was durable before the failed batch, and nothing of it.
    let backend = FailingBackend::new(disk, FailSwitch::new());
    let mdt = Mdt::open_with_backend(dir.path(), opts(), cluster, backend).unwrap();
    assert!(mdt.execute(1, lookup("a")).await.is_ok());
    for name in ["b", "c"] {
        let r = mdt.execute(1, lookup(name)).await;
        assert_eq!(r.map_err(|e| e.errno).err(), Some(Errno::NoEnt), "{name}");
    }
    mdt.shutdown().await;
}
