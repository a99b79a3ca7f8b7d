//! Paths: resolving `/a/b` to attributes, following symbolic links, and splitting off
//! the last name.

use super::Client;
use crate::error::ClientError;
use weft_proto::mdt::{Attr, Credentials, FileKind};
use weft_proto::{Errno, Fid, WireError};

impl Client {
    /// Resolves an absolute path (`/a/b`) to its attributes, following symbolic links in
    /// the middle of the path and, with `follow`, at its end.
    pub async fn resolve(
        &self,
        path: &str,
        follow: bool,
        cred: &Credentials,
    ) -> Result<Attr, ClientError> {
        let mut stack: Vec<Fid> = Vec::new();
        let mut todo: Vec<Vec<u8>> = path
            .as_bytes()
            .split(|&b| b == b'/')
            .rev()
            .map(<[u8]>::to_vec)
            .collect();
        let mut links = 0;
        let mut attr = self.getattr(Fid::ROOT).await?;
        while let Some(name) = todo.pop() {
            match name.as_slice() {
                b"" | b"." => continue,
                b".." => {
                    let up = stack.pop().unwrap_or(Fid::ROOT);
                    attr = self.getattr(up).await?;
                    continue;
                }
                _ => {}
            }
            if attr.kind != FileKind::Directory {
                return Err(ClientError::Remote(WireError::new(
                    Errno::NotDir,
                    "a path component is not a directory",
                )));
            }
            let next = self.lookup(attr.fid, &name, cred).await?;
            let last = todo.iter().all(|n| n.is_empty() || n == b".");
            if next.kind == FileKind::Symlink && (follow || !last) {
                links += 1;
                if links > 40 {
                    return Err(ClientError::Remote(WireError::new(
                        Errno::Loop,
                        "too many symbolic links",
                    )));
                }
                let target = self.readlink(next.fid).await?;
                if target.first() == Some(&b'/') {
                    stack.clear();
                    attr = self.getattr(Fid::ROOT).await?;
                }
                todo.extend(target.split(|&b| b == b'/').rev().map(<[u8]>::to_vec));
                continue;
            }
            stack.push(attr.fid);
            attr = next;
        }
        Ok(attr)
    }

    /// Splits a path into its parent directory's attributes and the last name.
    pub async fn resolve_parent(
        &self,
        path: &str,
        cred: &Credentials,
    ) -> Result<(Attr, Vec<u8>), ClientError> {
        let trimmed = path.trim_end_matches('/');
        let (dir, name) = trimmed.rsplit_once('/').unwrap_or(("", trimmed));
        if name.is_empty() || name == "." || name == ".." {
            return Err(ClientError::Remote(WireError::new(
                Errno::Inval,
                format!("'{path}' names no entry"),
            )));
        }
        let parent = self
            .resolve(if dir.is_empty() { "/" } else { dir }, true, cred)
            .await?;
        Ok((parent, name.as_bytes().to_vec()))
    }
}
