//! Administration verbs with Lustre's spelling (`lfs`/`lctl`): pools, `df`, `get_param`
//! and `set_param -P`, `top`, and on paths (inside a mount or `HOST:PORT:/FSNAME/PATH`,
//! see [`fspath`]) `setstripe`, `getstripe`, `find`, `migrate`, `mkdir -i` and `getdirstripe`;
//! data repositories (`repo`, see [`repo`]) and Lustre's HSM verbs (`hsm_*`, see [`hsm`]).
//! Server-wide verbs speak to the servers directly (`--mgs HOST:PORT`, or
//! `HOST:PORT:/FSNAME`).

pub mod df;
pub mod dirstripe;
pub mod find;
pub mod fsck;
pub mod fspath;
pub mod hsm;
pub mod migrate;
pub mod nodemap;
pub mod param;
pub mod pcc;
pub mod pool;
pub mod repo;
pub mod stripe;
pub mod top;

use anyhow::{Context, Result, bail};
use std::sync::Arc;
use weft_client::Cluster;

/// The MGS used when neither `--mgs` nor `WEFT_MGS` says otherwise (`weft up`'s default).
pub const DEFAULT_MGS: &str = "127.0.0.1:9400";

/// Splits `HOST:PORT:/FSNAME` into the MGS address and the file system name.
pub fn parse_fs_spec(spec: &str) -> Result<(String, String)> {
    let (addr, fsname) = spec
        .rsplit_once(":/")
        .with_context(|| format!("'{spec}' is not HOST:PORT:/FSNAME"))?;
    crate::parse_addr(addr).map_err(anyhow::Error::msg)?;
    if fsname.is_empty() || fsname.contains('/') {
        bail!("'{spec}' has no valid file system name after ':/'");
    }
    Ok((addr.to_string(), fsname.to_string()))
}

/// Connects to the MGS at `addr` for file system `fsname` (empty: whichever it serves).
pub async fn connect(addr: &str, fsname: &str) -> Result<Arc<Cluster>> {
    Cluster::connect(addr, fsname, crate::key::cluster_options()?)
        .await
        .with_context(|| format!("cannot reach the MGS at {addr}"))
}

/// The MGS address from `--mgs`, else `WEFT_MGS`, else [`DEFAULT_MGS`].
pub fn mgs_address(flag: Option<&str>) -> String {
    flag.map(str::to_string)
        .or_else(|| std::env::var("WEFT_MGS").ok())
        .unwrap_or_else(|| DEFAULT_MGS.to_string())
}
