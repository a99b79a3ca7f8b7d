//! The caller's credentials for each kernel request.
//!
//! The kernel tells a FUSE daemon the caller's fsuid, fsgid and pid, not its supplementary
//! groups; those come from `/proc/<pid>/status`. Reading that file for every request would
//! cost more than many requests themselves, so answers are kept for a short while per pid
//! (and only while the uid and gid still match, since a process may change identity).

use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use weft_proto::mdt::Credentials;

/// How long a process's supplementary groups are trusted without reading them again.
const GROUPS_TTL: Duration = Duration::from_secs(1);
/// Cached processes beyond which the cache is cleared (bounds memory).
const MAX_CACHED: usize = 4096;

struct Cached {
    cred: Credentials,
    at: Instant,
}

/// A short-lived per-pid cache of credentials.
#[derive(Default)]
pub struct CredCache {
    by_pid: Mutex<HashMap<u32, Cached>>,
}

impl CredCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// The credentials of the process `pid` running as `uid`/`gid`.
    pub fn get(&self, uid: u32, gid: u32, pid: u32) -> Credentials {
        // Requests the kernel makes on its own (pid 0) carry no process to ask.
        if pid == 0 {
            return Credentials {
                uid,
                gid,
                groups: Vec::new(),
            };
        }
        let now = Instant::now();
        {
            let map = self.by_pid.lock();
            if let Some(c) = map.get(&pid)
                && c.cred.uid == uid
                && c.cred.gid == gid
                && now.duration_since(c.at) < GROUPS_TTL
            {
                return c.cred.clone();
            }
        }
        let cred = Credentials {
            uid,
            gid,
            groups: read_groups(pid).unwrap_or_default(),
        };
        let mut map = self.by_pid.lock();
        if map.len() >= MAX_CACHED {
            map.clear();
        }
        map.insert(
            pid,
            Cached {
                cred: cred.clone(),
                at: now,
            },
        );
        cred
    }
}

/// The supplementary groups of process `pid` (its `Groups:` line), if it still exists.
pub fn read_groups(pid: u32) -> Option<Vec<u32>> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_groups(&status)
}

fn parse_groups(status: &str) -> Option<Vec<u32>> {
    let line = status.lines().find(|l| l.starts_with("Groups:"))?;
    let groups = line
        .trim_start_matches("Groups:")
        .split_whitespace()
        .filter_map(|g| g.parse().ok())
        .take(weft_proto::GROUPS_MAX)
        .collect();
    Some(groups)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_line_is_parsed() {
        let s = "Name:\tbash\nUid:\t1000\t1000\t1000\t1000\nGroups:\t4 24 1000 \nNgid:\t0\n";
        assert_eq!(parse_groups(s), Some(vec![4, 24, 1000]));
        assert_eq!(parse_groups("Groups:\n"), Some(vec![]));
        assert_eq!(parse_groups("Name: x\n"), None);
    }

    #[test]
    fn own_process_groups_are_read() {
        assert!(read_groups(std::process::id()).is_some());
    }
}
