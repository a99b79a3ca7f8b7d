//! Data versions: an OST-wide counter that never goes backwards, even across crashes.
//!
//! Versions are handed out from a block reserved durably in the store
//! ([`ObjectStore::set_version_reserve`]; `dv_reserve.json` in a data directory): before any
//! version of a block is used, the block's end is stored, so after a crash the counter
//! resumes at the recorded end, above everything handed out before. Each object carries its
//! current version ([`ObjectStore::version`]; the `user.weft.dv` extended attribute).
//!
//! The value an object was given before the target last started (below the *floor*) is not
//! trusted: a crash may have kept new data but lost the attribute update, or the reverse.
//! Such an object gets a fresh version the first time it is looked at, so a client that
//! cached data under an old version always sees a change after a crash.

use crate::store::{ObjectStore, StoreError, StoreResult};
use parking_lot::Mutex;

/// How many versions one durable reservation covers.
pub const RESERVE_BLOCK: u64 = 1_000_000;
/// The first version ever handed out (0 means "no object").
pub(crate) const FIRST_VERSION: u64 = 1;

#[derive(Debug)]
struct Counter {
    next: u64,
    reserved_end: u64,
}

/// The OST-wide version allocator.
#[derive(Debug)]
pub(crate) struct DataVersions {
    /// Versions below this were handed out before this start and are not trusted.
    floor: u64,
    counter: Mutex<Counter>,
}

fn exhausted() -> StoreError {
    StoreError::Corrupt {
        what: "data version reservation".into(),
        reason: "data version counter exhausted".into(),
    }
}

impl DataVersions {
    /// Loads the store's reservation and reserves the first block of this run.
    pub(crate) fn open(store: &dyn ObjectStore) -> StoreResult<Self> {
        let floor = store.version_reserve()?.max(FIRST_VERSION);
        let reserved_end = floor.checked_add(RESERVE_BLOCK).ok_or_else(exhausted)?;
        store.set_version_reserve(reserved_end)?;
        Ok(Self {
            floor,
            counter: Mutex::new(Counter {
                next: floor,
                reserved_end,
            }),
        })
    }

    /// Hands out a new version, greater than every version handed out before; reserves
    /// the next block in `store` when this one is used up.
    pub(crate) fn next(&self, store: &dyn ObjectStore) -> StoreResult<u64> {
        let mut c = self.counter.lock();
        if c.next >= c.reserved_end {
            let end = c.next.checked_add(RESERVE_BLOCK).ok_or_else(exhausted)?;
            store.set_version_reserve(end)?;
            c.reserved_end = end;
        }
        let v = c.next;
        c.next += 1;
        Ok(v)
    }

    /// Whether `v` was handed out during this run (and so can be trusted).
    pub(crate) fn is_current(&self, v: u64) -> bool {
        v >= self.floor
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::memory::MemoryStore;

    #[test]
    fn versions_resume_above_everything_handed_out() {
        let store = MemoryStore::new();
        let a = DataVersions::open(&store).unwrap();
        let mut last = 0;
        for _ in 0..10 {
            let v = a.next(&store).unwrap();
            assert!(v > last);
            last = v;
        }
        assert!(a.is_current(last));
        // A crash: no clean shutdown, the next run must still start above `last`.
        let b = DataVersions::open(&store).unwrap();
        let v = b.next(&store).unwrap();
        assert!(v > last);
        assert!(!b.is_current(last));
    }

    #[test]
    fn crossing_a_block_reserves_the_next_durably() {
        let store = MemoryStore::new();
        let a = DataVersions::open(&store).unwrap();
        {
            let mut c = a.counter.lock();
            c.next = c.reserved_end;
        }
        let v = a.next(&store).unwrap();
        let b = DataVersions::open(&store).unwrap();
        assert!(b.next(&store).unwrap() > v);
    }
}
