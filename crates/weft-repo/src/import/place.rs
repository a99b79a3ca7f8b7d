//! Where a listed key lands in the namespace ([`KeyPlace`]), and the keys that cannot be
//! imported.

use super::NAME_MAX;
use object_store::path::Path;
use weft_proto::hsm::KEY_MAX;
/// Where a key (below the prefix) lands: a directory relative to the linked one (`""`
/// for the linked directory itself, components joined by `/`) and a name in it (`None`
/// for a directory marker).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyPlace {
    /// The directory, relative to the linked one.
    pub dir: String,
    /// The entry's name; `None`: the key only makes the directory.
    pub name: Option<String>,
}

/// Maps a key relative to the prefix to its place, or says why it cannot be imported:
/// an empty, `.` or `..` component, or a name over [`NAME_MAX`] bytes. A key ending in
/// `/` is a directory marker; `""` and `/` are the linked directory's own marker.
pub fn place_of(rel: &str) -> Result<KeyPlace, String> {
    let (body, marker) = match rel.strip_suffix('/') {
        Some(b) => (b, true),
        None => (rel, false),
    };
    if body.is_empty() {
        return if marker || rel.is_empty() {
            Ok(KeyPlace {
                dir: String::new(),
                name: None,
            })
        } else {
            Err("empty key".into())
        };
    }
    for c in body.split('/') {
        match c {
            "" => return Err("empty path component".into()),
            "." | ".." => return Err(format!("{c:?} path component")),
            c if c.len() > NAME_MAX => {
                return Err(format!("a name of {} bytes (over {NAME_MAX})", c.len()));
            }
            _ => {}
        }
    }
    if marker {
        return Ok(KeyPlace {
            dir: body.to_string(),
            name: None,
        });
    }
    let (dir, name) = body.rsplit_once('/').unwrap_or(("", body));
    Ok(KeyPlace {
        dir: dir.to_string(),
        name: Some(name.to_string()),
    })
}

/// `key` relative to a repository's `prefix` (empty: the whole bucket), by whole
/// components: `None` when it is not under it.
pub(crate) fn rel_key<'a>(prefix: &str, key: &'a str) -> Option<&'a str> {
    if prefix.is_empty() {
        return Some(key);
    }
    key.strip_prefix(prefix)?.strip_prefix('/')
}

/// The key of `location` relative to `prefix`, mapped to its place.
pub(super) fn classify(prefix: &Path, location: &str) -> Result<KeyPlace, String> {
    if location.len() > KEY_MAX {
        return Err(format!(
            "a key of {} bytes (over {KEY_MAX})",
            location.len()
        ));
    }
    let rel = rel_key(prefix.as_ref(), location)
        .ok_or_else(|| "not under the repository's prefix".to_string())?;
    place_of(rel)
}
