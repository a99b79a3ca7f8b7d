//! The tokio runtime of this process, and what `fork` does to it.
//!
//! A forked child has the parent's memory but none of its threads: the runtime it
//! inherits has no workers and its connections are the parent's sockets. Each process
//! therefore gets its own runtime, built on first use and again whenever the process id
//! changed since (a DataLoader worker forked after the parent connected). The inherited
//! runtime and clients are leaked in the child, never dropped: dropping would join threads
//! that do not exist there and close sockets the parent still uses.

use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;
use std::sync::Mutex;
use tokio::runtime::Runtime;

/// The runtime and the process it was built in.
struct Current {
    pid: u32,
    rt: &'static Runtime,
}

static CURRENT: Mutex<Option<Current>> = Mutex::new(None);

/// Worker threads of each process's runtime (`WEFTFS_THREADS`, default 2): DataLoaders
/// run many processes, each with its own runtime.
fn worker_threads() -> usize {
    std::env::var("WEFTFS_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n: &usize| n > 0 && n <= 256)
        .unwrap_or(2)
}

/// This process's id.
pub fn pid() -> u32 {
    std::process::id()
}

/// The runtime of this process, built if this process has none yet.
pub fn runtime() -> PyResult<&'static Runtime> {
    let pid = pid();
    // A lock poisoned by a panic elsewhere still holds a usable value.
    let mut cur = CURRENT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(c) = cur.as_ref()
        && c.pid == pid
    {
        return Ok(c.rt);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(worker_threads())
        .thread_name("weftfs")
        .enable_all()
        .build()
        .map_err(|e| PyOSError::new_err(format!("cannot start the weftfs runtime: {e}")))?;
    // Leaked on purpose: the runtime lives as long as the process (see the module header).
    let rt: &'static Runtime = Box::leak(Box::new(rt));
    *cur = Some(Current { pid, rt });
    Ok(rt)
}
