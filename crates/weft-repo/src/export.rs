//! Exporting new and changed files to a repository (`weft repo export`, `weft
//! hsm_archive`): FSx for Lustre's export task.
//!
//! The tree at a path at or below the linked directory is walked as `weft find` walks it
//! (directory scans with attributes, up to [`SCANS_IN_FLIGHT`] at once, a page at a time),
//! and every regular file or symlink that is new (no `exists` flag) or `dirty`, and
//! neither `noarchive` nor `released`, is exported, up to `parallel` files at once:
//! file `DIR/a/b` of linked directory `DIR` becomes key `PREFIX/a/b`, with its mode,
//! owner and times as FSx metadata ([`crate::meta`]); a symlink becomes an object whose
//! body is its target, mode `0120777`. A file is read through the client as root, opened
//! by FID, in [`PART_SIZE`] pieces; one up to that size goes up in a single PUT, a larger
//! one as a multipart upload with up to [`PARTS_IN_FLIGHT`] parts in flight (so an export
//! holds at most `parallel x PARTS_IN_FLIGHT x PART_SIZE` bytes).
//!
//! The MDT then records the copy (`HsmArchived`) against the data version read at open:
//! a file changed meanwhile is answered EBUSY and stays dirty (counted skipped, for the
//! next export). A failed upload is aborted (no partial object appears) and the file
//! stays dirty too.
//!
//! Stores that keep no user metadata (`file://`) refuse attributes: the object is then
//! written without them.

use crate::error::RepoError;
use crate::meta::{FileMeta, S_IFLNK, S_IFREG};
use crate::store::RepoStore;
use crate::task::{Counts, Reporter};
use bytes::{Bytes, BytesMut};
use futures::stream::FuturesUnordered;
use futures::{Future, StreamExt};
use object_store::path::Path;
use object_store::{
    Attributes, ObjectStore, PutMultipartOptions, PutOptions, PutPayload, PutResult,
};
use std::collections::VecDeque;
use std::sync::Arc;
use weft_client::{Client, ClientError, OpenOptions};
use weft_proto::hsm::{
    ArchiveRef, HSM_DIRTY, HSM_EXISTS, HSM_NOARCHIVE, HSM_RELEASED, KEY_MAX, Repo, TaskState,
};
use weft_proto::mdt::{Attr, Credentials, FileKind};
use weft_proto::{Errno, Fid, Timestamp};

/// Bytes read from a file and sent per part (and the largest file sent in one PUT).
pub const PART_SIZE: usize = 8 << 20;
/// Parts of one file in flight.
pub const PARTS_IN_FLIGHT: usize = 4;
/// Directory scans in flight during the walk.
pub const SCANS_IN_FLIGHT: usize = 16;
/// Most files found and waiting for their export before the walk pauses.
pub const FOUND_MAX: usize = 4096;

/// How to run an export.
#[derive(Debug, Clone, Default)]
pub struct ExportOptions {
    /// The MGS task to report progress and the final state to.
    pub task: Option<u64>,
    /// Files exported at once (0 means 1).
    pub parallel: usize,
    /// Leave out files open somewhere (`Attr::open_count` above 0): an auto export takes
    /// them at a later sweep, after their last close.
    pub skip_open: bool,
    /// Leave out new files (never archived): an auto export without `NEW`.
    pub skip_new: bool,
    /// Leave out changed files (dirty): an auto export without `CHANGED`.
    pub skip_changed: bool,
}

impl ExportOptions {
    /// Whether a file (or symlink) with attributes `attr` is exported under these options.
    fn selects(&self, kind: FileKind, attr: &Attr) -> bool {
        wants_export(kind, attr.hsm_flags)
            && !(self.skip_open && attr.open_count > 0)
            && !(self.skip_new && attr.hsm_flags & HSM_EXISTS == 0)
            && !(self.skip_changed && attr.hsm_flags & HSM_EXISTS != 0)
    }
}

/// What an export did so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExportProgress {
    /// Regular files and symlinks examined.
    pub scanned: u64,
    /// Files and symlinks exported and recorded archived.
    pub exported: u64,
    /// Bytes uploaded by exported files.
    pub bytes: u64,
    /// Files that changed while exported (EBUSY): still dirty, for the next export.
    pub skipped: u64,
    /// Files, symlinks or directories that could not be exported or read.
    pub failed: u64,
}

/// Exports the new and changed files at or below `path` (a file-system path at or below
/// `repo.spec.path`) to repository `repo`; see the module header. Answers the final
/// counts; an error when the path cannot be resolved or is outside the repository.
pub async fn export(
    client: &Arc<Client>,
    repo: &Repo,
    path: &str,
    opts: &ExportOptions,
    progress: &(dyn Fn(&ExportProgress) + Send + Sync),
) -> Result<ExportProgress, RepoError> {
    match RepoStore::open(&repo.spec) {
        Ok(store) => export_to(client, repo, &store, path, opts, progress).await,
        Err(e) => {
            Reporter::new(client, opts.task)
                .finish(&Counts::default(), None, TaskState::Failed(e.to_string()))
                .await;
            Err(e)
        }
    }
}

/// [`export`] to an open store.
pub async fn export_to(
    client: &Arc<Client>,
    repo: &Repo,
    store: &RepoStore,
    path: &str,
    opts: &ExportOptions,
    progress: &(dyn Fn(&ExportProgress) + Send + Sync),
) -> Result<ExportProgress, RepoError> {
    let mut reporter = Reporter::new(client, opts.task);
    let r = walk(client, repo, store, path, opts, &mut reporter, progress).await;
    let (p, state) = match &r {
        Ok(p) => (p.clone(), TaskState::Done),
        Err((p, e)) => (p.clone(), TaskState::Failed(e.to_string())),
    };
    progress(&p);
    reporter.finish(&counts_of(&p), None, state).await;
    r.map_err(|(_, e)| e)
}

fn counts_of(p: &ExportProgress) -> Counts {
    Counts {
        done: p.exported,
        failed: p.failed,
        bytes: p.bytes,
    }
}

/// Whether a file in this state is exported: a regular file or symlink that is new or
/// dirty, and neither `noarchive` nor released.
pub fn wants_export(kind: FileKind, hsm_flags: u32) -> bool {
    matches!(kind, FileKind::Regular | FileKind::Symlink)
        && hsm_flags & (HSM_NOARCHIVE | HSM_RELEASED) == 0
        && (hsm_flags & HSM_EXISTS == 0 || hsm_flags & HSM_DIRTY != 0)
}

/// The path of `path` relative to the linked directory `base` (`""` for `base` itself),
/// or EINVAL when it is not at or below it (or has `.`/`..` components).
pub fn relative_path<'a>(base: &str, path: &'a str) -> Result<&'a str, RepoError> {
    let outside = || {
        RepoError::Client(ClientError::Invalid(format!(
            "{path:?} is not at or below the repository's directory {base:?}"
        )))
    };
    if path.split('/').any(|c| c == "." || c == "..") {
        return Err(outside());
    }
    let base = base.trim_end_matches('/');
    let rest = path.strip_prefix(base).ok_or_else(outside)?;
    if !rest.is_empty() && !rest.starts_with('/') {
        return Err(outside());
    }
    Ok(rest.trim_matches('/'))
}

/// The key of a file at `rel` (relative to the linked directory) under `prefix`.
pub fn key_for(prefix: &Path, rel: &str) -> Result<Path, RepoError> {
    let bad = |why: String| RepoError::Client(ClientError::Invalid(why));
    if rel.is_empty() {
        return Err(bad("the repository's directory itself is not a file".into()));
    }
    let key = if prefix.as_ref().is_empty() {
        rel.to_string()
    } else {
        format!("{prefix}/{rel}")
    };
    if key.len() > KEY_MAX {
        return Err(bad(format!(
            "the key of {rel:?} would be {} bytes (over {KEY_MAX})",
            key.len()
        )));
    }
    Path::parse(&key).map_err(|e| bad(format!("{rel:?} cannot be a key: {e}")))
}

/// Exports one file or symlink (`fid`, at `fs_path` at or below the repository's
/// directory) to `store` and records it archived; answers the bytes uploaded. EBUSY (from
/// the MDT) when it changed meanwhile: it stays dirty. A failed upload leaves no object
/// and the file dirty.
pub async fn export_file(
    client: &Arc<Client>,
    repo: &Repo,
    store: &RepoStore,
    fid: Fid,
    fs_path: &str,
) -> Result<u64, RepoError> {
    let rel = relative_path(&repo.spec.path, fs_path)?;
    let key = key_for(store.prefix(), rel)?;
    let cred = Credentials::root();
    let attr = client.getattr(fid).await?;
    let (data_version, put, size) = match attr.kind {
        FileKind::Symlink => {
            let target = client.readlink(fid).await?;
            let size = target.len() as u64;
            let meta = meta_of(&attr, S_IFLNK | 0o777);
            let body = Bytes::from(target);
            let put = upload(
                store.store().as_ref(),
                store.url(),
                &key,
                size,
                meta.encode_as(store.key_style()),
                PART_SIZE,
                |_, _| {
                    let body = body.clone();
                    async move { Ok(body) }
                },
            )
            .await?;
            (attr.data_version, put.0, put.1)
        }
        FileKind::Regular => {
            let file = client.open(fid, OpenOptions::read(), &cred).await?;
            let at_open = file.attr_at_open().clone();
            let size = file.size().await;
            let meta = meta_of(&at_open, S_IFREG | (at_open.mode & 0o7777));
            let r = upload(
                store.store().as_ref(),
                store.url(),
                &key,
                size,
                meta.encode_as(store.key_style()),
                PART_SIZE,
                |offset, len| {
                    let file = &file;
                    async move { Ok(file.read_at(offset, len).await?) }
                },
            )
            .await;
            if let Err(e) = file.close().await {
                tracing::debug!(%fid, "close after export: {e}");
            }
            let (put, size) = r?;
            (at_open.data_version, put, size)
        }
        _ => {
            return Err(RepoError::Client(ClientError::Invalid(format!(
                "{fs_path:?} is neither a regular file nor a symlink"
            ))));
        }
    };
    let archive = ArchiveRef {
        key: key.to_string(),
        etag: put.e_tag,
        size,
        modified: Timestamp::now(),
    };
    client
        .hsm_archived(fid, repo.id, data_version, archive, &cred)
        .await?;
    Ok(size)
}

/// The FSx metadata of a file with attributes `attr` and `st_mode` `mode`.
fn meta_of(attr: &Attr, mode: u32) -> FileMeta {
    FileMeta {
        mode,
        uid: attr.uid,
        gid: attr.gid,
        atime: attr.atime,
        mtime: attr.mtime,
    }
}

/// Uploads `size` bytes read by `read(offset, len)` to `key` with user metadata `attrs`:
/// one PUT up to `part` bytes, else a multipart upload of `part`-byte parts, up to
/// [`PARTS_IN_FLIGHT`] at once, aborted on any failure. A store that refuses user
/// metadata gets the object without. A short read (the file shrank meanwhile) ends the
/// object there. Answers the store's result and the bytes uploaded.
pub(crate) async fn upload<F, Fut>(
    store: &dyn ObjectStore,
    url: &str,
    key: &Path,
    size: u64,
    attrs: Attributes,
    part: usize,
    mut read: F,
) -> Result<(PutResult, u64), RepoError>
where
    F: FnMut(u64, u64) -> Fut,
    Fut: Future<Output = Result<Bytes, RepoError>>,
{
    let part = part.max(1);
    let serr = |e: object_store::Error| RepoError::store(url, &e);
    if size <= part as u64 {
        let body = read_piece(&mut read, 0, size).await?;
        let len = body.len() as u64;
        let opts = PutOptions {
            attributes: attrs,
            ..Default::default()
        };
        let put = match store
            .put_opts(key, PutPayload::from(body.clone()), opts)
            .await
        {
            Err(object_store::Error::NotImplemented { .. }) => {
                store
                    .put_opts(key, PutPayload::from(body), PutOptions::default())
                    .await
            }
            r => r,
        };
        return Ok((put.map_err(serr)?, len));
    }
    let opts = PutMultipartOptions {
        attributes: attrs,
        ..Default::default()
    };
    let mut up = match store.put_multipart_opts(key, opts).await {
        Err(object_store::Error::NotImplemented { .. }) => {
            store
                .put_multipart_opts(key, PutMultipartOptions::default())
                .await
        }
        r => r,
    }
    .map_err(serr)?;
    let mut parts = FuturesUnordered::new();
    let mut offset = 0u64;
    let sent: Result<(), RepoError> = async {
        while offset < size {
            let len = (size - offset).min(part as u64);
            let body = read_piece(&mut read, offset, len).await?;
            let got = body.len() as u64;
            if got > 0 {
                parts.push(up.put_part(PutPayload::from(body)));
            }
            offset += got;
            while parts.len() >= PARTS_IN_FLIGHT {
                if let Some(r) = parts.next().await {
                    r.map_err(serr)?;
                }
            }
            if got < len {
                break;
            }
        }
        while let Some(r) = parts.next().await {
            r.map_err(serr)?;
        }
        Ok(())
    }
    .await;
    drop(parts);
    match sent {
        Ok(()) => match up.complete().await {
            Ok(put) => Ok((put, offset)),
            Err(e) => {
                let _ = up.abort().await;
                Err(serr(e))
            }
        },
        Err(e) => {
            if let Err(a) = up.abort().await {
                tracing::warn!(%key, "multipart upload not aborted: {}", serr(a));
            }
            Err(e)
        }
    }
}

/// Reads `[offset, offset + len)` in as many reads as it takes; fewer bytes only at the
/// end of the file.
async fn read_piece<F, Fut>(read: &mut F, offset: u64, len: u64) -> Result<Bytes, RepoError>
where
    F: FnMut(u64, u64) -> Fut,
    Fut: Future<Output = Result<Bytes, RepoError>>,
{
    if len == 0 {
        return Ok(Bytes::new());
    }
    let first = read(offset, len).await?;
    if first.len() as u64 >= len || first.is_empty() {
        return Ok(first.slice(..first.len().min(len as usize)));
    }
    let cap = usize::try_from(len)
        .map_err(|_| RepoError::Client(ClientError::Invalid("piece too large".into())))?;
    let mut buf = BytesMut::with_capacity(cap);
    buf.extend_from_slice(&first);
    while (buf.len() as u64) < len {
        let at = offset + buf.len() as u64;
        let more = read(at, len - buf.len() as u64).await?;
        if more.is_empty() {
            break;
        }
        let take = more.len().min(cap - buf.len());
        buf.extend_from_slice(&more[..take]);
    }
    Ok(buf.freeze())
}

/// A file found by the walk.
struct Found {
    fid: Fid,
    path: String,
}

/// One page of a directory scan to fetch: the directory, its path, the cookie to go on
/// after.
struct ToScan {
    fid: Fid,
    path: String,
    cookie: u64,
}

/// Walks the tree at `path` and exports what needs it.
async fn walk(
    client: &Arc<Client>,
    repo: &Repo,
    store: &RepoStore,
    path: &str,
    opts: &ExportOptions,
    reporter: &mut Reporter<'_>,
    progress: &(dyn Fn(&ExportProgress) + Send + Sync),
) -> Result<ExportProgress, (ExportProgress, RepoError)> {
    let mut p = ExportProgress::default();
    let fail = |p: &ExportProgress, e: RepoError| (p.clone(), e);
    relative_path(&repo.spec.path, path).map_err(|e| fail(&p, e))?;
    let root = Credentials::root();
    let cred = &root;
    let top = client
        .resolve(path, false, cred)
        .await
        .map_err(|e| fail(&p, e.into()))?;
    let parallel = opts.parallel.max(1);
    let mut to_scan: Vec<ToScan> = Vec::new();
    let mut found: VecDeque<Found> = VecDeque::new();
    let path = if path.len() > 1 {
        path.trim_end_matches('/')
    } else {
        path
    };
    match top.kind {
        FileKind::Directory => to_scan.push(ToScan {
            fid: top.fid,
            path: path.to_string(),
            cookie: 0,
        }),
        kind => {
            p.scanned += 1;
            if opts.selects(kind, &top) {
                found.push_back(Found {
                    fid: top.fid,
                    path: path.to_string(),
                });
            }
        }
    }
    let mut scans = FuturesUnordered::new();
    let mut exports = FuturesUnordered::new();
    loop {
        while scans.len() < SCANS_IN_FLIGHT && found.len() < FOUND_MAX {
            let Some(s) = to_scan.pop() else { break };
            scans.push(async move {
                let r = client.scan_dir(s.fid, s.cookie, cred).await;
                (s, r)
            });
        }
        while exports.len() < parallel {
            let Some(f) = found.pop_front() else { break };
            exports.push(async move {
                let r = export_file(client, repo, store, f.fid, &f.path).await;
                (f, r)
            });
        }
        if scans.is_empty() && exports.is_empty() {
            break;
        }
        tokio::select! {
            biased;
            Some((f, r)) = exports.next(), if !exports.is_empty() => match r {
                Ok(bytes) => {
                    p.exported += 1;
                    p.bytes += bytes;
                }
                Err(e) if e.errno() == Errno::Busy => {
                    tracing::info!(path = %f.path, "changed while exported: left dirty");
                    p.skipped += 1;
                }
                Err(e) => {
                    tracing::warn!(path = %f.path, "not exported: {e}");
                    p.failed += 1;
                }
            },
            Some((s, r)) = scans.next(), if !scans.is_empty() => match r {
                Ok((page, eof)) => {
                    if !eof && let Some(last) = page.last() {
                        to_scan.push(ToScan {
                            fid: s.fid,
                            path: s.path.clone(),
                            cookie: last.entry.cookie,
                        });
                    }
                    for e in page {
                        let e = e.entry;
                        if e.name == b"." || e.name == b".." {
                            continue;
                        }
                        let Ok(name) = String::from_utf8(e.name) else {
                            tracing::warn!(dir = %s.path, "a name that is not UTF-8 cannot be a key");
                            p.failed += 1;
                            continue;
                        };
                        let child = format!("{}/{name}", s.path.trim_end_matches('/'));
                        match e.kind {
                            FileKind::Directory => to_scan.push(ToScan {
                                fid: e.fid,
                                path: child,
                                cookie: 0,
                            }),
                            FileKind::Regular | FileKind::Symlink => {
                                p.scanned += 1;
                                let selected = match &e.attr {
                                    Some(a) => opts.selects(e.kind, a),
                                    None => wants_export(e.kind, 0),
                                };
                                if selected {
                                    found.push_back(Found { fid: e.fid, path: child });
                                }
                            }
                            _ => {}
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(dir = %s.path, "directory not read: {e}");
                    p.failed += 1;
                }
            },
        }
        reporter
            .tick(&counts_of(&p), None, p.scanned, || progress(&p))
            .await;
    }
    Ok(p)
}

#[cfg(test)]
mod tests;
