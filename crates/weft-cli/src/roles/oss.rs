//! `weft oss`: an object storage server hosting one or more OSTs.
//!
//! With `--failover`, an OSS is also a standby: an OST whose directory (shared storage)
//! another server holds is not refused but waited for. Only one process at a time holds
//! an OST directory (its exclusive `flock`, which the kernel drops when the holder dies,
//! even by SIGKILL), so the standby opens the OST, runs its normal open path and registers
//! it from its own address only once the server that had it is gone; the MGS moves the
//! target and announces it, and clients, which also try a target's failover addresses
//! when its server stops answering, follow.

use crate::IndexedDir;
use crate::metrics::Metrics;
use crate::shutdown::wait_for_signal;
use anyhow::{Context, Result};
use clap::Args;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use weft_client::Cluster;
use weft_ost::{DataMover, Ost, OstError, OstHandler, OstOptions};
use weft_proto::TargetId;
use weft_rpc::{Router, TypedService};

/// Flags of `weft oss`.
#[derive(Args, Debug)]
pub struct OssArgs {
    /// Address of the MGS.
    #[arg(long, value_parser = crate::parse_addr)]
    pub mgs: String,
    /// Address to listen on.
    #[arg(long, value_parser = crate::parse_addr)]
    pub listen: String,
    /// Address clients should use, when it differs from --listen (e.g. listening on 0.0.0.0).
    #[arg(long, value_parser = crate::parse_addr)]
    pub advertise: Option<String>,
    /// An OST to serve, as INDEX=DIR (repeatable).
    #[arg(long = "ost", value_parser = crate::parse_indexed_dir, required = true)]
    pub osts: Vec<IndexedDir>,
    /// Address of another OSS that may serve these OSTs (from the same, shared directories)
    /// when this one dies (repeatable). Registered with the MGS, so clients try it; and
    /// with it, an OST directory another server holds is waited for instead of refused
    /// (this process is that server's standby).
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
    /// Do not copy HSM restores of data repositories into this server's OSTs (the MDS
    /// copies them itself then, through this server). By default the OSS does, with the
    /// store credentials of its own environment, so restored data does not cross the
    /// network twice.
    #[arg(long)]
    pub no_data_mover: bool,
}

/// The data mover an OSS serves restores with: `weft-repo`'s, in its OSS role, over
/// `cluster` (the process's, whose own OSTs it writes in-process).
pub fn data_mover(cluster: Arc<Cluster>) -> Arc<dyn DataMover> {
    Arc::new(OssMover(weft_repo::Mover::for_oss(cluster)))
}

/// [`weft_repo::Mover`] as the OST service's [`DataMover`].
struct OssMover(Arc<weft_repo::Mover>);

impl DataMover for OssMover {
    fn restore_chunk(
        &self,
        chunk: weft_proto::hsm::RestoreChunk,
        osts: Vec<u32>,
    ) -> weft_rpc::service::BoxFuture<'_, Result<u64, weft_proto::WireError>> {
        Box::pin(async move { self.0.restore_part(chunk, &osts).await })
    }
}

/// Opens OST `o` of `fsname` (blocking): creates its directory, then formats or recovers
/// it. [`OstError::Busy`] when another process holds it.
fn open(fsname: &str, o: &IndexedDir) -> Result<Arc<Ost>, OstError> {
    std::fs::create_dir_all(&o.dir).map_err(|e| OstError::Io {
        path: o.dir.clone(),
        source: e,
    })?;
    let opts = OstOptions {
        index: o.index,
        fsname: fsname.to_string(),
    };
    Ost::open(&o.dir, opts)
}

/// Adds `ost` to `router` (its restores served by `mover`, if any), then registers it with
/// the MGS at `address` (served before it is announced, so a client sent there by the
/// announcement finds it).
async fn serve(
    cluster: &Cluster,
    router: &Router,
    ost: &Arc<Ost>,
    mover: Option<&Arc<dyn DataMover>>,
    address: &str,
    failover: &[String],
) -> Result<()> {
    let id = TargetId::ost(ost.index());
    let mut handler = OstHandler::new(ost.clone());
    if let Some(m) = mover {
        handler = handler.with_mover(m.clone());
    }
    router.add(TypedService::new(id, ost.uuid(), Arc::new(handler)));
    super::register(cluster, id, ost.uuid(), address, failover).await
}

/// Opens each OST, adds it to `router` (restores served by `mover`) and registers it with
/// the MGS at `address`.
pub async fn start(
    cluster: &Cluster,
    router: &Router,
    osts: &[IndexedDir],
    mover: Option<&Arc<dyn DataMover>>,
    address: &str,
) -> Result<Vec<Arc<Ost>>> {
    let (served, _) = start_or_stand_by(cluster, router, osts, mover, address, &[]).await?;
    Ok(served)
}

/// [`start`], except that with `failover` addresses an OST another server holds is set
/// aside (returned second) instead of failing the start.
async fn start_or_stand_by(
    cluster: &Cluster,
    router: &Router,
    osts: &[IndexedDir],
    mover: Option<&Arc<dyn DataMover>>,
    address: &str,
    failover: &[String],
) -> Result<(Vec<Arc<Ost>>, Vec<IndexedDir>)> {
    let mut served = Vec::new();
    let mut standby = Vec::new();
    for o in osts {
        let id = TargetId::ost(o.index);
        match open(cluster.fsname(), o) {
            Ok(ost) => {
                serve(cluster, router, &ost, mover, address, failover).await?;
                served.push(ost);
            }
            Err(OstError::Busy(_)) if !failover.is_empty() => {
                tracing::info!(target = %id, dir = %o.dir.display(), "another server holds the OST: standing by");
                standby.push(o.clone());
            }
            Err(e) => {
                return Err(anyhow::Error::new(e))
                    .with_context(|| format!("cannot open {id} in {}", o.dir.display()));
            }
        }
    }
    Ok((served, standby))
}

/// Waits until the server holding OST `o` is gone, then opens the OST (its normal open
/// path: identity check, data version reservation), serves and registers it from
/// `address`, and sends its heartbeats until the task is aborted. An error other than the
/// directory being held ends the wait, logged: the OST stays with whoever can open it.
///
/// A standby never formats: a directory without an OST identity is not the shared storage
/// the server had (not mounted here?), so it is waited on, not made into a new, empty OST
/// that clients would be sent to. For the same reason an OST whose UUID is not the one the
/// MGS lists under its index is closed again and not served.
async fn stand_by(
    cluster: Arc<Cluster>,
    router: Arc<Router>,
    mover: Option<Arc<dyn DataMover>>,
    o: IndexedDir,
    address: String,
    failover: Vec<String>,
    metrics: Option<Arc<Metrics>>,
) {
    let id = TargetId::ost(o.index);
    let identity = o.dir.join(weft_ost::IDENTITY_FILE);
    let mut warned = false;
    let ost = loop {
        tokio::time::sleep(super::TAKEOVER_POLL).await;
        if !identity.exists() {
            if !warned {
                tracing::warn!(target = %id, dir = %o.dir.display(), "no OST there: a standby does not format; is the shared storage mounted?");
                warned = true;
            }
            continue;
        }
        let (fsname, dir) = (cluster.fsname().to_string(), o.clone());
        match tokio::task::spawn_blocking(move || open(&fsname, &dir)).await {
            Ok(Ok(ost)) => break ost,
            Ok(Err(OstError::Busy(_))) => continue,
            Ok(Err(e)) => {
                tracing::error!(target = %id, dir = %o.dir.display(), error = %e, "cannot take the OST over");
                return;
            }
            Err(e) => {
                tracing::error!(target = %id, error = %e, "opening the OST failed");
                return;
            }
        }
    };
    if let Some(listed) = cluster.config().target(id).map(|t| t.uuid)
        && listed != ost.uuid()
    {
        tracing::error!(target = %id, dir = %o.dir.display(), %listed, found = %ost.uuid(),
            "the directory holds another OST than the one registered: not taking it over");
        return;
    }
    tracing::warn!(target = %id, dir = %o.dir.display(), %address, "the OST's server is gone: taking it over");
    // The MGS may be restarting too: the OST is ours now, so keep trying.
    let mut backoff = weft_rpc::Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
    while let Err(e) = serve(&cluster, &router, &ost, mover.as_ref(), &address, &failover).await {
        tracing::warn!(target = %id, error = format!("{e:#}"), "registering the OST taken over failed; retrying in {:?}", backoff.peek());
        backoff.wait().await;
    }
    super::TAKEOVERS.fetch_add(1, Ordering::Relaxed);
    if let Some(m) = &metrics {
        m.add_ost(ost.clone());
    }
    super::heartbeats(
        cluster,
        vec![(id, ost.uuid())],
        address,
        failover,
        vec![ost],
    )
    .await;
}

/// Runs until SIGINT/SIGTERM.
pub async fn run(args: OssArgs) -> Result<()> {
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
    let mover = (!args.no_data_mover).then(|| data_mover(cluster.clone()));
    let (osts, standby) = start_or_stand_by(
        &cluster,
        &router,
        &args.osts,
        mover.as_ref(),
        &address,
        &args.failover,
    )
    .await?;
    let ids = osts
        .iter()
        .map(|o| (TargetId::ost(o.index()), o.uuid()))
        .collect();
    let heartbeats = super::spawn_heartbeats(
        cluster.clone(),
        ids,
        address.clone(),
        args.failover.clone(),
        osts.clone(),
    );
    let (metrics, metrics_task) = match &args.metrics {
        Some(addr) => {
            let m = Metrics::oss(router.clone(), osts.clone());
            (Some(m.clone()), Some(crate::metrics::serve(addr, m).await?))
        }
        None => (None, None),
    };
    let standbys: Vec<_> = standby
        .into_iter()
        .map(|o| {
            tokio::spawn(stand_by(
                cluster.clone(),
                router.clone(),
                mover.clone(),
                o,
                address.clone(),
                args.failover.clone(),
                metrics.clone(),
            ))
        })
        .collect();
    tracing::info!(fsname = cluster.fsname(), %address, osts = osts.len(), standby = standbys.len(), "OSS serving");
    wait_for_signal().await;
    heartbeats.abort();
    for s in &standbys {
        s.abort();
    }
    if let Some(m) = metrics_task {
        m.abort();
    }
    server.shutdown().await;
    Ok(())
}
