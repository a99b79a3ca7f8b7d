//! The client's data cache: 1 MiB pages of file data, least recently used out first,
//! bounded by `llite.*.max_cached_mb`. Pages carry the file's data version at the time they
//! were read; an open that finds a newer version drops them (close-to-open consistency).

use crate::params::{ClientParams, Param};
use bytes::Bytes;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use weft_proto::Fid;

/// Bytes per cache page.
pub const CACHE_PAGE: u64 = 1 << 20;

struct Page {
    data: Bytes,
    tick: u64,
}

#[derive(Default)]
struct Inner {
    pages: HashMap<(Fid, u64), Page>,
    lru: BTreeMap<u64, (Fid, u64)>,
    versions: HashMap<Fid, u64>,
    bytes: u64,
    tick: u64,
}

/// Cached file data shared by every open file of a client.
pub struct DataCache {
    params: Arc<ClientParams>,
    inner: Mutex<Inner>,
}

impl DataCache {
    /// An empty cache bounded by the client's `max_cached_mb`.
    pub fn new(params: Arc<ClientParams>) -> Self {
        Self {
            params,
            inner: Mutex::new(Inner::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        self.lock().bytes
    }

    /// Drops a file's pages if they were read at another data version than `version`.
    pub fn validate(&self, fid: Fid, version: u64) {
        let mut g = self.lock();
        if g.versions.get(&fid).is_some_and(|&v| v != version) {
            drop_pages(&mut g, fid, |_| true);
        }
        g.versions.insert(fid, version);
    }

    /// Page `index` of a file, if cached (and marks it used).
    pub fn get(&self, fid: Fid, index: u64) -> Option<Bytes> {
        let mut g = self.lock();
        g.tick += 1;
        let tick = g.tick;
        let page = g.pages.get_mut(&(fid, index))?;
        let old = std::mem::replace(&mut page.tick, tick);
        let data = page.data.clone();
        g.lru.remove(&old);
        g.lru.insert(tick, (fid, index));
        Some(data)
    }

    /// Whether page `index` is cached.
    pub fn contains(&self, fid: Fid, index: u64) -> bool {
        self.lock().pages.contains_key(&(fid, index))
    }

    /// Stores a page, evicting the least recently used pages beyond the limit.
    pub fn insert(&self, fid: Fid, index: u64, data: Bytes) {
        let limit = self.params.mb(Param::MaxCachedMb);
        let mut g = self.lock();
        g.tick += 1;
        let tick = g.tick;
        let len = data.len() as u64;
        if let Some(old) = g.pages.insert((fid, index), Page { data, tick }) {
            g.lru.remove(&old.tick);
            g.bytes -= old.data.len() as u64;
        }
        g.lru.insert(tick, (fid, index));
        g.bytes += len;
        while g.bytes > limit {
            let Some((_, key)) = g.lru.pop_first() else {
                break;
            };
            if let Some(p) = g.pages.remove(&key) {
                g.bytes -= p.data.len() as u64;
            }
        }
    }

    /// Drops the pages of `fid` that overlap `[start, end)`.
    pub fn invalidate_range(&self, fid: Fid, start: u64, end: u64) {
        let mut g = self.lock();
        let (first, last) = (start / CACHE_PAGE, end.div_ceil(CACHE_PAGE));
        drop_pages(&mut g, fid, |i| i >= first && i < last);
    }

    /// Drops every page of `fid`.
    pub fn invalidate(&self, fid: Fid) {
        let mut g = self.lock();
        drop_pages(&mut g, fid, |_| true);
    }
}

fn drop_pages(g: &mut Inner, fid: Fid, which: impl Fn(u64) -> bool) {
    let keys: Vec<(Fid, u64)> = g
        .pages
        .keys()
        .filter(|(f, i)| *f == fid && which(*i))
        .copied()
        .collect();
    for k in keys {
        if let Some(p) = g.pages.remove(&k) {
            g.lru.remove(&p.tick);
            g.bytes -= p.data.len() as u64;
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
            c.insert(Fid::ROOT, i, page.clone());
        }
        assert!(c.get(Fid::ROOT, 0).is_some()); // 0 is now the most recent
        c.insert(Fid::ROOT, 3, page.clone());
        assert!(c.bytes() <= 3 << 20);
        assert!(c.contains(Fid::ROOT, 0) && !c.contains(Fid::ROOT, 1));
        c.validate(Fid::ROOT, 7);
        assert!(c.contains(Fid::ROOT, 0), "first validation keeps pages");
        c.validate(Fid::ROOT, 8);
        assert_eq!(c.bytes(), 0, "a new data version drops the file's pages");
    }
}
