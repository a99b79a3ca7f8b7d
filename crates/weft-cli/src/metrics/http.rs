//! The HTTP face of a metrics endpoint: `GET /metrics` answered by hyper, one request per
//! connection (the answer closes it), request heads bounded in size and time.

use super::Render;
use anyhow::{Context, Result};
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{CONNECTION, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

/// Largest HTTP request head the endpoint reads before answering (hyper's smallest).
const MAX_REQUEST: usize = 8 << 10;
/// How long a scraper may take to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Serves `GET /metrics` on `addr` until the returned task is aborted.
pub async fn serve<M: Render>(addr: &str, metrics: Arc<M>) -> Result<tokio::task::JoinHandle<()>> {
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen for metrics on {addr}"))?;
    tracing::info!(address = %addr, "Prometheus metrics at /metrics");
    Ok(tokio::spawn(async move {
        loop {
            match listener.accept().await {
                Ok((stream, _)) => {
                    let metrics = metrics.clone();
                    tokio::spawn(async move {
                        let service = hyper::service::service_fn(move |req| {
                            let metrics = metrics.clone();
                            async move { Ok::<_, Infallible>(answer(&req, metrics.as_ref())) }
                        });
                        let served = hyper::server::conn::http1::Builder::new()
                            .timer(TokioTimer::new())
                            .header_read_timeout(REQUEST_TIMEOUT)
                            .max_buf_size(MAX_REQUEST)
                            .keep_alive(false)
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                        if let Err(e) = served {
                            tracing::debug!(error = %e, "metrics request failed");
                        }
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "metrics accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }))
}

/// The answer to one request: the figures for `GET /metrics`, 404 for other paths, 405
/// for other methods.
fn answer<M: Render>(req: &Request<Incoming>, metrics: &M) -> Response<Full<Bytes>> {
    let (status, content_type, body) = match (req.method(), req.uri().path()) {
        (&Method::GET, "/metrics") => (StatusCode::OK, super::CONTENT_TYPE, metrics.render()),
        (&Method::GET, _) => (
            StatusCode::NOT_FOUND,
            "text/plain",
            "try /metrics\n".to_string(),
        ),
        _ => (StatusCode::METHOD_NOT_ALLOWED, "text/plain", String::new()),
    };
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    let headers = resp.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(content_type),
    );
    headers.insert(CONNECTION, hyper::header::HeaderValue::from_static("close"));
    resp
}
