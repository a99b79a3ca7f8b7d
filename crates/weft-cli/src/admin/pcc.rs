//! `weft pcc`: the persistent client cache of a mount (Lustre's `lctl pcc add` and
//! `lfs pcc attach|detach|state`). Each verb goes to the mount's control socket
//! ([`crate::client_node`]); the mount does the work, no remount.

use crate::client_node::{CtlOp, CtlRequest, PccCtl, ask_all_knowing};
use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use std::path::{Path, PathBuf};

/// `weft pcc` verbs.
#[derive(Args, Debug)]
pub struct PccArgs {
    #[command(subcommand)]
    verb: PccVerb,
}

#[derive(Subcommand, Debug)]
enum PccVerb {
    /// Add a cache in a local directory to the mount at MNT.
    Add {
        /// The mount point.
        mnt: PathBuf,
        /// The local directory (created if missing).
        #[arg(long)]
        dir: PathBuf,
        /// ro: copies of files read under the rule; rw: files created under the rule are
        /// written locally and copied into the file system after close.
        #[arg(long)]
        mode: String,
        /// Conditions, all of which must hold: size>N, size<N (K, M, G, T), path=/DIR/*
        /// (a directory of the file system), uid=N, gid=N. Default: every file.
        #[arg(long, default_value = "")]
        rule: String,
        /// Largest bytes of read-only copies (K, M, G, T); default 90% of the free space.
        #[arg(long)]
        capacity: Option<String>,
    },
    /// Stop using the cache of the mount at MNT (the directory stays).
    Del {
        /// The mount point.
        mnt: PathBuf,
    },
    /// A file's state in its mount's cache, and the cache's figures.
    State {
        /// Files in a mount.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Copy files into their mount's read-only cache now (in the background).
    Attach {
        /// Files in a mount.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Drop files' read-only copies, or copy read-write files back now.
    Detach {
        /// Files in a mount.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
}

fn canonical(p: &Path) -> Result<PathBuf> {
    std::fs::canonicalize(p).with_context(|| p.display().to_string())
}

fn parse_size(s: &str) -> Result<u64> {
    weft_client::pcc::rules::parse_size(s).map_err(anyhow::Error::msg)
}

/// Sends `op` to the mounts of this node; prints the answer of the one it concerns.
async fn ask(what: &Path, op: PccCtl) -> Result<()> {
    let answers = ask_all_knowing(&CtlRequest {
        mgs: None,
        op: CtlOp::Pcc(op),
    })
    .await?;
    if answers.is_empty() {
        bail!("{}: not in a weft mount of this node", what.display());
    }
    for (name, value) in answers {
        println!("{name}:\n{}", value.trim_end());
    }
    Ok(())
}

/// Runs a `weft pcc` verb.
pub async fn run(args: PccArgs) -> Result<()> {
    match args.verb {
        PccVerb::Add {
            mnt,
            dir,
            mode,
            rule,
            capacity,
        } => {
            // Refused here, before anything is made.
            mode.parse::<weft_client::pcc::Mode>()
                .map_err(anyhow::Error::msg)?;
            weft_client::pcc::Rule::parse(&rule).map_err(anyhow::Error::msg)?;
            let mountpoint = canonical(&mnt)?;
            std::fs::create_dir_all(&dir).with_context(|| dir.display().to_string())?;
            let op = PccCtl::Add {
                mountpoint: mountpoint.clone(),
                dir: canonical(&dir)?,
                mode,
                rule,
                capacity: capacity.as_deref().map(parse_size).transpose()?,
            };
            ask(&mountpoint, op).await
        }
        PccVerb::Del { mnt } => {
            let mountpoint = canonical(&mnt)?;
            ask(
                &mountpoint,
                PccCtl::Del {
                    mountpoint: mountpoint.clone(),
                },
            )
            .await
        }
        PccVerb::State { files } | PccVerb::Attach { files } | PccVerb::Detach { files }
            if files.is_empty() =>
        {
            bail!("no file named")
        }
        PccVerb::State { files } => each(files, |path| PccCtl::State { path }).await,
        PccVerb::Attach { files } => each(files, |path| PccCtl::Attach { path }).await,
        PccVerb::Detach { files } => each(files, |path| PccCtl::Detach { path }).await,
    }
}

/// Runs a verb on every file, going on past failures (as `lfs` does).
async fn each(files: Vec<PathBuf>, op: impl Fn(PathBuf) -> PccCtl) -> Result<()> {
    let mut failed = 0;
    for f in files {
        let r = match canonical(&f) {
            Ok(path) => ask(&path, op(path.clone())).await,
            Err(e) => Err(e),
        };
        if let Err(e) = r {
            eprintln!("weft pcc: {e:#}");
            failed += 1;
        }
    }
    if failed > 0 {
        bail!("{failed} file(s) failed");
    }
    Ok(())
}
