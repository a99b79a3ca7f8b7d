//! MDT replies and the answer types only replies carry (fsck records, scan entries, the
//! rename lock's actions).

use super::*;

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
    /// What `ImportEntries` did with each entry, in order.
    Imported(Vec<crate::hsm::ImportOutcome>),
    /// Where a file's archived copy is (`None`: it has none).
    Archive(Option<crate::hsm::ArchiveRef>),
    /// The answer to `HsmTieringWants`: the OSTs of those wants on which the repository
    /// agent lately found nothing to release (restores waiting for room there go on).
    TieringStuck(Vec<u32>),
    /// The answer to `HsmAction`: the HSM action running on the file (`None`: none).
    HsmAction(Option<crate::hsm::HsmActionState>),
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
