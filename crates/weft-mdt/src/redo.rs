//! The redo log: what commits made without an fsync changed, written before they are
//! answered, so that a crash of the MDT process loses nothing it acknowledged.
//!
//! # Why
//! An fsync costs this MDT's disk about as much as the rest of a create put together.
//! Like a local file system (ext4 commits its journal every few seconds, and `fsync`
//! forces it), the commit thread commits ordinary namespace changes to redb with
//! `Durability::None`, which only redb's memory holds, and makes them durable in one fsync
//! later: after [`MAX_DEFERRED`] such commits or [`MAX_LOG_BYTES`] of log, every [`COMMIT_INTERVAL`], when a client
//! asks (`MdtRequest::Sync`, sent by `fsync(2)` and `fsync` of a directory) and before
//! anything leaves the MDT that depends on them (a cross-MDT step, object destroys).
//!
//! # What it holds
//! Every such commit appends one frame with the exact key/value writes and removals its
//! transaction made in each table (this module's [`WTable`] records them), with the
//! commit's log sequence number (LSN), before any of its replies is sent. The write is a
//! plain `write(2)`: the page cache keeps it across a crash of the process. Each commit
//! also stores its LSN in the meta table, so the last durable commit says which frames it
//! already contains; after a durable commit the log is emptied.
//!
//! # Recovery
//! At open, redb is back at its last durable commit; the frames with a greater LSN are
//! applied again, in order, in the startup transaction. A frame cut short or failing its
//! checksum ends the log (what follows it was never made durable: a power failure loses
//! at most the changes since the last durable commit, like a local file system).
//!
//! Frame: `len: u32 LE`, `crc32c(body): u32 LE`, body = `lsn: u64 LE`, then per table
//! with changes `table id: u8`, `len: u32 LE`, changes; a change is `1`, key length
//! (`u32 LE`), key, value length, value (insert) or `0`, key length, key (remove).

use crate::error::StoreError;
use crate::store::{self, Def};
use redb::{AccessGuard, ReadableTable, ReadableTableMetadata, StorageError, Table, TableStats};
use redb::{Range, WriteTransaction};
use std::borrow::Borrow;
use std::cell::OnceCell;
use std::fs::File;
use std::io::{Read, Write};
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The log's file name in the target's data directory.
pub const REDO_FILE: &str = "mdt.redo";

/// Commits in a row made without an fsync after which the next one is made durable. One
/// durable commit costs this VM's disk about a millisecond and a half: every 64 commits
/// (the first bound) it was a fifth of a create's service time; [`COMMIT_INTERVAL`]
/// bounds what a power failure loses either way.
pub(crate) const MAX_DEFERRED: u32 = 4096;

/// Bytes of frames after which the next commit is made durable: bounds the log (and the
/// replay at the next start) when commits carry large values (xattrs, layouts).
pub(crate) const MAX_LOG_BYTES: u64 = 16 << 20;

/// Longest time a commit made without an fsync waits for one.
pub const COMMIT_INTERVAL: Duration = Duration::from_secs(1);

/// The key in [`store::META`] of the LSN of the last commit (8 bytes, big-endian).
const LSN_KEY: &[u8] = b"redo_lsn";

/// Declares every table a [`WTable`] can record changes of, each once with its id in
/// redo-log frames: the constants of [`id`] and the list [`TABLES`].
macro_rules! redo_tables {
    ($($name:ident = $id:literal => $def:path,)*) => {
        /// The id of each table in redo-log frames. Ids are on disk: never change or reuse
        /// one (`table_ids_are_pinned`); a new table takes the next free id.
        pub(crate) mod id {
            $(
                #[doc = concat!("The id of [`", stringify!($def), "`].")]
                pub(crate) const $name: u8 = $id;
            )*
        }

        /// Every table with its redo-log id.
        pub(crate) const TABLES: &[(u8, Def)] = &[$(($id, $def)),*];
    };
}

redo_tables! {
    INODES = 0 => store::INODES,
    DIRENTS = 1 => store::DIRENTS,
    XATTRS = 2 => store::XATTRS,
    ORPHANS = 3 => store::ORPHANS,
    DESTROY_LOG = 4 => store::DESTROY_LOG,
    REPLIES = 5 => store::REPLIES,
    INTENTS = 6 => store::INTENTS,
    REMOTE_OPS = 7 => store::REMOTE_OPS,
    REMOTE_DIRS = 8 => store::REMOTE_DIRS,
    DIR_STRIPES = 9 => store::DIR_STRIPES,
    DIR_DEFAULTS = 10 => store::DIR_DEFAULTS,
    RENAME_LOCK = 11 => store::RENAME_LOCK,
    FROZEN = 12 => store::FROZEN,
    META = 13 => store::META,
}

/// The table with redo-log id `id`.
fn table_of(id: u8) -> Option<Def> {
    TABLES.iter().find(|(i, _)| *i == id).map(|(_, def)| *def)
}

const PUT: u8 = 1;
const REMOVE: u8 = 0;
const HEADER: usize = 8;

type Bytes = &'static [u8];

/// A byte-keyed table of the batch's write transaction that records every insert and
/// removal, for the redo log. Reads go through [`ReadableTable`] as on a redb table.
///
/// The redb table is opened at first use: a transaction pays for opening (and, at commit,
/// for looking over) only the tables it touches, a few of the fourteen for most operations.
pub(crate) struct WTable<'t> {
    txn: &'t WriteTransaction,
    def: Def,
    table: OnceCell<Table<'t, Bytes, Bytes>>,
    id: u8,
    changes: Vec<u8>,
}

impl<'t> WTable<'t> {
    /// The table with redo-log id `id` (see [`id`]) in `txn` (opened when first used).
    pub fn open(txn: &'t WriteTransaction, id: u8) -> Result<Self, StoreError> {
        let def = table_of(id).ok_or(StoreError::Corrupt {
            table: "(redo)",
            message: format!("no table with id {id}"),
        })?;
        Ok(Self {
            txn,
            def,
            table: OnceCell::new(),
            id,
            changes: Vec::new(),
        })
    }

    /// The redb table, opened now if it is not yet.
    fn table(&self) -> Result<&Table<'t, Bytes, Bytes>, StorageError> {
        if let Some(t) = self.table.get() {
            return Ok(t);
        }
        let opened = self.txn.open_table(self.def).map_err(|e| match e {
            redb::TableError::Storage(e) => e,
            other => StorageError::Corrupted(format!("opening a table: {other}")),
        })?;
        Ok(self.table.get_or_init(|| opened))
    }

    /// The redb table for a change, opened now if it is not yet.
    fn table_mut(&mut self) -> Result<&mut Table<'t, Bytes, Bytes>, StorageError> {
        self.table()?;
        self.table
            .get_mut()
            .ok_or_else(|| StorageError::Corrupted("a table opened just now is gone".into()))
    }

    /// Inserts or replaces `key`, returning the old value.
    pub fn insert(
        &mut self,
        key: &[u8],
        value: &[u8],
    ) -> Result<Option<AccessGuard<'_, Bytes>>, StorageError> {
        self.changes.push(PUT);
        put_bytes(&mut self.changes, key);
        put_bytes(&mut self.changes, value);
        self.table_mut()?.insert(key, value)
    }

    /// Removes `key`, returning its value.
    pub fn remove(&mut self, key: &[u8]) -> Result<Option<AccessGuard<'_, Bytes>>, StorageError> {
        self.changes.push(REMOVE);
        put_bytes(&mut self.changes, key);
        self.table_mut()?.remove(key)
    }

    /// Appends this table's recorded changes to a frame body and forgets them.
    fn drain_into(&mut self, body: &mut Vec<u8>) {
        if self.changes.is_empty() {
            return;
        }
        body.push(self.id);
        put_bytes(body, &self.changes);
        self.changes.clear();
    }

    /// Applies recorded changes (a frame's part for this table).
    fn apply(&mut self, mut changes: &[u8]) -> Result<(), StoreError> {
        while let Some((&op, rest)) = changes.split_first() {
            let (key, rest) = take_bytes(rest)?;
            changes = match op {
                PUT => {
                    let (value, rest) = take_bytes(rest)?;
                    self.insert(key, value)?;
                    rest
                }
                REMOVE => {
                    self.remove(key)?;
                    rest
                }
                _ => return Err(corrupt(format!("unknown change kind {op}"))),
            };
        }
        Ok(())
    }
}

impl ReadableTableMetadata for WTable<'_> {
    fn stats(&self) -> redb::Result<TableStats> {
        self.table()?.stats()
    }

    fn len(&self) -> redb::Result<u64> {
        self.table()?.len()
    }
}

impl ReadableTable<Bytes, Bytes> for WTable<'_> {
    fn get<'a>(&self, key: impl Borrow<&'a [u8]>) -> redb::Result<Option<AccessGuard<'_, Bytes>>> {
        self.table()?.get(key)
    }

    fn range<'a, KR>(
        &self,
        range: impl RangeBounds<KR> + 'a,
    ) -> redb::Result<Range<'_, Bytes, Bytes>>
    where
        KR: Borrow<&'a [u8]> + 'a,
    {
        self.table()?.range(range)
    }

    fn first(&self) -> redb::Result<Option<(AccessGuard<'_, Bytes>, AccessGuard<'_, Bytes>)>> {
        self.table()?.first()
    }

    fn last(&self) -> redb::Result<Option<(AccessGuard<'_, Bytes>, AccessGuard<'_, Bytes>)>> {
        self.table()?.last()
    }
}

/// Collects the recorded changes of `tables` into one frame body for `lsn` (`None` if
/// nothing changed), forgetting them.
pub(crate) fn frame_body<'a, 't: 'a>(
    lsn: u64,
    tables: impl IntoIterator<Item = &'a mut WTable<'t>>,
) -> Option<Vec<u8>> {
    let mut body = lsn.to_le_bytes().to_vec();
    for t in tables {
        t.drain_into(&mut body);
    }
    (body.len() > HEADER).then_some(body)
}

/// Records `lsn` as the LSN of the transaction being built.
pub(crate) fn set_lsn(meta: &mut WTable<'_>, lsn: u64) -> Result<(), StorageError> {
    meta.insert(LSN_KEY, &lsn.to_be_bytes()).map(|_| ())
}

/// The redo log file and the LSN of the last commit.
pub(crate) struct RedoLog {
    file: File,
    path: PathBuf,
    /// The LSN of the last commit (durable or not).
    lsn: u64,
    /// Frames written since the log was last emptied.
    frames: u64,
    /// Their bytes.
    bytes: u64,
}

impl RedoLog {
    /// Opens (creating) the log in `dir` and applies, in `txn`, every frame newer than the
    /// store. Returns the log and how many frames were applied. The caller commits `txn`
    /// durably and then calls [`RedoLog::clear`].
    pub fn recover(dir: &Path, txn: &WriteTransaction) -> Result<(Self, u64), StoreError> {
        let path = dir.join(REDO_FILE);
        let io = |e: std::io::Error| StoreError::Db(format!("{}: {e}", path.display()));
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&path)
            .map_err(io)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(io)?;
        let mut lsn = {
            let meta = WTable::open(txn, id::META)?;
            read_lsn(&meta)?
        };
        let mut applied = 0;
        let mut rest = bytes.as_slice();
        while let Some((body, next)) = next_frame(rest) {
            rest = next;
            let (frame_lsn, mut parts) = body.split_at(HEADER);
            let frame_lsn = u64::from_le_bytes(frame_lsn.try_into().unwrap_or_default());
            if frame_lsn <= lsn {
                continue;
            }
            while let Some((&id, tail)) = parts.split_first() {
                let (changes, tail) = take_bytes(tail)?;
                WTable::open(txn, id)?.apply(changes)?;
                parts = tail;
            }
            lsn = frame_lsn;
            applied += 1;
        }
        if !rest.is_empty() {
            tracing::warn!(
                path = %path.display(),
                bytes = rest.len(),
                "the redo log ends with a frame cut short or damaged; it was never made durable and is dropped"
            );
        }
        let mut meta = WTable::open(txn, id::META)?;
        set_lsn(&mut meta, lsn)?;
        let log = Self {
            file,
            path,
            lsn,
            frames: bytes.len().min(1) as u64,
            bytes: bytes.len() as u64,
        };
        Ok((log, applied))
    }

    /// The LSN for the next commit.
    pub fn next_lsn(&self) -> u64 {
        self.lsn + 1
    }

    /// Appends a commit's frame (from [`frame_body`]) and takes its LSN as the last.
    pub fn append(&mut self, lsn: u64, body: &[u8]) -> std::io::Result<()> {
        let len = u32::try_from(body.len())
            .map_err(|_| std::io::Error::other("a redo frame over 4 GiB"))?;
        let mut frame = Vec::with_capacity(body.len() + 8);
        frame.extend_from_slice(&len.to_le_bytes());
        frame.extend_from_slice(&crc32c::crc32c(body).to_le_bytes());
        frame.extend_from_slice(body);
        self.file.write_all(&frame)?;
        self.lsn = lsn;
        self.frames += 1;
        self.bytes += frame.len() as u64;
        Ok(())
    }

    /// Whether the log holds few enough commits and bytes that the next commit may be
    /// deferred too, after `commits` deferred ones.
    pub fn has_room(&self, commits: u32) -> bool {
        commits < MAX_DEFERRED && self.bytes < MAX_LOG_BYTES
    }

    /// Takes `lsn` as the last commit's (one that wrote no frame: durable, or empty).
    pub fn committed(&mut self, lsn: u64) {
        self.lsn = self.lsn.max(lsn);
    }

    /// Empties the log: a durable commit now holds everything in it.
    pub fn clear(&mut self) {
        if self.frames == 0 {
            return;
        }
        match self.file.set_len(0) {
            Ok(()) => {
                self.frames = 0;
                self.bytes = 0;
            }
            // Harmless: its frames are older than the store's LSN and are skipped.
            Err(e) => {
                tracing::warn!(path = %self.path.display(), error = %e, "emptying the redo log failed")
            }
        }
    }
}

fn read_lsn(meta: &WTable<'_>) -> Result<u64, StoreError> {
    let Some(v) = meta.get(LSN_KEY)? else {
        return Ok(0);
    };
    let b: [u8; 8] = v
        .value()
        .try_into()
        .map_err(|_| corrupt("the redo LSN is not 8 bytes".into()))?;
    Ok(u64::from_be_bytes(b))
}

/// The next whole frame's body with a good checksum, and what follows it.
fn next_frame(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let len = u32::from_le_bytes(bytes.get(0..4)?.try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(bytes.get(4..8)?.try_into().ok()?);
    let body = bytes.get(8..8usize.checked_add(len)?)?;
    (body.len() >= HEADER && crc32c::crc32c(body) == crc).then(|| (body, &bytes[8 + len..]))
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    // Keys and values are bounded by redb (and frames by `append`) well below 4 GiB.
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

fn take_bytes(b: &[u8]) -> Result<(&[u8], &[u8]), StoreError> {
    let short = || corrupt("a change is cut short".into());
    let len = u32::from_le_bytes(
        b.get(0..4)
            .ok_or_else(short)?
            .try_into()
            .map_err(|_| short())?,
    );
    let end = 4usize.checked_add(len as usize).ok_or_else(short)?;
    Ok((b.get(4..end).ok_or_else(short)?, &b[end..]))
}

fn corrupt(message: String) -> StoreError {
    StoreError::Corrupt {
        table: "(redo log)",
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redb::{Database, ReadableDatabase};

    fn db(dir: &Path) -> Database {
        Database::create(dir.join("t.redb")).unwrap()
    }

    /// Commits puts (`Some`) and removals (`None`) in INODES without an fsync and logs
    /// them, as the commit thread does.
    fn deferred_commit(db: &Database, log: &mut RedoLog, changes: &[(&[u8], Option<&[u8]>)]) {
        let mut txn = db.begin_write().unwrap();
        let lsn = log.next_lsn();
        let body = {
            let mut t = WTable::open(&txn, id::INODES).unwrap();
            let mut meta = WTable::open(&txn, id::META).unwrap();
            for (k, v) in changes {
                match v {
                    Some(v) => t.insert(k, v).map(|_| ()),
                    None => t.remove(k).map(|_| ()),
                }
                .unwrap();
            }
            set_lsn(&mut meta, lsn).unwrap();
            frame_body(lsn, [&mut t, &mut meta]).unwrap()
        };
        txn.set_durability(redb::Durability::None).unwrap();
        txn.commit().unwrap();
        log.append(lsn, &body).unwrap();
    }

    fn deferred_put(db: &Database, log: &mut RedoLog, key: &[u8], value: &[u8]) {
        deferred_commit(db, log, &[(key, Some(value))]);
    }

    fn recover(db: &Database, dir: &Path) -> (RedoLog, u64) {
        let txn = db.begin_write().unwrap();
        let r = RedoLog::recover(dir, &txn).unwrap();
        txn.commit().unwrap();
        r
    }

    fn inode(db: &Database, key: &[u8]) -> Option<Vec<u8>> {
        let r = db.begin_read().unwrap();
        let t = r.open_table(store::INODES).unwrap();
        t.get(key).unwrap().map(|v| v.value().to_vec())
    }

    #[test]
    fn frames_newer_than_the_store_are_applied_in_order_and_a_damaged_tail_is_dropped() {
        let src = tempfile::tempdir().unwrap();
        let (mut log, _) = recover(&db(src.path()), src.path());
        let first = db(src.path());
        deferred_put(&first, &mut log, b"a", b"1");
        deferred_put(&first, &mut log, b"b", b"2");
        deferred_put(&first, &mut log, b"a", b"3");
        deferred_put(&first, &mut log, b"c", b"4");
        drop(first);
        let bytes = std::fs::read(src.path().join(REDO_FILE)).unwrap();

        // A fresh store (the last durable commit held none of it) given the log: all of it.
        let whole = tempfile::tempdir().unwrap();
        std::fs::write(whole.path().join(REDO_FILE), &bytes).unwrap();
        let d = db(whole.path());
        let (log, applied) = recover(&d, whole.path());
        assert_eq!(applied, 4);
        assert_eq!(log.next_lsn(), 5);
        assert_eq!(inode(&d, b"a").as_deref(), Some(&b"3"[..]));
        assert_eq!(inode(&d, b"c").as_deref(), Some(&b"4"[..]));

        // The last frame cut short, then one byte of the third flipped: each ends the log
        // there, keeping a prefix of the commits.
        let cut = tempfile::tempdir().unwrap();
        std::fs::write(cut.path().join(REDO_FILE), &bytes[..bytes.len() - 3]).unwrap();
        let d = db(cut.path());
        assert_eq!(recover(&d, cut.path()).1, 3);
        assert_eq!(inode(&d, b"a").as_deref(), Some(&b"3"[..]));
        assert_eq!(inode(&d, b"c"), None);
        let frame_len = bytes.len() / 4;
        let mut flipped = bytes.clone();
        flipped[2 * frame_len + 10] ^= 0x40;
        let bad = tempfile::tempdir().unwrap();
        std::fs::write(bad.path().join(REDO_FILE), &flipped).unwrap();
        let d = db(bad.path());
        assert_eq!(recover(&d, bad.path()).1, 2);
        assert_eq!(inode(&d, b"a").as_deref(), Some(&b"1"[..]));
        assert_eq!(inode(&d, b"b").as_deref(), Some(&b"2"[..]));
    }

    #[test]
    fn frames_the_store_holds_already_are_skipped_and_clear_empties_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let d = db(dir.path());
        let (mut log, _) = recover(&d, dir.path());
        deferred_put(&d, &mut log, b"a", b"1");
        // A durable commit of the same store now holds frame 1 (LSN 1 in meta)...
        let mut txn = d.begin_write().unwrap();
        txn.set_durability(redb::Durability::Immediate).unwrap();
        txn.commit().unwrap();
        // ...and a change made after it, outside the log, must not be undone by replay.
        let txn = d.begin_write().unwrap();
        txn.open_table(store::INODES)
            .unwrap()
            .insert(&b"a"[..], &b"later"[..])
            .unwrap();
        txn.commit().unwrap();
        let (mut log, applied) = recover(&d, dir.path());
        assert_eq!(applied, 0);
        assert_eq!(inode(&d, b"a").as_deref(), Some(&b"later"[..]));
        assert!(std::fs::metadata(dir.path().join(REDO_FILE)).unwrap().len() > 0);
        log.clear();
        assert_eq!(
            std::fs::metadata(dir.path().join(REDO_FILE)).unwrap().len(),
            0
        );
    }

    #[test]
    fn the_log_has_room_for_a_bounded_count_and_size_of_commits() {
        let dir = tempfile::tempdir().unwrap();
        let d = db(dir.path());
        let (mut log, _) = recover(&d, dir.path());
        assert!(log.has_room(0));
        assert!(log.has_room(MAX_DEFERRED - 1));
        assert!(!log.has_room(MAX_DEFERRED));
        // Large values fill the log before the commit count does.
        let value = vec![7u8; 1 << 20];
        let mut commits = 0;
        while log.has_room(commits) {
            deferred_put(&d, &mut log, format!("k{commits}").as_bytes(), &value);
            commits += 1;
        }
        assert_eq!(u64::from(commits), MAX_LOG_BYTES >> 20);
        log.clear();
        assert!(log.has_room(0));
        // A log found at start counts what it holds.
        deferred_put(
            &d,
            &mut log,
            b"big",
            &vec![1u8; (MAX_LOG_BYTES + 1) as usize],
        );
        drop(log);
        let (log, _) = recover(&d, dir.path());
        assert!(!log.has_room(0));
    }

    /// The contents of INODES, in key order.
    fn contents(db: &Database) -> Vec<(Vec<u8>, Vec<u8>)> {
        let r = db.begin_read().unwrap();
        let t = match r.open_table(store::INODES) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Vec::new(),
            Err(e) => panic!("{e}"),
        };
        t.iter()
            .unwrap()
            .map(|e| {
                let (k, v) = e.unwrap();
                (k.value().to_vec(), v.value().to_vec())
            })
            .collect()
    }

    /// One commit: puts (`Some`) and removals (`None`) of keys from a small set, so that
    /// later commits overwrite and remove what earlier ones wrote.
    fn commit_strategy() -> impl proptest::strategy::Strategy<Value = Vec<(u8, Option<Vec<u8>>)>> {
        use proptest::prelude::*;
        proptest::collection::vec(
            (
                0u8..6,
                proptest::option::of(proptest::collection::vec(any::<u8>(), 0..40)),
            ),
            1..5,
        )
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig {
            cases: 48, failure_persistence: None, ..Default::default()
        })]

        /// Replaying the log rebuilds exactly what the commits made, and a log cut at any
        /// byte rebuilds exactly what some prefix of the commits made.
        #[test]
        fn replay_rebuilds_the_commits_and_a_cut_log_a_prefix_of_them(
            commits in proptest::collection::vec(commit_strategy(), 1..8),
            cut in 0.0f64..1.0,
        ) {
            let src = tempfile::tempdir().unwrap();
            let d = db(src.path());
            let (mut log, _) = recover(&d, src.path());
            // What the store holds after each commit (the first: before any).
            let mut states = vec![contents(&d)];
            for c in &commits {
                let changes: Vec<([u8; 1], Option<&[u8]>)> =
                    c.iter().map(|(k, v)| ([*k], v.as_deref())).collect();
                let changes: Vec<(&[u8], Option<&[u8]>)> =
                    changes.iter().map(|(k, v)| (&k[..], *v)).collect();
                deferred_commit(&d, &mut log, &changes);
                states.push(contents(&d));
            }
            drop(d);
            let bytes = std::fs::read(src.path().join(REDO_FILE)).unwrap();

            let whole = tempfile::tempdir().unwrap();
            std::fs::write(whole.path().join(REDO_FILE), &bytes).unwrap();
            let d = db(whole.path());
            let (_, applied) = recover(&d, whole.path());
            proptest::prop_assert_eq!(applied as usize, commits.len());
            proptest::prop_assert_eq!(&contents(&d), states.last().unwrap());

            let at = (bytes.len() as f64 * cut) as usize;
            let part = tempfile::tempdir().unwrap();
            std::fs::write(part.path().join(REDO_FILE), &bytes[..at]).unwrap();
            let d = db(part.path());
            let (_, applied) = recover(&d, part.path());
            proptest::prop_assert_eq!(&contents(&d), &states[applied as usize]);
        }
    }

    /// Redo-log frames name tables by these ids: a table renumbered would have the frames
    /// written before an upgrade replayed into the wrong table.
    #[test]
    fn table_ids_are_pinned() {
        use redb::TableHandle;
        let pinned: [(u8, &str); 14] = [
            (0, "inodes"),
            (1, "dirents"),
            (2, "xattrs"),
            (3, "orphans"),
            (4, "destroy_log"),
            (5, "replies"),
            (6, "intents"),
            (7, "remote_ops"),
            (8, "remote_dirs"),
            (9, "dir_stripes"),
            (10, "dir_defaults"),
            (11, "rename_lock"),
            (12, "frozen"),
            (13, "meta"),
        ];
        let declared: Vec<(u8, &str)> = TABLES.iter().map(|(i, d)| (*i, d.name())).collect();
        assert_eq!(declared, pinned);
        let named = [
            id::INODES,
            id::DIRENTS,
            id::XATTRS,
            id::ORPHANS,
            id::DESTROY_LOG,
            id::REPLIES,
            id::INTENTS,
            id::REMOTE_OPS,
            id::REMOTE_DIRS,
            id::DIR_STRIPES,
            id::DIR_DEFAULTS,
            id::RENAME_LOCK,
            id::FROZEN,
            id::META,
        ];
        assert_eq!(named.to_vec(), (0..14).collect::<Vec<u8>>());
    }

    #[test]
    fn garbage_in_the_log_is_refused_or_dropped_never_applied() {
        let dir = tempfile::tempdir().unwrap();
        // A length far beyond the file: not a frame.
        let mut junk = u32::MAX.to_le_bytes().to_vec();
        junk.extend_from_slice(&[0u8; 20]);
        std::fs::write(dir.path().join(REDO_FILE), &junk).unwrap();
        let d = db(dir.path());
        assert_eq!(recover(&d, dir.path()).1, 0);
        // A frame with a good checksum naming an unknown table (a newer build): refused.
        let mut body = 7u64.to_le_bytes().to_vec();
        body.push(200);
        put_bytes(&mut body, b"");
        let mut frame = (body.len() as u32).to_le_bytes().to_vec();
        frame.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
        frame.extend_from_slice(&body);
        std::fs::write(dir.path().join(REDO_FILE), &frame).unwrap();
        let txn = d.begin_write().unwrap();
        assert!(RedoLog::recover(dir.path(), &txn).is_err());
    }
}
