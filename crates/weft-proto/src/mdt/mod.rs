//! Metadata target (MDT) messages: the namespace operations.
//!
//! Names are raw bytes (POSIX names are not necessarily UTF-8). Every request that needs a
//! permission check carries the caller's [`Credentials`]; the MDT checks them against mode
//! bits, ownership and the sticky bit. The caller applies its umask before sending a mode.

use crate::fid::{Fid, ObjectId};
use crate::layout::{Layout, LayoutTemplate};
use crate::time::Timestamp;
use serde::{Deserialize, Serialize};

mod reply;
mod request;

pub use reply::{FsckEntry, FsckInode, FsckRepair, MdtReply, RenameLockAction, ScanEntry};
pub use request::{Deadline, MdtOp, MdtRequest, NewFile, RequestClass, RequestFacts};

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
    /// Maps user and group 0 (also among the supplementary groups) to `nobody`.
    pub fn squash_root(&mut self, nobody: u32) {
        if self.uid == 0 {
            self.uid = nobody;
        }
        if self.gid == 0 {
            self.gid = nobody;
        }
        for g in &mut self.groups {
            if *g == 0 {
                *g = nobody;
            }
        }
    }

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
    /// HSM state flags (`crate::hsm::HSM_*`, Lustre's values).
    pub hsm_flags: u32,
    /// Archive (data repository id) the HSM copy lives in (0 = none).
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{Message, decode, encode};
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

    #[test]
    fn requests_are_classed_once_for_servers_and_clients() {
        let fid = Fid::ROOT;
        assert_eq!(MdtRequest::DirParent { fid }.class(), RequestClass::Read);
        assert!(MdtRequest::DirParent { fid }.is_idempotent());
        assert_eq!(MdtRequest::Sync.class(), RequestClass::Sync);
        assert!(MdtRequest::Sync.is_idempotent());
        let lock = FileLock {
            kind: LockKind::Posix,
            typ: LockType::Write,
            start: 0,
            end: LOCK_TO_EOF,
            owner: 1,
            pid: 1,
        };
        let set = |wait| MdtRequest::SetLock { fid, lock, wait };
        assert_eq!(set(None).class(), RequestClass::Lock);
        assert!(set(None).is_idempotent() && !set(Some(1)).is_idempotent());
        let instantiate = MdtRequest::Instantiate {
            handle: 1,
            start: 0,
            end: 1,
        };
        assert_eq!(instantiate.class(), RequestClass::Change);
        assert!(instantiate.is_idempotent());
        let unlink = MdtRequest::Unlink {
            parent: fid,
            name: b"x".to_vec(),
            cred: Credentials::root(),
        };
        assert_eq!(unlink.class(), RequestClass::Change);
        assert!(!unlink.is_idempotent());
    }
}
