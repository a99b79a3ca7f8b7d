//! Which files a persistent client cache takes: a rule of conditions joined by commas,
//! all of which must hold (`size>1M,path=/data/*,uid=1000`), as Lustre's PCC rules.
//!
//! - `size>N`, `size<N`, `size>=N`, `size<=N` (suffixes K, M, G, T: powers of 1024): the
//!   file's size at open; ignored for files being created (read-write caches);
//! - `path=/DIR/*` (or `path=/DIR`): files anywhere below directory `/DIR` of the file
//!   system (a path inside the mount, from its root); resolved to the directory's FID when
//!   the cache is added, and matched against the directories the mount found the file in;
//! - `uid=N`, `gid=N`: the file's owner and group.

use weft_proto::Fid;

/// A size comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cmp {
    Gt,
    Ge,
    Lt,
    Le,
}

/// One condition of a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Cond {
    Size(Cmp, u64),
    /// A directory by path, and its FID once resolved.
    Below(String, Option<Fid>),
    Uid(u32),
    Gid(u32),
}

/// A parsed rule (no condition: every file).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rule {
    conds: Vec<Cond>,
}

/// What a rule is matched against.
#[derive(Debug, Clone, Copy)]
pub struct Facts<'a> {
    /// The size at open; `None` for a file being created.
    pub size: Option<u64>,
    /// The file's owner.
    pub uid: u32,
    /// The file's group.
    pub gid: u32,
    /// The directories the file is in, nearest first, up to the root.
    pub ancestors: &'a [Fid],
}

/// Parses `4096`, `1K`, `1M`, `2G`, `1T` (powers of 1024).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (digits, shift) = match s.as_bytes().last().map(u8::to_ascii_uppercase) {
        Some(b'K') => (&s[..s.len() - 1], 10),
        Some(b'M') => (&s[..s.len() - 1], 20),
        Some(b'G') => (&s[..s.len() - 1], 30),
        Some(b'T') => (&s[..s.len() - 1], 40),
        _ => (s, 0),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("bad size {s:?} (a number with K, M, G or T)"))?;
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("size {s:?} is too large"))
}

impl Rule {
    /// Parses a rule; an empty string takes every file.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut conds = Vec::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let cond = if let Some(v) = part.strip_prefix("size>=") {
                Cond::Size(Cmp::Ge, parse_size(v)?)
            } else if let Some(v) = part.strip_prefix("size<=") {
                Cond::Size(Cmp::Le, parse_size(v)?)
            } else if let Some(v) = part.strip_prefix("size>") {
                Cond::Size(Cmp::Gt, parse_size(v)?)
            } else if let Some(v) = part.strip_prefix("size<") {
                Cond::Size(Cmp::Lt, parse_size(v)?)
            } else if let Some(v) = part.strip_prefix("path=") {
                let dir = v.strip_suffix("/*").unwrap_or(v).trim_end_matches('/');
                if !v.starts_with('/') || dir.contains('*') {
                    return Err(format!(
                        "bad path {v:?}: an absolute directory of the file system, as /DIR or /DIR/*"
                    ));
                }
                Cond::Below(
                    if dir.is_empty() {
                        "/".into()
                    } else {
                        dir.into()
                    },
                    None,
                )
            } else if let Some(v) = part.strip_prefix("uid=") {
                Cond::Uid(v.parse().map_err(|_| format!("bad uid {v:?}"))?)
            } else if let Some(v) = part.strip_prefix("gid=") {
                Cond::Gid(v.parse().map_err(|_| format!("bad gid {v:?}"))?)
            } else {
                return Err(format!(
                    "unknown condition {part:?} (size>N, size<N, path=/DIR/*, uid=N, gid=N)"
                ));
            };
            conds.push(cond);
        }
        Ok(Self { conds })
    }

    /// The directory paths the rule names, to be resolved to FIDs.
    pub fn paths(&self) -> Vec<String> {
        self.conds
            .iter()
            .filter_map(|c| match c {
                Cond::Below(p, _) => Some(p.clone()),
                _ => None,
            })
            .collect()
    }

    /// Records the FID `path` resolved to.
    pub fn resolve(&mut self, path: &str, fid: Fid) {
        for c in &mut self.conds {
            if let Cond::Below(p, f) = c
                && p == path
            {
                *f = Some(fid);
            }
        }
    }

    /// Whether a file with `facts` is taken.
    pub fn matches(&self, facts: &Facts<'_>) -> bool {
        self.conds.iter().all(|c| match *c {
            Cond::Size(cmp, n) => facts.size.is_none_or(|s| match cmp {
                Cmp::Gt => s > n,
                Cmp::Ge => s >= n,
                Cmp::Lt => s < n,
                Cmp::Le => s <= n,
            }),
            Cond::Below(_, fid) => fid.is_some_and(|d| facts.ancestors.contains(&d)),
            Cond::Uid(u) => facts.uid == u,
            Cond::Gid(g) => facts.gid == g,
        })
    }
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self
            .conds
            .iter()
            .map(|c| match c {
                Cond::Size(cmp, n) => {
                    let op = match cmp {
                        Cmp::Gt => ">",
                        Cmp::Ge => ">=",
                        Cmp::Lt => "<",
                        Cmp::Le => "<=",
                    };
                    format!("size{op}{n}")
                }
                Cond::Below(p, _) => format!("path={}/*", p.trim_end_matches('/')),
                Cond::Uid(u) => format!("uid={u}"),
                Cond::Gid(g) => format!("gid={g}"),
            })
            .collect();
        if parts.is_empty() {
            f.write_str("(every file)")
        } else {
            f.write_str(&parts.join(","))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::pcc::test_fid as fid;

    #[test]
    fn conditions_parse_and_all_must_hold() {
        let mut r = Rule::parse("size>1M, path=/data/*,uid=7").unwrap();
        assert_eq!(r.paths(), vec!["/data".to_string()]);
        r.resolve("/data", fid(5));
        let ancestors = [fid(9), fid(5), Fid::ROOT];
        let facts = Facts {
            size: Some(2 << 20),
            uid: 7,
            gid: 0,
            ancestors: &ancestors,
        };
        assert!(r.matches(&facts));
        assert!(!r.matches(&Facts {
            size: Some(1 << 20),
            ..facts
        }));
        assert!(!r.matches(&Facts { uid: 8, ..facts }));
        assert!(!r.matches(&Facts {
            ancestors: &[fid(9), Fid::ROOT],
            ..facts
        }));
        // A file being created has no size yet: size conditions do not apply.
        assert!(r.matches(&Facts {
            size: None,
            ..facts
        }));
        assert_eq!(r.to_string(), "size>1048576,path=/data/*,uid=7");
    }

    #[test]
    fn an_unresolved_path_matches_nothing_and_an_empty_rule_everything() {
        let r = Rule::parse("path=/x").unwrap();
        let facts = Facts {
            size: Some(1),
            uid: 0,
            gid: 0,
            ancestors: &[Fid::ROOT],
        };
        assert!(!r.matches(&facts));
        assert!(Rule::parse("").unwrap().matches(&facts));
    }

    #[test]
    fn bad_rules_are_refused_with_a_reason() {
        for bad in [
            "size>lots",
            "size>99999999999T",
            "path=data",
            "path=/a*/b",
            "color=red",
            "uid=-1",
        ] {
            assert!(Rule::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_size("4k"), Ok(4096));
    }
}
