//! The client's tunables, readable and settable at run time under Lustre's names.
//!
//! One client has one value per knob (not one per OST), named with the client's instance
//! (file system name and a short id): `osc.weft-1a2b3c4d.max_rpcs_in_flight`,
//! `llite.weft-1a2b3c4d.max_read_ahead_mb`. Patterns with
//! `*` and `?` match those names (`osc.*.max_rpcs_in_flight`).

use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes in a page, the unit of `max_pages_per_rpc`.
pub const PAGE_SIZE: u64 = 4096;

/// One knob: its Lustre name, allowed range and current value.
struct Knob {
    prefix: &'static str,
    name: &'static str,
    min: u64,
    max: u64,
    value: AtomicU64,
}

/// The client's knobs.
pub struct ClientParams {
    instance: String,
    knobs: [Knob; 9],
}

/// Index of each knob in [`ClientParams`].
#[derive(Debug, Clone, Copy)]
#[repr(usize)]
pub enum Param {
    /// `osc.*.max_rpcs_in_flight`: RPCs one OST may have in flight from this client.
    MaxRpcsInFlight = 0,
    /// `osc.*.max_pages_per_rpc`: largest bulk RPC, in 4 KiB pages.
    MaxPagesPerRpc = 1,
    /// `osc.*.max_dirty_mb`: buffered (not yet written) data the client may hold.
    MaxDirtyMb = 2,
    /// `llite.*.max_read_ahead_mb`: read-ahead data in flight or cached, over all files.
    MaxReadAheadMb = 3,
    /// `llite.*.max_read_ahead_per_file_mb`: the read-ahead window of one file.
    MaxReadAheadPerFileMb = 4,
    /// `llite.*.max_cached_mb`: the client's data cache, and in a FUSE mount also the
    /// kernel's page cache of its files (each bounded on its own).
    MaxCachedMb = 5,
    /// `llite.*.statahead_max`: most entries of one directory read ahead of lookups
    /// (0 turns statahead off; see [`crate::statahead`]).
    StataheadMax = 6,
    /// `llite.*.pcc_rw_wait_s`: how long an open (or a size read) of a file held in
    /// another client's read-write PCC waits for that client to copy it back before it
    /// fails with ETIMEDOUT (see [`crate::pcc`]).
    PccRwWaitS = 7,
    /// `llite.*.restore_ahead`: released (HSM) files of a directory restored in the
    /// background ahead of a reader's opens, and at most that many at once (0 turns it
    /// off; see [`crate::restore_ahead`]).
    RestoreAhead = 8,
}

/// A bad parameter name or value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParamError {
    /// No knob matches.
    #[error("no client parameter matches '{0}'")]
    Unknown(String),
    /// The value is not a number in range.
    #[error("{name}: '{value}' is not a number from {min} to {max}")]
    Range {
        /// The knob.
        name: String,
        /// What was given.
        value: String,
        /// Smallest allowed.
        min: u64,
        /// Largest allowed.
        max: u64,
    },
}

impl ClientParams {
    /// The defaults (Lustre's, where they make sense for one client); `instance` names the
    /// client in every parameter (`osc.INSTANCE.max_dirty_mb`).
    pub fn new(instance: &str) -> Self {
        let k = |prefix, name, min, max, value| Knob {
            prefix,
            name,
            min,
            max,
            value: AtomicU64::new(value),
        };
        Self {
            instance: instance.to_string(),
            knobs: [
                k("osc", "max_rpcs_in_flight", 1, 256, 8),
                k("osc", "max_pages_per_rpc", 16, 4096, 1024),
                k("osc", "max_dirty_mb", 1, 1 << 20, 512),
                // Room for four streams' whole windows: with 64, four readers of their own
                // files shared one window's worth and read 1.3 GB/s where 256 read 1.8
                // (`weft up`, this VM's virtio disk).
                k("llite", "max_read_ahead_mb", 0, 1 << 20, 256),
                k("llite", "max_read_ahead_per_file_mb", 0, 1 << 20, 64),
                k("llite", "max_cached_mb", 1, 1 << 22, 1024),
                k("llite", "statahead_max", 0, 1 << 20, 32768),
                k("llite", "pcc_rw_wait_s", 1, 86_400, 60),
                // A store answers a GET after tens of milliseconds (s3s-fs here: ~30 ms
                // for 128 KiB) and a restore adds an OST sync and an MDT commit, so a
                // first epoch of small files wants many in flight (docs/perf.md,
                // "Restore-ahead": 64 read 843 files/s where none read 156).
                k("llite", "restore_ahead", 0, 1024, 64),
            ],
        }
    }

    fn knob(&self, p: Param) -> &Knob {
        &self.knobs[p as usize]
    }

    /// The current value of a knob.
    pub fn get(&self, p: Param) -> u64 {
        self.knob(p).value.load(Ordering::Relaxed)
    }

    /// The RPC size in bytes.
    pub fn rpc_bytes(&self) -> u64 {
        self.get(Param::MaxPagesPerRpc) * PAGE_SIZE
    }

    /// A knob in bytes (for the `_mb` ones).
    pub fn mb(&self, p: Param) -> u64 {
        self.get(p) << 20
    }

    /// The instance name of the client these knobs belong to.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    fn full_name(&self, k: &Knob) -> String {
        format!("{}.{}.{}", k.prefix, self.instance, k.name)
    }

    /// Every knob whose full name matches `pattern`, with its value.
    pub fn list(&self, pattern: &str) -> Vec<(String, u64)> {
        self.knobs
            .iter()
            .map(|k| (self.full_name(k), k.value.load(Ordering::Relaxed)))
            .filter(|(n, _)| glob_match(pattern, n))
            .collect()
    }

    /// Sets every knob matching `pattern` to `value`; returns the names set.
    pub fn set(&self, pattern: &str, value: &str) -> Result<Vec<String>, ParamError> {
        let matching: Vec<&Knob> = self
            .knobs
            .iter()
            .filter(|k| glob_match(pattern, &self.full_name(k)))
            .collect();
        if matching.is_empty() {
            return Err(ParamError::Unknown(pattern.to_string()));
        }
        let mut parsed = Vec::new();
        for k in &matching {
            let v = value
                .trim()
                .parse::<u64>()
                .ok()
                .filter(|v| (k.min..=k.max).contains(v));
            let v = v.ok_or_else(|| ParamError::Range {
                name: self.full_name(k),
                value: value.to_string(),
                min: k.min,
                max: k.max,
            })?;
            parsed.push(v);
        }
        for (k, v) in matching.iter().zip(parsed) {
            k.value.store(v, Ordering::Relaxed);
        }
        Ok(matching.iter().map(|k| self.full_name(k)).collect())
    }
}

/// Whether `name` matches the shell-style `pattern` (`*` any run, `?` one character).
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some((pi, ni));
                pi += 1;
            }
            Some(&c) if c == '?' || Some(&c) == n.get(ni) => {
                pi += 1;
                ni += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    pi = sp + 1;
                    ni = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    p.get(pi..)
        .is_none_or(|rest| rest.iter().all(|&c| c == '*'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knobs_are_read_and_set_by_lustre_names() {
        let p = ClientParams::new("weft");
        assert_eq!(p.get(Param::MaxRpcsInFlight), 8);
        assert_eq!(p.rpc_bytes(), 4 << 20);
        assert_eq!(
            p.set("osc.*.max_rpcs_in_flight", "16").unwrap(),
            vec!["osc.weft.max_rpcs_in_flight"]
        );
        assert_eq!(p.get(Param::MaxRpcsInFlight), 16);
        assert_eq!(p.list("llite.*").len(), 6);
        assert!(matches!(
            p.set("osc.*.max_rpcs_in_flight", "0"),
            Err(ParamError::Range { .. })
        ));
        assert!(matches!(
            p.set("osc.*.max_rpcs_in_flight", "many"),
            Err(ParamError::Range { .. })
        ));
        assert!(matches!(p.set("nope.*", "1"), Err(ParamError::Unknown(_))));
        assert_eq!(
            p.get(Param::MaxRpcsInFlight),
            16,
            "a refused value changes nothing"
        );
        assert!(glob_match("a*b*c", "aXbYbZc") && !glob_match("a*b", "acd"));
    }
}
