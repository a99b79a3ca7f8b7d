//! An S3-compatible server in the test process, with fault injection: the `s3s` crate's
//! S3 protocol (signature checks included) over `s3s-fs`'s file-backed store, served by
//! hyper on 127.0.0.1 from a runtime of its own, so a test can kill it (every connection
//! dropped, the port closed) and start it again on the same port with the same data.
//!
//! A [`Faults`] handle, shared by the server and the test, holds rules that apply to the
//! requests whose path (`/BUCKET/KEY`) contains a given text, with a given method, for
//! the next N matching requests or until cleared: answer `503 SlowDown` (S3's throttling),
//! `500 InternalError`, stall for a while then serve, or reset the connection without an
//! answer. It counts the requests it saw and the faults it injected.

use anyhow::{Context, Result};
use hyper::body::Incoming;
use hyper::service::Service;
use hyper::{Request, StatusCode};
use parking_lot::Mutex;
use s3s::auth::SimpleAuth;
use s3s::service::{S3Service, S3ServiceBuilder};
use s3s::{Body, HttpError, HttpResponse};
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// What a fault does to a matching request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// `503 Slow Down` with S3's `SlowDown` error (throttling).
    SlowDown,
    /// `500 Internal Error` with S3's `InternalError`.
    InternalError,
    /// Waits this long, then serves the request.
    Stall(Duration),
    /// Closes the connection without an answer.
    Reset,
}

/// Which requests a rule applies to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Matching {
    /// Only requests whose path (`/BUCKET/KEY`) contains this.
    pub path_contains: Option<String>,
    /// Only requests with this method (`GET`, `PUT`, `HEAD`, `POST`, `DELETE`).
    pub method: Option<String>,
}

impl Matching {
    /// Every request.
    pub fn all() -> Self {
        Self::default()
    }

    /// Requests with `method` whose path contains `text`.
    pub fn path(method: &str, text: &str) -> Self {
        Self {
            path_contains: Some(text.to_string()),
            method: Some(method.to_string()),
        }
    }

    fn matches(&self, method: &str, path: &str) -> bool {
        self.method.as_deref().is_none_or(|m| m == method)
            && self
                .path_contains
                .as_deref()
                .is_none_or(|t| path.contains(t))
    }
}

struct Rule {
    fault: Fault,
    matching: Matching,
    /// Matching requests it still applies to; `None`: until cleared.
    left: Option<u64>,
}

/// The fault rules and counters of one server (see the module header).
#[derive(Default)]
pub struct Faults {
    rules: Mutex<Vec<Rule>>,
    requests: AtomicU64,
    injected: AtomicU64,
    /// Requests seen, by path, for [`Faults::requests_matching`].
    seen: Mutex<Vec<(String, String)>>,
}

/// Most requests remembered for [`Faults::requests_matching`].
const SEEN_MAX: usize = 100_000;

impl Faults {
    /// Adds a rule for the next `times` matching requests (`None`: until [`Faults::clear`]).
    pub fn add(&self, fault: Fault, matching: Matching, times: Option<u64>) {
        self.rules.lock().push(Rule {
            fault,
            matching,
            left: times,
        });
    }

    /// Removes every rule.
    pub fn clear(&self) {
        self.rules.lock().clear();
    }

    /// Requests seen so far.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Faults injected so far.
    pub fn injected(&self) -> u64 {
        self.injected.load(Ordering::Relaxed)
    }

    /// Requests seen so far that `m` matches (of the last 100,000).
    pub fn requests_matching(&self, m: &Matching) -> u64 {
        self.seen
            .lock()
            .iter()
            .filter(|(method, path)| m.matches(method, path))
            .count() as u64
    }

    /// The fault for this request, if a rule applies (its count goes down by one).
    fn take(&self, method: &str, path: &str) -> Option<Fault> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        {
            let mut seen = self.seen.lock();
            if seen.len() < SEEN_MAX {
                seen.push((method.to_string(), path.to_string()));
            }
        }
        let mut rules = self.rules.lock();
        let i = rules
            .iter()
            .position(|r| r.left != Some(0) && r.matching.matches(method, path))?;
        let r = &mut rules[i];
        if let Some(n) = &mut r.left {
            *n -= 1;
        }
        let fault = r.fault;
        rules.retain(|r| r.left != Some(0));
        self.injected.fetch_add(1, Ordering::Relaxed);
        Some(fault)
    }
}

/// The S3 service with the faults in front of it.
#[derive(Clone)]
struct Faulty {
    inner: S3Service,
    faults: Arc<Faults>,
}

/// An S3 error answer.
fn error_answer(status: StatusCode, code: &str, message: &str) -> HttpResponse {
    let xml = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code>\
         <Message>{message}</Message></Error>"
    );
    let mut r = HttpResponse::new(Body::from(xml));
    *r.status_mut() = status;
    r
}

#[derive(Debug, thiserror::Error)]
#[error("connection reset by fault injection")]
struct ResetByFault;

impl Service<Request<Incoming>> for Faulty {
    type Response = HttpResponse;
    type Error = HttpError;
    type Future = Pin<Box<dyn Future<Output = Result<HttpResponse, HttpError>> + Send>>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        let fault = self.faults.take(req.method().as_str(), req.uri().path());
        let inner = self.inner.clone();
        Box::pin(async move {
            match fault {
                Some(Fault::SlowDown) => Ok(error_answer(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "SlowDown",
                    "Please reduce your request rate.",
                )),
                Some(Fault::InternalError) => Ok(error_answer(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "InternalError",
                    "We encountered an internal error. Please try again.",
                )),
                Some(Fault::Reset) => Err(HttpError::new(Box::new(ResetByFault))),
                Some(Fault::Stall(d)) => {
                    tokio::time::sleep(d).await;
                    inner.call(req.map(Body::from)).await
                }
                None => inner.call(req.map(Body::from)).await,
            }
        })
    }
}

/// The in-process server: its runtime while it runs.
pub(crate) struct InProcess {
    port: u16,
    root: PathBuf,
    access_key: String,
    secret_key: String,
    faults: Arc<Faults>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl InProcess {
    /// Serves `root` (buckets are its directories) on 127.0.0.1:`port` (0: any free
    /// port) with these credentials.
    pub(crate) fn start(
        root: &Path,
        port: u16,
        access_key: &str,
        secret_key: &str,
    ) -> Result<Self> {
        let mut s = Self {
            port,
            root: root.to_path_buf(),
            access_key: access_key.to_string(),
            secret_key: secret_key.to_string(),
            faults: Arc::new(Faults::default()),
            runtime: None,
        };
        s.serve()?;
        Ok(s)
    }

    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    pub(crate) fn faults(&self) -> &Arc<Faults> {
        &self.faults
    }

    /// Starts serving (again) on the same port.
    pub(crate) fn serve(&mut self) -> Result<()> {
        self.kill();
        let fs = s3s_fs::FileSystem::new(&self.root)
            .map_err(|e| anyhow::anyhow!("s3s-fs on {}: {e:?}", self.root.display()))?;
        let mut b = S3ServiceBuilder::new(fs);
        b.set_auth(SimpleAuth::from_single(
            self.access_key.as_str(),
            self.secret_key.as_str(),
        ));
        let service = Faulty {
            inner: b.build(),
            faults: self.faults.clone(),
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("s3-test")
            .enable_all()
            .build()?;
        let listener = {
            let _enter = runtime.enter();
            let socket = tokio::net::TcpSocket::new_v4()?;
            socket.set_reuseaddr(true)?;
            socket
                .bind(SocketAddr::from(([127, 0, 0, 1], self.port)))
                .with_context(|| format!("binding 127.0.0.1:{}", self.port))?;
            socket.listen(1024)?
        };
        self.port = listener.local_addr()?.port();
        runtime.spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let service = service.clone();
                tokio::spawn(async move {
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, service)
                        .await;
                });
            }
        });
        self.runtime = Some(runtime);
        Ok(())
    }

    /// Stops serving: the port is closed and every connection dropped.
    pub(crate) fn kill(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_apply_to_matching_requests_a_number_of_times() {
        let f = Faults::default();
        f.add(Fault::SlowDown, Matching::path("GET", "/b/k1"), Some(2));
        f.add(Fault::Reset, Matching::all(), None);
        assert_eq!(f.take("GET", "/b/k1"), Some(Fault::SlowDown));
        assert_eq!(f.take("PUT", "/b/k1"), Some(Fault::Reset));
        assert_eq!(f.take("GET", "/b/k1"), Some(Fault::SlowDown));
        assert_eq!(f.take("GET", "/b/k1"), Some(Fault::Reset));
        f.clear();
        assert_eq!(f.take("GET", "/b/k1"), None);
        assert_eq!((f.requests(), f.injected()), (5, 4));
        assert_eq!(f.requests_matching(&Matching::path("GET", "k1")), 4);
    }
}
