//! `weft oss`: an object storage server hosting one or more OSTs.

use crate::IndexedDir;
use crate::metrics::Metrics;
use crate::shutdown::wait_for_signal;
use anyhow::{Context, Result};
use clap::Args;
use std::sync::Arc;
use std::time::Duration;
use weft_client::Cluster;
use weft_ost::{Ost, OstHandler, OstOptions};
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
}

/// Opens each OST, adds it to `router` and registers it with the MGS at `address`.
pub async fn start(
    cluster: &Cluster,
    router: &Router,
    osts: &[IndexedDir],
    address: &str,
) -> Result<Vec<Arc<Ost>>> {
    let mut out = Vec::new();
    for o in osts {
        let id = TargetId::ost(o.index);
        std::fs::create_dir_all(&o.dir)
            .with_context(|| format!("cannot create {}", o.dir.display()))?;
        let opts = OstOptions {
            index: o.index,
            fsname: cluster.fsname().to_string(),
        };
        let ost = Ost::open(&o.dir, opts)
            .with_context(|| format!("cannot open {id} in {}", o.dir.display()))?;
        router.add(TypedService::new(
            id,
            ost.uuid(),
            Arc::new(OstHandler::new(ost.clone())),
        ));
        super::register(cluster, id, ost.uuid(), address).await?;
        out.push(ost);
    }
    Ok(out)
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
    let osts = start(&cluster, &router, &args.osts, &address).await?;
    let ids = osts
        .iter()
        .map(|o| (TargetId::ost(o.index()), o.uuid()))
        .collect();
    let heartbeats = super::spawn_heartbeats(cluster.clone(), ids, address.clone(), osts.clone());
    let metrics = match &args.metrics {
        Some(addr) => Some(
            crate::metrics::serve(addr, Metrics::new(router.clone(), vec![], osts.clone())).await?,
        ),
        None => None,
    };
    tracing::info!(fsname = cluster.fsname(), %address, osts = osts.len(), "OSS serving");
    wait_for_signal().await;
    heartbeats.abort();
    if let Some(m) = metrics {
        m.abort();
    }
    server.shutdown().await;
    Ok(())
}
