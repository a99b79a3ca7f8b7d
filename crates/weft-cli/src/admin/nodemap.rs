//! `weft nodemap`: client classes (Lustre's `lctl nodemap_*`), kept on the MGS as
//! persistent parameters `nodemap.NAME.{range,squash_root,read_only,admin}` and applied by
//! every server to its peers by address (`weft_rpc::nodemap`).

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use weft_rpc::nodemap::{Cidr, NodeMap, PARAM_PREFIX};

/// Flags of `weft nodemap`.
#[derive(Args, Debug)]
pub struct NodemapArgs {
    /// The MGS (default: $WEFT_MGS, else 127.0.0.1:9400).
    #[arg(long, global = true, value_parser = crate::parse_addr)]
    pub mgs: Option<String>,
    #[command(subcommand)]
    pub verb: NodemapVerb,
}

/// What to do with client classes.
#[derive(Subcommand, Debug)]
pub enum NodemapVerb {
    /// Define (or redefine) a class: its address blocks and what its clients may do.
    Add {
        /// The class name (letters, digits, `_`, `-`).
        name: String,
        /// An address block, ADDR/BITS (repeatable).
        #[arg(long = "range", required = true, value_parser = parse_range)]
        ranges: Vec<String>,
        /// uid and gid 0 of its clients become nobody (65534).
        #[arg(long)]
        squash_root: bool,
        /// Its clients cannot change anything (EROFS).
        #[arg(long)]
        read_only: bool,
        /// Its clients may run administrators' verbs (set_param -P, pool, migrate, repo).
        #[arg(long)]
        admin: bool,
    },
    /// Remove a class.
    Del {
        /// The class name.
        name: String,
    },
    /// List the classes.
    List,
}

fn parse_range(s: &str) -> Result<String, String> {
    Cidr::parse(s).map(|_| s.to_string())
}

const KEYS: [&str; 4] = ["range", "squash_root", "read_only", "admin"];

/// Runs `weft nodemap`.
pub async fn run(args: NodemapArgs) -> Result<()> {
    let addr = super::mgs_address(args.mgs.as_deref());
    let cluster = super::connect(&addr, "").await?;
    let mgs = cluster.mgs();
    match args.verb {
        NodemapVerb::Add {
            name,
            ranges,
            squash_root,
            read_only,
            admin,
        } => {
            if name.is_empty()
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            {
                bail!("'{name}' is not a class name (letters, digits, _ and -)");
            }
            let flag = |b: bool| if b { "1" } else { "0" }.to_string();
            // The flags first, the range last: the class takes its clients only once it
            // says what they may do.
            let values = [
                ("squash_root", flag(squash_root)),
                ("read_only", flag(read_only)),
                ("admin", flag(admin)),
                ("range", ranges.join(",")),
            ];
            for (key, value) in values {
                mgs.set_param(format!("{PARAM_PREFIX}{name}.{key}"), Some(value))
                    .await
                    .with_context(|| format!("storing nodemap.{name}.{key}"))?;
            }
        }
        NodemapVerb::Del { name } => {
            // The range first: the class stops taking clients before its flags go.
            for key in KEYS.iter().rev() {
                mgs.set_param(format!("{PARAM_PREFIX}{name}.{key}"), None)
                    .await
                    .with_context(|| format!("removing nodemap.{name}.{key}"))?;
            }
        }
        NodemapVerb::List => {
            let config = cluster.refresh().await?;
            let (map, errors) =
                NodeMap::from_params(config.params.iter().map(|(k, v)| (k.as_str(), v.as_str())));
            for c in map.classes() {
                let ranges: Vec<String> = c.ranges.iter().map(|r| format!("{r}")).collect();
                println!(
                    "{} range={} squash_root={} read_only={} admin={}",
                    c.name,
                    ranges.join(","),
                    u8::from(c.squash_root),
                    u8::from(c.read_only),
                    u8::from(c.admin)
                );
            }
            for e in errors {
                eprintln!("weft nodemap: ignored {e}");
            }
        }
    }
    Ok(())
}
