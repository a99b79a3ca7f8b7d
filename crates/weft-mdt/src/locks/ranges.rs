//! The locks of one file in one table: ranges per owner, merged, split and converted as
//! Linux does, and the conflict rules between owners (see the parent module).

use super::*;

/// Who holds or waits for a lock: a kernel lock owner on one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Owner {
    /// The connection (its locks die with it).
    pub conn: u64,
    /// The client's lock owner.
    pub owner: u64,
}

/// The mode of a held lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Shared.
    Read,
    /// Exclusive.
    Write,
}

impl Mode {
    pub(super) fn of(typ: LockType) -> Option<Mode> {
        match typ {
            LockType::Read => Some(Mode::Read),
            LockType::Write => Some(Mode::Write),
            LockType::Unlock => None,
        }
    }

    pub(super) fn lock_type(self) -> LockType {
        match self {
            Mode::Read => LockType::Read,
            Mode::Write => LockType::Write,
        }
    }

    pub(super) fn conflicts(self, other: Mode) -> bool {
        self == Mode::Write || other == Mode::Write
    }
}

/// One held lock: `[start, end]`, inclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    /// Who holds it.
    pub owner: Owner,
    /// Read or write.
    pub mode: Mode,
    /// First byte.
    pub start: u64,
    /// Last byte (inclusive).
    pub end: u64,
    /// The process that last set it, for `F_GETLK`.
    pub pid: u32,
}

pub(super) fn overlaps(h: &Held, start: u64, end: u64) -> bool {
    h.start <= end && start <= h.end
}

/// Whether `h` overlaps `[start, end]` or touches it end to end.
pub(super) fn touches(h: &Held, start: u64, end: u64) -> bool {
    overlaps(h, start, end)
        || h.end.checked_add(1) == Some(start)
        || end.checked_add(1) == Some(h.start)
}

/// The locks of one kind on one file: the range logic, without waiting.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RangeLocks {
    pub(super) held: Vec<Held>,
}

impl RangeLocks {
    /// Every lock held, in no particular order.
    pub fn held(&self) -> &[Held] {
        &self.held
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// Locks of other owners that `mode` over `[start, end]` by `owner` conflicts with.
    pub(super) fn conflicts(
        &self,
        owner: Owner,
        mode: Mode,
        start: u64,
        end: u64,
    ) -> impl Iterator<Item = &Held> {
        self.held
            .iter()
            .filter(move |h| h.owner != owner && overlaps(h, start, end) && h.mode.conflicts(mode))
    }

    /// The conflicting lock that starts first, as `F_GETLK` reports it.
    pub fn first_conflict(&self, owner: Owner, mode: Mode, start: u64, end: u64) -> Option<Held> {
        self.conflicts(owner, mode, start, end)
            .min_by_key(|h| (h.start, h.end))
            .copied()
    }

    /// What `owner` would hold after setting `typ` over `[start, end]`: same-mode ranges
    /// that overlap or touch merge into the new one, everything else of the owner's inside
    /// the range is cut away (split when the range falls in its middle).
    pub fn applied(
        &self,
        owner: Owner,
        typ: LockType,
        start: u64,
        end: u64,
        pid: u32,
    ) -> Vec<Held> {
        let mode = Mode::of(typ);
        let mut mine: Vec<Held> = self
            .held
            .iter()
            .filter(|h| h.owner == owner)
            .copied()
            .collect();
        let (mut s, mut e) = (start, end);
        if let Some(mode) = mode {
            // Absorb until nothing more touches (one pass suffices while the owner's
            // same-mode ranges never touch each other; looping keeps it true regardless).
            loop {
                let before = mine.len();
                mine.retain(|h| {
                    if h.mode == mode && touches(h, s, e) {
                        s = s.min(h.start);
                        e = e.max(h.end);
                        false
                    } else {
                        true
                    }
                });
                if mine.len() == before {
                    break;
                }
            }
        }
        let mut out = Vec::with_capacity(mine.len() + 2);
        for h in mine {
            if !overlaps(&h, s, e) {
                out.push(h);
                continue;
            }
            if h.start < s {
                out.push(Held { end: s - 1, ..h });
            }
            if h.end > e {
                out.push(Held { start: e + 1, ..h });
            }
        }
        if let Some(mode) = mode {
            out.push(Held {
                owner,
                mode,
                start: s,
                end: e,
                pid,
            });
        }
        out
    }

    /// How many records `owner` holds.
    pub fn count_of(&self, owner: Owner) -> usize {
        self.held.iter().filter(|h| h.owner == owner).count()
    }

    /// Replaces `owner`'s records with `mine` (from [`RangeLocks::applied`]).
    pub fn replace(&mut self, owner: Owner, mine: Vec<Held>) {
        self.held.retain(|h| h.owner != owner);
        self.held.extend(mine);
    }

    /// Sets `typ` over `[start, end]` for `owner`, ignoring conflicts and limits (the
    /// caller checked them).
    pub fn set(&mut self, owner: Owner, typ: LockType, start: u64, end: u64, pid: u32) {
        let mine = self.applied(owner, typ, start, end, pid);
        self.replace(owner, mine);
    }

    /// Drops every lock matching `pred`; returns how many went, per connection.
    pub(super) fn remove_where(&mut self, pred: impl Fn(&Held) -> bool) -> HashMap<u64, usize> {
        let mut gone = HashMap::new();
        self.held.retain(|h| {
            if pred(h) {
                *gone.entry(h.owner.conn).or_insert(0) += 1;
                false
            } else {
                true
            }
        });
        gone
    }
}
