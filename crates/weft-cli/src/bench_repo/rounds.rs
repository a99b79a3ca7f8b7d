//! The repeated rounds of `weft bench-repo --rounds N`: the lazy first epoch and the
//! direct reader measured again, in turn, so the goals compare medians rather than one
//! sample each (on a small VM either figure swings by a fifth from one run to the next).
//!
//! Before each repeated first epoch every file of the dataset is released again (its OST
//! objects destroyed, as the import left it) and the dataset's straight copy is read
//! through the mount, which pushes the files' pages out of the mount's data cache (a
//! release keeps the data version, so cached pages stay valid). The MDTs'
//! `hsm_restore_bytes` must then have grown by at least the bytes the round read: a
//! round that loaded less from the store read from a cache, and is an error, not a
//! figure.

use super::data::Obj;
use anyhow::{Context, Result, bail};
use futures::{StreamExt, TryStreamExt};
use weft_client::{Client, Cluster};
use weft_proto::mdt::Credentials;

/// Releases in flight at once.
const RELEASES_IN_FLIGHT: usize = 64;

/// Releases every file of `objs` below the linked directory `linked` (an absolute path in
/// the file system).
pub async fn release_all(client: &Client, linked: &str, objs: &[Obj]) -> Result<()> {
    let root = Credentials::root();
    futures::stream::iter(objs)
        .map(|o| {
            let path = format!("{linked}/{}", o.rel);
            let root = &root;
            async move {
                let attr = client
                    .resolve(&path, false, root)
                    .await
                    .with_context(|| format!("cannot find {path}"))?;
                client
                    .hsm_release(attr.fid, None, root)
                    .await
                    .with_context(|| format!("cannot release {path}"))?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(RELEASES_IN_FLIGHT)
        .try_collect::<()>()
        .await
}

/// Bytes the MDTs' restore coordinators loaded so far (`mdt.*.hsm_restore_bytes`).
pub async fn restored_bytes(cluster: &Cluster) -> Result<u64> {
    let found =
        crate::admin::param::collect(cluster, &["mdt.*.hsm_restore_bytes".to_string()]).await?;
    if found.is_empty() {
        bail!("no MDT answered with hsm_restore_bytes");
    }
    found.iter().try_fold(0u64, |sum, (name, value)| {
        let v: u64 = value
            .trim()
            .parse()
            .with_context(|| format!("{name} = {value:?} is not a number"))?;
        Ok(sum.saturating_add(v))
    })
}

/// The median of `values` (the mean of the middle two for an even count; 0 for none).
pub fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn the_median_of_odd_and_even_counts() {
        assert_eq!(median(&mut []), 0.0);
        assert_eq!(median(&mut [3.0]), 3.0);
        assert_eq!(median(&mut [5.0, 1.0, 3.0]), 3.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
    }
}
