//! Importing a repository's objects as released files (`weft repo import`, and the import
//! when an association is made with `--import-metadata`): FSx for Lustre's metadata
//! import.
//!
//! Every object under the repository's prefix becomes a file below the linked directory:
//! key `PREFIX/a/b/c` is file `c` of directory `a/b`, made as root (`mkdir -p`) where
//! missing. A key ending in `/` is a directory marker and only makes its directory; a key
//! with an empty, `.` or `..` component, or a name over 255 bytes, is skipped and counted
//! failed. An object's FSx metadata (see [`crate::meta`]) gives the file's mode, owner and
//! times; a symlink's target is its body.
//!
//! The work is a pipeline, so that no object costs a round trip of its own: one listing
//! (in key order, resumable after a checkpoint key, walked directory by directory or in
//! large pages: see [`listing`]), up to [`HEADS_IN_FLIGHT`] HEADs for the metadata,
//! entries gathered per directory into batches of up to [`BATCH_MAX`], and up to
//! `parallel` `ImportEntries` batches in flight. A directory's partial batch goes as soon
//! as the listing has moved on to another directory and its HEADs are done, so the MDT
//! works while the listing goes on. The MDT decides each entry's outcome (created,
//! unchanged, updated, conflict, failed), all entries of a batch in one transaction.
//!
//! Memory is bounded: objects listed but not yet settled are at most [`PENDING_MAX`]
//! (partial batches are sent early to stay under it), and the directory cache is dropped
//! beyond [`DIR_CACHE_MAX`] entries.
//!
//! Under a task (`ImportOptions::task`), progress goes to the MGS every second or
//! [`REPORT_EVERY`](crate::task::REPORT_EVERY) objects, with the checkpoint: the greatest key such that every key up
//! to it is settled, so an interrupted import resumes without missing any.
//!
//! `object_store` turns keys into its own paths, which has two consequences here: a
//! listing page holding a key with an empty, `.` or `..` component fails as a whole (the
//! import stops with an error, its checkpoint before that page), and a directory marker
//! `a/b/` is listed as a zero-byte `a/b`. Such an object is told from a real empty object
//! by its HEAD (`a/b` is not found), or by a directory mode in its metadata.

use crate::error::RepoError;
use crate::store::RepoStore;
use crate::task::{Counts, Reporter};
use batch::{Batcher, Walk};
use checkpoint::Tracker;
use dirs::DirCache;
use futures::StreamExt;
use futures::stream::{BoxStream, FuturesUnordered};
use head::head_in;
use object_store::list::PaginatedListStore;
use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStore};
use place::classify;
use seen::{Fingerprint, Seen};
use send::send;
use std::sync::Arc;
use weft_client::Client;
use weft_proto::TargetKind;
use weft_proto::hsm::{ImportEntry, Repo, TaskState};
use weft_proto::mdt::Credentials;

pub use head::layout_for;
pub(crate) use place::rel_key;
pub use place::{KeyPlace, place_of};

/// HEAD requests in flight.
pub const HEADS_IN_FLIGHT: usize = 64;
/// Lookups in flight per batch of an auto import that leaves out new or changed names.
pub const LOOKUPS_IN_FLIGHT: usize = 32;
/// Most entries in one `ImportEntries` request.
pub const BATCH_MAX: usize = 256;
/// Most objects listed and not yet settled (HEAD, batch or request pending).
pub const PENDING_MAX: usize = 16_384;
/// Most directories remembered by path; the cache starts again beyond.
pub const DIR_CACHE_MAX: usize = 65_536;
/// The longest symlink target read from an object's body.
pub const SYMLINK_MAX: u64 = 4095;
/// The longest name of a directory entry, in bytes.
pub const NAME_MAX: usize = 255;
/// Stripe size of imported files larger than the repository's chunk size.
pub const IMPORT_STRIPE_SIZE: u64 = 1 << 20;

/// How to run an import.
#[derive(Debug, Clone, Default)]
pub struct ImportOptions {
    /// The MGS task to report progress and the final state to.
    pub task: Option<u64>,
    /// Resume after this key (a task's checkpoint: the full key, the prefix included).
    pub resume_after: Option<String>,
    /// `ImportEntries` requests in flight (0 means 1).
    pub parallel: usize,
    /// Keys asked for per listing page where the store lists by pages (0 means
    /// [`listing::LIST_PAGE`]).
    pub list_page: usize,
    /// Leave out objects whose name does not exist yet in its directory (an auto import
    /// without `NEW`): each entry is looked up first.
    pub skip_new: bool,
    /// Leave out objects whose name exists already (an auto import without `CHANGED`):
    /// each entry is looked up first.
    pub skip_changed: bool,
    /// The objects earlier imports of this repository settled (an auto import's memory,
    /// [`seen`]): listed at the same version, they are skipped without a HEAD (counted
    /// in [`ImportProgress::skipped`]); what this import settles is added.
    pub seen: Option<Arc<parking_lot::Mutex<Seen>>>,
    /// Where to collect every listed key (the auto import's deletion check reads the
    /// sweep's one listing from it instead of listing again).
    pub listed: Option<Arc<parking_lot::Mutex<ListedKeys>>>,
}

/// The keys a listing showed, up to a bound (past it, none: the caller checks each
/// candidate another way).
#[derive(Debug)]
pub struct ListedKeys {
    keys: Option<std::collections::HashSet<String>>,
    max: usize,
}

impl ListedKeys {
    /// An empty set that gives up past `max` keys.
    pub fn new(max: usize) -> Self {
        Self {
            keys: Some(Default::default()),
            max,
        }
    }

    /// Adds a listed key.
    pub fn add(&mut self, key: &str) {
        if let Some(set) = &mut self.keys {
            if set.len() >= self.max {
                self.keys = None;
            } else {
                set.insert(key.to_string());
            }
        }
    }

    /// Whether the bound was passed (no key is kept any more).
    pub fn gave_up(&self) -> bool {
        self.keys.is_none()
    }

    /// Takes the keys out: `None` when there were more than the bound.
    pub fn take(&mut self) -> Option<std::collections::HashSet<String>> {
        self.keys.take()
    }
}

/// What an import did so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImportProgress {
    /// Objects listed (directory markers and skipped keys included).
    pub listed: u64,
    /// Files or symlinks created.
    pub created: u64,
    /// Files released against a newer version of their object.
    pub updated: u64,
    /// Files already naming their object unchanged.
    pub unchanged: u64,
    /// Objects an earlier import settled at the same version, skipped without a HEAD
    /// ([`ImportOptions::seen`]).
    pub skipped: u64,
    /// Names taken by something the import must not replace.
    pub conflicts: u64,
    /// Objects that could not be imported (bad keys, store or MDT errors).
    pub failed: u64,
    /// The checkpoint: every key up to this one is settled.
    pub last_key: Option<String>,
}

/// Imports every object of repository `repo` (see the module header), reporting to
/// `progress` (and, with `opts.task`, to the MGS) every second or [`REPORT_EVERY`](crate::task::REPORT_EVERY)
/// objects. Answers the final counts; an error when the listing fails (after what was
/// listed is settled and the task marked failed).
pub async fn import(
    client: &Arc<Client>,
    repo: &Repo,
    opts: &ImportOptions,
    progress: &(dyn Fn(&ImportProgress) + Send + Sync),
) -> Result<ImportProgress, RepoError> {
    let store = match RepoStore::open(&repo.spec) {
        Ok(s) => s,
        Err(e) => {
            let mut reporter = Reporter::new(client, opts.task);
            reporter
                .finish(&Counts::default(), None, TaskState::Failed(e.to_string()))
                .await;
            return Err(e);
        }
    };
    import_from(client, repo, &store, opts, progress).await
}

/// [`import`] from an open store.
pub async fn import_from(
    client: &Arc<Client>,
    repo: &Repo,
    store: &RepoStore,
    opts: &ImportOptions,
    progress: &(dyn Fn(&ImportProgress) + Send + Sync),
) -> Result<ImportProgress, RepoError> {
    let ctx = Ctx::new(client, repo, store, opts);
    let mut reporter = Reporter::new(client, opts.task);
    let mut progress_of = |p: &ImportProgress| progress(p);
    let result = match listing_of(&ctx, opts) {
        Ok(listing) => run(&ctx, opts, listing, &mut reporter, &mut progress_of).await,
        Err(e) => Err((ImportProgress::default(), e)),
    };
    let (p, err) = match result {
        Ok(p) => (p, None),
        Err((p, e)) => (p, Some(e)),
    };
    progress(&p);
    let counts = Counts::of_import(&p);
    let state = match &err {
        None => TaskState::Done,
        Some(e) => TaskState::Failed(e.to_string()),
    };
    reporter.finish(&counts, p.last_key.clone(), state).await;
    match err {
        None => Ok(p),
        Some(e) => Err(e),
    }
}

/// Imports the objects named by `keys` (full keys, the prefix included; a key ending in
/// `/` is a directory marker), as [`import_from`] imports listed ones: each is HEADed
/// for its metadata, one that is gone imports nothing, and the MDT decides each outcome.
/// The auto import of a bucket's event notifications ([`crate::events`]); keys outside
/// the prefix count failed. `opts.seen` and `opts.listed` are not used (no listing).
pub async fn import_keys(
    client: &Arc<Client>,
    repo: &Repo,
    store: &RepoStore,
    keys: &[String],
    opts: &ImportOptions,
) -> Result<ImportProgress, RepoError> {
    let opts = ImportOptions {
        task: None,
        resume_after: None,
        seen: None,
        listed: None,
        ..opts.clone()
    };
    let ctx = Ctx::new(client, repo, store, &opts);
    // In key order, once each, as a listing would give them (the batches follow
    // directories in listing order).
    let mut keys: Vec<&String> = keys.iter().collect();
    keys.sort();
    keys.dedup();
    let mut metas = Vec::with_capacity(keys.len());
    let mut p = ImportProgress::default();
    for key in keys {
        match Path::parse(key) {
            Ok(location) => metas.push(Ok(ObjectMeta {
                location,
                last_modified: chrono::DateTime::UNIX_EPOCH,
                // A marker (`a/b/`, parsed as `a/b`) is told from an object by its size
                // (see `head`); the others' real size comes with their HEAD.
                size: u64::from(!key.ends_with('/')),
                e_tag: None,
                version: None,
            })),
            Err(e) => {
                tracing::warn!(key = %key, "not imported: {e}");
                p.failed += 1;
            }
        }
    }
    let failed = p.failed;
    let mut reporter = Reporter::new(client, None);
    let listing = futures::stream::iter(metas).boxed();
    let mut p = run(&ctx, &opts, listing, &mut reporter, &mut |_| {})
        .await
        .map_err(|(_, e)| e)?;
    p.failed += failed;
    Ok(p)
}

impl<'a> Ctx<'a> {
    fn new(
        client: &'a Arc<Client>,
        repo: &'a Repo,
        store: &'a RepoStore,
        opts: &ImportOptions,
    ) -> Self {
        let osts = client
            .cluster()
            .config()
            .targets_of(TargetKind::Ost)
            .count()
            .max(1);
        Ctx {
            client,
            repo,
            store: store.store().as_ref(),
            pages: store.pages(),
            prefix: store.prefix(),
            url: store.url(),
            heads: HeadCtx {
                store: store.store().as_ref(),
                url: store.url(),
                chunk_size: repo.spec.chunk_size,
                osts: u32::try_from(osts).unwrap_or(u32::MAX),
            },
            dirs: DirCache::new(repo.dir),
            cred: Credentials::root(),
            skip_new: opts.skip_new,
            skip_changed: opts.skip_changed,
        }
    }
}

/// What the pipeline needs, borrowed for its run.
struct Ctx<'a> {
    client: &'a Arc<Client>,
    repo: &'a Repo,
    store: &'a dyn ObjectStore,
    pages: Option<&'a Arc<dyn PaginatedListStore>>,
    prefix: &'a Path,
    url: &'a str,
    heads: HeadCtx<'a>,
    dirs: DirCache,
    cred: Credentials,
    skip_new: bool,
    skip_changed: bool,
}

/// What a HEAD needs: the store, and what decides an imported file's layout.
struct HeadCtx<'a> {
    store: &'a dyn ObjectStore,
    url: &'a str,
    chunk_size: u64,
    osts: u32,
}

/// The listing an import works through: the prefix from the checkpoint on.
fn listing_of<'a>(
    ctx: &Ctx<'a>,
    opts: &ImportOptions,
) -> Result<BoxStream<'a, object_store::Result<ObjectMeta>>, RepoError> {
    let offset = match &opts.resume_after {
        Some(after) => Some(
            Path::parse(after)
                .map_err(|e| RepoError::Spec(format!("bad checkpoint {after:?}: {e}")))?,
        ),
        None => None,
    };
    Ok(listing::objects(
        ctx.store,
        ctx.pages,
        ctx.prefix,
        offset.as_ref(),
        match opts.list_page {
            0 => listing::LIST_PAGE,
            n => n,
        },
    ))
}

/// The pipeline: listing, HEADs, batches, requests; see the module header.
async fn run(
    ctx: &Ctx<'_>,
    opts: &ImportOptions,
    mut listing: BoxStream<'_, object_store::Result<ObjectMeta>>,
    reporter: &mut Reporter<'_>,
    progress: &mut (dyn FnMut(&ImportProgress) + Send),
) -> Result<ImportProgress, (ImportProgress, RepoError)> {
    let parallel = opts.parallel.max(1);
    let mut p = ImportProgress {
        last_key: opts.resume_after.clone(),
        ..Default::default()
    };
    let mut tracker = Tracker::default();
    let mut batcher = Batcher::default();
    let mut walk = Walk::default();
    let mut heads = FuturesUnordered::new();
    let mut sends = FuturesUnordered::new();
    let mut listing_done = false;
    let mut error: Option<RepoError> = None;
    let mut in_flight = InFlight::default();
    let seen = opts.seen.as_deref();
    loop {
        let force = (listing_done && heads.is_empty()) || tracker.pending() >= PENDING_MAX;
        while sends.len() < parallel {
            match batcher.take(force) {
                Some(job) => sends.push(send(ctx, job)),
                None => break,
            }
        }
        if listing_done && heads.is_empty() && sends.is_empty() && batcher.is_empty() {
            break;
        }
        tokio::select! {
            biased;
            Some(done) = sends.next(), if !sends.is_empty() => {
                for (seq, outcome) in done {
                    in_flight.settle(seen, seq, Some(&outcome));
                    match outcome {
                        Settled::Created => p.created += 1,
                        Settled::Updated => p.updated += 1,
                        Settled::Unchanged => p.unchanged += 1,
                        Settled::Conflict => p.conflicts += 1,
                        Settled::Failed => p.failed += 1,
                        Settled::Nothing => {}
                    }
                    tracker.settle(seq);
                }
            }
            Some((dir, head)) = heads.next(), if !heads.is_empty() => {
                let (dir, head): (String, Headed) = (dir, head);
                match head {
                    Headed::Job(job) => batcher.add(job),
                    Headed::Failed(seq) => {
                        in_flight.settle(seen, seq, None);
                        p.failed += 1;
                        tracker.settle(seq);
                    }
                    Headed::Gone(seq) => {
                        in_flight.settle(seen, seq, None);
                        tracker.settle(seq);
                    }
                }
                if walk.headed(&dir) {
                    batcher.close(&dir);
                }
            }
            item = listing.next(), if !listing_done
                && heads.len() < HEADS_IN_FLIGHT
                && tracker.pending() < PENDING_MAX => {
                match item {
                    None => listing_done = true,
                    Some(Err(e)) => {
                        listing_done = true;
                        error = Some(RepoError::store(ctx.url, &e));
                    }
                    Some(Ok(meta)) => {
                        p.listed += 1;
                        if let Some(keys) = &opts.listed {
                            keys.lock().add(meta.location.as_ref());
                        }
                        let seq = tracker.push(meta.location.as_ref());
                        match classify(ctx.prefix, meta.location.as_ref()) {
                            Ok(_) if in_flight.skip(seen, seq, &meta) => {
                                p.skipped += 1;
                                tracker.settle(seq);
                            }
                            Ok(place) => {
                                for done in walk.listed(&place.dir) {
                                    batcher.close(&done);
                                }
                                heads.push(head_in(&ctx.heads, seq, place, meta));
                            }
                            Err(why) => {
                                tracing::warn!(key = %meta.location, "not imported: {why}");
                                p.failed += 1;
                                tracker.settle(seq);
                            }
                        }
                    }
                }
            }
        }
        p.last_key = tracker.checkpoint().or(p.last_key.take());
        reporter
            .tick(&Counts::of_import(&p), p.last_key.clone(), p.listed, || {
                progress(&p)
            })
            .await;
    }
    p.last_key = tracker.checkpoint().or(p.last_key.take());
    match error {
        None => Ok(p),
        Some(e) => Err((p, e)),
    }
}

/// A piece of work for the MDT: a batch of entries of one directory, or a directory.
#[derive(Debug)]
pub(crate) enum Job {
    /// Entries for directory `dir`, each with its listing sequence number.
    Entries {
        dir: String,
        entries: Vec<(u64, ImportEntry)>,
    },
    /// Make directory `dir` (a directory marker, listed as `seq`).
    Mkdir { seq: u64, dir: String },
}

/// The fingerprints of the objects in flight when the import has a memory of settled
/// objects ([`ImportOptions::seen`]), by sequence number.
#[derive(Default)]
struct InFlight(std::collections::HashMap<u64, (u64, Fingerprint)>);

impl InFlight {
    /// Whether listed object `meta` (`seq`) was settled at this version by an earlier
    /// import; if not, it is followed until it settles.
    fn skip(
        &mut self,
        seen: Option<&parking_lot::Mutex<Seen>>,
        seq: u64,
        meta: &ObjectMeta,
    ) -> bool {
        let Some(seen) = seen else { return false };
        let (key, fp) = Fingerprint::of(meta);
        if seen.lock().unchanged(key, fp) {
            return true;
        }
        self.0.insert(seq, (key, fp));
        false
    }

    /// Object `seq` settled as `outcome` (`None`: failed before a request, or gone):
    /// remembered when the namespace now names it, forgotten otherwise.
    fn settle(
        &mut self,
        seen: Option<&parking_lot::Mutex<Seen>>,
        seq: u64,
        outcome: Option<&Settled>,
    ) {
        let (Some(seen), Some((key, fp))) = (seen, self.0.remove(&seq)) else {
            return;
        };
        match outcome {
            Some(Settled::Created | Settled::Updated | Settled::Unchanged) => {
                seen.lock().settled(key, fp);
            }
            _ => seen.lock().forget(key),
        }
    }
}

/// What a HEAD found.
enum Headed {
    /// Something to send.
    Job(Job),
    /// The object could not be read: counted failed.
    Failed(u64),
    /// The object went away since the listing: nothing to import.
    Gone(u64),
}

/// How one listed object settled at the MDT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Settled {
    Created,
    Updated,
    Unchanged,
    Conflict,
    Failed,
    /// A directory marker, done.
    Nothing,
}

impl Counts {
    /// An import's: created, updated and unchanged entries are done; conflicts and
    /// failures failed; no bytes move.
    fn of_import(p: &ImportProgress) -> Self {
        Self {
            done: p.created + p.updated + p.unchanged,
            failed: p.failed + p.conflicts,
            bytes: 0,
        }
    }
}

mod batch;
mod checkpoint;
mod dirs;
mod head;
pub mod listing;
mod place;
pub mod seen;
mod send;
#[cfg(test)]
mod tests;
