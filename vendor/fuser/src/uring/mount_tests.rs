//! Mounts a small file system over the ring and over `/dev/fuse` (weftfs patch). Needs
//! root, `/dev/fuse` and the fuse module's `enable_uring` parameter; skipped otherwise.
//! Sets the parameter for the test and restores it.

use std::ffi::OsStr;
use std::io::Read;
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;
use std::time::SystemTime;

use crate::Config;
use crate::Errno;
use crate::FileAttr;
use crate::FileHandle;
use crate::FileType;
use crate::Filesystem;
use crate::FopenFlags;
use crate::FuseTransport;
use crate::Generation;
use crate::INodeNo;
use crate::LockOwner;
use crate::MountOption;
use crate::OpenFlags;
use crate::ReplyAttr;
use crate::ReplyData;
use crate::ReplyDirectory;
use crate::ReplyEntry;
use crate::ReplyOpen;
use crate::ReplyWrite;
use crate::Request;
use crate::Session;
use crate::SessionACL;
use crate::UringMode;
use crate::WriteFlags;

const PARAM: &str = "/sys/module/fuse/parameters/enable_uring";
const TTL: Duration = Duration::from_secs(0);

/// One file, `data`, at inode 2. Reads are answered from another thread (the off-thread
/// reply path), everything else on the thread that received the request.
struct OneFile {
    data: std::sync::Arc<Mutex<Vec<u8>>>,
    /// Switches `enable_uring` off while answering INIT: the kernel offered the ring, the
    /// reply asks for it, but the connection does not get it and the registers fail.
    off_in_init: bool,
}

fn attr(ino: u64, size: u64) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size,
        blocks: size.div_ceil(512),
        atime: SystemTime::UNIX_EPOCH,
        mtime: SystemTime::UNIX_EPOCH,
        ctime: SystemTime::UNIX_EPOCH,
        crtime: SystemTime::UNIX_EPOCH,
        kind: if ino == 1 {
            FileType::Directory
        } else {
            FileType::RegularFile
        },
        perm: if ino == 1 { 0o755 } else { 0o644 },
        nlink: 1,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

impl Filesystem for OneFile {
    fn init(&mut self, _req: &Request, _config: &mut crate::KernelConfig) -> std::io::Result<()> {
        if self.off_in_init {
            std::fs::write(PARAM, "N")?;
        }
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if parent.0 == 1 && name == "data" {
            let size = self.data.lock().unwrap().len() as u64;
            reply.entry(&TTL, &attr(2, size), Generation(0));
        } else {
            reply.error(Errno::ENOENT);
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let size = self.data.lock().unwrap().len() as u64;
        match ino.0 {
            1 => reply.attr(&TTL, &attr(1, 0)),
            2 => reply.attr(&TTL, &attr(2, size)),
            _ => reply.error(Errno::ENOENT),
        }
    }

    fn open(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply.opened(FileHandle(0), FopenFlags::FOPEN_DIRECT_IO);
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let data = self.data.clone();
        std::thread::spawn(move || {
            let d = data.lock().unwrap();
            let start = (offset as usize).min(d.len());
            let end = (start + size as usize).min(d.len());
            reply.data(&d[start..end]);
        });
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let mut d = self.data.lock().unwrap();
        let end = offset as usize + data.len();
        if d.len() < end {
            d.resize(end, 0);
        }
        d[offset as usize..end].copy_from_slice(data);
        reply.written(data.len() as u32);
    }

    fn readdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        if offset == 0 {
            let _ = reply.add(INodeNo(2), 1, FileType::RegularFile, "data");
        }
        reply.ok();
    }
}

// The parameter is shared with weftfs's tests, which may run at the same time: the same
// protocol as their `EnableUring` (crates/weft-cli/tests/it/fuse_common.rs). Holders of
// "on" hold HOLDERS shared; every change happens under GUARD; the last holder to leave
// restores the value saved in SAVED.
const HOLDERS: &str = "/tmp/weft-test-enable-uring.holders";
const GUARD: &str = "/tmp/weft-test-enable-uring.guard";
const SAVED: &str = "/tmp/weft-test-enable-uring.saved";

fn lock_file(path: &str) -> std::fs::File {
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .unwrap()
}

fn flock(f: &std::fs::File, arg: nix::fcntl::FlockArg) -> nix::Result<()> {
    use std::os::fd::AsRawFd;
    #[allow(deprecated)]
    nix::fcntl::flock(f.as_raw_fd(), arg)
}

/// Keeps the parameter on while held.
struct UringOn(std::fs::File);

impl UringOn {
    fn acquire() -> Self {
        let guard = lock_file(GUARD);
        flock(&guard, nix::fcntl::FlockArg::LockExclusive).unwrap();
        let holder = lock_file(HOLDERS);
        flock(&holder, nix::fcntl::FlockArg::LockShared).unwrap();
        if !Path::new(SAVED).exists() {
            let now = std::fs::read_to_string(PARAM).unwrap();
            std::fs::write(SAVED, now.trim()).unwrap();
        }
        std::fs::write(PARAM, "Y").unwrap();
        UringOn(holder)
    }
}

impl Drop for UringOn {
    fn drop(&mut self) {
        let guard = lock_file(GUARD);
        let _ = flock(&guard, nix::fcntl::FlockArg::LockExclusive);
        let _ = flock(&self.0, nix::fcntl::FlockArg::Unlock);
        let probe = lock_file(HOLDERS);
        if flock(&probe, nix::fcntl::FlockArg::LockExclusiveNonblock).is_ok() {
            if let Ok(v) = std::fs::read_to_string(SAVED) {
                let _ = std::fs::write(PARAM, v.trim());
                let _ = std::fs::remove_file(SAVED);
            }
        }
    }
}

/// Runs `f` with the parameter off, if no one holds it on (else `None`).
fn with_uring_off<T>(f: impl FnOnce() -> T) -> Option<T> {
    with_uring_param("N", f)
}

/// Runs `f` with the parameter set to `value`, if no one holds it on (else `None`).
fn with_uring_param<T>(value: &str, f: impl FnOnce() -> T) -> Option<T> {
    let guard = lock_file(GUARD);
    flock(&guard, nix::fcntl::FlockArg::LockExclusive).unwrap();
    let probe = lock_file(HOLDERS);
    flock(&probe, nix::fcntl::FlockArg::LockExclusiveNonblock).ok()?;
    let before = std::fs::read_to_string(PARAM).unwrap();
    std::fs::write(PARAM, value).unwrap();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    std::fs::write(PARAM, before.trim()).unwrap();
    match r {
        Ok(v) => Some(v),
        Err(p) => std::panic::resume_unwind(p),
    }
}

fn can_run() -> bool {
    nix::unistd::geteuid().is_root()
        && Path::new("/dev/fuse").exists()
        && std::fs::metadata(PARAM).is_ok()
}

fn config(mode: UringMode) -> Config {
    Config {
        mount_options: vec![MountOption::FSName("uringtest".into())],
        acl: SessionACL::All,
        uring: mode,
        ..Config::default()
    }
}

/// Mounts, does file work, unmounts; returns the transport and ring request count.
fn exercise(mode: UringMode) -> std::io::Result<(FuseTransport, u64)> {
    exercise_with(mode, false)
}

fn exercise_with(mode: UringMode, off_in_init: bool) -> std::io::Result<(FuseTransport, u64)> {
    let dir = tempfile::tempdir()?;
    let fs = OneFile {
        data: Default::default(),
        off_in_init,
    };
    let session = Session::new(fs, dir.path(), &config(mode))?;
    let stats = session.transport_stats();
    let bg = session.spawn()?;
    let file = dir.path().join("data");
    let big: Vec<u8> = (0..3 << 20).map(|i: u32| (i % 251) as u8).collect();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&file)?
        .write_all(&big)?;
    let mut back = Vec::new();
    std::fs::File::open(&file)?.read_to_end(&mut back)?;
    assert!(back == big, "read back differs");
    assert_eq!(std::fs::metadata(&file)?.len(), big.len() as u64);
    let names: Vec<_> = std::fs::read_dir(dir.path())?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<Result<_, _>>()?;
    assert_eq!(names, vec![std::ffi::OsString::from("data")]);
    assert_eq!(
        std::fs::metadata(dir.path().join("nope"))
            .map(drop)
            .map_err(|e| e.raw_os_error()),
        Err(Some(libc::ENOENT))
    );
    let served = stats.ring_requests();
    bg.umount_and_join()?;
    Ok((stats.transport(), served))
}

#[test]
fn ring_and_dev_fuse_mounts() {
    if !can_run() {
        eprintln!("skipped: needs root, /dev/fuse and {PARAM}");
        return;
    }
    {
        let _on = UringOn::acquire();
        let (t, served) = exercise(UringMode::On).unwrap();
        eprintln!("ring: {served} requests");
        assert_eq!(t, FuseTransport::Uring);
        assert!(served > 10, "only {served} requests through the ring");
        let (t, served) = exercise(UringMode::Off).unwrap();
        assert_eq!((t, served), (FuseTransport::DevFuse, 0));
    }

    let off = with_uring_off(|| {
        let (t, served) = exercise(UringMode::Auto).unwrap();
        assert_eq!((t, served), (FuseTransport::DevFuse, 0));
        let e = exercise(UringMode::On).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::Unsupported, "{e}");
    });
    if off.is_none() {
        eprintln!("fallback not checked: another test holds enable_uring on");
    }

    // Offered, asked for, then refused at register time (EOPNOTSUPP): `Auto` falls back to
    // /dev/fuse, `On` fails the mount.
    let refused = with_uring_param("Y", || {
        let (t, served) = exercise_with(UringMode::Auto, true).unwrap();
        assert_eq!((t, served), (FuseTransport::DevFuse, 0));
        std::fs::write(PARAM, "Y").unwrap();
        let e = exercise_with(UringMode::On, true).unwrap_err();
        eprintln!("refused: {e}");
        assert!(
            e.to_string().contains("registering the queues failed"),
            "{e}"
        );
    });
    if refused.is_none() {
        eprintln!("refused registers not checked: another test holds enable_uring on");
    }
}
