//! Job ids of the processes calling into the mount, as Lustre derives them: the value of
//! the environment variable `jobid_var` (default `SLURM_JOB_ID`) of the calling process,
//! else `jobid_name` expanded for it (default `%e.%u`: executable name and uid). Every
//! request sent for a kernel request carries the id, so servers count I/O per job
//! (`job_stats`).
//!
//! `jobid_var` also takes Lustre's special values: `disable` (no job ids), `procname_uid`
//! (always `%e.%u`) and `nodelocal` (always `jobid_name`, e.g. a fixed name set per node).
//! `jobid_name` expands `%e` (executable name), `%u` (uid), `%g` (gid), `%h` (host name),
//! `%p` (pid), `%j` (the `jobid_var` value, empty if unset) and `%%`.
//!
//! Reading `/proc/<pid>/environ` for every request would cost more than most requests, so
//! answers are kept for a few seconds per pid (a process's environment does not change
//! unless it execs).
//!
//! The kernel makes a read of `/proc/<pid>/environ` wait while that process is inside
//! `execve`, and an exec can itself wait on this mount (closing close-on-exec descriptors
//! sends FLUSH). Environments are therefore read on a thread of their own and a request
//! waits for the answer only [`ENV_WAIT`]; past that it gets the `jobid_name` fallback,
//! which is not cached, so the next request asks again.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::io::Read;
use std::sync::Arc;
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::time::{Duration, Instant};

/// How long a process's job id is trusted without reading its environment again.
const TTL: Duration = Duration::from_secs(5);
/// Cached processes beyond which the cache is cleared (bounds memory).
const MAX_CACHED: usize = 4096;
/// Most bytes of a process's environment read (the kernel allows a few MiB).
const ENVIRON_MAX: u64 = 1 << 20;
/// Longest a request waits for a process's environment to be read.
pub const ENV_WAIT: Duration = Duration::from_millis(100);
/// Environment reads queued behind a blocked one before requests stop waiting at all.
const ENV_QUEUE: usize = 8;

/// The default `jobid_var`.
pub const DEFAULT_JOBID_VAR: &str = "SLURM_JOB_ID";
/// The default `jobid_name`.
pub const DEFAULT_JOBID_NAME: &str = "%e.%u";

/// Cached job ids by (pid, uid), with when each was derived.
type Cache = HashMap<(u32, u32), (Option<Arc<str>>, Instant)>;

/// How job ids are derived, and a per-pid cache of them.
pub struct JobIds {
    var: String,
    name: String,
    host: String,
    cache: Mutex<Cache>,
    env: EnvReader,
}

/// The environment could not be read in time (see the module doc).
struct EnvUnavailable;

/// Reads `var` from processes' environments on a thread of its own.
struct EnvReader {
    asks: Mutex<SyncSender<EnvAsk>>,
}

struct EnvAsk {
    pid: u32,
    var: String,
    answer: SyncSender<Option<String>>,
}

impl EnvReader {
    /// Starts the thread, which answers with `read` (a process's variable).
    fn start(read: fn(u32, &str) -> Option<String>) -> Self {
        let (tx, rx) = mpsc::sync_channel::<EnvAsk>(ENV_QUEUE);
        // The thread ends when the reader (the only sender) is dropped.
        let spawned = std::thread::Builder::new()
            .name("weft-jobid-env".into())
            .spawn(move || {
                for ask in rx {
                    // The asker may have stopped waiting; then the answer is dropped.
                    let _ = ask.answer.send(read(ask.pid, &ask.var));
                }
            });
        if let Err(e) = spawned {
            // Without the thread every ask fails fast and job ids fall back to jobid_name.
            tracing::warn!(error = %e, "cannot start the job id thread");
        }
        Self {
            asks: Mutex::new(tx),
        }
    }

    /// The value of `var` in the environment of `pid`, waiting at most [`ENV_WAIT`].
    fn get(&self, pid: u32, var: &str) -> Result<Option<String>, EnvUnavailable> {
        let (answer, rx) = mpsc::sync_channel(1);
        let ask = EnvAsk {
            pid,
            var: var.to_string(),
            answer,
        };
        let sent = self.asks.lock().try_send(ask);
        match sent {
            Ok(()) => rx.recv_timeout(ENV_WAIT).map_err(|_| EnvUnavailable),
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => Err(EnvUnavailable),
        }
    }
}

impl JobIds {
    /// Job ids from `var` (see the module doc), falling back to the format `name`.
    pub fn new(var: &str, name: &str) -> Self {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_default();
        Self {
            var: var.to_string(),
            name: name.to_string(),
            host,
            cache: Mutex::new(HashMap::new()),
            env: EnvReader::start(env_value),
        }
    }

    /// The job id for a request from process `pid` running as `uid`/`gid` (`None` for the
    /// kernel's own requests and with `jobid_var=disable`).
    pub fn get(&self, pid: u32, uid: u32, gid: u32) -> Option<Arc<str>> {
        if pid == 0 || self.var == "disable" {
            return None;
        }
        let now = Instant::now();
        {
            let map = self.cache.lock();
            if let Some((id, at)) = map.get(&(pid, uid))
                && now.duration_since(*at) < TTL
            {
                return id.clone();
            }
        }
        let (id, complete) = self.derive(pid, uid, gid);
        let id = id.map(Arc::<str>::from);
        if complete {
            let mut map = self.cache.lock();
            if map.len() >= MAX_CACHED {
                map.clear();
            }
            map.insert((pid, uid), (id.clone(), now));
        }
        id
    }

    /// The job id, and whether the environment was read (a fallback is not cached).
    fn derive(&self, pid: u32, uid: u32, gid: u32) -> (Option<String>, bool) {
        let env = match self.var.as_str() {
            "procname_uid" | "nodelocal" => Ok(None),
            var => self.env.get(pid, var),
        };
        let complete = env.is_ok();
        let env = env.unwrap_or(None);
        let id = match (&env, self.var.as_str()) {
            (Some(v), _) => v.clone(),
            (None, "procname_uid") => self.expand(DEFAULT_JOBID_NAME, pid, uid, gid, None),
            (None, _) => self.expand(&self.name, pid, uid, gid, env.as_deref()),
        };
        let id = weft_rpc::sanitize_jobid(&id);
        ((!id.is_empty()).then_some(id), complete)
    }

    /// Expands a `jobid_name` format for one process whose `jobid_var` value is `var`.
    fn expand(&self, fmt: &str, pid: u32, uid: u32, gid: u32, var: Option<&str>) -> String {
        let mut out = String::new();
        let mut chars = fmt.chars();
        while let Some(c) = chars.next() {
            if c != '%' {
                out.push(c);
                continue;
            }
            match chars.next() {
                Some('e') => out.push_str(&comm(pid).unwrap_or_else(|| "unknown".into())),
                Some('u') => out.push_str(&uid.to_string()),
                Some('g') => out.push_str(&gid.to_string()),
                Some('h') => out.push_str(&self.host),
                Some('p') => out.push_str(&pid.to_string()),
                Some('j') => out.push_str(var.unwrap_or_default()),
                Some('%') => out.push('%'),
                Some(other) => {
                    out.push('%');
                    out.push(other);
                }
                None => out.push('%'),
            }
        }
        out
    }
}

/// The executable name of `pid` (`/proc/<pid>/comm`).
fn comm(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|s| s.trim_end_matches('\n').to_string())
}

/// The value of `var` in the environment of `pid`, if set and not empty.
fn env_value(pid: u32, var: &str) -> Option<String> {
    let f = std::fs::File::open(format!("/proc/{pid}/environ")).ok()?;
    let mut buf = Vec::new();
    f.take(ENVIRON_MAX).read_to_end(&mut buf).ok()?;
    find_var(&buf, var)
}

/// Finds `var=value` in a NUL-separated environment block.
fn find_var(environ: &[u8], var: &str) -> Option<String> {
    environ.split(|&b| b == 0).find_map(|entry| {
        let rest = entry.strip_prefix(var.as_bytes())?.strip_prefix(b"=")?;
        (!rest.is_empty()).then(|| String::from_utf8_lossy(rest).into_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_are_found_in_an_environment_block() {
        let env = b"PATH=/bin\0SLURM_JOB_ID=4242\0SLURM_JOB_ID_X=no\0EMPTY=\0";
        assert_eq!(find_var(env, "SLURM_JOB_ID").as_deref(), Some("4242"));
        assert_eq!(find_var(env, "EMPTY"), None);
        assert_eq!(find_var(env, "SLURM"), None);
        assert_eq!(find_var(b"", "X"), None);
    }

    #[test]
    fn this_process_gets_its_variable_or_the_fallback() {
        let pid = std::process::id();
        // PATH is set in any test environment; the variable below is not.
        let by_path = JobIds::new("PATH", DEFAULT_JOBID_NAME);
        assert_eq!(
            by_path.get(pid, 1000, 1000).as_deref(),
            std::env::var("PATH")
                .ok()
                .map(|p| weft_rpc::sanitize_jobid(&p))
                .as_deref()
        );
        let fallback = JobIds::new("WEFT_NO_SUCH_VARIABLE_SET", DEFAULT_JOBID_NAME);
        let want = format!("{}.1000", comm(pid).unwrap());
        assert_eq!(fallback.get(pid, 1000, 7).as_deref(), Some(want.as_str()));
        let fmt = JobIds::new("nodelocal", "job-%u-%g-%p-%%");
        assert_eq!(
            fmt.get(pid, 5, 6).as_deref(),
            Some(format!("job-5-6-{pid}-%").as_str())
        );
        assert_eq!(JobIds::new("disable", "%e").get(pid, 0, 0), None);
        assert_eq!(by_path.get(0, 0, 0), None, "the kernel's own requests");
    }

    #[test]
    fn a_read_that_blocks_gives_up_instead_of_blocking_requests() {
        // Stands for /proc/<pid>/environ of a process inside execve.
        fn stuck(_: u32, _: &str) -> Option<String> {
            std::thread::sleep(Duration::from_secs(3600));
            None
        }
        let r = EnvReader::start(stuck);
        assert!(r.get(1, "SLURM_JOB_ID").is_err());
        // Asks queue behind the stuck one until the queue is full, then fail at once.
        for _ in 0..ENV_QUEUE + 2 {
            assert!(r.get(1, "SLURM_JOB_ID").is_err());
        }
        let ok = EnvReader::start(|pid, var| Some(format!("{pid}-{var}")));
        assert_eq!(ok.get(7, "V").ok().flatten().as_deref(), Some("7-V"));
    }
}
