//! Malformed input against real server processes: each bad connection gets a clear error or
//! is closed, and the server keeps serving everybody else.

use crate::bin;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use uuid::Uuid;
use weft_proto::frame::{FrameHeader, HEADER_LEN, MAX_BULK};
use weft_proto::handshake::opcode;
use weft_proto::mdt::{Credentials, MdtRequest};
use weft_proto::{
    ConnectReply, ConnectRequest, Errno, Fid, PROTOCOL_VERSION, RequestHeader, TargetId, WireResult,
};
use weft_testkit::{FSNAME, TestCluster};

async fn send(s: &mut TcpStream, opcode: u16, xid: u64, body: &[u8]) {
    let h = FrameHeader::new(opcode, 0, xid, body, &[]).unwrap();
    s.write_all(&h.encode()).await.unwrap();
    s.write_all(body).await.unwrap();
}

async fn recv(s: &mut TcpStream) -> Option<(FrameHeader, Vec<u8>)> {
    let mut hdr = [0u8; HEADER_LEN];
    tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut hdr))
        .await
        .ok()?
        .ok()?;
    let h = FrameHeader::decode(&hdr).ok()?;
    let mut body = vec![0u8; h.body_len as usize];
    s.read_exact(&mut body).await.ok()?;
    let mut bulk = vec![0u8; h.bulk_len as usize];
    s.read_exact(&mut bulk).await.ok()?;
    Some((h, body))
}

async fn handshake(addr: &str, fsname: &str) -> (TcpStream, WireResult<ConnectReply>) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let hello = ConnectRequest {
        fsname: fsname.into(),
        client_uuid: Uuid::new_v4(),
        protocol_version: PROTOCOL_VERSION,
        features: 0,
        target: TargetId::mdt(0),
    };
    send(
        &mut s,
        opcode::CONNECT,
        1,
        &weft_proto::encode(&hello).unwrap(),
    )
    .await;
    let (_, body) = recv(&mut s).await.expect("a handshake reply");
    (s, weft_proto::decode(&body).unwrap())
}

/// True when the server closed the stream (read returns EOF or an error within 5 s).
async fn closed(mut s: TcpStream) -> bool {
    let mut buf = [0u8; 256];
    matches!(
        tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await,
        Ok(Ok(0) | Err(_))
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_metadata_server_survives_hostile_clients() {
    let mut tc = TestCluster::start(bin(), 1).await.unwrap();
    let client = tc.client().await.unwrap();
    let mdt = client.mdt(0).unwrap();
    let cred = Credentials::root();
    mdt.mkdir(Fid::ROOT, b"before", 0o755, &cred).await.unwrap();
    let addr = tc.mds_addr.clone();

    // Random bytes instead of a frame.
    let mut s = TcpStream::connect(&addr).await.unwrap();
    s.write_all(&[0xA5; 4096]).await.unwrap();
    assert!(closed(s).await);

    // A wrong file system name is refused with a message, then the connection closes.
    let (s, reply) = handshake(&addr, "notours").await;
    let err = reply.unwrap_err();
    assert_eq!(err.errno, Errno::Inval);
    assert!(err.message.contains("notours"), "{err}");
    assert!(closed(s).await);

    // After a good handshake: an unknown opcode and a garbage body get EPROTO answers and
    // the connection stays usable.
    let (mut s, reply) = handshake(&addr, FSNAME).await;
    reply.unwrap();
    send(&mut s, 7777, 2, b"\x01\x02\x03").await;
    let (h, body) = recv(&mut s).await.unwrap();
    assert_eq!(h.xid, 2);
    assert_eq!(
        weft_proto::decode::<WireResult<()>>(&body)
            .unwrap()
            .unwrap_err()
            .errno,
        Errno::Proto
    );
    send(&mut s, 201, 3, &[0xff; 64]).await;
    let (_, body) = recv(&mut s).await.unwrap();
    assert_eq!(
        weft_proto::decode::<WireResult<()>>(&body)
            .unwrap()
            .unwrap_err()
            .errno,
        Errno::Proto
    );
    let getattr = weft_proto::encode(&(
        RequestHeader::default(),
        MdtRequest::GetAttr { fid: Fid::ROOT },
    ))
    .unwrap();
    send(&mut s, 201, 4, &getattr).await;
    let (h, body) = recv(&mut s).await.unwrap();
    assert_eq!(h.xid, 4);
    let attr: WireResult<weft_proto::mdt::MdtReply> = weft_proto::decode(&body).unwrap();
    assert!(matches!(attr, Ok(weft_proto::mdt::MdtReply::Attr(a)) if a.fid == Fid::ROOT));
    // A request body without its request header is malformed, not misread.
    let bare = weft_proto::encode(&MdtRequest::GetAttr { fid: Fid::ROOT }).unwrap();
    send(&mut s, 201, 5, &bare).await;
    let (_, body) = recv(&mut s).await.unwrap();
    assert_eq!(
        weft_proto::decode::<WireResult<()>>(&body)
            .unwrap()
            .unwrap_err()
            .errno,
        Errno::Proto
    );

    // An oversized bulk length closes that connection before anything is allocated.
    let mut h = FrameHeader::new(201, 0, 6, &getattr, &[]).unwrap();
    h.bulk_len = MAX_BULK + 1;
    s.write_all(&h.encode()).await.unwrap();
    assert!(closed(s).await);

    // A client that vanishes in the middle of a request.
    let (mut s, _) = handshake(&addr, FSNAME).await;
    let h = FrameHeader::new(201, 0, 9, &getattr, &[]).unwrap();
    s.write_all(&h.encode()).await.unwrap();
    s.write_all(&getattr[..getattr.len() / 2]).await.unwrap();
    drop(s);

    // Everybody else is still served, and the server process is alive.
    mdt.mkdir(Fid::ROOT, b"after", 0o755, &cred).await.unwrap();
    assert_eq!(
        mdt.lookup(Fid::ROOT, b"before", &cred).await.unwrap().kind,
        weft_proto::mdt::FileKind::Directory
    );
    assert!(
        tc.mds.try_wait().unwrap().is_none(),
        "the MDS process exited"
    );
}
