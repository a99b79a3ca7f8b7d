//! MDT requests: every operation a client or another MDT asks of a metadata target, declared
//! in one table with its opcode, its name in statistics, its class and its flags (see
//! [`facts`]).

use super::*;
use crate::codec::Message;
use crate::hsm::{ArchiveRef, ImportEntry, OstWant};
use facts::mdt_requests;
pub use facts::{Deadline, RequestClass, RequestFacts};

mod facts;
#[cfg(test)]
mod tests;

// The table: each row is a request with its doc comment and fields, then `=> OPCODE
// "name" Class`, its flags in brackets, `deadline(..)` when the client must not wait only
// the request timeout, and `squash(cred)` when it carries credentials (see `facts.rs`).
// A new request takes the next free opcode (266) and a line in the pinned test
// (`request/tests.rs`).
mdt_requests! {
    /// Finds `name` in directory `parent` (needs search permission on `parent`).
    Lookup {
        parent: Fid,
        name: Vec<u8>,
        cred: Credentials,
    } => 200 "lookup" Read squash(cred);
    /// The attributes of `fid`.
    GetAttr { fid: Fid } => 201 "getattr" Read;
    /// Changes attributes, with POSIX permission rules (chmod, chown, utimes, truncate).
    SetAttr {
        fid: Fid,
        set: SetAttr,
        cred: Credentials,
    } => 202 "setattr" Change squash(cred);
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
    } => 203 "create" Change squash(cred);
    /// Creates a directory.
    Mkdir {
        parent: Fid,
        name: Vec<u8>,
        mode: u32,
        cred: Credentials,
    } => 204 "mkdir" Change squash(cred);
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
    } => 233 "mkdir_remote" Change squash(cred);
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
    } => 234 "remote_dir_create" Change [server_only];
    /// MDT to MDT: removes the inode of a remote directory whose entry in `parent` (on the
    /// coordinator) is being removed, if it is empty (ENOTEMPTY otherwise). `sticky_owner`
    /// is the parent's owner when the parent has the sticky bit. ENOENT when it is gone
    /// already.
    RemoveRemoteDir {
        fid: Fid,
        parent: Fid,
        sticky_owner: Option<u32>,
        cred: Credentials,
    } => 235 "remote_dir_remove" Change [server_only] squash(cred);
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
    } => 236 "mkdir_striped" Change squash(cred);
    /// The stripes of a directory (`None`: not striped); answered with
    /// [`MdtReply::DirStripes`].
    GetDirStripes { fid: Fid } => 237 "getdirstripe" Read;
    /// Sets (or with `None` removes) a directory's default for new subdirectories (its
    /// owner or root).
    SetDirDefault {
        fid: Fid,
        default: Option<DirDefault>,
        cred: Credentials,
    } => 246 "setdirstripe_default" Change squash(cred);
    /// A directory's default for new subdirectories; answered with
    /// [`MdtReply::DirDefault`].
    GetDirDefault { fid: Fid } => 247 "getdirstripe_default" Read;
    /// MDT to MDT: seals an empty directory shard for removal (`seal`: it refuses new
    /// entries; ENOTEMPTY if it has any) or unseals it. ENOENT when it is gone.
    SealDir { fid: Fid, seal: bool } => 238 "seal_dir" Change [server_only];
    /// MDT to MDT: adds a link to non-directory `fid` for MDT `from`'s operation `op` (a
    /// name on `from` now names it). Answers its attributes; the same (`from`, `op`) again
    /// changes nothing.
    AddLink { from: u32, op: u64, fid: Fid } => 239 "remote_link_add" Change [server_only];
    /// MDT to MDT: drops a link of non-directory `fid` whose name on `from` is being
    /// removed (`sticky_owner`: the parent's owner when the parent has the sticky bit).
    /// The same (`from`, `op`) again changes nothing.
    DropLink {
        from: u32,
        op: u64,
        fid: Fid,
        sticky_owner: Option<u32>,
        cred: Credentials,
    } => 240 "remote_link_drop" Change [server_only] squash(cred);
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
    } => 241 "remote_entry_insert" Change [server_only] squash(cred);
    /// MDT to MDT: `from` finished these operations; their records can go.
    ForgetOps { from: u32, ops: Vec<u64> } => 242 "remote_ops_forget" Change [server_only];
    /// MDT to MDT: directory `fid`'s parent and attributes, answered with
    /// [`MdtReply::DirParent`]. A directory rename walks the destination's ancestors
    /// across MDTs with it (a directory never moves into itself) and checks the moved
    /// directory's owner and mode.
    DirParent { fid: Fid } => 248 "dir_parent" Read [server_only];
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
    } => 249 "rename_lock" Change [server_only];
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
    } => 251 "migrate_dir" Change [admin_only] deadline(Unbounded) squash(cred);
    /// MDT to MDT: freezes directory `fid` for MDT `from`'s migration `op` (`freeze`), or
    /// thaws it. While frozen, requests that change it answer EINPROGRESS. EBUSY while a
    /// cross-MDT operation is changing one of its names.
    FreezeDir {
        fid: Fid,
        from: u32,
        op: u64,
        freeze: bool,
    } => 252 "freeze_dir" Change [server_only];
    /// MDT to MDT: adds these entries (name, inode, type) to directory `dir`, made by a
    /// migration and not named yet; an entry already there with the same inode changes
    /// nothing. Each directory adds a link to `dir`.
    InsertEntries {
        dir: Fid,
        entries: Vec<(Vec<u8>, Fid, FileKind)>,
    } => 253 "insert_entries" Change [server_only];
    /// MDT to MDT: removes directory `fid`, frozen and migrated elsewhere: its inode at
    /// the first call, then up to `max` of its entries per call (the inodes they name are
    /// untouched: their names live on in the new directory). Answers
    /// [`MdtReply::Progress`]; done when no entry and no frozen mark is left.
    DropMigrated { fid: Fid, max: u32 } => 254 "drop_migrated" Change [server_only];
    /// MDT to MDT: directory `fid` (here) moved from `old_parent` to `new_parent` by a
    /// rename on another MDT: its ".." and ctime. Done already (its parent is
    /// `new_parent`) changes nothing; ENOENT when its parent is neither.
    SetParent {
        fid: Fid,
        old_parent: Fid,
        new_parent: Fid,
    } => 250 "set_parent" Change [server_only];
    /// `weft fsck`: one page of every inode stored on the MDT, after FID `after`.
    FsckInodes { after: Option<Fid>, max: u32 } => 243 "fsck_inodes" Read;
    /// `weft fsck`: one page of every directory entry stored on the MDT (every directory,
    /// shards included), after the entry key `after`.
    FsckEntries { after: Option<Vec<u8>>, max: u32 } => 244 "fsck_entries" Read;
    /// `weft fsck` repairs (as root).
    FsckRepair { repair: FsckRepair } => 245 "fsck_repair" Change;
    /// Creates a symbolic link to `target`.
    Symlink {
        parent: Fid,
        name: Vec<u8>,
        target: Vec<u8>,
        cred: Credentials,
    } => 205 "symlink" Change squash(cred);
    /// The target of a symbolic link.
    ReadLink { fid: Fid } => 206 "readlink" Read;
    /// Adds the name `new_name` in `new_parent` for inode `fid`.
    Link {
        fid: Fid,
        new_parent: Fid,
        new_name: Vec<u8>,
        cred: Credentials,
    } => 207 "link" Change squash(cred);
    /// Removes a non-directory name.
    Unlink {
        parent: Fid,
        name: Vec<u8>,
        cred: Credentials,
    } => 208 "unlink" Change squash(cred);
    /// Removes an empty directory.
    Rmdir {
        parent: Fid,
        name: Vec<u8>,
        cred: Credentials,
    } => 209 "rmdir" Change squash(cred);
    /// Moves or swaps names.
    Rename {
        src_parent: Fid,
        src_name: Vec<u8>,
        dst_parent: Fid,
        dst_name: Vec<u8>,
        flags: RenameFlags,
        cred: Credentials,
    } => 210 "rename" Change squash(cred);
    /// Lists up to `max_entries` entries after `cookie` (0 = from the start), with
    /// attributes when `plus` is set. `.` and `..` are not listed; the client adds them.
    ReadDir {
        fid: Fid,
        cookie: u64,
        max_entries: u32,
        plus: bool,
        cred: Credentials,
    } => 211 "readdir" Read squash(cred);
    /// An extended attribute's value.
    GetXattr {
        fid: Fid,
        name: Vec<u8>,
        cred: Credentials,
    } => 212 "getxattr" Read squash(cred);
    /// Sets an extended attribute.
    SetXattr {
        fid: Fid,
        name: Vec<u8>,
        value: Vec<u8>,
        mode: XattrMode,
        cred: Credentials,
    } => 213 "setxattr" Change squash(cred);
    /// The names of the extended attributes the caller may see.
    ListXattr { fid: Fid, cred: Credentials } => 214 "listxattr" Read squash(cred);
    /// Removes an extended attribute.
    RemoveXattr {
        fid: Fid,
        name: Vec<u8>,
        cred: Credentials,
    } => 215 "removexattr" Change squash(cred);
    /// Usage of the MDT (inodes and its device's blocks).
    StatFs => 216 "statfs" Read;
    /// Opens `fid`, checking access; the handle keeps an unlinked file alive until closed.
    Open {
        fid: Fid,
        flags: OpenFlags,
        cred: Credentials,
    } => 217 "open" Change [fast] squash(cred);
    /// Closes a handle; `size` and `blocks`, if given, are max-merged into the inode, and
    /// `modified` bumps mtime/ctime and the data version.
    Close {
        handle: u64,
        size: Option<u64>,
        blocks: Option<u64>,
        modified: bool,
    } => 218 "close" Change [fast];
    /// Like `Close` without closing: max-merges `size` and `blocks` of an open handle into
    /// the inode (fsync of a file being written).
    SizeMerge {
        handle: u64,
        size: Option<u64>,
        blocks: Option<u64>,
        modified: bool,
    } => 221 "size_merge" Change;
    /// A file's layout.
    GetLayout { fid: Fid } => 219 "getlayout" Read;
    /// Sets (or with `None` removes) a directory's default layout, or the layout of an
    /// empty regular file that has none instantiated.
    SetLayout {
        fid: Fid,
        template: Option<LayoutTemplate>,
        cred: Credentials,
    } => 220 "setlayout" Change squash(cred);
    /// Chooses OSTs for every component of an open file's layout that overlaps
    /// `[start, end)` and has none yet (first write into a PFL component). `handle` must be
    /// open for writing on this connection. Already instantiated components are left as
    /// they are, so a resent or racing request is harmless.
    Instantiate { handle: u64, start: u64, end: u64 } => 230 "instantiate" Change [resendable];
    /// Like `ReadDir` with `plus`, and each entry's layout too: one page of what
    /// `weft find` needs to evaluate every predicate without a request per file.
    ScanDir {
        fid: Fid,
        cookie: u64,
        max_entries: u32,
        cred: Credentials,
    } => 231 "scandir" Read squash(cred);
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
    } => 232 "swap_layouts" Change [admin_only] squash(cred);
    /// The first lock of another owner that conflicts with `lock` (`F_GETLK`); answered
    /// with [`MdtReply::Lock`].
    GetLock { fid: Fid, lock: FileLock } => 222 "getlk" Lock;
    /// Takes, changes or releases a lock. Without `wait` a conflict fails at once with
    /// EAGAIN (`F_SETLK`, `LOCK_NB`); with `wait` (an id unique on the connection) the
    /// reply comes when the lock is granted (`F_SETLKW`), or EINTR after
    /// [`MdtRequest::CancelLockWait`], or EDEADLK when waiting would close a cycle of
    /// owners waiting for each other.
    SetLock {
        fid: Fid,
        lock: FileLock,
        wait: Option<u64>,
    } => 223 "setlk" Lock;
    /// Stops a waiting `SetLock` of this connection: it answers EINTR (unless it was
    /// granted first). Answered `Ok` either way.
    CancelLockWait { wait: u64 } => 224 "lock_cancel" Lock;
    /// Releases every lock of one kind `owner` holds on `fid` (a close: `flush` for POSIX
    /// locks, the last close of an open file description for `flock`).
    ReleaseLocks {
        fid: Fid,
        kind: LockKind,
        owner: u64,
    } => 225 "lock_release" Lock;
    /// Makes every change the MDT has answered durable (`fsync(2)` of a file or a
    /// directory): the MDT acknowledges changes before its disk holds them, like a local
    /// file system. Answered `Ok`.
    Sync => 255 "sync" Sync;
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
    } => 256 "import_entries" Change squash(cred);
    /// Restores released file `fid`'s bytes `[start, end)` from its archive (`end` past
    /// the size: to the end). Answered [`MdtReply::Progress`] once those bytes are on the
    /// OSTs, `done` when the whole file is loaded and no longer released (a file not
    /// released answers `done` at once). One restore per file runs on the MDT, shared by
    /// every reader on every client; it goes on when a reader goes away. EIO when the
    /// store fails after bounded retries (the file stays released; a later read tries
    /// again).
    HsmRestore { fid: Fid, start: u64, end: u64 } => 257 "hsm_restore" Hsm deadline(Unbounded);
    /// Releases archived file `fid`'s data from the OSTs (`weft hsm_release`, owner or
    /// root): its objects are destroyed and reads restore it from the archive. EBUSY
    /// while it is open, dirty, not archived, NORELEASE or LOST, or when its data version
    /// is no longer `data_version` (if given). Answers its attributes.
    HsmRelease {
        fid: Fid,
        data_version: Option<u64>,
        cred: Credentials,
    } => 258 "hsm_release" Change squash(cred);
    /// Sets then clears HSM flags (`weft hsm_set`/`hsm_clear`, owner or root; only
    /// [`crate::hsm::HSM_SETTABLE`] flags), and sets the archive id when given. Answers
    /// the attributes.
    HsmSetFlags {
        fid: Fid,
        set: u32,
        clear: u32,
        archive_id: Option<u32>,
        cred: Credentials,
    } => 259 "hsm_set" Change squash(cred);
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
    } => 260 "hsm_archived" Change squash(cred);
    /// Where `fid`'s archived copy is: [`MdtReply::Archive`].
    HsmArchiveRef { fid: Fid } => 261 "hsm_archive_ref" Read;
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
    } => 262 "hsm_pcc_rw" Change squash(cred);
    /// Waits at most `wait_ms` (capped at [`crate::hsm::PCC_WAIT_MAX_MS`]) until `fid` is
    /// no longer in a read-write PCC. Answered [`MdtReply::Progress`], `done` when it is
    /// not (any more).
    HsmPccWait { fid: Fid, wait_ms: u32 } => 263 "hsm_pcc_wait" Hsm deadline(PlusWait);
    /// Restores of another MDS process wait for room under a tiering high mark: `wants`
    /// tells, per OST, how many bytes they wait to write (at most
    /// [`crate::hsm::TIERING_WANTS_MAX`] entries). Sent to MDT0, whose process runs the
    /// repository agent, which releases for them as for its own process's restores (see
    /// `weft_repo::tiering`); a want not sent again within a second is forgotten.
    /// Server only; answered [`MdtReply::TieringStuck`].
    HsmTieringWants { wants: Vec<OstWant> } => 264 "hsm_tiering_wants" Hsm [server_only];
    /// The HSM action the coordinator runs on `fid` now (`weft hsm_action`): answered
    /// [`MdtReply::HsmAction`], `None` when it runs none.
    HsmAction { fid: Fid } => 265 "hsm_action" Hsm;
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

impl MdtRequest {
    /// This request's row of the table.
    pub fn facts(&self) -> &'static RequestFacts {
        self.op().facts()
    }

    /// The request's class (see [`RequestClass`]).
    pub fn class(&self) -> RequestClass {
        self.facts().class
    }

    // The facts that depend on a field's value, refined here and nowhere else:
    // - `SetLock` that waits: named `setlkw`, not idempotent;
    // - `Open`: changes something only when it opens for writing or truncates, and stays
    //   off the MDT's fast path only when it truncates;
    // - `Close`: never refused as a change (a read-only client opened nothing for
    //   writing), and changes attributes and leaves the fast path only when it records a
    //   size, blocks or a modification;
    // - `HsmPccWait`: its deadline grows by the wait it asks for.

    /// Whether sending the request twice gives what sending it once does, so a client may
    /// resend it unnumbered over a broken connection: reads and syncs; lock requests that
    /// do not wait (setting, releasing or cancelling the same lock twice gives the same
    /// locks); and the changes marked resendable (`Instantiate`, which leaves instantiated
    /// components alone).
    pub fn is_idempotent(&self) -> bool {
        let facts = self.facts();
        match facts.class {
            RequestClass::Read | RequestClass::Sync | RequestClass::Hsm => true,
            RequestClass::Lock => !matches!(self, MdtRequest::SetLock { wait: Some(_), .. }),
            RequestClass::Change => facts.resendable,
        }
    }

    /// Whether the request may change what lookups and getattrs return, for the client's
    /// change tracking: every request that is not idempotent, but opens for reading and
    /// closes that record nothing, which change only the open count.
    pub fn may_change_attrs(&self) -> bool {
        match self {
            MdtRequest::Open { flags, .. } => opens_for_change(flags),
            MdtRequest::Close { .. } => !self.changes_nothing_stored(),
            _ => !self.is_idempotent(),
        }
    }

    /// Whether the MDT may serve the request off its commit thread (see
    /// [`RequestFacts::fast`]): an open without truncation, a close that records nothing.
    pub fn changes_nothing_stored(&self) -> bool {
        self.facts().fast
            && match self {
                MdtRequest::Open { flags, .. } => !flags.truncate,
                MdtRequest::Close {
                    size,
                    blocks,
                    modified,
                    ..
                } => size.is_none() && blocks.is_none() && !modified,
                _ => false,
            }
    }

    /// How long a client waits for the answer, `timeout` being the connection's request
    /// timeout (`None`: no deadline).
    pub fn deadline(&self, timeout: std::time::Duration) -> Option<std::time::Duration> {
        match self.facts().deadline {
            Deadline::Default => Some(timeout),
            Deadline::Unbounded => None,
            Deadline::PlusWait => {
                let wait = match self {
                    MdtRequest::HsmPccWait { wait_ms, .. } => *wait_ms,
                    _ => 0,
                };
                Some(timeout + std::time::Duration::from_millis(u64::from(wait)))
            }
        }
    }
}

/// Whether an open may change the file: for writing, or truncating.
fn opens_for_change(flags: &OpenFlags) -> bool {
    flags.truncate || flags.access != AccessMode::Read
}

impl Message for MdtRequest {
    fn opcode(&self) -> u16 {
        self.facts().opcode
    }

    /// Changes, but not opens without write access or truncation, closes (a read-only
    /// client opened nothing for writing), locks and restores.
    fn modifies(&self) -> bool {
        match self {
            MdtRequest::Open { flags, .. } => opens_for_change(flags),
            MdtRequest::Close { .. } => false,
            _ => self.class() == RequestClass::Change,
        }
    }

    fn admin_only(&self) -> bool {
        self.facts().admin_only
    }

    fn squash_root(&mut self, nobody: u32) {
        self.squash_credentials(nobody);
    }

    fn server_only(&self) -> bool {
        self.facts().server_only
    }

    fn op_name(&self) -> &'static str {
        match self {
            MdtRequest::SetLock { wait: Some(_), .. } => "setlkw",
            _ => self.facts().name,
        }
    }
}
