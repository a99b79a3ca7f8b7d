//! `weft mount`, `weft umount`, and the `mount.fuse.weft` helper that lets `mount(8)` and
//! `/etc/fstab` mount weftfs:
//!
//! ```text
//! ln -s "$(command -v weft)" /sbin/mount.fuse.weft
//! mount -t fuse.weft 127.0.0.1:9400:/weft /mnt/weft -o attr_timeout=1
//! # /etc/fstab:
//! 127.0.0.1:9400:/weft  /mnt/weft  fuse.weft  defaults,_netdev  0 0
//! ```
//!
//! `mount(8)` runs the helper as `mount.fuse.weft SOURCE DIR [-sfnv] [-o OPTIONS]` and
//! expects it to return once mounted, so the helper is `weft mount --daemon`.

use anyhow::{Context, Result, bail};
use clap::Args;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use weft_client::{Client, ClientOptions};
use weft_fuse::{Mount, MountOptions};
use weft_rpc::AbortOnDrop;

/// Flags of `weft mount`.
#[derive(Args, Debug)]
pub struct MountArgs {
    /// The file system: `HOST:PORT:/FSNAME` (the MGS address and the file system name).
    pub source: String,
    /// Where to mount it.
    pub mountpoint: PathBuf,
    /// Mount options, comma-separated (repeatable): entry_timeout=S, attr_timeout=S,
    /// writeback_cache, direct_io, threads=N, poll_us=N, uring=auto|on|off (FUSE over
    /// io_uring), max_background=N, ro, allow_other, nodefault_permissions, and kernel flags
    /// (noatime, nosuid, nodev, noexec, ...).
    #[arg(short = 'o', value_name = "OPTIONS")]
    pub options: Vec<String>,
    /// Detach once mounted (the file system is served in the background).
    #[arg(long)]
    pub daemon: bool,
    /// With --daemon: where the background server logs (default: nowhere).
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
    /// Serve the client's Prometheus metrics at http://HOST:PORT/metrics (also
    /// `-o metrics=HOST:PORT`, for fstab).
    #[arg(long, value_name = "HOST:PORT", value_parser = crate::parse_addr)]
    pub metrics: Option<String>,
    /// The cluster key (also `-o key=FILE`, for fstab).
    #[command(flatten)]
    pub key: crate::key::KeyArgs,
    #[command(flatten)]
    pub tls: crate::tls::TlsArgs,
}

/// Flags of `weft umount`.
#[derive(Args, Debug)]
pub struct UmountArgs {
    /// The mount point.
    pub mountpoint: PathBuf,
    /// Detach now even if busy; open files keep working until closed.
    #[arg(short = 'l', long)]
    pub lazy: bool,
}

/// What `-o` gives besides FUSE mount options: settings of this command (for fstab).
#[derive(Default)]
struct CommandOptions {
    /// `metrics=HOST:PORT`.
    metrics: Option<String>,
    /// `key=FILE`.
    key: Option<PathBuf>,
    /// `tls_ca=FILE`, `tls_cert=FILE`, `tls_key=FILE`.
    tls: crate::tls::TlsArgs,
}

/// The FUSE mount options, and the [`CommandOptions`] taken out of them.
fn options(list: &[String]) -> Result<(MountOptions, CommandOptions)> {
    let mut o = MountOptions::default();
    let mut c = CommandOptions::default();
    for l in list {
        let mut rest = Vec::new();
        for word in l.split(',') {
            let file = |prefix: &str| word.strip_prefix(prefix).map(PathBuf::from);
            if let Some(addr) = word.strip_prefix("metrics=") {
                c.metrics = Some(crate::parse_addr(addr).map_err(anyhow::Error::msg)?);
            } else if let Some(f) = file("key=") {
                c.key = Some(f);
            } else if let Some(f) = file("tls_ca=") {
                c.tls.tls_ca = Some(f);
            } else if let Some(f) = file("tls_cert=") {
                c.tls.tls_cert = Some(f);
            } else if let Some(f) = file("tls_key=") {
                c.tls.tls_key = Some(f);
            } else {
                rest.push(word);
            }
        }
        if !rest.is_empty() {
            o.apply(&rest.join(",")).map_err(anyhow::Error::msg)?;
        }
    }
    Ok((o, c))
}

/// Runs `weft mount`.
pub async fn run(args: MountArgs) -> Result<()> {
    let (mgs, fsname) = weft_fuse::parse_source(&args.source).map_err(anyhow::Error::msg)?;
    let (opts, from_o) = options(&args.options)?;
    let key = crate::key::load(args.key.key.as_deref().or(from_o.key.as_deref()))?;
    // Flags win over `-o`, which wins over the environment.
    let tls = crate::tls::TlsArgs {
        tls_ca: args.tls.tls_ca.clone().or(from_o.tls.tls_ca),
        tls_cert: args.tls.tls_cert.clone().or(from_o.tls.tls_cert),
        tls_key: args.tls.tls_key.clone().or(from_o.tls.tls_key),
    }
    .client()?;
    let metrics = args.metrics.clone().or(from_o.metrics);
    if !args.mountpoint.is_dir() {
        bail!(
            "mount point {} is not a directory",
            args.mountpoint.display()
        );
    }
    if args.daemon {
        return daemonize(&args);
    }
    let mut client_opts = ClientOptions::default();
    client_opts.cluster.transport = crate::key::transport(key, tls);
    let client = Client::mount(&mgs, &fsname, client_opts)
        .await
        .with_context(|| format!("cannot reach file system '{fsname}' at {mgs}"))?;
    let served = serve(
        client,
        &args.source,
        &args.mountpoint,
        opts,
        metrics.as_deref(),
    )
    .await?;
    println!(
        "weft mount: {} mounted at {}",
        args.source,
        args.mountpoint.display()
    );
    served.until_signal_or_unmount().await
}

/// A mount being served on a blocking thread.
pub struct Served {
    unmounter: weft_fuse::Unmounter,
    thread: tokio::task::JoinHandle<std::io::Result<()>>,
    mountpoint: PathBuf,
    /// The client's control socket (`weft get_param`/`set_param` on this node).
    _ctl: Option<crate::client_node::CtlSocket>,
    /// The client's Prometheus endpoint, if asked for.
    _metrics: Option<AbortOnDrop<()>>,
}

/// Mounts `client` at `mountpoint` and serves it in the background, with its control
/// socket and, given `metrics`, a Prometheus endpoint there.
pub async fn serve(
    client: Arc<Client>,
    source: &str,
    mountpoint: &Path,
    opts: MountOptions,
    metrics: Option<&str>,
) -> Result<Served> {
    let node = crate::client_node::ClientNode::new(client.clone(), source, mountpoint);
    let metrics = match metrics {
        Some(addr) => Some(AbortOnDrop(
            crate::metrics::serve(addr, node.clone()).await?,
        )),
        None => None,
    };
    // Without the socket the mount still works; only node-local get_param misses it.
    let ctl = match crate::client_node::serve_ctl(node.clone()) {
        Ok(c) => Some(c),
        Err(e) => {
            tracing::warn!(error = %e, "no client control socket");
            None
        }
    };
    let rt = tokio::runtime::Handle::current();
    let (src, mp) = (source.to_string(), mountpoint.to_path_buf());
    // Mounting blocks until the kernel's first request: not on a reactor thread.
    let mount = tokio::task::spawn_blocking(move || Mount::new(client, &src, &mp, opts, rt))
        .await
        .context("mount task failed")?
        .with_context(|| format!("cannot mount at {}", mountpoint.display()))?;
    node.set_transport(mount.transport());
    let unmounter = mount.unmounter();
    let thread = tokio::task::spawn_blocking(move || mount.run());
    Ok(Served {
        unmounter,
        thread,
        mountpoint: mountpoint.to_path_buf(),
        _ctl: ctl,
        _metrics: metrics,
    })
}

impl Served {
    /// Serves until SIGINT/SIGTERM (then unmounts) or until unmounted from outside.
    pub async fn until_signal_or_unmount(mut self) -> Result<()> {
        tokio::select! {
            r = &mut self.thread => return finished(r),
            _ = crate::shutdown::wait_for_signal() => {}
        }
        self.unmount().await
    }

    /// Unmounts (lazily) and waits a bounded time for the serving threads to end.
    pub async fn unmount(self) -> Result<()> {
        if let Err(e) = self.unmounter.unmount() {
            tracing::warn!(mountpoint = %self.mountpoint.display(), error = %e, "unmount failed");
        }
        match tokio::time::timeout(Duration::from_secs(10), self.thread).await {
            Ok(r) => finished(r),
            // Files still open on a lazily detached mount keep it served; do not hang.
            Err(_) => {
                tracing::warn!("the mount is still busy; leaving it detached");
                Ok(())
            }
        }
    }
}

fn finished(r: Result<std::io::Result<()>, tokio::task::JoinError>) -> Result<()> {
    r.context("FUSE session task failed")?
        .context("FUSE session ended with an error")
}

/// Starts `weft mount` (without `--daemon`) in a new session and returns once it mounted.
fn daemonize(args: &MountArgs) -> Result<()> {
    let exe = std::env::current_exe().context("cannot find the weft binary")?;
    let mut cmd = Command::new(exe);
    cmd.arg("mount").arg(&args.source).arg(&args.mountpoint);
    for o in &args.options {
        cmd.arg("-o").arg(o);
    }
    if let Some(k) = &args.key.key {
        cmd.arg("--key").arg(k);
    }
    cmd.args(args.tls.to_args());
    let (out, err) = match &args.log {
        Some(p) => {
            let f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .with_context(|| format!("cannot open log {}", p.display()))?;
            (Stdio::from(f.try_clone()?), Stdio::from(f))
        }
        None => (Stdio::null(), Stdio::null()),
    };
    cmd.stdin(Stdio::null()).stdout(out).stderr(err);
    // SAFETY: setsid is async-signal-safe; the closure touches nothing else between fork
    // and exec.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = cmd.spawn().context("cannot start the mount daemon")?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if weft_fuse::is_mounted(&args.mountpoint) {
            return Ok(());
        }
        if let Some(status) = child.try_wait()? {
            bail!("the mount daemon exited with {status} before mounting (see --log)");
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            bail!("not mounted after 30 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `weft umount`.
pub fn umount(args: UmountArgs) -> Result<()> {
    weft_fuse::unmount(&args.mountpoint, args.lazy)
        .with_context(|| format!("cannot unmount {}", args.mountpoint.display()))
}

/// If this process was started as the `mount.fuse.weft` (or `mount.weft`) helper, the
/// `weft mount --daemon ...` command line that does what `mount(8)` asked.
pub fn helper_args(argv: &[OsString]) -> Option<Result<Vec<OsString>>> {
    let name = Path::new(argv.first()?).file_name()?.to_str()?;
    if name != "mount.fuse.weft" && name != "mount.weft" {
        return None;
    }
    Some(translate_helper(argv.get(1..).unwrap_or_default()))
}

fn translate_helper(args: &[OsString]) -> Result<Vec<OsString>> {
    let mut positional = Vec::new();
    let mut opts: Vec<OsString> = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.to_str() {
            Some("-o") => opts.push(it.next().context("-o needs options")?.clone()),
            // The type (`fuse.weft`) and a namespace are mount(8)'s business.
            Some("-t" | "-N") => {
                it.next();
            }
            Some(f) if f.starts_with('-') && f.len() > 1 => {
                // -s (sloppy), -n (no mtab), -v (verbose); -f (fake) must not mount.
                if f.contains('f') {
                    return Ok(Vec::new());
                }
            }
            _ => positional.push(a.clone()),
        }
    }
    let [source, dir] = positional.as_slice() else {
        bail!("usage: mount.fuse.weft HOST:PORT:/FSNAME MOUNTPOINT [-o OPTIONS]");
    };
    let mut out: Vec<OsString> = vec![
        "weft".into(),
        "mount".into(),
        "--daemon".into(),
        source.clone(),
        dir.clone(),
    ];
    for o in opts {
        out.push("-o".into());
        out.push(o);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn helper_command_lines_become_weft_mount_daemon() {
        let argv = os(&[
            "/sbin/mount.fuse.weft",
            "127.0.0.1:9400:/weft",
            "/mnt/w",
            "-n",
            "-o",
            "rw,_netdev",
        ]);
        let got = helper_args(&argv).and_then(Result::ok);
        assert_eq!(
            got,
            Some(os(&[
                "weft",
                "mount",
                "--daemon",
                "127.0.0.1:9400:/weft",
                "/mnt/w",
                "-o",
                "rw,_netdev"
            ]))
        );
        assert!(helper_args(&os(&["weft", "up"])).is_none());
        let fake = helper_args(&os(&["mount.fuse.weft", "a:1:/b", "/m", "-f"]));
        assert_eq!(fake.and_then(Result::ok), Some(vec![]));
    }
}
