//! Server processes of a test: a free port to give one, and [`ServerProcess`], which starts
//! a `weft` role as a child process (optionally in a lab host's network namespace), stops,
//! kills, pauses and restarts it, and shows its log.

use anyhow::{Context, Result, bail};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// A free TCP port on 127.0.0.1 (bound and released; the caller binds it again soon).
///
/// Ports come from below the kernel's ephemeral range and from a counter: a port the kernel
/// picked (`bind(0)`) could be picked again for the next caller, or taken by a connection's
/// local end, before its server binds it — servers of one test cluster then collided.
pub fn free_port() -> Result<u16> {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32768);
    const SPAN: u32 = 16_000;
    let Some(low) = ephemeral_low.checked_sub(SPAN).filter(|l| *l >= 1024) else {
        return Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port());
    };
    // Different test processes start at different places.
    let start = std::process::id().wrapping_mul(7919) % SPAN;
    for _ in 0..SPAN {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = u16::try_from(low + (start + n) % SPAN)?;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    bail!("no free port in {low}..{}", low + SPAN)
}

/// One server process and how to start it again.
pub struct ServerProcess {
    name: String,
    /// The binary it runs (the cluster starts further roles from the same one).
    pub(crate) bin: PathBuf,
    args: Vec<String>,
    /// Extra environment variables of every start (e.g. `WEFT_FAILPOINT`).
    env: Vec<(String, String)>,
    log: PathBuf,
    /// The network namespace it runs in (a [`crate::lab::Lab`] host), or none for the test's own.
    netns: Option<String>,
    child: Option<Child>,
}

impl ServerProcess {
    /// Starts `bin args...`, with output appended to `log`.
    pub fn start(name: &str, bin: &Path, args: Vec<String>, log: PathBuf) -> Result<Self> {
        Self::start_with_env(name, bin, args, Vec::new(), log)
    }

    /// Like [`ServerProcess::start`], with extra environment variables (kept for restarts
    /// until [`ServerProcess::remove_env`]).
    pub fn start_with_env(
        name: &str,
        bin: &Path,
        args: Vec<String>,
        env: Vec<(String, String)>,
        log: PathBuf,
    ) -> Result<Self> {
        Self::launch(name, None, bin, args, env, log)
    }

    /// Like [`ServerProcess::start`], in network namespace `netns` only (`nsenter --net`:
    /// the mount namespace stays the test's, so a FUSE mount it makes is visible here).
    pub fn start_in_netns(
        name: &str,
        netns: &str,
        bin: &Path,
        args: Vec<String>,
        log: PathBuf,
    ) -> Result<Self> {
        Self::launch(name, Some(netns.to_string()), bin, args, Vec::new(), log)
    }

    fn launch(
        name: &str,
        netns: Option<String>,
        bin: &Path,
        args: Vec<String>,
        env: Vec<(String, String)>,
        log: PathBuf,
    ) -> Result<Self> {
        let mut p = Self {
            name: name.to_string(),
            bin: bin.to_path_buf(),
            args,
            env,
            log,
            netns,
            child: None,
        };
        p.spawn()?;
        Ok(p)
    }

    /// Sets an environment variable for the next starts ([`ServerProcess::restart`]); the
    /// running process keeps its environment. Fault tests arm a failpoint this way:
    /// `set_env("WEFT_FAILPOINT", "cross_mdt.before_remote")` then `restart()`.
    pub fn set_env(&mut self, key: &str, value: &str) {
        self.env.retain(|(k, _)| k != key);
        self.env.push((key.to_string(), value.to_string()));
    }

    /// Adds command-line arguments for the next starts ([`ServerProcess::restart`]).
    pub fn add_args(&mut self, args: &[&str]) {
        self.args.extend(args.iter().map(|a| a.to_string()));
    }

    /// Removes an environment variable set with [`ServerProcess::set_env`] (or at start)
    /// from the next starts.
    pub fn remove_env(&mut self, key: &str) {
        self.env.retain(|(k, _)| k != key);
    }

    /// The process's name (as in its log file and error messages).
    pub fn name(&self) -> &str {
        &self.name
    }

    fn spawn(&mut self) -> Result<()> {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let err = out.try_clone()?;
        // nsenter enters the namespace and executes the program in its place: the child's
        // pid is the server's, so kill, pause and restart act on the server itself.
        let mut cmd = match &self.netns {
            Some(ns) => {
                let mut c = Command::new("nsenter");
                c.arg(format!("--net=/run/netns/{ns}"))
                    .arg("--")
                    .arg(&self.bin);
                c
            }
            None => Command::new(&self.bin),
        };
        let child = cmd
            .args(&self.args)
            .env(
                "RUST_LOG",
                std::env::var("WEFT_TEST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .with_context(|| format!("starting {}", self.name))?;
        self.child = Some(child);
        Ok(())
    }

    /// Kills the process at once (SIGKILL): nothing is flushed that was not acknowledged.
    pub fn kill(&mut self) -> Result<()> {
        if let Some(mut c) = self.child.take() {
            c.kill()?;
            c.wait()?;
        }
        Ok(())
    }

    /// Asks the process to stop (SIGTERM) and waits for it; returns its exit status.
    pub fn stop(&mut self) -> Result<std::process::ExitStatus> {
        let Some(mut c) = self.child.take() else {
            bail!("{} is not running", self.name)
        };
        let pid = c.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status()?;
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = c.try_wait()? {
                return Ok(status);
            }
            if Instant::now() > deadline {
                c.kill()?;
                bail!("{} did not stop within 20 s of SIGTERM", self.name);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts the process again with the same arguments.
    pub fn restart(&mut self) -> Result<()> {
        self.kill()?;
        self.spawn()
    }

    /// Whether the process has exited, and how.
    pub fn try_wait(&mut self) -> Result<Option<std::process::ExitStatus>> {
        match self.child.as_mut() {
            Some(c) => Ok(c.try_wait()?),
            None => bail!("{} is not running", self.name),
        }
    }

    /// Waits up to `timeout` for the process to exit by itself (a crash, a failpoint's
    /// abort) and returns how it ended; afterwards it counts as not running, and
    /// [`ServerProcess::restart`] starts it again.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Result<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            let Some(c) = self.child.as_mut() else {
                bail!("{} is not running", self.name)
            };
            if let Some(status) = c.try_wait()? {
                self.child = None;
                return Ok(status);
            }
            if Instant::now() > deadline {
                bail!(
                    "{} still runs {timeout:?} later\n--- its log ---\n{}",
                    self.name,
                    self.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Freezes the process (SIGSTOP): it keeps its connections but answers nothing, as a
    /// hung server would, until [`ServerProcess::resume`].
    pub fn pause(&self) -> Result<()> {
        self.signal(rustix::process::Signal::STOP)
    }

    /// Lets a process frozen by [`ServerProcess::pause`] run again (SIGCONT).
    pub fn resume(&self) -> Result<()> {
        self.signal(rustix::process::Signal::CONT)
    }

    /// Sends `sig` with kill(2) itself, not by running `kill`: a test whose threads wait
    /// in a FUSE request for this very server cannot start a process until that request
    /// ends (the new process's exec stalls), so a SIGCONT sent by a child would come only
    /// after the mount's I/O had timed out.
    fn signal(&self, sig: rustix::process::Signal) -> Result<()> {
        let Some(pid) = self.pid() else {
            bail!("{} is not running", self.name)
        };
        let target = i32::try_from(pid)
            .ok()
            .and_then(rustix::process::Pid::from_raw)
            .with_context(|| format!("bad pid {pid}"))?;
        rustix::process::kill_process(target, sig)
            .with_context(|| format!("kill -{sig:?} {} ({pid}) failed", self.name))
    }

    /// Whether the process runs (was started and has not been seen to exit).
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// The process's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}
