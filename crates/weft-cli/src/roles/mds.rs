//! `weft mds`: a metadata server hosting one or more MDTs.

use crate::IndexedDir;
use crate::cluster_view::MdtClusterView;
use crate::metrics::Metrics;
use crate::shutdown::wait_for_signal;
use anyhow::{Context, Result};
use clap::Args;
use std::sync::Arc;
use std::time::Duration;
use weft_client::Cluster;
use weft_mdt::{Mdt, MdtHandler, MdtOptions};
use weft_proto::TargetId;
use weft_rpc::{Router, TypedService};

/// Flags of `weft mds`.
#[derive(Args, Debug)]
pub struct MdsArgs {
    /// Address of the MGS.
    #[arg(long, value_parser = crate::parse_addr)]
    pub mgs: String,
    /// Address to listen on.
    #[arg(long, value_parser = crate::parse_addr)]
    pub listen: String,
    /// Address clients should use, when it differs from --listen (e.g. listening on 0.0.0.0).
    #[arg(long, value_parser = crate::parse_addr)]
    pub advertise: Option<String>,
    /// An MDT to serve, as INDEX=DIR (repeatable).
    #[arg(long = "mdt", value_parser = crate::parse_indexed_dir, required = true)]
    pub mdts: Vec<IndexedDir>,
    /// Serve Prometheus metrics at http://HOST:PORT/metrics.
    #[arg(long, value_parser = crate::parse_addr)]
    pub metrics: Option<String>,
    #[command(flatten)]
    pub key: crate::key::KeyArgs,
    #[command(flatten)]
    pub tls: crate::tls::TlsArgs,
    /// Seconds to keep retrying an unreachable MGS before giving up.
    #[arg(long, default_value_t = 60)]
    pub mgs_timeout: u64,
    #[command(flatten)]
    pub tuning: MdtTuning,
    #[command(flatten)]
    pub repo: RepoAgentArgs,
}

/// The repository agent's flag, shared by `weft mds` and `weft up`.
#[derive(Args, Debug)]
pub struct RepoAgentArgs {
    /// Milliseconds between two sweeps of the repository agent (automatic import and
    /// export of data repositories whose association has an import or export policy);
    /// it runs in the MDS serving MDT0. 0 turns it off.
    #[arg(long, default_value_t = weft_repo::agent::SWEEP_INTERVAL.as_millis() as u64,
          value_parser = clap::value_parser!(u64).range(0..=86_400_000))]
    pub repo_interval_ms: u64,
}

/// Starts the repository agent with a client of the file system at `mgs` acting as root,
/// unless `args` turn it off; a client that cannot be made is logged and the MDS serves
/// without the agent.
pub async fn start_repo_agent(
    args: &RepoAgentArgs,
    mgs: &str,
    fsname: &str,
    route: &super::Route,
) -> Option<weft_repo::RepoAgent> {
    if args.repo_interval_ms == 0 {
        return None;
    }
    let opts = weft_client::ClientOptions {
        cluster: route.cluster_options(),
        ..Default::default()
    };
    match weft_client::Client::mount(mgs, fsname, opts).await {
        Ok(client) => {
            let interval = Duration::from_millis(args.repo_interval_ms);
            tracing::info!(?interval, "repository agent started");
            Some(weft_repo::RepoAgent::start(client, interval))
        }
        Err(e) => {
            tracing::warn!("repository agent not started: {e}");
            None
        }
    }
}

/// Stops the repository agent, logging what it did.
pub async fn stop_repo_agent(agent: Option<weft_repo::RepoAgent>) {
    if let Some(a) = agent {
        let stats = a.stats();
        a.stop().await;
        tracing::info!(?stats, "repository agent stopped");
    }
}

/// The MDTs' tunable flags, shared by `weft mds` and `weft up`.
#[derive(Args, Debug)]
pub struct MdtTuning {
    /// Longest time, in milliseconds, an acknowledged change waits for an fsync on the
    /// MDTs (like ext4's `commit=`): a power failure loses at most that much; a crash of
    /// the process loses nothing (redo log), and a client's fsync does not wait for it.
    #[arg(long, default_value_t = weft_mdt::redo::COMMIT_INTERVAL.as_millis() as u64,
          value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    pub commit_interval_ms: u64,
    /// Seconds a client node whose connection broke keeps its open files and locks, to
    /// use them again from its next connection (it resends what was in flight); also how
    /// long open files of the previous run wait after a restart to be opened again. Other
    /// clients wait that long for the locks of a client that died.
    #[arg(long, default_value_t = weft_mdt::HANDLE_GRACE.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub handle_grace_s: u64,
}

impl MdtTuning {
    /// The options of MDT `index` of file system `fsname` with these flags.
    fn options(&self, index: u32, fsname: &str) -> MdtOptions {
        MdtOptions {
            index,
            fsname: fsname.to_string(),
            commit_interval: Duration::from_millis(self.commit_interval_ms),
            handle_grace: Duration::from_secs(self.handle_grace_s),
            ..Default::default()
        }
    }
}

/// Opens each MDT, adds it to `router`, registers it with the MGS at `address` and starts
/// its background work (object destruction, OST usage polling).
pub async fn start(
    cluster: &Arc<Cluster>,
    router: &Router,
    mdts: &[IndexedDir],
    address: &str,
    tuning: &MdtTuning,
) -> Result<Vec<Arc<Mdt>>> {
    let mut out = Vec::new();
    for m in mdts {
        let id = TargetId::mdt(m.index);
        std::fs::create_dir_all(&m.dir)
            .with_context(|| format!("cannot create {}", m.dir.display()))?;
        let view = MdtClusterView::start(cluster.clone(), m.index).await;
        let opts = tuning.options(m.index, cluster.fsname());
        let mdt = Mdt::open(&m.dir, opts, view)
            .with_context(|| format!("cannot open {id} in {}", m.dir.display()))?;
        router.add(TypedService::new(
            id,
            mdt.uuid(),
            Arc::new(MdtHandler::new(mdt.clone())),
        ));
        super::register(cluster, id, mdt.uuid(), address, &[]).await?;
        mdt.start_background();
        out.push(mdt);
    }
    Ok(out)
}

/// Flushes and stops every MDT.
pub async fn stop(mdts: &[Arc<Mdt>]) {
    for m in mdts {
        m.shutdown().await;
    }
}

/// Runs until SIGINT/SIGTERM.
pub async fn run(args: MdsArgs) -> Result<()> {
    let route = super::Route::new(false)
        .with_key(args.key.server_key()?)
        .with_tls(args.tls.server()?);
    let cluster =
        super::connect_mgs(&args.mgs, "", Duration::from_secs(args.mgs_timeout), &route).await?;
    let router = Router::new(cluster.fsname());
    let server = super::listen(&args.listen, router.clone(), &route).await?;
    let address = args
        .advertise
        .clone()
        .unwrap_or_else(|| server.local_addr().to_string());
    let mdts = start(&cluster, &router, &args.mdts, &address, &args.tuning).await?;
    let ids = mdts
        .iter()
        .map(|m| (TargetId::mdt(m.index()), m.uuid()))
        .collect();
    let heartbeats = super::spawn_heartbeats(cluster.clone(), ids, address.clone(), vec![], vec![]);
    let metrics = match &args.metrics {
        Some(addr) => Some(
            crate::metrics::serve(addr, Metrics::new(router.clone(), mdts.clone(), vec![])).await?,
        ),
        None => None,
    };
    let agent = if mdts.iter().any(|m| m.index() == 0) {
        start_repo_agent(&args.repo, &args.mgs, cluster.fsname(), &route).await
    } else {
        None
    };
    tracing::info!(fsname = cluster.fsname(), %address, mdts = mdts.len(), "MDS serving");
    wait_for_signal().await;
    stop_repo_agent(agent).await;
    heartbeats.abort();
    if let Some(m) = metrics {
        m.abort();
    }
    server.shutdown().await;
    stop(&mdts).await;
    Ok(())
}
