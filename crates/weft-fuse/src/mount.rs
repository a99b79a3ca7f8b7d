//! Mounting: a fuser session over [`WeftFs`], with its threads, kernel options and unmount.

use crate::adapter::WeftFs;
use crate::options::MountOptions;
use fuser::{Config, MountOption, SessionACL};
use rustix::mount::UnmountFlags;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use weft_client::Client;

/// A mounted file system whose requests are being served (or about to be, by [`Mount::run`]).
pub struct Mount {
    session: fuser::Session<WeftFs>,
    mountpoint: PathBuf,
}

/// Unmounts a [`Mount`] from another thread (a signal handler task, `weft up` at exit).
pub struct Unmounter {
    mountpoint: PathBuf,
}

impl Unmounter {
    /// Detaches the mount; the session's threads then end and [`Mount::run`] returns.
    pub fn unmount(&self) -> io::Result<()> {
        unmount(&self.mountpoint, true)
    }
}

impl Mount {
    /// Mounts `client` at `mountpoint` (`source` is what `/proc/mounts` shows). Returns when
    /// the kernel has connected; call [`Mount::run`] to serve.
    pub fn new(
        client: Arc<Client>,
        source: &str,
        mountpoint: &Path,
        opts: MountOptions,
        rt: tokio::runtime::Handle,
    ) -> io::Result<Self> {
        let mut mount_options = vec![
            MountOption::FSName(source.to_string()),
            // Passed to the kernel, so that the mount's type reads `fuse.weft`.
            MountOption::CUSTOM("subtype=weft".into()),
        ];
        if opts.default_permissions {
            mount_options.push(MountOption::DefaultPermissions);
        }
        mount_options.push(if opts.read_only {
            MountOption::RO
        } else {
            MountOption::RW
        });
        for f in &opts.kernel_flags {
            mount_options.push(match f.as_str() {
                "dev" => MountOption::Dev,
                "nodev" => MountOption::NoDev,
                "suid" => MountOption::Suid,
                "nosuid" => MountOption::NoSuid,
                "exec" => MountOption::Exec,
                "noexec" => MountOption::NoExec,
                "atime" => MountOption::Atime,
                "noatime" => MountOption::NoAtime,
                "sync" => MountOption::Sync,
                "dirsync" => MountOption::DirSync,
                other => MountOption::CUSTOM(other.to_string()),
            });
        }
        let root = rustix::process::geteuid().is_root();
        let acl = if opts.allow_other.unwrap_or(root) {
            SessionACL::All
        } else {
            SessionACL::Owner
        };
        let mut config = Config::default();
        config.mount_options = mount_options;
        config.acl = acl;
        config.n_threads = Some(opts.threads.max(1));
        config.clone_fd = true;
        config.poll = Some(opts.poll);
        config.uring = opts.uring;
        let fs = WeftFs::new(client, opts, rt);
        let notifier = fs.notifier_slot();
        let session = fuser::Session::new(fs, mountpoint, &config)?;
        // Set before any request is served (run() has not started).
        let _ = notifier.set(session.notifier());
        Ok(Self {
            session,
            mountpoint: mountpoint.to_path_buf(),
        })
    }

    /// Which transport the mount's requests come through (`/dev/fuse` or io_uring
    /// queues) and how many came through the rings.
    pub fn transport(&self) -> fuser::TransportStats {
        self.session.transport_stats()
    }

    /// Something that unmounts this mount from elsewhere.
    pub fn unmounter(&self) -> Unmounter {
        Unmounter {
            mountpoint: self.mountpoint.clone(),
        }
    }

    /// Serves requests until the file system is unmounted.
    pub fn run(self) -> io::Result<()> {
        self.session.run()
    }
}

/// Unmounts the file system at `mountpoint`; with `lazy`, detaches it at once even if it is
/// busy (open files keep working until closed), otherwise fails with EBUSY if it is busy.
pub fn unmount(mountpoint: &Path, lazy: bool) -> io::Result<()> {
    if mountpoint.as_os_str().as_bytes().contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "mount point contains NUL",
        ));
    }
    let flags = if lazy {
        UnmountFlags::DETACH
    } else {
        UnmountFlags::empty()
    };
    Ok(rustix::mount::unmount(mountpoint, flags)?)
}

/// Whether a FUSE file system is mounted at `mountpoint` (read from `/proc/self/mountinfo`).
pub fn is_mounted(mountpoint: &Path) -> bool {
    let Ok(canon) = std::fs::canonicalize(mountpoint) else {
        return false;
    };
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    mountinfo_has(&info, &canon)
}

fn mountinfo_has(info: &str, mountpoint: &Path) -> bool {
    let want = mountpoint.as_os_str().as_bytes();
    info.lines().any(|l| {
        let fields: Vec<&str> = l.split(' ').collect();
        let point = fields.get(4).map(|p| unescape(p));
        let fstype = fields
            .iter()
            .position(|f| *f == "-")
            .and_then(|i| fields.get(i + 1));
        point.as_deref() == Some(want) && fstype.is_some_and(|t| t.starts_with("fuse"))
    })
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if let (Some(b'\\'), Some(oct)) = (b.get(i), b.get(i + 1..i + 4))
            && let Ok(v) = u8::from_str_radix(&String::from_utf8_lossy(oct), 8)
        {
            out.push(v);
            i += 4;
            continue;
        }
        if let Some(&c) = b.get(i) {
            out.push(c);
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines_are_matched_by_point_and_type() {
        let info = "36 35 98:0 / /mnt/a\\040b rw,noatime - fuse.weft 127.0.0.1:9400:/weft rw\n\
                    37 35 98:0 / /mnt/c rw - ext4 /dev/sda rw\n";
        assert!(mountinfo_has(info, Path::new("/mnt/a b")));
        assert!(!mountinfo_has(info, Path::new("/mnt/c")));
        assert!(!mountinfo_has(info, Path::new("/mnt/a")));
    }
}
