//! The checkpoint: which listed objects are settled, and the greatest key up to which
//! every one is.

use std::collections::VecDeque;
/// Listed objects in order, and which are settled: the checkpoint is the last key of the
/// settled run at the front.
#[derive(Debug, Default)]
pub(super) struct Tracker {
    /// Sequence number of the window's front.
    base: u64,
    /// Keys from `base` on, and whether each is settled.
    window: VecDeque<(String, bool)>,
    /// The last key of the settled run popped from the front.
    checkpoint: Option<String>,
}

impl Tracker {
    /// Records a listed key; answers its sequence number.
    pub(super) fn push(&mut self, key: &str) -> u64 {
        self.window.push_back((key.to_string(), false));
        self.base + self.window.len() as u64 - 1
    }

    /// Marks `seq` settled, moving the checkpoint over the settled front.
    pub(super) fn settle(&mut self, seq: u64) {
        let Some(i) = seq.checked_sub(self.base) else {
            return;
        };
        if let Some(slot) = usize::try_from(i).ok().and_then(|i| self.window.get_mut(i)) {
            slot.1 = true;
        }
        while self.window.front().is_some_and(|(_, done)| *done) {
            if let Some((key, _)) = self.window.pop_front() {
                self.checkpoint = Some(key);
                self.base += 1;
            }
        }
    }

    /// Objects listed and not settled (and those behind them).
    pub(super) fn pending(&self) -> usize {
        self.window.len()
    }

    pub(super) fn checkpoint(&self) -> Option<String> {
        self.checkpoint.clone()
    }
}
