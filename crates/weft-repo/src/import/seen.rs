//! What a repository's auto import already settled: each object's fingerprint (entity
//! tag, size, modification time) as of the last sweep that created, updated or found it
//! unchanged. A sweep skips a listed object whose fingerprint has not moved since — no
//! HEAD, no MDT request — so the steady-state cost of a sweep is its listing, not a HEAD
//! per object (FSx imports on change events, not by re-reading every object either; as
//! there, a file deleted here is not brought back until its object changes).
//!
//! Kept in memory by the repository agent, per repository, for the life of the agent
//! (its first sweep HEADs everything once). Bounded by [`SEEN_MAX`] objects: beyond, the
//! objects not remembered are checked every sweep as before.

use object_store::ObjectMeta;
use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};

/// Most objects remembered per repository (about 40 bytes each).
pub const SEEN_MAX: usize = 1 << 20;

/// An object's version as the listing shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Fingerprint {
    tag: u64,
    size: u64,
    modified_ns: i64,
}

impl Fingerprint {
    /// The key's hash and the version of the listed object `meta`.
    pub(super) fn of(meta: &ObjectMeta) -> (u64, Fingerprint) {
        let fp = Fingerprint {
            tag: hash(meta.e_tag.as_deref().unwrap_or("")),
            size: meta.size,
            modified_ns: meta.last_modified.timestamp_nanos_opt().unwrap_or(i64::MAX),
        };
        (hash(meta.location.as_ref()), fp)
    }
}

fn hash(s: &str) -> u64 {
    let mut h = DefaultHasher::new();
    s.hash(&mut h);
    h.finish()
}

/// The fingerprints of the objects settled by earlier sweeps, by key hash.
#[derive(Debug, Default)]
pub struct Seen {
    map: HashMap<u64, Fingerprint>,
}

impl Seen {
    /// Whether the object was settled at this version already.
    pub(super) fn unchanged(&self, key: u64, fp: Fingerprint) -> bool {
        self.map.get(&key) == Some(&fp)
    }

    /// Remembers that the object is settled at this version (while there is room).
    pub(super) fn settled(&mut self, key: u64, fp: Fingerprint) {
        if self.map.len() < SEEN_MAX || self.map.contains_key(&key) {
            self.map.insert(key, fp);
        }
    }

    /// Forgets an object (its import failed or conflicted: look again next sweep).
    pub(super) fn forget(&mut self, key: u64) {
        self.map.remove(&key);
    }

    /// Objects remembered.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::path::Path;

    fn meta(key: &str, tag: &str, size: u64, secs: u64) -> ObjectMeta {
        ObjectMeta {
            location: Path::from(key),
            last_modified: (std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs)).into(),
            size,
            e_tag: Some(tag.into()),
            version: None,
        }
    }

    #[test]
    fn an_object_is_skipped_only_at_the_version_settled() {
        let mut seen = Seen::default();
        let (k, fp) = Fingerprint::of(&meta("a/b", "t1", 10, 100));
        assert!(!seen.unchanged(k, fp));
        seen.settled(k, fp);
        assert!(seen.unchanged(k, fp));
        for changed in [
            meta("a/b", "t2", 10, 100),
            meta("a/b", "t1", 11, 100),
            meta("a/b", "t1", 10, 101),
        ] {
            let (k2, fp2) = Fingerprint::of(&changed);
            assert_eq!(k2, k);
            assert!(!seen.unchanged(k2, fp2), "{changed:?}");
        }
        let (other, ofp) = Fingerprint::of(&meta("a/c", "t1", 10, 100));
        assert!(!seen.unchanged(other, ofp));
        seen.forget(k);
        assert!(!seen.unchanged(k, fp) && seen.is_empty());
    }
}
