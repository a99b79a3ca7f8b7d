//! Holes in an open file: punching a range (`fallocate(2)`'s `PUNCH_HOLE` and
//! `ZERO_RANGE`) and finding data and holes (`lseek(2)`'s `SEEK_DATA` and `SEEK_HOLE`).
//!
//! A file's holes are its objects' holes: a byte is data when the object holding it has
//! it allocated. So a punch deallocates each object's share of the range (its space goes
//! back to the OSTs), and a search from an offset asks every stripe's object for its next
//! data or hole from the first of its bytes at or after the offset, and takes the nearest.
//! Extents of PFL components not instantiated yet are holes.

use super::{File, errno, map_err};
use crate::error::ClientError;
use crate::layout;
use std::collections::BTreeMap;
use weft_proto::{Errno, ObjectId};
use weft_rpc::RequestContext;

impl File {
    /// Deallocates `[offset, offset + len)` (cut at the file's size), keeping the size: the
    /// range reads as zeros and the space its objects held there is free on the OSTs.
    /// Buffered writes go out first; the change is durable at the next fsync.
    pub async fn punch(&self, offset: u64, len: u64) -> Result<(), ClientError> {
        self.punch_in(&self.ctx, offset, len).await
    }

    /// [`punch`](Self::punch) with its OST requests in `ctx`.
    pub async fn punch_in(
        &self,
        ctx: &RequestContext,
        offset: u64,
        len: u64,
    ) -> Result<(), ClientError> {
        let mut st = self.state.lock().await;
        self.check_open(&st)?;
        if self.local().is_some() {
            return Err(errno(Errno::NotSup, "punching a file in the PCC"));
        }
        self.flush_locked(ctx, &mut st).await?;
        let end = offset
            .checked_add(len)
            .ok_or_else(|| errno(Errno::FBig, "punch past the largest offset"))?
            .min(self.size.get());
        if offset >= end {
            return Ok(());
        }
        // Another client may have instantiated components this handle has not seen.
        let Some(layout) = self.refresh_layout().await? else {
            return Ok(());
        };
        // One request per object: a range over many stripe rounds is contiguous in each.
        let mut ranges: BTreeMap<(u32, ObjectId), Vec<(u64, u64)>> = BTreeMap::new();
        for span in layout::map_sparse(&layout, self.fid, offset, end - offset).map_err(map_err)? {
            let layout::Span::Data(pieces) = span else {
                continue;
            };
            for p in pieces {
                let runs = ranges.entry((p.ost, p.object)).or_default();
                match runs.last_mut() {
                    Some((at, n)) if *at + *n == p.object_offset => *n += p.len,
                    _ => runs.push((p.object_offset, p.len)),
                }
            }
        }
        let punches = ranges.iter().flat_map(|(&(ost, object), runs)| {
            runs.iter().map(move |&(at, n)| async move {
                let attr = self
                    .core
                    .engine()
                    .punch_range(ctx, ost, object, at, n)
                    .await?;
                Ok::<_, ClientError>(((ost, object), attr.blocks))
            })
        });
        let results = futures::future::join_all(punches).await;
        // Whatever was punched is gone from the cache, even if another punch failed.
        self.core.cache().invalidate_range(self.fid, offset, end);
        st.modified = true;
        for r in results {
            let (object, blocks) = r?;
            st.touched.insert(object);
            if let Some(b) = st.blocks.get_mut(&object) {
                *b = blocks;
            }
        }
        Ok(())
    }

    /// `lseek(2)` with `SEEK_HOLE` (`hole`) or `SEEK_DATA`: where the first hole, or the
    /// first data, at or after `offset` starts. The end of the file counts as a hole.
    /// `None` is `lseek`'s `ENXIO`: `offset` at or past the end, or no data after it.
    /// Buffered writes go out first, so they count as data.
    pub async fn seek_hole_or_data(
        &self,
        offset: u64,
        hole: bool,
    ) -> Result<Option<u64>, ClientError> {
        self.seek_hole_or_data_in(&self.ctx, offset, hole).await
    }

    /// [`seek_hole_or_data`](Self::seek_hole_or_data) with the writes of buffered data in
    /// `ctx`.
    pub async fn seek_hole_or_data_in(
        &self,
        ctx: &RequestContext,
        offset: u64,
        hole: bool,
    ) -> Result<Option<u64>, ClientError> {
        let mut st = self.state.lock().await;
        self.check_open(&st)?;
        self.flush_locked(ctx, &mut st).await?;
        let size = self.size.get();
        drop(st);
        if offset >= size {
            return Ok(None);
        }
        if self.local().is_some() {
            // A local copy is all data, as far as the file system knows.
            return Ok(Some(if hole { size } else { offset }));
        }
        let layout = match self.layout() {
            Some(l) if l.components.iter().any(|c| !c.is_instantiated()) => {
                self.refresh_layout().await?
            }
            other => other,
        };
        let Some(layout) = layout else {
            // No objects at all: one hole to the end.
            return Ok(hole.then_some(offset));
        };
        for comp in &layout.components {
            if comp.end <= offset || comp.start >= size {
                continue;
            }
            let from = offset.max(comp.start);
            if !comp.is_instantiated() {
                if hole {
                    return Ok(Some(from));
                }
                continue;
            }
            let searches = comp.osts.iter().enumerate().map(|(i, &ost)| async move {
                let stripe = i as u32;
                let at = layout::object_offset_from(comp, stripe, from);
                let found = self
                    .core
                    .engine()
                    .seek(ctx, ost, comp.object(self.fid, stripe), at, hole)
                    .await?;
                Ok::<_, ClientError>(found.map(|o| layout::file_offset_of(comp, stripe, o)))
            });
            let mut nearest: Option<u64> = None;
            for r in futures::future::join_all(searches).await {
                if let Some(at) = r? {
                    nearest = Some(nearest.map_or(at, |n| n.min(at)));
                }
            }
            // What an object holds past the component's end is not the file's.
            if let Some(at) = nearest.filter(|&at| at < comp.end) {
                return Ok((hole || at < size).then_some(at.min(size)));
            }
        }
        Ok(hole.then_some(size))
    }
}
