//! MDT requests: every operation a client or another MDT asks of a metadata target, with
//! its opcode, its name in statistics and its class (read, lock, sync or change).

use super::*;
use crate::codec::Message;
use crate::hsm::{ArchiveRef, ImportEntry, OstWant};

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
    /// MDT to MDT: removes directory `fid`, frozen and migrated elsewhere: its inode at
    /// the first call, then up to `max` of its entries per call (the inodes they name are
    /// untouched: their names live on in the new directory). Answers
    /// [`MdtReply::Progress`]; done when no entry and no frozen mark is left.
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
    /// `weft repo import`: makes each entry a file (or symlink) of directory `parent`,
    /// archived in repository `repo`: attributes from the object, HSM state `EXISTS |
    /// ARCHIVED | RELEASED` (symlinks: `EXISTS | ARCHIVED`), a layout for its size, and its
    /// [`ArchiveRef`] in `trusted.weft.archive`; the data stays in the store until read.
    /// A name already naming the same object is left alone. Root only. Answered with
    /// [`MdtReply::Imported`], one outcome per entry in order.
    ImportEntries {
        parent: Fid,
        repo: u32,
        entries: Vec<ImportEntry>,
        cred: Credentials,
    },
    /// Restores released file `fid`'s bytes `[start, end)` from its archive (`end` past
    /// the size: to the end). Answered [`MdtReply::Progress`] once those bytes are on the
    /// OSTs, `done` when the whole file is loaded and no longer released (a file not
    /// released answers `done` at once). One restore per file runs on the MDT, shared by
    /// every reader on every client; it goes on when a reader goes away. EIO when the
    /// store fails after bounded retries (the file stays released; a later read tries
    /// again).
    HsmRestore { fid: Fid, start: u64, end: u64 },
    /// Releases archived file `fid`'s data from the OSTs (`weft hsm_release`, owner or
    /// root): its objects are destroyed and reads restore it from the archive. EBUSY
    /// while it is open, dirty, not archived, NORELEASE or LOST, or when its data version
    /// is no longer `data_version` (if given). Answers its attributes.
    HsmRelease {
        fid: Fid,
        data_version: Option<u64>,
        cred: Credentials,
    },
    /// Sets then clears HSM flags (`weft hsm_set`/`hsm_clear`, owner or root; only
    /// [`crate::hsm::HSM_SETTABLE`] flags), and sets the archive id when given. Answers
    /// the attributes.
    HsmSetFlags {
        fid: Fid,
        set: u32,
        clear: u32,
        archive_id: Option<u32>,
        cred: Credentials,
    },
    /// An export finished: `fid`'s data as of `data_version` is in repository `repo` at
    /// `archive`. Sets EXISTS and ARCHIVED, clears DIRTY and LOST, records the
    /// [`ArchiveRef`], unless the data version moved on meanwhile: then the file stays
    /// DIRTY and the answer is EBUSY (export again). Root only. Answers the attributes.
    HsmArchived {
        fid: Fid,
        repo: u32,
        data_version: u64,
        archive: ArchiveRef,
        cred: Credentials,
    },
    /// Where `fid`'s archived copy is: [`MdtReply::Archive`].
    HsmArchiveRef { fid: Fid },
    /// A read-write persistent client cache takes regular file `fid` (`attach`: sets
    /// [`crate::hsm::HSM_PCCRW`] and records `owner`, the cache's id, in
    /// [`crate::hsm::PCC_XATTR`]) or gave it back (its data is in the file system: clears
    /// both). EBUSY when another owner holds it; detaching a file not attached is `Ok`.
    /// Root only; durable before answered. Answers the attributes.
    HsmPccRw {
        fid: Fid,
        owner: String,
        attach: bool,
        cred: Credentials,
    },
    /// Waits at most `wait_ms` (capped at [`crate::hsm::PCC_WAIT_MAX_MS`]) until `fid` is
    /// no longer in a read-write PCC. Answered [`MdtReply::Progress`], `done` when it is
    /// not (any more).
    HsmPccWait { fid: Fid, wait_ms: u32 },
    /// Restores of another MDS process wait for room under a tiering high mark: `wants`
    /// tells, per OST, how many bytes they wait to write (at most
    /// [`crate::hsm::TIERING_WANTS_MAX`] entries). Sent to MDT0, whose process runs the
    /// repository agent, which releases for them as for its own process's restores (see
    /// `weft_repo::tiering`); a want not sent again within a second is forgotten.
    /// Server only; answered [`MdtReply::TieringStuck`].
    HsmTieringWants { wants: Vec<OstWant> },
}

/// A non-directory to create, borrowed: the fields of [`MdtRequest::Create`] but the
/// caller. Clients build the request from it; the MDT runs the create from it.
#[derive(Debug, Clone, Copy)]
pub struct NewFile<'a> {
    /// The directory to create it in.
    pub parent: Fid,
    /// Its name.
    pub name: &'a [u8],
    /// Type and permission bits.
    pub mode: u32,
    /// Device number (device nodes).
    pub rdev: u64,
    /// `O_EXCL`: an existing name fails with EEXIST instead of being opened.
    pub exclusive: bool,
    /// The layout asked for, instead of the directory's default.
    pub layout: Option<&'a LayoutTemplate>,
    /// Open it too, with these flags.
    pub open: Option<OpenFlags>,
}

impl<'a> NewFile<'a> {
    /// A new name only (`O_EXCL`): no device number, the directory's layout, not opened.
    pub fn exclusive(parent: Fid, name: &'a [u8], mode: u32) -> Self {
        NewFile {
            parent,
            name,
            mode,
            rdev: 0,
            exclusive: true,
            layout: None,
            open: None,
        }
    }

    /// The same file with `layout` asked for instead of the directory's default.
    pub fn with_layout(self, layout: &'a LayoutTemplate) -> Self {
        NewFile {
            layout: Some(layout),
            ..self
        }
    }

    /// The [`MdtRequest::Create`] of this file by `cred`.
    pub fn request(&self, cred: &Credentials) -> MdtRequest {
        MdtRequest::Create {
            parent: self.parent,
            name: self.name.to_vec(),
            mode: self.mode,
            rdev: self.rdev,
            exclusive: self.exclusive,
            layout: self.layout.cloned(),
            open: self.open,
            cred: cred.clone(),
        }
    }
}

/// What a request does to an MDT, decided here once for the MDT (which runs reads
/// concurrently and changes through its commit thread) and for clients (which number
/// changes so that a resend is answered from the recorded reply, and resend the rest
/// freely).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RequestClass {
    /// Reads state and changes nothing: served concurrently with everything else;
    /// sending it twice is harmless.
    Read,
    /// A file-lock request, served by the MDT's in-memory lock table; never numbered.
    Lock,
    /// Makes earlier changes durable and changes nothing itself: ordered with the
    /// changes; sending it twice is harmless.
    Sync,
    /// Served by the MDT's HSM coordinator outside the commit thread: waits for data to
    /// arrive from an archive. Its only change (a restored file is no longer released)
    /// is made by the MDT itself; sending it twice is harmless.
    Hsm,
    /// Changes state (or must be ordered with changes): run by the commit thread;
    /// clients number it, and a resend is answered from the reply recorded for it.
    Change,
}

impl MdtRequest {
    /// The request's class (see [`RequestClass`]).
    pub fn class(&self) -> RequestClass {
        match self {
            MdtRequest::Lookup { .. }
            | MdtRequest::GetAttr { .. }
            | MdtRequest::ReadLink { .. }
            | MdtRequest::ReadDir { .. }
            | MdtRequest::ScanDir { .. }
            | MdtRequest::GetXattr { .. }
            | MdtRequest::ListXattr { .. }
            | MdtRequest::StatFs
            | MdtRequest::GetLayout { .. }
            | MdtRequest::GetDirStripes { .. }
            | MdtRequest::GetDirDefault { .. }
            // A read: the MDT answers it from a read transaction and records nothing.
            // Other MDTs send it to walk a directory's ancestors (directory moves,
            // migrations, removing a remote striped directory); it used to be numbered
            // as a change by clients, which only cost a recorded-reply lookup.
            | MdtRequest::DirParent { .. }
            | MdtRequest::FsckInodes { .. }
            | MdtRequest::FsckEntries { .. }
            | MdtRequest::HsmArchiveRef { .. } => RequestClass::Read,
            MdtRequest::HsmRestore { .. }
            | MdtRequest::HsmPccWait { .. }
            | MdtRequest::HsmTieringWants { .. } => RequestClass::Hsm,
            MdtRequest::GetLock { .. }
            | MdtRequest::SetLock { .. }
            | MdtRequest::CancelLockWait { .. }
            | MdtRequest::ReleaseLocks { .. } => RequestClass::Lock,
            MdtRequest::Sync => RequestClass::Sync,
            MdtRequest::SetAttr { .. }
            | MdtRequest::Create { .. }
            | MdtRequest::Mkdir { .. }
            | MdtRequest::Symlink { .. }
            | MdtRequest::Link { .. }
            | MdtRequest::Unlink { .. }
            | MdtRequest::Rmdir { .. }
            | MdtRequest::Rename { .. }
            | MdtRequest::SetXattr { .. }
            | MdtRequest::RemoveXattr { .. }
            | MdtRequest::Open { .. }
            | MdtRequest::Close { .. }
            | MdtRequest::SetLayout { .. }
            | MdtRequest::SizeMerge { .. }
            | MdtRequest::Instantiate { .. }
            | MdtRequest::SwapLayouts { .. }
            | MdtRequest::MkdirOn { .. }
            | MdtRequest::CreateRemoteDir { .. }
            | MdtRequest::RemoveRemoteDir { .. }
            | MdtRequest::MkdirStriped { .. }
            | MdtRequest::SealDir { .. }
            | MdtRequest::AddLink { .. }
            | MdtRequest::DropLink { .. }
            | MdtRequest::InsertEntry { .. }
            | MdtRequest::ForgetOps { .. }
            | MdtRequest::FsckRepair { .. }
            | MdtRequest::SetDirDefault { .. }
            | MdtRequest::RenameLock { .. }
            | MdtRequest::SetParent { .. }
            | MdtRequest::MigrateDir { .. }
            | MdtRequest::FreezeDir { .. }
            | MdtRequest::InsertEntries { .. }
            | MdtRequest::DropMigrated { .. }
            | MdtRequest::ImportEntries { .. }
            | MdtRequest::HsmRelease { .. }
            | MdtRequest::HsmSetFlags { .. }
            | MdtRequest::HsmArchived { .. }
            | MdtRequest::HsmPccRw { .. } => RequestClass::Change,
        }
    }

    /// Whether sending the request twice gives what sending it once does, so a client may
    /// resend it unnumbered over a broken connection: reads and syncs; lock requests that
    /// do not wait (setting, releasing or cancelling the same lock twice gives the same
    /// locks); and `Instantiate`, which leaves instantiated components alone.
    pub fn is_idempotent(&self) -> bool {
        match self.class() {
            RequestClass::Read | RequestClass::Sync | RequestClass::Hsm => true,
            RequestClass::Lock => !matches!(self, MdtRequest::SetLock { wait: Some(_), .. }),
            RequestClass::Change => matches!(self, MdtRequest::Instantiate { .. }),
        }
    }
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
            MdtRequest::ImportEntries { .. } => 256,
            MdtRequest::HsmRestore { .. } => 257,
            MdtRequest::HsmRelease { .. } => 258,
            MdtRequest::HsmSetFlags { .. } => 259,
            MdtRequest::HsmArchived { .. } => 260,
            MdtRequest::HsmArchiveRef { .. } => 261,
            MdtRequest::HsmPccRw { .. } => 262,
            MdtRequest::HsmPccWait { .. } => 263,
            MdtRequest::HsmTieringWants { .. } => 264,
        }
    }

    /// Changes, but not opens without write access or truncation, closes (a read-only
    /// client opened nothing for writing), locks and restores.
    fn modifies(&self) -> bool {
        match self {
            MdtRequest::Open { flags, .. } => {
                flags.truncate || flags.access != crate::mdt::AccessMode::Read
            }
            MdtRequest::Close { .. } => false,
            other => other.class() == RequestClass::Change,
        }
    }

    fn admin_only(&self) -> bool {
        matches!(
            self,
            MdtRequest::SwapLayouts { .. } | MdtRequest::MigrateDir { .. }
        )
    }

    fn squash_root(&mut self, nobody: u32) {
        match self {
            MdtRequest::Lookup { cred, .. }
            | MdtRequest::SetAttr { cred, .. }
            | MdtRequest::Create { cred, .. }
            | MdtRequest::Mkdir { cred, .. }
            | MdtRequest::MkdirOn { cred, .. }
            | MdtRequest::RemoveRemoteDir { cred, .. }
            | MdtRequest::MkdirStriped { cred, .. }
            | MdtRequest::SetDirDefault { cred, .. }
            | MdtRequest::DropLink { cred, .. }
            | MdtRequest::InsertEntry { cred, .. }
            | MdtRequest::MigrateDir { cred, .. }
            | MdtRequest::Symlink { cred, .. }
            | MdtRequest::Link { cred, .. }
            | MdtRequest::Unlink { cred, .. }
            | MdtRequest::Rmdir { cred, .. }
            | MdtRequest::Rename { cred, .. }
            | MdtRequest::ReadDir { cred, .. }
            | MdtRequest::GetXattr { cred, .. }
            | MdtRequest::SetXattr { cred, .. }
            | MdtRequest::ListXattr { cred, .. }
            | MdtRequest::RemoveXattr { cred, .. }
            | MdtRequest::Open { cred, .. }
            | MdtRequest::SetLayout { cred, .. }
            | MdtRequest::ScanDir { cred, .. }
            | MdtRequest::SwapLayouts { cred, .. }
            | MdtRequest::ImportEntries { cred, .. }
            | MdtRequest::HsmRelease { cred, .. }
            | MdtRequest::HsmSetFlags { cred, .. }
            | MdtRequest::HsmArchived { cred, .. }
            | MdtRequest::HsmPccRw { cred, .. } => cred.squash_root(nobody),
            _ => {}
        }
    }

    /// The steps of cross-MDT operations, which one MDT sends another.
    fn server_only(&self) -> bool {
        matches!(
            self,
            MdtRequest::CreateRemoteDir { .. }
                | MdtRequest::RemoveRemoteDir { .. }
                | MdtRequest::SealDir { .. }
                | MdtRequest::AddLink { .. }
                | MdtRequest::DropLink { .. }
                | MdtRequest::InsertEntry { .. }
                | MdtRequest::ForgetOps { .. }
                | MdtRequest::DirParent { .. }
                | MdtRequest::RenameLock { .. }
                | MdtRequest::SetParent { .. }
                | MdtRequest::FreezeDir { .. }
                | MdtRequest::InsertEntries { .. }
                | MdtRequest::DropMigrated { .. }
                | MdtRequest::HsmTieringWants { .. }
        )
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
            MdtRequest::ImportEntries { .. } => "import_entries",
            MdtRequest::HsmRestore { .. } => "hsm_restore",
            MdtRequest::HsmRelease { .. } => "hsm_release",
            MdtRequest::HsmSetFlags { .. } => "hsm_set",
            MdtRequest::HsmArchived { .. } => "hsm_archived",
            MdtRequest::HsmArchiveRef { .. } => "hsm_archive_ref",
            MdtRequest::HsmPccRw { .. } => "hsm_pcc_rw",
            MdtRequest::HsmPccWait { .. } => "hsm_pcc_wait",
            MdtRequest::HsmTieringWants { .. } => "hsm_tiering_wants",
        }
    }
}
