//! A semaphore whose capacity follows a run-time knob: the client's bounds on dirty data,
//! read-ahead and RPCs in flight all change when their parameter is set.

use parking_lot::Mutex;
use std::sync::Arc;
use tokio::sync::Semaphore;

/// Permits up to a capacity that can grow or shrink while permits are out.
pub struct Budget {
    sem: Arc<Semaphore>,
    capacity: Mutex<u64>,
}

impl Budget {
    /// A budget of `capacity` permits.
    pub fn new(capacity: u64) -> Self {
        Self {
            sem: Arc::new(Semaphore::new(capacity as usize)),
            capacity: Mutex::new(capacity),
        }
    }

    /// Moves the capacity toward `want`. Shrinking takes only permits that are free; the
    /// rest are taken on later calls, as holders give them back.
    pub fn follow(&self, want: u64) {
        let mut cap = self.capacity.lock();
        if want > *cap {
            self.sem.add_permits((want - *cap) as usize);
            *cap = want;
        } else if want < *cap {
            *cap -= self.sem.forget_permits((*cap - want) as usize) as u64;
        }
    }

    /// The semaphore itself.
    pub fn semaphore(&self) -> &Arc<Semaphore> {
        &self.sem
    }

    /// The current capacity.
    pub fn capacity(&self) -> u64 {
        *self.capacity.lock()
    }

    /// Permits held now.
    pub fn in_use(&self) -> u64 {
        let cap = self.capacity.lock();
        cap.saturating_sub(self.sem.available_permits() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_follows_the_knob_even_with_permits_out() {
        let b = Budget::new(10);
        let held = b.semaphore().clone().try_acquire_many_owned(8).unwrap();
        b.follow(4);
        assert_eq!(b.capacity(), 8, "only the 2 free permits could go");
        drop(held);
        b.follow(4);
        assert_eq!(b.capacity(), 4);
        assert_eq!(b.semaphore().available_permits(), 4);
        b.follow(6);
        assert_eq!(b.semaphore().available_permits(), 6);
    }
}
