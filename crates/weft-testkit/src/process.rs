//! Server processes of a test: a free port to give one, and [`ServerProcess`], which starts
//! a `weft` role as a child process (optionally in a lab host's network namespace), stops,
//! kills, pauses and restarts it, and shows its log.

use anyhow::{Context, Result, bail};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A free TCP port on 127.0.0.1 (bound and released; the caller binds it again soon).
///
/// Ports come from below the kernel's ephemeral range and from a counter: a port the kernel
/// picked (`bind(0)`) could be picked again for the next caller, or taken by a connection's
/// local end, before its server binds it — servers of one test cluster then collided.
///
/// Each test process hands out ports only from blocks of [`PORT_BLOCK`] ports that it has
/// claimed with an exclusive `flock` on a file per block (in the temporary directory),
/// held until it exits. Two test processes (`./test.sh` runs the POSIX suites' process
/// beside the main one) therefore never hand out the same port — not even the port of a
/// server one of them is restarting, which the other's bind probe would find free: that
/// is how an MDS restarted on its old port once found another process's server there
/// ("target MDT0000 is not served here").
pub fn free_port() -> Result<u16> {
    const SPAN: u32 = 16_000;
    // The blocks below the ephemeral range, found once per process (none when the range
    // starts too low to leave room).
    static PORTS: Mutex<Option<Option<PortBlocks>>> = Mutex::new(None);
    let mut ports = PORTS.lock().unwrap_or_else(|e| e.into_inner());
    let blocks = ports.get_or_insert_with(|| {
        let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<u32>().ok())
            .unwrap_or(32768);
        let low = ephemeral_low.checked_sub(SPAN).filter(|l| *l >= 1024)?;
        Some(PortBlocks::new(
            std::env::temp_dir().join("weft-testkit-ports"),
            low,
        ))
    });
    let Some(blocks) = blocks else {
        return Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port());
    };
    // Each round claims (or reuses) one block; every block at most twice over.
    for _ in 0..2 * SPAN / PORT_BLOCK {
        if let Some(port) = blocks.next_free() {
            return Ok(port);
        }
        blocks.claim(SPAN / PORT_BLOCK)?;
    }
    bail!("no free port in the test port blocks this process holds")
}

/// Ports in a block claimed by one test process (see [`free_port`]).
const PORT_BLOCK: u32 = 500;

/// The port blocks this process has claimed, and its place in the newest one.
struct PortBlocks {
    /// Where the lock files are.
    dir: PathBuf,
    /// The first port of block 0.
    low: u32,
    /// Each claimed block's number and its lock file (the `flock` lives as long as the
    /// file is open: until the process exits).
    claimed: Vec<(u32, std::fs::File)>,
    /// Ports of the newest block handed out or found busy so far.
    next: u32,
}

impl PortBlocks {
    fn new(dir: PathBuf, low: u32) -> Self {
        Self {
            dir,
            low,
            claimed: Vec::new(),
            next: 0,
        }
    }

    /// The next port of the newest claimed block that binds, or `None` when it has none.
    fn next_free(&mut self) -> Option<u16> {
        let (block, _) = self.claimed.last()?;
        while self.next < PORT_BLOCK {
            let port = self.low + block * PORT_BLOCK + self.next;
            self.next += 1;
            let port = u16::try_from(port).ok()?;
            if TcpListener::bind(("127.0.0.1", port)).is_ok() {
                return Some(port);
            }
        }
        None
    }

    /// Claims a block no other process holds, starting the search at a place of its own
    /// so that processes starting together rarely try the same files. When every other
    /// block is held, this process's oldest block is used again (its servers are long gone).
    fn claim(&mut self, blocks: u32) -> Result<()> {
        let dir = &self.dir;
        if !dir.is_dir() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            // Shared by every user's test processes, as the temporary directory is.
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o1777));
        }
        let start = std::process::id() % blocks;
        for i in 0..blocks {
            let block = (start + i) % blocks;
            if self.claimed.iter().any(|(b, _)| *b == block) {
                continue;
            }
            let path = dir.join(format!("{}-{block}", self.low));
            // Opened for reading when it exists (a `flock` needs no write access, and
            // another user may have made it); made when it does not.
            let file = std::fs::File::open(&path)
                .or_else(|_| {
                    std::fs::OpenOptions::new()
                        .create(true)
                        .truncate(false)
                        .write(true)
                        .open(&path)
                })
                .with_context(|| format!("opening {}", path.display()))?;
            if rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive)
                .is_ok()
            {
                self.claimed.push((block, file));
                self.next = 0;
                return Ok(());
            }
        }
        if !self.claimed.is_empty() {
            self.claimed.rotate_left(1);
            self.next = 0;
            return Ok(());
        }
        bail!(
            "every block of test ports in {}..{} is claimed by other processes (locks in {})",
            self.low,
            self.low + blocks * PORT_BLOCK,
            dir.display()
        )
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Claimants in one directory (each `flock` is on its own open file, so they exclude
    /// each other as two processes do) get disjoint blocks; when none is left, a claimant
    /// reuses its own oldest block, and one with none gets a clear error.
    #[test]
    fn claimants_get_disjoint_port_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let low = 20_000;
        let mut a = PortBlocks::new(dir.path().to_path_buf(), low);
        let mut b = PortBlocks::new(dir.path().to_path_buf(), low);
        a.claim(2).unwrap();
        b.claim(2).unwrap();
        let block_of = |p: u16| (u32::from(p) - low) / PORT_BLOCK;
        let pa = a.next_free().unwrap();
        let pb = b.next_free().unwrap();
        assert_ne!(block_of(pa), block_of(pb));
        assert!(block_of(pa) < 2 && block_of(pb) < 2);
        let mut c = PortBlocks::new(dir.path().to_path_buf(), low);
        let err = c.claim(2).unwrap_err().to_string();
        assert!(err.contains("claimed by other processes"), "{err}");
        // A has used up its block: it takes its own again, not B's.
        a.next = PORT_BLOCK;
        assert_eq!(a.next_free(), None);
        a.claim(2).unwrap();
        assert_eq!(block_of(a.next_free().unwrap()), block_of(pa));
        // When B goes (its process exits), its block is free for C.
        drop(b);
        c.claim(2).unwrap();
        assert_eq!(block_of(c.next_free().unwrap()), block_of(pb));
    }
}
