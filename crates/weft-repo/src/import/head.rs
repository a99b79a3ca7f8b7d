//! The HEAD stage: an object's FSx metadata (and a symlink's target) read into the entry
//! to import, and the layout an imported file gets.

use super::{HeadCtx, Headed, IMPORT_STRIPE_SIZE, Job, KeyPlace, SYMLINK_MAX};
use crate::error::RepoError;
use crate::meta::FileMeta;
use object_store::{GetOptions, ObjectMeta, ObjectStoreExt};
use weft_proto::Timestamp;
use weft_proto::hsm::{ArchiveRef, ImportEntry, ImportKind};
use weft_proto::layout::LayoutTemplate;
/// HEADs object `meta` (listed as `seq`, landing at `place`) for its FSx metadata, and
/// reads a symlink's target: the entry to import.
pub(super) async fn head(ctx: &HeadCtx<'_>, seq: u64, place: KeyPlace, meta: ObjectMeta) -> Headed {
    let KeyPlace { dir, name } = place;
    let Some(name) = name else {
        return Headed::Job(Job::Mkdir { seq, dir });
    };
    let key = meta.location.clone();
    let opts = GetOptions {
        head: true,
        ..Default::default()
    };
    let got = match ctx.store.get_opts(&key, opts).await {
        Ok(g) => g,
        // A zero-byte listed object HEAD cannot find is a directory marker `a/b/`,
        // listed as `a/b` (see the module header); any other went away meanwhile.
        Err(object_store::Error::NotFound { .. }) if meta.size == 0 => {
            let dir = if dir.is_empty() {
                name
            } else {
                format!("{dir}/{name}")
            };
            return Headed::Job(Job::Mkdir { seq, dir });
        }
        Err(object_store::Error::NotFound { .. }) => return Headed::Gone(seq),
        Err(e) => {
            tracing::warn!(%key, "not imported: {}", RepoError::store(ctx.url, &e));
            return Headed::Failed(seq);
        }
    };
    let lm = &got.meta.last_modified;
    let modified = timestamp_of(lm.timestamp(), lm.timestamp_subsec_nanos());
    let fm = FileMeta::decode(&got.attributes, modified);
    let size = got.meta.size;
    if fm.is_dir() && size == 0 {
        let dir = if dir.is_empty() {
            name
        } else {
            format!("{dir}/{name}")
        };
        return Headed::Job(Job::Mkdir { seq, dir });
    }
    let (kind, target) = if fm.is_symlink() {
        if size == 0 || size > SYMLINK_MAX {
            tracing::warn!(%key, size, "not imported: a symlink target of this size");
            return Headed::Failed(seq);
        }
        match ctx.store.get(&key).await {
            Ok(g) => match g.bytes().await {
                Ok(b) if !b.is_empty() && b.len() as u64 <= SYMLINK_MAX => {
                    (ImportKind::Symlink, b.to_vec())
                }
                Ok(b) => {
                    tracing::warn!(%key, len = b.len(), "not imported: bad symlink target");
                    return Headed::Failed(seq);
                }
                Err(e) => {
                    tracing::warn!(%key, "not imported: {}", RepoError::store(ctx.url, &e));
                    return Headed::Failed(seq);
                }
            },
            Err(object_store::Error::NotFound { .. }) => return Headed::Gone(seq),
            Err(e) => {
                tracing::warn!(%key, "not imported: {}", RepoError::store(ctx.url, &e));
                return Headed::Failed(seq);
            }
        }
    } else {
        (ImportKind::Regular, Vec::new())
    };
    let layout = match kind {
        ImportKind::Regular => layout_for(size, ctx.chunk_size, ctx.osts),
        ImportKind::Symlink => None,
    };
    let entry = ImportEntry {
        name: name.into_bytes(),
        kind,
        mode: fm.perm(),
        uid: fm.uid,
        gid: fm.gid,
        atime: fm.atime,
        mtime: fm.mtime,
        target,
        archive: ArchiveRef {
            key: key.to_string(),
            etag: got.meta.e_tag.clone(),
            size,
            modified,
        },
        layout,
    };
    Headed::Job(Job::Entries {
        dir,
        entries: vec![(seq, entry)],
    })
}

/// [`head`], answering the key's directory too.
pub(super) async fn head_in(
    ctx: &HeadCtx<'_>,
    seq: u64,
    place: KeyPlace,
    meta: ObjectMeta,
) -> (String, Headed) {
    let dir = place.dir.clone();
    (dir, head(ctx, seq, place, meta).await)
}

/// The layout of an imported file of `size` bytes: `None` up to `chunk_size` (the
/// directory's default applies), else RAID0 over `ceil(size / chunk_size)` OSTs (at most
/// `osts`) in stripes of [`IMPORT_STRIPE_SIZE`].
pub fn layout_for(size: u64, chunk_size: u64, osts: u32) -> Option<LayoutTemplate> {
    if chunk_size == 0 || size <= chunk_size {
        return None;
    }
    let count = size.div_ceil(chunk_size).min(u64::from(osts.max(1)));
    let count = i32::try_from(count).unwrap_or(i32::MAX);
    Some(LayoutTemplate::raid0(count, IMPORT_STRIPE_SIZE, -1))
}

/// A store time (`ObjectMeta::last_modified`: its seconds and nanoseconds) as a
/// file-system timestamp.
pub(crate) fn timestamp_of(sec: i64, nsec: u32) -> Timestamp {
    Timestamp {
        sec,
        nsec: nsec.min(999_999_999),
    }
}
