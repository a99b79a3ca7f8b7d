//! [`MemObjects`]: objects kept in memory behind the [`ObjectIo`] seam, with a log of every
//! call, for fast deterministic tests of read-ahead and write-back (which RPCs went out,
//! and where each byte landed). It has no holes: every byte below an object's size is
//! data (a punched range reads as zeros but stays data).

use super::object::{ObjectIo, ObjectTargets, Op};
use crate::error::ClientError;
use bytes::Bytes;
use futures::FutureExt;
use futures::future::BoxFuture;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use weft_proto::ost::ObjectAttr;
use weft_proto::{Compression, ObjectId};

/// One call a [`MemObjects`] served: its OST, operation, object and byte range (`len` is
/// the bytes asked for by a read, sent by a write, or 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Call {
    /// The OST index called.
    pub ost: u32,
    /// The operation.
    pub op: Op,
    /// The object named, if any.
    pub object: Option<ObjectId>,
    /// The offset in the object (a punch's new size).
    pub offset: u64,
    /// Bytes asked for or sent.
    pub len: u64,
}

#[derive(Default)]
struct Object {
    data: Vec<u8>,
    version: u64,
}

impl Object {
    fn attr(&self) -> ObjectAttr {
        let size = self.data.len() as u64;
        ObjectAttr {
            exists: true,
            size,
            blocks: size.div_ceil(512),
            data_version: self.version,
        }
    }
}

#[derive(Default)]
struct Store {
    objects: HashMap<(u32, ObjectId), Object>,
    calls: Vec<Call>,
    /// Bytes of grant left to give out on every OST; `None`: unlimited.
    space: Option<u64>,
}

/// In-memory objects on any number of OSTs (every index exists). Clones share the objects.
#[derive(Clone, Default)]
pub struct MemObjects {
    store: Arc<Mutex<Store>>,
}

impl MemObjects {
    /// No objects, unlimited space.
    pub fn new() -> Self {
        Self::default()
    }

    /// Limits the grant the OSTs give out from now on to `bytes` in all (grants answer
    /// less, then 0, and the client's writes fail with ENOSPC before they are buffered).
    pub fn set_space(&self, bytes: u64) {
        self.store.lock().space = Some(bytes);
    }

    /// Makes `object` on OST `ost` hold `data` (as a file written before the test).
    pub fn put(&self, ost: u32, object: ObjectId, data: &[u8]) {
        let mut s = self.store.lock();
        let o = s.objects.entry((ost, object)).or_default();
        o.data = data.to_vec();
        o.version += 1;
    }

    /// The bytes of `object` on OST `ost`, if it exists.
    pub fn object(&self, ost: u32, object: ObjectId) -> Option<Vec<u8>> {
        self.store
            .lock()
            .objects
            .get(&(ost, object))
            .map(|o| o.data.clone())
    }

    /// Every call served so far, in order.
    pub fn calls(&self) -> Vec<Call> {
        self.store.lock().calls.clone()
    }

    /// The calls served so far with operation `op`.
    pub fn calls_of(&self, op: Op) -> Vec<Call> {
        self.store
            .lock()
            .calls
            .iter()
            .filter(|c| c.op == op)
            .copied()
            .collect()
    }

    /// Forgets the calls logged so far.
    pub fn clear_calls(&self) {
        self.store.lock().calls.clear();
    }
}

impl ObjectTargets for MemObjects {
    fn target(
        &self,
        index: u32,
        _ctx: &weft_rpc::RequestContext,
    ) -> Result<Arc<dyn ObjectIo>, ClientError> {
        Ok(Arc::new(MemOst {
            store: self.store.clone(),
            index,
        }))
    }
}

/// One OST of a [`MemObjects`].
struct MemOst {
    store: Arc<Mutex<Store>>,
    index: u32,
}

impl MemOst {
    /// Logs the call and runs `f` on the store, answering at once.
    fn serve<T: Send + 'static>(
        &self,
        op: Op,
        object: Option<ObjectId>,
        offset: u64,
        len: u64,
        f: impl FnOnce(&mut Store) -> T,
    ) -> BoxFuture<'static, Result<T, ClientError>> {
        let mut s = self.store.lock();
        s.calls.push(Call {
            ost: self.index,
            op,
            object,
            offset,
            len,
        });
        let out = f(&mut s);
        futures::future::ready(Ok(out)).boxed()
    }
}

/// What a missing object answers.
const ABSENT: ObjectAttr = ObjectAttr {
    exists: false,
    size: 0,
    blocks: 0,
    data_version: 0,
};

impl ObjectIo for MemOst {
    fn read(
        &self,
        object: ObjectId,
        offset: u64,
        len: u32,
    ) -> BoxFuture<'_, Result<(Bytes, ObjectAttr), ClientError>> {
        let key = (self.index, object);
        self.serve(Op::Read, Some(object), offset, len.into(), |s| {
            let Some(o) = s.objects.get(&key) else {
                return (Bytes::new(), ABSENT);
            };
            let a = (offset as usize).min(o.data.len());
            let b = (a + len as usize).min(o.data.len());
            (Bytes::copy_from_slice(&o.data[a..b]), o.attr())
        })
    }

    fn write(
        &self,
        object: ObjectId,
        offset: u64,
        data: Bytes,
        _sync: bool,
        _compress: Compression,
    ) -> BoxFuture<'_, Result<ObjectAttr, ClientError>> {
        let key = (self.index, object);
        self.serve(Op::Write, Some(object), offset, data.len() as u64, |s| {
            let o = s.objects.entry(key).or_default();
            let end = offset as usize + data.len();
            if o.data.len() < end {
                o.data.resize(end, 0);
            }
            o.data[offset as usize..end].copy_from_slice(&data);
            o.version += 1;
            o.attr()
        })
    }

    fn punch(
        &self,
        object: ObjectId,
        size: u64,
        _compress: Compression,
    ) -> BoxFuture<'_, Result<ObjectAttr, ClientError>> {
        let key = (self.index, object);
        self.serve(Op::Punch, Some(object), size, 0, |s| {
            let o = s.objects.entry(key).or_default();
            o.data.resize(size as usize, 0);
            o.version += 1;
            o.attr()
        })
    }

    fn punch_range(
        &self,
        object: ObjectId,
        offset: u64,
        len: u64,
    ) -> BoxFuture<'_, Result<ObjectAttr, ClientError>> {
        let key = (self.index, object);
        self.serve(Op::PunchRange, Some(object), offset, len, |s| {
            let Some(o) = s.objects.get_mut(&key) else {
                return ABSENT;
            };
            let a = (offset as usize).min(o.data.len());
            let b = (offset.saturating_add(len) as usize).min(o.data.len());
            o.data[a..b].fill(0);
            o.version += 1;
            o.attr()
        })
    }

    fn seek(
        &self,
        object: ObjectId,
        offset: u64,
        hole: bool,
    ) -> BoxFuture<'_, Result<Option<u64>, ClientError>> {
        let key = (self.index, object);
        self.serve(Op::Seek, Some(object), offset, 0, |s| {
            let size = s.objects.get(&key).map_or(0, |o| o.data.len() as u64);
            (offset < size).then_some(if hole { size } else { offset })
        })
    }

    fn getattr(&self, object: ObjectId) -> BoxFuture<'_, Result<ObjectAttr, ClientError>> {
        let key = (self.index, object);
        self.serve(Op::GetAttr, Some(object), 0, 0, |s| {
            s.objects.get(&key).map_or(ABSENT, Object::attr)
        })
    }

    fn sync(&self, object: Option<ObjectId>) -> BoxFuture<'_, Result<(), ClientError>> {
        self.serve(Op::Sync, object, 0, 0, |_| ())
    }

    fn grant(&self, want: u64) -> BoxFuture<'_, Result<u64, ClientError>> {
        self.serve(Op::Grant, None, 0, want, |s| match &mut s.space {
            None => want,
            Some(left) => {
                let got = want.min(*left);
                *left -= got;
                got
            }
        })
    }
}
