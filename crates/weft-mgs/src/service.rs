//! The MGS as a `weft-rpc` service: requests go to [`Mgs::execute`], and every connected
//! peer is subscribed to configuration-change callbacks.

use crate::mgs::Mgs;
use crate::subscribers::ConfigSubscriber;
use bytes::Bytes;
use std::future::Future;
use std::sync::Arc;
use weft_proto::mgs::{MgsCallback, MgsReply, MgsRequest};
use weft_proto::{Errno, WireError, WireResult};
use weft_rpc::CallbackSender;
use weft_rpc::{Handler, Peer};

/// Serves [`MgsRequest`]s from the transport with an [`Mgs`].
#[derive(Debug, Clone)]
pub struct MgsHandler {
    mgs: Arc<Mgs>,
}

impl MgsHandler {
    /// A handler serving `mgs`.
    pub fn new(mgs: Arc<Mgs>) -> Self {
        Self { mgs }
    }

    /// The service it serves.
    pub fn mgs(&self) -> &Arc<Mgs> {
        &self.mgs
    }
}

/// A connected peer, as a subscriber: callbacks go down its connection.
struct PeerCallbacks(CallbackSender);

impl ConfigSubscriber for PeerCallbacks {
    fn config_changed(&self, version: u64) -> bool {
        match self.0.notify(&MgsCallback::ConfigChanged { version }) {
            Ok(()) => true,
            // A full send queue loses this one announcement; the peer sees a newer version
            // in its next fetch or callback. Only a closed connection is forgotten.
            Err(e) => {
                tracing::debug!(peer = ?self.0, error = %e, version, "config callback not sent");
                !self.0.is_closed()
            }
        }
    }
}

impl Handler for MgsHandler {
    type Request = MgsRequest;
    type Reply = MgsReply;

    fn handle(
        &self,
        peer: &Peer,
        request: MgsRequest,
        bulk: Bytes,
    ) -> impl Future<Output = WireResult<(MgsReply, Bytes)>> + Send {
        if !self.mgs.is_subscribed(peer.conn_id) && !peer.callbacks.is_closed() {
            self.mgs.subscribe(
                peer.conn_id,
                Arc::new(PeerCallbacks(peer.callbacks.clone())),
            );
        }
        let mgs = Arc::clone(&self.mgs);
        async move {
            if !bulk.is_empty() {
                return Err(WireError::new(Errno::Proto, "MGS requests carry no bulk"));
            }
            Ok((mgs.execute(request).await?, Bytes::new()))
        }
    }

    fn disconnected(&self, peer: &Peer) {
        self.mgs.unsubscribe(peer.conn_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::time::Duration;
    use weft_proto::{ConnectRequest, PROTOCOL_VERSION, TargetId};
    use weft_rpc::{
        CallbackHandler, ClientOptions, Connection, Router, Server, ServerOptions, TcpTransport,
        TypedService,
    };

    #[derive(Default)]
    struct Collect(Mutex<Vec<MgsCallback>>);

    impl CallbackHandler for Collect {
        fn on_callback(&self, _opcode: u16, body: &[u8]) {
            let cb: MgsCallback = weft_proto::decode(body).unwrap();
            self.0.lock().unwrap().push(cb);
        }
    }

    #[tokio::test]
    async fn peers_are_told_about_changes_and_forgotten_on_disconnect() {
        let dir = tempfile::tempdir().unwrap();
        let mgs = Mgs::open(dir.path(), Some("svc")).unwrap();
        let router = Router::new("svc");
        router.add(TypedService::new(
            TargetId::MGS,
            mgs.uuid(),
            Arc::new(MgsHandler::new(mgs.clone())),
        ));
        let server = Server::bind("127.0.0.1:0", router, ServerOptions::default())
            .await
            .unwrap();
        let hello = ConnectRequest {
            fsname: "svc".into(),
            client_uuid: uuid::Uuid::new_v4(),
            protocol_version: PROTOCOL_VERSION,
            features: 0,
            target: TargetId::MGS,
        };
        let addr = server.local_addr().to_string();
        let seen = Arc::new(Collect::default());
        let conn = Connection::connect(
            &TcpTransport,
            &addr,
            &hello,
            Some(seen.clone()),
            &ClientOptions::default(),
        )
        .await
        .unwrap();
        let (reply, _): (MgsReply, Bytes) = conn
            .call(&MgsRequest::GetConfig, Bytes::new())
            .await
            .unwrap();
        let MgsReply::Config(config) = reply else {
            panic!("{reply:?}")
        };
        assert_eq!(mgs.subscriber_count(), 1);
        let (reply, _): (MgsReply, Bytes) = conn
            .call(
                &MgsRequest::PoolNew {
                    pool: "flash".into(),
                },
                Bytes::new(),
            )
            .await
            .unwrap();
        assert_eq!(reply, MgsReply::Ok);
        let want = MgsCallback::ConfigChanged {
            version: config.version + 1,
        };
        for _ in 0..200 {
            if !seen.0.lock().unwrap().is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(seen.0.lock().unwrap().as_slice(), &[want]);
        drop(conn);
        for _ in 0..200 {
            if mgs.subscriber_count() == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(mgs.subscriber_count(), 0, "disconnect forgets the peer");
        server.shutdown().await;
    }
}
