//! `weft setstripe` and `weft getstripe`, with `lfs`'s flags: layouts of files and default
//! layouts of directories, plain RAID0 or composite (PFL, `-E END ...` per component).

use super::fspath::{self, FsPath};
use anyhow::{Context, Result, bail};
use clap::Args;
use serde::Serialize;
use weft_client::{Client, LayoutOf};
use weft_proto::layout::{Compression, EOF, Layout, LayoutTemplate, TemplateComponent};
use weft_proto::mdt::{Credentials, FileKind};

/// Flags of `weft setstripe`, parsed by hand: `-E` opens a new component and the flags
/// after it describe that component, which a derive parser cannot express.
#[derive(Args, Debug)]
#[command(disable_help_flag = true)]
pub struct SetStripeArgs {
    /// `[-c COUNT] [-S SIZE] [-i INDEX] [-o OST_LIST] [-p POOL] [-Z lz4|none] [-E END ...]
    /// [-d] PATH...`
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    pub args: Vec<String>,
}

/// What `setstripe` was asked to do.
#[derive(Debug, PartialEq, Eq)]
pub struct SetStripe {
    /// The layout (`None` with `-d`: remove a directory's default).
    pub template: Option<LayoutTemplate>,
    /// Whether any layout option was given (`migrate` keeps the current layout if not).
    pub any_option: bool,
    /// The paths.
    pub paths: Vec<String>,
}

const SETSTRIPE_USAGE: &str = "usage: weft setstripe [-c COUNT] [-S SIZE] [-i INDEX] \
[-o OST_LIST] [-p POOL] [-Z|--compress lz4|none] [-E END -c .. -S .. ...] [-d] PATH...";

/// Parses a size with an optional binary suffix (`4M`, `64k`, `1G`, `1048576`).
pub fn parse_size(s: &str) -> Result<u64> {
    let s = s.trim();
    let (num, mult) = match s.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&s[..s.len() - 1], 1u64 << 10),
        Some('M') => (&s[..s.len() - 1], 1 << 20),
        Some('G') => (&s[..s.len() - 1], 1 << 30),
        Some('T') => (&s[..s.len() - 1], 1 << 40),
        _ => (s, 1),
    };
    let n: u64 = num
        .parse()
        .with_context(|| format!("'{s}' is not a size (like 1048576, 64K, 4M, 1G)"))?;
    n.checked_mul(mult)
        .with_context(|| format!("size '{s}' is too large"))
}

/// Parses an OST list: `1,3,5-7` (indices, or names like `weft-OST0002`).
pub fn parse_ost_list(s: &str) -> Result<Vec<u32>> {
    let mut out = Vec::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        let idx = |x: &str| -> Result<u32> {
            let x = x.rsplit_once("OST").map_or(x, |(_, n)| n);
            let parsed = if x.len() == 4 && x.chars().all(|c| c.is_ascii_hexdigit()) {
                u32::from_str_radix(x, 16).ok()
            } else {
                x.parse().ok()
            };
            parsed.with_context(|| format!("'{x}' is not an OST index"))
        };
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (idx(a)?, idx(b)?);
                if b < a || b - a > weft_proto::layout::MAX_STRIPE_COUNT {
                    bail!("bad OST range '{part}'");
                }
                out.extend(a..=b);
            }
            None => out.push(idx(part)?),
        }
    }
    if out.is_empty() {
        bail!("empty OST list");
    }
    Ok(out)
}

/// Parses `setstripe`'s (and `migrate`'s) arguments into a template and paths; `paths`
/// may come back empty.
pub fn parse_setstripe(args: &[String]) -> Result<SetStripe> {
    let mut comps: Vec<TemplateComponent> = Vec::new();
    let mut cur = TemplateComponent {
        end: EOF,
        stripe_offset: -1,
        ..Default::default()
    };
    let mut composite = false;
    let mut delete = false;
    let mut paths = Vec::new();
    let mut it = args.iter();
    let value = |flag: &str, v: Option<&String>| -> Result<String> {
        v.cloned()
            .with_context(|| format!("{flag} needs a value\n{SETSTRIPE_USAGE}"))
    };
    while let Some(a) = it.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
            _ => (a.as_str(), None),
        };
        let mut val = |f: &str| -> Result<String> {
            match &inline {
                Some(v) => Ok(v.clone()),
                None => value(f, it.next()),
            }
        };
        match flag {
            "-c" | "--stripe-count" | "--stripe_count" => {
                let v = val(flag)?;
                cur.stripe_count = v
                    .parse()
                    .with_context(|| format!("'{v}' is not a stripe count"))?;
            }
            "-S" | "--stripe-size" | "--stripe_size" => {
                let v = val(flag)?;
                cur.stripe_size = parse_size(&v)?;
            }
            "-i" | "--stripe-index" | "--stripe_index" | "--stripe-offset" => {
                let v = val(flag)?;
                cur.stripe_offset = v
                    .parse()
                    .with_context(|| format!("'{v}' is not an OST index"))?;
            }
            "-o" | "--ost" | "--ost-list" => cur.ost_list = parse_ost_list(&val(flag)?)?,
            "-p" | "--pool" => cur.pool = Some(val(flag)?),
            "-Z" | "--compress" | "--compr-type" => {
                cur.compress = val(flag)?.parse().map_err(|e: String| anyhow::anyhow!(e))?;
            }
            "-E" | "--component-end" | "--comp-end" => {
                let v = val(flag)?;
                let end = match v.as_str() {
                    "-1" | "eof" | "EOF" => EOF,
                    s => parse_size(s)?,
                };
                if composite {
                    comps.push(std::mem::take(&mut cur));
                } else if cur != default_component() {
                    bail!("options before the first -E are not allowed in a composite layout");
                }
                composite = true;
                cur = TemplateComponent {
                    end,
                    stripe_offset: -1,
                    ..Default::default()
                };
            }
            "-d" | "--delete" => delete = true,
            "-h" | "--help" => bail!("{SETSTRIPE_USAGE}"),
            s if s.starts_with('-') && s.len() > 1 && !s.starts_with("-/") => {
                bail!("unknown option '{s}'\n{SETSTRIPE_USAGE}")
            }
            _ => paths.push(a.clone()),
        }
    }
    comps.push(cur);
    if delete {
        if composite || comps.iter().any(|c| *c != default_component()) {
            bail!("-d takes no layout options");
        }
        return Ok(SetStripe {
            template: None,
            any_option: true,
            paths,
        });
    }
    // An explicit OST list sets the count when none is given; later components inherit
    // count, size, pool and compression from the one before, as in Lustre.
    for i in 0..comps.len() {
        let prev = i.checked_sub(1).and_then(|p| comps.get(p).cloned());
        if let Some(c) = comps.get_mut(i) {
            if c.stripe_count == 0 && !c.ost_list.is_empty() {
                c.stripe_count = i32::try_from(c.ost_list.len()).unwrap_or(i32::MAX);
            }
            if let Some(p) = prev {
                if c.stripe_count == 0 {
                    c.stripe_count = p.stripe_count;
                }
                if c.stripe_size == 0 {
                    c.stripe_size = p.stripe_size;
                }
                if c.pool.is_none() {
                    c.pool = p.pool;
                }
                c.compress = c.compress.or(p.compress);
            }
        }
    }
    let any_option = composite || comps.iter().any(|c| *c != default_component());
    let template = LayoutTemplate { components: comps };
    template
        .validate()
        .map_err(|e| anyhow::anyhow!("bad layout: {e}"))?;
    Ok(SetStripe {
        template: Some(template),
        any_option,
        paths,
    })
}

fn default_component() -> TemplateComponent {
    TemplateComponent {
        end: EOF,
        stripe_offset: -1,
        ..Default::default()
    }
}

/// `weft setstripe`.
pub async fn setstripe(args: SetStripeArgs) -> Result<()> {
    let req = parse_setstripe(&args.args)?;
    if req.paths.is_empty() {
        bail!("no path given\n{SETSTRIPE_USAGE}");
    }
    let cred = fspath::my_credentials();
    for path in &req.paths {
        let p = fspath::resolve(path)?;
        let client = fspath::connect_client(&p).await?;
        setstripe_one(&client, &p, req.template.clone(), &cred)
            .await
            .with_context(|| format!("setstripe {path}"))?;
    }
    Ok(())
}

async fn setstripe_one(
    client: &std::sync::Arc<Client>,
    p: &FsPath,
    template: Option<LayoutTemplate>,
    cred: &Credentials,
) -> Result<()> {
    match client.resolve(&p.inner, true, cred).await {
        Ok(attr) => {
            if attr.kind == FileKind::Regular && template.is_none() {
                bail!("-d applies to directories only");
            }
            Ok(client.set_layout(attr.fid, template, cred).await?)
        }
        Err(e) if e.errno() == weft_proto::Errno::NoEnt => {
            let Some(t) = template else {
                bail!("no such directory");
            };
            let (parent, name) = client.resolve_parent(&p.inner, cred).await?;
            // SAFETY: umask(2) cannot fail; it is set back at once.
            let mask = unsafe {
                let m = libc::umask(0o022);
                libc::umask(m);
                m
            };
            client
                .create_with_layout(parent.fid, &name, 0o666 & !mask, t, cred)
                .await?;
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

/// Flags of `weft getstripe`.
#[derive(Args, Debug)]
pub struct GetStripeArgs {
    /// Only the stripe count.
    #[arg(short = 'c', long = "stripe-count")]
    pub count: bool,
    /// Only the stripe size.
    #[arg(short = 'S', long = "stripe-size")]
    pub size: bool,
    /// Only the first OST index.
    #[arg(short = 'i', long = "stripe-index")]
    pub index: bool,
    /// Only the pool.
    #[arg(short = 'p', long = "pool")]
    pub pool: bool,
    /// YAML-style output for every layout (the composite format).
    #[arg(short = 'y', long = "yaml")]
    pub yaml: bool,
    /// Recurse into directories.
    #[arg(short = 'r', long = "recursive")]
    pub recursive: bool,
    /// A directory's own default only, not its entries.
    #[arg(short = 'd', long = "directory")]
    pub directory: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Files or directories (in a mount, or HOST:PORT:/FSNAME/PATH).
    #[arg(required = true)]
    pub paths: Vec<String>,
}

/// One path's layout, as printed.
#[derive(Debug, Serialize)]
struct Shown {
    path: String,
    #[serde(serialize_with = "fid_string")]
    fid: Option<weft_proto::Fid>,
    #[serde(skip_serializing_if = "Option::is_none")]
    layout: Option<Layout>,
    #[serde(skip_serializing_if = "Option::is_none")]
    default_layout: Option<LayoutTemplate>,
    directory: bool,
}

/// `weft getstripe`.
pub async fn getstripe(args: GetStripeArgs) -> Result<()> {
    let cred = fspath::my_credentials();
    let mut shown = Vec::new();
    for path in &args.paths {
        let p = fspath::resolve(path)?;
        let client = fspath::connect_client(&p).await?;
        let attr = fspath::stat(&client, &p, &cred).await?;
        let top = match client.layout_of(attr.fid).await? {
            LayoutOf::File(l) => Shown {
                path: p.display(&p.inner),
                fid: Some(attr.fid),
                layout: l,
                default_layout: None,
                directory: false,
            },
            LayoutOf::Dir(t) => Shown {
                path: p.display(&p.inner),
                fid: Some(attr.fid),
                layout: None,
                default_layout: t,
                directory: true,
            },
        };
        let is_dir = top.directory;
        emit(&args, top, &mut shown);
        if is_dir && !args.directory {
            list_dir(&client, &p, attr.fid, &p.inner, &args, &cred, &mut shown).await?;
        }
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&shown)?);
    }
    Ok(())
}

/// Prints (or, with `--json`, collects) one entry.
fn emit(args: &GetStripeArgs, s: Shown, out: &mut Vec<Shown>) {
    if args.json {
        out.push(s);
    } else {
        print!("{}", render(args, &s));
    }
}

/// The entries of a directory (recursively with `-r`), layouts read in bulk.
async fn list_dir(
    client: &Client,
    p: &FsPath,
    dir: weft_proto::Fid,
    inner: &str,
    args: &GetStripeArgs,
    cred: &Credentials,
    out: &mut Vec<Shown>,
) -> Result<()> {
    let mut stack = vec![(dir, inner.trim_end_matches('/').to_string())];
    while let Some((fid, path)) = stack.pop() {
        let mut cookie = 0;
        loop {
            let (page, eof) = client.scan_dir(fid, cookie, cred).await?;
            for e in &page {
                let name = String::from_utf8_lossy(&e.entry.name);
                let child = format!("{path}/{name}");
                match e.entry.kind {
                    FileKind::Regular => emit(
                        args,
                        Shown {
                            path: p.display(&child),
                            fid: Some(e.entry.fid),
                            layout: e.layout.clone(),
                            default_layout: None,
                            directory: false,
                        },
                        out,
                    ),
                    FileKind::Directory if args.recursive => {
                        let t = match client.layout_of(e.entry.fid).await? {
                            LayoutOf::Dir(t) => t,
                            LayoutOf::File(_) => None,
                        };
                        emit(
                            args,
                            Shown {
                                path: p.display(&child),
                                fid: Some(e.entry.fid),
                                layout: None,
                                default_layout: t,
                                directory: true,
                            },
                            out,
                        );
                        stack.push((e.entry.fid, child));
                    }
                    _ => {}
                }
            }
            match page.last() {
                Some(last) if !eof => cookie = last.entry.cookie,
                _ => break,
            }
        }
    }
    Ok(())
}

fn fid_string<S: serde::Serializer>(f: &Option<weft_proto::Fid>, s: S) -> Result<S::Ok, S::Error> {
    match f {
        Some(f) => s.serialize_str(&f.to_string()),
        None => s.serialize_none(),
    }
}

/// Stripes of a component: as placed once instantiated, as asked before.
fn count_of(c: &weft_proto::LayoutComponent) -> i32 {
    if c.is_instantiated() {
        i32::try_from(c.osts.len()).unwrap_or(i32::MAX)
    } else {
        c.stripe_count
    }
}

/// The lines of `getstripe -c/-S/-i/-p` for one component.
fn only_fields(
    args: &GetStripeArgs,
    count: i32,
    size: u64,
    index: i32,
    pool: Option<&str>,
) -> String {
    let mut o = String::new();
    if args.count {
        o.push_str(&format!("{count}\n"));
    }
    if args.size {
        o.push_str(&format!("{size}\n"));
    }
    if args.index {
        o.push_str(&format!("{index}\n"));
    }
    if args.pool {
        o.push_str(&format!("{}\n", pool.unwrap_or("")));
    }
    o
}

/// `label` and the compression when it is set (nothing when it inherits).
fn compress_note(c: Compression, label: &str) -> String {
    match c {
        Compression::Inherit => String::new(),
        set => format!("{label}{set}"),
    }
}

/// [`compress_note`] as a line of its own.
fn compress_line(c: Compression, label: &str) -> String {
    match compress_note(c, label) {
        s if s.is_empty() => s,
        s => s + "\n",
    }
}

fn size_or_eof(x: u64) -> String {
    if x == EOF {
        "EOF".to_string()
    } else {
        x.to_string()
    }
}

/// The text `lfs getstripe` would print for one entry.
fn render(args: &GetStripeArgs, s: &Shown) -> String {
    let only = args.count || args.size || args.index || args.pool;
    let mut o = String::new();
    if s.directory {
        let Some(t) = &s.default_layout else {
            if !only {
                o.push_str(&format!(
                    "{}\nstripe_count:  0 stripe_size:   0 pattern:       raid0 stripe_offset: -1 (no default: inherited)\n\n",
                    s.path
                ));
            }
            return o;
        };
        if only {
            for c in &t.components {
                o.push_str(&only_fields(
                    args,
                    c.stripe_count,
                    c.stripe_size,
                    c.stripe_offset,
                    c.pool.as_deref(),
                ));
            }
            return o;
        }
        o.push_str(&format!("{}\n", s.path));
        if t.components.len() == 1 && !args.yaml {
            let c = &t.components[0];
            o.push_str(&format!(
                "stripe_count:  {} stripe_size:   {} pattern:       raid0 stripe_offset: {}{}{}\n\n",
                c.stripe_count,
                c.stripe_size,
                c.stripe_offset,
                c.pool
                    .as_ref()
                    .map(|p| format!(" pool:          {p}"))
                    .unwrap_or_default(),
                compress_note(c.compress, " compr_type:    ")
            ));
        } else {
            o.push_str(&format!("  lcm_entry_count:   {}\n", t.components.len()));
            let mut start = 0;
            for c in &t.components {
                o.push_str(&format!(
                    "    lcme_extent.e_start: {start}\n    lcme_extent.e_end:   {}\n      stripe_count:  {}       stripe_size:   {}       pattern:       raid0       stripe_offset: {}\n",
                    size_or_eof(c.end),
                    c.stripe_count,
                    c.stripe_size,
                    c.stripe_offset
                ));
                if let Some(p) = &c.pool {
                    o.push_str(&format!("      pool:          {p}\n"));
                }
                o.push_str(&compress_line(c.compress, "      compr_type:    "));
                start = c.end;
            }
            o.push('\n');
        }
        return o;
    }
    let Some(l) = &s.layout else {
        if !only {
            o.push_str(&format!("{} has no layout\n", s.path));
        }
        return o;
    };
    if only {
        for c in &l.components {
            let first = c
                .osts
                .first()
                .map_or(-1, |&x| i32::try_from(x).unwrap_or(-1));
            o.push_str(&only_fields(
                args,
                count_of(c),
                c.stripe_size,
                first,
                c.pool.as_deref(),
            ));
        }
        return o;
    }
    o.push_str(&format!("{}\n", s.path));
    if l.components.len() == 1 && !args.yaml {
        let c = &l.components[0];
        o.push_str(&format!(
            "lmm_stripe_count:  {}\nlmm_stripe_size:   {}\nlmm_pattern:       raid0\nlmm_layout_gen:    {}\nlmm_stripe_offset: {}\n",
            count_of(c),
            c.stripe_size,
            l.generation,
            c.osts.first().map_or(-1, |&x| i64::from(x))
        ));
        if let Some(p) = &c.pool {
            o.push_str(&format!("lmm_pool:          {p}\n"));
        }
        o.push_str(&compress_line(c.compress, "lmm_compr_type:    "));
        o.push_str("\tobdidx\t\t object\n");
        for (i, ost) in c.osts.iter().enumerate() {
            o.push_str(&format!(
                "\t{ost:6}\t\t {}\n",
                s.fid
                    .map(|f| c.object(f, i as u32).to_string())
                    .unwrap_or_default()
            ));
        }
        o.push('\n');
        return o;
    }
    o.push_str(&format!(
        "  lcm_layout_gen:    {}\n  lcm_mirror_count:  1\n  lcm_entry_count:   {}\n",
        l.generation,
        l.components.len()
    ));
    for c in &l.components {
        o.push_str(&format!(
            "    lcme_id:             {}\n    lcme_flags:          {}\n    lcme_extent.e_start: {}\n    lcme_extent.e_end:   {}\n",
            c.id,
            if c.is_instantiated() { "init" } else { "0" },
            c.start,
            size_or_eof(c.end)
        ));
        o.push_str(&format!(
            "      lmm_stripe_count:  {}\n      lmm_stripe_size:   {}\n      lmm_pattern:       raid0\n      lmm_stripe_offset: {}\n",
            count_of(c),
            c.stripe_size,
            c.osts.first().map_or(-1, |&x| i64::from(x))
        ));
        if let Some(p) = &c.pool {
            o.push_str(&format!("      lmm_pool:          {p}\n"));
        }
        o.push_str(&compress_line(c.compress, "      lmm_compr_type:    "));
        if c.is_instantiated() {
            o.push_str("      lmm_objects:\n");
            for (i, ost) in c.osts.iter().enumerate() {
                o.push_str(&format!("      - {i}: {{ l_ost_idx: {ost} }}\n"));
            }
        }
        o.push('\n');
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &str) -> Result<SetStripe> {
        let args: Vec<String> = args.split_whitespace().map(String::from).collect();
        parse_setstripe(&args)
    }

    #[test]
    fn compress_is_per_component_and_later_components_inherit_it() {
        let s = parse("-c 2 --compress lz4 /d").unwrap();
        let t = s.template.unwrap();
        assert_eq!(t.components[0].compress, Compression::Lz4);
        assert!(s.any_option);
        let t = parse("-E 4M -c 1 -E -1 -c 4 -Z lz4 -E EOF /f");
        assert!(t.is_err(), "two open-ended components");
        let t = parse("-E 4M -c 1 -Z none -E -1 -c 4 /f")
            .unwrap()
            .template
            .unwrap();
        assert_eq!(t.components[0].compress, Compression::Off);
        assert_eq!(t.components[1].compress, Compression::Off, "inherited");
        let t = parse("-E 4M -c 1 -E -1 -c 4 --compress=lz4 /f")
            .unwrap()
            .template
            .unwrap();
        assert_eq!(t.components[0].compress, Compression::Inherit);
        assert_eq!(t.components[1].compress, Compression::Lz4);
        let e = parse("-Z gzip /d").unwrap_err().to_string();
        assert!(e.contains("unknown compression"), "{e}");
        assert!(parse("-Z").is_err());
    }
}
