//! POSIX behaviour through a real FUSE mount (`weft mount` over separate server processes):
//! namespace operations, attributes, rename variants, links, FIFOs, xattrs, statfs, large
//! directories, data, exact errnos, permissions of other users, and two mounts of one file
//! system seeing each other's changes.

use crate::bin;
use crate::fuse_common::{FuseMount, check, cpath, errno, run_as};
use std::collections::BTreeSet;
use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use weft_testkit::TestCluster;
use weft_testkit::pattern;
use weft_testkit::wait_until;

mod lifetimes;
mod mounts;
mod namespace;

fn set_xattr(p: &Path, name: &str, value: &[u8], flags: i32) -> std::io::Result<()> {
    let n = std::ffi::CString::new(name).unwrap();
    // SAFETY: valid NUL-terminated strings and a buffer of the given length.
    check(unsafe {
        libc::setxattr(
            cpath(p).as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            flags,
        )
    })
}

fn get_xattr(p: &Path, name: &str) -> std::io::Result<Vec<u8>> {
    let n = std::ffi::CString::new(name).unwrap();
    let mut buf = vec![0u8; 4096];
    // SAFETY: valid NUL-terminated strings and a buffer of the given length.
    let r = unsafe {
        libc::getxattr(
            cpath(p).as_ptr(),
            n.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    buf.truncate(r as usize);
    Ok(buf)
}

fn list_xattr(p: &Path) -> Vec<String> {
    let mut buf = vec![0u8; 4096];
    // SAFETY: a valid path and a buffer of the given length.
    let r = unsafe { libc::listxattr(cpath(p).as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    assert!(r >= 0, "listxattr: {}", std::io::Error::last_os_error());
    buf.truncate(r as usize);
    buf.split(|&b| b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect()
}

fn rename2(a: &Path, b: &Path, flags: u32) -> std::io::Result<()> {
    // SAFETY: valid NUL-terminated paths.
    check(unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            cpath(a).as_ptr(),
            libc::AT_FDCWD,
            cpath(b).as_ptr(),
            flags,
        )
    })
}

fn utimens(p: &Path, atime: libc::timespec, mtime: libc::timespec) -> std::io::Result<()> {
    let t = [atime, mtime];
    // SAFETY: a valid path and a two-element timespec array.
    check(unsafe { libc::utimensat(libc::AT_FDCWD, cpath(p).as_ptr(), t.as_ptr(), 0) })
}

fn ts(sec: i64, nsec: i64) -> libc::timespec {
    libc::timespec {
        tv_sec: sec,
        tv_nsec: nsec,
    }
}
