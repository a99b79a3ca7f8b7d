//! The on-disk shape of an MDT: redb tables, their keys, and versioned records.
//!
//! Every key is raw bytes with big-endian integers so that byte order is numeric order.
//! Every value starts with a record version byte followed by a postcard body. Each stored
//! type says which version it writes and how it reads older ones ([`Record`]): `inodes`
//! records are version 2 since layouts carry compression (version 1 reads through
//! `inode_v1.rs`), every other table's version 1.
//!
//! | table | key | value |
//! |---|---|---|
//! | `inodes` | FID (16 bytes) | [`Inode`] |
//! | `dirents` | parent FID (16) + name hash (8) + name | [`Dirent`] |
//! | `xattrs` | FID (16) + attribute name | version byte + raw value |
//! | `orphans` | FID (16) | version byte (inodes unlinked while open) |
//! | `destroy_log` | sequence (8) | [`DestroyRecord`] |
//! | `replies` | client UUID (16) + request number (8) | [`crate::replies::Recorded`] |
//! | `intents` | parent FID (16) + name | [`crate::remote::Intent`] (cross-MDT operations this MDT coordinates, until finished) |
//! | `remote_ops` | coordinator MDT index (4) + operation id (8) | FID (16) of the remote directory it created here |
//! | `remote_dirs` | FID (16) | coordinator MDT index (4) + operation id (8) |
//! | `dir_defaults` | directory FID (16) | `weft_proto::mdt::DirDefault` for its new subdirectories |
//! | `dir_stripes` | master FID (16) | `weft_proto::mdt::DirStripes` of a striped directory whose master is here |
//! | `frozen` | directory FID (16) | the coordinator MDT and operation that froze it for a migration (`migrate.rs`) |
//! | `rename_lock` | `"lock"` | the rename lock's holder: MDT, operation and run (MDT0 only; `dir_moves.rs`) |
//! | `meta` | `"meta"` | [`Meta`], and the redo log's last LSN under `"redo_lsn"` |
//!
//! Each table also has a fixed id in redo-log frames: see `crate::redo::id`.

use crate::error::StoreError;
use crate::names::name_hash;
use redb::{ReadableTable, TableDefinition};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use uuid::Uuid;
use weft_proto::mdt::{Attr, FileKind};
use weft_proto::{Fid, FidSeqRange, Layout, LayoutTemplate, ObjectId, Timestamp};

/// The one record version this build writes and reads.
pub const RECORD_VERSION: u8 = 1;
/// The store layout version kept in [`Meta`].
pub const FORMAT_VERSION: u32 = 1;

/// A table of byte keys and byte values.
pub type Def = TableDefinition<'static, &'static [u8], &'static [u8]>;

/// Inodes by FID.
pub const INODES: Def = TableDefinition::new("inodes");
/// Directory entries by (parent, hash, name).
pub const DIRENTS: Def = TableDefinition::new("dirents");
/// Extended attributes by (FID, name).
pub const XATTRS: Def = TableDefinition::new("xattrs");
/// Inodes whose last name is gone while handles keep them open.
pub const ORPHANS: Def = TableDefinition::new("orphans");
/// Objects waiting to be destroyed on OSTs, by log sequence.
pub const DESTROY_LOG: Def = TableDefinition::new("destroy_log");
/// Replies of numbered requests, for answering resends.
pub const REPLIES: Def = TableDefinition::new("replies");
/// Cross-MDT operations this MDT coordinates, by the name they change.
pub const INTENTS: Def = TableDefinition::new("intents");
/// Remote directories created here, by the coordinator's operation that created them.
pub const REMOTE_OPS: Def = TableDefinition::new("remote_ops");
/// The operation that created each remote directory stored here.
pub const REMOTE_DIRS: Def = TableDefinition::new("remote_dirs");
/// Directories' defaults for new subdirectories (`weft setdirstripe -D`).
pub const DIR_DEFAULTS: Def = TableDefinition::new("dir_defaults");
/// Striped directories whose master inode is here, with their shards.
pub const DIR_STRIPES: Def = TableDefinition::new("dir_stripes");
/// Directories frozen for a migration to another MDT, with who froze them.
pub const FROZEN: Def = TableDefinition::new("frozen");
/// The file system's rename lock (MDT0 only; see `dir_moves.rs`).
pub const RENAME_LOCK: Def = TableDefinition::new("rename_lock");
/// The MDT's identity and allocators.
pub const META: Def = TableDefinition::new("meta");
/// The key of the one record in [`META`].
pub const META_KEY: &[u8] = b"meta";

/// A byte-keyed table readable in a read or a write transaction.
pub trait Readable: ReadableTable<&'static [u8], &'static [u8]> {}
impl<T: ReadableTable<&'static [u8], &'static [u8]>> Readable for T {}

/// The [`Attr`] of a record with the attribute fields of an inode ([`Inode`] and
/// [`InodeAttrs`] share them).
macro_rules! attr_of {
    ($record:expr, $fid:expr, $open_count:expr) => {
        Attr {
            fid: $fid,
            kind: $record.kind,
            mode: $record.mode,
            nlink: $record.nlink,
            uid: $record.uid,
            gid: $record.gid,
            size: $record.size,
            blocks: $record.blocks,
            atime: $record.atime,
            mtime: $record.mtime,
            ctime: $record.ctime,
            rdev: $record.rdev,
            data_version: $record.data_version,
            hsm_flags: $record.hsm_flags,
            archive_id: $record.archive_id,
            project_id: $record.project_id,
            open_count: $open_count,
        }
    };
}

/// An inode as stored. Its fields up to `project_id` are also read alone as
/// [`InodeAttrs`]: they stay first, in this order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inode {
    /// Type.
    pub kind: FileKind,
    /// Permission bits (`0o7777`).
    pub mode: u32,
    /// Link count.
    pub nlink: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Size as the MDT knows it.
    pub size: u64,
    /// 512-byte blocks as last reported.
    pub blocks: u64,
    /// Access time.
    pub atime: Timestamp,
    /// Modification time.
    pub mtime: Timestamp,
    /// Status change time.
    pub ctime: Timestamp,
    /// Device number.
    pub rdev: u64,
    /// Data version.
    pub data_version: u64,
    /// HSM flags.
    pub hsm_flags: u32,
    /// HSM archive id.
    pub archive_id: u32,
    /// Project id.
    pub project_id: u32,
    /// For directories: the parent directory (the root is its own parent). Used to refuse
    /// renames that would make a directory its own ancestor.
    pub parent: Fid,
    /// Whether a writer ever reported modifying the data (a layout can no longer change).
    pub written: bool,
    /// A regular file's layout.
    pub layout: Option<Layout>,
    /// A directory's default layout for new files.
    pub default_layout: Option<LayoutTemplate>,
    /// A symlink's target.
    pub symlink: Vec<u8>,
}

/// The leading fields of an [`Inode`] record: what a client's `stat` needs. A readdir
/// with attributes decodes only these for each entry, not the layouts and symlink target
/// that follow (about a third of the MDT's time for such a page). postcard writes a
/// struct's fields in order and [`decode`] ignores the bytes after them, so these are
/// `Inode`'s first fields in the same order (`inode_attrs_are_an_inode_record_prefix`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct InodeAttrs {
    kind: FileKind,
    mode: u32,
    nlink: u32,
    uid: u32,
    gid: u32,
    size: u64,
    blocks: u64,
    atime: Timestamp,
    mtime: Timestamp,
    ctime: Timestamp,
    rdev: u64,
    data_version: u64,
    hsm_flags: u32,
    archive_id: u32,
    project_id: u32,
}

impl InodeAttrs {
    /// The attributes a client sees (as [`Inode::attr`]).
    pub fn attr(&self, fid: Fid, open_count: u32) -> Attr {
        attr_of!(self, fid, open_count)
    }

    /// Its share of the released counts ([`Meta::count_released`]).
    pub fn released_share(&self) -> ReleasedShare {
        released_share(self.kind, self.hsm_flags, self.archive_id, self.size)
    }
}

impl Inode {
    /// A fresh inode with one link and all times set to `now`.
    pub fn new(kind: FileKind, mode: u32, uid: u32, gid: u32, now: Timestamp) -> Self {
        Self {
            kind,
            mode: mode & 0o7777,
            nlink: 1,
            uid,
            gid,
            size: 0,
            blocks: 0,
            atime: now,
            mtime: now,
            ctime: now,
            rdev: 0,
            data_version: 0,
            hsm_flags: 0,
            archive_id: 0,
            project_id: 0,
            parent: Fid::ROOT,
            written: false,
            layout: None,
            default_layout: None,
            symlink: Vec::new(),
        }
    }

    /// The attributes a client sees.
    pub fn attr(&self, fid: Fid, open_count: u32) -> Attr {
        attr_of!(self, fid, open_count)
    }

    /// Whether this is a directory.
    pub fn is_dir(&self) -> bool {
        self.kind == FileKind::Directory
    }

    /// Its share of the released counts ([`Meta::count_released`]).
    pub fn released_share(&self) -> ReleasedShare {
        released_share(self.kind, self.hsm_flags, self.archive_id, self.size)
    }
}

/// A directory entry's value (the name is in the key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dirent {
    /// The inode named.
    pub fid: Fid,
    /// Its type, so readdir needs no inode lookup.
    pub kind: FileKind,
}

/// Objects of one removed file, to destroy on their OSTs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DestroyRecord {
    /// The file they belonged to.
    pub fid: Fid,
    /// (OST index, object) pairs.
    pub objects: Vec<(u32, ObjectId)>,
}

/// The MDT's identity and allocator state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meta {
    /// Store layout version.
    pub format_version: u32,
    /// The file system this MDT belongs to.
    pub fsname: String,
    /// The MDT's index.
    pub index: u32,
    /// The target's UUID, fixed at format.
    pub uuid: Uuid,
    /// The sequence new FIDs come from (0: none yet).
    pub cur_seq: u64,
    /// The next object id in `cur_seq`.
    pub next_oid: u64,
    /// Sequences granted by the MGS and not used yet.
    pub free_seqs: Vec<FidSeqRange>,
    /// The next destroy-log sequence.
    pub next_destroy: u64,
    /// Directories stored (orphans included).
    pub dirs: u64,
    /// Non-directories stored (orphans included).
    pub files: u64,
    /// Released non-directories (data only in their archive) per archive id, ascending,
    /// none at zero: what `weft df` and `weft repo show` print, kept with every inode
    /// write ([`Meta::count_released`]). `None` in a store written before they were
    /// counted (record version 1): counted when the MDT opens.
    pub released: Option<Vec<ReleasedCount>>,
}

/// The released files of one archive id, and their bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleasedCount {
    /// The archive (a repository's id).
    pub archive_id: u32,
    /// Files.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// An inode's share of the released counts: its archive id and size when it is a released
/// non-directory.
pub type ReleasedShare = Option<(u32, u64)>;

fn released_share(kind: FileKind, hsm_flags: u32, archive_id: u32, size: u64) -> ReleasedShare {
    (kind != FileKind::Directory && hsm_flags & weft_proto::hsm::HSM_RELEASED != 0)
        .then_some((archive_id, size))
}

impl Meta {
    /// Moves the released counts from an inode's share `before` a write to its share
    /// `after` (`None`: no share, or no inode).
    pub fn count_released(&mut self, before: ReleasedShare, after: ReleasedShare) {
        if before != after {
            move_share(self.released.get_or_insert_with(Vec::new), before, after);
        }
    }
}

/// Moves a share from `before` to `after` in `counts` (ascending by archive id, none at
/// zero).
pub fn move_share(counts: &mut Vec<ReleasedCount>, before: ReleasedShare, after: ReleasedShare) {
    if let Some((id, size)) = before
        && let Ok(i) = counts.binary_search_by_key(&id, |c| c.archive_id)
    {
        let c = &mut counts[i];
        c.files = c.files.saturating_sub(1);
        c.bytes = c.bytes.saturating_sub(size);
        if c.files == 0 {
            counts.remove(i);
        }
    }
    if let Some((id, size)) = after {
        let i = match counts.binary_search_by_key(&id, |c| c.archive_id) {
            Ok(i) => i,
            Err(i) => {
                counts.insert(
                    i,
                    ReleasedCount {
                        archive_id: id,
                        files: 0,
                        bytes: 0,
                    },
                );
                i
            }
        };
        counts[i].files += 1;
        counts[i].bytes = counts[i].bytes.saturating_add(size);
    }
}

/// A value stored in an MDT table: the record version this build writes for it, and how
/// it reads the bodies of the versions before (records are never rewritten in bulk: an
/// older record is read as it is and written back in the current version when it
/// changes).
pub trait Record {
    /// The version [`encode`] writes.
    const VERSION: u8 = RECORD_VERSION;

    /// Decodes the body of record version `version` (below [`Record::VERSION`]); `None`
    /// when the type never had that version.
    fn decode_older(version: u8, body: &[u8]) -> Option<postcard::Result<Self>>
    where
        Self: Sized,
    {
        let _ = (version, body);
        None
    }
}

/// Encodes a record: version byte, then postcard.
pub fn encode<T: Record + Serialize>(value: &T) -> Result<Vec<u8>, StoreError> {
    postcard::to_extend(value, vec![T::VERSION]).map_err(|e| StoreError::Corrupt {
        table: "(encode)",
        message: e.to_string(),
    })
}

/// Decodes a record written by [`encode`], of this build's version or an older one.
pub fn decode<T: Record + DeserializeOwned>(
    table: &'static str,
    bytes: &[u8],
) -> Result<T, StoreError> {
    let corrupt = |e: postcard::Error| StoreError::Corrupt {
        table,
        message: e.to_string(),
    };
    match bytes.split_first() {
        Some((&v, body)) if v == T::VERSION => postcard::from_bytes(body).map_err(corrupt),
        Some((&v, body)) => match T::decode_older(v, body) {
            Some(decoded) => decoded.map_err(corrupt),
            None => Err(StoreError::Version(v)),
        },
        None => Err(StoreError::Corrupt {
            table,
            message: "empty record".into(),
        }),
    }
}

/// Record version 2 of the `inodes` table: layout and template components carry their
/// compression ([`weft_proto::Compression`]). Version 1 records read through
/// `inode_v1.rs`.
impl Record for Inode {
    const VERSION: u8 = 2;

    fn decode_older(version: u8, body: &[u8]) -> Option<postcard::Result<Self>> {
        (version == RECORD_VERSION)
            .then(|| postcard::from_bytes::<crate::inode_v1::InodeV1>(body).map(Inode::from))
    }
}

/// Reads both versions of an inode record: what it decodes comes before the layouts, and
/// is the same in both.
impl Record for InodeAttrs {
    const VERSION: u8 = <Inode as Record>::VERSION;

    fn decode_older(version: u8, body: &[u8]) -> Option<postcard::Result<Self>> {
        (version == RECORD_VERSION).then(|| postcard::from_bytes(body))
    }
}

impl Record for Dirent {}
impl Record for DestroyRecord {}
/// Record version 2 of the MDT's `meta` record: [`Meta::released`] at its end. Version 1
/// reads through [`MetaV1`], without counts (`None`: counted at open).
impl Record for Meta {
    const VERSION: u8 = 2;

    fn decode_older(version: u8, body: &[u8]) -> Option<postcard::Result<Self>> {
        (version == RECORD_VERSION).then(|| postcard::from_bytes::<MetaV1>(body).map(Meta::from))
    }
}

/// [`Meta`] as record version 1 held it, field for field (postcard has no field names:
/// this shape must never change).
#[derive(Debug, Deserialize)]
#[cfg_attr(test, derive(Serialize))]
pub(crate) struct MetaV1 {
    format_version: u32,
    fsname: String,
    index: u32,
    uuid: Uuid,
    cur_seq: u64,
    next_oid: u64,
    free_seqs: Vec<FidSeqRange>,
    next_destroy: u64,
    dirs: u64,
    files: u64,
}

impl From<MetaV1> for Meta {
    fn from(m: MetaV1) -> Self {
        Meta {
            format_version: m.format_version,
            fsname: m.fsname,
            index: m.index,
            uuid: m.uuid,
            cur_seq: m.cur_seq,
            next_oid: m.next_oid,
            free_seqs: m.free_seqs,
            next_destroy: m.next_destroy,
            dirs: m.dirs,
            files: m.files,
            released: None,
        }
    }
}
impl Record for weft_proto::mdt::DirDefault {}
impl Record for weft_proto::mdt::DirStripes {}
impl Record for weft_proto::hsm::ArchiveRef {}
impl Record for String {}

/// The key of a directory entry.
pub fn dirent_key(parent: Fid, name: &[u8]) -> Vec<u8> {
    dirent_key_hashed(parent, name_hash(name), name)
}

/// The key of a directory entry whose hash is known.
pub fn dirent_key_hashed(parent: Fid, hash: u64, name: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(24 + name.len());
    k.extend_from_slice(&parent.to_bytes());
    k.extend_from_slice(&hash.to_be_bytes());
    k.extend_from_slice(name);
    k
}

/// Key bounds `[start, end)` of the entries of `parent` with hash at least `from_hash`.
pub fn dirent_range(parent: Fid, from_hash: u64) -> (Vec<u8>, Vec<u8>) {
    // Hashes are below 2^63, so no key of `parent` reaches hash u64::MAX.
    (
        dirent_key_hashed(parent, from_hash, b""),
        dirent_key_hashed(parent, u64::MAX, b""),
    )
}

/// Splits a directory entry key into (hash, name).
pub fn split_dirent_key(key: &[u8]) -> Result<(u64, &[u8]), StoreError> {
    let bad = || StoreError::Corrupt {
        table: "dirents",
        message: "short key".into(),
    };
    let hash = key.get(16..24).ok_or_else(bad)?;
    let name = key.get(24..).ok_or_else(bad)?;
    let mut h = [0u8; 8];
    h.copy_from_slice(hash);
    Ok((u64::from_be_bytes(h), name))
}

/// The key of an extended attribute.
pub fn xattr_key(fid: Fid, name: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(16 + name.len());
    k.extend_from_slice(&fid.to_bytes());
    k.extend_from_slice(name);
    k
}

/// Key bounds of everything keyed by `fid` as a prefix: `[fid, next fid)` (end `None` for
/// the largest FID).
pub fn fid_prefix_range(fid: Fid) -> (Vec<u8>, Option<Vec<u8>>) {
    let start = fid.to_bytes();
    let end = u128::from_be_bytes(start)
        .checked_add(1)
        .map(|n| n.to_be_bytes().to_vec());
    (start.to_vec(), end)
}

/// Reads and decodes one record.
pub fn get<T: Record + DeserializeOwned>(
    table: &impl Readable,
    name: &'static str,
    key: &[u8],
) -> Result<Option<T>, StoreError> {
    match table.get(key)? {
        Some(v) => decode(name, v.value()).map(Some),
        None => Ok(None),
    }
}

/// Reads an inode.
pub fn get_inode(inodes: &impl Readable, fid: Fid) -> Result<Option<Inode>, StoreError> {
    get(inodes, "inodes", &fid.to_bytes())
}

/// Reads an inode's attributes only (see [`InodeAttrs`]).
pub fn get_inode_attrs(inodes: &impl Readable, fid: Fid) -> Result<Option<InodeAttrs>, StoreError> {
    get(inodes, "inodes", &fid.to_bytes())
}

/// Reads a directory entry.
pub fn get_dirent(
    dirents: &impl Readable,
    parent: Fid,
    name: &[u8],
) -> Result<Option<Dirent>, StoreError> {
    get(dirents, "dirents", &dirent_key(parent, name))
}

/// The stripes of directory `fid`, if it is a striped directory's master.
pub fn get_stripes(
    stripes: &impl Readable,
    fid: Fid,
) -> Result<Option<weft_proto::mdt::DirStripes>, StoreError> {
    get(stripes, "dir_stripes", &fid.to_bytes())
}

/// The default for new subdirectories of directory `fid`, if one is set.
pub fn get_dir_default(
    defaults: &impl Readable,
    fid: Fid,
) -> Result<Option<weft_proto::mdt::DirDefault>, StoreError> {
    get(defaults, "dir_defaults", &fid.to_bytes())
}

/// Whether directory `fid` has no entries (a range scan that stops at the first entry).
pub fn dir_is_empty(dirents: &impl Readable, fid: Fid) -> Result<bool, StoreError> {
    let (start, end) = dirent_range(fid, 0);
    let mut it = dirents.range::<&[u8]>(start.as_slice()..end.as_slice())?;
    Ok(it.next().transpose()?.is_none())
}

/// Reads the meta record.
pub fn get_meta(meta: &impl Readable) -> Result<Option<Meta>, StoreError> {
    get(meta, "meta", META_KEY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_carry_a_version_and_refuse_unknown_ones() {
        let d = Dirent {
            fid: Fid::ROOT,
            kind: FileKind::Directory,
        };
        let bytes = encode(&d).unwrap();
        assert_eq!(bytes[0], RECORD_VERSION);
        assert_eq!(decode::<Dirent>("dirents", &bytes).unwrap(), d);
        let mut future = bytes.clone();
        future[0] = 9;
        assert_eq!(
            decode::<Dirent>("dirents", &future),
            Err(StoreError::Version(9))
        );
        assert!(decode::<Dirent>("dirents", &[]).is_err());
        assert!(decode::<Dirent>("dirents", &bytes[..3]).is_err());
    }

    #[test]
    fn inode_attrs_are_an_inode_record_prefix() {
        use weft_proto::layout::{Layout, LayoutComponent, LayoutTemplate};
        let t = |sec: i64| Timestamp { sec, nsec: 7 };
        let mut ino = Inode::new(FileKind::Symlink, 0o4755, 1001, 1002, t(5));
        // Every field different, so a field out of order would show.
        (ino.nlink, ino.size, ino.blocks) = (3, 1 << 40, 99);
        (ino.atime, ino.mtime, ino.ctime) = (t(1), t(2), t(3));
        (ino.rdev, ino.data_version, ino.hsm_flags) = (0x0801, 77, 0b101);
        (ino.archive_id, ino.project_id, ino.written) = (4, 12345, true);
        ino.layout = Some(Layout {
            generation: 2,
            components: vec![LayoutComponent {
                id: 1,
                start: 0,
                end: u64::MAX,
                stripe_size: 1 << 20,
                stripe_count: 2,
                pool: Some("fast".into()),
                osts: vec![0, 1],
                object_fid: None,
                compress: weft_proto::Compression::Lz4,
            }],
        });
        ino.default_layout = Some(LayoutTemplate::default());
        ino.symlink = b"target".to_vec();
        let fid = Fid {
            seq: 9,
            oid: 8,
            ver: 0,
        };
        let bytes = encode(&ino).unwrap();
        let attrs: InodeAttrs = decode("inodes", &bytes).unwrap();
        assert_eq!(attrs.attr(fid, 2), ino.attr(fid, 2));
    }

    #[test]
    fn dirent_keys_sort_by_parent_then_hash() {
        let a = Fid {
            seq: 5,
            oid: 1,
            ver: 0,
        };
        let b = Fid {
            seq: 5,
            oid: 2,
            ver: 0,
        };
        let (start, end) = dirent_range(a, 0);
        let k = dirent_key(a, b"name");
        assert!(start <= k && k < end);
        assert!(dirent_key(b, b"") >= end);
        let (h, n) = split_dirent_key(&k).unwrap();
        assert_eq!((h, n), (name_hash(b"name"), &b"name"[..]));
        let (s, e) = fid_prefix_range(a);
        assert!(s <= xattr_key(a, b"user.x") && Some(xattr_key(a, b"\xff\xff")) < e);
    }
}
