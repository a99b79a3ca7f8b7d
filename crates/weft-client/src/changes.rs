//! What this client changes in the namespace: a count that moves at the start and at the
//! end of every request that may change names or attributes, and the attributes of the
//! directories its changes were made in, as the MDT returned them with the change.
//!
//! The count tells readers whether what they read is still as current as the MDT's
//! answer was (statahead). The directory attributes answer the kernel's GETATTR of a
//! directory right after a create or unlink in it (the kernel drops the directory's
//! attributes after every change there, and needs them again for the next path walk): one
//! round trip fewer per file created or removed. They are used once, only while nothing
//! else changed through this client since, and within the age the caller allows (the
//! mount's attribute timeout: what a kernel-cached copy could be as old as).

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use weft_proto::Fid;
use weft_proto::mdt::Attr;

/// Directories whose attributes are kept at most; more are simply not kept.
const MAX_DIRS: usize = 256;

/// The change count and the directories' attributes (see the module docs).
#[derive(Default)]
pub struct Changes {
    count: AtomicU64,
    dirs: Mutex<HashMap<Fid, ChangedDir>>,
}

struct ChangedDir {
    attr: Attr,
    /// The count at which they are current: the one right after their change ended.
    stamp: u64,
    at: Instant,
}

/// A change in flight: bumps the count again when dropped, whichever way it ends.
pub(crate) struct Change<'a> {
    changes: &'a Changes,
    /// The count right after this change's start.
    began: u64,
}

impl Drop for Change<'_> {
    fn drop(&mut self) {
        self.changes.count.fetch_add(1, Ordering::AcqRel);
    }
}

impl Change<'_> {
    /// Keeps `dir`, the attributes of the directory this change was made in as the MDT
    /// returned them, if no other change of this client started or ended meanwhile
    /// (otherwise they may already be out of date, or about to be).
    pub(crate) fn made_in(&self, dir: &Attr) {
        let mut dirs = self.changes.lock();
        if self.changes.count() != self.began {
            return;
        }
        if dirs.len() >= MAX_DIRS {
            dirs.clear();
        }
        dirs.insert(
            dir.fid,
            ChangedDir {
                attr: dir.clone(),
                stamp: self.began + 1,
                at: Instant::now(),
            },
        );
    }
}

impl Changes {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Fid, ChangedDir>> {
        self.dirs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The count: it moves whenever a change starts or ends.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Acquire)
    }

    /// Starts a change.
    pub(crate) fn begin(&self) -> Change<'_> {
        let began = self.count.fetch_add(1, Ordering::AcqRel) + 1;
        Change {
            changes: self,
            began,
        }
    }

    /// The attributes of directory `fid` as this client's last change in it left them,
    /// taken (so used once): only if nothing changed through this client since and they
    /// are at most `max_age` old.
    pub fn take_dir(&self, fid: Fid, max_age: Duration) -> Option<Attr> {
        let d = self.lock().remove(&fid)?;
        (d.stamp == self.count() && d.at.elapsed() <= max_age).then_some(d.attr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_attrs::{attr, fid};
    use weft_proto::mdt::FileKind;

    fn dir(oid: u32, nlink: u32) -> Attr {
        Attr {
            nlink,
            ..attr(fid(oid), FileKind::Directory)
        }
    }

    const AGE: Duration = Duration::from_secs(60);

    #[test]
    fn a_directory_changed_alone_is_answered_once() {
        let c = Changes::default();
        {
            let change = c.begin();
            change.made_in(&dir(1, 3));
        }
        assert_eq!(c.take_dir(dir(1, 0).fid, AGE).map(|a| a.nlink), Some(3));
        assert_eq!(c.take_dir(dir(1, 0).fid, AGE), None, "used once");
    }

    #[test]
    fn any_other_change_voids_it() {
        let c = Changes::default();
        // A later change, whatever it touched.
        {
            let change = c.begin();
            change.made_in(&dir(1, 3));
        }
        drop(c.begin());
        assert_eq!(c.take_dir(dir(1, 0).fid, AGE), None);

        // A change that overlapped it (started before it ended): not even kept.
        let first = c.begin();
        let second = c.begin();
        first.made_in(&dir(2, 3));
        drop(first);
        second.made_in(&dir(3, 3));
        drop(second);
        assert_eq!(c.take_dir(dir(2, 0).fid, AGE), None);
        assert_eq!(c.take_dir(dir(3, 0).fid, AGE), None);

        // Too old for the caller.
        {
            let change = c.begin();
            change.made_in(&dir(4, 3));
        }
        assert_eq!(c.take_dir(dir(4, 0).fid, Duration::ZERO), None);
    }
}
