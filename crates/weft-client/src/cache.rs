//! The client's data cache: 1 MiB pages of file data, least recently used out first (an
//! [`LruCache`] bounded by bytes), within `llite.*.max_cached_mb`. Pages carry the file's data version at the time they
//! were read; an open that finds a newer version drops them (close-to-open consistency).
//!
//! Each file also has a generation, bumped whenever its pages are dropped (a write, a
//! truncate, a new data version). A fetch notes the generation before it asks the OSTs
//! and stores its pages only if the generation is unchanged when the data arrives: a
//! read-ahead that raced with a write must not put the bytes from before the write back
//! into the cache after the write dropped them.

use crate::params::{ClientParams, Param};
use bytes::Bytes;
use lru::LruCache;
use parking_lot::{Mutex, MutexGuard};
use std::collections::HashMap;
use std::sync::Arc;
use weft_proto::Fid;

/// Bytes per cache page.
pub const CACHE_PAGE: u64 = 1 << 20;

struct Inner {
    /// Pages by file and index, least recently used first out; bounded by bytes (below),
    /// not by count.
    pages: LruCache<(Fid, u64), Bytes>,
    versions: HashMap<Fid, u64>,
    generations: HashMap<Fid, u64>,
    bytes: u64,
}

impl Default for Inner {
    fn default() -> Self {
        Self {
            pages: LruCache::unbounded(),
            versions: HashMap::new(),
            generations: HashMap::new(),
            bytes: 0,
        }
    }
}

/// Pages being fetched, each with what wakes those waiting for it.
type Pending = Mutex<HashMap<(Fid, u64), Arc<tokio::sync::Notify>>>;

/// Cached file data shared by every open file of a client.
pub struct DataCache {
    params: Arc<ClientParams>,
    inner: Mutex<Inner>,
    /// Pages a read or read-ahead is fetching: others wait for them instead of fetching
    /// the same bytes again.
    pending: Arc<Pending>,
}

/// Marks pages as being fetched until dropped (when the fetch has stored them, or failed).
pub struct Fetching {
    pending: Arc<Pending>,
    keys: Vec<(Fid, u64)>,
    notify: Arc<tokio::sync::Notify>,
}

impl Drop for Fetching {
    fn drop(&mut self) {
        let mut p = self.pending.lock();
        for k in &self.keys {
            if p.get(k).is_some_and(|n| Arc::ptr_eq(n, &self.notify)) {
                p.remove(k);
            }
        }
        drop(p);
        self.notify.notify_waiters();
    }
}

/// Longest a reader waits for another's fetch of a page before fetching it itself.
const FETCH_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

impl DataCache {
    /// An empty cache bounded by the client's `max_cached_mb`.
    pub fn new(params: Arc<ClientParams>) -> Self {
        Self {
            params,
            inner: Mutex::new(Inner::default()),
            pending: Arc::default(),
        }
    }

    fn pending(&self) -> MutexGuard<'_, HashMap<(Fid, u64), Arc<tokio::sync::Notify>>> {
        self.pending.lock()
    }

    /// Marks pages `lo..=hi` of `fid` that nobody is fetching yet as being fetched by the
    /// caller, until the returned mark is dropped (once they are stored).
    pub fn begin_fetch(&self, fid: Fid, lo: u64, hi: u64) -> Fetching {
        let notify = Arc::new(tokio::sync::Notify::new());
        let mut keys = Vec::new();
        let mut p = self.pending();
        for i in lo..=hi {
            if let std::collections::hash_map::Entry::Vacant(e) = p.entry((fid, i)) {
                e.insert(notify.clone());
                keys.push((fid, i));
            }
        }
        drop(p);
        Fetching {
            pending: self.pending.clone(),
            keys,
            notify,
        }
    }

    /// Whether page `index` of `fid` is being fetched.
    pub fn is_fetching(&self, fid: Fid, index: u64) -> bool {
        self.pending().contains_key(&(fid, index))
    }

    /// Waits until nobody is fetching page `index` of `fid` (at most `FETCH_WAIT`).
    pub async fn wait_fetch(&self, fid: Fid, index: u64) {
        let Some(n) = self.pending().get(&(fid, index)).cloned() else {
            return;
        };
        let woken = n.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        // The mark may have gone between the lookup and `enable`.
        if self
            .pending()
            .get(&(fid, index))
            .is_some_and(|m| Arc::ptr_eq(m, &n))
        {
            let _ = tokio::time::timeout(FETCH_WAIT, woken).await;
        }
    }

    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        self.inner.lock().bytes
    }

    /// Drops a file's pages if they were read at another data version than `version`.
    pub fn validate(&self, fid: Fid, version: u64) {
        let mut g = self.inner.lock();
        if g.versions.get(&fid).is_some_and(|&v| v != version) {
            drop_pages(&mut g, fid, |_| true);
        }
        g.versions.insert(fid, version);
    }

    /// The file's generation: note it before fetching pages to [`insert`](Self::insert).
    pub fn generation(&self, fid: Fid) -> u64 {
        self.inner
            .lock()
            .generations
            .get(&fid)
            .copied()
            .unwrap_or(0)
    }

    /// Page `index` of a file, if cached (and marks it used).
    pub fn get(&self, fid: Fid, index: u64) -> Option<Bytes> {
        self.inner.lock().pages.get(&(fid, index)).cloned()
    }

    /// Whether page `index` is cached.
    pub fn contains(&self, fid: Fid, index: u64) -> bool {
        self.inner.lock().pages.contains(&(fid, index))
    }

    /// Stores a page fetched at `generation`, evicting the least recently used pages
    /// beyond the limit; returns false (and stores nothing) if the file's pages were
    /// dropped since, because the page may hold bytes from before a write.
    pub fn insert(&self, fid: Fid, index: u64, data: Bytes, generation: u64) -> bool {
        let limit = self.params.mb(Param::MaxCachedMb);
        let mut g = self.inner.lock();
        if g.generations.get(&fid).copied().unwrap_or(0) != generation {
            return false;
        }
        let len = data.len() as u64;
        if let Some(old) = g.pages.put((fid, index), data) {
            g.bytes -= old.len() as u64;
        }
        g.bytes += len;
        while g.bytes > limit {
            let Some((_, old)) = g.pages.pop_lru() else {
                break;
            };
            g.bytes -= old.len() as u64;
        }
        true
    }

    /// Drops the pages of `fid` that overlap `[start, end)`.
    pub fn invalidate_range(&self, fid: Fid, start: u64, end: u64) {
        let mut g = self.inner.lock();
        let (first, last) = (start / CACHE_PAGE, end.div_ceil(CACHE_PAGE));
        drop_pages(&mut g, fid, |i| i >= first && i < last);
    }

    /// Drops every page of `fid`.
    pub fn invalidate(&self, fid: Fid) {
        let mut g = self.inner.lock();
        drop_pages(&mut g, fid, |_| true);
    }
}

fn drop_pages(g: &mut Inner, fid: Fid, which: impl Fn(u64) -> bool) {
    // Even when no page is held: a fetch in flight must not store what it read.
    *g.generations.entry(fid).or_insert(0) += 1;
    let keys: Vec<(Fid, u64)> = g
        .pages
        .iter()
        .map(|(k, _)| *k)
        .filter(|(f, i)| *f == fid && which(*i))
        .collect();
    for k in keys {
        if let Some(p) = g.pages.pop(&k) {
            g.bytes -= p.len() as u64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_stays_within_its_limit_and_evicts_least_recently_used() {
        let params = Arc::new(ClientParams::new("t"));
        params.set("llite.*.max_cached_mb", "3").unwrap();
        let c = DataCache::new(params);
        let page = Bytes::from(vec![0u8; CACHE_PAGE as usize]);
        for i in 0..3 {
            assert!(c.insert(Fid::ROOT, i, page.clone(), 0));
        }
        assert!(c.get(Fid::ROOT, 0).is_some()); // 0 is now the most recent
        assert!(c.insert(Fid::ROOT, 3, page.clone(), 0));
        assert!(c.bytes() <= 3 << 20);
        assert!(c.contains(Fid::ROOT, 0) && !c.contains(Fid::ROOT, 1));
        c.validate(Fid::ROOT, 7);
        assert!(c.contains(Fid::ROOT, 0), "first validation keeps pages");
        c.validate(Fid::ROOT, 8);
        assert_eq!(c.bytes(), 0, "a new data version drops the file's pages");
    }

    #[test]
    fn a_fetch_that_raced_with_an_invalidation_stores_nothing() {
        let c = DataCache::new(Arc::new(ClientParams::new("t")));
        let page = Bytes::from(vec![7u8; 4096]);
        let before = c.generation(Fid::ROOT);
        // A write drops the range while the fetch is in flight (nothing cached yet).
        c.invalidate_range(Fid::ROOT, 0, 10);
        assert!(!c.insert(Fid::ROOT, 0, page.clone(), before));
        assert!(!c.contains(Fid::ROOT, 0), "stale bytes must not be cached");
        let now = c.generation(Fid::ROOT);
        assert!(c.insert(Fid::ROOT, 0, page, now));
        assert!(c.contains(Fid::ROOT, 0));
    }
}
