//! `weft migrate [-c COUNT] [-S SIZE] [-i INDEX] [-o OST_LIST] [-p POOL] [-E ...] PATH...`:
//! re-stripes files online, like `lfs migrate`. The data is copied into a new layout,
//! verified, and swapped in by the MDT only if nobody wrote the file meanwhile (see
//! `weft_client::layouts`); readers are never interrupted. Without layout options a file
//! keeps its layout's parameters and gets fresh OSTs (to move data off an OST, give a pool
//! or an OST list that leaves it out: `weft find DIR --ost 3 | weft migrate -p others`).
//! With no path, paths are read from standard input, one per line.
//!
//! `weft migrate -m MDT_INDEX DIR...` moves directories' metadata to another MDT online,
//! like `lfs migrate -m`: each directory and, below it, every subdirectory (striped ones
//! are left as they are) becomes a directory on that MDT with the same attributes and
//! entries (see `weft_mdt::migrate`); files' inodes stay where they are. Root only.

use super::fspath::{self, FsPath};
use super::stripe::parse_setstripe;
use anyhow::{Context, Result, bail};
use clap::Args;
use std::collections::HashMap;
use std::io::BufRead;
use std::sync::Arc;
use weft_client::{Client, LayoutOf};
use weft_proto::layout::{Layout, LayoutTemplate, TemplateComponent};
use weft_proto::mdt::{Credentials, FileKind};

/// Flags of `weft migrate`: `setstripe`'s layout options, then paths.
#[derive(Args, Debug)]
#[command(disable_help_flag = true)]
pub struct MigrateArgs {
    /// `[-c COUNT] [-S SIZE] [-i INDEX] [-o OST_LIST] [-p POOL] [-E END ...] [PATH...]`
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    pub args: Vec<String>,
}

/// The template that keeps a layout's parameters (counts as asked, sizes, pools,
/// compression).
pub fn template_of(layout: &Layout) -> LayoutTemplate {
    LayoutTemplate {
        components: layout
            .components
            .iter()
            .map(|c| TemplateComponent {
                end: c.end,
                stripe_count: c.stripe_count,
                stripe_size: c.stripe_size,
                stripe_offset: -1,
                ost_list: Vec::new(),
                pool: c.pool.clone(),
                compress: c.compress,
            })
            .collect(),
    }
}

/// The MDT index of `-m N` (`-mN`, `--mdt-index N`, `--mdt-index=N`) and the other
/// arguments, if `-m` is there.
fn mdt_option(args: &[String]) -> Result<Option<(u32, Vec<String>)>> {
    let mut mdt = None;
    let mut rest = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let value = match a.as_str() {
            "-m" | "--mdt-index" | "--mdt" => Some(
                it.next()
                    .with_context(|| format!("{a} needs an MDT index"))?
                    .clone(),
            ),
            s if s.starts_with("--mdt-index=") => Some(s["--mdt-index=".len()..].to_string()),
            s if s.starts_with("-m") && s.len() > 2 => Some(s[2..].to_string()),
            _ => None,
        };
        match value {
            Some(v) => {
                let i: u32 = v.parse().with_context(|| format!("bad MDT index {v:?}"))?;
                if mdt.replace(i).is_some() {
                    bail!("-m given twice");
                }
            }
            None => rest.push(a.clone()),
        }
    }
    Ok(mdt.map(|m| (m, rest)))
}

/// `weft migrate`.
pub async fn run(args: MigrateArgs) -> Result<()> {
    if let Some((mdt, paths)) = mdt_option(&args.args)? {
        return migrate_dirs(mdt, paths).await;
    }
    let req = parse_setstripe(&args.args)?;
    let Some(template) = req.template else {
        bail!("-d does not apply to migrate");
    };
    let template = req.any_option.then_some(template);
    let mut paths = req.paths;
    if paths.is_empty() {
        for line in std::io::stdin().lock().lines() {
            let line = line.context("reading paths from standard input")?;
            if !line.is_empty() {
                paths.push(line);
            }
        }
    }
    let cred = fspath::my_credentials();
    let mut clients: HashMap<String, Arc<Client>> = HashMap::new();
    let mut failed = 0usize;
    for path in &paths {
        let r = async {
            let p = fspath::resolve(path)?;
            let client = match clients.get(&p.source) {
                Some(c) => c.clone(),
                None => {
                    let c = fspath::connect_client(&p).await?;
                    clients.insert(p.source.clone(), c.clone());
                    c
                }
            };
            migrate_one(&client, &p, template.clone(), &cred).await
        }
        .await;
        if let Err(e) = r {
            eprintln!("weft migrate: {path}: {e:#}");
            failed += 1;
        }
    }
    if failed > 0 {
        bail!("{failed} of {} files were not migrated", paths.len());
    }
    Ok(())
}

async fn migrate_one(
    client: &Arc<Client>,
    p: &FsPath,
    template: Option<LayoutTemplate>,
    cred: &Credentials,
) -> Result<()> {
    let attr = fspath::stat(client, p, cred).await?;
    if attr.kind != FileKind::Regular {
        bail!("not a regular file");
    }
    let template = match template {
        Some(t) => t,
        None => match client.layout_of(attr.fid).await? {
            LayoutOf::File(Some(l)) => template_of(&l),
            _ => bail!("the file has no layout to keep"),
        },
    };
    let (parent, _) = client.resolve_parent(&p.inner, cred).await?;
    let done = client
        .migrate(parent.fid, attr.fid, template, cred)
        .await
        .map_err(|e| match e.errno() {
            weft_proto::Errno::Busy => {
                anyhow::anyhow!("{e} (the file was written during the copy; nothing changed)")
            }
            _ => e.into(),
        })?;
    tracing::debug!(path = %p.display(&p.inner), bytes = done.bytes, "migrated");
    Ok(())
}

/// `weft migrate -m MDT DIR...`.
async fn migrate_dirs(mdt: u32, paths: Vec<String>) -> Result<()> {
    if paths.is_empty() {
        bail!("weft migrate -m MDT_INDEX DIR...: no directory given");
    }
    if let Some(p) = paths.iter().find(|p| p.starts_with('-')) {
        bail!("{p}: -m moves directories' metadata and takes no layout options");
    }
    let cred = fspath::my_credentials();
    let mut failed = 0usize;
    for path in &paths {
        let r = async {
            let p = fspath::resolve(path)?;
            let client = fspath::connect_client(&p).await?;
            migrate_tree(&client, &p, mdt, &cred).await
        }
        .await;
        match r {
            Ok(n) => tracing::debug!(path, directories = n, mdt, "migrated"),
            Err(e) => {
                eprintln!("weft migrate: {path}: {e:#}");
                failed += 1;
            }
        }
    }
    if failed > 0 {
        bail!("{failed} of {} directories were not migrated", paths.len());
    }
    Ok(())
}

/// Migrates the directory at `p` and every directory below it (top down: each one's
/// subdirectories are listed in its new home); striped ones are skipped with a warning.
/// The number of directories migrated.
async fn migrate_tree(client: &Client, p: &FsPath, mdt: u32, cred: &Credentials) -> Result<u64> {
    let attr = fspath::stat(client, p, cred).await?;
    if attr.kind != FileKind::Directory {
        bail!("not a directory");
    }
    let (parent, name) = client
        .resolve_parent(&p.inner, cred)
        .await
        .context("the root directory stays on MDT0")?;
    let mut todo = vec![(parent.fid, name, p.inner.trim_end_matches('/').to_string())];
    let mut done = 0u64;
    while let Some((parent, name, path)) = todo.pop() {
        let fid = client
            .migrate_dir(parent, &name, mdt, cred)
            .await
            .with_context(|| format!("migrating {}", p.display(&path)))?;
        done += 1;
        let mut cookie = 0;
        loop {
            let (page, eof) = client.readdir(fid, cookie, 1024, false, cred).await?;
            if let Some(last) = page.last() {
                cookie = last.cookie;
            }
            for e in page.iter().filter(|e| e.kind == FileKind::Directory) {
                let child = format!("{path}/{}", String::from_utf8_lossy(&e.name));
                if client.dir_stripes(e.fid).await?.is_some() {
                    eprintln!(
                        "weft migrate: {}: a striped directory, left as it is",
                        p.display(&child)
                    );
                    continue;
                }
                todo.push((fid, e.name.clone(), child));
            }
            if eof || page.is_empty() {
                break;
            }
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::mdt_option;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_mdt_index_is_found_in_every_spelling() {
        for a in [
            &["-m", "1", "/d"][..],
            &["-m1", "/d"],
            &["--mdt-index", "1", "/d"],
            &["--mdt-index=1", "/d"],
            &["/d", "-m", "1"],
        ] {
            assert_eq!(
                mdt_option(&args(a)).unwrap(),
                Some((1, args(&["/d"]))),
                "{a:?}"
            );
        }
        assert_eq!(mdt_option(&args(&["-c", "2", "/f"])).unwrap(), None);
        assert!(mdt_option(&args(&["-m"])).is_err());
        assert!(mdt_option(&args(&["-m", "x", "/d"])).is_err());
        assert!(mdt_option(&args(&["-m", "1", "-m", "2", "/d"])).is_err());
    }
}
