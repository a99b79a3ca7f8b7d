//! The bodies of the object operations, run on the blocking pool: limits checked, the
//! object's lifecycle lock held, the store called, data versions moved, statistics and
//! grants counted. A missing object is answered here (empty, `exists: false`), never as an
//! error.

use super::space::check_end;
use super::{MAX_OBJECT_SIZE, Ost};
use crate::store::{ObjectStat, StoreError, StoreResult};
use bytes::Bytes;
use weft_proto::frame::MAX_BULK;
use weft_proto::ost::ObjectAttr;
use weft_proto::{Compression, Errno, ObjectId, WireError, WireResult};

/// `Some` of a store result, `None` when the object does not exist.
fn existing<T>(r: StoreResult<T>) -> StoreResult<Option<T>> {
    match r {
        Ok(t) => Ok(Some(t)),
        Err(StoreError::NotFound(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The attributes of an existing object.
fn attr(st: ObjectStat, data_version: u64) -> ObjectAttr {
    ObjectAttr {
        exists: true,
        size: st.size,
        blocks: st.blocks,
        data_version,
    }
}

impl Ost {
    pub(super) fn read_blocking(
        &self,
        id: &ObjectId,
        offset: u64,
        len: u32,
    ) -> WireResult<(ObjectAttr, Bytes)> {
        if len > MAX_BULK {
            return Err(WireError::new(
                Errno::Inval,
                format!("read of {len} bytes exceeds the bulk limit {MAX_BULK}"),
            ));
        }
        let _life = self.lock_of(id).lifecycle.read();
        let Some(data_version) = existing(self.version_of(id))? else {
            return Ok((ObjectAttr::default(), Bytes::new()));
        };
        let buf = self.store.read(id, offset, len as usize)?;
        let st = self.store.stat(id)?;
        self.stats.record_read(buf.len() as u64);
        Ok((attr(st, data_version), buf))
    }

    pub(super) fn write_blocking(
        &self,
        conn: u64,
        id: &ObjectId,
        offset: u64,
        data: &Bytes,
        sync: bool,
        compress: Compression,
    ) -> WireResult<ObjectAttr> {
        let len = data.len() as u64;
        check_end(offset, len)?;
        self.check_space(conn, len)?;
        let _life = self.lock_of(id).lifecycle.read();
        let written = self.store.write(id, offset, data, compress.wanted());
        // Even a failed write may have changed some bytes: the version moves either way
        // (when the object exists at all).
        let version = self.bump_version(id);
        let created = written?;
        let data_version = version?;
        if sync {
            self.store.sync_data(id, created)?;
        }
        let st = self.store.stat(id)?;
        self.stats.record_write(len);
        self.grants.consume(conn, len);
        Ok(attr(st, data_version))
    }

    pub(super) fn punch_blocking(
        &self,
        id: &ObjectId,
        size: u64,
        compress: Compression,
    ) -> WireResult<ObjectAttr> {
        if size > MAX_OBJECT_SIZE {
            return Err(WireError::new(
                Errno::FBig,
                format!("size {size} exceeds the object limit {MAX_OBJECT_SIZE}"),
            ));
        }
        let _life = self.lock_of(id).lifecycle.read();
        let punched = self.store.set_size(id, size, compress.wanted());
        let version = self.bump_version(id);
        punched?;
        let data_version = version?;
        let st = self.store.stat(id)?;
        Ok(attr(st, data_version))
    }

    pub(super) fn punch_range_blocking(
        &self,
        id: &ObjectId,
        offset: u64,
        len: u64,
    ) -> WireResult<ObjectAttr> {
        let end = offset.checked_add(len).ok_or_else(|| {
            WireError::new(
                Errno::Inval,
                format!("range of {len} bytes at {offset} overflows"),
            )
        })?;
        // Nothing lies past the largest object: punching there is punching nothing.
        let end = end.min(MAX_OBJECT_SIZE);
        let _life = self.lock_of(id).lifecycle.read();
        if offset < end {
            let Some(punched) = existing(self.store.punch(id, offset, end - offset)).transpose()
            else {
                return Ok(ObjectAttr::default());
            };
            // Bumped whatever the punch did: part of the range may be gone already.
            let version = self.bump_version(id);
            punched?;
            version?;
        }
        Ok(existing(self.attr_of(id))?.unwrap_or_default())
    }

    pub(super) fn seek_blocking(
        &self,
        id: &ObjectId,
        offset: u64,
        hole: bool,
    ) -> WireResult<Option<u64>> {
        let _life = self.lock_of(id).lifecycle.read();
        // Missing, or at or past the end: no more data, and the end itself is the hole.
        Ok(existing(self.store.seek(id, offset, hole))?
            .flatten()
            .or(hole.then_some(offset)))
    }

    pub(super) fn destroy_many_blocking(&self, ids: &[ObjectId]) -> WireResult<()> {
        // Every object is tried and every removal synced, whatever fails: the MDT sends
        // the whole batch again, and what is done stays done.
        let mut first_error = None;
        let mut removed = Vec::new();
        for id in ids {
            // Exclusive: no operation may hold (or cache) the object while it goes.
            let _life = self.lock_of(id).lifecycle.write();
            match self.store.remove(id) {
                Ok(true) => removed.push(*id),
                Ok(false) => {}
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        if let Err(e) = self.store.sync_removed(&removed) {
            first_error.get_or_insert(e);
        }
        first_error.map_or(Ok(()), |e| Err(e.into()))
    }

    pub(super) fn getattr_blocking(&self, id: &ObjectId) -> WireResult<ObjectAttr> {
        let _life = self.lock_of(id).lifecycle.read();
        Ok(existing(self.attr_of(id))?.unwrap_or_default())
    }

    /// The attributes of an existing object.
    fn attr_of(&self, id: &ObjectId) -> StoreResult<ObjectAttr> {
        let data_version = self.version_of(id)?;
        let st = self.store.stat(id)?;
        Ok(attr(st, data_version))
    }

    pub(super) fn sync_object_blocking(&self, id: &ObjectId) -> WireResult<()> {
        let _life = self.lock_of(id).lifecycle.read();
        // A missing object has nothing to make durable.
        existing(self.store.sync_object(id))?;
        Ok(())
    }
}
