//! Grants: space an OST promises to one connection for its buffered writes.
//!
//! A client buffers writes before sending them; to be sure they will fit, it asks each OST
//! for a grant first. The OST counts every outstanding grant as used when it admits a write
//! from anyone else, a write from the holder uses up its grant, and a connection's grant
//! returns to the pool when the connection closes.

use parking_lot::Mutex;
use std::collections::HashMap;

/// Most bytes one connection may hold (a bound on what one client can pin).
pub const MAX_GRANT_PER_CONN: u64 = 4 << 30;

#[derive(Default)]
struct State {
    by_conn: HashMap<u64, u64>,
    total: u64,
}

/// The grants of one OST.
#[derive(Default)]
pub struct Grants {
    state: Mutex<State>,
}

impl Grants {
    /// Bytes `conn` holds.
    pub fn held(&self, conn: u64) -> u64 {
        self.state.lock().by_conn.get(&conn).copied().unwrap_or(0)
    }

    /// Bytes held by every connection.
    pub fn total(&self) -> u64 {
        self.state.lock().total
    }

    /// Grants `conn` up to `want` more bytes out of `free` (free space beyond the reserve,
    /// before grants); returns how many it granted.
    pub fn grant(&self, conn: u64, want: u64, free: u64) -> u64 {
        let mut s = self.state.lock();
        let unpromised = free.saturating_sub(s.total);
        let held = s.by_conn.get(&conn).copied().unwrap_or(0);
        let give = want
            .min(unpromised)
            .min(MAX_GRANT_PER_CONN.saturating_sub(held));
        s.total += give;
        *s.by_conn.entry(conn).or_insert(0) += give;
        give
    }

    /// Whether a write of `len` bytes from `conn` fits in `free` bytes: its own grant plus
    /// what nobody was promised.
    pub fn admits(&self, conn: u64, len: u64, free: u64) -> bool {
        let s = self.state.lock();
        let held = s.by_conn.get(&conn).copied().unwrap_or(0);
        held.saturating_add(free.saturating_sub(s.total)) >= len
    }

    /// Uses up to `len` bytes of `conn`'s grant (its data has landed).
    pub fn consume(&self, conn: u64, len: u64) {
        let mut s = self.state.lock();
        let Some(h) = s.by_conn.get_mut(&conn) else {
            return;
        };
        let used = (*h).min(len);
        *h -= used;
        if *h == 0 {
            s.by_conn.remove(&conn);
        }
        s.total -= used;
    }

    /// Returns `conn`'s grant to the pool (its connection closed).
    pub fn release(&self, conn: u64) {
        let mut s = self.state.lock();
        if let Some(h) = s.by_conn.remove(&conn) {
            s.total -= h;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_are_promised_once_and_counted_against_others() {
        let g = Grants::default();
        assert_eq!(g.grant(1, 60, 100), 60);
        assert_eq!(g.grant(2, 60, 100), 40, "only what nobody holds");
        assert_eq!(g.held(2), 40);
        assert!(
            !g.admits(3, 1, 100),
            "a third writer finds everything promised"
        );
        assert!(g.admits(1, 60, 100));
        g.consume(1, 50);
        assert_eq!((g.held(1), g.total()), (10, 50));
        // The data landed, so free space shrank by 50: client 1 may still write its 10.
        assert!(g.admits(1, 10, 50) && !g.admits(1, 11, 50));
        g.release(2);
        assert_eq!(g.total(), 10);
        assert!(g.admits(3, 40, 50));
    }
}
