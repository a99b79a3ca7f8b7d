//! Multi-process test harness: starts `weft mgs`, `weft mds` and `weft oss` as separate OS
//! processes on 127.0.0.1, waits until they serve, and kills or restarts them on demand.
//!
//! Integration tests of the crate that builds the `weft` binary pass its path
//! (`env!("CARGO_BIN_EXE_weft")`); everything else here is independent of the binary.
//!
//! [`s3`] starts real S3-compatible servers (s3s-fs, moto) for tests of data repositories;
//! [`lab`] makes several hosts out of network namespaces and runs a cluster across them.

pub mod azurite;
mod data;
pub mod lab;
#[cfg(test)]
mod module_cycles;
mod pki;
mod process;
pub mod s3;
pub mod s3_faults;
#[cfg(test)]
mod source_limits;
#[cfg(test)]
mod source_tree;
mod wait;

pub use azurite::AzureServer;
pub use data::pattern;
pub use pki::TestPki;
pub use process::{ServerProcess, free_port};
pub use s3::{S3Kind, S3Server};
pub use wait::{
    WAIT_LIMIT, eventually, wait_until, wait_until_async, wait_until_async_within,
    wait_until_within,
};

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};
use weft_client::{Cluster, ClusterOptions, NewFile};
use weft_proto::TargetId;
use weft_proto::mgs::TargetState;

/// The file system name test clusters use.
pub const FSNAME: &str = "testfs";

/// An MDS process of its own serving one MDT other than MDT0 (see [`TestCluster::add_mds`]).
pub struct ExtraMds {
    /// The MDT it serves.
    pub index: u32,
    /// Its `HOST:PORT`.
    pub addr: String,
    /// Where it serves Prometheus metrics (`HOST:PORT`).
    pub metrics_addr: String,
    /// The process.
    pub process: ServerProcess,
}

/// A file system of separate processes: one MGS, one MDS (MDT0) and one OSS with `osts` OSTs;
/// optionally more MDS processes, one per further MDT ([`TestCluster::start_mdts`]).
pub struct TestCluster {
    /// Where every target keeps its data, and the logs.
    pub dir: tempfile::TempDir,
    /// The MGS's `HOST:PORT`.
    pub mgs_addr: String,
    /// The MDS's `HOST:PORT`.
    pub mds_addr: String,
    /// The OSS's `HOST:PORT`.
    pub oss_addr: String,
    /// Where each process serves Prometheus metrics (`HOST:PORT`): MGS, MDS, OSS.
    pub metrics_addrs: [String; 3],
    /// The MGS process.
    pub mgs: ServerProcess,
    /// The MDS process.
    pub mds: ServerProcess,
    /// The OSS process.
    pub oss: ServerProcess,
    /// Number of OSTs.
    pub osts: u32,
    /// MDS processes of MDT1 and up, in the order they were added.
    pub mdses: Vec<ExtraMds>,
    /// Small file systems mounted for OSTs (unmounted when the cluster is dropped).
    mounts: Vec<std::path::PathBuf>,
    /// Extra environment variables of every server process ([`TestCluster::start_with_env`]).
    env: Vec<(String, String)>,
    /// How this harness's clients connect: proving the key and speaking the TLS the
    /// servers were given (`WEFT_KEY`, `WEFT_TLS_*` in `env`), if any.
    transport: Arc<weft_rpc::Tcp>,
}

/// Writes a new server key and its client key into `dir` (mode 0600), returning their paths
/// (`server.key`, `client.key`). A cluster started with `WEFT_KEY` naming the first in its
/// environment ([`TestCluster::start_with_env`]) requires it.
pub fn key_files(dir: &Path) -> Result<(PathBuf, PathBuf)> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let key = weft_rpc::ClusterKey::generate();
    let mut paths = Vec::new();
    for (name, text) in [
        ("server.key", key.to_text()),
        ("client.key", key.client_text()),
    ] {
        let path = dir.join(name);
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)?
            .write_all(text.as_bytes())?;
        paths.push(path);
    }
    let client = paths.pop().context("two keys written")?;
    let server = paths.pop().context("two keys written")?;
    Ok((server, client))
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        for m in &mut self.mdses {
            let _ = m.process.kill();
        }
        let _ = self.oss.kill();
        for m in &self.mounts {
            let _ = Command::new("umount").arg("-l").arg(m).status();
        }
    }
}

impl TestCluster {
    /// Starts the three processes and waits until every target has registered and serves.
    pub async fn start(bin: &Path, osts: u32) -> Result<Self> {
        Self::start_with_ost_size(bin, osts, None).await
    }

    /// Like [`TestCluster::start`], with every OST on its own tmpfs of `ost_bytes` (needs
    /// root): for tests of full targets.
    pub async fn start_with_ost_size(
        bin: &Path,
        osts: u32,
        ost_bytes: Option<u64>,
    ) -> Result<Self> {
        Self::start_full(bin, osts, ost_bytes, Vec::new()).await
    }

    /// Like [`TestCluster::start`], with extra environment variables for every server
    /// process, kept for their restarts (e.g. a data repository's credentials,
    /// [`S3Server::env`], which the MDS's data mover needs).
    pub async fn start_with_env(bin: &Path, osts: u32, env: Vec<(String, String)>) -> Result<Self> {
        Self::start_full(bin, osts, None, env).await
    }

    /// Like [`TestCluster::start_with_ost_size`] and [`TestCluster::start_with_env`] at
    /// once: small OSTs and a data repository's credentials (tiering tests).
    pub async fn start_with_ost_size_and_env(
        bin: &Path,
        osts: u32,
        ost_bytes: u64,
        env: Vec<(String, String)>,
    ) -> Result<Self> {
        Self::start_full(bin, osts, Some(ost_bytes), env).await
    }

    async fn start_full(
        bin: &Path,
        osts: u32,
        ost_bytes: Option<u64>,
        env: Vec<(String, String)>,
    ) -> Result<Self> {
        let dir = tempfile::tempdir()?;
        let mut mounts = Vec::new();
        if let Some(bytes) = ost_bytes {
            for i in 0..osts {
                let m = dir.path().join(format!("ost{i}"));
                std::fs::create_dir_all(&m)?;
                let status = Command::new("mount")
                    .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
                    .arg(&m)
                    .status()
                    .context("running mount")?;
                if !status.success() {
                    bail!("mounting a tmpfs for OST{i} failed (root needed)");
                }
                mounts.push(m);
            }
        }
        // What the servers are given, this harness's clients use too.
        let transport = weft_rpc::Tcp::from_vars(|name| {
            env.iter().find(|(k, _)| k == name).map(|(_, v)| v.into())
        })?;
        let d = dir.path();
        let (mgs_addr, mds_addr, oss_addr) = (
            format!("127.0.0.1:{}", free_port()?),
            format!("127.0.0.1:{}", free_port()?),
            format!("127.0.0.1:{}", free_port()?),
        );
        let metrics_addrs = [
            format!("127.0.0.1:{}", free_port()?),
            format!("127.0.0.1:{}", free_port()?),
            format!("127.0.0.1:{}", free_port()?),
        ];
        let s = |x: &Path| x.display().to_string();
        let mgs = ServerProcess::start_with_env(
            "mgs",
            bin,
            vec![
                "mgs".into(),
                "--data".into(),
                s(&d.join("mgs")),
                "--listen".into(),
                mgs_addr.clone(),
                "--fsname".into(),
                FSNAME.into(),
                "--metrics".into(),
                metrics_addrs[0].clone(),
            ],
            env.clone(),
            d.join("mgs.log"),
        )?;
        let mut oss_args = vec![
            "oss".into(),
            "--mgs".into(),
            mgs_addr.clone(),
            "--listen".into(),
            oss_addr.clone(),
            "--metrics".into(),
            metrics_addrs[2].clone(),
        ];
        for i in 0..osts {
            oss_args.push("--ost".into());
            oss_args.push(format!("{i}={}", s(&d.join(format!("ost{i}")))));
        }
        let oss =
            ServerProcess::start_with_env("oss", bin, oss_args, env.clone(), d.join("oss.log"))?;
        let mds = ServerProcess::start_with_env(
            "mds",
            bin,
            vec![
                "mds".into(),
                "--mgs".into(),
                mgs_addr.clone(),
                "--listen".into(),
                mds_addr.clone(),
                "--mdt".into(),
                format!("0={}", s(&d.join("mdt0"))),
                "--metrics".into(),
                metrics_addrs[1].clone(),
            ],
            env.clone(),
            d.join("mds.log"),
        )?;
        let cluster = Self {
            dir,
            mgs_addr,
            mds_addr,
            oss_addr,
            metrics_addrs,
            mgs,
            mds,
            oss,
            osts,
            mdses: Vec::new(),
            mounts,
            env,
            transport: Arc::new(transport),
        };
        cluster.wait_ready().await?;
        Ok(cluster)
    }

    /// Like [`TestCluster::start`] with `mdts` MDTs, each in an MDS process of its own
    /// (MDT0 in [`TestCluster::mds`], the others in [`TestCluster::mdses`]).
    pub async fn start_mdts(bin: &Path, osts: u32, mdts: u32) -> Result<Self> {
        let mut cluster = Self::start(bin, osts).await?;
        for index in 1..mdts {
            cluster.add_mds(index).await?;
        }
        Ok(cluster)
    }

    /// Restarts the MDS with no periodic durable commit (an hour's interval), for tests of
    /// the MDT's redo log: namespace changes stay in it until a client syncs or 4096 commits
    /// pass.
    pub async fn hold_mds_commits(&mut self) -> Result<()> {
        self.mds.add_args(&["--commit-interval-ms", "3600000"]);
        self.mds.restart()?;
        self.wait_ready().await
    }

    /// Starts `weft mds --mdt INDEX=DIR` as a process of its own, on its own port, and waits
    /// until MDT `index` is registered and active, has a FID sequence in the FID location
    /// database, knows every OST, and MDT0 can make a remote directory on it (a probe
    /// directory, removed again). Every other process must be up (and MDT0 free of
    /// failpoints: the probe is a cross-MDT operation).
    pub async fn add_mds(&mut self, index: u32) -> Result<()> {
        if index == 0 || self.mdses.iter().any(|m| m.index == index) {
            bail!("MDT{index} is served already");
        }
        let d = self.dir.path();
        let addr = format!("127.0.0.1:{}", free_port()?);
        let metrics_addr = format!("127.0.0.1:{}", free_port()?);
        let process = ServerProcess::start_with_env(
            &format!("mds{index}"),
            &self.bin_of_mds(),
            vec![
                "mds".into(),
                "--mgs".into(),
                self.mgs_addr.clone(),
                "--listen".into(),
                addr.clone(),
                "--mdt".into(),
                format!("{index}={}", d.join(format!("mdt{index}")).display()),
                "--metrics".into(),
                metrics_addr.clone(),
            ],
            self.env.clone(),
            d.join(format!("mds{index}.log")),
        )?;
        self.mdses.push(ExtraMds {
            index,
            addr,
            metrics_addr,
            process,
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut last_err = String::new();
        while Instant::now() < deadline {
            match self.try_mdt_ready(index, true).await {
                Ok(()) => return Ok(()),
                Err(e) => last_err = format!("{e:#}"),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        bail!(
            "MDT{index} not ready after 30 s: {last_err}\n--- mds log ---\n{}\n--- mds{index} log ---\n{}",
            self.mds.log(),
            self.mds_process(index).map(|p| p.log()).unwrap_or_default()
        )
    }

    /// The program the MDS of MDT0 runs (extra MDS processes run the same).
    fn bin_of_mds(&self) -> PathBuf {
        self.mds.bin.clone()
    }

    /// The process serving MDT `index` (MDT0: [`TestCluster::mds`]).
    pub fn mds_process(&mut self, index: u32) -> Option<&mut ServerProcess> {
        if index == 0 {
            return Some(&mut self.mds);
        }
        self.mdses
            .iter_mut()
            .find(|m| m.index == index)
            .map(|m| &mut m.process)
    }

    /// The indices of every MDT the cluster runs (0 first).
    pub fn mdt_indices(&self) -> Vec<u32> {
        std::iter::once(0)
            .chain(self.mdses.iter().map(|m| m.index))
            .collect()
    }

    /// MDT `index` is registered and active, answers, and has a FID sequence; with
    /// `probe`, also a remote directory made on it from MDT0 holds a file striped over
    /// every OST (and both are removed again).
    async fn try_mdt_ready(&self, index: u32, probe: bool) -> Result<()> {
        let c = self.client().await?;
        let config = c.config();
        let id = TargetId::mdt(index);
        let t = config
            .target(id)
            .with_context(|| format!("{id} not registered"))?;
        if t.state != TargetState::Active {
            bail!("{id} not active");
        }
        if !config.fld.iter().any(|e| e.mdt == index) {
            bail!("{id} has no FID sequence yet");
        }
        let mdt = c.mdt(index)?;
        mdt.statfs().await?;
        if !probe {
            return Ok(());
        }
        let root = weft_proto::mdt::Credentials::root();
        let name = format!(".testkit-mdt{index}-probe");
        let name = name.as_bytes();
        let file = b"probe";
        let mdt0 = c.mdt(0)?;
        // Leftovers of an attempt that failed half way.
        if let Ok(weft_client::Found::Elsewhere(fid)) =
            mdt0.lookup_entry(weft_proto::Fid::ROOT, name, &root).await
        {
            let _ = mdt.unlink(fid, file, &root).await;
            let _ = mdt0.rmdir(weft_proto::Fid::ROOT, name, &root).await;
        }
        let dir = mdt0
            .mkdir_on(weft_proto::Fid::ROOT, name, 0o700, index, &root)
            .await?;
        if config.mdt_of_seq(dir.fid.seq) != Some(index) {
            bail!("the probe directory {} is not on {id}", dir.fid);
        }
        let all = weft_proto::LayoutTemplate::raid0(-1, 0, -1);
        let created = mdt
            .create(
                &NewFile {
                    exclusive: false,
                    layout: Some(&all),
                    ..NewFile::exclusive(dir.fid, file, 0o100600)
                },
                &root,
            )
            .await;
        let _ = mdt.unlink(dir.fid, file, &root).await;
        let removed = mdt0.rmdir(weft_proto::Fid::ROOT, name, &root).await;
        let stripes = created?
            .layout
            .map_or(0, |l| l.components.first().map_or(0, |c| c.osts.len()));
        removed?;
        if stripes != self.osts as usize {
            bail!("{id} knows {stripes} of {} OSTs", self.osts);
        }
        Ok(())
    }

    /// Object files on the cluster's OSTs (under each OST's `O`), and the bytes they take
    /// on disk: what removed files leave until the MDT has destroyed their objects.
    pub fn ost_objects(&self) -> (usize, u64) {
        fn walk(dir: &Path, acc: &mut (usize, u64)) {
            use std::os::unix::fs::MetadataExt;
            let Ok(rd) = std::fs::read_dir(dir) else {
                return;
            };
            for e in rd.flatten() {
                let Ok(meta) = e.metadata() else { continue };
                if meta.is_dir() {
                    walk(&e.path(), acc);
                } else {
                    acc.0 += 1;
                    acc.1 += meta.blocks() * 512;
                }
            }
        }
        let mut acc = (0, 0);
        for i in 0..self.osts {
            walk(&self.dir.path().join(format!("ost{i}")).join("O"), &mut acc);
        }
        acc
    }

    /// Waits until the MGS lists MDT0 and every OST as active and each answers a ping
    /// (and every MDT of [`TestCluster::mdses`] is active, answers and has a FID sequence).
    pub async fn wait_ready(&self) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut last_err = String::new();
        while Instant::now() < deadline {
            match self.try_ready().await {
                Ok(()) => return Ok(()),
                Err(e) => last_err = format!("{e:#}"),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut extra = String::new();
        for m in &self.mdses {
            extra.push_str(&format!(
                "\n--- mds{} log ---\n{}",
                m.index,
                m.process.log()
            ));
        }
        bail!(
            "cluster not ready after 30 s: {last_err}\n--- mgs log ---\n{}\n--- mds log ---\n{}\n--- oss log ---\n{}{extra}",
            self.mgs.log(),
            self.mds.log(),
            self.oss.log()
        )
    }

    async fn try_ready(&self) -> Result<()> {
        for m in &self.mdses {
            self.try_mdt_ready(m.index, false).await?;
        }
        let c = self.client().await?;
        let config = c.config();
        let mut want = vec![TargetId::mdt(0)];
        want.extend((0..self.osts).map(TargetId::ost));
        for id in want {
            let t = config
                .target(id)
                .with_context(|| format!("{id} not registered"))?;
            if t.state != TargetState::Active {
                bail!("{id} not active");
            }
        }
        let mdt = c.mdt(0)?;
        mdt.statfs().await?;
        // The MDT must also know every OST: a file striped over all OSTs gets them all
        // (and is removed again).
        let root = weft_proto::mdt::Credentials::root();
        let probe = b".testkit-ready-probe";
        let all = weft_proto::LayoutTemplate::raid0(-1, 0, -1);
        let created = mdt
            .create(
                &NewFile {
                    exclusive: false,
                    layout: Some(&all),
                    ..NewFile::exclusive(weft_proto::Fid::ROOT, probe, 0o100600)
                },
                &root,
            )
            .await;
        let _ = mdt.unlink(weft_proto::Fid::ROOT, probe, &root).await;
        let stripes = created?
            .layout
            .map_or(0, |l| l.components.first().map_or(0, |c| c.osts.len()));
        if stripes != self.osts as usize {
            bail!("the MDT knows {stripes} of {} OSTs", self.osts);
        }
        for i in 0..self.osts {
            c.ost(i)?.statfs().await?;
        }
        Ok(())
    }

    /// Counter `name` of MDT `index` as its STATS request reports it (`MdtStats`: `dirs`,
    /// `files`, `orphans`, ...; what `weft get_param mdt.*.NAME` shows).
    pub async fn mdt_counter(&self, index: u32, name: &str) -> Result<u64> {
        mdt_counter(&*self.client().await?, index, name).await
    }

    /// Options of this harness's clients: they prove the cluster's key, if it has one.
    pub fn cluster_options(&self) -> ClusterOptions {
        ClusterOptions {
            transport: self.transport.clone(),
            ..ClusterOptions::default()
        }
    }

    /// A fresh client (its own node UUID and connections).
    pub async fn client(&self) -> Result<Arc<Cluster>> {
        Ok(Cluster::connect(&self.mgs_addr, FSNAME, self.cluster_options()).await?)
    }

    /// A file-system client (the file API), resending data RPCs for at most `io_retry`.
    pub async fn fs_client(&self, io_retry: Duration) -> Result<Arc<weft_client::Client>> {
        let opts = weft_client::ClientOptions {
            io_retry,
            cluster: self.cluster_options(),
        };
        Ok(weft_client::Client::mount(&self.mgs_addr, FSNAME, opts).await?)
    }

    /// A file-system client whose connections are made by `transport` (to inject faults).
    pub async fn fs_client_with(
        &self,
        transport: Arc<dyn weft_rpc::Transport>,
    ) -> Result<Arc<weft_client::Client>> {
        let mut opts = weft_client::ClientOptions::default();
        opts.cluster.transport = transport;
        Ok(weft_client::Client::mount(&self.mgs_addr, FSNAME, opts).await?)
    }

    /// A client whose requests give up after `timeout` (for tests of dead servers).
    pub async fn client_with_timeout(&self, timeout: Duration) -> Result<Arc<Cluster>> {
        let mut opts = self.cluster_options();
        opts.rpc.request_timeout = timeout;
        opts.rpc.connect_timeout = timeout;
        Ok(Cluster::connect(&self.mgs_addr, FSNAME, opts).await?)
    }
}

/// Counter `name` of OST `index` of the file system `c` is connected to, as its STATS
/// request reports it (`OstStats`: `restores`, `write_bytes`, ...; what `weft get_param
/// obdfilter.*.NAME` shows).
pub async fn ost_counter(c: &Cluster, index: u32, name: &str) -> Result<u64> {
    counter_of(c.ost(index)?.connection(), &format!("OST{index}"), name).await
}

/// Counter `name` of MDT `index` of the file system `c` is connected to (see
/// [`TestCluster::mdt_counter`]).
pub async fn mdt_counter(c: &Cluster, index: u32, name: &str) -> Result<u64> {
    counter_of(c.mdt(index)?.connection(), &format!("MDT{index}"), name).await
}

/// Counter `name` of the target behind `conn` (`target` names it in the error).
async fn counter_of(conn: &weft_rpc::Reconnecting, target: &str, name: &str) -> Result<u64> {
    let stats = conn.connection().await?.stats().await?;
    stats
        .counters
        .iter()
        .find(|x| x.name == name)
        .map(|x| x.value)
        .with_context(|| format!("{target} reports no counter {name}"))
}
