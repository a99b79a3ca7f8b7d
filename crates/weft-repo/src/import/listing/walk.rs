//! The listing walked directory by directory: each level of the key tree is listed with
//! the `/` delimiter, its objects and directories merged in key order, and the listings of
//! the next [`WALK_AHEAD`] directories are fetched while the current one is read.
//!
//! Why: one flat listing is a single sequence of pages, and the import's HEADs cannot start
//! before its first page is back. A server that builds a page from a walk of its whole
//! bucket (s3s-fs: 20,000 keys took ~1.1 s of its CPU per page here) makes every import
//! wait that long; a store far away pays a round trip per page, one after another.
//! Directory listings are small and run side by side, so keys flow at once.
//!
//! Where the walk does not pay, a listing goes flat (one [`paged`] listing of what is
//! left, from the last key given out, so nothing is given twice or missed):
//! - a level that does not fit in one page (a directory of a million keys is not split
//!   into directories, and listing it flat costs the same pages);
//! - once the walk has made [`WALK_PROBE`] listings averaging fewer than
//!   [`WALK_MIN_ENTRIES`] entries each: directories that small (a directory per sample)
//!   would cost a request for a handful of keys, so the rest of every level still being
//!   read, and every level not yet begun, is listed flat.
//!
//! Keys come out in key order from a checkpoint on, like the flat listing: a level's
//! objects and directories are sorted together (a directory `a/b/` sorts as its name,
//! every key under it between it and the next entry), and a checkpoint inside a directory
//! resumes that directory from the checkpoint and the level after that directory. Memory:
//! one page of entries per level on the path being read, and one per directory fetched
//! ahead.

use super::paged;
use futures::StreamExt;
use futures::stream::{self, BoxStream};
use object_store::ObjectMeta;
use object_store::list::{PaginatedListOptions, PaginatedListResult, PaginatedListStore};
use object_store::path::DELIMITER;
use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use weft_rpc::AbortOnDrop;

/// Directory listings of a level fetched ahead of the one being read.
pub const WALK_AHEAD: usize = 8;
/// Listings the walk makes before it judges the size of its directories.
pub const WALK_PROBE: u64 = 32;
/// Fewest entries per listing, on average, for the walk to go on directory by directory.
pub const WALK_MIN_ENTRIES: u64 = 64;

type Objects = BoxStream<'static, object_store::Result<ObjectMeta>>;

/// One walk's store, page size and tally of its listings.
struct Walk {
    lister: Arc<dyn PaginatedListStore>,
    page: usize,
    listings: AtomicU64,
    entries: AtomicU64,
}

impl Walk {
    /// Whether the directories seen so far are too small to be listed one by one.
    fn small_dirs(&self) -> bool {
        let listings = self.listings.load(Ordering::Relaxed);
        listings >= WALK_PROBE
            && self.entries.load(Ordering::Relaxed) < listings.saturating_mul(WALK_MIN_ENTRIES)
    }

    /// The flat listing of `prefix` after `after`.
    fn flat(&self, prefix: Option<String>, after: Option<String>) -> Objects {
        paged(self.lister.clone(), prefix, after, self.page)
    }
}

/// The objects under `prefix` (with its trailing `/`; `None`: the whole store) after key
/// `after`, in key order, walked as the module header tells.
pub(super) fn walked(
    lister: Arc<dyn PaginatedListStore>,
    prefix: Option<String>,
    after: Option<String>,
    page: usize,
) -> Objects {
    let walk = Arc::new(Walk {
        lister,
        page: page.max(1),
        listings: AtomicU64::new(0),
        entries: AtomicU64::new(0),
    });
    level(walk, prefix, after)
}

/// An entry of a level, in key order.
enum Entry {
    Object(ObjectMeta),
    /// A directory (its prefix, with the trailing `/`), from a checkpoint inside it.
    Dir {
        prefix: String,
        after: Option<String>,
    },
}

/// An entry whose listing (for a directory) has started.
enum Started {
    Object(ObjectMeta),
    Dir { prefix: String, objects: Objects },
}

/// The objects of the level `prefix` after `after`; its listing is asked for at once
/// (so a directory fetched ahead is being listed before it is read).
fn level(walk: Arc<Walk>, prefix: Option<String>, after: Option<String>) -> Objects {
    let at = prefix.clone().unwrap_or_default();
    if after.as_deref().is_some_and(|k| !k.starts_with(&at)) {
        // A checkpoint outside the level (not one the import writes): the flat listing's
        // answer, whatever the store makes of it.
        return walk.flat(prefix, after);
    }
    // A checkpoint inside one of the level's directories: that directory is resumed first,
    // and the level is listed after it.
    let inner_dir = after.as_deref().and_then(|k| {
        let rest = &k[at.len()..];
        rest.find(DELIMITER).map(|i| format!("{at}{}", &rest[..=i]))
    });
    let opts = PaginatedListOptions {
        offset: inner_dir.clone().or_else(|| after.clone()),
        delimiter: Some(Cow::Borrowed(DELIMITER)),
        max_keys: Some(walk.page),
        ..Default::default()
    };
    let fetch = AbortOnDrop(tokio::spawn({
        let walk = walk.clone();
        let prefix = prefix.clone();
        async move { walk.lister.list_paginated(prefix.as_deref(), opts).await }
    }));
    stream::once(async move {
        let mut fetch = fetch;
        let listed = match (&mut fetch.0).await {
            Ok(listed) => listed,
            Err(e) => Err(object_store::Error::Generic {
                store: "listing",
                source: Box::new(e),
            }),
        };
        match listed {
            Err(e) => stream::iter([Err(e)]).boxed(),
            Ok(page) if page.page_token.is_some() || walk.small_dirs() => walk.flat(prefix, after),
            Ok(page) => {
                let entries = entries_of(&walk, page, after.as_deref(), inner_dir);
                read_level(walk, prefix, after, entries)
            }
        }
    })
    .flatten()
    .boxed()
}

/// A level's page as entries in key order, without what the checkpoint `after` passed
/// (the checkpoint's own directory `inner_dir` comes back with the checkpoint).
fn entries_of(
    walk: &Walk,
    page: PaginatedListResult,
    after: Option<&str>,
    inner_dir: Option<String>,
) -> VecDeque<Entry> {
    let result = page.result;
    walk.listings.fetch_add(1, Ordering::Relaxed);
    walk.entries.fetch_add(
        (result.objects.len() + result.common_prefixes.len()) as u64,
        Ordering::Relaxed,
    );
    let passed = |key: &str| after.is_some_and(|a| key <= a);
    let mut keyed: Vec<(String, Entry)> = Vec::with_capacity(
        result.objects.len() + result.common_prefixes.len() + usize::from(inner_dir.is_some()),
    );
    for object in result.objects {
        let key = object.location.to_string();
        if !passed(&key) {
            keyed.push((key, Entry::Object(object)));
        }
    }
    for dir in result.common_prefixes {
        let prefix = format!("{dir}{DELIMITER}");
        if !passed(&prefix) {
            keyed.push((
                prefix.clone(),
                Entry::Dir {
                    prefix,
                    after: None,
                },
            ));
        }
    }
    if let Some(prefix) = inner_dir {
        let after = after.map(str::to_string);
        keyed.push((prefix.clone(), Entry::Dir { prefix, after }));
    }
    // The store's order is not trusted: the import's checkpoint needs key order.
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    keyed.into_iter().map(|(_, entry)| entry).collect()
}

/// Reads a level's entries in order, directories fetched [`WALK_AHEAD`] ahead, and goes
/// flat for the rest of the level when its directories prove small.
fn read_level(
    walk: Arc<Walk>,
    prefix: Option<String>,
    after: Option<String>,
    entries: VecDeque<Entry>,
) -> Objects {
    struct State {
        walk: Arc<Walk>,
        prefix: Option<String>,
        entries: VecDeque<Entry>,
        ahead: VecDeque<Started>,
        /// The directory being read (its prefix) or the flat listing of the rest (`None`).
        current: Option<(Option<String>, Objects)>,
        /// The greatest key given out so far (or the checkpoint).
        last: Option<String>,
        done: bool,
    }
    let state = State {
        walk,
        prefix,
        entries,
        ahead: VecDeque::new(),
        current: None,
        last: after,
        done: false,
    };
    stream::unfold(state, |mut st| async move {
        loop {
            if st.done {
                return None;
            }
            if let Some((dir, objects)) = &mut st.current {
                match objects.next().await {
                    Some(Ok(object)) => {
                        st.last = Some(object.location.to_string());
                        return Some((Ok(object), st));
                    }
                    Some(Err(e)) => {
                        // An error ends the listing (the import stops at its checkpoint).
                        st.done = true;
                        return Some((Err(e), st));
                    }
                    None => {
                        // Every key of the directory `d` is at least `d` (a marker `d`
                        // is given out as `d` without its `/`).
                        if let Some(d) = dir.take()
                            && st.last.as_ref().is_none_or(|l| *l < d)
                        {
                            st.last = Some(d);
                        }
                        st.current = None;
                        let dirs_left = st.entries.iter().any(|e| matches!(e, Entry::Dir { .. }))
                            || st.ahead.iter().any(|s| matches!(s, Started::Dir { .. }));
                        if dirs_left && st.walk.small_dirs() {
                            st.entries.clear();
                            st.ahead.clear();
                            let rest = st.walk.flat(st.prefix.clone(), st.last.clone());
                            st.current = Some((None, rest));
                        }
                        continue;
                    }
                }
            }
            while st.ahead.len() < WALK_AHEAD
                && let Some(entry) = st.entries.pop_front()
            {
                st.ahead.push_back(match entry {
                    Entry::Object(object) => Started::Object(object),
                    Entry::Dir { prefix, after } => Started::Dir {
                        objects: level(st.walk.clone(), Some(prefix.clone()), after),
                        prefix,
                    },
                });
            }
            match st.ahead.pop_front()? {
                Started::Object(object) => {
                    st.last = Some(object.location.to_string());
                    return Some((Ok(object), st));
                }
                Started::Dir { prefix, objects } => st.current = Some((Some(prefix), objects)),
            }
        }
    })
    .boxed()
}
