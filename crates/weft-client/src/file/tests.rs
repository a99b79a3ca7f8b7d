//! Files over fake object I/O ([`MemObjects`], [`FailingObjects`]) and a fake MDT: the rig
//! the read-ahead and write-back tests share.

use super::{File, FileMeta};
use crate::client::{Client, OpenOptions};
use crate::error::ClientError;
use crate::io::failing::FailingObjects;
use crate::io::fake::MemObjects;
use crate::mdt::Opened;
use crate::test_attrs;
use crate::test_attrs::striped;
use futures::FutureExt;
use futures::future::BoxFuture;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use weft_proto::layout::Layout;
use weft_proto::mdt::{AccessMode, Attr, Credentials, FileKind, OpenFlags, SetAttr};
use weft_proto::{Fid, ObjectId};

mod readahead;
mod restore;
mod writeback;

/// What a size merge or close told the MDT: `(handle, size, blocks, modified)`.
type Recorded = (u64, Option<u64>, Option<u64>, bool);

/// An MDT that answers every call of a file and remembers the size merges and closes.
#[derive(Default)]
struct FakeMdt {
    layout: Mutex<Option<Layout>>,
    /// Each size merge.
    merges: Mutex<Vec<Recorded>>,
    /// Each close.
    closes: Mutex<Vec<Recorded>>,
    /// A released file's archive: restores copy from it into the objects.
    archive: Mutex<Option<FakeArchive>>,
}

/// The archived bytes of a released file and where a restore puts them.
struct FakeArchive {
    data: Vec<u8>,
    layout: Layout,
    objects: MemObjects,
    /// Each restore asked: `[start, end)`.
    asked: Vec<(u64, u64)>,
    /// Bytes restored so far (a range set: start -> end).
    restored: BTreeMap<u64, u64>,
}

impl FakeArchive {
    /// Copies `[start, end)` of the archive into the objects; whether all of it is there.
    fn restore(&mut self, fid: Fid, start: u64, end: u64) -> bool {
        self.asked.push((start, end));
        let len = self.data.len() as u64;
        let end = end.min(len);
        if start < end {
            for p in crate::layout::map_range(&self.layout, fid, start, end - start).unwrap() {
                let mut o = self.objects.object(p.ost, p.object).unwrap_or_default();
                let (at, stop) = (p.object_offset as usize, (p.object_offset + p.len) as usize);
                if o.len() < stop {
                    o.resize(stop, 0);
                }
                let from = p.file_offset as usize;
                o[at..stop].copy_from_slice(&self.data[from..from + p.len as usize]);
                self.objects.put(p.ost, p.object, &o);
            }
            self.restored.insert(start, end);
        }
        // Whole when the restored ranges cover [0, len).
        let mut covered = 0;
        for (&a, &b) in &self.restored {
            if a <= covered {
                covered = covered.max(b);
            }
        }
        covered >= len
    }
}

/// Notes a size merge or close in `list`; answers that it went well.
fn record(
    list: &Mutex<Vec<Recorded>>,
    call: Recorded,
) -> BoxFuture<'static, Result<(), ClientError>> {
    list.lock().push(call);
    futures::future::ready(Ok(())).boxed()
}

impl FileMeta for FakeMdt {
    fn open<'a>(
        &'a self,
        fid: Fid,
        _flags: OpenFlags,
        _cred: &'a Credentials,
    ) -> BoxFuture<'a, Result<Opened, ClientError>> {
        let opened = Opened {
            handle: 2,
            attr: test_attrs::attr(fid, FileKind::Regular),
            layout: self.layout.lock().clone(),
        };
        futures::future::ready(Ok(opened)).boxed()
    }

    fn get_layout(&self, _fid: Fid) -> BoxFuture<'_, Result<Option<Layout>, ClientError>> {
        futures::future::ready(Ok(self.layout.lock().clone())).boxed()
    }

    fn instantiate(
        &self,
        _handle: u64,
        _start: u64,
        _end: u64,
    ) -> BoxFuture<'_, Result<Option<Layout>, ClientError>> {
        self.get_layout(Fid::ROOT)
    }

    fn size_merge(
        &self,
        handle: u64,
        size: Option<u64>,
        blocks: Option<u64>,
        modified: bool,
    ) -> BoxFuture<'_, Result<(), ClientError>> {
        record(&self.merges, (handle, size, blocks, modified))
    }

    fn setattr<'a>(
        &'a self,
        fid: Fid,
        set: SetAttr,
        _cred: &'a Credentials,
    ) -> BoxFuture<'a, Result<Attr, ClientError>> {
        let mut attr = test_attrs::attr(fid, FileKind::Regular);
        attr.size = set.size.unwrap_or(0);
        futures::future::ready(Ok(attr)).boxed()
    }

    fn close(
        &self,
        handle: u64,
        size: Option<u64>,
        blocks: Option<u64>,
        modified: bool,
    ) -> BoxFuture<'_, Result<(), ClientError>> {
        record(&self.closes, (handle, size, blocks, modified))
    }

    fn hsm_restore(
        &self,
        fid: Fid,
        start: u64,
        end: u64,
    ) -> BoxFuture<'_, Result<bool, ClientError>> {
        let done = match self.archive.lock().as_mut() {
            Some(a) => a.restore(fid, start, end),
            None => true,
        };
        futures::future::ready(Ok(done)).boxed()
    }
}

/// A client over in-memory objects (failing as told), a fake MDT and one file's layout.
struct Rig {
    objects: MemObjects,
    failing: FailingObjects,
    client: Arc<Client>,
    mdt: Arc<FakeMdt>,
    layout: Layout,
    fid: Fid,
}

impl Rig {
    /// Small knobs so a test moves a few MiB: 64 KiB RPCs, 8 in flight per OST (a flush
    /// starts at 512 KiB per stripe), a 4 MiB read-ahead window and 16 MiB of dirty data;
    /// data RPCs resent for half a second.
    fn new(layout: Layout) -> Self {
        let objects = MemObjects::new();
        let failing = FailingObjects::new(Arc::new(objects.clone()));
        let client = Client::offline(Arc::new(failing.clone()), Duration::from_millis(500));
        for (name, value) in [
            ("osc.*.max_pages_per_rpc", "16"),
            ("osc.*.max_rpcs_in_flight", "8"),
            ("osc.*.max_dirty_mb", "16"),
            ("llite.*.max_read_ahead_per_file_mb", "4"),
        ] {
            client.params().set(name, value).unwrap();
        }
        let mdt = Arc::new(FakeMdt::default());
        *mdt.layout.lock() = Some(layout.clone());
        Self {
            objects,
            failing,
            client,
            mdt,
            layout,
            fid: test_attrs::fid(7),
        }
    }

    /// Opens the file (of `size` bytes) for `access`.
    fn open(&self, access: AccessMode, size: u64) -> File {
        let mut attr = test_attrs::attr(self.fid, FileKind::Regular);
        attr.size = size;
        self.open_with_attr(access, attr)
    }

    /// Opens the file for `access` as the MDT described it in `attr`.
    fn open_with_attr(&self, access: AccessMode, attr: Attr) -> File {
        let opts = OpenOptions {
            access,
            create: None,
            exclusive: false,
            truncate: false,
            append: false,
        };
        let mdt: Arc<dyn FileMeta> = self.mdt.clone();
        File::new(
            self.client.core.clone(),
            self.client.context().clone(),
            mdt,
            1,
            &attr,
            Some(self.layout.clone()),
            opts,
        )
    }

    /// Where the bytes of `[0, len)` of the file live, as the layout maps them.
    fn pieces(&self, len: u64) -> Vec<crate::layout::Piece> {
        crate::layout::map_range(&self.layout, self.fid, 0, len).unwrap()
    }

    /// Stores `data` as the file's bytes, in the objects the layout puts them in.
    fn store(&self, data: &[u8]) {
        let mut objects: BTreeMap<(u32, ObjectId), Vec<u8>> = BTreeMap::new();
        for p in self.pieces(data.len() as u64) {
            let o = objects.entry((p.ost, p.object)).or_default();
            let (at, end) = (p.object_offset as usize, (p.object_offset + p.len) as usize);
            if o.len() < end {
                o.resize(end, 0);
            }
            let from = p.file_offset as usize;
            o[at..end].copy_from_slice(&data[from..from + p.len as usize]);
        }
        for ((ost, object), bytes) in objects {
            self.objects.put(ost, object, &bytes);
        }
    }

    /// The file's bytes `[0, len)` as the objects hold them (bytes past an object's end
    /// read as `None`).
    fn stored(&self, len: u64) -> Vec<Option<u8>> {
        let mut objects: BTreeMap<(u32, ObjectId), Vec<u8>> = BTreeMap::new();
        let mut out = Vec::with_capacity(len as usize);
        for p in self.pieces(len) {
            let o = objects
                .entry((p.ost, p.object))
                .or_insert_with(|| self.objects.object(p.ost, p.object).unwrap_or_default());
            out.extend(
                (p.object_offset..p.object_offset + p.len).map(|i| o.get(i as usize).copied()),
            );
        }
        out
    }

    /// Lets background work (read-ahead fetches, flushes) run until no page of the file
    /// is being fetched.
    async fn quiesce(&self, size: u64) {
        let pages = size.div_ceil(crate::cache::CACHE_PAGE);
        for _ in 0..10_000 {
            tokio::task::yield_now().await;
            if !(0..pages).any(|i| self.client.cache().is_fetching(self.fid, i)) {
                // A few more turns for tasks that finished their fetch and are storing.
                for _ in 0..50 {
                    tokio::task::yield_now().await;
                }
                return;
            }
        }
        panic!("background fetches did not finish");
    }
}

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;

/// `len` bytes that differ from one offset to the next (a shifted byte is caught).
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 % 251 + 1) as u8).collect()
}
