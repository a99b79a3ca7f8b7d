//! Node authentication: the cluster's keys, the challenge-response proofs both ends of a
//! connection exchange before the connect handshake, and the counts of refusals.
//!
//! **Keys.** A cluster has one secret, the *server key* (32 random bytes, `weft key
//! generate`), given to the MGS, MDS and OSS processes. The *client key* is derived from it
//! one way (HMAC-SHA256 of the server key over a fixed label, `weft key client`) and given
//! to mounts and tools. A server holds both; a client holds only its own and cannot derive
//! the server key, so it cannot pass for a server. Key files are text (`weft-server-key
//! HEX` or `weft-client-key HEX`) and must not be readable by group or others.
//!
//! **Proofs.** The connecting peer sends [`AuthHello`] (the role whose key it will prove,
//! file system name, node UUID, protocol version, a 32-byte nonce); the server answers
//! [`AuthChallenge`] (its nonce, and its proof: HMAC-SHA256 under the role's key of a label
//! and every field of both messages); the peer checks it (in constant time) and sends its
//! own proof under a different label, which the server checks. The key never travels, a
//! proof cannot be replayed (fresh nonces on both sides) nor reflected (labels differ), and
//! a peer claiming the server role without the server key fails like one with a wrong key:
//! the same `authentication failed`, which says nothing of which part was wrong.

use crate::metric::{MetricDef, MetricKind, Stat};
use hmac::{Hmac, KeyInit, Mac};
use rand::RngCore;
use sha2::Sha256;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use weft_proto::handshake::{AUTH_LEN, AuthHello, AuthRole};
use zeroize::Zeroize;

type HmacSha256 = Hmac<Sha256>;

/// The text of every authentication refusal, whatever was wrong.
pub const REFUSED: &str = "authentication failed";

/// The label the client key is derived under.
const CLIENT_KEY_LABEL: &[u8] = b"weft client key v1";
const SERVER_KEY_TAG: &str = "weft-server-key";
const CLIENT_KEY_TAG: &str = "weft-client-key";

/// Why a key could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The file could not be read.
    #[error("cannot read key file {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file may be read by others than its owner.
    #[error("key file {path} is readable by group or others (mode {mode:o}): chmod 600 it")]
    Exposed {
        /// The file.
        path: String,
        /// Its permission bits.
        mode: u32,
    },
    /// The text is not a key.
    #[error(
        "not a weft key: expected '{SERVER_KEY_TAG} HEX' or '{CLIENT_KEY_TAG} HEX' with 64 hex digits"
    )]
    Malformed,
}

/// A cluster key: the server key (with the client key derived from it) or a client key
/// alone. Its `Debug` output hides the bytes, and its bytes are overwritten with zeros when
/// it is dropped (as are the copies its constructors make on the way).
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterKey {
    server: Option<[u8; AUTH_LEN]>,
    client: [u8; AUTH_LEN],
}

impl Drop for ClusterKey {
    fn drop(&mut self) {
        self.client.zeroize();
        if let Some(server) = self.server.as_mut() {
            server.zeroize();
        }
    }
}

impl std::fmt::Debug for ClusterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ClusterKey({:?}, <hidden>)", self.role())
    }
}

impl ClusterKey {
    /// A new server key from the operating system's random source.
    pub fn generate() -> Self {
        let mut server = [0u8; AUTH_LEN];
        rand::rng().fill_bytes(&mut server);
        let key = Self::from_server(server);
        server.zeroize();
        key
    }

    fn from_server(server: [u8; AUTH_LEN]) -> Self {
        let client = hmac(&server, &[CLIENT_KEY_LABEL]);
        Self {
            server: Some(server),
            client,
        }
    }

    /// Parses a key file's text.
    pub fn parse(text: &str) -> Result<Self, KeyError> {
        let mut words = text.split_whitespace();
        let (Some(tag), Some(hex), None) = (words.next(), words.next(), words.next()) else {
            return Err(KeyError::Malformed);
        };
        let mut bytes = from_hex(hex).ok_or(KeyError::Malformed)?;
        let key = match tag {
            SERVER_KEY_TAG => Ok(Self::from_server(bytes)),
            CLIENT_KEY_TAG => Ok(Self {
                server: None,
                client: bytes,
            }),
            _ => Err(KeyError::Malformed),
        };
        bytes.zeroize();
        key
    }

    /// Reads a key file, refusing one that group or others may read.
    pub fn load(path: &Path) -> Result<Self, KeyError> {
        use std::os::unix::fs::PermissionsExt;
        let shown = path.display().to_string();
        let io = |source| KeyError::Io {
            path: shown.clone(),
            source,
        };
        let meta = std::fs::metadata(path).map_err(io)?;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(KeyError::Exposed { path: shown, mode });
        }
        // A key file is one short line; read at most a little more to reject anything else.
        let mut text = String::new();
        let file = std::fs::File::open(path).map_err(io)?;
        std::io::Read::read_to_string(&mut std::io::Read::take(file, 256), &mut text)
            .map_err(io)?;
        let key = Self::parse(&text);
        text.zeroize();
        key
    }

    /// The key file's text: the server key if held, else the client key.
    pub fn to_text(&self) -> String {
        match &self.server {
            Some(s) => format!("{SERVER_KEY_TAG} {}\n", to_hex(s)),
            None => self.client_text(),
        }
    }

    /// The text of the client key file derived from this key.
    pub fn client_text(&self) -> String {
        format!("{CLIENT_KEY_TAG} {}\n", to_hex(&self.client))
    }

    /// The role this key lets its holder prove: server if it holds the server key.
    pub fn role(&self) -> AuthRole {
        if self.server.is_some() {
            AuthRole::Server
        } else {
            AuthRole::Client
        }
    }

    /// The key a peer of `role` proves, if this key holds it.
    pub(crate) fn secret(&self, role: AuthRole) -> Option<&[u8; AUTH_LEN]> {
        match role {
            AuthRole::Server => self.server.as_ref(),
            AuthRole::Client => Some(&self.client),
        }
    }
}

/// Which side a proof is from (its label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    /// The connecting peer's proof.
    Peer,
    /// The server's proof.
    Server,
}

/// The proof of `side` for the exchange of `hello` and the server's nonce.
pub(crate) fn proof(
    key: &[u8; AUTH_LEN],
    side: Side,
    hello: &AuthHello,
    server_nonce: &[u8; AUTH_LEN],
) -> [u8; AUTH_LEN] {
    transcript(key, side, hello, server_nonce)
        .finalize()
        .into_bytes()
        .into()
}

/// Whether `claimed` is the proof of `side` (compared in constant time by `hmac`).
pub(crate) fn verify(
    key: &[u8; AUTH_LEN],
    side: Side,
    hello: &AuthHello,
    server_nonce: &[u8; AUTH_LEN],
    claimed: &[u8; AUTH_LEN],
) -> bool {
    transcript(key, side, hello, server_nonce)
        .verify_slice(claimed)
        .is_ok()
}

/// The MAC over a label for `side` and every field both sides sent.
///
/// `fuzz/fuzz_targets/handshake.rs` computes the same MAC on its own, as an independent
/// check that a proof is accepted exactly when it is right: change both together.
fn transcript(
    key: &[u8; AUTH_LEN],
    side: Side,
    hello: &AuthHello,
    server_nonce: &[u8; AUTH_LEN],
) -> HmacSha256 {
    let label: &[u8] = match side {
        Side::Peer => b"weft auth v1 peer proof",
        Side::Server => b"weft auth v1 server proof",
    };
    let role: &[u8] = match hello.role {
        AuthRole::Client => b"client",
        AuthRole::Server => b"server",
    };
    mac_of(
        key,
        &[
            label,
            role,
            hello.fsname.as_bytes(),
            hello.client_uuid.as_bytes(),
            &hello.protocol_version.to_be_bytes(),
            &hello.nonce,
            server_nonce,
        ],
    )
}

/// A fresh random nonce.
pub(crate) fn nonce() -> [u8; AUTH_LEN] {
    let mut n = [0u8; AUTH_LEN];
    rand::rng().fill_bytes(&mut n);
    n
}

fn new_mac(key: &[u8]) -> HmacSha256 {
    // HMAC takes keys of any length: this never fails.
    <HmacSha256 as KeyInit>::new_from_slice(key).unwrap_or_else(|_| unreachable!())
}

/// HMAC-SHA256 over `parts`, each prefixed with its length (so no two part lists collide).
fn mac_of(key: &[u8], parts: &[&[u8]]) -> HmacSha256 {
    let mut mac = new_mac(key);
    for p in parts {
        mac.update(&(p.len() as u64).to_be_bytes());
        mac.update(p);
    }
    mac
}

fn hmac(key: &[u8], parts: &[&[u8]]) -> [u8; AUTH_LEN] {
    mac_of(key, parts).finalize().into_bytes().into()
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn from_hex(s: &str) -> Option<[u8; AUTH_LEN]> {
    if s.len() != AUTH_LEN * 2 || !s.is_ascii() {
        return None;
    }
    let mut out = [0u8; AUTH_LEN];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// Counts of this process's authentication outcomes (every server of the process).
#[derive(Debug, Default)]
pub struct AuthCounters {
    /// Connections authenticated.
    pub accepted: AtomicU64,
    /// Connections refused: wrong key or role, no authentication, malformed or abandoned
    /// exchange.
    pub refused: AtomicU64,
    /// Server-only requests refused from connections not authenticated as a server.
    pub server_only_refused: AtomicU64,
    /// Connections whose TLS handshake failed (no client certificate, one of another CA,
    /// not TLS): see [`crate::tls`].
    pub tls_refused: AtomicU64,
}

/// This process's counters.
pub static COUNTERS: AuthCounters = AuthCounters {
    accepted: AtomicU64::new(0),
    refused: AtomicU64::new(0),
    server_only_refused: AtomicU64::new(0),
    tls_refused: AtomicU64::new(0),
};

/// The figures of [`AuthCounters`], declared once for the Prometheus endpoint (prefix
/// `weft`: `weft_auth_accepted_total`, ...), read from [`COUNTERS`].
pub const AUTH_METRICS: [Stat<AuthCounters>; 4] = [
    Stat::new(
        MetricDef::new(
            "auth_accepted",
            "Connections authenticated by this process's servers.",
            MetricKind::Counter,
        ),
        |c| c.accepted.load(Ordering::Relaxed),
    ),
    Stat::new(
        MetricDef::new(
            "auth_refused",
            "Connections refused: wrong key or role, no authentication, a malformed or abandoned exchange.",
            MetricKind::Counter,
        ),
        |c| c.refused.load(Ordering::Relaxed),
    ),
    Stat::new(
        MetricDef::new(
            "auth_server_only_refused",
            "Server-only requests refused from connections not authenticated as a server.",
            MetricKind::Counter,
        ),
        |c| c.server_only_refused.load(Ordering::Relaxed),
    ),
    Stat::new(
        MetricDef::new(
            "tls_refused",
            "Connections whose TLS handshake failed: no client certificate, one of another CA, not TLS.",
            MetricKind::Counter,
        ),
        |c| c.tls_refused.load(Ordering::Relaxed),
    ),
];

impl AuthCounters {
    /// `(accepted, refused, server_only_refused)` now.
    pub fn snapshot(&self) -> (u64, u64, u64) {
        (
            self.accepted.load(Ordering::Relaxed),
            self.refused.load(Ordering::Relaxed),
            self.server_only_refused.load(Ordering::Relaxed),
        )
    }
}

#[cfg(test)]
mod tests;
