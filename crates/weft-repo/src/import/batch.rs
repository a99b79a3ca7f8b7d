//! How an import groups entries into `ImportEntries` batches, and when a partial batch
//! may go: [`Batcher`] keeps one open batch per directory (full at [`BATCH_MAX`]);
//! [`Walk`] follows the listing through the key order and the HEADs in flight, and says
//! when a directory can get no more entries (the listing has left it for good, every
//! HEAD of it done), so that its batch goes at once instead of waiting for the end.
//!
//! Keys of one directory `D` are the keys `D/NAME` (NAME without `/`): in key order they
//! all lie within the run of keys starting with `D/`, so once a key outside that run is
//! listed, `D` is done. An unordered listing (a local directory) only makes batches
//! smaller: a batch closed too early is followed by another.

use super::{BATCH_MAX, Job};
use std::collections::{HashMap, HashSet, VecDeque};
use weft_proto::hsm::ImportEntry;

/// Entries gathered per directory until a batch is full (or must go early).
#[derive(Debug, Default)]
pub(super) struct Batcher {
    /// Partial batches by directory.
    open: HashMap<String, Vec<(u64, ImportEntry)>>,
    /// Jobs ready to send, oldest first.
    ready: VecDeque<Job>,
}

impl Batcher {
    /// Directory `dir` will get no more entries for now: its partial batch is ready.
    pub(super) fn close(&mut self, dir: &str) {
        if let Some(entries) = self.open.remove(dir) {
            self.ready.push_back(Job::Entries {
                dir: dir.to_string(),
                entries,
            });
        }
    }

    /// Adds a job: directories are ready at once, entries join their directory's batch.
    pub(super) fn add(&mut self, job: Job) {
        match job {
            Job::Mkdir { .. } => self.ready.push_back(job),
            Job::Entries { dir, entries } => {
                let batch = self.open.entry(dir.clone()).or_default();
                batch.extend(entries);
                if batch.len() >= BATCH_MAX {
                    let entries = self.open.remove(&dir).unwrap_or_default();
                    self.ready.push_back(Job::Entries { dir, entries });
                }
            }
        }
    }

    /// The next job to send: a full batch or directory; with `force`, partial batches
    /// too (all of them become ready).
    pub(super) fn take(&mut self, force: bool) -> Option<Job> {
        if self.ready.is_empty() && force {
            for (dir, entries) in self.open.drain() {
                self.ready.push_back(Job::Entries { dir, entries });
            }
        }
        self.ready.pop_front()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.open.is_empty() && self.ready.is_empty()
    }
}

/// The listing's place in the key order and the HEADs in flight, by directory.
#[derive(Debug, Default)]
pub(super) struct Walk {
    /// The directories the listing is within, outermost first (each holds the next).
    inside: Vec<String>,
    /// HEADs in flight per directory.
    heading: HashMap<String, usize>,
    /// Directories the listing has left whose HEADs are still in flight.
    left: HashSet<String>,
}

impl Walk {
    /// A key of directory `dir` is listed (its HEAD starts): answers the directories the
    /// listing has just left whose HEADs are all done; their batches are complete.
    pub(super) fn listed(&mut self, dir: &str) -> Vec<String> {
        let mut done = Vec::new();
        while let Some(top) = self.inside.last() {
            if within(dir, top) {
                break;
            }
            let Some(top) = self.inside.pop() else { break };
            if self.heading.contains_key(&top) {
                self.left.insert(top);
            } else {
                done.push(top);
            }
        }
        if self.inside.last().map(String::as_str) != Some(dir) {
            self.inside.push(dir.to_string());
        }
        self.left.remove(dir);
        *self.heading.entry(dir.to_string()).or_default() += 1;
        done
    }

    /// A HEAD of a key of `dir` is done: whether that completes `dir`'s batch (the
    /// listing had left it and no other HEAD of it is in flight).
    pub(super) fn headed(&mut self, dir: &str) -> bool {
        if let Some(n) = self.heading.get_mut(dir) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.heading.remove(dir);
            }
        }
        !self.heading.contains_key(dir) && self.left.remove(dir)
    }
}

/// Whether directory `dir` is `ancestor` or below it (`""` is the linked directory,
/// above everything).
fn within(dir: &str, ancestor: &str) -> bool {
    ancestor.is_empty()
        || dir == ancestor
        || dir
            .strip_prefix(ancestor)
            .is_some_and(|rest| rest.starts_with('/'))
}
