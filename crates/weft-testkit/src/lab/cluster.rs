//! A whole file system across lab hosts: MGS and MDS on one host, OSSes on others, and
//! `weft mount` on client hosts, every process in its host's network namespace.

use super::Lab;
use crate::{FSNAME, ServerProcess};
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Which host runs what.
#[derive(Debug, Clone)]
pub struct LabSpec {
    /// The host of the MGS and the MDS (MDT0).
    pub servers: String,
    /// OSS hosts and how many OSTs each serves (indices follow on from host to host).
    pub oss: Vec<(String, u32)>,
    /// Hosts that mount the file system.
    pub clients: Vec<String>,
    /// A rate limit on every host's link, Mbit/s.
    pub link_mbit: Option<u64>,
    /// Each OSS host's data on a disk of this many MiB ([`Lab::small_disk`]), so a test
    /// can fill its OSTs; on the lab's disk otherwise.
    pub oss_disk_mib: Option<u64>,
    /// Flags added to every server role (MGS, MDS and each OSS), e.g.
    /// `--evict-timeout 3`.
    pub server_args: Vec<String>,
    /// A host whose OSS stands by for the first OSS host's OSTs: it serves the same
    /// directories (hosts share the file system, so they are shared storage), and each of
    /// the two names the other with `--failover`. Started once the first serves them;
    /// its process is the last of [`LabCluster::oss`].
    pub failover_host: Option<String>,
}

/// One client host's mount.
pub struct LabMount {
    /// The host it runs on.
    pub host: String,
    /// The mount point (in the test's mount namespace).
    pub path: PathBuf,
    /// The `weft mount` process.
    pub process: ServerProcess,
}

/// A running file system across lab hosts; unmounted and stopped when dropped.
pub struct LabCluster {
    /// Client mounts, in the order of [`LabSpec::clients`].
    pub mounts: Vec<LabMount>,
    /// OSS processes, in the order of [`LabSpec::oss`].
    pub oss: Vec<ServerProcess>,
    /// The MDS (MDT0).
    pub mds: ServerProcess,
    /// The MGS.
    pub mgs: ServerProcess,
    /// `HOST:PORT` of the MGS, as clients on the lab's hosts reach it.
    pub mgs_addr: String,
    /// The hosts.
    pub lab: Lab,
}

/// Whether `path` is a mount point (listed in this process's mountinfo).
fn is_mounted(path: &Path) -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let want = path.to_string_lossy();
    info.lines()
        .any(|l| l.split(' ').nth(4).is_some_and(|p| p == want))
}

impl LabCluster {
    /// Makes the hosts and starts every role; returns when every OST is online and every
    /// client has mounted.
    pub async fn start(bin: &Path, spec: &LabSpec) -> Result<Self> {
        let mut names: Vec<&str> = vec![spec.servers.as_str()];
        names.extend(spec.oss.iter().map(|(h, _)| h.as_str()));
        names.extend(spec.clients.iter().map(String::as_str));
        names.extend(spec.failover_host.as_deref());
        let mut lab = Lab::new(&names)?;
        if let Some(mib) = spec.oss_disk_mib {
            for (host, _) in &spec.oss {
                lab.small_disk(host, mib)?;
            }
        }
        if let Some(mbit) = spec.link_mbit {
            for h in &names {
                lab.limit(h, mbit, Duration::ZERO)?;
            }
        }
        let server_addr = lab.host(&spec.servers)?.addr;
        let mgs_addr = format!("{server_addr}:9400");
        let s = |p: PathBuf| p.display().to_string();
        let sdir = lab.host_dir(&spec.servers)?;
        let mgs = lab.start(
            &spec.servers,
            "mgs",
            bin,
            vec![
                "mgs".into(),
                "--data".into(),
                s(sdir.join("mgs")),
                "--listen".into(),
                mgs_addr.clone(),
                "--fsname".into(),
                FSNAME.into(),
            ]
            .into_iter()
            .chain(spec.server_args.iter().cloned())
            .collect(),
        )?;
        let mds = lab.start(
            &spec.servers,
            "mds",
            bin,
            vec![
                "mds".into(),
                "--mgs".into(),
                mgs_addr.clone(),
                "--listen".into(),
                format!("{server_addr}:9401"),
                "--mdt".into(),
                format!("0={}", s(sdir.join("mdt0"))),
            ]
            .into_iter()
            .chain(spec.server_args.iter().cloned())
            .collect(),
        )?;
        let mut oss = Vec::new();
        let mut next_ost = 0;
        let oss_addr =
            |host: &str| -> Result<String> { Ok(format!("{}:9402", lab.host(host)?.addr)) };
        // The first OSS host's arguments, which its standby repeats.
        let mut first_osts: Vec<String> = Vec::new();
        for (host, count) in &spec.oss {
            let dir = lab.host_dir(host)?;
            let mut args = vec![
                "oss".into(),
                "--mgs".into(),
                mgs_addr.clone(),
                "--listen".into(),
                oss_addr(host)?,
            ];
            for _ in 0..*count {
                args.push("--ost".into());
                args.push(format!(
                    "{next_ost}={}",
                    s(dir.join(format!("ost{next_ost}")))
                ));
                next_ost += 1;
            }
            if first_osts.is_empty() {
                first_osts = args[5..].to_vec();
                if let Some(standby) = &spec.failover_host {
                    args.extend(["--failover".into(), oss_addr(standby)?]);
                }
            }
            args.extend(spec.server_args.iter().cloned());
            oss.push(lab.start(host, &format!("oss-{host}"), bin, args)?);
        }
        let standby = match (&spec.failover_host, spec.oss.first()) {
            (Some(standby), Some((first, _))) => {
                let mut args = vec![
                    "oss".into(),
                    "--mgs".into(),
                    mgs_addr.clone(),
                    "--listen".into(),
                    oss_addr(standby)?,
                    "--failover".into(),
                    oss_addr(first)?,
                ];
                args.extend(first_osts);
                args.extend(spec.server_args.iter().cloned());
                Some((standby.clone(), args))
            }
            _ => None,
        };
        let mut cluster = Self {
            mounts: Vec::new(),
            oss,
            mds,
            mgs,
            mgs_addr,
            lab,
        };
        // `weft mount` does not wait for an MGS that is not up yet: servers first.
        cluster
            .wait_online(bin, &spec.servers, 1 + next_ost)
            .await?;
        if let Some((host, args)) = standby {
            let p = cluster
                .lab
                .start(&host, &format!("oss-{host}"), bin, args)?;
            cluster.oss.push(p);
            let standing = spec.oss.first().map_or(0, |(_, n)| *n as usize);
            cluster
                .wait_for("the standby OSS to stand by", || {
                    Ok(cluster
                        .oss
                        .last()
                        .is_some_and(|p| p.log().matches("standing by").count() == standing))
                })
                .await?;
        }
        for host in &spec.clients {
            let path = cluster.lab.dir().join(format!("mnt-{host}"));
            std::fs::create_dir_all(&path)?;
            let process = cluster.lab.start(
                host,
                &format!("mount-{host}"),
                bin,
                vec![
                    "mount".into(),
                    format!("{}:/{FSNAME}", cluster.mgs_addr),
                    s(path.clone()),
                ],
            )?;
            cluster.mounts.push(LabMount {
                host: host.clone(),
                path,
                process,
            });
        }
        cluster
            .wait_for("every client to mount", || {
                Ok(cluster.mounts.iter().all(|m| is_mounted(&m.path)))
            })
            .await?;
        cluster
            .wait_allocatable(bin, &spec.servers, next_ost)
            .await?;
        Ok(cluster)
    }

    /// Waits until the MDS places new files on all `osts` OSTs: its view of the OSTs
    /// follows registrations by a poll of their usage, which may come after `weft df`
    /// already sees them online. A probe file made with `-c -1` (then removed) tells.
    async fn wait_allocatable(&self, bin: &Path, probe: &str, osts: u32) -> Result<()> {
        let fs = format!("{}:/{FSNAME}", self.mgs_addr);
        let n = std::sync::atomic::AtomicU32::new(0);
        self.wait_for(&format!("new files striped over {osts} OSTs"), || {
            let name = format!(
                ".lab-probe-{}",
                n.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            );
            let path = format!("{fs}/{name}");
            let made = self
                .lab
                .run(probe, bin, &["setstripe", "-c", "-1", &path])?;
            if !made.status.success() {
                return Ok(false);
            }
            let out = self.lab.run(probe, bin, &["getstripe", "-c", &path])?;
            let count = String::from_utf8_lossy(&out.stdout).trim().to_string();
            // Removed through a mount, where there is one.
            if let Some(m) = self.mounts.first() {
                let _ = std::fs::remove_file(m.path.join(&name));
            }
            Ok(count == osts.to_string())
        })
        .await
    }

    /// Waits until `weft df` on host `probe` lists `targets` targets online.
    async fn wait_online(&self, bin: &Path, probe: &str, targets: u32) -> Result<()> {
        let fs = format!("{}:/{FSNAME}", self.mgs_addr);
        self.wait_for(&format!("{targets} targets online"), || {
            let out = self.lab.run(probe, bin, &["df", "--json", &fs])?;
            let text = String::from_utf8_lossy(&out.stdout).replace(char::is_whitespace, "");
            Ok(out.status.success() && text.matches("\"online\":true").count() >= targets as usize)
        })
        .await
    }

    /// Polls `ready` for up to 60 s; on timeout, fails with every process's log.
    async fn wait_for(&self, what: &str, ready: impl Fn() -> Result<bool>) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !ready()? {
            if Instant::now() > deadline {
                let mut logs = String::new();
                let mounts = self.mounts.iter().map(|m| &m.process);
                for p in [&self.mgs, &self.mds]
                    .into_iter()
                    .chain(&self.oss)
                    .chain(mounts)
                {
                    logs.push_str(&format!("\n--- {} ---\n{}", p.name(), p.log()));
                }
                bail!("lab cluster: waited 60 s for {what}{logs}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }

    /// The mount of client host `host`.
    pub fn mount(&self, host: &str) -> Result<&LabMount> {
        self.mounts
            .iter()
            .find(|m| m.host == host)
            .with_context(|| format!("no mount on host {host}"))
    }
}

impl Drop for LabCluster {
    fn drop(&mut self) {
        // Unmount first (lazily: a cut link must not hang the test's end), then the
        // processes stop as their fields drop, then the hosts go.
        for m in &mut self.mounts {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(&m.path)
                .output();
            let _ = m.process.kill();
        }
    }
}
