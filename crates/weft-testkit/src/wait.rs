//! Waiting for a condition instead of sleeping a fixed time: a test polls what it waits for
//! (a server coming back, a poller having run) and fails with a message naming it when it
//! does not happen in time.

use std::future::Future;
use std::time::{Duration, Instant};

/// How long [`eventually`] and [`wait_until`] wait before failing the test.
pub const WAIT_LIMIT: Duration = Duration::from_secs(30);

/// How often they ask again.
const POLL: Duration = Duration::from_millis(50);

/// Calls `f` until it succeeds and returns its value; panics naming `what` (with the last
/// error) when it still fails after [`WAIT_LIMIT`].
pub async fn eventually<T, E, F>(what: &str, mut f: impl FnMut() -> F) -> T
where
    E: std::fmt::Debug,
    F: Future<Output = Result<T, E>>,
{
    let deadline = Instant::now() + WAIT_LIMIT;
    loop {
        match f().await {
            Ok(v) => return v,
            Err(e) if Instant::now() > deadline => {
                panic!("{what}: still failing after {WAIT_LIMIT:?}: {e:?}")
            }
            Err(_) => tokio::time::sleep(POLL).await,
        }
    }
}

/// Blocks until `cond` holds; panics naming `what` after [`WAIT_LIMIT`].
pub fn wait_until(what: &str, cond: impl FnMut() -> bool) {
    wait_until_within(what, WAIT_LIMIT, cond);
}

/// [`wait_until`] with another limit (for waits known to take longer, such as gigabytes
/// of objects being destroyed).
pub fn wait_until_within(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "never happened in {limit:?}: {what}"
        );
        std::thread::sleep(POLL);
    }
}

/// Waits (asynchronously) until `cond` holds; panics naming `what` after [`WAIT_LIMIT`].
pub async fn wait_until_async<F: Future<Output = bool>>(what: &str, cond: impl FnMut() -> F) {
    wait_until_async_within(what, WAIT_LIMIT, cond).await;
}

/// [`wait_until_async`] with another limit (waits known to take longer, such as a
/// server's restart and a backoff after it).
pub async fn wait_until_async_within<F: Future<Output = bool>>(
    what: &str,
    limit: Duration,
    mut cond: impl FnMut() -> F,
) {
    let deadline = Instant::now() + limit;
    while !cond().await {
        assert!(
            Instant::now() < deadline,
            "never happened in {limit:?}: {what}"
        );
        tokio::time::sleep(POLL).await;
    }
}
