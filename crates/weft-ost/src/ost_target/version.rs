//! Each object's data version as the target manages it: read from the store, replaced
//! when it predates this start, and moved on after every change, under the object's
//! version lock so it only ever increases (see [`crate::dataversion`]).

use super::Ost;
use crate::store::StoreResult;
use weft_proto::ObjectId;

impl Ost {
    /// The object's current data version; one given before this start is replaced by a
    /// fresh one.
    pub(super) fn version_of(&self, id: &ObjectId) -> StoreResult<u64> {
        let current = |v: &u64| self.versions.is_current(*v);
        if let Some(v) = self.store.version(id)?.filter(current) {
            return Ok(v);
        }
        let _g = self.lock_of(id).version.lock();
        // Another request may have refreshed it while we waited.
        if let Some(v) = self.store.version(id)?.filter(current) {
            return Ok(v);
        }
        self.assign_version(id)
    }

    /// Gives the object a new data version after a change.
    pub(super) fn bump_version(&self, id: &ObjectId) -> StoreResult<u64> {
        let _g = self.lock_of(id).version.lock();
        self.assign_version(id)
    }

    fn assign_version(&self, id: &ObjectId) -> StoreResult<u64> {
        let v = self.versions.next(&*self.store)?;
        self.store.set_version(id, v)?;
        Ok(v)
    }
}
