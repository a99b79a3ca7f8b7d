//! The server roles the `weft` binary runs, and what they share: connecting to the MGS with
//! retries, registering targets and sending heartbeats.

pub mod mds;
pub mod mgs;
pub mod oss;
pub mod up;

use anyhow::{Context, Result, bail};
use std::sync::Arc;
use std::time::{Duration, Instant};
use uuid::Uuid;
use weft_client::{Cluster, ClusterOptions};
use weft_ost::Ost;
use weft_ost::direct::CacheLimits;
use weft_proto::{TargetId, TargetKind};
use weft_rpc::{LocalServers, Router, Server, ServerOptions, Tcp, Transport};

/// How often a standby (`--failover`) tries the lock of a target another server holds:
/// the longest a failover waits on the standby after the holder died.
pub const TAKEOVER_POLL: Duration = Duration::from_millis(200);

/// Targets this process took over from another server since it started (Prometheus
/// `weft_oss_target_takeovers_total` / `weft_mds_target_takeovers_total`).
pub static TAKEOVERS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How often a target tells the MGS it is alive.
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(10);

/// How the clients of this process reach its own servers: directly, through the list of
/// local servers they share (the default), or over loopback sockets like any other.
#[derive(Debug, Clone)]
pub struct Route {
    local: Option<LocalServers>,
    key: Option<Arc<weft_rpc::ClusterKey>>,
    tls: Option<Arc<weft_rpc::Tls>>,
    evict_timeout: Option<Duration>,
}

/// The eviction flag of every server role.
#[derive(clap::Args, Debug, Clone)]
pub struct EvictArgs {
    /// Seconds a connected node may stay silent (no request, no ping; live nodes ping
    /// four times within it) before this server evicts it: its locks, open handles and
    /// grants are released for others, and the changes it cached are refused with EIO
    /// when it returns. 0: never evict.
    #[arg(long = "evict-timeout", value_name = "SECS", default_value_t = weft_rpc::server::DEFAULT_EVICT_TIMEOUT.as_secs())]
    pub evict_timeout_s: u64,
}

impl EvictArgs {
    /// The timeout, if eviction is on.
    pub fn timeout(&self) -> Option<Duration> {
        (self.evict_timeout_s > 0).then(|| Duration::from_secs(self.evict_timeout_s))
    }
}

impl Route {
    /// Direct calls to this process's servers unless `sockets` is set or
    /// `WEFT_RPC_LOCAL=0` is in the environment (to measure or debug the socket path with
    /// the same binary).
    pub fn new(sockets: bool) -> Self {
        let env_sockets = std::env::var("WEFT_RPC_LOCAL").is_ok_and(|v| v.trim() == "0");
        Self {
            local: (!sockets && !env_sockets).then(LocalServers::new),
            key: None,
            tls: None,
            evict_timeout: Some(weft_rpc::server::DEFAULT_EVICT_TIMEOUT),
        }
    }

    /// The same, with this process's servers requiring `key` of their peers and its
    /// clients proving it (calls within the process need no proof: same process, same
    /// key).
    pub fn with_key(mut self, key: Option<Arc<weft_rpc::ClusterKey>>) -> Self {
        self.key = key;
        self
    }

    /// The same, with this process's servers and clients speaking TLS over sockets (see
    /// `weft_rpc::tls`).
    pub fn with_tls(mut self, tls: Option<Arc<weft_rpc::Tls>>) -> Self {
        self.tls = tls;
        self
    }

    /// The same, with this process's servers evicting peers silent for `timeout` (see
    /// [`EvictArgs`]).
    pub fn with_evict_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.evict_timeout = timeout;
        self
    }

    /// The transport of this process's clients.
    pub fn transport(&self) -> Arc<dyn Transport> {
        Arc::new(
            Tcp::new(self.local.clone())
                .with_key(self.key.clone())
                .with_tls(self.tls.clone()),
        )
    }

    /// Options of a client of this process.
    pub fn cluster_options(&self) -> ClusterOptions {
        ClusterOptions {
            transport: self.transport(),
            ..ClusterOptions::default()
        }
    }
}

/// Connects to the MGS, retrying until `timeout` passes; then fails with a clear message.
pub async fn connect_mgs(
    mgs: &str,
    fsname: &str,
    timeout: Duration,
    route: &Route,
) -> Result<Arc<Cluster>> {
    let start = Instant::now();
    let mut backoff = weft_rpc::Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
    loop {
        match Cluster::connect(mgs, fsname, route.cluster_options()).await {
            Ok(c) => return Ok(c),
            Err(e) if start.elapsed() + backoff.peek() < timeout => {
                tracing::warn!(mgs, error = %e, "MGS not reachable yet; retrying in {:?}", backoff.peek());
                backoff.wait().await;
            }
            Err(e) => bail!(
                "MGS at {mgs} unreachable after {:.0?}: {e}",
                start.elapsed()
            ),
        }
    }
}

/// Binds the listen address, with the message an operator needs when the port is taken.
/// Clients in this process that share `route` (the mount and the other roles of `weft up`,
/// an MDT's connections to OSTs of the same server) call its targets directly.
pub async fn listen(addr: &str, router: Arc<Router>, route: &Route) -> Result<Server> {
    let opts = ServerOptions {
        local_servers: route.local.clone(),
        key: route.key.clone(),
        tls: route.tls.clone(),
        evict_timeout: route.evict_timeout,
        ..ServerOptions::default()
    };
    Server::bind(addr, router, opts)
        .await
        .with_context(|| format!("cannot listen on {addr}"))
}

/// Registers a target with the MGS as served at `address`, and by the servers at
/// `failover` should this one die.
pub async fn register(
    cluster: &Cluster,
    id: TargetId,
    uuid: Uuid,
    address: &str,
    failover: &[String],
) -> Result<()> {
    cluster
        .mgs()
        .register(id, uuid, address.to_string(), failover.to_vec(), false)
        .await
        .with_context(|| format!("registering {id} with the MGS"))?;
    tracing::info!(target = %id, %uuid, address, ?failover, "registered with the MGS");
    Ok(())
}

/// Makes the client classes among `params` (`nodemap.*`) those this process's servers
/// apply, if they changed; malformed entries are logged and skipped.
pub fn install_nodemap(params: &std::collections::BTreeMap<String, String>) {
    let (map, errors) = weft_rpc::nodemap::NodeMap::from_params(
        params.iter().map(|(k, v)| (k.as_str(), v.as_str())),
    );
    if *weft_rpc::nodemap::current() == map {
        return;
    }
    for e in errors {
        tracing::warn!(error = %e, "client class parameter ignored");
    }
    tracing::info!(classes = map.classes().len(), "client classes applied");
    weft_rpc::nodemap::install(map);
}

/// Sends heartbeats for `targets` until the task is dropped; re-registers a target the MGS
/// has forgotten (a reformatted MGS keeps working with running targets). Also applies the
/// MGS's stored server parameters (`set_param -P`) now and whenever they change.
pub fn spawn_heartbeats(
    cluster: Arc<Cluster>,
    targets: Vec<(TargetId, Uuid)>,
    address: String,
    failover: Vec<String>,
    osts: Vec<Arc<Ost>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(heartbeats(cluster, targets, address, failover, osts))
}

/// The loop of [`spawn_heartbeats`], for a task that has more to do first (a standby OSS
/// taking a target over).
pub async fn heartbeats(
    cluster: Arc<Cluster>,
    targets: Vec<(TargetId, Uuid)>,
    address: String,
    failover: Vec<String>,
    osts: Vec<Arc<Ost>>,
) {
    let mut tick = tokio::time::interval(HEARTBEAT_INTERVAL);
    tick.tick().await;
    let mut changes = cluster.watch_config();
    apply_server_params(&cluster, &targets, &osts);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            changed = changes.changed() => {
                if changed.is_ok() {
                    apply_server_params(&cluster, &targets, &osts);
                }
                continue;
            }
        }
        for (id, uuid) in &targets {
            if let Err(e) = cluster.mgs().heartbeat(*id, *uuid).await {
                if e.errno() == weft_proto::Errno::NoEnt {
                    let _ = register(&cluster, *id, *uuid, &address, &failover).await;
                } else {
                    tracing::warn!(target = %id, error = %e, "heartbeat to the MGS failed");
                }
            }
        }
    }
}

/// The server parameters that can be set at run time (`set_param -P`), by their last name.
const SERVER_PARAMS: [&str; 4] = [
    "job_cleanup_interval",
    CacheLimits::NAMES[0],
    CacheLimits::NAMES[1],
    "compress",
];

/// Applies the MGS's stored settings that name a parameter of one of `targets`
/// (`mdt.FS-MDT0000.job_cleanup_interval`, patterns like `obdfilter.*.readcache_max_io_mb`).
/// A value out of range is logged and ignored.
fn apply_server_params(cluster: &Cluster, targets: &[(TargetId, Uuid)], osts: &[Arc<Ost>]) {
    install_nodemap(&cluster.config().params);
    let fs = cluster.fsname();
    for (name, value) in &cluster.config().params {
        let Some(last) = SERVER_PARAMS
            .iter()
            .find(|p| name.ends_with(&format!(".{p}")))
        else {
            continue;
        };
        let mine: Vec<TargetId> = targets
            .iter()
            .map(|(id, _)| *id)
            .filter(|id| {
                let prefix = match id.kind {
                    TargetKind::Mdt => "mdt",
                    TargetKind::Ost => "obdfilter",
                    TargetKind::Mgs => return false,
                };
                weft_client::params::glob_match(name, &format!("{prefix}.{fs}-{id}.{last}"))
            })
            .collect();
        if mine.is_empty() {
            continue;
        }
        let parsed = value.trim().parse::<u64>();
        let applied = match *last {
            "job_cleanup_interval" => match parsed {
                Ok(secs) if (1..=7 * 86_400).contains(&secs) => {
                    weft_rpc::stats::set_job_cleanup_interval(secs);
                    Ok(())
                }
                _ => Err("not 1..604800 seconds".to_string()),
            },
            "compress" => match value.trim() {
                "lz4" | "1" => Ok(true),
                "none" | "off" | "0" => Ok(false),
                _ => Err("not lz4 or none".to_string()),
            }
            .and_then(|on| {
                osts.iter()
                    .filter(|o| mine.contains(&TargetId::ost(o.index())))
                    .try_for_each(|o| o.set_compress(on))
            }),
            cache_limit => parsed.map_err(|e| e.to_string()).and_then(|mb| {
                osts.iter()
                    .filter(|o| mine.contains(&TargetId::ost(o.index())))
                    .try_for_each(|o| o.cache_limits().set_named(cache_limit, mb))
            }),
        };
        match applied {
            Ok(()) => tracing::info!(%name, %value, "applied a stored parameter"),
            Err(why) => tracing::warn!(%name, %value, %why, "ignoring a stored parameter"),
        }
    }
}
