//! `weft up`: the whole file system in one process — MGS, MDTs and OSTs on one listen
//! address with data under one directory. The same code as the separate servers, wired
//! together; the roles still talk to each other through the protocol.

use crate::IndexedDir;
use crate::shutdown::wait_for_signal;
use anyhow::{Context, Result};
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;
use weft_proto::TargetId;
use weft_rpc::Router;

/// Flags of `weft up`.
#[derive(Args, Debug)]
pub struct UpArgs {
    /// Directory holding every target's data (created if missing).
    #[arg(long, default_value = "weft-data")]
    pub data: PathBuf,
    /// Where to mount the file system with FUSE (default: ./weft-mnt).
    #[arg(long, conflicts_with = "no_mount")]
    pub mount: Option<PathBuf>,
    /// Serve without mounting (headless).
    #[arg(long)]
    pub no_mount: bool,
    /// Mount options, as for `weft mount -o` (repeatable).
    #[arg(short = 'o', value_name = "OPTIONS")]
    pub options: Vec<String>,
    /// Number of MDTs.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub mdts: u32,
    /// Number of OSTs.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub osts: u32,
    /// Address every role listens on.
    #[arg(long, default_value = "127.0.0.1:9400", value_parser = crate::parse_addr)]
    pub listen: String,
    /// File system name (used when the data directory is new; checked afterwards).
    #[arg(long, default_value = "weft")]
    pub fsname: String,
    #[command(flatten)]
    pub tuning: super::mds::MdtTuning,
    #[command(flatten)]
    pub repo: super::mds::RepoAgentArgs,
    /// Serve Prometheus metrics at http://HOST:PORT/metrics.
    #[arg(long, value_parser = crate::parse_addr)]
    pub metrics: Option<String>,
    /// Send every call between the roles and the mount over loopback TCP instead of
    /// calling the targets directly (to measure or debug that path; `WEFT_RPC_LOCAL=0` in
    /// the environment does the same).
    #[arg(long)]
    pub rpc_sockets: bool,
    #[command(flatten)]
    pub key: crate::key::KeyArgs,
    #[command(flatten)]
    pub tls: crate::tls::TlsArgs,
    #[command(flatten)]
    pub evict: super::EvictArgs,
}

/// Runs until SIGINT/SIGTERM.
pub async fn run(args: UpArgs) -> Result<()> {
    let mut mount_opts = weft_fuse::MountOptions::default();
    for o in &args.options {
        mount_opts.apply(o).map_err(anyhow::Error::msg)?;
    }
    std::fs::create_dir_all(&args.data)
        .with_context(|| format!("cannot create {}", args.data.display()))?;
    let router = Router::new("");
    let mgs = super::mgs::start(&args.data.join("mgs"), Some(&args.fsname), &router).await?;
    let route = super::Route::new(args.rpc_sockets)
        .with_key(args.key.server_key()?)
        .with_tls(args.tls.server()?)
        .with_evict_timeout(args.evict.timeout());
    let server = super::listen(&args.listen, router.clone(), &route).await?;
    let address = server.local_addr().to_string();
    let cluster =
        super::connect_mgs(&address, mgs.fsname(), Duration::from_secs(10), &route).await?;

    let osts: Vec<IndexedDir> = (0..args.osts)
        .map(|i| IndexedDir {
            index: i,
            dir: args.data.join(format!("ost{i}")),
        })
        .collect();
    let mdts: Vec<IndexedDir> = (0..args.mdts)
        .map(|i| IndexedDir {
            index: i,
            dir: args.data.join(format!("mdt{i}")),
        })
        .collect();
    // The OSTs' data mover, as a separate OSS has (the MDT's coordinator hands it chunks).
    let mover = super::oss::data_mover(cluster.clone());
    let osts = super::oss::start(&cluster, &router, &osts, Some(&mover), &address).await?;
    let mdts = super::mds::start(&cluster, &router, &mdts, &address, &args.tuning).await?;
    let mut ids: Vec<_> = osts
        .iter()
        .map(|o| (TargetId::ost(o.index()), o.uuid()))
        .collect();
    ids.extend(mdts.iter().map(|m| (TargetId::mdt(m.index()), m.uuid())));
    let heartbeats =
        super::spawn_heartbeats(cluster.clone(), ids, address.clone(), vec![], osts.clone());
    let metrics = match &args.metrics {
        Some(addr) => {
            let m = crate::metrics::Metrics::new(router.clone(), mdts.clone(), osts.clone());
            Some(crate::metrics::serve(addr, m).await?)
        }
        None => None,
    };

    println!(
        "weft up: file system '{}' serving at {address} (MGS, {} MDT, {} OST; data in {})",
        mgs.fsname(),
        mdts.len(),
        osts.len(),
        args.data.display()
    );
    println!(
        "weft up: clients connect to {address}:/{}; Ctrl-C stops",
        mgs.fsname()
    );
    let agent = super::mds::start_repo_agent(&args.repo, &address, mgs.fsname(), &route).await;
    let mounted = if args.no_mount {
        None
    } else {
        let dir = args
            .mount
            .clone()
            .unwrap_or_else(|| PathBuf::from("weft-mnt"));
        mount(&address, mgs.fsname(), &dir, mount_opts, &route).await
    };
    wait_for_signal().await;
    // The mount goes first: its buffered data still needs the servers.
    if let Some(m) = mounted {
        if let Err(e) = m.unmount().await {
            tracing::warn!(error = %e, "unmounting failed");
        }
        println!("weft up: unmounted");
    }
    super::mds::stop_repo_agent(agent).await;
    heartbeats.abort();
    if let Some(m) = metrics {
        m.abort();
    }
    server.shutdown().await;
    super::mds::stop(&mdts).await;
    println!("weft up: stopped");
    Ok(())
}

/// Mounts the file system at `dir`; a failure is reported and the servers keep running.
async fn mount(
    address: &str,
    fsname: &str,
    dir: &std::path::Path,
    mount_opts: weft_fuse::MountOptions,
    route: &super::Route,
) -> Option<crate::mount::Served> {
    let attempt = async {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let opts = weft_client::ClientOptions {
            cluster: route.cluster_options(),
            ..Default::default()
        };
        let client = weft_client::Client::mount(address, fsname, opts).await?;
        crate::mount::serve(
            client,
            &format!("{address}:/{fsname}"),
            dir,
            mount_opts,
            None,
        )
        .await
    };
    match attempt.await {
        Ok(m) => {
            let shown = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
            println!("weft up: mounted at {}", shown.display());
            Some(m)
        }
        Err(e) => {
            eprintln!("weft up: not mounted ({e:#}); serving without a mount (--no-mount to skip)");
            None
        }
    }
}
