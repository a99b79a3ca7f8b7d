//! TLS on the command line: the `--tls-ca`, `--tls-cert` and `--tls-key` flags of the
//! servers and the mount, and `WEFT_TLS_CA`, `WEFT_TLS_CERT`, `WEFT_TLS_KEY` for every
//! command without flags (the administration verbs, benchmarks). What TLS does between
//! nodes: `weft_rpc::tls`.

use anyhow::{Context, Result, bail};
use clap::Args;
use std::path::PathBuf;
use std::sync::Arc;
use weft_rpc::{Tls, TlsFiles};

/// The environment variables standing for the flags.
pub const CA_ENV: &str = weft_rpc::transport::TLS_CA_VAR;
/// See [`CA_ENV`].
pub const CERT_ENV: &str = weft_rpc::transport::TLS_CERT_VAR;
/// See [`CA_ENV`].
pub const KEY_ENV: &str = weft_rpc::transport::TLS_KEY_VAR;

/// The TLS flags of servers and mounts. With `--tls-ca`, every connection over a socket is
/// TLS: servers need `--tls-cert`/`--tls-key` (a certificate of that CA for the addresses
/// they are reached at) and require one of every peer, so mounts need theirs too. Each
/// flag defaults to its `WEFT_TLS_*` variable.
#[derive(Args, Debug, Clone, Default)]
pub struct TlsArgs {
    /// The cluster CA's certificate (PEM): turns TLS on. Default: $WEFT_TLS_CA.
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// This node's certificate (PEM), issued by the cluster CA. Default: $WEFT_TLS_CERT.
    #[arg(long, value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// This node's private key (PEM). Default: $WEFT_TLS_KEY.
    #[arg(long, value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
}

fn or_env(flag: &Option<PathBuf>, var: &str) -> Option<PathBuf> {
    flag.clone().or_else(|| {
        std::env::var_os(var)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    })
}

impl TlsArgs {
    /// The files the flags (or their variables) name; `None` without a CA.
    pub fn files(&self) -> Result<Option<TlsFiles>> {
        let cert = or_env(&self.tls_cert, CERT_ENV);
        let key = or_env(&self.tls_key, KEY_ENV);
        match or_env(&self.tls_ca, CA_ENV) {
            Some(ca) => Ok(Some(TlsFiles { ca, cert, key })),
            None if cert.is_some() || key.is_some() => {
                bail!("--tls-cert and --tls-key need --tls-ca (the cluster CA's certificate)")
            }
            None => Ok(None),
        }
    }

    /// The configuration of a client (a mount, a tool): `None` without TLS.
    pub fn client(&self) -> Result<Option<Arc<Tls>>> {
        let Some(files) = self.files()? else {
            return Ok(None);
        };
        let tls = Tls::load(&files).context("TLS")?;
        Ok(Some(Arc::new(tls)))
    }

    /// The configuration of a server role: must have its certificate.
    pub fn server(&self) -> Result<Option<Arc<Tls>>> {
        let Some(files) = self.files()? else {
            return Ok(None);
        };
        let tls = Tls::load(&files).and_then(Tls::for_server).context("TLS")?;
        Ok(Some(Arc::new(tls)))
    }

    /// The flags again, for a process this one starts (the mount's daemon).
    pub fn to_args(&self) -> Vec<std::ffi::OsString> {
        let mut out = Vec::new();
        for (flag, v) in [
            ("--tls-ca", &self.tls_ca),
            ("--tls-cert", &self.tls_cert),
            ("--tls-key", &self.tls_key),
        ] {
            if let Some(p) = v {
                out.push(flag.into());
                out.push(p.clone().into_os_string());
            }
        }
        out
    }
}
