//! What this crate's unit tests share.

use crate::{ClientOptions, Connection, RpcError, Tcp};
use uuid::Uuid;
use weft_proto::{ConnectRequest, PROTOCOL_VERSION, TargetId};

/// Connects to OST0 of file system `fs` at `addr` through `transport` (a new node each
/// time).
pub(crate) async fn connect_ost0(addr: &str, transport: &Tcp) -> Result<Connection, RpcError> {
    let hello = ConnectRequest {
        fsname: "fs".into(),
        client_uuid: Uuid::new_v4(),
        protocol_version: PROTOCOL_VERSION,
        features: 0,
        target: TargetId::ost(0),
    };
    Connection::connect(transport, addr, &hello, None, &ClientOptions::default()).await
}
