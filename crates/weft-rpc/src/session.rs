//! Eviction as a client node sees it: what the connections of one node share.
//!
//! A server that hears nothing from a connected node for its `evict_timeout` (the node was
//! partitioned or stopped; a live node pings) evicts it: it drops the connection and what
//! the node held there (locks, open handles, grants) so that other nodes proceed. When the
//! node comes back, the target's connect reply says so ([`weft_proto::ConnectReply::evicted`])
//! and the node's session moves to a new epoch. Whatever the node cached before — dirty
//! data of files opened in an older epoch — must then never reach a server, where it could
//! land over what others wrote meanwhile: requests carry the epoch of their content
//! ([`crate::RequestContext::epoch`]) and [`crate::Reconnecting`] refuses an older one
//! with [`crate::RpcError::Evicted`] before sending it, on the very connection whose
//! handshake announced the eviction. The application sees EIO; files opened afterwards
//! work as before.

use std::sync::atomic::{AtomicU64, Ordering};

/// The eviction epoch of one client node, shared by all its connections.
#[derive(Debug, Default)]
pub struct ClientSession {
    epoch: AtomicU64,
}

impl ClientSession {
    /// A node never evicted (epoch 0).
    pub fn new() -> Self {
        Self::default()
    }

    /// How many times a server has evicted this node: content of an older epoch is
    /// refused.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Records an eviction announced by a connect reply; returns the new epoch.
    pub(crate) fn evicted(&self) -> u64 {
        self.epoch.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// Whether content of epoch `epoch` (none: not bound to one) may still be sent.
    pub fn admits(&self, epoch: Option<u64>) -> bool {
        epoch.is_none_or(|e| e >= self.epoch())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_of_an_older_epoch_is_refused_after_an_eviction() {
        let s = ClientSession::new();
        assert!(s.admits(Some(0)) && s.admits(None));
        assert_eq!(s.evicted(), 1);
        assert!(!s.admits(Some(0)), "cached before the eviction");
        assert!(s.admits(Some(1)) && s.admits(None));
    }
}
