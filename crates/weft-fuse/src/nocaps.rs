//! Files known to have no `security.capability` attribute.
//!
//! Before every `write(2)` to a file, the kernel asks the file system for the file's
//! `security.capability` attribute (to remove it, as a write must); a FUSE file system
//! that does not take that job over (`FUSE_HANDLE_KILLPRIV_V2`) gets one GETXATTR per
//! write call, each a round trip to the MDT. The answer is nearly always "none", so the
//! mount remembers it for an inode for as long as it lets the kernel trust attributes
//! (`attr_timeout`) and forgets it at once when this mount sets or removes an extended
//! attribute of that inode. Another client's `setcap` is seen after at most that long,
//! as any other attribute change of another client is.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The attribute whose absence is remembered.
pub const CAPABILITY: &[u8] = b"security.capability";

/// Entries kept before expired ones are swept.
const SWEEP_AT: usize = 65_536;

/// Inodes seen without `security.capability`, each until a deadline.
#[derive(Debug)]
pub struct NoCaps {
    ttl: Duration,
    until: Mutex<HashMap<u64, Instant>>,
}

impl NoCaps {
    /// Remembers absences for `ttl` (no caching when it is zero).
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            until: Mutex::new(HashMap::new()),
        }
    }

    /// Whether `ino` is known, still, to have no `security.capability`.
    pub fn known_absent(&self, ino: u64) -> bool {
        self.until
            .lock()
            .get(&ino)
            .is_some_and(|&deadline| Instant::now() < deadline)
    }

    /// The MDT said `ino` has no `security.capability`.
    pub fn absent(&self, ino: u64) {
        if self.ttl.is_zero() {
            return;
        }
        let now = Instant::now();
        let mut map = self.until.lock();
        if map.len() >= SWEEP_AT {
            map.retain(|_, deadline| *deadline > now);
            if map.len() >= SWEEP_AT {
                map.clear();
            }
        }
        map.insert(ino, now + self.ttl);
    }

    /// This mount is changing `ino`'s extended attributes: ask the MDT again.
    pub fn forget(&self, ino: u64) {
        self.until.lock().remove(&ino);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_until_forgotten_or_expired() {
        let c = NoCaps::new(Duration::from_secs(60));
        assert!(!c.known_absent(7));
        c.absent(7);
        assert!(c.known_absent(7));
        assert!(!c.known_absent(8));
        c.forget(7);
        assert!(!c.known_absent(7));

        let short = NoCaps::new(Duration::from_millis(1));
        short.absent(7);
        std::thread::sleep(Duration::from_millis(5));
        assert!(!short.known_absent(7));

        let off = NoCaps::new(Duration::ZERO);
        off.absent(7);
        assert!(!off.known_absent(7));
    }

    #[test]
    fn stays_bounded() {
        let c = NoCaps::new(Duration::from_secs(60));
        for ino in 0..(SWEEP_AT as u64 + 10) {
            c.absent(ino);
        }
        assert!(c.until.lock().len() <= SWEEP_AT);
        assert!(c.known_absent(SWEEP_AT as u64 + 9));
    }
}
