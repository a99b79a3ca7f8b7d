//! The OST as a `weft-rpc` service.

use crate::ost_target::Ost;
use bytes::Bytes;
use std::future::Future;
use std::sync::Arc;
use weft_proto::WireError;
use weft_proto::WireResult;
use weft_proto::handshake::Counter;
use weft_proto::hsm::RestoreChunk;
use weft_proto::ost::{OstReply, OstRequest};
use weft_rpc::service::BoxFuture;
use weft_rpc::{Handler, Peer};

/// The copy half of HSM restores done by the OSS itself for the MDS
/// ([`OstRequest::Restore`]): the `weft` binary's OSS implements it with `weft-repo`'s data
/// mover, writing the OSS's own OSTs in-process.
pub trait DataMover: Send + Sync + 'static {
    /// Copies `chunk` from its data repository into the file's objects on OSTs `osts`
    /// (empty: all of them) and syncs them before it returns; answers the bytes copied.
    fn restore_chunk(
        &self,
        chunk: RestoreChunk,
        osts: Vec<u32>,
    ) -> BoxFuture<'_, Result<u64, WireError>>;
}

/// Serves [`OstRequest`]s from the transport with an [`Ost`].
#[derive(Clone)]
pub struct OstHandler {
    ost: Arc<Ost>,
    /// Serves [`OstRequest::Restore`] (without it: `ENOSYS`).
    mover: Option<Arc<dyn DataMover>>,
}

impl std::fmt::Debug for OstHandler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OstHandler")
            .field("ost", &self.ost)
            .field("mover", &self.mover.is_some())
            .finish()
    }
}

impl OstHandler {
    /// A handler serving `ost`, without a data mover.
    pub fn new(ost: Arc<Ost>) -> Self {
        Self { ost, mover: None }
    }

    /// The same, with `mover` serving the restores sent to this OST.
    pub fn with_mover(mut self, mover: Arc<dyn DataMover>) -> Self {
        self.mover = Some(mover);
        self
    }

    /// The target it serves.
    pub fn ost(&self) -> &Arc<Ost> {
        &self.ost
    }
}

impl Handler for OstHandler {
    type Request = OstRequest;
    type Reply = OstReply;

    fn handle(
        &self,
        peer: &Peer,
        request: OstRequest,
        bulk: Bytes,
    ) -> impl Future<Output = WireResult<(OstReply, Bytes)>> + Send {
        let ost = Arc::clone(&self.ost);
        let mover = self.mover.clone();
        let conn = peer.conn_id;
        async move {
            match (request, mover) {
                // With a bulk it goes on to `execute_from`, which refuses it.
                (OstRequest::Restore { chunk, osts }, Some(mover)) if bulk.is_empty() => {
                    let r = mover.restore_chunk(chunk, osts).await;
                    ost.record_restore(*r.as_ref().unwrap_or(&0), r.is_ok());
                    r.map(|bytes| (OstReply::Restored { bytes }, Bytes::new()))
                }
                (request, _) => ost.execute_from(conn, request, bulk).await,
            }
        }
    }

    fn disconnected(&self, peer: &Peer) {
        self.ost.release_grants(peer.conn_id);
    }

    fn counters(&self) -> Vec<Counter> {
        let s = self.ost.stats();
        let mut out = weft_rpc::metric::counters(&crate::OST_STATS, &s);
        // Settings and live state that are not statistics of the data path.
        out.push(counter("granted_bytes", self.ost.granted()));
        out.push(counter("compress", u64::from(self.ost.compress())));
        for (name, mb) in self.ost.cache_limits().named() {
            out.push(counter(name, mb));
        }
        for b in &s.brw {
            out.push(counter(&format!("brw.read.{}", b.max_bytes), b.reads));
            out.push(counter(&format!("brw.write.{}", b.max_bytes), b.writes));
        }
        out
    }
}

fn counter(name: &str, value: u64) -> Counter {
    Counter {
        name: name.to_string(),
        value,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::OstOptions;
    use weft_proto::ost::ObjectAttr;
    use weft_proto::{ConnectRequest, Errno, Fid, ObjectId, PROTOCOL_VERSION, TargetId};
    use weft_rpc::{
        ClientOptions, Connection, Router, RpcError, Server, ServerOptions, TcpTransport,
        TypedService,
    };

    #[tokio::test]
    async fn serves_reads_and_writes_over_tcp() {
        let dir = tempfile::tempdir().unwrap();
        let ost = Ost::open(
            dir.path(),
            OstOptions {
                index: 1,
                fsname: "svc".into(),
            },
        )
        .unwrap();
        let router = Router::new("svc");
        router.add(TypedService::new(
            TargetId::ost(1),
            ost.uuid(),
            Arc::new(OstHandler::new(ost.clone())),
        ));
        let server = Server::bind("127.0.0.1:0", router, ServerOptions::default())
            .await
            .unwrap();
        let hello = ConnectRequest {
            fsname: "svc".into(),
            client_uuid: uuid::Uuid::new_v4(),
            protocol_version: PROTOCOL_VERSION,
            features: 0,
            target: TargetId::ost(1),
        };
        let addr = server.local_addr().to_string();
        let conn = Connection::connect(
            &TcpTransport,
            &addr,
            &hello,
            None,
            &ClientOptions::default(),
        )
        .await
        .unwrap();
        let object = ObjectId {
            fid: Fid {
                seq: 0x2_0000_0400,
                oid: 1,
                ver: 0,
            },
            component: 0,
            stripe: 0,
        };
        let data = Bytes::from(vec![5u8; 1 << 20]);
        let (reply, _): (OstReply, Bytes) = conn
            .call(
                &OstRequest::Write {
                    object,
                    offset: 0,
                    sync: true,
                    compress: Default::default(),
                },
                data.clone(),
            )
            .await
            .unwrap();
        assert!(matches!(
            reply,
            OstReply::Attr(ObjectAttr { size: 1048576, .. })
        ));
        let (reply, bulk): (OstReply, Bytes) = conn
            .call(
                &OstRequest::Read {
                    object,
                    offset: 0,
                    len: 2 << 20,
                },
                Bytes::new(),
            )
            .await
            .unwrap();
        assert!(matches!(reply, OstReply::Data { .. }));
        assert_eq!(bulk, data);
        let e = conn
            .call::<_, OstReply>(
                &OstRequest::Punch {
                    object,
                    size: u64::MAX,
                    compress: Default::default(),
                },
                Bytes::new(),
            )
            .await
            .unwrap_err();
        assert!(matches!(e, RpcError::Remote(w) if w.errno == Errno::FBig));
        server.shutdown().await;
    }
}
