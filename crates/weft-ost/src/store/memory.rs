//! An in-memory [`ObjectStore`]: sparse objects as maps of 4 KiB pages, for fast,
//! deterministic tests of the target (and of anything above it) without a data directory.
//!
//! It behaves as the file-system store does where the target can tell: holes read as zeros
//! and are found by [`ObjectStore::seek`] (at page granularity, as file systems report
//! them at block granularity), punching frees pages, `blocks` counts allocated pages in
//! 512-byte units, the listing order is the same, and [`ObjectStore::statfs`] reports a
//! fixed capacity minus the pages in use. Nothing is lost on "crash": syncs do nothing.

use crate::object::subdir_of;
use crate::store::{ListPage, ObjectStat, ObjectStore, StoreError, StoreResult};
use bytes::Bytes;
use parking_lot::{Mutex, RwLock};
use std::collections::BTreeMap;
use weft_proto::ObjectId;
use weft_proto::mdt::StatFs;

/// The page size of the fake, and the block size it reports.
pub const PAGE: usize = 4096;
const PAGE64: u64 = PAGE as u64;
/// Capacity of [`MemoryStore::new`]: 1 TiB (nothing is allocated until written).
pub const DEFAULT_CAPACITY: u64 = 1 << 40;

type Page = Box<[u8; PAGE]>;

#[derive(Default)]
struct Object {
    size: u64,
    /// Allocated pages by index; a missing page is a hole.
    pages: BTreeMap<u64, Page>,
    version: Option<u64>,
}

impl Object {
    /// Zeroes `[start, end)` of the object, freeing the pages it covers whole.
    fn zero(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        let first_whole = start.div_ceil(PAGE64);
        let end_whole = end / PAGE64;
        if first_whole < end_whole {
            let doomed: Vec<u64> = self
                .pages
                .range(first_whole..end_whole)
                .map(|(k, _)| *k)
                .collect();
            for k in doomed {
                self.pages.remove(&k);
            }
        }
        // The partial pages at either edge.
        let mut at = start;
        while at < end {
            let index = at / PAGE64;
            let page_end = ((index + 1) * PAGE64).min(end);
            if let Some(page) = self.pages.get_mut(&index) {
                let from = (at % PAGE64) as usize;
                let to = from + (page_end - at) as usize;
                page[from..to].fill(0);
            }
            at = if index >= first_whole && index < end_whole {
                end_whole * PAGE64
            } else {
                page_end
            };
        }
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        let mut done = 0usize;
        while done < data.len() {
            let at = offset + done as u64;
            let from = (at % PAGE64) as usize;
            let n = (PAGE - from).min(data.len() - done);
            let page = self
                .pages
                .entry(at / PAGE64)
                .or_insert_with(|| Box::new([0u8; PAGE]));
            page[from..from + n].copy_from_slice(&data[done..done + n]);
            done += n;
        }
        self.size = self.size.max(offset + data.len() as u64);
    }

    fn read(&self, offset: u64, len: usize) -> Bytes {
        let end = offset.saturating_add(len as u64).min(self.size);
        if offset >= end {
            return Bytes::new();
        }
        let mut out = vec![0u8; (end - offset) as usize];
        let mut at = offset;
        while at < end {
            let index = at / PAGE64;
            let from = (at % PAGE64) as usize;
            let n = ((PAGE - from) as u64).min(end - at) as usize;
            if let Some(page) = self.pages.get(&index) {
                let o = (at - offset) as usize;
                out[o..o + n].copy_from_slice(&page[from..from + n]);
            }
            at += n as u64;
        }
        Bytes::from(out)
    }

    fn set_size(&mut self, size: u64) {
        if size < self.size {
            self.zero(size, self.size);
        }
        self.size = size;
    }

    fn seek(&self, offset: u64, hole: bool) -> Option<u64> {
        if offset >= self.size {
            return None;
        }
        let index = offset / PAGE64;
        if hole {
            let mut p = index;
            while self.pages.contains_key(&p) && p * PAGE64 < self.size {
                p += 1;
            }
            Some((p * PAGE64).max(offset).min(self.size))
        } else {
            let (p, _) = self.pages.range(index..).next()?;
            let at = (p * PAGE64).max(offset);
            (at < self.size).then_some(at)
        }
    }

    fn stat(&self) -> ObjectStat {
        ObjectStat {
            size: self.size,
            blocks: self.pages.len() as u64 * (PAGE64 / 512),
        }
    }
}

/// Objects in memory. Cheap to make; every store starts empty, with its data version
/// reservation at its start.
pub struct MemoryStore {
    /// Objects by (hashed subdirectory, id): the listing order.
    objects: RwLock<BTreeMap<(usize, ObjectId), Mutex<Object>>>,
    reserve: Mutex<u64>,
    capacity: u64,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("objects", &self.objects.read().len())
            .field("capacity", &self.capacity)
            .finish()
    }
}

fn key(id: &ObjectId) -> (usize, ObjectId) {
    (subdir_of(id), *id)
}

impl MemoryStore {
    /// An empty store of [`DEFAULT_CAPACITY`] bytes.
    pub fn new() -> Self {
        Self::with_capacity(DEFAULT_CAPACITY)
    }

    /// An empty store that reports `bytes` of capacity (rounded down to pages), so space
    /// accounting can be tested with small numbers.
    pub fn with_capacity(bytes: u64) -> Self {
        Self {
            objects: RwLock::new(BTreeMap::new()),
            reserve: Mutex::new(crate::dataversion::FIRST_VERSION),
            capacity: bytes,
        }
    }

    /// Runs `f` on the object, or fails with [`StoreError::NotFound`].
    fn with<T>(&self, id: &ObjectId, f: impl FnOnce(&mut Object) -> T) -> StoreResult<T> {
        let objects = self.objects.read();
        let object = objects.get(&key(id)).ok_or(StoreError::NotFound(*id))?;
        Ok(f(&mut object.lock()))
    }

    /// Runs `f` on the object, creating it first if needed; `true` when it was created.
    fn with_new<T>(&self, id: &ObjectId, f: impl FnOnce(&mut Object) -> T) -> (T, bool) {
        if let Some(object) = self.objects.read().get(&key(id)) {
            return (f(&mut object.lock()), false);
        }
        // Not there a moment ago: create it (unless another call just did).
        let mut objects = self.objects.write();
        let mut created = false;
        let object = objects.entry(key(id)).or_insert_with(|| {
            created = true;
            Mutex::new(Object::default())
        });
        (f(object.get_mut()), created)
    }

    fn used_pages(&self) -> u64 {
        self.objects
            .read()
            .values()
            .map(|o| o.lock().pages.len() as u64)
            .sum()
    }
}

impl ObjectStore for MemoryStore {
    fn read(&self, id: &ObjectId, offset: u64, len: usize) -> StoreResult<Bytes> {
        self.with(id, |o| o.read(offset, len))
    }

    fn write(
        &self,
        id: &ObjectId,
        offset: u64,
        data: &Bytes,
        _compress: Option<bool>,
    ) -> StoreResult<bool> {
        Ok(self.with_new(id, |o| o.write(offset, data)).1)
    }

    fn set_size(&self, id: &ObjectId, size: u64, _compress: Option<bool>) -> StoreResult<()> {
        self.with_new(id, |o| o.set_size(size));
        Ok(())
    }

    fn punch(&self, id: &ObjectId, offset: u64, len: u64) -> StoreResult<()> {
        self.with(id, |o| o.zero(offset, offset.saturating_add(len)))
    }

    fn stat(&self, id: &ObjectId) -> StoreResult<ObjectStat> {
        self.with(id, |o| o.stat())
    }

    fn seek(&self, id: &ObjectId, offset: u64, hole: bool) -> StoreResult<Option<u64>> {
        self.with(id, |o| o.seek(offset, hole))
    }

    fn version(&self, id: &ObjectId) -> StoreResult<Option<u64>> {
        self.with(id, |o| o.version)
    }

    fn set_version(&self, id: &ObjectId, version: u64) -> StoreResult<()> {
        self.with(id, |o| o.version = Some(version))
    }

    fn remove(&self, id: &ObjectId) -> StoreResult<bool> {
        Ok(self.objects.write().remove(&key(id)).is_some())
    }

    fn sync_removed(&self, _ids: &[ObjectId]) -> StoreResult<()> {
        Ok(())
    }

    fn sync_data(&self, id: &ObjectId, _created: bool) -> StoreResult<()> {
        self.with(id, |_| ())
    }

    fn sync_object(&self, id: &ObjectId) -> StoreResult<()> {
        self.with(id, |_| ())
    }

    fn sync_all(&self) -> StoreResult<()> {
        Ok(())
    }

    fn list(&self, after: Option<&ObjectId>, max: usize) -> StoreResult<ListPage> {
        let objects = self.objects.read();
        let start = match after {
            Some(a) => std::ops::Bound::Excluded(key(a)),
            None => std::ops::Bound::Unbounded,
        };
        let mut rest = objects.range((start, std::ops::Bound::Unbounded));
        let page: Vec<(ObjectId, u64)> = rest
            .by_ref()
            .take(max.max(1))
            .map(|((_, id), o)| (*id, o.lock().size))
            .collect();
        let next = if rest.next().is_some() {
            page.last().map(|(id, _)| *id)
        } else {
            None
        };
        Ok((page, next))
    }

    fn statfs(&self) -> StoreResult<StatFs> {
        let blocks = self.capacity / PAGE64;
        let free = blocks.saturating_sub(self.used_pages());
        let objects = self.objects.read().len() as u64;
        Ok(StatFs {
            bsize: PAGE as u32,
            blocks,
            bfree: free,
            bavail: free,
            files: u64::from(u32::MAX),
            ffree: u64::from(u32::MAX).saturating_sub(objects),
            namelen: 255,
        })
    }

    fn version_reserve(&self) -> StoreResult<u64> {
        Ok(*self.reserve.lock())
    }

    fn set_version_reserve(&self, end: u64) -> StoreResult<()> {
        *self.reserve.lock() = end;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::oid;

    #[test]
    fn sparse_pages_read_seek_and_punch_like_a_file() {
        let s = MemoryStore::new();
        let id = oid(1);
        assert!(matches!(s.stat(&id), Err(StoreError::NotFound(_))));
        assert!(
            s.write(&id, 3 * PAGE64 + 10, &Bytes::from_static(b"abc"), None)
                .unwrap()
        );
        assert!(!s.write(&id, 0, &Bytes::from_static(b"xy"), None).unwrap());
        let st = s.stat(&id).unwrap();
        assert_eq!((st.size, st.blocks), (3 * PAGE64 + 13, 16));
        let all = s.read(&id, 0, 1 << 20).unwrap();
        assert_eq!(all.len() as u64, st.size);
        assert_eq!(&all[..2], b"xy");
        assert!(all[2..3 * PAGE + 10].iter().all(|b| *b == 0));
        assert_eq!(&all[3 * PAGE + 10..], b"abc");
        assert_eq!(s.seek(&id, 5, false).unwrap(), Some(5));
        assert_eq!(s.seek(&id, 5, true).unwrap(), Some(PAGE64));
        assert_eq!(s.seek(&id, PAGE64, false).unwrap(), Some(3 * PAGE64));
        assert_eq!(s.seek(&id, 3 * PAGE64, true).unwrap(), Some(st.size));
        assert_eq!(s.seek(&id, st.size, true).unwrap(), None);
        s.punch(&id, 1, 4 * PAGE64).unwrap();
        let st2 = s.stat(&id).unwrap();
        assert_eq!(
            (st2.size, st2.blocks),
            (st.size, 8),
            "size kept, page 3 freed"
        );
        assert_eq!(&s.read(&id, 0, 4).unwrap()[..], b"x\0\0\0");
        s.set_size(&id, 1, None).unwrap();
        s.set_size(&id, 10, None).unwrap();
        assert_eq!(&s.read(&id, 0, 100).unwrap()[..], b"x\0\0\0\0\0\0\0\0\0");
    }
}
