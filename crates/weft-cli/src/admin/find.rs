//! `weft find PATH... [PREDICATES]`: like `lfs find`, evaluated from bulk directory scans
//! on the MDTs (`ScanDir`: a page of entries with attributes and layouts per request, many
//! directories in flight at once), never one `stat` per file through the mount.
//!
//! Predicates (each also with a single dash, as in `lfs find`): `--type f|d|l|p|s|c|b`,
//! `--name GLOB`, `--size [+-]N[kMGT]`, `--mtime [+-]DAYS`, `--stripe-count [+-]N`,
//! `--stripe-size [+-]N[kMGT]`, `--pool NAME`, `--ost LIST`, `--mdt LIST`, `--maxdepth N`,
//! `--print0`. Sizes and days round up to the unit and compare like GNU find (`+N` more,
//! `-N` less, `N` exactly). Layout predicates match a file if any component matches.

use super::fspath::{self, FsPath};
use super::stripe::{parse_ost_list, parse_size};
use anyhow::{Context, Result, bail};
use clap::Args;
use std::io::Write;
use std::sync::Arc;
use tokio::task::JoinSet;
use weft_client::Client;
use weft_proto::Fid;
use weft_proto::layout::Layout;
use weft_proto::mdt::{Attr, Credentials, FileKind, ScanEntry};

/// Directories scanned at once.
const SCANS_IN_FLIGHT: usize = 16;

/// Flags of `weft find`, parsed by hand (predicates take one dash or two).
#[derive(Args, Debug)]
#[command(disable_help_flag = true)]
pub struct FindArgs {
    /// `PATH... [--type T] [--name GLOB] [--size [+-]N] [--mtime [+-]N] [--stripe-count N]
    /// [--stripe-size N] [--pool P] [--ost N] [--mdt N] [--maxdepth N] [--print0]`
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    pub args: Vec<String>,
}

/// How a number compares: `+N`, `-N` or `N`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmp {
    /// More than.
    Gt(u64),
    /// Less than.
    Lt(u64),
    /// Exactly.
    Eq(u64),
}

impl Cmp {
    fn holds(self, v: u64) -> bool {
        match self {
            Cmp::Gt(n) => v > n,
            Cmp::Lt(n) => v < n,
            Cmp::Eq(n) => v == n,
        }
    }
}

/// A size comparison: the value in `unit`s, rounded up, compared with the number given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SizeCmp {
    cmp: Cmp,
    unit: u64,
}

impl SizeCmp {
    fn parse(s: &str) -> Result<Self> {
        let (ctor, rest): (fn(u64) -> Cmp, &str) = match s.as_bytes().first() {
            Some(b'+') => (Cmp::Gt, &s[1..]),
            Some(b'-') => (Cmp::Lt, &s[1..]),
            _ => (Cmp::Eq, s),
        };
        let unit = match rest.chars().last().map(|c| c.to_ascii_uppercase()) {
            Some('K' | 'M' | 'G' | 'T') => parse_size(&format!("1{}", &rest[rest.len() - 1..]))?,
            _ => 1,
        };
        let n = parse_size(rest)? / unit;
        Ok(Self { cmp: ctor(n), unit })
    }

    fn holds(self, bytes: u64) -> bool {
        self.cmp.holds(bytes.div_ceil(self.unit))
    }
}

/// The parsed predicates.
#[derive(Debug, Default)]
pub struct Predicates {
    kind: Option<FileKind>,
    name: Option<String>,
    size: Option<SizeCmp>,
    mtime: Option<Cmp>,
    stripe_count: Option<Cmp>,
    stripe_size: Option<SizeCmp>,
    pool: Option<String>,
    osts: Option<Vec<u32>>,
    mdts: Option<Vec<u32>>,
    maxdepth: Option<u32>,
    print0: bool,
}

const FIND_USAGE: &str = "usage: weft find PATH... [--type f|d|l|p|s|c|b] [--name GLOB] \
[--size [+-]N[kMGT]] [--mtime [+-]DAYS] [--stripe-count [+-]N] [--stripe-size [+-]N[kMGT]] \
[--pool NAME] [--ost LIST] [--mdt LIST] [--maxdepth N] [--print0]";

fn parse_count(s: &str) -> Result<Cmp> {
    let (ctor, rest): (fn(u64) -> Cmp, &str) = match s.as_bytes().first() {
        Some(b'+') => (Cmp::Gt, &s[1..]),
        Some(b'-') => (Cmp::Lt, &s[1..]),
        _ => (Cmp::Eq, s),
    };
    Ok(ctor(
        rest.parse()
            .with_context(|| format!("'{s}' is not a number"))?,
    ))
}

/// Splits `find`'s arguments into paths and predicates.
pub fn parse_find(args: &[String]) -> Result<(Vec<String>, Predicates)> {
    let mut paths = Vec::new();
    let mut p = Predicates::default();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if !a.starts_with('-') || a == "-" {
            paths.push(a.clone());
            continue;
        }
        let flag = a.trim_start_matches('-');
        if flag == "print0" || flag == "0" {
            p.print0 = true;
            continue;
        }
        if flag == "help" || flag == "h" {
            bail!("{FIND_USAGE}");
        }
        let v = it
            .next()
            .with_context(|| format!("{a} needs a value\n{FIND_USAGE}"))?;
        match flag {
            "type" | "t" => {
                p.kind = Some(match v.as_str() {
                    "f" => FileKind::Regular,
                    "d" => FileKind::Directory,
                    "l" => FileKind::Symlink,
                    "p" => FileKind::Fifo,
                    "s" => FileKind::Socket,
                    "c" => FileKind::CharDevice,
                    "b" => FileKind::BlockDevice,
                    _ => bail!("unknown type '{v}' (f, d, l, p, s, c or b)"),
                })
            }
            "name" | "n" => p.name = Some(v.clone()),
            "size" | "s" => p.size = Some(SizeCmp::parse(v)?),
            "mtime" | "M" => p.mtime = Some(parse_count(v)?),
            "stripe-count" | "stripe_count" | "c" => p.stripe_count = Some(parse_count(v)?),
            "stripe-size" | "stripe_size" | "S" => p.stripe_size = Some(SizeCmp::parse(v)?),
            "pool" => p.pool = Some(v.clone()),
            "ost" | "obd" | "O" => p.osts = Some(parse_ost_list(v)?),
            "mdt" | "m" => p.mdts = Some(parse_ost_list(v)?),
            "maxdepth" => {
                p.maxdepth = Some(v.parse().with_context(|| format!("'{v}' is not a depth"))?)
            }
            _ => bail!("unknown predicate '{a}'\n{FIND_USAGE}"),
        }
    }
    if paths.is_empty() {
        bail!("no path given\n{FIND_USAGE}");
    }
    Ok((paths, p))
}

/// Shell glob matching of a name (`*`, `?`, `[abc]`, `[a-z]`, `[!x]`), like fnmatch(3)
/// without flags.
pub fn glob_match(pat: &[u8], name: &[u8]) -> bool {
    let (mut p, mut n) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match pat.get(p) {
            Some(b'*') => {
                star = Some((p, n));
                p += 1;
                continue;
            }
            Some(b'?') => {
                p += 1;
                n += 1;
                continue;
            }
            Some(b'[') => {
                if let Some((ok, len)) = class_match(&pat[p..], name[n])
                    && ok
                {
                    p += len;
                    n += 1;
                    continue;
                }
            }
            Some(&c) if c == name[n] => {
                p += 1;
                n += 1;
                continue;
            }
            _ => {}
        }
        match star {
            Some((sp, sn)) => {
                p = sp + 1;
                n = sn + 1;
                star = Some((sp, sn + 1));
            }
            None => return false,
        }
    }
    pat[p..].iter().all(|&c| c == b'*')
}

/// Matches `c` against the bracket expression at the start of `pat`: (matched, length).
fn class_match(pat: &[u8], c: u8) -> Option<(bool, usize)> {
    let mut i = 1;
    let negate = matches!(pat.get(i), Some(b'!' | b'^'));
    if negate {
        i += 1;
    }
    let mut matched = false;
    let mut first = true;
    loop {
        let &x = pat.get(i)?;
        if x == b']' && !first {
            return Some((matched != negate, i + 1));
        }
        first = false;
        if pat.get(i + 1) == Some(&b'-') && pat.get(i + 2).is_some_and(|&e| e != b']') {
            let e = pat[i + 2];
            matched |= x <= c && c <= e;
            i += 3;
        } else {
            matched |= x == c;
            i += 1;
        }
    }
}

impl Predicates {
    fn matches(&self, name: &[u8], attr: &Attr, layout: Option<&Layout>, mdt: u32) -> bool {
        if self.kind.is_some_and(|k| k != attr.kind) {
            return false;
        }
        if let Some(g) = &self.name
            && !glob_match(g.as_bytes(), name)
        {
            return false;
        }
        if self.size.is_some_and(|s| !s.holds(attr.size)) {
            return false;
        }
        if let Some(m) = self.mtime {
            let now = weft_proto::Timestamp::now().sec;
            let age = u64::try_from(now.saturating_sub(attr.mtime.sec)).unwrap_or(0);
            if !m.holds(age / 86400) {
                return false;
            }
        }
        if let Some(m) = &self.mdts
            && !m.contains(&mdt)
        {
            return false;
        }
        let layout_preds = self.stripe_count.is_some()
            || self.stripe_size.is_some()
            || self.pool.is_some()
            || self.osts.is_some();
        if !layout_preds {
            return true;
        }
        let Some(l) = layout else { return false };
        let comps = &l.components;
        if let Some(c) = self.stripe_count
            && !comps.iter().any(|x| {
                let n = if x.is_instantiated() {
                    x.osts.len() as u64
                } else {
                    u64::try_from(x.stripe_count).unwrap_or(u64::MAX)
                };
                c.holds(n)
            })
        {
            return false;
        }
        if let Some(s) = self.stripe_size
            && !comps.iter().any(|x| s.holds(x.stripe_size))
        {
            return false;
        }
        if let Some(p) = &self.pool
            && !comps.iter().any(|x| x.pool.as_deref() == Some(p.as_str()))
        {
            return false;
        }
        if let Some(o) = &self.osts
            && !comps.iter().any(|x| x.osts.iter().any(|i| o.contains(i)))
        {
            return false;
        }
        true
    }
}

/// `weft find`.
pub async fn run(args: FindArgs) -> Result<()> {
    let (paths, preds) = parse_find(&args.args)?;
    let preds = Arc::new(preds);
    let cred = Arc::new(fspath::my_credentials());
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let sep = if preds.print0 { b'\0' } else { b'\n' };
    let mut errors = 0usize;
    for path in &paths {
        let p = Arc::new(fspath::resolve(path)?);
        let client = fspath::connect_client(&p).await?;
        let top = fspath::stat(&client, &p, &cred).await?;
        let mdt = mdt_index(&client, top.fid);
        let name = p
            .inner
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .as_bytes()
            .to_vec();
        let top_layout = if preds.stripe_count.is_some()
            || preds.stripe_size.is_some()
            || preds.pool.is_some()
            || preds.osts.is_some()
        {
            match client.layout_of(top.fid).await {
                Ok(weft_client::LayoutOf::File(l)) => l,
                _ => None,
            }
        } else {
            None
        };
        if preds.matches(&name, &top, top_layout.as_ref(), mdt) {
            out.write_all(p.display(&p.inner).as_bytes())?;
            out.write_all(&[sep])?;
        }
        if top.kind != FileKind::Directory || preds.maxdepth == Some(0) {
            continue;
        }
        errors += walk(&client, &p, top.fid, &preds, &cred, &mut out, sep).await?;
    }
    out.flush()?;
    if errors > 0 {
        bail!("{errors} directories could not be read");
    }
    Ok(())
}

fn mdt_index(client: &Client, fid: Fid) -> u32 {
    client.cluster().mdt_of(fid).map_or(0, |m| m.index())
}

/// One directory's whole listing, page by page.
async fn scan_all(client: &Client, fid: Fid, cred: &Credentials) -> Result<Vec<ScanEntry>> {
    let mut all = Vec::new();
    let mut cookie = 0;
    loop {
        let (page, eof) = client.scan_dir(fid, cookie, cred).await?;
        let last = page.last().map(|e| e.entry.cookie);
        all.extend(page);
        match last {
            Some(c) if !eof => cookie = c,
            _ => return Ok(all),
        }
    }
}

/// Walks the tree under `root` with up to [`SCANS_IN_FLIGHT`] directory scans at once,
/// printing matches as they come; returns how many directories failed.
async fn walk(
    client: &Arc<Client>,
    p: &FsPath,
    root: Fid,
    preds: &Arc<Predicates>,
    cred: &Arc<Credentials>,
    out: &mut impl Write,
    sep: u8,
) -> Result<usize> {
    let mut queue: Vec<(Fid, String, u32)> =
        vec![(root, p.inner.trim_end_matches('/').to_string(), 1)];
    let mut running: JoinSet<(String, u32, Result<Vec<ScanEntry>>)> = JoinSet::new();
    let mut errors = 0;
    loop {
        while running.len() < SCANS_IN_FLIGHT
            && let Some((fid, path, depth)) = queue.pop()
        {
            let (client, cred) = (client.clone(), cred.clone());
            running.spawn(async move {
                let r = scan_all(&client, fid, &cred).await;
                (path, depth, r)
            });
        }
        let Some(done) = running.join_next().await else {
            break;
        };
        let (path, depth, entries) = done.context("scan task failed")?;
        let entries = match entries {
            Ok(e) => e,
            Err(e) => {
                eprintln!("weft find: {}: {e:#}", p.display(&path));
                errors += 1;
                continue;
            }
        };
        for e in entries {
            let Some(attr) = &e.entry.attr else { continue };
            let child = format!("{path}/{}", String::from_utf8_lossy(&e.entry.name));
            let mdt = mdt_index(client, e.entry.fid);
            if preds.matches(&e.entry.name, attr, e.layout.as_ref(), mdt) {
                out.write_all(p.display(&child).as_bytes())?;
                out.write_all(&[sep])?;
            }
            if e.entry.kind == FileKind::Directory && preds.maxdepth.is_none_or(|m| depth < m) {
                queue.push((e.entry.fid, child, depth + 1));
            }
        }
    }
    Ok(errors)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_like_fnmatch() {
        for (pat, name, want) in [
            ("*.bin", "a.bin", true),
            ("*.bin", "a.bin.x", false),
            ("a?c", "abc", true),
            ("a?c", "ac", false),
            ("[a-c]x*", "bxyz", true),
            ("[!a-c]x", "bx", false),
            ("[]]", "]", true),
            ("*a*b*", "xxaxxbxx", true),
            ("", "", true),
            ("*", "", true),
            ("[", "[", false),
        ] {
            assert_eq!(
                glob_match(pat.as_bytes(), name.as_bytes()),
                want,
                "{pat} {name}"
            );
        }
    }

    #[test]
    fn sizes_round_up_to_their_unit() {
        let s = SizeCmp::parse("+1M").unwrap();
        assert!(!s.holds(1 << 20));
        assert!(s.holds((1 << 20) + 1));
        let s = SizeCmp::parse("-4k").unwrap();
        assert!(s.holds(3 * 1024));
        assert!(!s.holds(3 * 1024 + 1));
        assert_eq!(SizeCmp::parse("100").unwrap().cmp, Cmp::Eq(100));
        assert!(SizeCmp::parse("x").is_err());
    }

    #[test]
    fn predicates_parse_with_one_or_two_dashes() {
        let args: Vec<String> = ["/m", "-type", "f", "--name", "*.x", "--ost", "1,3-4", "-0"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let (paths, p) = parse_find(&args).unwrap();
        assert_eq!(paths, vec!["/m"]);
        assert_eq!(p.kind, Some(FileKind::Regular));
        assert_eq!(p.osts, Some(vec![1, 3, 4]));
        assert!(p.print0);
        assert!(parse_find(&["--name".to_string()]).is_err());
        assert!(parse_find(&["/m".to_string(), "--bogus".to_string(), "1".to_string()]).is_err());
    }
}
