//! `weft mds`: a metadata server hosting one or more MDTs.
//!
//! With `--failover` it is also a standby for MDTs another MDS holds, as `weft oss` is for
//! OSTs (see `oss.rs`): the fence is the MDT store's file lock.

use crate::IndexedDir;
use crate::cluster_view::MdtClusterView;
use crate::metrics::Metrics;
use crate::shutdown::wait_for_signal;
use anyhow::{Context, Result};
use clap::Args;
use std::sync::Arc;
use std::time::Duration;
use weft_client::Cluster;
use weft_mdt::{Mdt, MdtError, MdtHandler, MdtOptions};
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
    /// Address of another MDS that may serve these MDTs (from the same, shared directories)
    /// when this one dies (repeatable). Registered with the MGS, so clients try it; and
    /// with it, an MDT another server holds is waited for instead of refused (this process
    /// is that server's standby).
    #[arg(long = "failover", value_parser = crate::parse_addr)]
    pub failover: Vec<String>,
    /// Serve Prometheus metrics at http://HOST:PORT/metrics.
    #[arg(long, value_parser = crate::parse_addr)]
    pub metrics: Option<String>,
    #[command(flatten)]
    pub key: crate::key::KeyArgs,
    #[command(flatten)]
    pub tls: crate::tls::TlsArgs,
    #[command(flatten)]
    pub evict: super::EvictArgs,
    /// Seconds to keep retrying an unreachable MGS before giving up.
    #[arg(long, default_value_t = 60)]
    pub mgs_timeout: u64,
    #[command(flatten)]
    pub tuning: MdtTuning,
    #[command(flatten)]
    pub repo: RepoAgentArgs,
}

/// The repository agent's flag, shared by `weft mds` and `weft up`.
#[derive(Args, Debug, Clone)]
pub struct RepoAgentArgs {
    /// Milliseconds between two sweeps of the repository agent (automatic import and
    /// export of data repositories whose association has an import or export policy);
    /// it runs in the MDS serving MDT0. 0 turns it off.
    #[arg(long, default_value_t = weft_repo::agent::SWEEP_INTERVAL.as_millis() as u64,
          value_parser = clap::value_parser!(u64).range(0..=86_400_000))]
    pub repo_interval_ms: u64,
    /// Milliseconds between two listings of a repository whose bucket sends event
    /// notifications (`weft repo create --events`): the safety net for lost events.
    #[arg(long, default_value_t = weft_repo::agent::EVENTS_SWEEP_INTERVAL.as_millis() as u64,
          value_parser = clap::value_parser!(u64).range(1..=604_800_000))]
    pub repo_events_sweep_ms: u64,
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
            let config = weft_repo::AgentConfig {
                interval: Duration::from_millis(args.repo_interval_ms),
                events_sweep: Duration::from_millis(args.repo_events_sweep_ms),
            };
            tracing::info!(?config, "repository agent started");
            Some(weft_repo::RepoAgent::start(client, config))
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
    let (served, _) = start_or_stand_by(cluster, router, mdts, address, tuning, &[]).await?;
    Ok(served)
}

/// An MDT another server holds, which this one stands by for.
struct Standby {
    dir: IndexedDir,
    opts: MdtOptions,
    view: Arc<MdtClusterView>,
}

/// Adds `mdt` to `router`, registers it with the MGS at `address` and starts its
/// background work.
async fn serve(
    cluster: &Cluster,
    router: &Router,
    mdt: &Arc<Mdt>,
    address: &str,
    failover: &[String],
) -> Result<()> {
    let id = TargetId::mdt(mdt.index());
    router.add(TypedService::new(
        id,
        mdt.uuid(),
        Arc::new(MdtHandler::new(mdt.clone())),
    ));
    super::register(cluster, id, mdt.uuid(), address, failover).await?;
    mdt.start_background();
    Ok(())
}

/// [`start`], except that with `failover` addresses an MDT another server holds is set
/// aside (returned second) instead of failing the start.
async fn start_or_stand_by(
    cluster: &Arc<Cluster>,
    router: &Router,
    mdts: &[IndexedDir],
    address: &str,
    tuning: &MdtTuning,
    failover: &[String],
) -> Result<(Vec<Arc<Mdt>>, Vec<Standby>)> {
    let mut out = Vec::new();
    let mut standby = Vec::new();
    for m in mdts {
        let id = TargetId::mdt(m.index);
        std::fs::create_dir_all(&m.dir)
            .with_context(|| format!("cannot create {}", m.dir.display()))?;
        let view = MdtClusterView::start(cluster.clone(), m.index).await;
        let opts = tuning.options(m.index, cluster.fsname());
        match Mdt::open(&m.dir, opts.clone(), view.clone()) {
            Ok(mdt) => {
                serve(cluster, router, &mdt, address, failover).await?;
                out.push(mdt);
            }
            Err(MdtError::Busy { .. }) if !failover.is_empty() => {
                tracing::info!(target = %id, dir = %m.dir.display(), "another server holds the MDT: standing by");
                standby.push(Standby {
                    dir: m.clone(),
                    opts,
                    view,
                });
            }
            Err(e) => {
                return Err(anyhow::Error::new(e))
                    .with_context(|| format!("cannot open {id} in {}", m.dir.display()));
            }
        }
    }
    Ok((out, standby))
}

/// What a standby needs to run the repository agent if it takes MDT0 over.
struct AgentPlan {
    args: RepoAgentArgs,
    mgs: String,
    route: super::Route,
}

/// Waits until the server holding the MDT of `s` is gone, then opens it (its normal open
/// path: redo log replay, orphan handling), serves and registers it from `address`, and
/// sends its heartbeats until the task is aborted; MDTs it took over are added to `taken`
/// (flushed at shutdown). Like an OSS standby it never formats (a directory without the
/// MDT's store is not the storage the server had) nor serves an MDT whose UUID the MGS
/// does not list under its index. MDT0 also brings the repository agent.
#[allow(clippy::too_many_arguments)]
async fn stand_by(
    cluster: Arc<Cluster>,
    router: Arc<Router>,
    s: Standby,
    address: String,
    failover: Vec<String>,
    metrics: Option<Arc<Metrics>>,
    taken: Arc<parking_lot::Mutex<Vec<Arc<Mdt>>>>,
    agent: AgentPlan,
) {
    let id = TargetId::mdt(s.dir.index);
    let store = s.dir.dir.join(weft_mdt::DB_FILE);
    let mut warned = false;
    let mdt = loop {
        tokio::time::sleep(super::TAKEOVER_POLL).await;
        if !store.exists() {
            if !warned {
                tracing::warn!(target = %id, dir = %s.dir.dir.display(), "no MDT there: a standby does not format; is the shared storage mounted?");
                warned = true;
            }
            continue;
        }
        let (dir, opts, view) = (s.dir.dir.clone(), s.opts.clone(), s.view.clone());
        match tokio::task::spawn_blocking(move || Mdt::open(&dir, opts, view)).await {
            Ok(Ok(mdt)) => break mdt,
            Ok(Err(MdtError::Busy { .. })) => continue,
            Ok(Err(e)) => {
                tracing::error!(target = %id, dir = %s.dir.dir.display(), error = %e, "cannot take the MDT over");
                return;
            }
            Err(e) => {
                tracing::error!(target = %id, error = %e, "opening the MDT failed");
                return;
            }
        }
    };
    if let Some(listed) = cluster.config().target(id).map(|t| t.uuid)
        && listed != mdt.uuid()
    {
        tracing::error!(target = %id, dir = %s.dir.dir.display(), %listed, found = %mdt.uuid(),
            "the directory holds another MDT than the one registered: not taking it over");
        mdt.shutdown().await;
        return;
    }
    tracing::warn!(target = %id, dir = %s.dir.dir.display(), %address, "the MDT's server is gone: taking it over");
    taken.lock().push(mdt.clone());
    let mut backoff = weft_rpc::Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
    while let Err(e) = serve(&cluster, &router, &mdt, &address, &failover).await {
        tracing::warn!(target = %id, error = format!("{e:#}"), "registering the MDT taken over failed; retrying in {:?}", backoff.peek());
        backoff.wait().await;
    }
    super::TAKEOVERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    if let Some(m) = &metrics {
        m.add_mdt(mdt.clone());
    }
    // Held for as long as the task runs; dropping it stops it.
    let _agent = match id.index {
        0 => start_repo_agent(&agent.args, &agent.mgs, cluster.fsname(), &agent.route).await,
        _ => None,
    };
    super::heartbeats(cluster, vec![(id, mdt.uuid())], address, failover, vec![]).await;
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
        .with_tls(args.tls.server()?)
        .with_evict_timeout(args.evict.timeout());
    let cluster =
        super::connect_mgs(&args.mgs, "", Duration::from_secs(args.mgs_timeout), &route).await?;
    let router = Router::new(cluster.fsname());
    let server = super::listen(&args.listen, router.clone(), &route).await?;
    let address = args
        .advertise
        .clone()
        .unwrap_or_else(|| server.local_addr().to_string());
    let (mdts, standby) = start_or_stand_by(
        &cluster,
        &router,
        &args.mdts,
        &address,
        &args.tuning,
        &args.failover,
    )
    .await?;
    let ids = mdts
        .iter()
        .map(|m| (TargetId::mdt(m.index()), m.uuid()))
        .collect();
    let heartbeats = super::spawn_heartbeats(
        cluster.clone(),
        ids,
        address.clone(),
        args.failover.clone(),
        vec![],
    );
    let (metrics, metrics_task) = match &args.metrics {
        Some(addr) => {
            let m = Metrics::mds(router.clone(), mdts.clone());
            (Some(m.clone()), Some(crate::metrics::serve(addr, m).await?))
        }
        None => (None, None),
    };
    let agent = if mdts.iter().any(|m| m.index() == 0) {
        start_repo_agent(&args.repo, &args.mgs, cluster.fsname(), &route).await
    } else {
        None
    };
    let taken = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let standbys: Vec<_> = standby
        .into_iter()
        .map(|s| {
            tokio::spawn(stand_by(
                cluster.clone(),
                router.clone(),
                s,
                address.clone(),
                args.failover.clone(),
                metrics.clone(),
                taken.clone(),
                AgentPlan {
                    args: args.repo.clone(),
                    mgs: args.mgs.clone(),
                    route: route.clone(),
                },
            ))
        })
        .collect();
    tracing::info!(fsname = cluster.fsname(), %address, mdts = mdts.len(), standby = standbys.len(), "MDS serving");
    wait_for_signal().await;
    stop_repo_agent(agent).await;
    heartbeats.abort();
    for s in &standbys {
        s.abort();
    }
    if let Some(m) = metrics_task {
        m.abort();
    }
    server.shutdown().await;
    stop(&mdts).await;
    let taken: Vec<_> = taken.lock().drain(..).collect();
    stop(&taken).await;
    Ok(())
}
