//! A multi-host lab on one machine: network namespaces as hosts, each with an address of
//! its own on one virtual switch (a bridge in a namespace of its own), optionally with a
//! bandwidth limit on its link, and links a test can cut and restore (a partition).
//!
//! Processes started on a host ([`Lab::start`]) run in its network namespace only
//! (`nsenter --net`); they share the test's mount namespace, so a FUSE mount made on a
//! host is visible to the test like any other, while every byte its client sends crosses
//! the host's link. [`LabCluster`] starts a whole file system across hosts.
//!
//! Needs root and iproute2 (`ip`, `tc`); `deploy/lab/lab.sh` builds the same topology by
//! hand. The kernel here has no `sch_netem`, so links get a rate limit (`tbf`) but no added
//! delay: [`Lab::limit`] says so when asked for one.

mod cluster;

pub use cluster::{LabCluster, LabMount, LabSpec};

use crate::ServerProcess;
use anyhow::{Context, Result, bail};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

/// The hosts' subnet: each lab has its own switch, so labs never see each other's hosts.
const SUBNET: [u8; 3] = [10, 77, 0];
/// Hosts a lab may have (addresses .1 to .250).
pub const MAX_HOSTS: usize = 250;

/// One host of a lab.
#[derive(Debug, Clone)]
pub struct LabHost {
    /// The name the test gave it.
    pub name: String,
    /// Its network namespace (`ip netns` name).
    pub netns: String,
    /// Its address on the lab's switch.
    pub addr: Ipv4Addr,
    /// Its port on the switch (in the switch's namespace).
    port: String,
}

/// Hosts on one switch; every namespace is deleted when the lab drops.
pub struct Lab {
    switch: String,
    hosts: Vec<LabHost>,
    dir: tempfile::TempDir,
    /// Host data directories on a tmpfs of their own ([`Lab::small_disk`]), unmounted on drop.
    disks: Vec<PathBuf>,
}

fn ip(args: &[&str]) -> Result<()> {
    run("ip", args)
}

fn run(program: &str, args: &[&str]) -> Result<()> {
    let out = Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("running {program} (iproute2 is needed for the lab)"))?;
    if !out.status.success() {
        bail!(
            "{program} {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

impl Lab {
    /// Makes one host per name (letters, digits and `-`, at most 12 characters).
    pub fn new(names: &[&str]) -> Result<Self> {
        if names.is_empty() || names.len() > MAX_HOSTS {
            bail!("a lab has 1 to {MAX_HOSTS} hosts, not {}", names.len());
        }
        for n in names {
            if n.is_empty()
                || n.len() > 12
                || !n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            {
                bail!("bad host name {n:?}: 1 to 12 letters, digits or '-'");
            }
        }
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let id = format!(
            "{:x}{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let mut lab = Self {
            switch: format!("wl{id}-switch"),
            hosts: Vec::new(),
            dir: tempfile::tempdir()?,
            disks: Vec::new(),
        };
        ip(&["netns", "add", &lab.switch])?;
        ip(&["-n", &lab.switch, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &lab.switch, "link", "set", "br0", "up"])?;
        for (i, name) in names.iter().enumerate() {
            let host = LabHost {
                name: name.to_string(),
                netns: format!("wl{id}-{name}"),
                addr: Ipv4Addr::new(SUBNET[0], SUBNET[1], SUBNET[2], (i + 1) as u8),
                port: format!("h{i}"),
            };
            if lab.hosts.iter().any(|h| h.name == host.name) {
                bail!("host {name} given twice");
            }
            ip(&["netns", "add", &host.netns])?;
            // Pushed before it is wired, so the drop deletes it whatever fails next.
            lab.hosts.push(host.clone());
            ip(&[
                "link",
                "add",
                "eth0",
                "netns",
                &host.netns,
                "type",
                "veth",
                "peer",
                "name",
                &host.port,
                "netns",
                &lab.switch,
            ])?;
            ip(&[
                "-n",
                &lab.switch,
                "link",
                "set",
                &host.port,
                "master",
                "br0",
                "up",
            ])?;
            let cidr = format!("{}/24", host.addr);
            ip(&["-n", &host.netns, "addr", "add", &cidr, "dev", "eth0"])?;
            ip(&["-n", &host.netns, "link", "set", "eth0", "up"])?;
            ip(&["-n", &host.netns, "link", "set", "lo", "up"])?;
        }
        Ok(lab)
    }

    /// The host named `name`.
    pub fn host(&self, name: &str) -> Result<&LabHost> {
        self.hosts
            .iter()
            .find(|h| h.name == name)
            .with_context(|| format!("no host {name} in the lab"))
    }

    /// Every host, in the order given.
    pub fn hosts(&self) -> &[LabHost] {
        &self.hosts
    }

    /// A directory for the lab's data and logs, removed with the lab.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Limits host `name`'s link to `mbit` Mbit/s in each direction (token bucket on both
    /// ends of its cable). `delay` must be zero: this kernel has no `sch_netem`.
    pub fn limit(&self, name: &str, mbit: u64, delay: std::time::Duration) -> Result<()> {
        if !delay.is_zero() {
            bail!("link delay needs the kernel's sch_netem, which this machine lacks");
        }
        if mbit == 0 {
            bail!("a link rate of 0 Mbit/s would cut the link: use set_link");
        }
        let host = self.host(name)?;
        let rate = format!("{mbit}mbit");
        // A burst of at least one jumbo of data per timer tick at this rate.
        let burst = format!("{}", (mbit * 1_000_000 / 8 / 250).max(64 * 1024));
        for (ns, dev) in [(&host.netns, "eth0"), (&self.switch, host.port.as_str())] {
            run(
                "tc",
                &[
                    "-n", ns, "qdisc", "replace", "dev", dev, "root", "tbf", "rate", &rate,
                    "burst", &burst, "latency", "50ms",
                ],
            )?;
        }
        Ok(())
    }

    /// Cuts (`up = false`) or restores host `name`'s link: its packets are dropped at the
    /// switch, as when a cable is pulled, while its processes keep running.
    pub fn set_link(&self, name: &str, up: bool) -> Result<()> {
        let host = self.host(name)?;
        let state = if up { "up" } else { "down" };
        ip(&["-n", &self.switch, "link", "set", &host.port, state])
    }

    /// Starts `bin args...` on host `name`, logging to `<lab dir>/<process>.log`.
    pub fn start(
        &self,
        host: &str,
        process: &str,
        bin: &Path,
        args: Vec<String>,
    ) -> Result<ServerProcess> {
        let h = self.host(host)?;
        let log = self.dir.path().join(format!("{process}.log"));
        ServerProcess::start_in_netns(process, &h.netns, bin, args, log)
    }

    /// Runs `program args...` on host `name` to its end.
    pub fn run(&self, host: &str, program: &Path, args: &[&str]) -> Result<Output> {
        let h = self.host(host)?;
        Command::new("nsenter")
            .arg(format!("--net=/run/netns/{}", h.netns))
            .arg("--")
            .arg(program)
            .args(args)
            .output()
            .with_context(|| format!("running {} on {host}", program.display()))
    }

    /// Gives host `name` a disk of its own of `mib` MiB (a tmpfs mounted on its data
    /// directory): a device small enough for a test to fill, as a full OST's is.
    pub fn small_disk(&mut self, name: &str, mib: u64) -> Result<PathBuf> {
        let d = self.host_dir(name)?;
        run(
            "mount",
            &[
                "-t",
                "tmpfs",
                "-o",
                &format!("size={mib}m"),
                "tmpfs",
                &d.display().to_string(),
            ],
        )?;
        self.disks.push(d.clone());
        Ok(d)
    }

    /// Where host `name` keeps data: `<lab dir>/<name>`.
    pub fn host_dir(&self, name: &str) -> Result<PathBuf> {
        let d = self.dir.path().join(&self.host(name)?.name);
        std::fs::create_dir_all(&d)?;
        Ok(d)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if let Some(keep) = std::env::var_os("WEFT_LAB_KEEP") {
            // Logs only (data directories may be large): for a failed run's post-mortem.
            let _ = std::fs::create_dir_all(&keep);
            if let Ok(entries) = std::fs::read_dir(self.dir.path()) {
                for e in entries.flatten() {
                    if e.path().extension().is_some_and(|x| x == "log") {
                        let _ = std::fs::copy(e.path(), Path::new(&keep).join(e.file_name()));
                    }
                }
            }
        }
        for d in &self.disks {
            let _ = Command::new("umount").arg("-l").arg(d).output();
        }
        // Deleting a namespace removes its end of each cable, and the cable with it.
        for h in &self.hosts {
            let _ = ip(&["netns", "del", &h.netns]);
        }
        let _ = ip(&["netns", "del", &self.switch]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names_are_checked_before_anything_is_made() {
        assert!(Lab::new(&[]).is_err());
        assert!(Lab::new(&["a b"]).is_err());
        assert!(Lab::new(&["much-too-long-name"]).is_err());
    }
}
