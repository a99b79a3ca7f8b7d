//! A walk of a linked directory: the regular files and symlinks below it ([`Walked`]),
//! with the attributes the agent and tiering decide by.

use crate::error::RepoError;
use weft_client::Client;
use weft_proto::mdt::{Attr, Credentials, FileKind};
use weft_proto::{Fid, Timestamp};
/// A regular file or symlink found by [`walk`].
pub(crate) struct Walked {
    /// Its directory and the directory's path relative to the linked one.
    pub(crate) parent: Fid,
    pub(crate) parent_rel: String,
    pub(crate) name: Vec<u8>,
    /// Its path relative to the linked directory.
    pub(crate) rel: String,
    pub(crate) fid: Fid,
    /// A regular file (else a symlink).
    pub(crate) regular: bool,
    pub(crate) hsm_flags: u32,
    pub(crate) archive_id: u32,
    pub(crate) open_count: u32,
    /// Its size.
    pub(crate) size: u64,
    /// When it was last used: `max(atime, mtime)` (see `crate::tiering`).
    pub(crate) used: Timestamp,
    /// Its data version.
    pub(crate) data_version: u64,
}

impl Walked {
    /// Entry `name` (`fid`, of `kind`) of directory `parent` (at `parent_rel`), with
    /// attributes `a` (none: zeros).
    pub(crate) fn of(
        parent: Fid,
        parent_rel: &str,
        name: Vec<u8>,
        (fid, kind): (Fid, FileKind),
        a: Option<&Attr>,
    ) -> Self {
        let name_str = String::from_utf8_lossy(&name);
        let rel = if parent_rel.is_empty() {
            name_str.into_owned()
        } else {
            format!("{parent_rel}/{name_str}")
        };
        Walked {
            parent,
            parent_rel: parent_rel.to_string(),
            rel,
            fid,
            regular: kind == FileKind::Regular,
            hsm_flags: a.map_or(0, |a| a.hsm_flags),
            archive_id: a.map_or(0, |a| a.archive_id),
            open_count: a.map_or(0, |a| a.open_count),
            size: a.map_or(0, |a| a.size),
            used: a.map_or(Timestamp::default(), |a| {
                let key = |t: &Timestamp| (t.sec, t.nsec);
                if key(&a.mtime) > key(&a.atime) {
                    a.mtime
                } else {
                    a.atime
                }
            }),
            data_version: a.map_or(0, |a| a.data_version),
            name,
        }
    }
}

/// Walks the tree below `dir` (depth first, a page at a time), calling `visit` for each
/// regular file and symlink with a UTF-8 path.
pub(crate) async fn walk(
    client: &Client,
    dir: Fid,
    visit: impl FnMut(Walked),
) -> Result<(), RepoError> {
    walk_under(client, dir, "", visit).await
}

/// [`walk`] of `dir`, a directory at `rel` below the linked one: the paths visited are
/// relative to the linked directory.
pub(crate) async fn walk_under(
    client: &Client,
    dir: Fid,
    rel: &str,
    mut visit: impl FnMut(Walked),
) -> Result<(), RepoError> {
    let cred = Credentials::root();
    let mut stack = vec![(dir, rel.to_string(), 0u64)];
    while let Some((fid, rel, cookie)) = stack.pop() {
        let (page, eof) = client.scan_dir(fid, cookie, &cred).await?;
        if !eof && let Some(last) = page.last() {
            stack.push((fid, rel.clone(), last.entry.cookie));
        }
        for e in page {
            let e = e.entry;
            if e.name == b"." || e.name == b".." {
                continue;
            }
            let Ok(name) = std::str::from_utf8(&e.name) else {
                continue;
            };
            match e.kind {
                FileKind::Directory => {
                    let child = if rel.is_empty() {
                        name.to_string()
                    } else {
                        format!("{rel}/{name}")
                    };
                    stack.push((e.fid, child, 0));
                }
                FileKind::Regular | FileKind::Symlink => visit(Walked::of(
                    fid,
                    &rel,
                    e.name,
                    (e.fid, e.kind),
                    e.attr.as_ref(),
                )),
                _ => {}
            }
        }
    }
    Ok(())
}
