//! Hierarchical storage management: a file's state against an archive (Lustre's HSM
//! flags), where its archived copy is, and the data repositories (an S3 bucket and prefix,
//! or another object store) linked to directories of the file system (FSx for Lustre's
//! data repository associations).
//!
//! A repository's id is the Lustre archive id of the files it archives (`Attr::archive_id`):
//! 1 and up, never reused while the repository exists.

use crate::fid::Fid;
use crate::layout::Layout;
use crate::time::Timestamp;
use serde::{Deserialize, Serialize};

/// HSM state: the file has a copy in the archive (Lustre's `HS_EXISTS`).
pub const HSM_EXISTS: u32 = 0x1;
/// HSM state: the file changed since it was archived (`HS_DIRTY`).
pub const HSM_DIRTY: u32 = 0x2;
/// HSM state: the data is not on the OSTs; a read restores it first (`HS_RELEASED`).
pub const HSM_RELEASED: u32 = 0x4;
/// HSM state: the archive copy is complete and current (`HS_ARCHIVED`).
pub const HSM_ARCHIVED: u32 = 0x8;
/// HSM state: never release this file (`HS_NORELEASE`).
pub const HSM_NORELEASE: u32 = 0x10;
/// HSM state: never archive this file (`HS_NOARCHIVE`).
pub const HSM_NOARCHIVE: u32 = 0x20;
/// HSM state: the archive copy was lost (`HS_LOST`).
pub const HSM_LOST: u32 = 0x40;
/// Every HSM flag an archive uses (not [`HSM_PCCRW`], which only the PCC changes).
pub const HSM_ALL: u32 = 0x7f;
/// HSM state: the file's data is in the read-write persistent client cache of one client
/// (Lustre's `HS_PCCRW`), which copies it into the file system after its last close;
/// other clients' opens wait for that copy ([`crate::mdt::MdtRequest::HsmPccWait`]). Set
/// and cleared only by [`crate::mdt::MdtRequest::HsmPccRw`].
pub const HSM_PCCRW: u32 = 0x80;
/// The name of the extended attribute (on the MDT, root only) that holds the owner of a
/// file with [`HSM_PCCRW`]: the id of the cache directory that holds its data.
pub const PCC_XATTR: &[u8] = b"trusted.weft.pcc";
/// Longest PCC owner id accepted.
pub const PCC_OWNER_MAX: usize = 64;
/// Longest wait one `HsmPccWait` may ask for, in milliseconds (a client asks again).
pub const PCC_WAIT_MAX_MS: u32 = 10_000;
/// The flags `weft hsm_set`/`hsm_clear` may change (as `lfs hsm_set`): RELEASED is
/// changed only by a release or a restore.
pub const HSM_SETTABLE: u32 = HSM_ALL & !HSM_RELEASED;

/// The names of the flags set in `flags`, in bit order, as `lfs hsm_state` prints them.
pub fn flag_names(flags: u32) -> Vec<&'static str> {
    FLAG_NAMES
        .iter()
        .filter(|(bit, _)| flags & bit != 0)
        .map(|&(_, name)| name)
        .collect()
}

/// The flag named `name` (`exists`, `dirty`, ... as in `lfs hsm_set --exists`).
pub fn flag_by_name(name: &str) -> Option<u32> {
    FLAG_NAMES
        .iter()
        .find(|(_, n)| n.eq_ignore_ascii_case(name))
        .map(|&(bit, _)| bit)
}

const FLAG_NAMES: [(u32, &str); 8] = [
    (HSM_EXISTS, "exists"),
    (HSM_DIRTY, "dirty"),
    (HSM_RELEASED, "released"),
    (HSM_ARCHIVED, "archived"),
    (HSM_NORELEASE, "norelease"),
    (HSM_NOARCHIVE, "noarchive"),
    (HSM_LOST, "lost"),
    (HSM_PCCRW, "pccrw"),
];

/// The name of the extended attribute (on the MDT, root only) that holds a file's
/// [`ArchiveRef`].
pub const ARCHIVE_XATTR: &[u8] = b"trusted.weft.archive";

/// An HSM action running on a file, as `weft hsm_action` reports it (Lustre's
/// `lfs hsm_action`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HsmActionState {
    /// What runs.
    pub action: HsmActionKind,
    /// Bytes moved so far.
    pub bytes_done: u64,
    /// The file's size, once the action has read it.
    pub size: Option<u64>,
}

/// The kinds of HSM action the MDT's coordinator runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum HsmActionKind {
    /// The file's data is being restored from its archive.
    Restore,
}

impl HsmActionKind {
    /// The name Lustre's tools print.
    pub fn name(self) -> &'static str {
        match self {
            HsmActionKind::Restore => "RESTORE",
        }
    }
}

/// Where a file's archived copy is and what it was when archived or imported: enough to
/// fetch it again and to see that the object changed since.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchiveRef {
    /// The object's key in the repository's store (the prefix included).
    pub key: String,
    /// The object's entity tag when archived or imported, if the store gives one.
    pub etag: Option<String>,
    /// The object's size in bytes.
    pub size: u64,
    /// The object's last-modified time in the store.
    pub modified: Timestamp,
}

/// Longest object key accepted (S3's limit is 1,024 bytes).
pub const KEY_MAX: usize = 1024;

/// Which changes a repository association carries in one direction (FSx's `NEW`,
/// `CHANGED`, `DELETED` event types).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepoPolicy {
    /// New objects or files.
    pub new: bool,
    /// Changed objects or files.
    pub changed: bool,
    /// Deleted objects or files.
    pub deleted: bool,
}

impl RepoPolicy {
    /// Parses `NEW,CHANGED,DELETED` (any subset, any case; empty or `NONE` for none).
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut p = RepoPolicy::default();
        for word in s.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            match word.to_ascii_uppercase().as_str() {
                "NEW" => p.new = true,
                "CHANGED" => p.changed = true,
                "DELETED" => p.deleted = true,
                "NONE" => {}
                _ => {
                    return Err(format!(
                        "{word:?} is not an event type: use NEW, CHANGED, DELETED or NONE"
                    ));
                }
            }
        }
        Ok(p)
    }

    /// Whether any change is carried.
    pub fn any(&self) -> bool {
        self.new || self.changed || self.deleted
    }
}

impl std::fmt::Display for RepoPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let words: Vec<&str> = [
            (self.new, "NEW"),
            (self.changed, "CHANGED"),
            (self.deleted, "DELETED"),
        ]
        .iter()
        .filter(|(on, _)| *on)
        .map(|&(_, w)| w)
        .collect();
        if words.is_empty() {
            f.write_str("NONE")
        } else {
            f.write_str(&words.join(","))
        }
    }
}

/// What `weft repo create` asks for. Credentials are never part of it: every process
/// that reaches the store takes them from its own environment (the usual chain of
/// environment variables, profile files and instance metadata).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepoSpec {
    /// The linked directory's path in the file system (absolute, normalised).
    pub path: String,
    /// `s3://BUCKET/PREFIX`, `gs://BUCKET/PREFIX`, `az://CONTAINER/PREFIX` or
    /// `file:///DIR`.
    pub url: String,
    /// An S3-compatible server's endpoint (`http://127.0.0.1:9000`), or an Azure account's URL
    /// (an emulator's, a private endpoint's); `None` for the cloud's own.
    pub endpoint: Option<String>,
    /// The store's region, if it needs one.
    pub region: Option<String>,
    /// Path-style addressing (`ENDPOINT/BUCKET/KEY`), as most S3-compatible servers want.
    pub path_style: bool,
    /// Changes in the store that the file system follows (auto import).
    pub import_policy: RepoPolicy,
    /// Changes in the file system written back to the store (auto export).
    pub export_policy: RepoPolicy,
    /// Import the objects' metadata when the association is created.
    pub import_metadata: bool,
    /// The most bytes of one imported file on one OST (FSx's `ImportedFileChunkSize`,
    /// default 1 GiB): an imported file larger than this is striped over
    /// `ceil(size / chunk_size)` OSTs (at most all of them) in chunks of 1 MiB; smaller
    /// ones get their directory's default layout.
    pub chunk_size: u64,
    /// The queue the store's event notifications go to: for `s3://`, an SQS queue of the
    /// bucket's `ObjectCreated:*` and `ObjectRemoved:*`; for `az://`, a storage queue an
    /// Event Grid subscription delivers the container's blob events to. The auto import
    /// follows them within seconds and lists the whole prefix only as a safety net,
    /// rarely. Repositories with an import policy only.
    #[serde(default)]
    pub events: Option<String>,
}

/// The longest event queue URL.
pub const EVENTS_URL_MAX: usize = 1024;

/// What `weft repo update` changes of an association (FSx's
/// `UpdateDataRepositoryAssociation`): each `None` leaves that part as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepoChange {
    /// The new import policy.
    pub import_policy: Option<RepoPolicy>,
    /// The new export policy.
    pub export_policy: Option<RepoPolicy>,
    /// The new event queue (`Some(None)`: none any more).
    pub events: Option<Option<String>>,
}

impl RepoChange {
    /// `spec` with this change made (not validated).
    pub fn applied_to(&self, spec: &RepoSpec) -> RepoSpec {
        let mut s = spec.clone();
        if let Some(p) = self.import_policy {
            s.import_policy = p;
        }
        if let Some(p) = self.export_policy {
            s.export_policy = p;
        }
        if let Some(q) = &self.events {
            s.events.clone_from(q);
        }
        s
    }
}

/// Smallest and largest restore chunk size.
pub const CHUNK_SIZE_MIN: u64 = 1 << 20;
/// See [`CHUNK_SIZE_MIN`].
pub const CHUNK_SIZE_MAX: u64 = 512 << 30;
/// Most repositories one file system may link.
pub const REPOS_MAX: usize = 64;

impl RepoSpec {
    /// Checks what the MGS can check without reaching the store: path, URL scheme,
    /// lengths and chunk size.
    pub fn validate(&self) -> Result<(), String> {
        if !self.path.starts_with('/') || self.path.len() > 4096 {
            return Err(format!("{:?} is not an absolute path", self.path));
        }
        if self.path.split('/').any(|c| c == "." || c == "..") {
            return Err(format!("{:?} has . or .. components", self.path));
        }
        let scheme = self
            .url
            .split_once("://")
            .map(|(s, _)| s)
            .ok_or_else(|| format!("{:?} is not a URL (s3://BUCKET/PREFIX)", self.url))?;
        if !matches!(scheme, "s3" | "gs" | "az" | "file") {
            return Err(format!(
                "{scheme}:// is not a supported store: use s3://, gs://, az:// or file://"
            ));
        }
        if self.url.len() > KEY_MAX + 256 {
            return Err("the URL is too long".into());
        }
        if let Some(q) = &self.events {
            if !matches!(scheme, "s3" | "az") {
                return Err(format!(
                    "event notifications come from S3 (an SQS queue) or Azure (Event Grid to \
                     a storage queue): not from {scheme}://"
                ));
            }
            if !self.import_policy.any() {
                return Err("an event queue needs an import policy (--import-policy)".into());
            }
            if q.len() > EVENTS_URL_MAX
                || !(q.starts_with("https://") || q.starts_with("http://"))
                || q.contains(['@', '?', '#', ' '])
            {
                return Err(
                    "the event queue is not a plain queue URL (https://sqs.REGION.amazonaws.com/ACCOUNT/QUEUE, https://ACCOUNT.queue.core.windows.net/QUEUE)"
                        .into(),
                );
            }
        }
        if !(CHUNK_SIZE_MIN..=CHUNK_SIZE_MAX).contains(&self.chunk_size) {
            return Err(format!(
                "chunk size {} is outside {CHUNK_SIZE_MIN}..={CHUNK_SIZE_MAX}",
                self.chunk_size
            ));
        }
        Ok(())
    }
}

/// Whether normalised absolute path `inner` is `outer` or below it (by whole components:
/// `/ab` is not below `/a`).
pub fn path_within(inner: &str, outer: &str) -> bool {
    outer == "/"
        || inner == outer
        || (inner.starts_with(outer) && inner.as_bytes().get(outer.len()) == Some(&b'/'))
}

/// Whether one of two normalised absolute paths is the other or below it: two
/// repository associations may not nest.
pub fn paths_nest(a: &str, b: &str) -> bool {
    path_within(a, b) || path_within(b, a)
}

/// A repository association as the MGS keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Repo {
    /// Its id, the archive id of its files (1 and up).
    pub id: u32,
    /// What was asked.
    pub spec: RepoSpec,
    /// The linked directory's FID, resolved when the association was made.
    pub dir: Fid,
    /// When it was made.
    pub created: Timestamp,
    /// Tiering (`weft repo tiering`): released by usage; `None` when off.
    #[serde(default)]
    pub tiering: Option<TieringPolicy>,
}

/// Tiering of a repository's files (`weft repo tiering PATH --high 80% --low 60%
/// --min-age 1d`): when an OST's usage passes `high_pct`, the repository agent releases
/// archived, clean, closed files of the repository not used for `min_age_secs`, least
/// recently used first, until that OST is below `low_pct`; a restore that would take an
/// OST past `high_pct` waits for that room first (bounded).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TieringPolicy {
    /// Usage (percent of an OST's size) that starts releases: 1..=100.
    pub high_pct: u8,
    /// Usage releases bring an OST under: below `high_pct`.
    pub low_pct: u8,
    /// Files used (read, restored or changed) more recently than this are kept.
    pub min_age_secs: u64,
}

impl TieringPolicy {
    /// Checks the marks: `0 <= low < high <= 100`.
    pub fn validate(&self) -> Result<(), String> {
        if self.high_pct == 0 || self.high_pct > 100 {
            return Err(format!("high mark {}% is outside 1..=100%", self.high_pct));
        }
        if self.low_pct >= self.high_pct {
            return Err(format!(
                "low mark {}% is not below the high mark {}%",
                self.low_pct, self.high_pct
            ));
        }
        Ok(())
    }

    /// The bytes of an OST of `total` bytes at `pct` percent.
    pub fn mark(total: u64, pct: u8) -> u64 {
        u64::try_from(u128::from(total) * u128::from(pct) / 100).unwrap_or(u64::MAX)
    }
}

/// Bytes restores wait to write to one OST under a tiering high mark
/// (`MdtRequest::HsmTieringWants`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OstWant {
    /// The OST's index.
    pub ost: u32,
    /// The bytes waiting for room on it.
    pub bytes: u64,
}

/// Most [`OstWant`]s one `HsmTieringWants` carries (one per OST; more are refused).
pub const TIERING_WANTS_MAX: usize = 65_536;

/// What a repository task does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TaskKind {
    /// Import the store's metadata into the namespace.
    Import,
    /// Export new and changed files to the store.
    Export,
    /// Restore released files' data (`weft hsm_restore`).
    Restore,
    /// Release archived files' data.
    Release,
}

/// Where a task is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum TaskState {
    /// Running (or interrupted: a later run resumes from `checkpoint`).
    Running,
    /// Finished.
    Done,
    /// Stopped by an error.
    Failed(String),
}

/// A repository task as the MGS keeps it: `weft repo tasks` lists them; an interrupted
/// import resumes after `checkpoint`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepoTask {
    /// Task id (1 and up).
    pub id: u64,
    /// The repository.
    pub repo: u32,
    /// What it does.
    pub kind: TaskKind,
    /// The path it works on.
    pub path: String,
    /// Where it is.
    pub state: TaskState,
    /// When it started.
    pub started: Timestamp,
    /// When it last reported.
    pub updated: Timestamp,
    /// Items done (objects imported, files exported or restored).
    pub done: u64,
    /// Items that failed.
    pub failed: u64,
    /// Bytes moved.
    pub bytes: u64,
    /// The last key (or path) fully handled: a resumed task continues after it.
    pub checkpoint: Option<String>,
}

/// Most tasks the MGS keeps (the oldest finished ones go first).
pub const TASKS_MAX: usize = 1024;

/// The kind of an imported entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ImportKind {
    /// A regular file whose data stays in the store until read.
    Regular,
    /// A symbolic link (an object FSx exported with the link bit in its mode; the target
    /// is its body).
    Symlink,
}

/// One object to import into a directory (`MdtRequest::ImportEntries`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImportEntry {
    /// The entry's name in the directory.
    pub name: Vec<u8>,
    /// File or symlink.
    pub kind: ImportKind,
    /// Permission bits (`0o7777`).
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Access time.
    pub atime: Timestamp,
    /// Modification time.
    pub mtime: Timestamp,
    /// A symlink's target (empty for files).
    pub target: Vec<u8>,
    /// The object: its size is the file's.
    pub archive: ArchiveRef,
    /// A layout for a file larger than the repository's chunk size (see
    /// [`RepoSpec::chunk_size`]); `None`: the directory's default, as for a create.
    pub layout: Option<crate::layout::LayoutTemplate>,
}

/// What importing one entry did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ImportOutcome {
    /// A new file (or symlink) now names the object.
    Created(Fid),
    /// The name already names this object, unchanged (same key, tag and size).
    Unchanged(Fid),
    /// The name named an older version of the object; it is now released against the new
    /// one (attributes updated, loaded data dropped).
    Updated(Fid),
    /// The name is taken by something the import must not replace (a local file with
    /// changes not exported, a file open for writing, a directory, another object):
    /// reported as a conflict and left alone.
    Conflict(Fid),
    /// The entry was refused (bad name, permission); the errno's code.
    Failed(i32),
}

/// One piece of a restore, as an MDT hands it to its data mover: copy bytes `[start, end)`
/// of the archived object into file `fid`'s OST objects as `layout` places them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreChunk {
    /// The file.
    pub fid: Fid,
    /// Its layout, instantiated over `[start, end)`.
    pub layout: Layout,
    /// The repository holding the archived copy.
    pub repo: u32,
    /// The archived object.
    pub archive: ArchiveRef,
    /// First byte to copy.
    pub start: u64,
    /// One past the last byte to copy (at most the object's size).
    pub end: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nesting_is_by_whole_components() {
        assert!(paths_nest("/a", "/a"));
        assert!(paths_nest("/a", "/a/b"));
        assert!(paths_nest("/a/b", "/a"));
        assert!(paths_nest("/", "/x"));
        assert!(!paths_nest("/a", "/ab"));
        assert!(!paths_nest("/ab", "/a"));
        assert!(!paths_nest("/a/b", "/a/c"));
        assert!(path_within("/a/b", "/a") && !path_within("/a", "/a/b"));
    }

    #[test]
    fn policies_parse_and_print() {
        let p = RepoPolicy::parse("new, Deleted").unwrap();
        assert!(p.new && !p.changed && p.deleted);
        assert_eq!(p.to_string(), "NEW,DELETED");
        assert_eq!(RepoPolicy::parse("NONE").unwrap().to_string(), "NONE");
        assert!(RepoPolicy::parse("NEWISH").is_err());
        assert_eq!(flag_names(0xd), ["exists", "released", "archived"]);
        assert_eq!(flag_by_name("NoRelease"), Some(HSM_NORELEASE));
    }

    #[test]
    fn event_queues_need_s3_an_import_policy_and_a_plain_url() {
        let spec = |url: &str, import: &str, events: &str| RepoSpec {
            path: "/data".into(),
            url: url.into(),
            endpoint: None,
            region: None,
            path_style: false,
            import_policy: RepoPolicy::parse(import).unwrap(),
            export_policy: RepoPolicy::default(),
            import_metadata: false,
            chunk_size: 1 << 30,
            events: Some(events.into()),
        };
        let q = "https://sqs.us-east-1.amazonaws.com/123456789012/q";
        assert!(spec("s3://b/p", "NEW", q).validate().is_ok());
        assert!(
            spec("s3://b/p", "NEW", "http://127.0.0.1:5000/1/q")
                .validate()
                .is_ok()
        );
        let err = |s: RepoSpec| s.validate().unwrap_err();
        assert!(err(spec("gs://b/p", "NEW", q)).contains("come from S3"));
        assert!(err(spec("s3://b/p", "NONE", q)).contains("import policy"));
        for bad in ["sqs://q", "https://k:s@sqs/q", "https://sqs/q?sig=1", "q"] {
            assert!(
                err(spec("s3://b/p", "NEW", bad)).contains("not a plain"),
                "{bad}"
            );
        }
        let long = format!("https://sqs/{}", "q".repeat(EVENTS_URL_MAX));
        assert!(spec("s3://b/p", "NEW", &long).validate().is_err());
    }

    #[test]
    fn tiering_marks_are_checked() {
        let t = |high_pct, low_pct| TieringPolicy {
            high_pct,
            low_pct,
            min_age_secs: 0,
        };
        assert!(t(80, 60).validate().is_ok());
        assert!(t(60, 60).validate().is_err());
        assert!(t(101, 60).validate().is_err());
        assert!(t(0, 0).validate().is_err());
        assert_eq!(TieringPolicy::mark(1000, 80), 800);
        assert_eq!(TieringPolicy::mark(u64::MAX, 100), u64::MAX);
    }
}
