//! Paths the verbs act on: a path inside a weftfs FUSE mount, or `HOST:PORT:/FSNAME[/PATH]`
//! naming a file system (and a path in it) directly.
//!
//! For a path in a mount, the mount is found in `/proc/self/mountinfo` (type `fuse.weft`,
//! its source is `HOST:PORT:/FSNAME`) and the verb connects its own client library
//! instance to the same file system, as `lfs` talks to the Lustre client under a mount: the
//! operations (layouts, scans, migration) are ones the kernel has no system call for.

use anyhow::{Context, Result, bail};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use weft_client::Client;
use weft_proto::mdt::{Attr, Credentials};

/// A file system and a path in it.
pub struct FsPath {
    /// `HOST:PORT:/FSNAME`.
    pub source: String,
    /// The MGS address.
    pub mgs: String,
    /// The file system name.
    pub fsname: String,
    /// Where the file system is mounted here, if the path was given through a mount.
    pub mountpoint: Option<PathBuf>,
    /// The path inside the file system, starting with `/`.
    pub inner: String,
}

impl FsPath {
    /// How to show `inner` to the user: through the mount if there is one.
    pub fn display(&self, inner: &str) -> String {
        match &self.mountpoint {
            Some(m) => {
                let rel = inner.trim_start_matches('/');
                if rel.is_empty() {
                    m.display().to_string()
                } else {
                    m.join(rel).display().to_string()
                }
            }
            None => format!("{}{}", self.source, inner),
        }
    }
}

/// The credentials of this process (effective uid/gid and supplementary groups), which the
/// MDT checks as it does for the mount.
pub fn my_credentials() -> Credentials {
    // SAFETY: geteuid/getegid cannot fail and touch no memory of ours.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let mut groups = vec![0 as libc::gid_t; weft_proto::GROUPS_MAX];
    // SAFETY: the buffer holds `groups.len()` entries, the size we pass.
    let n = unsafe { libc::getgroups(groups.len() as libc::c_int, groups.as_mut_ptr()) };
    groups.truncate(usize::try_from(n).unwrap_or(0));
    Credentials { uid, gid, groups }
}

/// Resolves a command-line path.
pub fn resolve(arg: &str) -> Result<FsPath> {
    if let Some(p) = parse_spec_path(arg) {
        return Ok(p);
    }
    let abs = absolute(Path::new(arg))?;
    let mountinfo =
        std::fs::read_to_string("/proc/self/mountinfo").context("reading /proc/self/mountinfo")?;
    let mut best: Option<(PathBuf, String)> = None;
    for line in mountinfo.lines() {
        let Some((mountpoint, fstype, source)) = parse_mountinfo_line(line) else {
            continue;
        };
        if fstype != "fuse.weft" || !abs.starts_with(&mountpoint) {
            continue;
        }
        if best
            .as_ref()
            .is_none_or(|(m, _)| mountpoint.as_os_str().len() > m.as_os_str().len())
        {
            best = Some((mountpoint, source));
        }
    }
    let Some((mountpoint, source)) = best else {
        bail!(
            "{} is not inside a weftfs mount (and not HOST:PORT:/FSNAME[/PATH])",
            abs.display()
        );
    };
    let (mgs, fsname) = super::parse_fs_spec(&source)
        .with_context(|| format!("mount at {} has source {source}", mountpoint.display()))?;
    let rel = abs.strip_prefix(&mountpoint).unwrap_or(Path::new(""));
    let inner = format!("/{}", rel.to_str().context("path is not UTF-8")?);
    Ok(FsPath {
        source,
        mgs,
        fsname,
        mountpoint: Some(mountpoint),
        inner,
    })
}

/// `HOST:PORT:/FSNAME[/PATH]`, if `arg` has that shape.
fn parse_spec_path(arg: &str) -> Option<FsPath> {
    let (addr, rest) = arg.split_once(":/")?;
    crate::parse_addr(addr).ok()?;
    let (fsname, path) = rest.split_once('/').unwrap_or((rest, ""));
    if fsname.is_empty() {
        return None;
    }
    Some(FsPath {
        source: format!("{addr}:/{fsname}"),
        mgs: addr.to_string(),
        fsname: fsname.to_string(),
        mountpoint: None,
        inner: format!("/{path}"),
    })
}

/// An absolute, normalised path without following a symlink at its end (the verbs act on
/// the name given); `..` is resolved lexically after the parent is made canonical.
fn absolute(p: &Path) -> Result<PathBuf> {
    let abs = std::path::absolute(p).with_context(|| format!("bad path {}", p.display()))?;
    let mut out = PathBuf::new();
    for c in abs.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    // Canonicalise the directory part when it exists (symlinks to other places).
    if let (Some(parent), Some(name)) = (out.parent(), out.file_name())
        && let Ok(canon) = std::fs::canonicalize(parent)
    {
        return Ok(canon.join(name));
    }
    Ok(out)
}

/// Mount point, type and source of one `/proc/self/mountinfo` line.
fn parse_mountinfo_line(line: &str) -> Option<(PathBuf, String, String)> {
    let (left, right) = line.split_once(" - ")?;
    let mountpoint = left.split(' ').nth(4)?;
    let mut r = right.split(' ');
    let fstype = r.next()?.to_string();
    let source = r.next()?.to_string();
    Some((
        PathBuf::from(unescape(mountpoint)),
        fstype,
        unescape(&source),
    ))
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && let Some(oct) = b.get(i + 1..i + 4)
            && let Ok(v) = u8::from_str_radix(std::str::from_utf8(oct).unwrap_or("x"), 8)
        {
            out.push(v);
            i += 4;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A client library instance on the path's file system.
pub async fn connect_client(p: &FsPath) -> Result<Arc<Client>> {
    Client::mount(&p.mgs, &p.fsname, crate::key::client_options()?)
        .await
        .with_context(|| format!("cannot reach the file system {}", p.source))
}

/// The attributes of the path's inode (a symlink itself, not its target).
pub async fn stat(client: &Client, p: &FsPath, cred: &Credentials) -> Result<Attr> {
    client
        .resolve(&p.inner, false, cred)
        .await
        .map_err(|e| anyhow::anyhow!("{}: {e}", p.display(&p.inner)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines_parse() {
        let l = "95 30 0:52 / /mnt/we\\040ft rw,relatime shared:50 - fuse.weft 127.0.0.1:9400:/weft rw,user_id=0";
        let (m, t, s) = parse_mountinfo_line(l).unwrap();
        assert_eq!(m, PathBuf::from("/mnt/we ft"));
        assert_eq!(t, "fuse.weft");
        assert_eq!(s, "127.0.0.1:9400:/weft");
        assert!(parse_mountinfo_line("garbage").is_none());
    }

    #[test]
    fn spec_paths_parse() {
        let p = parse_spec_path("127.0.0.1:9400:/weft/a/b").unwrap();
        assert_eq!(
            (p.mgs.as_str(), p.fsname.as_str(), p.inner.as_str()),
            ("127.0.0.1:9400", "weft", "/a/b")
        );
        assert_eq!(parse_spec_path("127.0.0.1:9400:/weft").unwrap().inner, "/");
        assert!(parse_spec_path("/mnt/weft/a").is_none());
        assert!(parse_spec_path("host:x:/weft").is_none());
    }
}
