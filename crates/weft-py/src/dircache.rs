//! Directories of recent opens by path, trusted for [`DIR_TTL`] (the FUSE mount trusts
//! names for its `entry_timeout`, 1 s by default): opening many files of one directory
//! then costs a lookup and an open each, not a walk of the whole path. A rename or rmdir
//! through the same connection forgets everything; an open that finds its cached
//! directory gone (ENOENT, ESTALE) walks the path again.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use weft_client::{Client, ClientError, File, OpenOptions};
use weft_proto::mdt::{Credentials, FileKind};
use weft_proto::{Errno, Fid, WireError};

/// How long a directory's path is trusted.
pub const DIR_TTL: Duration = Duration::from_secs(1);
/// Paths kept at most (all are dropped when full).
const MAX_DIRS: usize = 4096;

/// Directory FIDs by path.
#[derive(Default)]
pub struct DirCache {
    map: Mutex<HashMap<String, (Fid, Instant)>>,
}

impl DirCache {
    // try_lock throughout: a lock a thread of the parent held at `fork` stays held forever
    // in the child, which then goes without the cache rather than hang.

    fn get(&self, path: &str) -> Option<Fid> {
        let map = self.map.try_lock()?;
        let &(fid, at) = map.get(path)?;
        (at.elapsed() < DIR_TTL).then_some(fid)
    }

    fn put(&self, path: &str, fid: Fid) {
        if let Some(mut map) = self.map.try_lock() {
            if map.len() >= MAX_DIRS {
                map.clear();
            }
            map.insert(path.to_string(), (fid, Instant::now()));
        }
    }

    fn forget(&self, path: &str) {
        if let Some(mut map) = self.map.try_lock() {
            map.remove(path);
        }
    }

    /// Forgets every path (after a rename or rmdir).
    pub fn clear(&self) {
        if let Some(mut map) = self.map.try_lock() {
            map.clear();
        }
    }

    /// Opens the absolute `path` as [`Client::open_path`] does, finding its directory in
    /// the cache when it is there.
    pub async fn open(
        &self,
        c: &std::sync::Arc<Client>,
        path: &str,
        opts: OpenOptions,
        cred: &Credentials,
    ) -> Result<File, ClientError> {
        let trimmed = path.trim_end_matches('/');
        let Some((dir, name)) = trimmed.rsplit_once('/') else {
            return c.open_path(path, opts, cred).await;
        };
        if name.is_empty() || name == "." || name == ".." || dir.contains("/..") {
            return c.open_path(path, opts, cred).await;
        }
        let dir = if dir.is_empty() { "/" } else { dir };
        if let Some(fid) = self.get(dir) {
            match open_in(c, fid, name.as_bytes(), opts, cred).await {
                Err(e) if matches!(e.errno(), Errno::NoEnt | Errno::Stale) => self.forget(dir),
                r => return r,
            }
        }
        let parent = c.resolve(dir, true, cred).await?;
        if parent.kind != FileKind::Directory {
            return Err(ClientError::Remote(WireError::new(
                Errno::NotDir,
                "a path component is not a directory",
            )));
        }
        self.put(dir, parent.fid);
        open_in(c, parent.fid, name.as_bytes(), opts, cred).await
    }
}

/// Opens `name` in `parent`. Without O_CREAT the name is first looked for in the client's
/// statahead (as the FUSE mount's lookups are): a reader going through a directory's files
/// opens each by FID without a lookup round trip once the directory has been read ahead.
/// The search permission on `parent` was checked by the walk that found it (within
/// [`DIR_TTL`]), as the mount's kernel checks it from cached attributes.
async fn open_in(
    c: &std::sync::Arc<Client>,
    parent: Fid,
    name: &[u8],
    opts: OpenOptions,
    cred: &Credentials,
) -> Result<File, ClientError> {
    if opts.create.is_none()
        && let Some(attr) = c.lookup_ahead(parent, name, DIR_TTL)
    {
        match c.open(attr.fid, opts, cred).await {
            // Gone since the scan (or replaced): ask the MDT by name.
            Err(e) if matches!(e.errno(), Errno::NoEnt | Errno::Stale) => {}
            r => return r,
        }
    }
    let f = c.open_in(parent, name, opts, None, cred).await?;
    if !f.created() {
        c.note_lookup(parent, cred, DIR_TTL);
    }
    Ok(f)
}
