//! `weft`: the one binary of weftfs — servers, the all-in-one embedded file system, and
//! tools. Subcommands parse their flags here and hand over to a module of their own.

mod admin;
mod advise;
mod bench_io;
mod bench_md;
mod bench_repo;
mod client_node;
mod cluster_view;
mod key;
mod metrics;
mod mount;
mod roles;
mod shutdown;
mod tls;

/// jemalloc keeps freed memory for reuse, decaying it back to the OS over seconds: the
/// megabyte bulk buffers of every RPC and the clients' dirty buffers would otherwise come
/// fresh from the kernel, page-faulted and zeroed each time (glibc's allocator returns them
/// at once), which cost a third of the CPU of a read.
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// A C string pointer jemalloc reads at start (`const char *malloc_conf`).
#[repr(transparent)]
struct MallocConf(*const std::ffi::c_char);
// SAFETY: the pointer is to a static, immutable, NUL-terminated string; jemalloc only
// reads it. A raw pointer is needed because jemalloc's symbol is a `const char *`.
unsafe impl Sync for MallocConf {}

/// jemalloc's options, read before the first allocation. `oversize_threshold:0`: large
/// allocations (a client's dirty buffer is up to `max_dirty_mb / 4`) are served and cached
/// like any others, instead of from an arena that returns them to the OS at once.
#[unsafe(export_name = "_rjem_malloc_conf")]
static MALLOC_CONF: MallocConf = MallocConf(c"oversize_threshold:0".as_ptr());

use anyhow::Result;
use clap::{Parser, Subcommand};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

/// weftfs: a parallel distributed file system for AI training.
#[derive(Parser, Debug)]
#[command(name = "weft", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the management service (MGS).
    Mgs(roles::mgs::MgsArgs),
    /// Run a metadata server hosting one or more MDTs.
    Mds(roles::mds::MdsArgs),
    /// Run an object storage server hosting one or more OSTs.
    Oss(roles::oss::OssArgs),
    /// Run a whole file system in one process: MGS, MDTs and OSTs with local data.
    Up(roles::up::UpArgs),
    /// Mount a file system with FUSE: `weft mount HOST:PORT:/FSNAME MOUNTPOINT [-o OPTIONS]`.
    Mount(mount::MountArgs),
    /// Cluster keys: `weft key generate > FILE` (the server key), `weft key client FILE`
    /// (the client key derived from it).
    Key(key::KeyCommand),
    /// Unmount a weftfs mount.
    Umount(mount::UmountArgs),
    /// Manage OST pools (like `lctl pool_new/pool_add/...`).
    Pool(admin::pool::PoolArgs),
    /// Client classes by address range: root squash, read-only, admin (like `lctl
    /// nodemap_*`).
    Nodemap(admin::nodemap::NodemapArgs),
    /// Show MDT and OST usage (like `lfs df`).
    #[command(disable_help_flag = true)]
    Df(admin::df::DfArgs),
    /// Read parameters and statistics (like `lctl get_param`).
    #[command(name = "get_param")]
    GetParam(admin::param::GetParamArgs),
    /// Change client parameters on this node, or store them on the MGS with -P (like `lctl set_param`).
    #[command(name = "set_param")]
    SetParam(admin::param::SetParamArgs),
    /// A mount's persistent client cache: add, del, state, attach, detach (like `lctl pcc`, `lfs pcc`).
    Pcc(admin::pcc::PccArgs),
    /// Live view of every target's request rates, throughput and latency.
    Top(admin::top::TopArgs),
    /// Set the layout of a new or empty file, or a directory's default (like `lfs setstripe`).
    Setstripe(admin::stripe::SetStripeArgs),
    /// Show layouts: components and objects per OST (like `lfs getstripe`).
    Getstripe(admin::stripe::GetStripeArgs),
    /// Check (and unless --dry-run, repair) the namespace on every MDT and the objects on
    /// every OST (like `lfsck`).
    Fsck(admin::fsck::FsckArgs),
    /// Create directories, on a chosen MDT with -i (like `lfs mkdir -i`).
    Mkdir(admin::dirstripe::MkdirArgs),
    /// Set a directory's default for new subdirectories with -D (like `lfs setdirstripe`).
    Setdirstripe(admin::dirstripe::SetDirStripeArgs),
    /// Show which MDT holds a directory (like `lfs getdirstripe`).
    Getdirstripe(admin::dirstripe::GetDirStripeArgs),
    /// Find files by name, type, size, time and layout from bulk MDT scans (like `lfs find`).
    Find(admin::find::FindArgs),
    /// Re-stripe files online to a new layout, data verified; `-m MDT DIR` moves
    /// directories' metadata to another MDT (like `lfs migrate`).
    Migrate(admin::migrate::MigrateArgs),
    /// IOR-like and mdtest-like workloads through the client library.
    Bench(bench_io::BenchArgs),
    /// Measure MDT create, stat and unlink rates through the protocol.
    BenchMdt(bench_md::BenchMdtArgs),
    /// Data repositories (S3 and other object stores) linked to directories: create,
    /// list, show, delete, tasks, import, export (FSx for Lustre's data repository
    /// associations).
    Repo(admin::repo::RepoArgs),
    /// Show files' HSM flags and archive id (like `lfs hsm_state`).
    #[command(name = "hsm_state")]
    HsmState(admin::hsm::HsmFilesArgs),
    /// Set HSM flags, and the archive id with --archive-id (like `lfs hsm_set`).
    #[command(name = "hsm_set")]
    HsmSet(admin::hsm::HsmFlagsArgs),
    /// Clear HSM flags (like `lfs hsm_clear`).
    #[command(name = "hsm_clear")]
    HsmClear(admin::hsm::HsmFlagsArgs),
    /// Release archived files' data from the OSTs; reads restore it (like `lfs hsm_release`).
    #[command(name = "hsm_release")]
    HsmRelease(admin::hsm::HsmFilesArgs),
    /// Restore released files' data now, recursively with -r (like `lfs hsm_restore`).
    #[command(name = "hsm_restore")]
    HsmRestore(admin::hsm::HsmRestoreArgs),
    /// Copy files to their repository's store now (like `lfs hsm_archive`).
    #[command(name = "hsm_archive")]
    HsmArchive(admin::hsm::HsmFilesArgs),
    /// Show the HSM request running on files (like `lfs hsm_action`).
    #[command(name = "hsm_action")]
    HsmAction(admin::hsm::HsmFilesArgs),
    /// Data repository benchmark: import, lazy and loaded reads through the mount against
    /// copy-then-read and direct ranged GETs of an S3 bucket.
    BenchRepo(bench_repo::BenchRepoArgs),
    /// Checkpoint and stripe advisor: calibrate the models on this file system, then
    /// predict checkpoint stalls, stripe layouts and data set epochs.
    Advise(advise::AdviseArgs),
}

/// A `HOST:PORT` argument, parsed early so a typo fails with a clear message.
pub(crate) fn parse_addr(s: &str) -> Result<String, String> {
    let (host, port) = s
        .rsplit_once(':')
        .ok_or_else(|| format!("'{s}' is not HOST:PORT"))?;
    if host.is_empty() {
        return Err(format!("'{s}' has no host"));
    }
    port.parse::<u16>()
        .map_err(|_| format!("'{s}' has no valid port"))?;
    Ok(s.to_string())
}

/// An `INDEX=DIR` argument of `--mdt` / `--ost`.
#[derive(Debug, Clone)]
pub(crate) struct IndexedDir {
    pub index: u32,
    pub dir: PathBuf,
}

pub(crate) fn parse_indexed_dir(s: &str) -> Result<IndexedDir, String> {
    let (i, d) = s
        .split_once('=')
        .ok_or_else(|| format!("'{s}' is not INDEX=DIR"))?;
    let index = i
        .parse::<u32>()
        .map_err(|_| format!("'{i}' is not a target index"))?;
    if index > 0xffff {
        return Err(format!("target index {index} is above the maximum 65535"));
    }
    if d.is_empty() {
        return Err(format!("'{s}' has an empty directory"));
    }
    Ok(IndexedDir {
        index,
        dir: PathBuf::from(d),
    })
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}

/// Raises the soft limit of open files to the hard one, for the commands that run servers
/// or a mount: an OSS keeps up to `fdcache::DEFAULT_CAPACITY` buffered and some direct
/// descriptors per OST open, and a mount or MDS holds a connection per target; the usual
/// soft limit of 1024 is too few.
fn raise_open_file_limit() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    // `None` is unlimited; the kernel caps open files at `fs.nr_open` (1 Mi by default).
    let want = limit.maximum.unwrap_or(1 << 20);
    if limit.current.is_some_and(|c| c < want) {
        limit.current = Some(want);
        if let Err(e) = setrlimit(Resource::Nofile, limit) {
            tracing::debug!(error = %e, "cannot raise the open file limit");
        }
    }
}

fn main() -> ExitCode {
    // Started as `mount.fuse.weft` by mount(8): the same as `weft mount --daemon`.
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let cli = match mount::helper_args(&argv) {
        None => Cli::parse(),
        Some(Ok(args)) if args.is_empty() => return ExitCode::SUCCESS,
        Some(Ok(args)) => Cli::parse_from(args),
        Some(Err(e)) => {
            eprintln!("mount.fuse.weft: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    init_logging();
    if matches!(
        cli.command,
        Command::Mgs(_) | Command::Mds(_) | Command::Oss(_) | Command::Up(_) | Command::Mount(_)
    ) {
        raise_open_file_limit();
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("weft: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result: Result<u8> = runtime.block_on(async move {
        let command = match cli.command {
            // fsck(8) exit codes.
            Command::Fsck(a) => return admin::fsck::run(a).await.map(|c| c as u8),
            other => other,
        };
        match command {
            Command::Mgs(a) => roles::mgs::run(a).await,
            Command::Mds(a) => roles::mds::run(a).await,
            Command::Oss(a) => roles::oss::run(a).await,
            Command::Up(a) => roles::up::run(a).await,
            Command::Mount(a) => mount::run(a).await,
            Command::Umount(a) => mount::umount(a),
            Command::Key(a) => key::run(a),
            Command::BenchMdt(a) => bench_md::run(a).await,
            Command::Bench(a) => bench_io::run(a).await,
            Command::BenchRepo(a) => bench_repo::run(a).await,
            Command::Pool(a) => admin::pool::run(a).await,
            Command::Nodemap(a) => admin::nodemap::run(a).await,
            Command::Df(a) => admin::df::run(a).await,
            Command::GetParam(a) => admin::param::get(a).await,
            Command::SetParam(a) => admin::param::set(a).await,
            Command::Pcc(a) => admin::pcc::run(a).await,
            Command::Top(a) => admin::top::run(a).await,
            Command::Setstripe(a) => admin::stripe::setstripe(a).await,
            Command::Getstripe(a) => admin::stripe::getstripe(a).await,
            Command::Find(a) => admin::find::run(a).await,
            Command::Mkdir(a) => admin::dirstripe::mkdir(a).await,
            Command::Getdirstripe(a) => admin::dirstripe::getdirstripe(a).await,
            Command::Setdirstripe(a) => admin::dirstripe::setdirstripe(a).await,
            Command::Migrate(a) => admin::migrate::run(a).await,
            Command::Repo(a) => admin::repo::run(a).await,
            Command::HsmState(a) => admin::hsm::state(a).await,
            Command::HsmSet(a) => admin::hsm::set_flags(a, true).await,
            Command::HsmClear(a) => admin::hsm::set_flags(a, false).await,
            Command::HsmRelease(a) => admin::hsm::release(a).await,
            Command::HsmRestore(a) => admin::hsm::restore(a).await,
            Command::HsmArchive(a) => admin::hsm::archive(a).await,
            Command::HsmAction(a) => admin::hsm::action(a).await,
            Command::Advise(a) => advise::run(a).await,
            Command::Fsck(_) => Ok(()),
        }
        .map(|()| 0)
    });
    // Background tasks (connections, heartbeats) must not keep the process alive.
    runtime.shutdown_timeout(std::time::Duration::from_secs(2));
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("weft: {e:#}");
            ExitCode::FAILURE
        }
    }
}
