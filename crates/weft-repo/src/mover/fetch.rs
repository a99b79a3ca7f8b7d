//! Ranged GETs of an archived object: retried while the store fails transiently, refused
//! when the object is no longer the one imported (its entity tag and size).

use super::Mover;
use crate::store::RepoStore;
use bytes::Bytes;
use futures::StreamExt;
use object_store::path::Path;
use object_store::{GetOptions, GetRange};
use std::sync::atomic::Ordering;
use weft_proto::{Errno, WireError};
/// Why fetching one sub-range failed.
enum FetchError {
    /// Worth another attempt (the store failed, the body was cut short).
    Transient(String),
    /// Final (the object is gone or changed, access refused).
    Final(WireError),
}

impl Mover {
    /// Bytes `[a, b)` of the object, retried with backoff while the failure is transient.
    pub(super) async fn fetch(
        &self,
        store: &RepoStore,
        key: &Path,
        archive: &weft_proto::hsm::ArchiveRef,
        a: u64,
        b: u64,
    ) -> Result<Bytes, WireError> {
        // Doubling without a ceiling: the attempts are few (`MoverConfig::attempts`).
        let mut backoff = weft_rpc::Backoff::new(self.config.backoff, std::time::Duration::MAX);
        let mut attempt = 1;
        loop {
            match self.fetch_once(store, key, archive, a, b).await {
                Ok(data) => return Ok(data),
                Err(FetchError::Final(e)) => return Err(e),
                Err(FetchError::Transient(msg)) if attempt < self.config.attempts => {
                    tracing::debug!(url = store.url(), key = %key, a, b, attempt, error = %msg, "fetch failed; trying again");
                    self.counters.retries.fetch_add(1, Ordering::Relaxed);
                    backoff.wait().await;
                    attempt += 1;
                }
                Err(FetchError::Transient(msg)) => {
                    return Err(WireError::new(
                        Errno::Io,
                        format!(
                            "{}: fetching bytes {a}..{b} of {key} failed {attempt} times: {msg}",
                            store.url()
                        ),
                    ));
                }
            }
        }
    }

    async fn fetch_once(
        &self,
        store: &RepoStore,
        key: &Path,
        archive: &weft_proto::hsm::ArchiveRef,
        a: u64,
        b: u64,
    ) -> Result<Bytes, FetchError> {
        let opts = GetOptions {
            if_match: archive.etag.as_deref().map(quoted),
            range: Some(GetRange::Bounded(a..b)),
            ..Default::default()
        };
        let stale = |why: String| {
            self.counters.stale.fetch_add(1, Ordering::Relaxed);
            FetchError::Final(WireError::new(
                Errno::Stale,
                format!(
                    "{}: object {key} changed since it was imported ({why})",
                    store.url()
                ),
            ))
        };
        let got = match store.store().get_opts(key, opts).await {
            Ok(got) => got,
            Err(e) => return Err(classify(store, key, &e, stale)),
        };
        if let (Some(want), Some(have)) = (&archive.etag, &got.meta.e_tag)
            && etag_core(want) != etag_core(have)
        {
            return Err(stale(format!("entity tag {have}, not {want}")));
        }
        if got.meta.size != archive.size {
            return Err(stale(format!(
                "{} bytes, not {}",
                got.meta.size, archive.size
            )));
        }
        if got.range != (a..b) {
            return Err(FetchError::Transient(format!(
                "asked for bytes {a}..{b}, the store answers {:?}",
                got.range
            )));
        }
        // Into a page-aligned buffer, which the OST writes with `O_DIRECT` as it is: an
        // in-process call to an OST (the OSS's mover, `weft up`) would otherwise copy the
        // bytes once more to align them.
        let want = usize::try_from(b - a).map_err(|_| {
            FetchError::Final(WireError::new(
                Errno::Inval,
                format!("a range of {} bytes", b - a),
            ))
        })?;
        let (mut buf, pad) = self.buffers.take(want);
        let mut body = got.into_stream();
        while let Some(part) = body.next().await {
            let part = match part {
                Ok(p) => p,
                Err(e) => return Err(classify(store, key, &e, stale)),
            };
            self.counters
                .bytes_fetched
                .fetch_add(part.len() as u64, Ordering::Relaxed);
            if buf.len() - pad + part.len() > want {
                return Err(FetchError::Transient(format!(
                    "asked for {want} bytes at {a}, got more"
                )));
            }
            buf.extend_from_slice(&part);
        }
        if buf.len() - pad != want {
            return Err(FetchError::Transient(format!(
                "asked for {want} bytes at {a}, got {}",
                buf.len() - pad
            )));
        }
        Ok(self.buffers.freeze(buf, pad))
    }
}

/// Whether an object store error is worth another attempt, as the error to answer.
fn classify(
    store: &RepoStore,
    key: &Path,
    e: &object_store::Error,
    stale: impl FnOnce(String) -> FetchError,
) -> FetchError {
    use object_store::Error as E;
    match e {
        E::Precondition { .. } => stale("its entity tag differs".into()),
        E::NotFound { .. } => FetchError::Final(WireError::new(
            Errno::NoEnt,
            format!("{}: object {key} is gone from the store", store.url()),
        )),
        E::PermissionDenied { .. }
        | E::Unauthenticated { .. }
        | E::InvalidPath { .. }
        | E::NotSupported { .. }
        | E::NotImplemented { .. }
        | E::NotModified { .. }
        | E::UnknownConfigurationKey { .. } => {
            let r = crate::RepoError::store(store.url(), e);
            FetchError::Final(WireError::new(r.errno(), r.to_string()))
        }
        _ => FetchError::Transient(e.to_string()),
    }
}

/// An entity tag without its weak marker and quotes.
pub(super) fn etag_core(tag: &str) -> &str {
    tag.trim().trim_start_matches("W/").trim_matches('"')
}

/// An entity tag as `If-Match` wants it (quoted).
pub(super) fn quoted(tag: &str) -> String {
    let t = tag.trim();
    if t.starts_with('"') || t.starts_with("W/") {
        t.to_string()
    } else {
        format!("\"{t}\"")
    }
}
