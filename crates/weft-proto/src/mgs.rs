//! Management service (MGS) messages: configuration, target registration, FID sequence
//! grants, parameters and pools.

use crate::codec::Message;
use crate::fid::{Fid, FidSeqRange};
use crate::hsm::{Repo, RepoChange, RepoSpec, RepoTask, TaskKind, TaskState, TieringPolicy};
use crate::layout::LayoutTemplate;
use crate::target::{TargetId, TargetKind};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use uuid::Uuid;

/// Whether a target is in service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TargetState {
    /// Registered and heard from recently.
    Active,
    /// Registered but not heard from within the heartbeat timeout.
    Inactive,
}

/// One registered target as the configuration lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetInfo {
    /// Kind and index.
    pub id: TargetId,
    /// The target's UUID, fixed when it was formatted.
    pub uuid: Uuid,
    /// `HOST:PORT` where the target's server listens.
    pub address: String,
    /// Whether it is in service.
    pub state: TargetState,
    /// Unix time (seconds) of the last registration or heartbeat.
    pub last_seen: u64,
    /// Other `HOST:PORT`s of servers that may take the target over when the one at
    /// `address` dies (`--failover`, Lustre's failover nodes), in the order clients try
    /// them; never contains `address`. Absent in MGS state written before failover.
    #[serde(default)]
    pub failover: Vec<String>,
}

impl TargetInfo {
    /// Every address the target may be served from, in the order to try them: `address`
    /// first, then the failover addresses.
    pub fn addresses(&self) -> Vec<String> {
        let mut out = vec![self.address.clone()];
        for a in &self.failover {
            if !out.contains(a) {
                out.push(a.clone());
            }
        }
        out
    }
}

/// A FID location database entry: which MDT owns a range of sequences.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FldEntry {
    /// The sequences.
    pub range: FidSeqRange,
    /// The owning MDT's index.
    pub mdt: u32,
}

/// The file system's configuration, as clients and servers fetch it from the MGS.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsConfig {
    /// The file system's name.
    pub fsname: String,
    /// The file system's UUID, fixed at creation.
    pub fs_uuid: Uuid,
    /// Incremented on every change; callbacks announce new versions.
    pub version: u64,
    /// Every registered target.
    pub targets: Vec<TargetInfo>,
    /// Persistent parameters (`set_param -P`), by full name.
    pub params: BTreeMap<String, String>,
    /// OST pools: name -> OST indices.
    pub pools: BTreeMap<String, Vec<u32>>,
    /// The FID location database.
    pub fld: Vec<FldEntry>,
    /// The file system's default layout for files whose directories set none.
    pub default_layout: LayoutTemplate,
    /// Data repository associations (`weft repo create`), by id.
    #[serde(default)]
    pub repos: Vec<Repo>,
}

/// A request to the management service.
// Variant fields are described in their variant's doc comment.
#[allow(missing_docs)]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MgsRequest {
    /// A target announces itself (at start, after reformat, and when a failover server
    /// takes it over): served at `address`, and by the servers at `failover` should that
    /// one die. The same index with another UUID is refused unless `replace` is set; the
    /// same UUID moves the target to `address`, wherever that is (see the MGS's
    /// `register`).
    Register {
        id: TargetId,
        uuid: Uuid,
        address: String,
        failover: Vec<String>,
        replace: bool,
    },
    /// A registered target says it is alive.
    Heartbeat { id: TargetId, uuid: Uuid },
    /// The whole configuration.
    GetConfig,
    /// Grants `count` new FID sequences to an MDT; persisted before the reply.
    AllocSeq { mdt: u32, count: u32 },
    /// Sets (or with `None` removes) a persistent parameter.
    SetParam { name: String, value: Option<String> },
    /// Creates an empty pool.
    PoolNew { pool: String },
    /// Adds OSTs to a pool.
    PoolAdd { pool: String, osts: Vec<u32> },
    /// Removes OSTs from a pool.
    PoolRemove { pool: String, osts: Vec<u32> },
    /// Deletes an empty pool.
    PoolDestroy { pool: String },
    /// Sets the file system's default layout.
    SetDefaultLayout { template: LayoutTemplate },
    /// Links directory `dir` (at `spec.path`) to a data repository; answered
    /// [`MgsReply::RepoId`]. EEXIST when the path, or a path above or below it, is linked
    /// already; EINVAL for a spec that fails [`RepoSpec::validate`].
    RepoCreate { spec: RepoSpec, dir: Fid },
    /// Removes repository `id`'s association (its files stay, with their HSM state).
    RepoDelete { id: u32 },
    /// Changes repository `id`'s policies or event queue; EINVAL when the result fails
    /// [`RepoSpec::validate`], ENOENT for no such repository.
    RepoUpdate { id: u32, change: RepoChange },
    /// Sets (or with `None` turns off) repository `id`'s tiering; EINVAL for marks that
    /// fail [`TieringPolicy::validate`].
    RepoTiering {
        id: u32,
        tiering: Option<TieringPolicy>,
    },
    /// Starts a task on repository `repo` (or resumes the last unfinished one of the same
    /// kind and path, keeping its checkpoint and counts); answered [`MgsReply::Task`].
    TaskStart {
        repo: u32,
        kind: TaskKind,
        path: String,
    },
    /// Reports a task's progress: adds the counts, moves the checkpoint, sets the state.
    TaskReport {
        id: u64,
        done: u64,
        failed: u64,
        bytes: u64,
        checkpoint: Option<String>,
        state: TaskState,
    },
    /// Every task kept (newest last); answered [`MgsReply::Tasks`].
    TaskList,
    /// The configuration if its version is not `have` ([`MgsReply::Config`]), else
    /// [`MgsReply::Ok`]: the clients' periodic check, which costs the MGS no copy and the
    /// network a few bytes while nothing changed (a full configuration is ~50 bytes per
    /// target: 50 KB at 1,000 OSTs, polled by every client).
    GetConfigIfNewer { have: u64 },
}

/// The management service's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MgsReply {
    /// Done.
    Ok,
    /// Registration accepted: the configuration as it is now.
    Registered(FsConfig),
    /// The configuration.
    Config(FsConfig),
    /// Granted sequences.
    Seq(FidSeqRange),
    /// The id of a new repository association.
    RepoId(u32),
    /// A task as started or resumed.
    Task(RepoTask),
    /// The tasks kept.
    Tasks(Vec<RepoTask>),
}

/// A callback the MGS sends to connected peers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MgsCallback {
    /// The configuration changed; fetch it again if your version is older.
    ConfigChanged {
        /// The new configuration version.
        version: u64,
    },
}

impl Message for MgsRequest {
    fn opcode(&self) -> u16 {
        match self {
            MgsRequest::Register { .. } => 100,
            MgsRequest::Heartbeat { .. } => 101,
            MgsRequest::GetConfig => 102,
            MgsRequest::AllocSeq { .. } => 103,
            MgsRequest::SetParam { .. } => 104,
            MgsRequest::PoolNew { .. } => 105,
            MgsRequest::PoolAdd { .. } => 106,
            MgsRequest::PoolRemove { .. } => 107,
            MgsRequest::PoolDestroy { .. } => 108,
            MgsRequest::SetDefaultLayout { .. } => 109,
            MgsRequest::RepoCreate { .. } => 110,
            MgsRequest::RepoDelete { .. } => 111,
            MgsRequest::TaskStart { .. } => 112,
            MgsRequest::TaskReport { .. } => 113,
            MgsRequest::TaskList => 114,
            MgsRequest::RepoTiering { .. } => 115,
            MgsRequest::GetConfigIfNewer { .. } => 116,
            MgsRequest::RepoUpdate { .. } => 117,
        }
    }

    fn modifies(&self) -> bool {
        !matches!(
            self,
            MgsRequest::GetConfig | MgsRequest::GetConfigIfNewer { .. } | MgsRequest::TaskList
        )
    }

    fn admin_only(&self) -> bool {
        matches!(
            self,
            MgsRequest::SetParam { .. }
                | MgsRequest::PoolNew { .. }
                | MgsRequest::PoolAdd { .. }
                | MgsRequest::PoolRemove { .. }
                | MgsRequest::PoolDestroy { .. }
                | MgsRequest::SetDefaultLayout { .. }
                | MgsRequest::RepoCreate { .. }
                | MgsRequest::RepoDelete { .. }
                | MgsRequest::RepoUpdate { .. }
        )
    }

    fn server_only(&self) -> bool {
        matches!(
            self,
            MgsRequest::Register { .. }
                | MgsRequest::Heartbeat { .. }
                | MgsRequest::AllocSeq { .. }
        )
    }

    fn op_name(&self) -> &'static str {
        match self {
            MgsRequest::Register { .. } => "register",
            MgsRequest::Heartbeat { .. } => "heartbeat",
            MgsRequest::GetConfig => "getconfig",
            MgsRequest::AllocSeq { .. } => "allocseq",
            MgsRequest::SetParam { .. } => "setparam",
            MgsRequest::PoolNew { .. } => "pool_new",
            MgsRequest::PoolAdd { .. } => "pool_add",
            MgsRequest::PoolRemove { .. } => "pool_remove",
            MgsRequest::PoolDestroy { .. } => "pool_destroy",
            MgsRequest::SetDefaultLayout { .. } => "set_default_layout",
            MgsRequest::RepoCreate { .. } => "repo_create",
            MgsRequest::RepoDelete { .. } => "repo_delete",
            MgsRequest::TaskStart { .. } => "task_start",
            MgsRequest::TaskReport { .. } => "task_report",
            MgsRequest::TaskList => "task_list",
            MgsRequest::RepoTiering { .. } => "repo_tiering",
            MgsRequest::GetConfigIfNewer { .. } => "getconfig_if_newer",
            MgsRequest::RepoUpdate { .. } => "repo_update",
        }
    }
}

impl Message for MgsCallback {
    fn opcode(&self) -> u16 {
        match self {
            MgsCallback::ConfigChanged { .. } => 150,
        }
    }

    fn op_name(&self) -> &'static str {
        match self {
            MgsCallback::ConfigChanged { .. } => "config_changed",
        }
    }
}

impl FsConfig {
    /// The registered targets of one kind, in index order.
    pub fn targets_of(&self, kind: TargetKind) -> impl Iterator<Item = &TargetInfo> {
        self.targets.iter().filter(move |t| t.id.kind == kind)
    }

    /// The registered target with this id.
    pub fn target(&self, id: TargetId) -> Option<&TargetInfo> {
        self.targets.iter().find(|t| t.id == id)
    }

    /// Repository association `id`.
    pub fn repo(&self, id: u32) -> Option<&Repo> {
        self.repos.iter().find(|r| r.id == id)
    }

    /// The MDT owning FID sequence `seq`, from the FID location database.
    pub fn mdt_of_seq(&self, seq: u64) -> Option<u32> {
        if seq == crate::fid::ROOT_SEQ {
            return Some(0);
        }
        self.fld
            .iter()
            .find(|e| e.range.contains(seq))
            .map(|e| e.mdt)
    }
}
