//! A connection to one file system (`weftfs.connect`), with the namespace operations.
//!
//! The client library instance behind it belongs to the process that made it: a forked
//! child that uses the connection mounts again (in its own runtime, see `proc`) and leaks
//! the parent's instance untouched. Its open files are [`file`]'s, its administrator's
//! verbs (stripes, usage, HSM state) [`admin`]'s.

pub mod admin;
pub mod file;

use crate::dircache::DirCache;
use crate::errors::{OrOsError, errno_error, os_error};
use crate::proc;
use crate::stat::{StatTuple, stat_tuple};
use file::RawFile;
use parking_lot::Mutex;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::future::Future;
use std::sync::Arc;
use tokio::runtime::Runtime;
use weft_client::{Client, ClientError, ClientOptions, OpenOptions};
use weft_proto::Errno;
use weft_proto::mdt::{AccessMode, Attr, Credentials, FileKind, RenameFlags, SetAttr};

/// Entries asked for per readdir page.
const DIR_PAGE: u32 = 1024;

/// A connection to a weftfs file system.
#[pyclass(module = "weftfs._native", frozen)]
pub struct Fs {
    /// `HOST:PORT:/FSNAME`.
    spec: String,
    mgs: String,
    fsname: String,
    /// The client library instance and the process that mounted it.
    client: Mutex<Option<(u32, Arc<Client>)>>,
    /// Directories of recent opens.
    dirs: DirCache,
}

/// The credentials of this process (effective ids and supplementary groups), checked by
/// the MDT as the mount's are.
fn credentials() -> Credentials {
    let groups = rustix::process::getgroups()
        .map(|g| g.into_iter().map(|g| g.as_raw()).collect())
        .unwrap_or_default();
    Credentials {
        uid: rustix::process::geteuid().as_raw(),
        gid: rustix::process::getegid().as_raw(),
        groups,
    }
}

/// A path inside the file system, absolute (`a/b` is `/a/b`).
fn inner(path: &str) -> String {
    if path.starts_with('/') {
        path.to_string()
    } else {
        format!("/{path}")
    }
}

/// Parses `HOST:PORT:/FSNAME` into the MGS address and the file system name.
fn parse_spec(spec: &str) -> PyResult<(String, String)> {
    let bad = || PyValueError::new_err(format!("'{spec}' is not HOST:PORT:/FSNAME"));
    let (addr, fsname) = spec.rsplit_once(":/").ok_or_else(bad)?;
    let (host, port) = addr.rsplit_once(':').ok_or_else(bad)?;
    if host.is_empty() || port.parse::<u16>().is_err() || fsname.is_empty() {
        return Err(bad());
    }
    if fsname.contains('/') {
        return Err(bad());
    }
    Ok((addr.to_string(), fsname.to_string()))
}

/// How long a mount waits for the MGS to name MDT0 (a file system still starting).
const FIRST_MDT_WAIT: std::time::Duration = std::time::Duration::from_secs(15);

/// Client options from the environment, as the `weft` tools take them: `WEFT_KEY` (a key
/// file, the client key of a cluster that authenticates nodes) and `WEFT_TLS_CA`,
/// `WEFT_TLS_CERT`, `WEFT_TLS_KEY` (the PEM files of a cluster that speaks TLS).
fn options_from_env() -> Result<ClientOptions, ClientError> {
    let tcp = weft_rpc::Tcp::from_env().map_err(|e| ClientError::Invalid(e.to_string()))?;
    let mut opts = ClientOptions::default();
    opts.cluster.transport = Arc::new(tcp);
    Ok(opts)
}

/// Mounts, and waits (a bounded time) until the configuration names MDT0: a file system
/// just started registers its targets with the MGS after the MGS answers.
async fn mount_ready(mgs: &str, fsname: &str) -> Result<Arc<Client>, ClientError> {
    let c = Client::mount(mgs, fsname, options_from_env()?).await?;
    let mut changes = c.cluster().watch_config();
    let deadline = tokio::time::Instant::now() + FIRST_MDT_WAIT;
    while c.cluster().mdt(0).is_err() {
        match tokio::time::timeout_at(deadline, changes.changed()).await {
            Ok(Ok(())) => {}
            // Out of time (or the cluster view went): the first call says what is missing.
            _ => break,
        }
    }
    Ok(c)
}

/// Connects to the file system `HOST:PORT:/FSNAME`.
#[pyfunction]
pub fn connect(py: Python<'_>, spec: &str) -> PyResult<Fs> {
    let (mgs, fsname) = parse_spec(spec)?;
    let fs = Fs {
        spec: spec.to_string(),
        mgs,
        fsname,
        client: Mutex::new(None),
        dirs: DirCache::default(),
    };
    // Mount now, so that a wrong address fails here and not at the first file.
    fs.client(py)?;
    Ok(fs)
}

impl Fs {
    /// The runtime and client of this process, mounting if this process has none.
    pub fn client(&self, py: Python<'_>) -> PyResult<(&'static Runtime, Arc<Client>)> {
        let rt = proc::runtime()?;
        let pid = proc::pid();
        {
            let mut cur = self.client.lock();
            match cur.take() {
                Some((p, c)) if p == pid => {
                    *cur = Some((p, c.clone()));
                    return Ok((rt, c));
                }
                // Mounted by the parent of this forked process: leaked (module header).
                Some((_, inherited)) => std::mem::forget(inherited),
                None => {}
            }
        }
        let mounted = py
            .detach(|| rt.block_on(mount_ready(&self.mgs, &self.fsname)))
            .map_err(|e| os_error(&e, &self.spec))?;
        let mut cur = self.client.lock();
        match cur.as_ref() {
            // Another thread mounted meanwhile: use the first, drop this one in its runtime.
            Some((p, c)) if *p == pid => {
                let c = c.clone();
                let _in_rt = rt.enter();
                drop(mounted);
                Ok((rt, c))
            }
            _ => {
                *cur = Some((pid, mounted.clone()));
                Ok((rt, mounted))
            }
        }
    }

    /// Runs a client call with the GIL released; its error becomes an OSError about `path`.
    pub fn call<T, F, Fut>(&self, py: Python<'_>, path: &str, f: F) -> PyResult<T>
    where
        T: Send,
        F: FnOnce(Arc<Client>, Credentials) -> Fut + Send,
        Fut: Future<Output = Result<T, ClientError>>,
    {
        let (rt, client) = self.client(py)?;
        let cred = credentials();
        py.detach(|| rt.block_on(f(client, cred))).or_os(path)
    }

    /// The attributes of `path` (following a symbolic link at its end with `follow`).
    fn attr(&self, py: Python<'_>, path: &str, follow: bool) -> PyResult<Attr> {
        let p = inner(path);
        self.call(py, path, |c, cred| async move {
            c.resolve(&p, follow, &cred).await
        })
    }

    /// Every entry of directory `path`, with attributes when `plus`.
    fn entries(
        &self,
        py: Python<'_>,
        path: &str,
        plus: bool,
    ) -> PyResult<Vec<weft_proto::mdt::DirEntry>> {
        let p = inner(path);
        self.call(py, path, |c, cred| async move {
            let dir = c.resolve(&p, true, &cred).await?;
            if dir.kind != FileKind::Directory {
                return Err(ClientError::Remote(weft_proto::WireError::new(
                    Errno::NotDir,
                    "not a directory",
                )));
            }
            let mut all = Vec::new();
            let mut cookie = 0;
            loop {
                let (page, eof) = c.readdir(dir.fid, cookie, DIR_PAGE, plus, &cred).await?;
                if let Some(last) = page.last() {
                    cookie = last.cookie;
                }
                let empty = page.is_empty();
                all.extend(
                    page.into_iter()
                        .filter(|e| e.name != b"." && e.name != b".."),
                );
                if eof || empty {
                    return Ok(all);
                }
            }
        })
    }
}

/// The one-letter type of a directory entry (`f`ile, `d`irectory, `l`ink, `o`ther).
fn kind_letter(k: FileKind) -> &'static str {
    match k {
        FileKind::Regular => "f",
        FileKind::Directory => "d",
        FileKind::Symlink => "l",
        _ => "o",
    }
}

#[pymethods]
impl Fs {
    /// `HOST:PORT:/FSNAME`.
    #[getter]
    fn spec(&self) -> &str {
        &self.spec
    }

    /// The stat fields of `path` (see `stat::StatTuple`).
    #[pyo3(signature = (path, follow_symlinks = true))]
    fn stat(&self, py: Python<'_>, path: &str, follow_symlinks: bool) -> PyResult<StatTuple> {
        Ok(stat_tuple(&self.attr(py, path, follow_symlinks)?))
    }

    /// The names in directory `path` (without `.` and `..`).
    fn listdir(&self, py: Python<'_>, path: &str) -> PyResult<Vec<String>> {
        Ok(self
            .entries(py, path, false)?
            .into_iter()
            .map(|e| String::from_utf8_lossy(&e.name).into_owned())
            .collect())
    }

    /// `(name, type letter, stat fields or None)` of every entry of directory `path`,
    /// in one listing with attributes (readdirplus).
    fn scandir(
        &self,
        py: Python<'_>,
        path: &str,
    ) -> PyResult<Vec<(String, &'static str, Option<StatTuple>)>> {
        Ok(self
            .entries(py, path, true)?
            .into_iter()
            .map(|e| {
                (
                    String::from_utf8_lossy(&e.name).into_owned(),
                    kind_letter(e.kind),
                    e.attr.as_ref().map(stat_tuple),
                )
            })
            .collect())
    }

    /// Creates directory `path`.
    #[pyo3(signature = (path, mode = 0o777))]
    fn mkdir(&self, py: Python<'_>, path: &str, mode: u32) -> PyResult<()> {
        let p = inner(path);
        let mode = mode & 0o7777 & !umask();
        self.call(py, path, |c, cred| async move {
            let (parent, name) = c.resolve_parent(&p, &cred).await?;
            c.mkdir(parent.fid, &name, mode, &cred).await.map(drop)
        })
    }

    /// Removes the file (not directory) `path`.
    fn unlink(&self, py: Python<'_>, path: &str) -> PyResult<()> {
        let p = inner(path);
        self.call(py, path, |c, cred| async move {
            let (parent, name) = c.resolve_parent(&p, &cred).await?;
            // unlink(2) of a directory is EISDIR on Linux (the MDT may say EPERM).
            let a = c.lookup(parent.fid, &name, &cred).await?;
            if a.kind == FileKind::Directory {
                return Err(ClientError::Remote(weft_proto::WireError::new(
                    Errno::IsDir,
                    "is a directory",
                )));
            }
            c.unlink(parent.fid, &name, &cred).await
        })
    }

    /// Removes the empty directory `path`.
    fn rmdir(&self, py: Python<'_>, path: &str) -> PyResult<()> {
        let p = inner(path);
        self.dirs.clear();
        self.call(py, path, |c, cred| async move {
            let (parent, name) = c.resolve_parent(&p, &cred).await?;
            c.rmdir(parent.fid, &name, &cred).await
        })
    }

    /// Renames `src` to `dst`, replacing `dst` if it exists (as `os.rename`).
    fn rename(&self, py: Python<'_>, src: &str, dst: &str) -> PyResult<()> {
        let (s, d) = (inner(src), inner(dst));
        self.dirs.clear();
        self.call(py, src, |c, cred| async move {
            let (sp, sn) = c.resolve_parent(&s, &cred).await?;
            let (dp, dn) = c.resolve_parent(&d, &cred).await?;
            c.rename(sp.fid, &sn, dp.fid, &dn, RenameFlags::default(), &cred)
                .await
        })
    }

    /// Sets the size of file `path`.
    fn truncate(&self, py: Python<'_>, path: &str, size: u64) -> PyResult<()> {
        let p = inner(path);
        self.call(py, path, |c, cred| async move {
            let a = c.resolve(&p, true, &cred).await?;
            let set = SetAttr {
                size: Some(size),
                ..Default::default()
            };
            c.setattr(a.fid, set, &cred).await.map(drop)
        })
    }

    /// Changes the permission bits of `path`.
    fn chmod(&self, py: Python<'_>, path: &str, mode: u32) -> PyResult<()> {
        let p = inner(path);
        self.call(py, path, |c, cred| async move {
            let a = c.resolve(&p, true, &cred).await?;
            let set = SetAttr {
                mode: Some(mode & 0o7777),
                ..Default::default()
            };
            c.setattr(a.fid, set, &cred).await.map(drop)
        })
    }

    /// Creates a symbolic link `path` pointing to `target`.
    fn symlink(&self, py: Python<'_>, target: &str, path: &str) -> PyResult<()> {
        let p = inner(path);
        let t = target.as_bytes().to_vec();
        self.call(py, path, |c, cred| async move {
            let (parent, name) = c.resolve_parent(&p, &cred).await?;
            c.symlink(parent.fid, &name, &t, &cred).await.map(drop)
        })
    }

    /// The target of symbolic link `path`.
    fn readlink(&self, py: Python<'_>, path: &str) -> PyResult<String> {
        let a = self.attr(py, path, false)?;
        if a.kind != FileKind::Symlink {
            return Err(errno_error(Errno::Inval, "not a symbolic link", path));
        }
        let t = self.call(py, path, |c, _| async move { c.readlink(a.fid).await })?;
        Ok(String::from_utf8_lossy(&t).into_owned())
    }

    /// Opens `path`: the flags of `open(2)` as booleans; `mode` for a created file
    /// (the process's umask applied).
    #[pyo3(signature = (path, read, write, create = false, exclusive = false, truncate = false, append = false, mode = 0o666))]
    // pyo3 maps each Python argument to one Rust parameter: grouping them in a struct would
    // change the Python signature (keyword arguments with defaults) that callers use.
    #[allow(clippy::too_many_arguments)]
    fn open(
        slf: Bound<'_, Self>,
        path: &str,
        read: bool,
        write: bool,
        create: bool,
        exclusive: bool,
        truncate: bool,
        append: bool,
        mode: u32,
    ) -> PyResult<RawFile> {
        let py = slf.py();
        let access = match (read, write) {
            (true, true) => AccessMode::ReadWrite,
            (false, true) => AccessMode::Write,
            (true, false) => AccessMode::Read,
            (false, false) => return Err(PyValueError::new_err("open for neither read nor write")),
        };
        let opts = OpenOptions {
            access,
            // Only a create reads the umask (from /proc: a syscall-heavy read on every open).
            create: create.then(|| mode & 0o7777 & !umask()),
            exclusive,
            truncate,
            append,
        };
        let p = inner(path);
        let fs = slf.get();
        let file = fs.call(py, path, |c, cred| async move {
            let f = fs.dirs.open(&c, &p, opts, &cred).await?;
            // open(2) of a directory for reading succeeds; Python's open() says EISDIR.
            if f.attr_at_open().kind == FileKind::Directory {
                let _ = f.close().await;
                return Err(ClientError::Remote(weft_proto::WireError::new(
                    Errno::IsDir,
                    "is a directory",
                )));
            }
            Ok(f)
        })?;
        Ok(RawFile::new(
            slf.unbind(),
            file,
            path.to_string(),
            read,
            write,
            append,
        ))
    }

    /// Flushes the metadata of this client (a `syncfs` of the connection).
    fn sync(&self, py: Python<'_>) -> PyResult<()> {
        self.call(py, "/", |c, _| async move { c.sync_metadata().await })
    }

    /// Sets the layout (striping) of `path`: a directory's default for new files, an empty
    /// file's layout, or a new empty file made with it. `count` -1 stripes over every OST;
    /// 0 values inherit.
    #[pyo3(signature = (path, count = 0, size = 0, offset = -1, pool = None))]
    fn setstripe(
        &self,
        py: Python<'_>,
        path: &str,
        count: i32,
        size: u64,
        offset: i32,
        pool: Option<String>,
    ) -> PyResult<()> {
        let t = admin::raid0(count, size, offset, pool);
        admin::setstripe(self, py, &inner(path), t)
    }

    /// The layout of `path` as a dict (see `admin::getstripe`).
    fn getstripe<'py>(&self, py: Python<'py>, path: &str) -> PyResult<Bound<'py, PyAny>> {
        admin::getstripe(self, py, &inner(path))
    }

    /// Usage of every MDT and OST (`weft df`): a list of dicts.
    fn df<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        admin::df(self, py)
    }

    /// HSM state of file `path`: `(flags, archive_id, [words as lfs hsm_state prints])`.
    fn hsm_state(&self, py: Python<'_>, path: &str) -> PyResult<(u32, u32, Vec<&'static str>)> {
        let a = self.attr(py, path, true)?;
        Ok((a.hsm_flags, a.archive_id, admin::hsm_words(a.hsm_flags)))
    }
}

impl Drop for Fs {
    fn drop(&mut self) {
        if let Some((pid, client)) = self.client.get_mut().take() {
            if pid != proc::pid() {
                // The parent's instance, in a forked child: leaked (module header).
                std::mem::forget(client);
            } else if let Ok(rt) = proc::runtime() {
                let _in_rt = rt.enter();
                drop(client);
            }
        }
    }
}

/// The process's umask, from `/proc/self/status` (setting it and setting it back would
/// race with other threads creating files); 022 if that cannot be read.
fn umask() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Umask:"))
                .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        })
        .unwrap_or(0o022)
}
