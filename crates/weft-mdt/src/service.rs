//! The RPC face of an MDT: adapts [`Mdt::execute`] to the transport's [`Handler`].

use crate::mdt::Mdt;
use bytes::Bytes;
use std::future::Future;
use std::sync::Arc;
use weft_proto::WireResult;
use weft_proto::handshake::Counter;
use weft_proto::mdt::{MdtReply, MdtRequest};
use weft_rpc::{Handler, Peer};

/// Serves MDT requests arriving over the transport. Open handles belong to the connection
/// that opened them; when it closes, its handles are closed.
#[derive(Debug, Clone)]
pub struct MdtHandler {
    mdt: Arc<Mdt>,
}

impl MdtHandler {
    /// A handler for `mdt`.
    pub fn new(mdt: Arc<Mdt>) -> Self {
        Self { mdt }
    }

    /// The MDT served.
    pub fn mdt(&self) -> &Arc<Mdt> {
        &self.mdt
    }
}

impl Handler for MdtHandler {
    type Request = MdtRequest;
    type Reply = MdtReply;

    fn handle(
        &self,
        peer: &Peer,
        request: MdtRequest,
        _bulk: Bytes,
    ) -> impl Future<Output = WireResult<(MdtReply, Bytes)>> + Send {
        let mdt = self.mdt.clone();
        let conn = peer.conn_id;
        async move { mdt.execute(conn, request).await.map(|r| (r, Bytes::new())) }
    }

    fn disconnected(&self, peer: &Peer) {
        self.mdt.disconnect(peer.conn_id);
    }

    fn counters(&self) -> Vec<Counter> {
        let s = self.mdt.stats();
        [
            ("dirs", s.dirs),
            ("files", s.files),
            ("orphans", s.orphans),
            ("pending_destroys", s.pending_destroys),
            ("open_handles", s.open_handles),
            ("commits", s.commits),
            ("write_ops", s.write_ops),
        ]
        .into_iter()
        .map(|(name, value)| Counter {
            name: name.to_string(),
            value,
        })
        .collect()
    }
}
