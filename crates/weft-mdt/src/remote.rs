//! Remote directories: a name on this MDT whose directory inode lives on another MDT
//! (Lustre's DNE remote directories, `weft mkdir -i`).
//!
//! The MDT holding the name coordinates; the inode's MDT only ever answers
//! [`MdtRequest::CreateRemoteDir`] and [`MdtRequest::RemoveRemoteDir`]. Every cross-MDT
//! operation goes in three steps, each durable before the next starts:
//!
//! 1. **prepare** (commit thread, here): validate as the local operation would, then write
//!    an [`Intent`] keyed by (parent, name). The intent reserves the name: creates of it
//!    fail with EEXIST, renames touching it with EBUSY.
//! 2. **remote** (request path, `Mdt::drive_intent`): ask the other MDT to create or remove
//!    the inode. Both requests are idempotent there (a create is remembered by the
//!    coordinator's operation id in `remote_ops`, a remove of a gone inode answers ENOENT),
//!    so step 2 may run again after any crash.
//! 3. **finish** (commit thread, here): insert or remove the entry, fix the parent's link
//!    count and times, record the client's reply for its resends and delete the intent, in
//!    one transaction.
//!
//! A crash between steps leaves the intent; at start the MDT runs steps 2 and 3 again for
//! every intent (roll forward), so the namespace never keeps a dangling entry or an inode
//! without a name. A client that resends the request meanwhile is attached to the same
//! intent. When the other MDT refuses (ENOTEMPTY, ENOSPC, ...) the intent is deleted and
//! nothing changed.
//!
//! Non-directories may have names on other MDTs (hard links, renames across MDTs): see
//! [`crate::remote_links`]. Directories moved to another parent: see
//! [`crate::dir_moves`].

use crate::commit::Origin;
use crate::engine::{Effects, Engine, Tx};
use crate::error::{Fail, fail};
use crate::names::check_name;
use crate::namespace::{DIR_SIZE, load_dir};
use crate::perm::{self, MAY_EXEC, MAY_WRITE};
use crate::replies;
use crate::store::{self, Dirent, Inode};
use redb::ReadableTable;
use serde::{Deserialize, Serialize};
use weft_proto::mdt::{
    Credentials, DirDefault, DirHash, DirStripes, FileKind, MAX_DIR_STRIPES, MdtReply,
};
use weft_proto::{Errno, Fid, LayoutTemplate, Timestamp, WireError};

/// A cross-MDT operation in progress, stored until it is finished.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Intent {
    /// Unique id of the operation (random): the other MDT remembers what it did for it.
    pub op: u64,
    /// The directory holding the name.
    pub parent: Fid,
    /// The name.
    pub name: Vec<u8>,
    /// What happens to it.
    pub kind: IntentKind,
    /// The client request it answers (nil: none), to record its reply for resends.
    pub client: uuid::Uuid,
    /// That request's number.
    pub seq: u64,
}

/// The cross-MDT operations.
// Variant fields are described in their variant's doc comment.
#[allow(missing_docs)]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum IntentKind {
    /// A directory created on MDT `mdt` with these attributes (decided at prepare).
    Mkdir {
        mdt: u32,
        mode: u32,
        uid: u32,
        gid: u32,
        default_layout: Option<LayoutTemplate>,
        dir_default: Option<DirDefault>,
    },
    /// The remote directory `fid` removed (if empty).
    Rmdir {
        fid: Fid,
        sticky_owner: Option<u32>,
        cred: Credentials,
    },
    /// A striped directory made: master inode `master` and shard 0 (`shard0`) here, shards
    /// 1.. on `mdts`, with these attributes.
    MkdirStriped {
        master: Fid,
        shard0: Fid,
        mdts: Vec<u32>,
        hash: DirHash,
        mode: u32,
        uid: u32,
        gid: u32,
        default_layout: Option<LayoutTemplate>,
        dir_default: Option<DirDefault>,
    },
    /// The striped directory `master` (here) removed with its `shards`, if all are empty.
    RmdirStriped { master: Fid, shards: Vec<Fid> },
    /// The name removed; its non-directory inode `fid` is on another MDT and loses a link.
    Unlink {
        fid: Fid,
        sticky_owner: Option<u32>,
        cred: Credentials,
    },
    /// The name added for non-directory `fid` of another MDT (a hard link).
    Link { fid: Fid },
    /// The name was given to another inode by a rename (done): non-directory `fid` of
    /// another MDT, which it named, loses that link.
    LinkDropped { fid: Fid },
    /// The name (of `fid`, of type `kind`) moved to `dst_name` in `dst_parent` on another
    /// MDT. A directory moves under the rename lock (see [`crate::dir_moves`]).
    Rename {
        dst_parent: Fid,
        dst_name: Vec<u8>,
        fid: Fid,
        kind: FileKind,
        noreplace: bool,
        cred: Credentials,
    },
    /// Directory `fid` of another MDT was moved to this name from `old_parent` (done
    /// here): its ".." changes on its MDT. Holds the rename lock.
    DirMoved { fid: Fid, old_parent: Fid },
    /// The directory `dir` named here migrates to MDT `mdt` (see [`crate::migrate`]):
    /// copied, then (`new`: the new directory, which has the name now) dropped.
    Migrate {
        dir: Fid,
        mdt: u32,
        new: Option<weft_proto::mdt::Attr>,
    },
}

impl IntentKind {
    /// Operation ids the other MDTs keep a record of until told to forget them.
    pub(crate) fn recorded_ops(&self, op: u64) -> Vec<u64> {
        match self {
            IntentKind::Unlink { .. }
            | IntentKind::Link { .. }
            | IntentKind::LinkDropped { .. } => {
                vec![op]
            }
            IntentKind::Rename { .. } => vec![op],
            // Remote directories keep theirs until they are removed.
            _ => Vec::new(),
        }
    }
}

impl Intent {
    /// What a request that would change the name answers while this intent is pending:
    /// `errno`, or EINPROGRESS during a migration (clients wait and resend).
    pub(crate) fn refusal(&self, errno: Errno) -> Errno {
        match self.kind {
            IntentKind::Migrate { .. } => Errno::InProgress,
            _ => errno,
        }
    }

    /// Whether this intent answers the client request `origin`.
    pub(crate) fn answers(&self, origin: &Origin) -> bool {
        origin.seq != 0 && self.client == origin.client && self.seq == origin.seq
    }
}

/// The key of an intent: the name it changes.
fn intent_key(parent: Fid, name: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(16 + name.len());
    k.extend_from_slice(&parent.to_bytes());
    k.extend_from_slice(name);
    k
}

/// The intent pending on a name, if any.
pub(crate) fn pending(
    intents: &impl store::Readable,
    parent: Fid,
    name: &[u8],
) -> Result<Option<Intent>, Fail> {
    Ok(store::get(intents, "intents", &intent_key(parent, name))?)
}

/// Whether a cross-MDT operation is making or removing a name in directory `dir` (it
/// is not empty then: its entry may appear).
pub(crate) fn any_in(intents: &impl store::Readable, dir: Fid) -> Result<bool, Fail> {
    let (start, end) = store::fid_prefix_range(dir);
    let mut it = match &end {
        Some(e) => intents.range::<&[u8]>(start.as_slice()..e.as_slice())?,
        None => intents.range::<&[u8]>(start.as_slice()..)?,
    };
    Ok(it.next().transpose()?.is_some())
}

/// Every intent stored (at start, to finish them).
pub(crate) fn all(intents: &impl store::Readable) -> Result<Vec<Intent>, Fail> {
    let mut out = Vec::new();
    for e in intents.iter()? {
        let (_, v) = e?;
        out.push(store::decode("intents", v.value())?);
    }
    Ok(out)
}

pub(crate) fn remote_op_key(from: u32, op: u64) -> [u8; 12] {
    let mut k = [0u8; 12];
    k[..4].copy_from_slice(&from.to_be_bytes());
    k[4..].copy_from_slice(&op.to_be_bytes());
    k
}

/// A new random operation id.
pub(crate) fn new_op_id() -> u64 {
    uuid::Uuid::new_v4().as_u64_pair().0
}

impl Engine {
    /// Step 1 of a remote mkdir: validates like [`Engine::mkdir`] and stores the intent.
    /// Answers `Fail::CrossMdt` for the request path to carry on.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn prepare_mkdir_on(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        parent: Fid,
        name: &[u8],
        mode: u32,
        mdt: u32,
        cred: &Credentials,
        origin: &Origin,
    ) -> Result<MdtReply, Fail> {
        if mdt == self.meta.index {
            return self.mkdir(tx, fx, parent, name, mode, cred);
        }
        Self::existing_intent(tx, parent, name, origin, Errno::Exist)?;
        let dir = load_dir(&tx.inodes, &tx.dir_stripes, parent, cred)?;
        check_name(name)?;
        if store::get_dirent(&tx.dirents, parent, name)?.is_some() {
            return Err(fail(Errno::Exist, "entry exists"));
        }
        perm::check(&dir, cred, MAY_WRITE | MAY_EXEC)?;
        if dir.nlink.checked_add(1).is_none() {
            return Err(fail(Errno::MLink, "too many subdirectories"));
        }
        if !self.cluster.has_mdt(mdt) {
            return Err(fail(Errno::Inval, format!("there is no MDT {mdt}")));
        }
        let (uid, gid, bits) = perm::new_owner(&dir, cred, FileKind::Directory, mode & 0o1777);
        // The new directory inherits the parent's default layout, as a local mkdir does.
        let kind = IntentKind::Mkdir {
            mdt,
            mode: bits,
            uid,
            gid,
            default_layout: child_default_layout(parent, &dir),
            dir_default: store::get_dir_default(&tx.dir_defaults, parent)?,
        };
        self.start_intent(tx, fx, parent, name, kind, origin)
    }

    /// Step 1 of removing a remote directory (from [`Engine::unlink`] when the entry's
    /// inode is not here): permission checks that need only the parent, then the intent.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn prepare_remote_rmdir(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        parent: Fid,
        name: &[u8],
        de: &Dirent,
        dir: &Inode,
        cred: &Credentials,
        origin: &Origin,
    ) -> Result<MdtReply, Fail> {
        Self::existing_intent(tx, parent, name, origin, Errno::Busy)?;
        perm::check(dir, cred, MAY_WRITE | MAY_EXEC)?;
        let kind = IntentKind::Rmdir {
            fid: de.fid,
            sticky_owner: (dir.mode & perm::S_ISVTX != 0).then_some(dir.uid),
            cred: cred.clone(),
        };
        self.start_intent(tx, fx, parent, name, kind, origin)
    }

    pub(crate) fn put_intent(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        intent: &Intent,
    ) -> Result<(), Fail> {
        let v = store::encode(intent)?;
        tx.intents.insert(
            intent_key(intent.parent, &intent.name).as_slice(),
            v.as_slice(),
        )?;
        fx.wrote = true;
        Ok(())
    }

    /// Step 3: applies the other MDT's answer to the intent `op` on (parent, name) and
    /// deletes it. An intent already finished (by a concurrent driver) answers from the
    /// recorded reply.
    pub(crate) fn finish_intent(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        intent: &Intent,
        outcome: &Result<MdtReply, WireError>,
    ) -> Result<MdtReply, Fail> {
        if let (IntentKind::Migrate { new: None, .. }, Ok(MdtReply::Attr(new))) =
            (&intent.kind, outcome)
        {
            return self.migrate_switch(tx, fx, intent, new);
        }
        let stored = pending(&tx.intents, intent.parent, &intent.name)?;
        if stored.as_ref().map(|i| i.op) != Some(intent.op) {
            let origin = Origin {
                client: intent.client,
                seq: intent.seq,
                acked: 0,
                resendable: true,
            };
            if intent.seq != 0
                && let Some(reply) = replies::recorded(tx, &origin)?
            {
                return Ok(reply);
            }
            return Err(fail(Errno::NoEnt, "the operation was finished already"));
        }
        tx.intents
            .remove(intent_key(intent.parent, &intent.name).as_slice())?;
        fx.wrote = true;
        let reply = match (&intent.kind, outcome) {
            (_, Err(e)) if !is_done(&intent.kind, e) => return Err(Fail::Wire(e.clone())),
            (IntentKind::Mkdir { .. }, Ok(MdtReply::Attr(attr))) => {
                self.link_remote_dir(tx, fx, intent, attr.fid)?;
                MdtReply::Attr(attr.clone())
            }
            (IntentKind::Rmdir { fid, .. }, _) => {
                self.unlink_remote_dir(tx, fx, intent, *fid)?;
                MdtReply::Ok
            }
            (
                IntentKind::MkdirStriped {
                    master,
                    shard0,
                    mode,
                    uid,
                    gid,
                    default_layout,
                    dir_default,
                    ..
                },
                Ok(MdtReply::DirStripes(Some(stripes))),
            ) => {
                let now = Timestamp::now();
                let new_dir = |parent: Fid| {
                    let mut ino = Inode::new(FileKind::Directory, *mode, *uid, *gid, now);
                    ino.nlink = 2;
                    ino.size = DIR_SIZE;
                    ino.blocks = DIR_SIZE / 512;
                    ino.parent = parent;
                    ino.default_layout.clone_from(default_layout);
                    ino
                };
                let ino = new_dir(intent.parent);
                self.put_inode(tx, fx, *master, &ino)?;
                self.put_inode(tx, fx, *shard0, &new_dir(*master))?;
                if dir_default.is_some() {
                    self.put_dir_default(tx, fx, *master, dir_default.as_ref())?;
                    self.put_dir_default(tx, fx, *shard0, dir_default.as_ref())?;
                }
                let v = store::encode(stripes)?;
                tx.dir_stripes
                    .insert(master.to_bytes().as_slice(), v.as_slice())?;
                self.meta.dirs += 2;
                self.link_remote_dir(tx, fx, intent, *master)?;
                MdtReply::Attr(ino.attr(*master, 0))
            }
            (IntentKind::RmdirStriped { master, .. }, _) => {
                self.unlink_remote_dir(tx, fx, intent, *master)?;
                tx.dir_stripes.remove(master.to_bytes().as_slice())?;
                if let Some(mut ino) = store::get_inode(&tx.inodes, *master)? {
                    ino.nlink = 0;
                    ino.ctime = Timestamp::now();
                    self.unlinked(tx, fx, *master, &ino)?;
                }
                MdtReply::Ok
            }
            (IntentKind::Unlink { fid, .. }, _) => {
                self.remove_entry_of(tx, fx, intent.parent, &intent.name, *fid)?;
                MdtReply::Ok
            }
            // The destination was another name of the same inode: nothing to do.
            (IntentKind::Rename { .. }, Ok(MdtReply::Entry { .. })) => MdtReply::Ok,
            (
                IntentKind::Rename {
                    fid,
                    kind,
                    dst_parent,
                    ..
                },
                Ok(_),
            ) => {
                self.remove_entry_of(tx, fx, intent.parent, &intent.name, *fid)?;
                if *kind == FileKind::Directory {
                    self.dir_moved_away(tx, fx, intent.parent, *fid, *dst_parent)?;
                }
                MdtReply::Ok
            }
            (IntentKind::LinkDropped { .. } | IntentKind::DirMoved { .. }, _) => MdtReply::Ok,
            (IntentKind::Migrate { new: Some(new), .. }, _) => MdtReply::Attr(new.clone()),
            (IntentKind::Link { fid }, Ok(MdtReply::Attr(attr))) => {
                self.insert_entry_of(tx, fx, intent.parent, &intent.name, *fid, attr.kind)?;
                MdtReply::Attr(attr.clone())
            }
            (
                IntentKind::Mkdir { .. }
                | IntentKind::MkdirStriped { .. }
                | IntentKind::Link { .. }
                | IntentKind::Rename { .. }
                | IntentKind::Migrate { new: None, .. },
                other,
            ) => {
                return Err(fail(
                    Errno::Proto,
                    format!("unexpected answer to a remote mkdir: {other:?}"),
                ));
            }
        };
        if intent.seq != 0 {
            let origin = Origin {
                client: intent.client,
                seq: intent.seq,
                acked: 0,
                resendable: true,
            };
            replies::record(&self.counters, tx, &origin, &reply)?;
        }
        Ok(reply)
    }

    /// Step 3 of moving directory `fid` from `parent` here to another MDT: the parent
    /// loses its link, and the directory's ".." changes if its inode is here.
    fn dir_moved_away(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        parent: Fid,
        fid: Fid,
        dst_parent: Fid,
    ) -> Result<(), Fail> {
        if let Some(mut dir) = store::get_inode(&tx.inodes, parent)? {
            dir.nlink = dir.nlink.saturating_sub(1).max(2);
            self.put_inode(tx, fx, parent, &dir)?;
        }
        if let Some(mut moved) = store::get_inode(&tx.inodes, fid)?
            && moved.parent == parent
        {
            moved.parent = dst_parent;
            moved.ctime = Timestamp::now();
            self.put_inode(tx, fx, fid, &moved)?;
        }
        Ok(())
    }

    fn link_remote_dir(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        intent: &Intent,
        fid: Fid,
    ) -> Result<(), Fail> {
        let mut dir = crate::namespace::load(&tx.inodes, intent.parent)?;
        let now = Timestamp::now();
        let de = store::encode(&Dirent {
            fid,
            kind: FileKind::Directory,
        })?;
        tx.dirents.insert(
            store::dirent_key(intent.parent, &intent.name).as_slice(),
            de.as_slice(),
        )?;
        dir.nlink = dir.nlink.saturating_add(1);
        dir.mtime = now;
        dir.ctime = now;
        self.put_inode(tx, fx, intent.parent, &dir)?;
        Ok(())
    }

    fn unlink_remote_dir(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        intent: &Intent,
        fid: Fid,
    ) -> Result<(), Fail> {
        let key = store::dirent_key(intent.parent, &intent.name);
        let still = store::get_dirent(&tx.dirents, intent.parent, &intent.name)?;
        if still.is_some_and(|d| d.fid == fid) {
            tx.dirents.remove(key.as_slice())?;
            if let Some(mut dir) = store::get_inode(&tx.inodes, intent.parent)? {
                let now = Timestamp::now();
                dir.nlink = dir.nlink.saturating_sub(1).max(2);
                dir.mtime = now;
                dir.ctime = now;
                self.put_inode(tx, fx, intent.parent, &dir)?;
            }
        }
        Ok(())
    }

    /// Step 1 of a striped mkdir: validates like [`Engine::mkdir`], picks the MDTs (this
    /// one, then the next ones in index order) and the local FIDs, stores the intent.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn prepare_mkdir_striped(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        parent: Fid,
        name: &[u8],
        mode: u32,
        count: u32,
        hash: DirHash,
        cred: &Credentials,
        origin: &Origin,
    ) -> Result<MdtReply, Fail> {
        if count == 0 || count > MAX_DIR_STRIPES {
            return Err(fail(
                Errno::Inval,
                format!("a striped directory has 1 to {MAX_DIR_STRIPES} shards"),
            ));
        }
        if count == 1 {
            return self.mkdir(tx, fx, parent, name, mode, cred);
        }
        Self::existing_intent(tx, parent, name, origin, Errno::Exist)?;
        let dir = load_dir(&tx.inodes, &tx.dir_stripes, parent, cred)?;
        check_name(name)?;
        if store::get_dirent(&tx.dirents, parent, name)?.is_some() {
            return Err(fail(Errno::Exist, "entry exists"));
        }
        perm::check(&dir, cred, MAY_WRITE | MAY_EXEC)?;
        if dir.nlink.checked_add(1).is_none() {
            return Err(fail(Errno::MLink, "too many subdirectories"));
        }
        let mut all = self.cluster.mdts();
        all.sort_unstable();
        all.dedup();
        let Some(me) = all.iter().position(|&m| m == self.meta.index) else {
            return Err(fail(Errno::Io, "this MDT is not in the configuration yet"));
        };
        if (count as usize) > all.len() {
            return Err(fail(
                Errno::Inval,
                format!(
                    "{count} shards asked, the file system has {} MDTs",
                    all.len()
                ),
            ));
        }
        let mdts: Vec<u32> = (1..count as usize)
            .map(|i| all[(me + i) % all.len()])
            .collect();
        if !self.fid_available() {
            return Err(Fail::NeedSeq);
        }
        // Mutations start here. Two FIDs: a sequence holds billions, so the check above
        // leaves room for both unless it ends exactly here.
        let master = self.alloc_fid()?;
        let shard0 = self.alloc_fid()?;
        let (uid, gid, bits) = perm::new_owner(&dir, cred, FileKind::Directory, mode & 0o1777);
        let kind = IntentKind::MkdirStriped {
            master,
            shard0,
            mdts,
            hash,
            mode: bits,
            uid,
            gid,
            default_layout: child_default_layout(parent, &dir),
            dir_default: store::get_dir_default(&tx.dir_defaults, parent)?,
        };
        self.start_intent(tx, fx, parent, name, kind, origin)
    }

    /// A mkdir as clients send it: under a directory with a default for new
    /// subdirectories (`weft setdirstripe -D`), a striped one with that count, which keeps
    /// the default; else a plain one, which keeps it too.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn mkdir_inheriting(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        parent: Fid,
        name: &[u8],
        mode: u32,
        cred: &Credentials,
        origin: &Origin,
    ) -> Result<MdtReply, Fail> {
        // A default wider than the file system stripes over every MDT.
        let mdts = (self.cluster.mdts().len() as u32).max(1);
        match store::get_dir_default(&tx.dir_defaults, parent)? {
            Some(d) if d.count.min(mdts) > 1 => self.prepare_mkdir_striped(
                tx,
                fx,
                parent,
                name,
                mode,
                d.count.min(mdts),
                d.hash,
                cred,
                origin,
            ),
            Some(d) => {
                let reply = self.mkdir(tx, fx, parent, name, mode, cred)?;
                if let MdtReply::Attr(a) = &reply {
                    self.put_dir_default(tx, fx, a.fid, Some(&d))?;
                }
                Ok(reply)
            }
            None => self.mkdir(tx, fx, parent, name, mode, cred),
        }
    }

    /// Sets or removes a directory's default for new subdirectories (its owner or root).
    pub(crate) fn set_dir_default(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        fid: Fid,
        default: Option<&DirDefault>,
        cred: &Credentials,
    ) -> Result<MdtReply, Fail> {
        let ino = crate::namespace::load(&tx.inodes, fid)?;
        if !ino.is_dir() {
            return Err(fail(Errno::NotDir, "not a directory"));
        }
        if cred.uid != 0 && cred.uid != ino.uid {
            return Err(fail(
                Errno::Perm,
                "only the owner sets a directory's default",
            ));
        }
        if let Some(d) = default
            && (d.count == 0 || d.count > MAX_DIR_STRIPES)
        {
            return Err(fail(
                Errno::Inval,
                format!("a default of 1 to {MAX_DIR_STRIPES} shards"),
            ));
        }
        self.put_dir_default(tx, fx, fid, default)?;
        Ok(MdtReply::Ok)
    }

    /// Step 1 of removing a striped directory whose master is here (from
    /// [`Engine::unlink`], permissions checked): the intent.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn prepare_rmdir_striped(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        parent: Fid,
        name: &[u8],
        master: Fid,
        stripes: DirStripes,
        origin: &Origin,
    ) -> Result<MdtReply, Fail> {
        Self::existing_intent(tx, parent, name, origin, Errno::Busy)?;
        let kind = IntentKind::RmdirStriped {
            master,
            shards: stripes.shards,
        };
        self.start_intent(tx, fx, parent, name, kind, origin)
    }

    /// Seals an empty directory shard for removal (it refuses new entries: a directory
    /// with no links is a removed one) or unseals it.
    pub(crate) fn seal_dir(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        fid: Fid,
        seal: bool,
    ) -> Result<MdtReply, Fail> {
        let Some(mut ino) = store::get_inode(&tx.inodes, fid)? else {
            return Err(fail(Errno::NoEnt, "the directory is gone"));
        };
        if !ino.is_dir() {
            return Err(fail(Errno::NotDir, "not a directory"));
        }
        match (seal, ino.nlink) {
            (true, 0) | (false, 2..) => return Ok(MdtReply::Ok),
            (true, _) if !store::dir_is_empty(&tx.dirents, fid)? => {
                return Err(fail(Errno::NotEmpty, "directory not empty"));
            }
            (true, _) => ino.nlink = 0,
            (false, _) => ino.nlink = 2,
        }
        self.put_inode(tx, fx, fid, &ino)?;
        Ok(MdtReply::Ok)
    }

    /// A rename on this MDT whose source entry names an inode of another MDT: only entries
    /// move (and a replaced local non-directory loses a link). A remote directory moved to
    /// another directory changes its ".." there too ([`Engine::move_remote_dir_here`]);
    /// replacing a directory with one of another MDT, or an exchange, answers EXDEV.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn rename_remote_entry(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        src_parent: Fid,
        src_name: &[u8],
        dst_parent: Fid,
        dst_name: &[u8],
        sde: Dirent,
        sdir: Inode,
        flags: weft_proto::mdt::RenameFlags,
        cred: &Credentials,
        origin: &Origin,
        dm: Option<&crate::dir_moves::DirMove>,
    ) -> Result<MdtReply, Fail> {
        let xdev = |why: &str| fail(Errno::XDev, why.to_string());
        let same_dir = src_parent == dst_parent;
        if flags.exchange {
            return Err(xdev("RENAME_EXCHANGE of an inode on another MDT"));
        }
        if sde.kind == FileKind::Directory && !same_dir {
            return self.move_remote_dir_here(
                tx,
                fx,
                (src_parent, src_name),
                (dst_parent, dst_name),
                sde,
                sdir,
                flags.noreplace,
                cred,
                origin,
                dm,
            );
        }
        let ddir = if same_dir {
            None
        } else {
            Some(load_dir(&tx.inodes, &tx.dir_stripes, dst_parent, cred)?)
        };
        let victim = match store::get_dirent(&tx.dirents, dst_parent, dst_name)? {
            Some(d) if d.fid == sde.fid => return Ok(MdtReply::Ok),
            Some(_) if flags.noreplace => return Err(fail(Errno::Exist, "destination exists")),
            Some(d) => match store::get_inode(&tx.inodes, d.fid)? {
                Some(v) if v.is_dir() && sde.kind == FileKind::Directory => {
                    return Err(xdev("replacing a directory with a remote directory"));
                }
                Some(v) if v.is_dir() => {
                    return Err(fail(
                        Errno::IsDir,
                        "cannot replace a directory with a non-directory",
                    ));
                }
                Some(_) if sde.kind == FileKind::Directory => {
                    return Err(fail(
                        Errno::NotDir,
                        "cannot replace a non-directory with a directory",
                    ));
                }
                Some(v) if sde.kind != FileKind::Directory => Some((d.fid, Some(v))),
                None if sde.kind != FileKind::Directory && d.kind != FileKind::Directory => {
                    Some((d.fid, None))
                }
                _ => return Err(xdev("the replaced entry is on another MDT")),
            },
            None => None,
        };
        perm::check(&sdir, cred, MAY_WRITE | MAY_EXEC)?;
        let target_dir = ddir.as_ref().unwrap_or(&sdir);
        if let Some(d) = &ddir {
            perm::check(d, cred, MAY_WRITE | MAY_EXEC)?;
        }
        match &victim {
            Some((_, Some(v))) => perm::check_sticky(target_dir, v, cred)?,
            Some((_, None))
                if target_dir.mode & perm::S_ISVTX != 0
                    && cred.uid != 0
                    && cred.uid != target_dir.uid =>
            {
                return Err(xdev("sticky directory and an inode on another MDT"));
            }
            _ => {}
        }
        // The sticky-bit rule needs the entry's owner, which only the other MDT knows: it
        // comes with a directory move's checks (the rename lock, harmless here).
        if sdir.mode & perm::S_ISVTX != 0 && cred.uid != 0 && cred.uid != sdir.uid {
            let dm = self.dir_move(dm, sde.fid, dst_parent)?;
            perm::check_sticky(&sdir, &crate::dir_moves::inode_of(&dm.attr), cred)?;
        }
        // Mutations start here.
        let mut remote_victim = None;
        match victim {
            Some((vfid, Some(v))) => self.drop_one_link(tx, fx, vfid, v)?,
            Some((vfid, None)) => remote_victim = Some(vfid),
            None => {}
        }
        let v = store::encode(&sde)?;
        tx.dirents.insert(
            store::dirent_key(dst_parent, dst_name).as_slice(),
            v.as_slice(),
        )?;
        tx.dirents
            .remove(store::dirent_key(src_parent, src_name).as_slice())?;
        let now = Timestamp::now();
        let mut sdir = sdir;
        sdir.mtime = now;
        sdir.ctime = now;
        self.put_inode(tx, fx, src_parent, &sdir)?;
        if let Some(mut d) = ddir {
            d.mtime = now;
            d.ctime = now;
            self.put_inode(tx, fx, dst_parent, &d)?;
        }
        if let Some(victim) = remote_victim {
            return self.defer_link_drop(tx, fx, dst_parent, dst_name, victim, origin);
        }
        Ok(MdtReply::Ok)
    }

    /// The other side of a remote mkdir: creates the directory inode for the coordinator's
    /// operation, or answers the one created for it before.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn create_remote_dir(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        from: u32,
        op: u64,
        parent: Fid,
        mode: u32,
        uid: u32,
        gid: u32,
        default_layout: Option<&LayoutTemplate>,
        dir_default: Option<&DirDefault>,
    ) -> Result<MdtReply, Fail> {
        let key = remote_op_key(from, op);
        if let Some(v) = tx.remote_ops.get(key.as_slice())? {
            let fid = fid_of(v.value())?;
            let ino = crate::namespace::load(&tx.inodes, fid)?;
            return Ok(MdtReply::Attr(ino.attr(fid, self.handles().count(fid))));
        }
        if let Some(t) = default_layout {
            t.validate()
                .map_err(|e| fail(Errno::Inval, e.to_string()))?;
        }
        if !self.fid_available() {
            return Err(Fail::NeedSeq);
        }
        // Mutations start here.
        let fid = self.alloc_fid()?;
        let mut ino = Inode::new(FileKind::Directory, mode, uid, gid, Timestamp::now());
        ino.nlink = 2;
        ino.size = DIR_SIZE;
        ino.blocks = DIR_SIZE / 512;
        ino.parent = parent;
        ino.default_layout = default_layout.cloned();
        self.put_inode(tx, fx, fid, &ino)?;
        if dir_default.is_some() {
            self.put_dir_default(tx, fx, fid, dir_default)?;
        }
        tx.remote_ops
            .insert(key.as_slice(), fid.to_bytes().as_slice())?;
        tx.remote_dirs
            .insert(fid.to_bytes().as_slice(), key.as_slice())?;
        self.meta.dirs += 1;
        Ok(MdtReply::Attr(ino.attr(fid, 0)))
    }

    /// The other side of removing a remote directory: removes the inode if it is empty.
    pub(crate) fn remove_remote_dir(
        &mut self,
        tx: &mut Tx<'_>,
        fx: &mut Effects,
        fid: Fid,
        parent: Fid,
        sticky_owner: Option<u32>,
        cred: &Credentials,
    ) -> Result<MdtReply, Fail> {
        let Some(mut ino) = store::get_inode(&tx.inodes, fid)? else {
            return Err(fail(Errno::NoEnt, "the directory is gone"));
        };
        if !ino.is_dir() {
            return Err(fail(Errno::NotDir, "not a directory"));
        }
        if ino.parent != parent {
            // Named in `parent` by a move from another MDT whose ".." is set last, or not
            // there at all: not removed, and not "removed already" either (ENOENT: the
            // coordinator would drop the name and leave the directory orphaned).
            return Err(fail(
                Errno::Busy,
                "the directory is not (yet) in that parent",
            ));
        }
        if let Some(owner) = sticky_owner
            && cred.uid != 0
            && cred.uid != owner
            && cred.uid != ino.uid
        {
            return Err(fail(
                Errno::Perm,
                "sticky directory: not the owner of the entry",
            ));
        }
        if !store::dir_is_empty(&tx.dirents, fid)? {
            return Err(fail(Errno::NotEmpty, "directory not empty"));
        }
        // Mutations start here. A striped directory's master goes with its stripes record
        // (its coordinator removed the shards first).
        if let Some(v) = tx.remote_dirs.remove(fid.to_bytes().as_slice())? {
            let key = v.value().to_vec();
            tx.remote_ops.remove(key.as_slice())?;
        }
        tx.dir_stripes.remove(fid.to_bytes().as_slice())?;
        ino.nlink = 0;
        ino.ctime = Timestamp::now();
        self.unlinked(tx, fx, fid, &ino)?;
        Ok(MdtReply::Ok)
    }
}

/// The default layout a new directory in `dir` copies: its parent's, except the root's,
/// which applies through the inheritance chain (fetched from MDT0) as for a local mkdir.
fn child_default_layout(parent: Fid, dir: &Inode) -> Option<LayoutTemplate> {
    if parent == Fid::ROOT {
        None
    } else {
        dir.default_layout.clone()
    }
}

/// Whether the other MDT's error still means the step happened: removing a directory that
/// is gone already (a resend after a crash) is done.
fn is_done(kind: &IntentKind, e: &WireError) -> bool {
    match kind {
        IntentKind::Rmdir { .. } | IntentKind::Unlink { .. } => e.errno == Errno::NoEnt,
        // The rename is done whatever the other MDT says (the link may be gone already).
        IntentKind::LinkDropped { .. } => true,
        // The entries moved already; the ".." of a directory that is not where it was is
        // left to `weft fsck` (under the rename lock nothing else moves it).
        IntentKind::DirMoved { .. } => true,
        // The name is the new directory's already.
        IntentKind::Migrate { new: Some(_), .. } => true,
        _ => false,
    }
}

fn fid_of(bytes: &[u8]) -> Result<Fid, Fail> {
    let b: [u8; 16] = bytes.try_into().map_err(|_| {
        Fail::Store(crate::error::StoreError::Corrupt {
            table: "remote_ops",
            message: "a FID of the wrong length".into(),
        })
    })?;
    Ok(Fid::from_bytes(b))
}
