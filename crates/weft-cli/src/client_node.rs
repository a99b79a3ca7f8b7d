//! What a mounted client exposes on its node, as Lustre's client does under `/proc`:
//! its parameters and statistics through a control socket (so `weft get_param` and
//! `weft set_param` without `-P` reach every mount on the machine), and with
//! `--metrics HOST:PORT` the same figures for Prometheus.
//!
//! Names (INSTANCE is the file system name and a short client id, e.g. `weft-1a2b3c4d`):
//! - `osc.INSTANCE.max_rpcs_in_flight`, `osc.INSTANCE.max_pages_per_rpc`,
//!   `osc.INSTANCE.max_dirty_mb`, `llite.INSTANCE.max_read_ahead_mb`,
//!   `llite.INSTANCE.max_read_ahead_per_file_mb`, `llite.INSTANCE.max_cached_mb`: the
//!   knobs, settable;
//! - `mdc.FS-MDT0000-mdc-INSTANCE.stats`, `osc.FS-OST0000-osc-INSTANCE.stats`: requests
//!   this client sent to each target, with `req_waittime` (time to the reply);
//! - `llite.INSTANCE.stats`: cached and dirty bytes, the mount point;
//! - `llite.INSTANCE.statahead_stats`: lookups answered by statahead, directories and
//!   entries it read (`llite.INSTANCE.statahead_max` is the knob);
//! - `llite.INSTANCE.fuse_transport`: how the kernel's requests reach the mount, `uring`
//!   (FUSE over io_uring) or `dev_fuse`, and `llite.INSTANCE.fuse_ring_requests`, the
//!   requests that came through the rings (both read-only).
//!
//! The socket is `/run/weft/client-PID.sock` (`WEFT_RUN_DIR` overrides the directory); one
//! JSON request per connection, one JSON answer.

mod figures;
mod pcc;

use anyhow::{Context, Result, bail};
use figures::ClientFigures;
pub use pcc::PccCtl;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use weft_client::Client;
use weft_client::params::glob_match;
use weft_proto::TargetId;
use weft_proto::handshake::{OpStats, ServiceStats};

/// Longest request a control connection may send.
const MAX_REQUEST: u64 = 64 << 10;
/// How long a control peer may take.
const TIMEOUT: Duration = Duration::from_secs(5);

/// A mounted client and where it is mounted.
pub struct ClientNode {
    client: Arc<Client>,
    /// `HOST:PORT:/FSNAME` as mounted.
    source: String,
    mountpoint: PathBuf,
    /// The FUSE session's transport, once mounted.
    transport: std::sync::OnceLock<weft_fuse::TransportStats>,
}

/// A request on the control socket, for the mounts of the MGS at `mgs` (every mount when
/// `None`).
#[derive(Debug, Serialize, Deserialize)]
pub struct CtlRequest {
    /// Only clients of this MGS (`HOST:PORT`) answer.
    pub mgs: Option<String>,
    /// What to do.
    pub op: CtlOp,
}

/// What a control request asks.
#[derive(Debug, Serialize, Deserialize)]
pub enum CtlOp {
    /// Every parameter matching one of the patterns.
    Get(Vec<String>),
    /// Sets the knobs matching a pattern.
    Set(String, String),
    /// A persistent client cache verb (`weft pcc`).
    Pcc(PccCtl),
}

/// The answer.
#[derive(Debug, Serialize, Deserialize)]
pub enum CtlReply {
    /// Names and values.
    Params(Vec<(String, String)>),
    /// A refused request.
    Error(String),
}

impl ClientNode {
    /// The node view of `client`, mounted from `source` at `mountpoint`.
    pub fn new(client: Arc<Client>, source: &str, mountpoint: &Path) -> Arc<Self> {
        Arc::new(Self {
            client,
            source: source.to_string(),
            mountpoint: std::fs::canonicalize(mountpoint)
                .unwrap_or_else(|_| mountpoint.to_path_buf()),
            transport: std::sync::OnceLock::new(),
        })
    }

    /// Records the mount's FUSE transport (`llite.INSTANCE.fuse_transport`).
    pub fn set_transport(&self, t: weft_fuse::TransportStats) {
        let _ = self.transport.set(t);
    }

    fn instance(&self) -> &str {
        self.client.params().instance()
    }

    /// The client's cache and statahead figures now.
    fn figures(&self) -> ClientFigures {
        ClientFigures {
            cached_bytes: self.client.cached_bytes(),
            dirty_bytes: self.client.dirty_bytes(),
            statahead: self.client.statahead_stats(),
        }
    }

    /// Per-target request statistics, labelled with the target.
    fn target_stats(&self) -> Vec<ServiceStats> {
        let (mdts, osts) = self.client.cluster().open_targets();
        let stat = |target, ops| ServiceStats {
            target: Some(target),
            ops,
            counters: Vec::new(),
            jobs: Vec::new(),
        };
        mdts.iter()
            .map(|m| stat(TargetId::mdt(m.index()), m.stats()))
            .chain(
                osts.iter()
                    .map(|o| stat(TargetId::ost(o.index()), o.stats())),
            )
            .collect()
    }

    /// Every parameter with its value.
    pub fn params(&self) -> Vec<(String, String)> {
        let inst = self.instance().to_string();
        let fs = self.client.cluster().fsname().to_string();
        let mut out: Vec<(String, String)> = self
            .client
            .params()
            .list("*")
            .into_iter()
            .map(|(n, v)| (n, v.to_string()))
            .collect();
        for s in self.target_stats() {
            let Some(t) = s.target else { continue };
            let name = match t.kind {
                weft_proto::TargetKind::Mdt => format!("mdc.{fs}-{t}-mdc-{inst}.stats"),
                _ => format!("osc.{fs}-{t}-osc-{inst}.stats"),
            };
            out.push((name, render_client_stats(&s.ops)));
        }
        let figures = self.figures();
        out.push((
            format!("llite.{inst}.stats"),
            figures::llite_text(&self.mountpoint, &figures),
        ));
        out.push((
            format!("llite.{inst}.statahead_stats"),
            figures::statahead_text(&figures),
        ));
        if let Some(t) = self.transport.get() {
            out.push((
                format!("llite.{inst}.fuse_transport"),
                t.transport().as_str().to_string(),
            ));
            out.push((
                format!("llite.{inst}.fuse_ring_requests"),
                t.ring_requests().to_string(),
            ));
        }
        if let Some(pcc) = self.client.pcc() {
            out.push((
                format!("llite.{inst}.pcc_stats"),
                format!("\n{}", pcc.summary()),
            ));
        }
        out.sort();
        out
    }

    async fn answer(&self, req: CtlRequest) -> CtlReply {
        if let Some(mgs) = &req.mgs
            && !self.source.starts_with(&format!("{mgs}:/"))
        {
            return CtlReply::Params(Vec::new());
        }
        match req.op {
            CtlOp::Get(patterns) => CtlReply::Params(
                self.params()
                    .into_iter()
                    .filter(|(n, _)| patterns.iter().any(|p| glob_match(p, n)))
                    .collect(),
            ),
            CtlOp::Set(pattern, value) => match self.client.params().set(&pattern, &value) {
                Ok(names) => {
                    CtlReply::Params(names.into_iter().map(|n| (n, value.clone())).collect())
                }
                // A pattern naming no knob here is not an error: other mounts may have it.
                Err(weft_client::params::ParamError::Unknown(_)) => CtlReply::Params(Vec::new()),
                Err(e) => CtlReply::Error(e.to_string()),
            },
            CtlOp::Pcc(op) => self.answer_pcc(op).await,
        }
    }
}

impl crate::metrics::Render for ClientNode {
    fn render(&self) -> String {
        let families = figures::families(
            self.instance(),
            &self.target_stats(),
            &self.client.params().list("*"),
            &self.figures(),
        );
        crate::metrics::encode(families)
    }
}

/// Lustre's client `stats` layout: one line per operation with samples, `[usecs]` wait
/// times (min, max, sum) and bulk bytes, plus `req_waittime` over all of them.
fn render_client_stats(ops: &[OpStats]) -> String {
    let mut out = String::from("\n");
    let (mut n, mut sum) = (0u64, 0u64);
    for op in ops {
        let min = op
            .buckets
            .iter()
            .position(|&c| c > 0)
            .map_or(0, |i| if i == 0 { 0 } else { 1u64 << (i - 1) });
        let max = op
            .buckets
            .iter()
            .rposition(|&c| c > 0)
            .map_or(0, |i| 1u64 << i);
        let _ = writeln!(
            out,
            "{:<24} {} samples [usecs] {} {} {} errors {} bulk_bytes {}",
            op.name, op.count, min, max, op.sum_us, op.errors, op.bulk_bytes
        );
        n += op.count;
        sum += op.sum_us;
    }
    let _ = writeln!(out, "{:<24} {} samples [usecs] {}", "req_waittime", n, sum);
    out
}

/// The directory of client control sockets.
pub fn run_dir() -> PathBuf {
    std::env::var_os("WEFT_RUN_DIR").map_or_else(|| PathBuf::from("/run/weft"), PathBuf::from)
}

/// A served control socket; the file is removed when this is dropped.
pub struct CtlSocket {
    path: PathBuf,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for CtlSocket {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Serves the control socket of `node` until the returned guard is dropped.
pub fn serve_ctl(node: Arc<ClientNode>) -> Result<CtlSocket> {
    let dir = run_dir();
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(format!("client-{}.sock", std::process::id()));
    // A socket left by a process that had this pid before is stale.
    let _ = std::fs::remove_file(&path);
    let listener =
        UnixListener::bind(&path).with_context(|| format!("binding {}", path.display()))?;
    // Only root may change a node's client settings (the socket is the interface).
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            let node = node.clone();
            tokio::spawn(async move {
                if let Err(e) = tokio::time::timeout(TIMEOUT, serve_one(stream, &node)).await {
                    tracing::debug!(error = %e, "control connection timed out");
                }
            });
        }
    });
    Ok(CtlSocket { path, task })
}

async fn serve_one(stream: UnixStream, node: &ClientNode) -> std::io::Result<()> {
    let (r, mut w) = stream.into_split();
    let mut line = String::new();
    BufReader::new(r.take(MAX_REQUEST))
        .read_line(&mut line)
        .await?;
    let reply = match serde_json::from_str::<CtlRequest>(&line) {
        Ok(req) => node.answer(req).await,
        Err(e) => CtlReply::Error(format!("bad request: {e}")),
    };
    let mut out = serde_json::to_vec(&reply).map_err(std::io::Error::other)?;
    out.push(b'\n');
    w.write_all(&out).await?;
    w.shutdown().await
}

/// Sends `req` to every mounted client on this node; returns the answers of those that
/// answered (a socket whose process is gone is skipped).
pub async fn ask_all(req: &CtlRequest) -> Result<Vec<(String, String)>> {
    ask_sockets(req, false).await
}

/// [`ask_all`], skipping mounts that do not know the request (an older `weft` there).
pub async fn ask_all_knowing(req: &CtlRequest) -> Result<Vec<(String, String)>> {
    ask_sockets(req, true).await
}

async fn ask_sockets(req: &CtlRequest, skip_unknown: bool) -> Result<Vec<(String, String)>> {
    let dir = run_dir();
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(Vec::new());
    };
    let body = serde_json::to_string(req)? + "\n";
    let mut out = Vec::new();
    for e in entries.flatten() {
        let path = e.path();
        if path.extension().is_none_or(|x| x != "sock") {
            continue;
        }
        let answer = tokio::time::timeout(TIMEOUT, async {
            let mut s = UnixStream::connect(&path).await?;
            s.write_all(body.as_bytes()).await?;
            let mut buf = Vec::new();
            s.take(64 << 20).read_to_end(&mut buf).await?;
            Ok::<_, std::io::Error>(buf)
        })
        .await;
        let Ok(Ok(buf)) = answer else { continue };
        match serde_json::from_slice::<CtlReply>(&buf) {
            Ok(CtlReply::Params(p)) => out.extend(p),
            Ok(CtlReply::Error(e)) if skip_unknown && e.starts_with("bad request:") => {}
            Ok(CtlReply::Error(e)) => bail!("{}: {e}", path.display()),
            Err(e) => bail!("{}: bad answer: {e}", path.display()),
        }
    }
    Ok(out)
}
