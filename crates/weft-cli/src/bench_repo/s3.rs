//! The benchmark's side of the object store: populating the bucket, the copy-then-read
//! download and the direct ranged-GET reader (`object_store`, as the data mover uses).

use super::data::{self, Moved, Obj};
use anyhow::{Context, Result, bail};
use bytes::Bytes;
use futures::stream::{self, FuturesUnordered, StreamExt, TryStreamExt};
use object_store::aws::AmazonS3Builder;
use object_store::path::Path as StorePath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;
use tokio::io::AsyncWriteExt;

/// Objects larger than this are uploaded in parts.
pub const MULTIPART_ABOVE: u64 = 64 << 20;
/// The size of one uploaded part.
pub const PART_SIZE: u64 = 16 << 20;
/// Parts of one object uploaded at a time.
pub const PARTS_IN_FLIGHT: usize = 8;
/// Ranged GETs of one object in flight during the copy-then-read download.
pub const COPY_RANGES_IN_FLIGHT: usize = 4;

/// The bucket, reached with the environment's credentials (`AWS_ACCESS_KEY_ID`...).
#[derive(Clone)]
pub struct Bucket {
    store: Arc<dyn ObjectStore>,
    prefix: String,
}

impl Bucket {
    /// A path-style client of `bucket` at `endpoint`.
    pub fn open(endpoint: &str, bucket: &str, region: &str, prefix: &str) -> Result<Self> {
        let store = AmazonS3Builder::from_env()
            .with_endpoint(endpoint)
            .with_allow_http(endpoint.starts_with("http://"))
            .with_bucket_name(bucket)
            .with_region(region)
            .with_virtual_hosted_style_request(false)
            .build()
            .with_context(|| format!("cannot make an S3 client for {endpoint}, bucket {bucket}"))?;
        Ok(Self {
            store: Arc::new(store),
            prefix: prefix.trim_matches('/').to_string(),
        })
    }

    fn key(&self, o: &Obj) -> StorePath {
        if self.prefix.is_empty() {
            StorePath::from(o.rel.as_str())
        } else {
            StorePath::from(format!("{}/{}", self.prefix, o.rel))
        }
    }

    /// PUTs every object with its pattern: `in_flight` objects at a time, or for objects
    /// above [`MULTIPART_ABOVE`] multipart uploads of [`PART_SIZE`] parts,
    /// [`PARTS_IN_FLIGHT`] parts per object and `in_flight / PARTS_IN_FLIGHT` objects at a
    /// time.
    pub async fn populate(&self, objs: &[Obj], in_flight: usize) -> Result<Moved> {
        let start = Instant::now();
        let big = objs.iter().any(|o| o.size > MULTIPART_ABOVE);
        let objects_at_once = if big {
            (in_flight / PARTS_IN_FLIGHT).max(1)
        } else {
            in_flight.max(1)
        };
        let bytes = stream::iter(objs)
            .map(|o| self.put_one(o))
            .buffer_unordered(objects_at_once)
            .try_fold(0u64, |sum, n| async move { Ok(sum + n) })
            .await?;
        Ok(Moved {
            files: objs.len() as u64,
            bytes,
            elapsed: start.elapsed(),
        })
    }

    async fn put_one(&self, o: &Obj) -> Result<u64> {
        let key = self.key(o);
        if o.size <= MULTIPART_ABOVE {
            let body = Bytes::from(data::pattern(o.seed, 0, o.size as usize));
            self.store
                .put(&key, PutPayload::from(body))
                .await
                .with_context(|| format!("PUT {key}"))?;
            return Ok(o.size);
        }
        let mut upload = self
            .store
            .put_multipart(&key)
            .await
            .with_context(|| format!("starting the upload of {key}"))?;
        let mut parts = FuturesUnordered::new();
        let mut result = Ok(());
        let mut offset = 0;
        while offset < o.size && result.is_ok() {
            let len = (o.size - offset).min(PART_SIZE);
            let body = Bytes::from(data::pattern(o.seed, offset, len as usize));
            // Spawned, so that the parts go on while this task makes the next one.
            parts.push(tokio::spawn(upload.put_part(PutPayload::from(body))));
            offset += len;
            while parts.len() >= PARTS_IN_FLIGHT || (offset >= o.size && !parts.is_empty()) {
                if let Some(done) = parts.next().await
                    && let Err(e) = part_result(done)
                {
                    result = Err(e);
                    break;
                }
            }
        }
        match result {
            Ok(()) => {
                upload
                    .complete()
                    .await
                    .with_context(|| format!("completing the upload of {key}"))?;
                Ok(o.size)
            }
            Err(e) => {
                let _ = upload.abort().await;
                Err(e.context(format!("uploading {key}")))
            }
        }
    }

    /// Copy-then-read's download: GETs every object into a file below `dir`, `workers`
    /// objects at a time; objects larger than `range` in ranged GETs of `range` bytes,
    /// [`COPY_RANGES_IN_FLIGHT`] in flight, written in order.
    pub async fn download(
        &self,
        objs: &[Obj],
        dir: &Path,
        workers: usize,
        range: u64,
    ) -> Result<Moved> {
        let mut dirs: Vec<_> = objs
            .iter()
            .filter_map(|o| dir.join(&o.rel).parent().map(Path::to_path_buf))
            .collect();
        dirs.sort_unstable();
        dirs.dedup();
        for d in &dirs {
            std::fs::create_dir_all(d).with_context(|| format!("cannot create {}", d.display()))?;
        }
        let start = Instant::now();
        let bytes = stream::iter(objs)
            .map(|o| self.download_one(o, dir, range))
            .buffer_unordered(workers.max(1))
            .try_fold(0u64, |sum, n| async move { Ok(sum + n) })
            .await?;
        Ok(Moved {
            files: objs.len() as u64,
            bytes,
            elapsed: start.elapsed(),
        })
    }

    async fn download_one(&self, o: &Obj, dir: &Path, range: u64) -> Result<u64> {
        let key = self.key(o);
        let path = dir.join(&o.rel);
        let mut f = tokio::fs::File::create(&path)
            .await
            .with_context(|| format!("cannot create {}", path.display()))?;
        let mut got = 0u64;
        if o.size <= range {
            let body = self
                .store
                .get(&key)
                .await
                .with_context(|| format!("GET {key}"))?
                .bytes()
                .await
                .with_context(|| format!("GET {key}"))?;
            f.write_all(&body).await?;
            got += body.len() as u64;
        } else {
            let mut pieces = stream::iter(ranges(o.size, range))
                .map(|r| {
                    let store = self.store.clone();
                    let key = key.clone();
                    async move { store.get_range(&key, r).await }
                })
                .buffered(COPY_RANGES_IN_FLIGHT);
            while let Some(piece) = pieces.next().await {
                let piece = piece.with_context(|| format!("ranged GET of {key}"))?;
                f.write_all(&piece).await?;
                got += piece.len() as u64;
            }
        }
        f.flush().await?;
        Ok(got)
    }

    /// The direct reader: ranged GETs of `range` bytes of every object into memory,
    /// `in_flight` at a time, each checked against its pattern and dropped.
    pub async fn direct(&self, objs: &[Obj], in_flight: usize, range: u64) -> Result<Moved> {
        let pieces: Vec<(&Obj, Range<u64>)> = objs
            .iter()
            .flat_map(|o| ranges(o.size, range).map(move |r| (o, r)))
            .collect();
        let start = Instant::now();
        let bytes = stream::iter(pieces)
            .map(|(o, r)| {
                let store = self.store.clone();
                let key = self.key(o);
                async move {
                    let body = store
                        .get_range(&key, r.clone())
                        .await
                        .with_context(|| format!("ranged GET of {key}"))?;
                    if body.len() as u64 != r.end - r.start {
                        bail!("{key}: {} bytes for the range {r:?}", body.len());
                    }
                    if let Some(at) = data::check(o.seed, r.start, &body) {
                        bail!("{key}: the byte at offset {at} differs from its pattern");
                    }
                    Ok(body.len() as u64)
                }
            })
            .buffer_unordered(in_flight.max(1))
            .try_fold(0u64, |sum, n| async move { Ok(sum + n) })
            .await?;
        Ok(Moved {
            files: objs.len() as u64,
            bytes,
            elapsed: start.elapsed(),
        })
    }
}

fn part_result(done: Result<object_store::Result<()>, tokio::task::JoinError>) -> Result<()> {
    match done {
        Ok(r) => r.context("uploading a part"),
        Err(e) => bail!("a part's upload task failed: {e}"),
    }
}

/// `[0, size)` in pieces of `range` bytes.
fn ranges(size: u64, range: u64) -> impl Iterator<Item = Range<u64>> {
    let range = range.max(1);
    (0..size.div_ceil(range)).map(move |i| i * range..((i + 1) * range).min(size))
}

#[cfg(test)]
mod tests {
    #[test]
    fn ranges_cover_the_object() {
        let r: Vec<_> = super::ranges(20, 8).collect();
        assert_eq!(r, vec![0..8, 8..16, 16..20]);
        assert_eq!(super::ranges(8, 8).count(), 1);
    }
}
