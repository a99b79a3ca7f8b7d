//! One driver at a time for each cross-MDT intent (see [`crate::remote`]).
//!
//! An intent is driven by the request that made it, by the roll-forward at start, and by
//! every resend of the client's request that attaches to it, and these may overlap: a
//! restarted MDS rolls an intent forward while the client's resend attaches to it, or a
//! client resends over a new connection while its first request still waits for the other
//! MDT. The other MDT remembers an operation it did only until the coordinator, having
//! finished the intent, tells it to forget (`ForgetOps`); a second driver whose request
//! arrived after that would have it done twice (a link added or dropped twice). So a
//! driver first waits for the one before it, then goes on only if the intent is still
//! stored, else answers from what the first one recorded.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::OwnedMutexGuard;

type Slot = Arc<tokio::sync::Mutex<()>>;

/// The intents being driven in this process, by operation id.
#[derive(Default)]
pub(crate) struct Drivers {
    slots: Mutex<HashMap<u64, Slot>>,
}

/// The right to drive one intent, until dropped.
pub(crate) struct Driving<'a> {
    drivers: &'a Drivers,
    op: u64,
    slot: Slot,
    guard: Option<OwnedMutexGuard<()>>,
}

impl Drivers {
    /// Waits until no other task of this process drives intent `op`, and claims it.
    pub(crate) async fn claim(&self, op: u64) -> Driving<'_> {
        let slot = self.slots.lock().entry(op).or_default().clone();
        let mut driving = Driving {
            drivers: self,
            op,
            slot,
            guard: None,
        };
        driving.guard = Some(driving.slot.clone().lock_owned().await);
        driving
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.slots.lock().len()
    }
}

impl Drop for Driving<'_> {
    fn drop(&mut self) {
        self.guard = None;
        let mut slots = self.drivers.slots.lock();
        // Only the map and this claim hold the slot: nobody waits for it, so it goes
        // (claims clone it under the map's lock, so the count cannot grow meanwhile).
        if Arc::strong_count(&self.slot) == 2 {
            slots.remove(&self.op);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_second_claim_waits_for_the_first_and_slots_are_freed() {
        let drivers = Arc::new(Drivers::default());
        let first = drivers.claim(7).await;
        let other = drivers.claim(8).await;
        let waiting = {
            let drivers = drivers.clone();
            tokio::spawn(async move {
                let _second = drivers.claim(7).await;
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "the second claim waits");
        drop(first);
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("the second claim goes on once the first is dropped")
            .expect("no panic");
        assert_eq!(drivers.len(), 1, "only the claim of 8 is left");
        drop(other);
        assert_eq!(drivers.len(), 0);
    }
}
