//! Metadata target (MDT) messages: the namespace operations.
//!
//! Names are raw bytes (POSIX names are not necessarily UTF-8). Every request that needs a
//! permission check carries the caller's [`Credentials`]; the MDT checks them against mode
//! bits, ownership and the sticky bit. The caller applies its umask before sending a mode.

use crate::codec::Message;
use crate::fid::{Fid, ObjectId};
use crate::layout::{Layout, LayoutTemplate};
use crate::time::Timestamp;
use serde::{Deserialize, Serialize};

/// Who is asking: the uid, primary gid and supplementary groups of the calling process.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Credentials {
    /// Effective (filesystem) user id.
    pub uid: u32,
    /// Effective (filesystem) group id.
    pub gid: u32,
    /// Supplementary group ids, at most [`crate::GROUPS_MAX`].
    pub groups: Vec<u32>,
}

impl Credentials {
    /// The superuser, who passes every permission check.
    pub fn root() -> Self {
        Self {
            uid: 0,
            gid: 0,
            groups: Vec::new(),
        }
    }

    /// Whether the caller is in group `gid` (primary or supplementary).
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }
}

/// The type of an inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum FileKind {
    /// A regular file, with data on OSTs.
    Regular,
    /// A directory.
    Directory,
    /// A symbolic link; its target is stored on the MDT.
    Symlink,
    /// A named pipe.
    Fifo,
    /// A Unix-domain socket.
    Socket,
    /// A character device node.
    CharDevice,
    /// A block device node.
    BlockDevice,
}

impl FileKind {
    /// The `S_IFMT` bits of this kind.
    pub fn mode_bits(self) -> u32 {
        match self {
            FileKind::Regular => 0o100000,
            FileKind::Directory => 0o040000,
            FileKind::Symlink => 0o120000,
            FileKind::Fifo => 0o010000,
            FileKind::Socket => 0o140000,
            FileKind::CharDevice => 0o020000,
            FileKind::BlockDevice => 0o060000,
        }
    }

    /// The kind named by the `S_IFMT` bits of `mode`, if any.
    pub fn from_mode(mode: u32) -> Option<Self> {
        Some(match mode & 0o170000 {
            0o100000 => FileKind::Regular,
            0o040000 => FileKind::Directory,
            0o120000 => FileKind::Symlink,
            0o010000 => FileKind::Fifo,
            0o140000 => FileKind::Socket,
            0o020000 => FileKind::CharDevice,
            0o060000 => FileKind::BlockDevice,
            _ => return None,
        })
    }
}

/// HSM state flag: the file has a copy in an archive.
pub const HSM_EXISTS: u32 = 1 << 0;
/// HSM state flag: the archive copy is current.
pub const HSM_ARCHIVED: u32 = 1 << 1;
/// HSM state flag: the data was released from the OSTs and must be restored before use.
pub const HSM_RELEASED: u32 = 1 << 2;
/// HSM state flag: the file changed since it was archived.
pub const HSM_DIRTY: u32 = 1 << 3;
/// HSM state flag: the archive copy was lost.
pub const HSM_LOST: u32 = 1 << 4;

/// The attributes of an inode, as `stat` needs them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attr {
    /// The inode's FID.
    pub fid: Fid,
    /// Its type.
    pub kind: FileKind,
    /// Permission bits including setuid, setgid and sticky (`0o7777`); no type bits.
    pub mode: u32,
    /// Hard link count (directories: 2 + subdirectories).
    pub nlink: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Size in bytes as the MDT knows it (files: max-merged at close; symlinks: target length).
    pub size: u64,
    /// 512-byte blocks allocated, as last reported.
    pub blocks: u64,
    /// Last access.
    pub atime: Timestamp,
    /// Last data modification.
    pub mtime: Timestamp,
    /// Last status change.
    pub ctime: Timestamp,
    /// Device number for device nodes.
    pub rdev: u64,
    /// Incremented on every change of data or size recorded on the MDT.
    pub data_version: u64,
    /// `HSM_*` flags.
    pub hsm_flags: u32,
    /// Archive the HSM copy lives in (0 = none).
    pub archive_id: u32,
    /// Project id for project quotas.
    pub project_id: u32,
    /// Number of open handles on the MDT (a hint for glimpse decisions).
    pub open_count: u32,
}

/// How to set a timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TimeSet {
    /// The server's current time (`UTIME_NOW`): allowed to the owner or a writer.
    Now,
    /// An explicit time: allowed to the owner only.
    At(Timestamp),
}

/// Attribute changes of a setattr; `None` leaves a field alone (`UTIME_OMIT`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetAttr {
    /// New permission bits (`0o7777`).
    pub mode: Option<u32>,
    /// New owner.
    pub uid: Option<u32>,
    /// New group.
    pub gid: Option<u32>,
    /// New size (truncate); the client punches the objects.
    pub size: Option<u64>,
    /// New access time.
    pub atime: Option<TimeSet>,
    /// New modification time.
    pub mtime: Option<TimeSet>,
}

/// Flags of a rename (`renameat2`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RenameFlags {
    /// Fail with EEXIST if the destination exists (`RENAME_NOREPLACE`).
    pub noreplace: bool,
    /// Atomically swap source and destination, which must both exist (`RENAME_EXCHANGE`).
    pub exchange: bool,
}

/// How a setxattr treats an existing attribute.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum XattrMode {
    /// Create or replace.
    #[default]
    Any,
    /// Fail with EEXIST if it exists (`XATTR_CREATE`).
    Create,
    /// Fail with ENODATA if it does not exist (`XATTR_REPLACE`).
    Replace,
}

/// Access mode of an open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AccessMode {
    /// `O_RDONLY`.
    Read,
    /// `O_WRONLY`.
    Write,
    /// `O_RDWR`.
    ReadWrite,
}

/// The open flags the MDT cares about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenFlags {
    /// Read, write or both; checked against the mode bits.
    pub access: AccessMode,
    /// `O_TRUNC`: the MDT sets the size to 0 (the client punches objects).
    pub truncate: bool,
}

/// One directory entry in a readdir page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirEntry {
    /// The entry's name.
    pub name: Vec<u8>,
    /// The inode it names.
    pub fid: Fid,
    /// The inode's type.
    pub kind: FileKind,
    /// Cookie to resume listing after this entry; stable while the entry exists.
    pub cookie: u64,
    /// The inode's attributes (readdirplus only).
    pub attr: Option<Attr>,
}

/// File system usage of one target, as `statfs` reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatFs {
    /// Block size of the counts below.
    pub bsize: u32,
    /// Total blocks.
    pub blocks: u64,
    /// Free blocks.
    pub bfree: u64,
    /// Blocks available to unprivileged users.
    pub bavail: u64,
    /// Total inodes (objects).
    pub files: u64,
    /// Free inodes (objects).
    pub ffree: u64,
    /// Longest name.
    pub namelen: u32,
}

/// Most shards a striped directory may have.
pub const MAX_DIR_STRIPES: u32 = 256;

/// How the names of a striped directory are spread over its shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum DirHash {
    /// 64-bit FNV-1a of the name, modulo the shard count (Lustre's `fnv_1a_64`).
    Fnv1a64,
}

impl DirHash {
    /// The name's hash.
    pub fn hash(self, name: &[u8]) -> u64 {
        match self {
            DirHash::Fnv1a64 => {
                let mut h: u64 = 0xcbf2_9ce4_8422_2325;
                for &b in name {
                    h ^= u64::from(b);
                    h = h.wrapping_mul(0x0000_0100_0000_01b3);
                }
                h
            }
        }
    }

    /// The name used by `lfs` (`fnv_1a_64`).
    pub fn name(self) -> &'static str {
        match self {
            DirHash::Fnv1a64 => "fnv_1a_64",
        }
    }
}

/// A directory's default for new subdirectories (`weft setdirstripe -D`): each is made
/// striped over `count` MDTs (1: a plain directory) and gets the same default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirDefault {
    /// Shards of each new subdirectory.
    pub count: u32,
    /// How their names are spread.
    pub hash: DirHash,
}

/// A striped directory: its entries live in `shards` (directories on several MDTs), each
/// name in the shard its hash picks. The directory's own inode (the master) holds none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirStripes {
    /// How names pick a shard.
    pub hash: DirHash,
    /// The shards, in stripe order.
    pub shards: Vec<Fid>,
}

impl DirStripes {
    /// The shard holding `name` (`None` only for a directory with no shards, which
    /// [`DirStripes::validate`] refuses).
    pub fn shard_of(&self, name: &[u8]) -> Option<Fid> {
        let n = self.shards.len() as u64;
        if n == 0 {
            return None;
        }
        let i = usize::try_from(self.hash.hash(name) % n).ok()?;
        self.shards.get(i).copied()
    }

    /// Checks the shard count.
    pub fn validate(&self) -> Result<(), String> {
        if self.shards.is_empty() || self.shards.len() > MAX_DIR_STRIPES as usize {
            return Err(format!(
                "a striped directory has 1 to {MAX_DIR_STRIPES} shards, not {}",
                self.shards.len()
            ));
        }
        Ok(())
    }
}

/// Which family a lock belongs to. The two never conflict with each other, as on Linux:
/// `fcntl` record locks are [`LockKind::Posix`], `flock(2)` locks are [`LockKind::Flock`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum LockKind {
    /// A POSIX byte-range (record) lock: `fcntl(F_SETLK/F_SETLKW/F_GETLK)`, OFD locks.
    Posix,
    /// A whole-file `flock(2)` lock.
    Flock,
}

/// What a lock request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum LockType {
    /// A shared lock (`F_RDLCK`, `LOCK_SH`).
    Read,
    /// An exclusive lock (`F_WRLCK`, `LOCK_EX`).
    Write,
    /// Release (`F_UNLCK`, `LOCK_UN`).
    Unlock,
}

/// The end of a range that runs to the end of the file, however long it grows.
pub const LOCK_TO_EOF: u64 = u64::MAX;

/// A lock request on one file: who asks, for what, over which bytes.
///
/// The owner is the kernel's lock owner (a process's file table for POSIX locks, an open
/// file description for `flock` and OFD locks), scoped by the connection it arrives on:
/// the MDT knows the client by its handshake UUID, so two clients never share an owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileLock {
    /// POSIX or flock.
    pub kind: LockKind,
    /// Read, write or unlock.
    pub typ: LockType,
    /// First byte of the range.
    pub start: u64,
    /// Last byte of the range, inclusive; [`LOCK_TO_EOF`] for "to the end of the file".
    pub end: u64,
    /// The lock owner, unique within the client.
    pub owner: u64,
    /// The process asking, reported to others by `F_GETLK` (not part of the identity).
    pub pid: u32,
}

/// A lock held by someone else, as `F_GETLK` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockHolder {
    /// Read or write.
    pub typ: LockType,
    /// First byte held.
    pub start: u64,
    /// Last byte held, inclusive ([`LOCK_TO_EOF`] to the end of the file).
    pub end: u64,
    /// The holder's process id on its client.
    pub pid: u32,
    /// The holder's client (its handshake UUID).
    pub client: uuid::Uuid,
    /// The holder's lock owner on that client.
    pub owner: u64,
}

/// A request to a metadata target.
// Variant fields are described in their variant's doc comment.
#[allow(missing_docs)]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MdtRequest {
    /// Finds `name` in directory `parent` (needs search permission on `parent`).
    Lookup {
        parent: Fid,
        name: Vec<u8>,
        cred: Credentials,
    },
    /// The attributes of `fid`.
    GetAttr { fid: Fid },
    /// Changes attributes, with POSIX permission rules (chmod, chown, utimes, truncate).
    SetAttr {
        fid: Fid,
        set: SetAttr,
        cred: Credentials,
    },
    /// Creates a regular file, FIFO, socket or device node; `mode` holds type and permission
    /// bits after the umask. `layout` overrides the inherited default for a regular file.
    Create {
        parent: Fid,
        name: Vec<u8>,
        mode: u32,
        rdev: u64,
        exclusive: bool,
        layout: Option<LayoutTemplate>,
        open: Option<OpenFlags>,
        cred: Credentials,
    },
    /// Creates a directory.
    Mkdir {
        parent: Fid,
        name: Vec<u8>,
        mode: u32,
        cred: Credentials,
    },
    /// Creates a directory whose inode lives on MDT `mdt` (a remote directory, `weft mkdir
    /// -i`); sent to the parent's MDT, which coordinates with `mdt` through a durable
    /// intent (see [`MdtRequest::CreateRemoteDir`]). `mdt` equal to the parent's MDT is a
    /// plain mkdir.
    MkdirOn {
        parent: Fid,
        name: Vec<u8>,
        mode: u32,
        mdt: u32,
        cred: Credentials,
    },
    /// MDT to MDT: creates the inode of a remote directory for MDT `from`'s cross-MDT
    /// operation `op`, whose entry will live in `parent` on `from`. The same (`from`, `op`)
    /// answers the same inode again, so the coordinator may resend it after a crash.
    CreateRemoteDir {
        from: u32,
        op: u64,
        parent: Fid,
        mode: u32,
        uid: u32,
        gid: u32,
        default_layout: Option<LayoutTemplate>,
        dir_default: Option<DirDefault>,
    },
    /// MDT to MDT: removes the inode of a remote directory whose entry in `parent` (on the
    /// coordinator) is being removed, if it is empty (ENOTEMPTY otherwise). `sticky_owner`
    /// is the parent's owner when the parent has the sticky bit. ENOENT when it is gone
    /// already.
    RemoveRemoteDir {
        fid: Fid,
        parent: Fid,
        sticky_owner: Option<u32>,
        cred: Credentials,
    },
    /// Creates a striped directory (`weft mkdir -c COUNT`): `count` shards on the parent's
    /// MDT and the next ones in index order, names spread by `hash`. Sent to the parent's
    /// MDT, which coordinates as for [`MdtRequest::MkdirOn`].
    MkdirStriped {
        parent: Fid,
        name: Vec<u8>,
        mode: u32,
        count: u32,
        hash: DirHash,
        cred: Credentials,
    },
    /// The stripes of a directory (`None`: not striped); answered with
    /// [`MdtReply::DirStripes`].
    GetDirStripes { fid: Fid },
    /// Sets (or with `None` removes) a directory's default for new subdirectories (its
    /// owner or root).
    SetDirDefault {
        fid: Fid,
        default: Option<DirDefault>,
        cred: Credentials,
    },
    /// A directory's default for new subdirectories; answered with
    /// [`MdtReply::DirDefault`].
    GetDirDefault { fid: Fid },
    /// MDT to MDT: seals an empty directory shard for removal (`seal`: it refuses new
    /// entries; ENOTEMPTY if it has any) or unseals it. ENOENT when it is gone.
    SealDir { fid: Fid, seal: bool },
    /// MDT to MDT: adds a link to non-directory `fid` for MDT `from`'s operation `op` (a
    /// name on `from` now names it). Answers its attributes; the same (`from`, `op`) again
    /// changes nothing.
    AddLink { from: u32, op: u64, fid: Fid },
    /// MDT to MDT: drops a link of non-directory `fid` whose name on `from` is being
    /// removed (`sticky_owner`: the parent's owner when the parent has the sticky bit).
    /// The same (`from`, `op`) again changes nothing.
    DropLink {
        from: u32,
        op: u64,
        fid: Fid,
        sticky_owner: Option<u32>,
        cred: Credentials,
    },
    /// MDT to MDT: the destination half of a rename across MDTs: names `fid` (of type
    /// `kind`) `name` in `parent`, replacing what was there as rename does (EEXIST with
    /// `noreplace`). A directory adds a link to `parent` and may replace only an empty
    /// directory; if its inode is here, its parent becomes `parent`. The same (`from`,
    /// `op`) again changes nothing. A `name` naming `fid` already answers `Entry` (nothing
    /// done: the source name stays).
    InsertEntry {
        from: u32,
        op: u64,
        parent: Fid,
        name: Vec<u8>,
        fid: Fid,
        kind: FileKind,
        noreplace: bool,
        cred: Credentials,
    },
    /// MDT to MDT: `from` finished these operations; their records can go.
    ForgetOps { from: u32, ops: Vec<u64> },
    /// MDT to MDT: directory `fid`'s parent and attributes, answered with
    /// [`MdtReply::DirParent`]. A directory rename walks the destination's ancestors
    /// across MDTs with it (a directory never moves into itself) and checks the moved
    /// directory's owner and mode.
    DirParent { fid: Fid },
    /// MDT to MDT, answered by MDT0: the file system's rename lock. One operation at a
    /// time, in the whole file system, moves a directory to another parent, so that the
    /// ancestor check of one cannot miss the move of another (Lustre's rename lock). The
    /// lock is durable and belongs to MDT `from`'s operation `op` of run `run` (random per
    /// process start); [`RenameLockAction::Take`] answers EBUSY while another holds it.
    RenameLock {
        from: u32,
        op: u64,
        run: u64,
        action: RenameLockAction,
    },
    /// `weft migrate -m`: moves directory `name` of `parent` to MDT `mdt` (root only): a new
    /// directory there takes its attributes, extended attributes and entries (the inodes
    /// they name stay where they are) and then its name; the old one is removed. Sent to
    /// the MDT holding the name. Answers the new directory's attributes. Meanwhile the
    /// directory reads as before and changes to it wait (EINPROGRESS, which clients resend).
    MigrateDir {
        parent: Fid,
        name: Vec<u8>,
        mdt: u32,
        cred: Credentials,
    },
    /// MDT to MDT: freezes directory `fid` for MDT `from`'s migration `op` (`freeze`), or
    /// thaws it. While frozen, requests that change it answer EINPROGRESS. EBUSY while a
    /// cross-MDT operation is changing one of its names.
    FreezeDir {
        fid: Fid,
        from: u32,
        op: u64,
        freeze: bool,
    },
    /// MDT to MDT: adds these entries (name, inode, type) to directory `dir`, made by a
    /// migration and not named yet; an entry already there with the same inode changes
    /// nothing. Each directory adds a link to `dir`.
    InsertEntries {
        dir: Fid,
        entries: Vec<(Vec<u8>, Fid, FileKind)>,
    },
    /// MDT to MDT: removes directory `fid`, frozen and migrated elsewhere, with up to
    /// `max` of its entries per call (the inodes they name are untouched: their names
    /// live on in the new directory). Answers [`MdtReply::Progress`]; done when the inode
    /// is gone.
    DropMigrated { fid: Fid, max: u32 },
    /// MDT to MDT: directory `fid` (here) moved from `old_parent` to `new_parent` by a
    /// rename on another MDT: its ".." and ctime. Done already (its parent is
    /// `new_parent`) changes nothing; ENOENT when its parent is neither.
    SetParent {
        fid: Fid,
        old_parent: Fid,
        new_parent: Fid,
    },
    /// `weft fsck`: one page of every inode stored on the MDT, after FID `after`.
    FsckInodes { after: Option<Fid>, max: u32 },
    /// `weft fsck`: one page of every directory entry stored on the MDT (every directory,
    /// shards included), after the entry key `after`.
    FsckEntries { after: Option<Vec<u8>>, max: u32 },
    /// `weft fsck` repairs (as root).
    FsckRepair { repair: FsckRepair },
    /// Creates a symbolic link to `target`.
    Symlink {
        parent: Fid,
        name: Vec<u8>,
        target: Vec<u8>,
        cred: Credentials,
    },
    /// The target of a symbolic link.
    ReadLink { fid: Fid },
    /// Adds the name `new_name` in `new_parent` for inode `fid`.
    Link {
        fid: Fid,
        new_parent: Fid,
        new_name: Vec<u8>,
        cred: Credentials,
    },
    /// Removes a non-directory name.
    Unlink {
        parent: Fid,
        name: Vec<u8>,
        cred: Credentials,
    },
    /// Removes an empty directory.
    Rmdir {
        parent: Fid,
        name: Vec<u8>,
        cred: Credentials,
    },
    /// Moves or swaps names.
    Rename {
        src_parent: Fid,
        src_name: Vec<u8>,
        dst_parent: Fid,
        dst_name: Vec<u8>,
        flags: RenameFlags,
        cred: Credentials,
    },
    /// Lists up to `max_entries` entries after `cookie` (0 = from the start), with
    /// attributes when `plus` is set. `.` and `..` are not listed; the client adds them.
    ReadDir {
        fid: Fid,
        cookie: u64,
        max_entries: u32,
        plus: bool,
        cred: Credentials,
    },
    /// An extended attribute's value.
    GetXattr {
        fid: Fid,
        name: Vec<u8>,
        cred: Credentials,
    },
    /// Sets an extended attribute.
    SetXattr {
        fid: Fid,
        name: Vec<u8>,
        value: Vec<u8>,
        mode: XattrMode,
        cred: Credentials,
    },
    /// The names of the extended attributes the caller may see.
    ListXattr { fid: Fid, cred: Credentials },
    /// Removes an extended attribute.
    RemoveXattr {
        fid: Fid,
        name: Vec<u8>,
        cred: Credentials,
    },
    /// Usage of the MDT (inodes and its device's blocks).
    StatFs,
    /// Opens `fid`, checking access; the handle keeps an unlinked file alive until closed.
    Open {
        fid: Fid,
        flags: OpenFlags,
        cred: Credentials,
    },
    /// Closes a handle; `size` and `blocks`, if given, are max-merged into the inode, and
    /// `modified` bumps mtime/ctime and the data version.
    Close {
        handle: u64,
        size: Option<u64>,
        blocks: Option<u64>,
        modified: bool,
    },
    /// Like `Close` without closing: max-merges `size` and `blocks` of an open handle into
    /// the inode (fsync of a file being written).
    SizeMerge {
        handle: u64,
        size: Option<u64>,
        blocks: Option<u64>,
        modified: bool,
    },
    /// A file's layout.
    GetLayout { fid: Fid },
    /// Sets (or with `None` removes) a directory's default layout, or the layout of an
    /// empty regular file that has none instantiated.
    SetLayout {
        fid: Fid,
        template: Option<LayoutTemplate>,
        cred: Credentials,
    },
    /// Chooses OSTs for every component of an open file's layout that overlaps
    /// `[start, end)` and has none yet (first write into a PFL component). `handle` must be
    /// open for writing on this connection. Already instantiated components are left as
    /// they are, so a resent or racing request is harmless.
    Instantiate { handle: u64, start: u64, end: u64 },
    /// Like `ReadDir` with `plus`, and each entry's layout too: one page of what
    /// `weft find` needs to evaluate every predicate without a request per file.
    ScanDir {
        fid: Fid,
        cookie: u64,
        max_entries: u32,
        cred: Credentials,
    },
    /// Swaps the layouts of `fid` and `volatile` (`weft migrate`): `volatile` is an
    /// unlinked file open on this connection (`handle`) holding a verified copy of `fid`'s
    /// data. Refused with EBUSY when `fid`'s data version is no longer `data_version` or
    /// `fid` is open for writing. Readers that opened `fid` before the swap keep reading its
    /// old objects, which are destroyed only once they have closed.
    SwapLayouts {
        fid: Fid,
        volatile: Fid,
        handle: u64,
        data_version: u64,
        cred: Credentials,
    },
    /// The first lock of another owner that conflicts with `lock` (`F_GETLK`); answered
    /// with [`MdtReply::Lock`].
    GetLock { fid: Fid, lock: FileLock },
    /// Takes, changes or releases a lock. Without `wait` a conflict fails at once with
    /// EAGAIN (`F_SETLK`, `LOCK_NB`); with `wait` (an id unique on the connection) the
    /// reply comes when the lock is granted (`F_SETLKW`), or EINTR after
    /// [`MdtRequest::CancelLockWait`], or EDEADLK when waiting would close a cycle of
    /// owners waiting for each other.
    SetLock {
        fid: Fid,
        lock: FileLock,
        wait: Option<u64>,
    },
    /// Stops a waiting `SetLock` of this connection: it answers EINTR (unless it was
    /// granted first). Answered `Ok` either way.
    CancelLockWait { wait: u64 },
    /// Releases every lock of one kind `owner` holds on `fid` (a close: `flush` for POSIX
    /// locks, the last close of an open file description for `flock`).
    ReleaseLocks {
        fid: Fid,
        kind: LockKind,
        owner: u64,
    },
    /// Makes every change the MDT has answered durable (`fsync(2)` of a file or a
    /// directory): the MDT acknowledges changes before its disk holds them, like a local
    /// file system. Answered `Ok`.
    Sync,
}

/// A metadata target's answer.
// Variant fields are described in their variant's doc comment.
#[allow(missing_docs)]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MdtReply {
    /// Done, nothing to return.
    Ok,
    /// The attributes of the inode the request named or made.
    Attr(Attr),
    /// A directory's stripes (`None`: not striped).
    DirStripes(Option<DirStripes>),
    /// A directory's default for new subdirectories.
    DirDefault(Option<DirDefault>),
    /// A page of inodes for `weft fsck`; `next` continues it. `intents` counts the cross-MDT
    /// operations in progress on this MDT; `destroying` (first page only) lists objects the
    /// destroy log still has to remove.
    FsckInodes {
        inodes: Vec<FsckInode>,
        next: Option<Fid>,
        intents: u64,
        destroying: Vec<(u32, ObjectId)>,
    },
    /// A page of directory entries for `weft fsck`; `next` continues it.
    FsckEntries {
        entries: Vec<FsckEntry>,
        next: Option<Vec<u8>>,
    },
    /// A name found whose inode lives on another MDT (a remote directory): ask the FID's
    /// MDT for its attributes.
    Entry { fid: Fid, kind: FileKind },
    /// A directory's parent (the root's is itself) and attributes.
    DirParent { parent: Fid, attr: Attr },
    /// A step of a longer operation: `done` when nothing is left to do.
    Progress { done: bool },
    /// A created inode, its layout, and an open handle when the create asked to open;
    /// `created` is false when the name held a regular file already and the create
    /// (without `O_EXCL`) opened it instead. `parent`: the directory's attributes as the
    /// create left them (the kernel asks for them right after a create).
    Created {
        attr: Attr,
        layout: Option<Layout>,
        handle: Option<u64>,
        created: bool,
        parent: Option<Box<Attr>>,
    },
    /// A symlink target.
    Link(Vec<u8>),
    /// A page of directory entries; `eof` when nothing follows.
    Entries { entries: Vec<DirEntry>, eof: bool },
    /// An extended attribute value.
    Xattr(Vec<u8>),
    /// Extended attribute names.
    XattrNames(Vec<Vec<u8>>),
    /// Usage figures.
    StatFs(StatFs),
    /// An open handle with the file's attributes and layout.
    Opened {
        handle: u64,
        attr: Attr,
        layout: Option<Layout>,
    },
    /// A layout (None for files with none, e.g. directories without a default).
    Layout(Option<Layout>),
    /// A directory's default layout template.
    Template(Option<LayoutTemplate>),
    /// A page of a directory scan; `eof` when nothing follows.
    Scanned { entries: Vec<ScanEntry>, eof: bool },
    /// The conflicting lock `GetLock` found, or `None` when the lock could be taken.
    Lock(Option<LockHolder>),
    /// A name removed (unlink, rmdir), with the directory's attributes as the removal
    /// left them (the kernel asks for them right after).
    Removed { parent: Attr },
}

impl MdtReply {
    /// The attributes of the directory a change was made in, if the reply carries them.
    pub fn changed_dir(&self) -> Option<&Attr> {
        match self {
            MdtReply::Created { parent, .. } => parent.as_deref(),
            MdtReply::Removed { parent } => Some(parent),
            _ => None,
        }
    }
}

/// What [`MdtRequest::RenameLock`] does with the rename lock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RenameLockAction {
    /// Take it (the same holder again: granted again).
    Take,
    /// Release it if this operation holds it.
    Release,
    /// MDT `from` restarted: release it if an operation of an earlier run of `from` holds
    /// it, unless that operation is one of `keep` (its intent is still to be finished).
    ReleaseStale {
        /// Operations of the earlier run whose intents still hold the lock.
        keep: Vec<u64>,
    },
}

/// What `weft fsck` needs to know of one inode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsckInode {
    /// The inode.
    pub fid: Fid,
    /// Its type.
    pub kind: FileKind,
    /// Its link count as stored.
    pub nlink: u32,
    /// Directories: the parent directory.
    pub parent: Fid,
    /// Unlinked while open (kept until its last close).
    pub orphan: bool,
    /// A striped directory's shards (the master only).
    pub shards: Option<Vec<Fid>>,
    /// The (OST, object) pairs of its layout.
    pub objects: Vec<(u32, ObjectId)>,
}

/// One directory entry as `weft fsck` reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsckEntry {
    /// The directory holding it.
    pub parent: Fid,
    /// Its name.
    pub name: Vec<u8>,
    /// The inode it names.
    pub fid: Fid,
    /// The type recorded with it.
    pub kind: FileKind,
}

/// A repair `weft fsck` asks an MDT for.
// Variant fields are described in their variant's doc comment.
#[allow(missing_docs)]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum FsckRepair {
    /// Remove the entry `name` of `parent` if it still names `fid` (a dangling entry).
    RemoveEntry {
        parent: Fid,
        name: Vec<u8>,
        fid: Fid,
    },
    /// Set the link count of `fid` (from `expected`, to refuse a count that moved).
    SetNlink { fid: Fid, expected: u32, nlink: u32 },
    /// Remove the inode `fid`, which no entry names (an orphan): a non-directory, or an
    /// empty directory. Its objects are destroyed through the destroy log.
    RemoveInode { fid: Fid },
}

/// One entry of a directory scan: name, attributes and layout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScanEntry {
    /// The entry (with attributes).
    pub entry: DirEntry,
    /// The inode's layout: a file's layout, or a directory's default (as one-component
    /// layout templates are not layouts, directories carry `None`).
    pub layout: Option<Layout>,
}

impl Message for MdtRequest {
    fn opcode(&self) -> u16 {
        match self {
            MdtRequest::Lookup { .. } => 200,
            MdtRequest::GetAttr { .. } => 201,
            MdtRequest::SetAttr { .. } => 202,
            MdtRequest::Create { .. } => 203,
            MdtRequest::Mkdir { .. } => 204,
            MdtRequest::Symlink { .. } => 205,
            MdtRequest::ReadLink { .. } => 206,
            MdtRequest::Link { .. } => 207,
            MdtRequest::Unlink { .. } => 208,
            MdtRequest::Rmdir { .. } => 209,
            MdtRequest::Rename { .. } => 210,
            MdtRequest::ReadDir { .. } => 211,
            MdtRequest::GetXattr { .. } => 212,
            MdtRequest::SetXattr { .. } => 213,
            MdtRequest::ListXattr { .. } => 214,
            MdtRequest::RemoveXattr { .. } => 215,
            MdtRequest::StatFs => 216,
            MdtRequest::Open { .. } => 217,
            MdtRequest::Close { .. } => 218,
            MdtRequest::GetLayout { .. } => 219,
            MdtRequest::SetLayout { .. } => 220,
            MdtRequest::SizeMerge { .. } => 221,
            MdtRequest::GetLock { .. } => 222,
            MdtRequest::SetLock { .. } => 223,
            MdtRequest::CancelLockWait { .. } => 224,
            MdtRequest::ReleaseLocks { .. } => 225,
            MdtRequest::Instantiate { .. } => 230,
            MdtRequest::ScanDir { .. } => 231,
            MdtRequest::SwapLayouts { .. } => 232,
            MdtRequest::MkdirOn { .. } => 233,
            MdtRequest::CreateRemoteDir { .. } => 234,
            MdtRequest::RemoveRemoteDir { .. } => 235,
            MdtRequest::MkdirStriped { .. } => 236,
            MdtRequest::GetDirStripes { .. } => 237,
            MdtRequest::SealDir { .. } => 238,
            MdtRequest::AddLink { .. } => 239,
            MdtRequest::DropLink { .. } => 240,
            MdtRequest::InsertEntry { .. } => 241,
            MdtRequest::ForgetOps { .. } => 242,
            MdtRequest::FsckInodes { .. } => 243,
            MdtRequest::FsckEntries { .. } => 244,
            MdtRequest::FsckRepair { .. } => 245,
            MdtRequest::SetDirDefault { .. } => 246,
            MdtRequest::GetDirDefault { .. } => 247,
            MdtRequest::DirParent { .. } => 248,
            MdtRequest::RenameLock { .. } => 249,
            MdtRequest::SetParent { .. } => 250,
            MdtRequest::MigrateDir { .. } => 251,
            MdtRequest::FreezeDir { .. } => 252,
            MdtRequest::InsertEntries { .. } => 253,
            MdtRequest::DropMigrated { .. } => 254,
            MdtRequest::Sync => 255,
        }
    }

    fn op_name(&self) -> &'static str {
        match self {
            MdtRequest::Lookup { .. } => "lookup",
            MdtRequest::GetAttr { .. } => "getattr",
            MdtRequest::SetAttr { .. } => "setattr",
            MdtRequest::Create { .. } => "create",
            MdtRequest::Mkdir { .. } => "mkdir",
            MdtRequest::Symlink { .. } => "symlink",
            MdtRequest::ReadLink { .. } => "readlink",
            MdtRequest::Link { .. } => "link",
            MdtRequest::Unlink { .. } => "unlink",
            MdtRequest::Rmdir { .. } => "rmdir",
            MdtRequest::Rename { .. } => "rename",
            MdtRequest::ReadDir { .. } => "readdir",
            MdtRequest::GetXattr { .. } => "getxattr",
            MdtRequest::SetXattr { .. } => "setxattr",
            MdtRequest::ListXattr { .. } => "listxattr",
            MdtRequest::RemoveXattr { .. } => "removexattr",
            MdtRequest::StatFs => "statfs",
            MdtRequest::Open { .. } => "open",
            MdtRequest::Close { .. } => "close",
            MdtRequest::GetLayout { .. } => "getlayout",
            MdtRequest::SetLayout { .. } => "setlayout",
            MdtRequest::SizeMerge { .. } => "size_merge",
            MdtRequest::GetLock { .. } => "getlk",
            MdtRequest::SetLock { wait: None, .. } => "setlk",
            MdtRequest::SetLock { wait: Some(_), .. } => "setlkw",
            MdtRequest::CancelLockWait { .. } => "lock_cancel",
            MdtRequest::ReleaseLocks { .. } => "lock_release",
            MdtRequest::Instantiate { .. } => "instantiate",
            MdtRequest::ScanDir { .. } => "scandir",
            MdtRequest::SwapLayouts { .. } => "swap_layouts",
            MdtRequest::MkdirOn { .. } => "mkdir_remote",
            MdtRequest::CreateRemoteDir { .. } => "remote_dir_create",
            MdtRequest::RemoveRemoteDir { .. } => "remote_dir_remove",
            MdtRequest::MkdirStriped { .. } => "mkdir_striped",
            MdtRequest::GetDirStripes { .. } => "getdirstripe",
            MdtRequest::SealDir { .. } => "seal_dir",
            MdtRequest::AddLink { .. } => "remote_link_add",
            MdtRequest::DropLink { .. } => "remote_link_drop",
            MdtRequest::InsertEntry { .. } => "remote_entry_insert",
            MdtRequest::ForgetOps { .. } => "remote_ops_forget",
            MdtRequest::FsckInodes { .. } => "fsck_inodes",
            MdtRequest::FsckEntries { .. } => "fsck_entries",
            MdtRequest::FsckRepair { .. } => "fsck_repair",
            MdtRequest::SetDirDefault { .. } => "setdirstripe_default",
            MdtRequest::GetDirDefault { .. } => "getdirstripe_default",
            MdtRequest::DirParent { .. } => "dir_parent",
            MdtRequest::RenameLock { .. } => "rename_lock",
            MdtRequest::SetParent { .. } => "set_parent",
            MdtRequest::MigrateDir { .. } => "migrate_dir",
            MdtRequest::FreezeDir { .. } => "freeze_dir",
            MdtRequest::InsertEntries { .. } => "insert_entries",
            MdtRequest::DropMigrated { .. } => "drop_migrated",
            MdtRequest::Sync => "sync",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{decode, encode};
    use proptest::prelude::*;

    fn kind() -> impl Strategy<Value = LockKind> {
        prop_oneof![Just(LockKind::Posix), Just(LockKind::Flock)]
    }

    fn typ() -> impl Strategy<Value = LockType> {
        prop_oneof![
            Just(LockType::Read),
            Just(LockType::Write),
            Just(LockType::Unlock)
        ]
    }

    fn file_lock() -> impl Strategy<Value = FileLock> {
        (
            kind(),
            typ(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            any::<u32>(),
        )
            .prop_map(|(kind, typ, start, end, owner, pid)| FileLock {
                kind,
                typ,
                start,
                end,
                owner,
                pid,
            })
    }

    fn fid() -> impl Strategy<Value = Fid> {
        (any::<u64>(), any::<u32>(), any::<u32>()).prop_map(|(seq, oid, ver)| Fid { seq, oid, ver })
    }

    fn lock_request() -> impl Strategy<Value = MdtRequest> {
        prop_oneof![
            (fid(), file_lock()).prop_map(|(fid, lock)| MdtRequest::GetLock { fid, lock }),
            (fid(), file_lock(), any::<Option<u64>>())
                .prop_map(|(fid, lock, wait)| MdtRequest::SetLock { fid, lock, wait }),
            any::<u64>().prop_map(|wait| MdtRequest::CancelLockWait { wait }),
            (fid(), kind(), any::<u64>()).prop_map(|(fid, kind, owner)| MdtRequest::ReleaseLocks {
                fid,
                kind,
                owner
            }),
        ]
    }

    proptest! {
        #[test]
        fn lock_requests_round_trip(req in lock_request()) {
            let body = encode(&req).unwrap();
            let back: MdtRequest = decode(&body).unwrap();
            prop_assert!((222..=229).contains(&back.opcode()));
            prop_assert_eq!(back, req);
        }

        #[test]
        fn lock_replies_round_trip(typ in typ(), start in any::<u64>(), end in any::<u64>(),
                                   pid in any::<u32>(), owner in any::<u64>(), some in any::<bool>()) {
            let holder = LockHolder { typ, start, end, pid, client: uuid::Uuid::from_u64_pair(owner, 7), owner };
            let reply = MdtReply::Lock(some.then_some(holder));
            let body = encode(&reply).unwrap();
            prop_assert_eq!(decode::<MdtReply>(&body).unwrap(), reply);
        }

        #[test]
        fn truncated_lock_requests_never_decode_silently(req in lock_request(), cut in any::<prop::sample::Index>()) {
            let body = encode(&req).unwrap();
            let cut = cut.index(body.len());
            // A strict prefix never decodes to the request (and never panics).
            let got = decode::<MdtRequest>(&body[..cut]).ok();
            prop_assert_ne!(got, Some(req));
        }
    }

    #[test]
    fn fnv_1a_64_matches_the_reference_vectors() {
        // From the FNV reference test suite.
        assert_eq!(DirHash::Fnv1a64.hash(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(DirHash::Fnv1a64.hash(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(DirHash::Fnv1a64.hash(b"foobar"), 0x8594_4171_f739_67e8);
    }

    proptest! {
        #[test]
        fn names_spread_over_every_shard_evenly(count in 1u32..9) {
            let shards: Vec<Fid> = (0..count).map(|i| Fid { seq: 7, oid: i + 1, ver: 0 }).collect();
            let s = DirStripes { hash: DirHash::Fnv1a64, shards: shards.clone() };
            let mut per = vec![0u32; count as usize];
            for i in 0..20_000u32 {
                let name = format!("file.{i:08}");
                let f = s.shard_of(name.as_bytes()).unwrap();
                // The same name always picks the same shard.
                prop_assert_eq!(Some(f), s.shard_of(name.as_bytes()));
                per[shards.iter().position(|x| *x == f).unwrap()] += 1;
            }
            let mean = 20_000 / count;
            for n in per {
                prop_assert!(n.abs_diff(mean) * 10 <= mean, "{n} vs mean {mean}");
            }
        }
    }

    #[test]
    fn lock_opcodes_are_distinct_and_named() {
        let fid = Fid::ROOT;
        let lock = FileLock {
            kind: LockKind::Posix,
            typ: LockType::Write,
            start: 0,
            end: LOCK_TO_EOF,
            owner: 1,
            pid: 2,
        };
        let reqs = [
            MdtRequest::GetLock { fid, lock },
            MdtRequest::SetLock {
                fid,
                lock,
                wait: None,
            },
            MdtRequest::CancelLockWait { wait: 1 },
            MdtRequest::ReleaseLocks {
                fid,
                kind: LockKind::Flock,
                owner: 1,
            },
        ];
        let ops: std::collections::BTreeSet<u16> = reqs.iter().map(Message::opcode).collect();
        assert_eq!(
            ops.into_iter().collect::<Vec<_>>(),
            vec![222, 223, 224, 225]
        );
        assert_eq!(
            MdtRequest::SetLock {
                fid,
                lock,
                wait: Some(3)
            }
            .op_name(),
            "setlkw"
        );
        assert_eq!(reqs[1].op_name(), "setlk");
    }
}
