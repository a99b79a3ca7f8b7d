//! The RPC face of an MDT: adapts [`Mdt::execute`] to the transport's [`Handler`].

use crate::locks::{Caller, LockTable};
use crate::mdt::Mdt;
use bytes::Bytes;
use std::future::Future;
use std::sync::Arc;
use weft_proto::WireResult;
use weft_proto::handshake::Counter;
use weft_proto::mdt::{MdtReply, MdtRequest};
use weft_rpc::{Handler, Peer, RequestContext};

/// Serves MDT requests arriving over the transport. Open handles and file locks belong to
/// the connection that made them; when it breaks they are kept for the same client node's
/// next connection for a grace period ([`Mdt::disconnect_client`]), then closed and
/// released.
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

    /// Serves `request` from `peer`; `numbers` gives its resend numbers `(seq, acked)`
    /// when it runs.
    fn serve(
        &self,
        peer: &Peer,
        request: MdtRequest,
        numbers: impl FnOnce() -> (u64, u64) + Send + 'static,
    ) -> impl Future<Output = WireResult<(MdtReply, Bytes)>> + Send + 'static {
        let mdt = self.mdt.clone();
        let conn = peer.conn_id;
        let client = peer.client_uuid;
        let in_process = peer.in_process;
        let callbacks = peer.callbacks.clone();
        async move {
            // The transport marks the connection closed before it calls `disconnected`,
            // so a lock request racing with the cleanup is refused, not left behind.
            let closed = move || callbacks.is_closed();
            // Locks this client held on a connection that broke become this one's.
            mdt.locks().adopt(conn, client, &closed);
            if LockTable::handles(&request) {
                let caller = Caller {
                    conn,
                    client,
                    closed: &closed,
                };
                return mdt
                    .locks()
                    .execute(&caller, request)
                    .await
                    .map(|r| (r, Bytes::new()));
            }
            let (seq, acked) = numbers();
            let origin = crate::Origin {
                client,
                seq,
                acked,
                resendable: !in_process,
            };
            mdt.execute_from(conn, origin, request)
                .await
                .map(|r| (r, Bytes::new()))
        }
    }
}

impl Handler for MdtHandler {
    type Request = MdtRequest;
    type Reply = MdtReply;

    fn handle(
        &self,
        peer: &Peer,
        request: MdtRequest,
        bulk: Bytes,
    ) -> impl Future<Output = WireResult<(MdtReply, Bytes)>> + Send {
        let _ = bulk;
        // Without a context the request is not numbered (the service calls `handle_in`).
        self.serve(peer, request, || (0, 0))
    }

    fn handle_in(
        &self,
        ctx: &RequestContext,
        peer: &Peer,
        request: MdtRequest,
        _bulk: Bytes,
    ) -> impl Future<Output = WireResult<(MdtReply, Bytes)>> + Send {
        let numbers = (ctx.seq, ctx.acked);
        self.serve(peer, request, move || numbers)
    }

    fn disconnected(&self, peer: &Peer) {
        self.mdt.disconnect_client(peer.conn_id, peer.client_uuid);
    }

    /// An evicted client's locks are released and its handles closed at once (files it
    /// held open after unlinking them are destroyed), so other clients proceed; nothing is
    /// kept for its return, which it learns of at its next connect.
    fn evicted(&self, peer: &Peer) {
        self.mdt.disconnect(peer.conn_id);
    }

    fn counters(&self) -> Vec<Counter> {
        let mut c = weft_rpc::metric::counters(&crate::stats::MDT_STATS, &self.mdt.stats());
        for r in self.mdt.released() {
            for (what, value) in [("files", r.files), ("bytes", r.bytes)] {
                c.push(Counter {
                    name: format!("released.{}.{what}", r.archive_id),
                    value,
                });
            }
        }
        c.extend(self.mdt.view_counters());
        c
    }
}
