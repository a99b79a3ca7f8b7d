//! `weft pool new|add|remove|list|destroy FSNAME.POOL [OST...]` (Lustre's `lctl pool_*`).

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};

/// Flags of `weft pool`.
#[derive(Args, Debug)]
pub struct PoolArgs {
    /// The MGS (default: $WEFT_MGS, else 127.0.0.1:9400).
    #[arg(long, global = true, value_parser = crate::parse_addr)]
    pub mgs: Option<String>,
    #[command(subcommand)]
    pub verb: PoolVerb,
}

/// What to do with a pool.
#[derive(Subcommand, Debug)]
pub enum PoolVerb {
    /// Create an empty pool.
    New {
        /// FSNAME.POOL
        pool: String,
    },
    /// Add OSTs: indices (`3`), names (`OST0003`, `weft-OST0003`) or ranges (`weft-OST[0-3]`).
    Add {
        /// FSNAME.POOL
        pool: String,
        /// OSTs to add.
        #[arg(required = true)]
        osts: Vec<String>,
    },
    /// Remove OSTs.
    Remove {
        /// FSNAME.POOL
        pool: String,
        /// OSTs to remove.
        #[arg(required = true)]
        osts: Vec<String>,
    },
    /// List the pools of a file system, or the OSTs of one pool.
    List {
        /// FSNAME or FSNAME.POOL
        target: String,
    },
    /// Delete an empty pool.
    Destroy {
        /// FSNAME.POOL
        pool: String,
    },
}

/// Splits `FSNAME.POOL`.
fn split_pool(s: &str) -> Result<(&str, &str)> {
    match s.split_once('.') {
        Some((fs, pool)) if !fs.is_empty() && !pool.is_empty() => Ok((fs, pool)),
        _ => bail!("'{s}' is not FSNAME.POOL"),
    }
}

/// Parses OST names as Lustre writes them into indices.
pub fn parse_osts(fsname: &str, specs: &[String]) -> Result<Vec<u32>> {
    let mut out = Vec::new();
    for spec in specs {
        let s = spec.strip_suffix("_UUID").unwrap_or(spec);
        let s = s.strip_prefix(&format!("{fsname}-")).unwrap_or(s);
        let s = s.strip_prefix("OST").unwrap_or(s);
        let index = |t: &str| -> Result<u32> {
            // OST names are hexadecimal (OST000a); bare numbers are decimal like `-i`.
            let parsed = if spec.contains("OST") {
                u32::from_str_radix(t, 16)
            } else {
                t.parse()
            };
            parsed.with_context(|| format!("'{spec}' does not name an OST"))
        };
        if let Some(range) = s.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
            let (a, b) = range
                .split_once('-')
                .with_context(|| format!("'{spec}' has no range"))?;
            let (a, b) = (index(a)?, index(b)?);
            if a > b || b - a > 65535 {
                bail!("'{spec}' is an empty or huge range");
            }
            out.extend(a..=b);
        } else {
            out.push(index(s)?);
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// Runs the verb against the MGS.
pub async fn run(args: PoolArgs) -> Result<()> {
    let addr = super::mgs_address(args.mgs.as_deref());
    match args.verb {
        PoolVerb::New { pool } => {
            let (fs, p) = split_pool(&pool)?;
            super::connect(&addr, fs)
                .await?
                .mgs()
                .pool_new(p.into())
                .await?;
            println!("pool {fs}.{p} created");
        }
        PoolVerb::Add { pool, osts } => {
            let (fs, p) = split_pool(&pool)?;
            let osts = parse_osts(fs, &osts)?;
            super::connect(&addr, fs)
                .await?
                .mgs()
                .pool_add(p.into(), osts.clone())
                .await?;
            println!("OST {osts:?} added to pool {fs}.{p}");
        }
        PoolVerb::Remove { pool, osts } => {
            let (fs, p) = split_pool(&pool)?;
            let osts = parse_osts(fs, &osts)?;
            super::connect(&addr, fs)
                .await?
                .mgs()
                .pool_remove(p.into(), osts.clone())
                .await?;
            println!("OST {osts:?} removed from pool {fs}.{p}");
        }
        PoolVerb::Destroy { pool } => {
            let (fs, p) = split_pool(&pool)?;
            super::connect(&addr, fs)
                .await?
                .mgs()
                .pool_destroy(p.into())
                .await?;
            println!("pool {fs}.{p} destroyed");
        }
        PoolVerb::List { target } => {
            let (fs, only) = match target.split_once('.') {
                Some((fs, p)) => (fs.to_string(), Some(p.to_string())),
                None => (target.clone(), None),
            };
            let config = super::connect(&addr, &fs).await?.config();
            match only {
                Some(p) => {
                    let members = config
                        .pools
                        .get(&p)
                        .with_context(|| format!("pool {fs}.{p} does not exist"))?;
                    println!("Pool: {fs}.{p}");
                    for i in members {
                        println!("{fs}-OST{i:04x}_UUID");
                    }
                }
                None => {
                    println!("Pools from {fs}:");
                    for p in config.pools.keys() {
                        println!("{fs}.{p}");
                    }
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ost_names_parse_like_lustre() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            parse_osts("weft", &s(&["3", "OST000a", "weft-OST0001_UUID"])).unwrap(),
            vec![1, 3, 10]
        );
        assert_eq!(
            parse_osts("weft", &s(&["weft-OST[0-3]"])).unwrap(),
            vec![0, 1, 2, 3]
        );
        assert!(parse_osts("weft", &s(&["OSTzz"])).is_err());
        assert!(parse_osts("weft", &s(&["[5-1]"])).is_err());
    }
}
