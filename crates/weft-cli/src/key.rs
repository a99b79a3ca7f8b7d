//! Cluster keys on the command line: `weft key generate` and `weft key client`, the
//! `--key FILE` flag of the servers and the mount, and `WEFT_KEY` (a key file's path) for
//! every command that has no flag (the administration verbs, benchmarks). What the keys are
//! and how they are proved: `weft_rpc::auth`.

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use weft_proto::handshake::AuthRole;
use weft_rpc::{ClusterKey, Tcp, Transport};

/// The environment variable naming a key file, for commands without `--key`.
pub const KEY_ENV: &str = weft_rpc::transport::KEY_VAR;

/// The `--key` flag of servers and mounts.
#[derive(Args, Debug, Clone, Default)]
pub struct KeyArgs {
    /// The cluster key file (`weft key generate`; a mount may have the client key, `weft
    /// key client`). Every connection proves it; a server with a key refuses peers without.
    /// Default: the file `WEFT_KEY` names, else no authentication.
    #[arg(long, value_name = "FILE")]
    pub key: Option<PathBuf>,
}

impl KeyArgs {
    /// The key of a server role: must be the server key.
    pub fn server_key(&self) -> Result<Option<Arc<ClusterKey>>> {
        let key = load(self.key.as_deref())?;
        if let Some(k) = &key
            && k.role() != AuthRole::Server
        {
            bail!("a server needs the server key (`weft key generate`), not a client key");
        }
        Ok(key)
    }
}

/// Loads `flag`'s key file, else `WEFT_KEY`'s, else none.
pub fn load(flag: Option<&Path>) -> Result<Option<Arc<ClusterKey>>> {
    let path = match flag {
        Some(p) => p.to_path_buf(),
        None => match std::env::var_os(KEY_ENV) {
            Some(p) if !p.is_empty() => PathBuf::from(p),
            _ => return Ok(None),
        },
    };
    let key = ClusterKey::load(&path)?;
    Ok(Some(Arc::new(key)))
}

/// A socket transport proving `key`, within TLS if given.
pub fn transport(
    key: Option<Arc<ClusterKey>>,
    tls: Option<Arc<weft_rpc::Tls>>,
) -> Arc<dyn Transport> {
    Arc::new(Tcp::sockets().with_key(key).with_tls(tls))
}

/// Cluster options of a tool: connections prove `WEFT_KEY`'s key, if set, within TLS if
/// `WEFT_TLS_CA` is set (see [`crate::tls`]).
pub fn cluster_options() -> Result<weft_client::ClusterOptions> {
    Ok(weft_client::ClusterOptions {
        transport: Arc::new(Tcp::from_env()?),
        ..Default::default()
    })
}

/// File-system client options of a tool: as [`cluster_options`].
pub fn client_options() -> Result<weft_client::ClientOptions> {
    Ok(weft_client::ClientOptions {
        cluster: cluster_options()?,
        ..Default::default()
    })
}

/// `weft key`.
#[derive(Args, Debug)]
pub struct KeyCommand {
    #[command(subcommand)]
    what: KeyVerb,
}

#[derive(Subcommand, Debug)]
enum KeyVerb {
    /// Print a new server key (`weft key generate > FILE`: a regular file on standard
    /// output is made mode 0600). Give it to every MGS, MDS and OSS with --key.
    Generate,
    /// Print the client key derived from a server key, for mounts and tools: it lets them
    /// connect, not act as servers.
    Client {
        /// The server key file.
        server_key: PathBuf,
    },
}

/// Runs `weft key`.
pub fn run(cmd: KeyCommand) -> Result<()> {
    let text = match cmd.what {
        KeyVerb::Generate => ClusterKey::generate().to_text(),
        KeyVerb::Client { server_key } => {
            let key = ClusterKey::load(&server_key)?;
            if key.role() != AuthRole::Server {
                bail!("{} is a client key already", server_key.display());
            }
            key.client_text()
        }
    };
    let mut out = std::io::stdout().lock();
    restrict_if_file(&out)?;
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .context("cannot write the key")
}

/// Makes standard output mode 0600 if it is a regular file (`> FILE`), before the key is
/// written to it.
fn restrict_if_file(out: &std::io::StdoutLock<'_>) -> Result<()> {
    use rustix::fs::{FileType, Mode, fchmod, fstat};
    let st = fstat(out).context("cannot inspect standard output")?;
    if FileType::from_raw_mode(st.st_mode) == FileType::RegularFile {
        fchmod(out, Mode::from_raw_mode(0o600)).context("cannot make the key file mode 0600")?;
    }
    Ok(())
}
