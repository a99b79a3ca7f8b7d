//! Remote directories: a name on this MDT whose directory inode lives on another MDT
//! (Lustre's DNE remote directories, `weft mkdir -i`).
//!
//! The MDT holding the name coordinates; the inode's MDT only ever answers
//! [`MdtRequest::CreateRemoteDir`] and [`MdtRequest::RemoveRemoteDir`]. Every cross-MDT
//! operation goes in three steps, each durable before the next starts:
//!
//! 1. **prepare** (commit thread, `prepare`): validate as the local operation would, then write
//!    an [`Intent`] keyed by (parent, name). The intent reserves the name: creates of it
//!    fail with EEXIST, renames touching it with EBUSY.
//! 2. **remote** (request path, `drive`: `Mdt::drive_intent`): ask the other MDT to create or remove
//!    the inode. Both requests are idempotent there (a create is remembered by the
//!    coordinator's operation id in `remote_ops`, a remove of a gone inode answers ENOENT),
//!    so step 2 may run again after any crash.
//! 3. **finish** (commit thread, `finish`): insert or remove the entry, fix the parent's link
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
//!
//! This module holds the intent records and their keys; the steps are in `prepare`,
//! `drive` and `finish`, and what the other MDT answers in `serve`.

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

mod drive;
mod finish;
mod prepare;
mod serve;

pub(crate) use prepare::RenameSource;
pub(crate) use serve::RemoteDir;

/// An operation another MDT coordinates, as this MDT serves it: the coordinator's index
/// and its id for the operation, which key the record in `remote_ops` that answers a
/// resend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RemoteOp {
    /// The coordinating MDT's index.
    pub from: u32,
    /// Its id for the operation.
    pub op: u64,
}

impl RemoteOp {
    /// The key of its record in `remote_ops`.
    pub(crate) fn key(&self) -> [u8; 12] {
        remote_op_key(self.from, self.op)
    }
}

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

impl crate::store::Record for Intent {}

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

impl Engine {}
