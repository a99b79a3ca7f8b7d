//! A bounded least-recently-used cache of open object files, so that a stream of I/O to
//! the same objects does not pay an open and a path walk per request.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::sync::{Arc, Mutex};
use weft_proto::ObjectId;

/// How many object files stay open at most, by default.
pub const DEFAULT_CAPACITY: usize = 1024;

#[derive(Default)]
struct Lru {
    map: HashMap<ObjectId, (Arc<File>, u64)>,
    order: BTreeMap<u64, ObjectId>,
    tick: u64,
}

/// The cache. Callers must remove an object before removing its file, under the object's
/// exclusive lock, so that no stale descriptor of a destroyed object is ever handed out.
pub(crate) struct FdCache {
    capacity: usize,
    inner: Mutex<Lru>,
}

impl FdCache {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            inner: Mutex::new(Lru::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Lru> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The open file of `id`, if cached; marks it most recently used.
    pub(crate) fn get(&self, id: &ObjectId) -> Option<Arc<File>> {
        let mut lru = self.lock();
        lru.tick += 1;
        let tick = lru.tick;
        let (file, old) = {
            let entry = lru.map.get_mut(id)?;
            let old = std::mem::replace(&mut entry.1, tick);
            (Arc::clone(&entry.0), old)
        };
        lru.order.remove(&old);
        lru.order.insert(tick, *id);
        Some(file)
    }

    /// Caches an open file, evicting the least recently used one when full.
    pub(crate) fn insert(&self, id: ObjectId, file: Arc<File>) {
        let mut lru = self.lock();
        lru.tick += 1;
        let tick = lru.tick;
        if let Some((_, old)) = lru.map.insert(id, (file, tick)) {
            lru.order.remove(&old);
        }
        lru.order.insert(tick, id);
        while lru.map.len() > self.capacity {
            let Some((_, victim)) = lru.order.pop_first() else {
                break;
            };
            lru.map.remove(&victim);
        }
    }

    /// Forgets `id` (its descriptor closes once no operation holds it).
    pub(crate) fn remove(&self, id: &ObjectId) {
        let mut lru = self.lock();
        if let Some((_, tick)) = lru.map.remove(id) {
            lru.order.remove(&tick);
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_proto::Fid;

    fn id(n: u32) -> ObjectId {
        ObjectId {
            fid: Fid {
                seq: 1,
                oid: n,
                ver: 0,
            },
            component: 0,
            stripe: 0,
        }
    }

    #[test]
    fn evicts_least_recently_used() {
        let dir = tempfile::tempdir().unwrap();
        let f = Arc::new(File::create(dir.path().join("x")).unwrap());
        let c = FdCache::new(2);
        c.insert(id(1), f.clone());
        c.insert(id(2), f.clone());
        assert!(c.get(&id(1)).is_some());
        c.insert(id(3), f.clone());
        assert_eq!(c.len(), 2);
        assert!(c.get(&id(2)).is_none(), "2 was least recently used");
        assert!(c.get(&id(1)).is_some());
        c.remove(&id(1));
        assert!(c.get(&id(1)).is_none());
        assert_eq!(c.len(), 1);
    }
}
