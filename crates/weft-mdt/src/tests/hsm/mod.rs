//! HSM (issue 23): imports from a repository, the DIRTY rule, release, flags, an export's
//! report, and restores by the coordinator with [`crate::MemoryCluster`]'s fake mover.

use super::harness::*;
use crate::MdtOptions;
use crate::hsm::{HsmConfig, IMPORT_MAX};
use std::collections::BTreeSet;
use std::time::Duration;
use weft_proto::hsm::*;
use weft_proto::mdt::{AccessMode, Attr, MdtReply, MdtRequest, OpenFlags};
use weft_proto::{Errno, Fid, Layout, LayoutTemplate, Timestamp};

const MIB: u64 = 1 << 20;
const REPO: u32 = 7;

fn ts(sec: i64) -> Timestamp {
    Timestamp { sec, nsec: 5 }
}

fn archive(key: &str, etag: &str, size: u64) -> ArchiveRef {
    ArchiveRef {
        key: key.into(),
        etag: Some(etag.into()),
        size,
        modified: ts(1000),
    }
}

fn entry(name: &str, key: &str, size: u64) -> ImportEntry {
    ImportEntry {
        name: name.into(),
        kind: ImportKind::Regular,
        mode: 0o640,
        uid: 1001,
        gid: 1002,
        atime: ts(100),
        mtime: ts(200),
        target: Vec::new(),
        archive: archive(key, "e1", size),
        layout: None,
    }
}

fn import_req(parent: Fid, entries: Vec<ImportEntry>) -> MdtRequest {
    MdtRequest::ImportEntries {
        parent,
        repo: REPO,
        entries,
        cred: root(),
    }
}

async fn import(h: &H, parent: Fid, entries: Vec<ImportEntry>) -> Vec<ImportOutcome> {
    match h.run(import_req(parent, entries)).await.unwrap() {
        MdtReply::Imported(o) => o,
        other => panic!("import replied {other:?}"),
    }
}

async fn import_one(h: &H, e: ImportEntry) -> Fid {
    match import(h, Fid::ROOT, vec![e]).await[..] {
        [ImportOutcome::Created(fid)] => fid,
        ref other => panic!("import gave {other:?}"),
    }
}

async fn layout(h: &H, fid: Fid) -> Layout {
    match h.run(MdtRequest::GetLayout { fid }).await.unwrap() {
        MdtReply::Layout(Some(l)) => l,
        other => panic!("getlayout replied {other:?}"),
    }
}

async fn attr_of(r: weft_proto::WireResult<MdtReply>) -> Attr {
    match r.unwrap() {
        MdtReply::Attr(a) => a,
        other => panic!("expected attributes, got {other:?}"),
    }
}

fn release(fid: Fid, data_version: Option<u64>) -> MdtRequest {
    MdtRequest::HsmRelease {
        fid,
        data_version,
        cred: root(),
    }
}

fn set_flags(fid: Fid, set: u32, clear: u32) -> MdtRequest {
    MdtRequest::HsmSetFlags {
        fid,
        set,
        clear,
        archive_id: None,
        cred: root(),
    }
}

fn archived(fid: Fid, data_version: u64, key: &str) -> MdtRequest {
    MdtRequest::HsmArchived {
        fid,
        repo: REPO,
        data_version,
        archive: archive(key, "x1", 10),
        cred: root(),
    }
}

fn restore(fid: Fid, start: u64, end: u64) -> MdtRequest {
    MdtRequest::HsmRestore { fid, start, end }
}

const RW: OpenFlags = OpenFlags {
    access: AccessMode::ReadWrite,
    truncate: false,
};

/// A local file with `len` bytes written and closed, archived in [`REPO`].
async fn archived_file(h: &H, name: &str, len: u64) -> Fid {
    let (fid, handle) = h.create_open(1, Fid::ROOT, name, None).await;
    h.run(MdtRequest::Close {
        handle,
        size: Some(len),
        blocks: Some(8),
        modified: true,
    })
    .await
    .unwrap();
    let dv = h.getattr(fid).await.unwrap().data_version;
    h.run(archived(fid, dv, name)).await.unwrap();
    fid
}

fn hsm_opts(unit: u64, in_flight: usize) -> MdtOptions {
    MdtOptions {
        hsm: HsmConfig {
            unit,
            in_flight,
            ..HsmConfig::default()
        },
        ..opts()
    }
}

/// An imported file of `len` bytes whose object is in the fake store.
async fn released_file(h: &H, name: &str, len: u64) -> Fid {
    h.cluster.put_object(REPO, name, vec![7; len as usize]);
    import_one(h, entry(name, name, len)).await
}

async fn wait_for(mut done: impl FnMut() -> bool) {
    for _ in 0..1000 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    panic!("condition not reached");
}

mod pcc;
mod restores;
mod states;
