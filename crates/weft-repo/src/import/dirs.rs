//! The directories an import makes below the linked one (`mkdir -p` as root), remembered
//! by relative path so that each is made or looked up once.

use super::DIR_CACHE_MAX;
use crate::meta::DEFAULT_DIR_MODE;
use parking_lot::Mutex;
use std::collections::HashMap;
use weft_client::{Client, ClientError};
use weft_proto::mdt::{Credentials, FileKind};
use weft_proto::{Errno, Fid, WireError};

/// Directories below the linked one by relative path, made as needed (`mkdir -p`).
pub(super) struct DirCache {
    root: Fid,
    map: Mutex<HashMap<String, Fid>>,
}

impl DirCache {
    pub(super) fn new(root: Fid) -> Self {
        Self {
            root,
            map: Mutex::new(HashMap::new()),
        }
    }

    /// The FID of directory `rel` (relative, `/`-separated), made with its missing
    /// ancestors as root; EEXIST from a racing maker is fine. ENOTDIR when a component
    /// is something else.
    pub(super) async fn fid(
        &self,
        client: &Client,
        rel: &str,
        cred: &Credentials,
    ) -> Result<Fid, ClientError> {
        if rel.is_empty() {
            return Ok(self.root);
        }
        if let Some(f) = self.map.lock().get(rel) {
            return Ok(*f);
        }
        // The deepest known ancestor, then the rest one component at a time.
        let mut known = (0, self.root);
        {
            let map = self.map.lock();
            let mut at = rel.len();
            while let Some(i) = rel[..at].rfind('/') {
                if let Some(f) = map.get(&rel[..i]) {
                    known = (i + 1, *f);
                    break;
                }
                at = i;
            }
        }
        let (start, mut parent) = known;
        let mut end = start;
        for name in rel[start..].split('/') {
            end += name.len();
            let fid = match client
                .mkdir(parent, name.as_bytes(), DEFAULT_DIR_MODE, cred)
                .await
            {
                Ok(a) => a.fid,
                Err(e) if e.errno() == Errno::Exist => {
                    let a = client.lookup(parent, name.as_bytes(), cred).await?;
                    if a.kind != FileKind::Directory {
                        return Err(ClientError::Remote(WireError::new(
                            Errno::NotDir,
                            format!("{:?} is not a directory", &rel[..end]),
                        )));
                    }
                    a.fid
                }
                Err(e) => return Err(e),
            };
            {
                let mut map = self.map.lock();
                if map.len() >= DIR_CACHE_MAX {
                    map.clear();
                }
                map.insert(rel[..end].to_string(), fid);
            }
            parent = fid;
            end += 1;
        }
        Ok(parent)
    }
}
