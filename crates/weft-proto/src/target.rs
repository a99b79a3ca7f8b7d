//! Names of the targets a connection can be bound to.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The kind of a target: what role it plays in the file system.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum TargetKind {
    /// The management service (there is one; its index is 0).
    Mgs,
    /// A metadata target.
    Mdt,
    /// An object storage target.
    Ost,
}

/// One target of the file system: its kind and index (`MDT0000`, `OST0003`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TargetId {
    /// What the target is.
    pub kind: TargetKind,
    /// Its index among targets of the same kind.
    pub index: u32,
}

impl TargetId {
    /// The management service.
    pub const MGS: TargetId = TargetId {
        kind: TargetKind::Mgs,
        index: 0,
    };

    /// The metadata target with this index.
    pub const fn mdt(index: u32) -> Self {
        Self {
            kind: TargetKind::Mdt,
            index,
        }
    }

    /// The object storage target with this index.
    pub const fn ost(index: u32) -> Self {
        Self {
            kind: TargetKind::Ost,
            index,
        }
    }
}

impl fmt::Display for TargetId {
    /// Lustre's spelling: `MGS`, `MDT0000`, `OST001f`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            TargetKind::Mgs => write!(f, "MGS"),
            TargetKind::Mdt => write!(f, "MDT{:04x}", self.index),
            TargetKind::Ost => write!(f, "OST{:04x}", self.index),
        }
    }
}
