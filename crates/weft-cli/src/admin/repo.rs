//! `weft repo create|list|show|delete|tasks|import|export|tiering`: data repositories (an S3
//! bucket and prefix, or another object store) linked to directories of the file system,
//! as FSx for Lustre's data repository associations.
//!
//! An association is kept by the MGS ([`MgsRequest::RepoCreate`]); its id is the Lustre
//! archive id of the files it archives. Imports and exports run here, in this process,
//! as tasks the MGS keeps (`weft repo tasks`): an interrupted import resumes after its
//! checkpoint when started again.
//!
//! Credentials never pass through here: the store's SDK reads them from this process's
//! environment, the spec the MGS keeps never holds them, and what these verbs print about
//! a store is a [`weft_repo::RepoError`]'s message (which strips them). URLs that carry
//! credentials or a query string (a signed URL) are refused without being echoed.

use weft_repo::export::{self, ExportOptions, ExportProgress};
use weft_repo::import::{self, ImportOptions, ImportProgress};

use super::fspath::{self, FsPath};
use anyhow::{Context, Result, anyhow, bail};
use bytes::Bytes;
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use std::io::IsTerminal;
use std::sync::Arc;
use weft_client::{Client, ClientError, Cluster};
use weft_proto::hsm::{
    Repo, RepoPolicy, RepoSpec, RepoTask, TaskKind, TaskState, path_within, paths_nest,
};
use weft_proto::mdt::{Attr, Credentials, FileKind};
use weft_proto::mgs::{FsConfig, MgsReply, MgsRequest};
use weft_proto::{Errno, Fid, TargetId};
use weft_repo::RepoError;

mod show;
mod tiering;
mod transfer;
use show::{delete, list, show, tasks};
pub use tiering::{TieringArgs, released_all};
use transfer::{export, import, run_import};
pub use transfer::{progress_bar, run_export};

/// Objects an import handles at once unless `--parallel` says otherwise.
pub const IMPORT_PARALLEL: usize = 16;
/// Files an export copies at once unless `--parallel` says otherwise.
pub const EXPORT_PARALLEL: usize = 8;

/// Flags of `weft repo`.
#[derive(Args, Debug)]
pub struct RepoArgs {
    /// The MGS, for verbs given a repository id or no file system (default: $WEFT_MGS,
    /// else 127.0.0.1:9400).
    #[arg(long, global = true, value_parser = crate::parse_addr)]
    pub mgs: Option<String>,
    #[command(subcommand)]
    pub verb: RepoVerb,
}

/// What to do with data repositories.
#[derive(Subcommand, Debug)]
pub enum RepoVerb {
    /// Link a directory (created if missing) to a store; prints the repository's id.
    Create(CreateArgs),
    /// List the repositories of a file system.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// The file system: HOST:PORT:/FSNAME or a path in a mount (default: --mgs).
        fs: Option<String>,
    },
    /// Show one repository.
    Show {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// The repository's id (with --mgs), or a path at or inside its directory.
        target: String,
    },
    /// Remove a repository association (its files stay, with their HSM state).
    Delete {
        /// The repository's id (with --mgs), or its directory.
        target: String,
    },
    /// List import, export and restore tasks.
    Tasks {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// The file system: HOST:PORT:/FSNAME or a path in a mount (default: --mgs).
        fs: Option<String>,
    },
    /// Import (or resume importing) the store's metadata into the repository's directory.
    Import {
        /// Objects handled at once.
        #[arg(long, default_value_t = IMPORT_PARALLEL)]
        parallel: usize,
        /// The repository's directory (or a path inside it), or its id with --mgs.
        target: String,
    },
    /// Export new and changed files under a path to its repository's store.
    Export {
        /// Files copied at once.
        #[arg(long, default_value_t = EXPORT_PARALLEL)]
        parallel: usize,
        /// A path in a repository's directory (in a mount or HOST:PORT:/FSNAME/PATH).
        path: String,
    },
    /// Release least recently used archived files when OSTs fill (or --off).
    Tiering(TieringArgs),
    /// Change a repository's import or export policy or its event queue.
    Update(UpdateArgs),
}

/// Flags of `weft repo update`: what is not given stays.
#[derive(Args, Debug)]
pub struct UpdateArgs {
    /// The repository's directory, or its id with --mgs.
    pub target: String,
    /// Changes in the store the file system follows: NEW,CHANGED,DELETED (or NONE).
    #[arg(long, value_parser = RepoPolicy::parse)]
    pub import_policy: Option<RepoPolicy>,
    /// Changes in the file system written back to the store: NEW,CHANGED,DELETED (or NONE).
    #[arg(long, value_parser = RepoPolicy::parse)]
    pub export_policy: Option<RepoPolicy>,
    /// The queue URL the store's event notifications go to (SQS for s3://, a storage
    /// queue fed by Event Grid for az://).
    #[arg(long, value_name = "QUEUE_URL", conflicts_with = "no_events")]
    pub events: Option<String>,
    /// No event queue any more (the auto import lists every sweep again).
    #[arg(long)]
    pub no_events: bool,
}

/// Flags of `weft repo create`.
#[derive(Args, Debug)]
pub struct CreateArgs {
    /// The directory to link, created if missing: a path in a mount or
    /// HOST:PORT:/FSNAME/PATH.
    pub path: String,
    /// The store: s3://BUCKET/PREFIX, gs://BUCKET/PREFIX, az://CONTAINER/PREFIX or
    /// file:///DIR. Credentials come from the environment, never from the URL.
    pub url: String,
    /// An S3-compatible server's endpoint (http://127.0.0.1:9000), or an Azure account's URL
    /// (Azurite: http://127.0.0.1:10000/devstoreaccount1).
    #[arg(long)]
    pub endpoint: Option<String>,
    /// The store's region.
    #[arg(long)]
    pub region: Option<String>,
    /// Path-style addressing (ENDPOINT/BUCKET/KEY), as most S3-compatible servers want.
    #[arg(long)]
    pub path_style: bool,
    /// Changes in the store the file system follows: NEW,CHANGED,DELETED (or NONE).
    #[arg(long, value_parser = RepoPolicy::parse, default_value = "NONE")]
    pub import_policy: RepoPolicy,
    /// Changes in the file system written back to the store: NEW,CHANGED,DELETED (or NONE).
    #[arg(long, value_parser = RepoPolicy::parse, default_value = "NONE")]
    pub export_policy: RepoPolicy,
    /// Import the objects' metadata right away (as `weft repo import`).
    #[arg(long)]
    pub import_metadata: bool,
    /// The most bytes of one imported file on one OST (1M to 512G; K, M, G, T suffixes).
    #[arg(long, value_parser = parse_chunk_size, default_value = "1G")]
    pub chunk_size: u64,
    /// With --import-metadata: objects handled at once.
    #[arg(long, default_value_t = IMPORT_PARALLEL)]
    pub parallel: usize,
    /// The queue URL the store's event notifications go to: an SQS queue of the bucket's
    /// ObjectCreated:* and ObjectRemoved:* (s3://), or a storage queue an Event Grid
    /// subscription delivers the container's BlobCreated and BlobDeleted to (az://). The
    /// auto import follows them within seconds (with an --import-policy only).
    #[arg(long, value_name = "QUEUE_URL")]
    pub events: Option<String>,
}

fn parse_chunk_size(s: &str) -> Result<u64, String> {
    super::stripe::parse_size(s).map_err(|e| format!("{e:#}"))
}

/// Runs the verb.
pub async fn run(args: RepoArgs) -> Result<()> {
    let mgs = args.mgs.as_deref();
    match args.verb {
        RepoVerb::Create(a) => create(a).await,
        RepoVerb::List { json, fs } => list(mgs, fs.as_deref(), json).await,
        RepoVerb::Show { json, target } => show(mgs, &target, json).await,
        RepoVerb::Delete { target } => delete(mgs, &target).await,
        RepoVerb::Tasks { json, fs } => tasks(mgs, fs.as_deref(), json).await,
        RepoVerb::Import { parallel, target } => import(mgs, &target, parallel).await,
        RepoVerb::Export { parallel, path } => export(&path, parallel).await,
        RepoVerb::Tiering(a) => tiering::tiering(mgs, a).await,
        RepoVerb::Update(a) => update(mgs, a).await,
    }
}

// ---------------------------------------------------------------------------------------
// Talking to the MGS.

/// Sends `req` to the MGS and answers its reply; errors read like the client library's
/// (`mgs: EEXIST: ...`).
pub async fn mgs_call(cluster: &Cluster, req: MgsRequest) -> Result<MgsReply> {
    let op = weft_proto::codec::Message::op_name(&req);
    cluster
        .mgs()
        .connection()
        .call::<MgsRequest, MgsReply>(&req, Bytes::new())
        .await
        .map(|(reply, _)| reply)
        .map_err(|error| {
            anyhow!(
                "{}",
                ClientError::Rpc {
                    target: TargetId::MGS,
                    error
                }
            )
        })
        .with_context(|| format!("MGS request {op} failed"))
}

/// Starts (or resumes) a task on the MGS.
pub async fn task_start(
    cluster: &Cluster,
    repo: u32,
    kind: TaskKind,
    path: String,
) -> Result<RepoTask> {
    match mgs_call(cluster, MgsRequest::TaskStart { repo, kind, path }).await? {
        MgsReply::Task(t) => Ok(t),
        other => bail!("the MGS answered {other:?} to a task start"),
    }
}

/// The configuration as the MGS has it now (repositories change behind a cached one).
async fn fresh_config(cluster: &Cluster) -> Result<Arc<FsConfig>> {
    cluster
        .refresh()
        .await
        .map_err(|e| anyhow!("cannot fetch the configuration: {e}"))
}

/// The file system a list-like verb shows: `HOST:PORT:/FSNAME`, a path in a mount, or
/// `--mgs` (and whatever file system it serves).
async fn connect_fs(mgs: Option<&str>, fs: Option<&str>) -> Result<(Arc<Cluster>, Option<FsPath>)> {
    match fs {
        Some(spec) => match super::parse_fs_spec(spec) {
            Ok((addr, fsname)) => Ok((super::connect(&addr, &fsname).await?, None)),
            Err(_) => {
                let p = fspath::resolve(spec)?;
                let c = super::connect(&p.mgs, &p.fsname).await?;
                Ok((c, Some(p)))
            }
        },
        None => Ok((super::connect(&super::mgs_address(mgs), "").await?, None)),
    }
}

/// A repository named by id or by a path.
enum Target {
    Id(u32),
    Path(FsPath),
}

fn parse_target(s: &str) -> Result<Target> {
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        let id = s
            .parse()
            .with_context(|| format!("'{s}' is not a repository id"))?;
        return Ok(Target::Id(id));
    }
    let mut p = fspath::resolve(s)?;
    p.inner = normalise(&p.inner)?;
    Ok(Target::Path(p))
}

/// How a repository is matched by a path.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Match {
    /// The repository's directory itself.
    Exact,
    /// Its directory or anything inside it.
    Within,
}

/// Finds the repository `target` names: the cluster, the path it was named by (if any)
/// and the repository.
async fn find_repo(
    mgs: Option<&str>,
    target: &str,
    how: Match,
) -> Result<(Arc<Cluster>, Option<FsPath>, Repo)> {
    match parse_target(target)? {
        Target::Id(id) => {
            let cluster = super::connect(&super::mgs_address(mgs), "").await?;
            let config = fresh_config(&cluster).await?;
            let repo = config
                .repo(id)
                .cloned()
                .with_context(|| format!("no repository {id} (see `weft repo list`)"))?;
            Ok((cluster, None, repo))
        }
        Target::Path(p) => {
            let cluster = super::connect(&p.mgs, &p.fsname).await?;
            let config = fresh_config(&cluster).await?;
            let shown = p.display(&p.inner);
            let repo = match repo_of_path(&config, &p.inner) {
                Some(r) if how == Match::Within || r.spec.path == p.inner => r.clone(),
                Some(r) => bail!(
                    "{shown} is inside repository {}'s directory {}: name that directory or the id",
                    r.id,
                    p.display(&r.spec.path)
                ),
                None => bail!("{shown} is not linked to a data repository (see `weft repo list`)"),
            };
            Ok((cluster, Some(p), repo))
        }
    }
}

/// The repository whose directory is `path` or holds it.
pub fn repo_of_path<'a>(config: &'a FsConfig, path: &str) -> Option<&'a Repo> {
    config
        .repos
        .iter()
        .find(|r| path_within(path, &r.spec.path))
}

/// `/a//b/` -> `/a/b`; `.` and `..` are refused (a mount path has none left).
pub fn normalise(path: &str) -> Result<String> {
    let mut out = String::new();
    for c in path.split('/').filter(|c| !c.is_empty()) {
        if c == "." || c == ".." {
            bail!("{path:?} has . or .. components");
        }
        out.push('/');
        out.push_str(c);
    }
    if out.is_empty() {
        out.push('/');
    }
    Ok(out)
}

/// A repository path as the user should see it: through the mount it was named by.
fn shown(via: Option<&FsPath>, path: &str) -> String {
    match via {
        Some(p) => p.display(path),
        None => path.to_string(),
    }
}

/// A store error as printed: its own message only (which names the URL and key, never
/// credentials), without a chain of sources that could hold more.
pub fn repo_error(e: &RepoError) -> anyhow::Error {
    anyhow!("{e}")
}

/// Refuses URLs carrying credentials (`USER:SECRET@HOST`) or a query string (a signed
/// URL), without echoing them.
fn refuse_secrets(what: &str, url: &str) -> Result<()> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or("");
    if authority.contains('@') {
        bail!(
            "the {what} holds credentials (USER:SECRET@...): give them in the environment \
             (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, ...), never on the command line"
        );
    }
    if url.contains('?') || url.contains('#') {
        bail!("the {what} has a query string (a signed URL?): give the store's plain URL");
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// create

/// `weft repo create PATH URL [...]`.
async fn create(a: CreateArgs) -> Result<()> {
    refuse_secrets("URL", &a.url)?;
    if let Some(e) = &a.endpoint {
        refuse_secrets("endpoint", e)?;
    }
    if let Some(q) = &a.events {
        refuse_secrets("event queue URL", q)?;
    }
    let p = fspath::resolve(&a.path)?;
    let inner = normalise(&p.inner)?;
    let display = p.display(&inner);
    let spec = RepoSpec {
        path: inner.clone(),
        url: a.url.clone(),
        endpoint: a.endpoint.clone(),
        region: a.region.clone(),
        path_style: a.path_style,
        import_policy: a.import_policy,
        export_policy: a.export_policy,
        import_metadata: a.import_metadata,
        events: a.events.clone(),
        chunk_size: a.chunk_size,
    };
    spec.validate().map_err(|e| anyhow!("{e}"))?;
    // The store first: a bad URL, a missing bucket or refused credentials leave nothing
    // behind, neither a directory nor an association.
    let store = weft_repo::RepoStore::open(&spec).map_err(|e| repo_error(&e))?;
    store
        .check()
        .await
        .map_err(|e| repo_error(&e).context("the store does not answer"))?;
    if let Some(queue) = &spec.events {
        check_queue(&store, queue).await?;
    }

    let client = fspath::connect_client(&p).await?;
    let cluster = client.cluster().clone();
    // Nesting is the MGS's to refuse; told here too so that no directory is made for an
    // association that cannot be.
    let config = fresh_config(&cluster).await?;
    if let Some(r) = config
        .repos
        .iter()
        .find(|r| paths_nest(&r.spec.path, &inner))
    {
        bail!(
            "cannot link {display} to {}: EEXIST: {} is linked to {} already (repository {}); \
             associations may not nest",
            a.url,
            p.display(&r.spec.path),
            r.spec.url,
            r.id
        );
    }
    let cred = fspath::my_credentials();
    let dir = mkdir_p(&client, &p, &inner, &cred).await?;
    let id = match mgs_call(&cluster, MgsRequest::RepoCreate { spec, dir: dir.fid })
        .await
        .with_context(|| format!("cannot link {display} to {}", a.url))?
    {
        MgsReply::RepoId(id) => id,
        other => bail!("the MGS answered {other:?} to a repository create"),
    };
    println!("{id}");
    if a.import_metadata {
        let config = fresh_config(&cluster).await?;
        let repo = config
            .repo(id)
            .cloned()
            .with_context(|| format!("repository {id} vanished before its import"))?;
        run_import(&client, &repo, &display, a.parallel).await?;
    }
    Ok(())
}

/// `weft repo update ID|PATH [--import-policy P] [--export-policy P] [--events URL |
/// --no-events]`.
async fn update(mgs: Option<&str>, a: UpdateArgs) -> Result<()> {
    if let Some(q) = &a.events {
        refuse_secrets("event queue URL", q)?;
    }
    let change = weft_proto::hsm::RepoChange {
        import_policy: a.import_policy,
        export_policy: a.export_policy,
        events: match (&a.events, a.no_events) {
            (Some(q), _) => Some(Some(q.clone())),
            (None, true) => Some(None),
            (None, false) => None,
        },
    };
    if change == weft_proto::hsm::RepoChange::default() {
        bail!("nothing to change: give --import-policy, --export-policy, --events or --no-events");
    }
    let (cluster, via, repo) = find_repo(mgs, &a.target, Match::Exact).await?;
    let spec = change.applied_to(&repo.spec);
    spec.validate().map_err(|e| anyhow!("{e}"))?;
    if let Some(queue) = &a.events {
        let store = weft_repo::RepoStore::open(&spec).map_err(|e| repo_error(&e))?;
        check_queue(&store, queue).await?;
    }
    let display = shown(via.as_ref(), &repo.spec.path);
    match mgs_call(
        &cluster,
        MgsRequest::RepoUpdate {
            id: repo.id,
            change,
        },
    )
    .await
    .with_context(|| format!("cannot update repository {} ({display})", repo.id))?
    {
        MgsReply::Ok => {}
        other => bail!("the MGS answered {other:?} to a repository update"),
    }
    println!(
        "repository {} ({display}): import {} export {} events {}",
        repo.id,
        spec.import_policy,
        spec.export_policy,
        spec.events.as_deref().unwrap_or("-")
    );
    Ok(())
}

/// Checks that the event queue `queue` answers with `store`'s credentials (`repo create`
/// and `repo update --events`): nothing is changed otherwise.
async fn check_queue(store: &weft_repo::RepoStore, queue: &str) -> Result<()> {
    weft_repo::events::check(store, queue)
        .await
        .map_err(|e| repo_error(&e).context("the event queue does not answer"))?;
    Ok(())
}

/// Makes directory `path` and its missing parents (like `mkdir -p`, mode 0755) and
/// answers its attributes.
async fn mkdir_p(client: &Client, p: &FsPath, path: &str, cred: &Credentials) -> Result<Attr> {
    let mut attr = client
        .getattr(Fid::ROOT)
        .await
        .map_err(|e| anyhow!("{}: {e}", p.display("/")))?;
    let mut walked = String::new();
    for name in path.split('/').filter(|c| !c.is_empty()) {
        if attr.kind != FileKind::Directory {
            bail!("{}: not a directory", p.display(&walked));
        }
        walked.push('/');
        walked.push_str(name);
        let here = p.display(&walked);
        attr = match client.lookup(attr.fid, name.as_bytes(), cred).await {
            Ok(a) => a,
            Err(e) if e.errno() == Errno::NoEnt => {
                match client.mkdir(attr.fid, name.as_bytes(), 0o755, cred).await {
                    Ok(a) => a,
                    // Made meanwhile by someone else.
                    Err(e) if e.errno() == Errno::Exist => client
                        .lookup(attr.fid, name.as_bytes(), cred)
                        .await
                        .map_err(|e| anyhow!("{here}: {e}"))?,
                    Err(e) => bail!("{here}: cannot create: {e}"),
                }
            }
            Err(e) => bail!("{here}: {e}"),
        };
    }
    if attr.kind != FileKind::Directory {
        bail!("{}: not a directory", p.display(path));
    }
    Ok(attr)
}

// ---------------------------------------------------------------------------------------
// list, show, delete, tasks

#[cfg(test)]
mod tests {
    use super::show::size_str;
    use super::*;

    #[test]
    fn paths_normalise() {
        assert_eq!(normalise("/a//b/").unwrap(), "/a/b");
        assert_eq!(normalise("/").unwrap(), "/");
        assert_eq!(normalise("").unwrap(), "/");
        assert!(normalise("/a/../b").is_err());
    }

    #[test]
    fn secrets_in_urls_are_refused_without_echo() {
        for url in [
            "s3://AKIA:sekrit@bucket/p",
            "http://u:sekrit@127.0.0.1:9000",
            "s3://bucket/p?X-Amz-Signature=sekrit",
        ] {
            let e = refuse_secrets("URL", url).unwrap_err();
            assert!(!format!("{e:#}").contains("sekrit"), "{e:#}");
        }
        refuse_secrets("URL", "s3://bucket/some/prefix").unwrap();
        refuse_secrets("endpoint", "http://127.0.0.1:9000").unwrap();
    }

    #[test]
    fn sizes_print_as_setstripe_takes_them() {
        assert_eq!(size_str(1 << 30), "1G");
        assert_eq!(size_str(3 << 20), "3M");
        assert_eq!(size_str(1000), "1000");
    }

    #[test]
    fn paths_find_their_repository() {
        let mk = |id, path: &str| Repo {
            id,
            spec: RepoSpec {
                path: path.into(),
                url: "file:///x".into(),
                endpoint: None,
                region: None,
                path_style: false,
                import_policy: RepoPolicy::default(),
                export_policy: RepoPolicy::default(),
                import_metadata: false,
                events: None,
                chunk_size: 1 << 30,
            },
            dir: Fid::ROOT,
            created: weft_proto::Timestamp::now(),
            tiering: None,
        };
        let config = FsConfig {
            repos: vec![mk(1, "/a"), mk(2, "/b/c")],
            ..weft_testkit_free_config()
        };
        assert_eq!(repo_of_path(&config, "/a").map(|r| r.id), Some(1));
        assert_eq!(repo_of_path(&config, "/a/x/y").map(|r| r.id), Some(1));
        assert_eq!(repo_of_path(&config, "/ab").map(|r| r.id), None);
        assert_eq!(repo_of_path(&config, "/b/c/d").map(|r| r.id), Some(2));
        assert_eq!(repo_of_path(&config, "/b").map(|r| r.id), None);
    }

    fn weft_testkit_free_config() -> FsConfig {
        FsConfig {
            fsname: "weft".into(),
            fs_uuid: uuid::Uuid::nil(),
            version: 1,
            targets: Vec::new(),
            params: Default::default(),
            pools: Default::default(),
            fld: Vec::new(),
            default_layout: Default::default(),
            repos: Vec::new(),
        }
    }
}
