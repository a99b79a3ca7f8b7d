//! Certificates for tests: a fresh CA and one node certificate it issued, written as PEM
//! files. Built for this crate's tests and, with the `test-pki` feature, for other
//! crates' (`weft_testkit::TestPki`); never part of a server or client.

use super::TlsFiles;
use rcgen::{BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair};
use std::path::Path;

/// Why test certificates could not be made.
#[derive(Debug, thiserror::Error)]
pub enum TestPkiError {
    /// Generating a key or a certificate failed.
    #[error("cannot make a test certificate: {0}")]
    Certificate(#[from] rcgen::Error),
    /// Writing a PEM file failed.
    #[error("cannot write a test certificate: {0}")]
    Io(#[from] std::io::Error),
}

/// Makes a new CA in `dir/NAME-ca.pem` and a certificate it issued for `sans` (IP
/// addresses or DNS names; usable as server and as client) in `dir/NAME-cert.pem`, with
/// its key in `dir/NAME-key.pem`.
pub fn issue(dir: &Path, name: &str, sans: &[&str]) -> Result<TlsFiles, TestPkiError> {
    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate()?;
    let mut node = CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>())?;
    node.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let cert = node.signed_by(&key, &issuer)?;
    let (cert_path, key_path) = (
        dir.join(format!("{name}-cert.pem")),
        dir.join(format!("{name}-key.pem")),
    );
    let ca_path = dir.join(format!("{name}-ca.pem"));
    std::fs::write(&ca_path, ca_cert.pem())?;
    std::fs::write(&cert_path, cert.pem())?;
    std::fs::write(&key_path, key.serialize_pem())?;
    Ok(TlsFiles {
        ca: ca_path,
        cert: Some(cert_path),
        key: Some(key_path),
    })
}
