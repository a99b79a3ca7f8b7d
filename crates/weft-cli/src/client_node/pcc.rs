//! The persistent client cache verbs on a mount's control socket (`weft pcc`): adding the
//! cache to this mount, and a file's state, attach and detach. A request names a mount
//! point or a path; only the mount holding it answers.

use super::{ClientNode, CtlReply};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use weft_client::pcc::{Mode, PccConfig, Rule};
use weft_proto::mdt::Credentials;

/// A `weft pcc` request.
#[derive(Debug, Serialize, Deserialize)]
pub enum PccCtl {
    /// Adds a cache to the mount at `mountpoint`.
    Add {
        /// The mount point (canonical).
        mountpoint: PathBuf,
        /// The local directory.
        dir: PathBuf,
        /// `ro` or `rw`.
        mode: String,
        /// The rule (`size>1M,path=/data/*`).
        rule: String,
        /// Largest bytes of read-only copies (default: 90% of the directory's free space).
        capacity: Option<u64>,
    },
    /// Stops using the cache of the mount at `mountpoint`.
    Del {
        /// The mount point (canonical).
        mountpoint: PathBuf,
    },
    /// A file's state and the cache's figures.
    State {
        /// The file (canonical).
        path: PathBuf,
    },
    /// Copies a file into a read-only cache.
    Attach {
        /// The file (canonical).
        path: PathBuf,
    },
    /// Drops a file's copy (read-only) or copies it back (read-write).
    Detach {
        /// The file (canonical).
        path: PathBuf,
    },
}

/// 90% of the space available to root under `dir`.
fn default_capacity(dir: &Path) -> Result<u64, String> {
    let st = rustix::fs::statvfs(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(st.f_bavail.saturating_mul(st.f_frsize) / 10 * 9)
}

impl ClientNode {
    /// The file system path of `path` if it is in this mount.
    fn in_mount(&self, path: &Path) -> Option<String> {
        let rel = path.strip_prefix(&self.mountpoint).ok()?;
        Some(format!("/{}", rel.to_str()?))
    }

    /// Answers a `weft pcc` request (nothing if it is about another mount).
    pub(super) async fn answer_pcc(&self, op: PccCtl) -> CtlReply {
        match self.pcc(op).await {
            Ok(p) => CtlReply::Params(p),
            Err(e) => CtlReply::Error(e),
        }
    }

    async fn pcc(&self, op: PccCtl) -> Result<Vec<(String, String)>, String> {
        let mp = self.mountpoint.display().to_string();
        let (path, fid) = match &op {
            PccCtl::Add {
                mountpoint,
                dir,
                mode,
                rule,
                capacity,
            } => {
                if *mountpoint != self.mountpoint {
                    return Ok(Vec::new());
                }
                let mode: Mode = mode.parse()?;
                let rule = Rule::parse(rule)?;
                std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
                let capacity = match capacity {
                    Some(c) => *c,
                    None => default_capacity(dir)?,
                };
                let config = PccConfig {
                    dir: dir.clone(),
                    mode,
                    rule,
                    capacity,
                };
                let pcc = self
                    .client
                    .pcc_add(config)
                    .await
                    .map_err(|e| format!("{mp}: {e}"))?;
                return Ok(vec![(mp, pcc.summary())]);
            }
            PccCtl::Del { mountpoint } => {
                if *mountpoint != self.mountpoint {
                    return Ok(Vec::new());
                }
                if !self.client.pcc_del() {
                    return Err(format!("{mp}: no PCC"));
                }
                return Ok(vec![(mp, "deleted".into())]);
            }
            PccCtl::State { path } | PccCtl::Attach { path } | PccCtl::Detach { path } => {
                let Some(rel) = self.in_mount(path) else {
                    return Ok(Vec::new());
                };
                let attr = self
                    .client
                    .resolve(&rel, false, &Credentials::root())
                    .await
                    .map_err(|e| format!("{}: {e}", path.display()))?;
                (path.display().to_string(), attr.fid)
            }
        };
        let err = |e: weft_client::ClientError| format!("{path}: {e}");
        let pcc = self.client.pcc().ok_or_else(|| format!("{mp}: no PCC"))?;
        match op {
            PccCtl::Attach { .. } => self.client.pcc_attach(fid).map_err(err)?,
            PccCtl::Detach { .. } => {
                self.client.pcc_detach(fid).map_err(err)?;
            }
            _ => {}
        }
        let state = pcc.state_of(fid);
        Ok(vec![(path, format!("{state}\n{}", pcc.summary()))])
    }
}
