//! `weft mkdir -i MDT_INDEX` (a directory on a chosen MDT: a remote directory when that is
//! not its parent's MDT) and `weft getdirstripe` (which MDT holds a directory), with the
//! flags and output of `lfs mkdir` and `lfs getdirstripe`.

use super::fspath;
use anyhow::{Context, Result, bail};
use clap::Args;
use serde::Serialize;
use weft_proto::mdt::{DirDefault, DirHash, FileKind};

/// Flags of `weft mkdir`.
#[derive(Args, Debug)]
pub struct MkdirArgs {
    /// The MDT to create the directory on (default: its parent's).
    #[arg(short = 'i', long = "mdt-index", alias = "mdt")]
    pub mdt_index: Option<u32>,
    /// Stripe the directory over COUNT MDTs (its parent's and the next ones): a striped
    /// directory, its names spread by hash.
    #[arg(short = 'c', long = "mdt-count", alias = "stripe-count")]
    pub count: Option<u32>,
    /// How names are spread over the shards (only `fnv_1a_64`).
    #[arg(short = 'H', long = "mdt-hash", default_value = "fnv_1a_64")]
    pub hash: String,
    /// Permission bits, in octal (default 0777 less the umask).
    #[arg(short = 'm', long = "mode")]
    pub mode: Option<String>,
    /// The directories to create (paths in a mount, or `HOST:PORT:/FSNAME/PATH`).
    #[arg(required = true)]
    pub paths: Vec<String>,
}

/// Flags of `weft setdirstripe`.
#[derive(Args, Debug)]
pub struct SetDirStripeArgs {
    /// Set the default for new subdirectories of existing directories (without it,
    /// create the directories like `weft mkdir`).
    #[arg(short = 'D', long = "default")]
    pub default: bool,
    /// Remove the default (with -D).
    #[arg(short = 'd', long = "delete")]
    pub delete: bool,
    /// Shards of each new subdirectory (with -D), or of the new directory.
    #[arg(short = 'c', long = "mdt-count", alias = "stripe-count")]
    pub count: Option<u32>,
    /// Without -D: the MDT of the new directory.
    #[arg(short = 'i', long = "mdt-index")]
    pub mdt_index: Option<u32>,
    /// How names are spread over shards (only `fnv_1a_64`).
    #[arg(short = 'H', long = "mdt-hash", default_value = "fnv_1a_64")]
    pub hash: String,
    /// Directories.
    #[arg(required = true)]
    pub paths: Vec<String>,
}

/// Flags of `weft getdirstripe`.
#[derive(Args, Debug)]
pub struct GetDirStripeArgs {
    /// Print only the MDT index.
    #[arg(short = 'i', long = "mdt-index")]
    pub index_only: bool,
    /// Show the default for new subdirectories instead.
    #[arg(short = 'D', long = "default")]
    pub default: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Directories (paths in a mount, or `HOST:PORT:/FSNAME/PATH`).
    #[arg(required = true)]
    pub paths: Vec<String>,
}

fn parse_mode(s: &str) -> Result<u32> {
    let m = u32::from_str_radix(s.trim_start_matches("0o"), 8)
        .with_context(|| format!("'{s}' is not an octal mode"))?;
    if m > 0o7777 {
        bail!("mode '{s}' has bits beyond 07777");
    }
    Ok(m)
}

fn parse_hash(s: &str) -> Result<DirHash> {
    match s {
        "fnv_1a_64" => Ok(DirHash::Fnv1a64),
        other => bail!("unknown directory hash '{other}' (weftfs knows fnv_1a_64)"),
    }
}

/// `weft setdirstripe [-D] [-c COUNT] [-i MDT] [-H HASH] [-d] DIR...`.
pub async fn setdirstripe(args: SetDirStripeArgs) -> Result<()> {
    if !args.default {
        if args.delete {
            bail!("-d removes a default: use it with -D");
        }
        return mkdir(MkdirArgs {
            mdt_index: args.mdt_index,
            count: args.count,
            hash: args.hash,
            mode: None,
            paths: args.paths,
        })
        .await;
    }
    let default = match (args.delete, args.count) {
        (true, Some(_)) => bail!("-d and -c together"),
        (true, None) => None,
        (false, Some(count)) => Some(DirDefault {
            count,
            hash: parse_hash(&args.hash)?,
        }),
        (false, None) => bail!("-D needs -c COUNT (or -d to remove the default)"),
    };
    let cred = fspath::my_credentials();
    for path in &args.paths {
        let p = fspath::resolve(path)?;
        let client = fspath::connect_client(&p).await?;
        let attr = fspath::stat(&client, &p, &cred).await?;
        if attr.kind != FileKind::Directory {
            bail!("{}: not a directory", p.display(&p.inner));
        }
        client
            .set_dir_default(attr.fid, default, &cred)
            .await
            .map_err(|e| anyhow::anyhow!("{}: {e}", p.display(&p.inner)))?;
    }
    Ok(())
}

fn umask() -> u32 {
    // SAFETY: umask only swaps a process-wide integer; it is set back at once.
    unsafe {
        let m = libc::umask(0o022);
        libc::umask(m);
        m
    }
}

/// `weft mkdir [-i MDT_INDEX] [-m MODE] DIR...`.
pub async fn mkdir(args: MkdirArgs) -> Result<()> {
    let cred = fspath::my_credentials();
    let hash = parse_hash(&args.hash)?;
    let mode = match &args.mode {
        Some(m) => parse_mode(m)?,
        None => 0o777 & !umask(),
    };
    for path in &args.paths {
        let p = fspath::resolve(path)?;
        let client = fspath::connect_client(&p).await?;
        let (parent, name) = client
            .resolve_parent(&p.inner, &cred)
            .await
            .map_err(|e| anyhow::anyhow!("{}: {e}", p.display(&p.inner)))?;
        let made = match (args.count, args.mdt_index) {
            (Some(c), None) if c != 1 => {
                client
                    .mkdir_striped(parent.fid, &name, mode, c, hash, &cred)
                    .await
            }
            (Some(c), Some(_)) if c != 1 => {
                bail!(
                    "-c COUNT with -i is not supported yet: a striped directory starts on its parent's MDT"
                )
            }
            (_, Some(i)) => client.mkdir_on(parent.fid, &name, mode, i, &cred).await,
            (_, None) => client.mkdir(parent.fid, &name, mode, &cred).await,
        };
        made.map_err(|e| anyhow::anyhow!("cannot create {}: {e}", p.display(&p.inner)))?;
    }
    Ok(())
}

#[derive(Serialize)]
struct DirStripe {
    path: String,
    mdt_index: u32,
    stripe_count: u32,
    hash_type: String,
    /// (MDT index, shard FID) of each shard of a striped directory.
    shards: Vec<(u32, String)>,
}

/// `weft getdirstripe [-i] [--json] DIR...`.
pub async fn getdirstripe(args: GetDirStripeArgs) -> Result<()> {
    let cred = fspath::my_credentials();
    let mut shown = Vec::new();
    for path in &args.paths {
        let p = fspath::resolve(path)?;
        let client = fspath::connect_client(&p).await?;
        let attr = fspath::stat(&client, &p, &cred).await?;
        if attr.kind != FileKind::Directory {
            bail!("{}: not a directory", p.display(&p.inner));
        }
        if args.default {
            let d = client.dir_default(attr.fid).await?;
            match (args.json, d) {
                (true, d) => println!(
                    "{}",
                    serde_json::json!({
                        "path": p.display(&p.inner),
                        "default_count": d.map(|d| d.count),
                        "default_hash": d.map(|d| d.hash.name()),
                    })
                ),
                (false, Some(d)) => println!(
                    "{}\nlmv_stripe_count: {} lmv_stripe_offset: -1 lmv_hash_type: {}",
                    p.display(&p.inner),
                    d.count,
                    d.hash.name()
                ),
                (false, None) => println!("{}\n(no default)", p.display(&p.inner)),
            }
            continue;
        }
        let stripes = client.dir_stripes(attr.fid).await?;
        let mut shards = Vec::new();
        for &f in stripes.iter().flat_map(|s| &s.shards) {
            shards.push((client.mdt_index_of(f)?, f.to_string()));
        }
        let d = DirStripe {
            path: p.display(&p.inner),
            mdt_index: match shards.first() {
                Some((i, _)) => *i,
                None => client.mdt_index_of(attr.fid)?,
            },
            stripe_count: shards.len() as u32,
            hash_type: stripes.map_or("none", |s| s.hash.name()).to_string(),
            shards,
        };
        if args.json {
            shown.push(d);
        } else if args.index_only {
            println!("{}", d.mdt_index);
        } else {
            println!(
                "{}\nlmv_stripe_count: {} lmv_stripe_offset: {} lmv_hash_type: {}",
                d.path, d.stripe_count, d.mdt_index, d.hash_type
            );
            if !d.shards.is_empty() {
                println!("mdtidx\t\t FID[seq:oid:ver]");
                for (i, f) in &d.shards {
                    println!("{i:6}\t\t {f}");
                }
            }
        }
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&shown)?);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_are_octal_and_bounded() {
        assert_eq!(parse_mode("755").unwrap(), 0o755);
        assert_eq!(parse_mode("0o1777").unwrap(), 0o1777);
        assert!(parse_mode("9").is_err());
        assert!(parse_mode("17777").is_err());
    }
}
