//! `weft migrate [-c COUNT] [-S SIZE] [-i INDEX] [-o OST_LIST] [-p POOL] [-E ...] PATH...`:
//! re-stripes files online, like `lfs migrate`. The data is copied into a new layout,
//! verified, and swapped in by the MDT only if nobody wrote the file meanwhile (see
//! `weft_client::layouts`); readers are never interrupted. Without layout options a file
//! keeps its layout's parameters and gets fresh OSTs (to move data off an OST, give a pool
//! or an OST list that leaves it out: `weft find DIR --ost 3 | weft migrate -p others`).
//! With no path, paths are read from standard input, one per line.

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

/// The template that keeps a layout's parameters (counts as asked, sizes, pools).
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
            })
            .collect(),
    }
}

/// `weft migrate`.
pub async fn run(args: MigrateArgs) -> Result<()> {
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
