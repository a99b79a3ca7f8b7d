//! The end of a file as every open handle of it in one client sees it.
//!
//! A process may hold a file open several times (and the kernel keeps a handle alive for
//! as long as a mapping of it is): a write through one handle moves the end of the file
//! for reads through the others, and a truncate through one cuts it for all. One shared
//! size per file per client, rather than one per handle kept in step by copying, leaves
//! no moment in which a handle reads with an end another has already moved (a read that
//! stops short inside a file makes the kernel take that point for the end of the file).

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use weft_proto::Fid;

/// The size of one file, shared by its open handles in this client.
#[derive(Debug)]
pub(crate) struct OpenSize(AtomicU64);

impl OpenSize {
    /// The size now.
    pub(crate) fn get(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    /// A write ended at `end`: the file is at least that long.
    pub(crate) fn grow(&self, end: u64) {
        self.0.fetch_max(end, Ordering::AcqRel);
    }

    /// A truncate (here or, as learnt, elsewhere) set the size.
    pub(crate) fn set(&self, size: u64) {
        self.0.store(size, Ordering::Release);
    }
}

/// The shared sizes of the files this client has open, by FID.
#[derive(Debug, Default)]
pub(crate) struct OpenSizes(Mutex<HashMap<Fid, Weak<OpenSize>>>);

impl OpenSizes {
    /// The size a new handle of `fid` shares, given the size the open found (`at_open`):
    /// that size if no handle of the file is open here or the open truncated the file,
    /// else the larger of it and the size the open handles know (they may hold writes not
    /// yet on the OSTs).
    pub(crate) fn join(&self, fid: Fid, at_open: u64, truncated: bool) -> Arc<OpenSize> {
        let mut map = self.0.lock();
        if let Some(size) = map.get(&fid).and_then(Weak::upgrade) {
            if truncated {
                size.set(at_open);
            } else {
                size.grow(at_open);
            }
            return size;
        }
        let size = Arc::new(OpenSize(AtomicU64::new(at_open)));
        map.insert(fid, Arc::downgrade(&size));
        size
    }

    /// A truncate by path set `fid`'s size: its open handles here follow.
    pub(crate) fn truncated(&self, fid: Fid, size: u64) {
        if let Some(s) = self.0.lock().get(&fid).and_then(Weak::upgrade) {
            s.set(size);
        }
    }

    /// Forgets `fid`'s entry when `size`, held by a handle being dropped, is its last
    /// holder.
    pub(crate) fn leave(&self, fid: Fid, size: &Arc<OpenSize>) {
        let mut map = self.0.lock();
        // Under the map's lock no other handle can join meanwhile.
        if Arc::strong_count(size) == 1 {
            map.remove(&fid);
        }
    }

    /// Files with an entry (for tests).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.0.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_of_one_file_share_its_size_until_the_last_leaves() {
        let sizes = OpenSizes::default();
        let a = sizes.join(Fid::ROOT, 100, false);
        let b = sizes.join(Fid::ROOT, 50, false);
        assert_eq!(
            b.get(),
            100,
            "a later open keeps what the open handles know"
        );
        a.grow(300);
        assert_eq!(b.get(), 300);
        b.set(10);
        assert_eq!(a.get(), 10);
        let c = sizes.join(Fid::ROOT, 0, true);
        assert_eq!(a.get(), 0, "an open that truncates sets the size for all");
        for s in [a, b] {
            sizes.leave(Fid::ROOT, &s);
            assert_eq!(sizes.len(), 1);
        }
        sizes.leave(Fid::ROOT, &c);
        assert_eq!(sizes.len(), 0);
        assert_eq!(sizes.join(Fid::ROOT, 7, false).get(), 7);
    }
}
