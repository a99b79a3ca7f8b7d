//! Paged listing of the objects a data directory holds (`OstRequest::ListObjects`, for
//! `weft fsck`).
//!
//! # Order and cursor
//!
//! Objects are listed by (hashed subdirectory, object id): subdirectories `00` to `ff` in
//! turn, and within one the objects in [`ObjectId`] order. The cursor of a page is the last
//! object id it selected; the next page starts in that id's subdirectory (known from its
//! hash, [`subdir_of`]) with the ids above it, then the following subdirectories. The
//! order depends only on the ids, so paging visits every object present for the whole
//! listing exactly once; an object created or removed meanwhile may or may not appear.
//! The cursor need not name an existing object (it may have been destroyed since).
//!
//! # Cost
//!
//! A page reads whole subdirectories but keeps only the `max` smallest ids above the
//! cursor (a bounded heap), so its memory is O(`max`) however many objects the target
//! holds; sizes are then read for the kept objects only. A subdirectory holding more
//! objects than a page is read again for each page that ends inside it, so callers should
//! ask for large pages ([`weft_proto::ost::MAX_LIST_OBJECTS`]).
//!
//! Only names that [`parse_object_file_name`] accepts, of regular files, in the
//! subdirectory their hash picks, are listed: temporary files and strays are skipped (the
//! latter with a warning, since no request would ever reach them).

use crate::object::{
    OBJECTS_DIR, SUBDIRS, object_path, parse_object_file_name, subdir_name, subdir_of,
};
use crate::store::{ListPage, StoreError, StoreResult};
use std::collections::BinaryHeap;
use std::io;
use std::path::Path;
use weft_proto::ObjectId;

/// Lists up to `max` (> 0; the target caps it) objects of the data directory `root` after
/// the cursor `after`. Blocking: run it off the reactor.
pub(super) fn list_page(root: &Path, after: Option<ObjectId>, max: usize) -> StoreResult<ListPage> {
    let max = max.max(1);
    let objects = root.join(OBJECTS_DIR);
    let first = after.as_ref().map_or(0, subdir_of);
    let mut page: Vec<ObjectId> = Vec::with_capacity(max);
    // Whether objects may follow the page: it is full and something may come after it.
    let mut more = false;
    for sub in first..SUBDIRS {
        let floor = after.filter(|a| subdir_of(a) == sub);
        let (ids, overflow) = smallest_above(&objects, sub, floor.as_ref(), max - page.len())?;
        page.extend(ids);
        if page.len() == max {
            more = overflow || sub + 1 < SUBDIRS;
            break;
        }
    }
    let next = if more { page.last().copied() } else { None };
    let mut out = Vec::with_capacity(page.len());
    for id in page {
        let path = object_path(root, &id);
        match std::fs::symlink_metadata(&path) {
            // A compressed object's size is its logical one.
            Ok(meta) if meta.is_file() => match super::lz4::meta_at(&path) {
                Ok(m) => out.push((id, m.map_or(meta.len(), |m| m.size))),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(StoreError::io(format!("read logical size of {id}"), e)),
            },
            Ok(_) => {}
            // Destroyed since the directory was read.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(StoreError::io(format!("stat {id}"), e)),
        }
    }
    Ok((out, next))
}

/// The (at most) `keep` smallest object ids of subdirectory `sub` above `floor`, in order,
/// and whether there were more.
fn smallest_above(
    objects: &Path,
    sub: usize,
    floor: Option<&ObjectId>,
    keep: usize,
) -> StoreResult<(Vec<ObjectId>, bool)> {
    let dir = objects.join(subdir_name(sub));
    let what = || format!("list {}", dir.display());
    let mut heap: BinaryHeap<ObjectId> = BinaryHeap::with_capacity(keep.saturating_add(1));
    let mut overflow = false;
    for entry in std::fs::read_dir(&dir).map_err(|e| StoreError::io(what(), e))? {
        let entry = entry.map_err(|e| StoreError::io(what(), e))?;
        let name = entry.file_name();
        let Some(id) = name.to_str().and_then(parse_object_file_name) else {
            tracing::debug!(dir = %dir.display(), name = ?name, "not an object: skipped in listing");
            continue;
        };
        if subdir_of(&id) != sub {
            tracing::warn!(dir = %dir.display(), name = ?name, "object file in the wrong subdirectory: skipped in listing");
            continue;
        }
        if floor.is_some_and(|f| id <= *f) {
            continue;
        }
        // d_type from readdir: no extra system call on the common file systems.
        if !entry
            .file_type()
            .map_err(|e| StoreError::io(what(), e))?
            .is_file()
        {
            continue;
        }
        if heap.len() < keep {
            heap.push(id);
        } else {
            overflow = true;
            match heap.peek() {
                Some(top) if id < *top => {
                    heap.pop();
                    heap.push(id);
                }
                _ => {}
            }
        }
    }
    Ok((heap.into_sorted_vec(), overflow))
}

#[cfg(test)]
mod tests;
