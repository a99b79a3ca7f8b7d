//! Client classes (Lustre's nodemap): what clients of an address range may do.
//!
//! A class is configured as persistent parameters on the MGS (`weft nodemap add`, or
//! `set_param -P nodemap.NAME.KEY=VALUE`): `range` (comma-separated CIDR blocks),
//! `squash_root`, `read_only` and `admin` (`0`/`1`). Every server applies the MGS's
//! configuration to its process ([`install`]) and checks each request of a peer by the
//! address of its connection ([`check`]):
//! - **squash_root**: user and group 0 in the request's credentials become `nobody`
//!   ([`NOBODY`]) for permission checks and ownership;
//! - **read_only**: every request that may change stored data fails with EROFS;
//! - **admin**: once any class exists, administrators' requests (`set_param -P`, pools,
//!   repositories, migration) are accepted only from a class with this flag.
//!
//! A peer in no class gets none of the three flags. Peers authenticated as servers and
//! in-process peers (`weft up`) are not classified: servers are trusted. Without keys a
//! server cannot tell servers from clients, so classes then apply to every peer in their
//! ranges: give ranges of client nodes only. Refusals are counted and logged with the
//! peer's address.

use crate::peer::{Peer, PeerAuth};
use parking_lot::RwLock;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use weft_proto::{Errno, Message, WireError};

/// The user and group a squashed root becomes.
pub const NOBODY: u32 = 65534;

/// The parameter prefix of client classes.
pub const PARAM_PREFIX: &str = "nodemap.";

/// An address block, `ADDR/BITS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    net: IpAddr,
    bits: u8,
}

impl Cidr {
    /// Parses `ADDR/BITS` (or a bare address: that address alone).
    pub fn parse(s: &str) -> Result<Self, String> {
        let (addr, bits) = match s.split_once('/') {
            Some((a, b)) => (a, Some(b)),
            None => (s, None),
        };
        let net: IpAddr = addr
            .trim()
            .parse()
            .map_err(|_| format!("'{s}' is not an address block (ADDR/BITS)"))?;
        let max = if net.is_ipv4() { 32 } else { 128 };
        let bits = match bits {
            None => max,
            Some(b) => b
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|b| *b <= max)
                .ok_or_else(|| format!("'{s}' has no prefix length 0..={max}"))?,
        };
        Ok(Self { net, bits })
    }

    /// Whether `ip` is in the block (IPv4-mapped IPv6 addresses count as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        match (self.net, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => prefix_eq(&n.octets(), &a.octets(), self.bits),
            (IpAddr::V6(n), IpAddr::V6(a)) => prefix_eq(&n.octets(), &a.octets(), self.bits),
            _ => false,
        }
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.net, self.bits)
    }
}

fn prefix_eq(a: &[u8], b: &[u8], bits: u8) -> bool {
    let (whole, rest) = ((bits / 8) as usize, bits % 8);
    if a[..whole] != b[..whole] {
        return false;
    }
    rest == 0 || {
        let mask = 0xffu8 << (8 - rest);
        a[whole] & mask == b[whole] & mask
    }
}

/// One client class.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Class {
    /// Its name.
    pub name: String,
    /// The address blocks of its clients.
    pub ranges: Vec<Cidr>,
    /// uid/gid 0 become [`NOBODY`].
    pub squash_root: bool,
    /// Changes fail with EROFS.
    pub read_only: bool,
    /// May send administrators' requests.
    pub admin: bool,
}

/// Every class, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeMap {
    classes: Vec<Class>,
}

impl NodeMap {
    /// The classes that the `nodemap.*` parameters among `params` describe, and what was
    /// wrong with the others (skipped).
    pub fn from_params<'a>(
        params: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> (Self, Vec<String>) {
        let mut classes: Vec<Class> = Vec::new();
        let mut errors = Vec::new();
        for (name, value) in params {
            let Some(rest) = name.strip_prefix(PARAM_PREFIX) else {
                continue;
            };
            let Some((class, key)) = rest.rsplit_once('.') else {
                errors.push(format!("{name}: not nodemap.CLASS.KEY"));
                continue;
            };
            let i = match classes.iter().position(|c| c.name == class) {
                Some(i) => i,
                None => {
                    classes.push(Class {
                        name: class.to_string(),
                        ..Class::default()
                    });
                    classes.len() - 1
                }
            };
            let c = &mut classes[i];
            let flag = || match value.trim() {
                "1" | "true" | "yes" | "on" => Ok(true),
                "0" | "false" | "no" | "off" => Ok(false),
                v => Err(format!("{name}: '{v}' is not 0 or 1")),
            };
            let applied = match key {
                "range" => value
                    .split(',')
                    .filter(|r| !r.trim().is_empty())
                    .map(Cidr::parse)
                    .collect::<Result<Vec<_>, _>>()
                    .map(|r| c.ranges = r)
                    .map_err(|e| format!("{name}: {e}")),
                "squash_root" => flag().map(|f| c.squash_root = f),
                "read_only" => flag().map(|f| c.read_only = f),
                "admin" => flag().map(|f| c.admin = f),
                other => Err(format!("{name}: unknown key '{other}'")),
            };
            if let Err(e) = applied {
                errors.push(e);
            }
        }
        classes.sort_by(|a, b| a.name.cmp(&b.name));
        (Self { classes }, errors)
    }

    /// Whether no class is configured (every peer may do everything).
    pub fn is_empty(&self) -> bool {
        self.classes.is_empty()
    }

    /// The class of `ip`: the first by name whose ranges hold it.
    pub fn class_of(&self, ip: IpAddr) -> Option<&Class> {
        self.classes
            .iter()
            .find(|c| c.ranges.iter().any(|r| r.contains(ip)))
    }

    /// Every class.
    pub fn classes(&self) -> &[Class] {
        &self.classes
    }
}

static CURRENT: LazyLock<RwLock<Arc<NodeMap>>> = LazyLock::new(RwLock::default);

/// Requests refused by a client class (read-only or not admin), in this process.
pub static DENIED: AtomicU64 = AtomicU64::new(0);

/// Makes `map` the classes this process's servers apply.
pub fn install(map: NodeMap) {
    *CURRENT.write() = Arc::new(map);
}

/// The classes this process's servers apply.
pub fn current() -> Arc<NodeMap> {
    CURRENT.read().clone()
}

/// Applies `peer`'s class to `msg`: refuses it (EROFS from a read-only class, EPERM for an
/// administrator's request from a class without the admin flag), or squashes root in it.
pub fn check<M: Message>(peer: &Peer, msg: &mut M) -> Result<(), WireError> {
    if matches!(peer.auth, PeerAuth::Server | PeerAuth::InProcess) {
        return Ok(());
    }
    let map = current();
    if map.is_empty() {
        return Ok(());
    }
    let class = map.class_of(peer.addr.ip());
    let name = class.map_or("(none)", |c| c.name.as_str());
    let (squash, read_only, admin) = class.map_or((false, false, false), |c| {
        (c.squash_root, c.read_only, c.admin)
    });
    let denied = if msg.admin_only() && !admin {
        Some(WireError::new(
            Errno::Perm,
            format!("{} needs an admin client class", msg.op_name()),
        ))
    } else if read_only && msg.modifies() {
        Some(WireError::new(
            Errno::RoFs,
            format!("client class '{name}' is read-only"),
        ))
    } else {
        None
    };
    if let Some(e) = denied {
        DENIED.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(peer = %peer.addr, class = name, op = msg.op_name(), error = %e, "request refused by client class");
        return Err(e);
    }
    if squash {
        msg.squash_root(NOBODY);
    }
    Ok(())
}

#[cfg(test)]
mod tests;
