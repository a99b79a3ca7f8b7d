//! A bounded least-recently-used cache of open object files (the `lru` crate), so that a
//! stream of I/O to the same objects does not pay an open and a path walk per request.

use lru::LruCache;
use parking_lot::Mutex;
use std::fs::File;
use std::num::NonZeroUsize;
use std::sync::Arc;
use weft_proto::ObjectId;

/// How many object files stay open at most, by default.
pub const DEFAULT_CAPACITY: usize = 1024;

/// The cache. Callers must remove an object before removing its file, under the object's
/// exclusive lock, so that no stale descriptor of a destroyed object is ever handed out.
pub(crate) struct FdCache {
    inner: Mutex<LruCache<ObjectId, Arc<File>>>,
}

impl FdCache {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            inner: Mutex::new(LruCache::new(
                NonZeroUsize::new(capacity).unwrap_or(NonZeroUsize::MIN),
            )),
        }
    }

    /// The open file of `id`, if cached; marks it most recently used.
    pub(crate) fn get(&self, id: &ObjectId) -> Option<Arc<File>> {
        self.inner.lock().get(id).cloned()
    }

    /// Caches an open file, evicting the least recently used one when full.
    pub(crate) fn insert(&self, id: ObjectId, file: Arc<File>) {
        self.inner.lock().put(id, file);
    }

    /// Forgets `id` (its descriptor closes once no operation holds it).
    pub(crate) fn remove(&self, id: &ObjectId) {
        self.inner.lock().pop(id);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.inner.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::oid as id;

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
