//! TLS on connections over sockets (optional): every byte between nodes encrypted, and
//! both ends proving a certificate of the cluster's own certificate authority.
//!
//! A node is given three PEM files: the cluster CA's certificate (`--tls-ca`), and its own
//! certificate and private key (`--tls-cert`, `--tls-key`), issued by that CA for the
//! addresses it is reached at (IP SANs: servers are addressed by IP). Servers require a
//! client certificate of the same CA (mutual TLS), so a node without one cannot connect,
//! and a client checks the server's certificate against the CA and the address it dialled.
//! TLS runs under the cluster key's challenge-response ([`crate::auth`]), not instead of
//! it; calls between servers of one process ([`crate::local`]) have no stream to encrypt.
//!
//! Crypto comes from rustls with the aws-lc-rs provider (already built for the S3 client).

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio_rustls::{TlsAcceptor, TlsConnector};

/// The PEM files of a node's TLS configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// The cluster CA's certificate(s): peers must prove a certificate issued by it.
    pub ca: PathBuf,
    /// This node's certificate chain; required of servers (and of clients, since servers
    /// require one of every peer).
    pub cert: Option<PathBuf>,
    /// This node's private key (PKCS#8, PKCS#1 or SEC1).
    pub key: Option<PathBuf>,
}

/// Why a TLS configuration could not be made.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file could not be read or parsed.
    #[error("cannot read {what} {path}: {reason}")]
    Pem {
        /// Which file: "CA certificate", "certificate", "private key".
        what: &'static str,
        /// The file.
        path: String,
        /// What was wrong.
        reason: String,
    },
    /// A file had no PEM object of the kind wanted.
    #[error("{path} holds no {what}")]
    Empty {
        /// What was looked for.
        what: &'static str,
        /// The file.
        path: String,
    },
    /// A certificate was given without its key or the other way round.
    #[error("--tls-cert and --tls-key go together: give both or neither")]
    Unpaired,
    /// A server was given no certificate of its own.
    #[error("a server with TLS needs its certificate and key (--tls-cert, --tls-key)")]
    NoServerCert,
    /// rustls refused the configuration (a key not matching its certificate, a CA
    /// certificate it cannot use).
    #[error("TLS configuration: {0}")]
    Config(String),
}

/// A node's TLS configuration, ready to wrap connections: the client side always, the
/// server side when the node has a certificate.
#[derive(Clone)]
pub struct Tls {
    connector: TlsConnector,
    acceptor: Option<TlsAcceptor>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("server", &self.acceptor.is_some())
            .finish_non_exhaustive()
    }
}

fn pem_error(what: &'static str, path: &Path, e: impl std::fmt::Display) -> TlsError {
    TlsError::Pem {
        what,
        path: path.display().to_string(),
        reason: e.to_string(),
    }
}

fn certs(what: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| pem_error(what, path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_error(what, path, e))?;
    if certs.is_empty() {
        return Err(TlsError::Empty {
            what,
            path: path.display().to_string(),
        });
    }
    Ok(certs)
}

fn config_error(e: impl std::fmt::Display) -> TlsError {
    TlsError::Config(e.to_string())
}

impl Tls {
    /// Reads `files` and builds both sides' configurations.
    pub fn load(files: &TlsFiles) -> Result<Self, TlsError> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut roots = RootCertStore::empty();
        for ca in certs("CA certificate", &files.ca)? {
            roots.add(ca).map_err(config_error)?;
        }
        let roots = Arc::new(roots);
        let own = match (&files.cert, &files.key) {
            (Some(cert), Some(key)) => {
                let chain = certs("certificate", cert)?;
                let key = PrivateKeyDer::from_pem_file(key)
                    .map_err(|e| pem_error("private key", key, e))?;
                Some((chain, key))
            }
            (None, None) => None,
            _ => return Err(TlsError::Unpaired),
        };

        let client = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(config_error)?
            .with_root_certificates(roots.clone());
        let client = match &own {
            Some((chain, key)) => client
                .with_client_auth_cert(chain.clone(), key.clone_key())
                .map_err(config_error)?,
            None => client.with_no_client_auth(),
        };

        let acceptor = match own {
            Some((chain, key)) => {
                let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider.clone())
                    .build()
                    .map_err(config_error)?;
                let server = ServerConfig::builder_with_provider(provider)
                    .with_safe_default_protocol_versions()
                    .map_err(config_error)?
                    .with_client_cert_verifier(verifier)
                    .with_single_cert(chain, key)
                    .map_err(config_error)?;
                Some(TlsAcceptor::from(Arc::new(server)))
            }
            None => None,
        };
        Ok(Self {
            connector: TlsConnector::from(Arc::new(client)),
            acceptor,
        })
    }

    /// The same configuration, checked to be able to serve.
    pub fn for_server(self) -> Result<Self, TlsError> {
        if self.acceptor.is_none() {
            return Err(TlsError::NoServerCert);
        }
        Ok(self)
    }

    /// The client side.
    pub(crate) fn connector(&self) -> &TlsConnector {
        &self.connector
    }

    /// The server side, if this node has a certificate.
    pub(crate) fn acceptor(&self) -> Option<&TlsAcceptor> {
        self.acceptor.as_ref()
    }
}

/// The name a client checks the server's certificate against: the host part of
/// `HOST:PORT` (an IP address, or a DNS name).
pub(crate) fn server_name(addr: &str) -> std::io::Result<ServerName<'static>> {
    let host = match addr.rsplit_once(':') {
        Some((host, _port)) => host,
        None => addr,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_string()).map_err(|e| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{addr}: not a TLS server name: {e}"),
        )
    })
}

#[cfg(any(test, feature = "test-pki"))]
pub mod test_pki;
#[cfg(test)]
mod tests;
