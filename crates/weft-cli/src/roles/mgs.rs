//! `weft mgs`: the management service as its own process.

use crate::metrics::Metrics;
use crate::shutdown::wait_for_signal;
use anyhow::{Context, Result};
use clap::Args;
use std::path::PathBuf;
use std::sync::Arc;
use weft_mgs::{Mgs, MgsHandler};
use weft_proto::TargetId;
use weft_rpc::{Router, TypedService};

/// Flags of `weft mgs`.
#[derive(Args, Debug)]
pub struct MgsArgs {
    /// Directory holding the MGS's configuration (created if empty).
    #[arg(long)]
    pub data: PathBuf,
    /// Address to listen on.
    #[arg(long, value_parser = crate::parse_addr)]
    pub listen: String,
    /// File system name; needed the first time, checked afterwards.
    #[arg(long)]
    pub fsname: Option<String>,
    /// Serve Prometheus metrics at http://HOST:PORT/metrics.
    #[arg(long, value_parser = crate::parse_addr)]
    pub metrics: Option<String>,
    #[command(flatten)]
    pub key: crate::key::KeyArgs,
    #[command(flatten)]
    pub tls: crate::tls::TlsArgs,
    #[command(flatten)]
    pub evict: super::EvictArgs,
}

/// Opens the MGS and adds its service to `router`.
pub async fn start(
    data: &std::path::Path,
    fsname: Option<&str>,
    router: &Router,
) -> Result<Arc<Mgs>> {
    std::fs::create_dir_all(data).with_context(|| format!("cannot create {}", data.display()))?;
    let mgs = Mgs::open(data, fsname)
        .with_context(|| format!("cannot open the MGS in {}", data.display()))?;
    router.set_fsname(mgs.fsname());
    router.add(TypedService::new(
        TargetId::MGS,
        mgs.uuid(),
        Arc::new(MgsHandler::new(mgs.clone())),
    ));
    Ok(mgs)
}

/// Wakes the client classes' task at every configuration change.
struct Wake(Arc<tokio::sync::Notify>);

impl weft_mgs::ConfigSubscriber for Wake {
    fn config_changed(&self, _version: u64) -> bool {
        self.0.notify_one();
        true
    }
}

/// Applies the MGS's client classes (`nodemap.*` parameters) to this process's server now
/// and after every configuration change.
fn spawn_nodemap(mgs: Arc<Mgs>) -> tokio::task::JoinHandle<()> {
    let wake = Arc::new(tokio::sync::Notify::new());
    // Connection ids count up from 1: this one is never a peer's.
    mgs.subscribe(u64::MAX, Arc::new(Wake(wake.clone())));
    tokio::spawn(async move {
        loop {
            super::install_nodemap(&mgs.config().params);
            wake.notified().await;
        }
    })
}

/// Runs until SIGINT/SIGTERM.
pub async fn run(args: MgsArgs) -> Result<()> {
    let router = Router::new("");
    let mgs = start(
        &args.data,
        Some(args.fsname.as_deref().unwrap_or("weft")),
        &router,
    )
    .await?;
    let server = super::listen(
        &args.listen,
        router.clone(),
        &super::Route::new(false)
            .with_key(args.key.server_key()?)
            .with_tls(args.tls.server()?)
            .with_evict_timeout(args.evict.timeout()),
    )
    .await?;
    let metrics = match &args.metrics {
        Some(addr) => Some(crate::metrics::serve(addr, Metrics::mgs(router, mgs.clone())).await?),
        None => None,
    };
    let classes = spawn_nodemap(mgs.clone());
    tracing::info!(fsname = mgs.fsname(), address = %server.local_addr(), "MGS serving");
    wait_for_signal().await;
    classes.abort();
    if let Some(m) = metrics {
        m.abort();
    }
    server.shutdown().await;
    Ok(())
}
