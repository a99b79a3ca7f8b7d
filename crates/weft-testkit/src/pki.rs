//! Certificates for TLS tests: a cluster CA and a node certificate it issued, as PEM files
//! (what an operator would make with their own CA; see `weft_rpc::tls`).

use anyhow::Result;
use std::path::{Path, PathBuf};

/// The PEM files of one CA and one node certificate (for both server and client use).
#[derive(Debug, Clone)]
pub struct TestPki {
    /// The CA's certificate.
    pub ca: PathBuf,
    /// The node's certificate.
    pub cert: PathBuf,
    /// The node's private key.
    pub key: PathBuf,
}

impl TestPki {
    /// Makes a new CA and a node certificate for `sans` (IP addresses or DNS names) in
    /// `dir`, as `NAME-ca.pem`, `NAME-cert.pem` and `NAME-key.pem`.
    pub fn new(dir: &Path, name: &str, sans: &[&str]) -> Result<Self> {
        let files = weft_rpc::tls::test_pki::issue(dir, name, sans)?;
        Ok(Self {
            ca: files.ca,
            cert: files.cert.unwrap_or_default(),
            key: files.key.unwrap_or_default(),
        })
    }

    /// The environment that makes every role and tool of a test cluster use these files
    /// (`WEFT_TLS_CA`, `WEFT_TLS_CERT`, `WEFT_TLS_KEY`).
    pub fn env(&self) -> Vec<(String, String)> {
        [
            ("WEFT_TLS_CA", &self.ca),
            ("WEFT_TLS_CERT", &self.cert),
            ("WEFT_TLS_KEY", &self.key),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.display().to_string()))
        .collect()
    }

    /// The same as `-o` options of `weft mount`.
    pub fn mount_options(&self) -> String {
        format!(
            "tls_ca={},tls_cert={},tls_key={}",
            self.ca.display(),
            self.cert.display(),
            self.key.display()
        )
    }

    /// The files as `weft_rpc` takes them.
    pub fn files(&self) -> weft_rpc::TlsFiles {
        weft_rpc::TlsFiles {
            ca: self.ca.clone(),
            cert: Some(self.cert.clone()),
            key: Some(self.key.clone()),
        }
    }
}
