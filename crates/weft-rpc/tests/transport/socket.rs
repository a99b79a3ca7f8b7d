//! Over TCP: concurrency, bulk integrity, errors, callbacks, handshake refusals and
//! hostile input.

use super::*;
#[tokio::test]
async fn many_concurrent_requests_share_one_connection() {
    let (_server, addr) = start().await;
    let conn = Arc::new(connect(&addr, None).await);
    let mut tasks = Vec::new();
    for i in 0..200u32 {
        let conn = conn.clone();
        tasks.push(tokio::spawn(async move {
            // Replies arrive out of order (different sleeps); each must match its request.
            if i % 10 == 0 {
                let (s, _): (String, Bytes) = conn
                    .call(&EchoRequest::Sleep(u64::from(i % 30)), Bytes::new())
                    .await
                    .unwrap();
                assert_eq!(s, format!("slept {}", i % 30));
            } else {
                let (s, _): (String, Bytes) = conn
                    .call(&EchoRequest::Echo(i.to_string()), Bytes::new())
                    .await
                    .unwrap();
                assert_eq!(s, i.to_string());
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let stats = conn.stats().await.unwrap();
    let total: u64 = stats.ops.iter().map(|o| o.count).sum();
    assert_eq!(total, 200);
}

#[tokio::test]
async fn bulk_data_arrives_intact_both_ways() {
    let (_server, addr) = start().await;
    let conn = connect(&addr, None).await;
    let data: Vec<u8> = (0..(8 << 20))
        .map(|i: u32| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let (_, back): (String, Bytes) = conn
        .call(&EchoRequest::Reverse, Bytes::from(data.clone()))
        .await
        .unwrap();
    let mut expect = data;
    expect.reverse();
    assert_eq!(back.len(), expect.len());
    assert!(back == expect);
}

#[tokio::test]
async fn remote_errors_carry_their_errno() {
    let (_server, addr) = start().await;
    let conn = connect(&addr, None).await;
    let err = conn
        .call::<_, String>(&EchoRequest::Echo("fail".into()), Bytes::new())
        .await
        .unwrap_err();
    assert_eq!(err.errno(), Errno::NoEnt);
    // The connection still works afterwards.
    conn.ping().await.unwrap();
}

#[tokio::test]
async fn server_callbacks_reach_the_client_on_the_same_connection() {
    let (_server, addr) = start().await;
    let counter = Arc::new(CountCallbacks::default());
    let conn = connect(&addr, Some(counter.clone())).await;
    let _: (String, Bytes) = conn
        .call(&EchoRequest::Notify(5), Bytes::new())
        .await
        .unwrap();
    for _ in 0..100 {
        if counter.0.load(Ordering::SeqCst) == 5 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "callbacks did not arrive: {}",
        counter.0.load(Ordering::SeqCst)
    );
}

#[tokio::test]
async fn wrong_fsname_unknown_target_and_old_protocol_are_refused_clearly() {
    let (_server, addr) = start().await;
    let err = refused(&addr, &hello("other", TargetId::ost(0))).await;
    assert!(
        matches!(&err, RpcError::Handshake(e) if e.errno == Errno::Inval && e.message.contains("mismatch")),
        "{err}"
    );
    let err = refused(&addr, &hello(FS, TargetId::mdt(3))).await;
    assert!(
        matches!(&err, RpcError::Handshake(e) if e.errno == Errno::NoEnt),
        "{err}"
    );
    let mut old = hello(FS, TargetId::ost(0));
    old.protocol_version = 99;
    let err = refused(&addr, &old).await;
    assert!(
        matches!(&err, RpcError::Handshake(e) if e.errno == Errno::Proto),
        "{err}"
    );
}

#[tokio::test]
async fn unknown_opcodes_and_malformed_bodies_get_errors_and_the_connection_lives_on() {
    let (_server, addr) = start().await;
    let conn = connect(&addr, None).await;
    for (op, body) in [
        (4242u16, vec![1, 2, 3]),
        (900, vec![0xff; 40]),
        (
            901,
            weft_proto::encode(&EchoRequest::Echo("x".into())).unwrap(),
        ),
    ] {
        let frame = conn.call_raw(op, body, Bytes::new()).await.unwrap();
        let reply: WireResult<String> = weft_proto::decode(&frame.body).unwrap();
        assert_eq!(reply.unwrap_err().errno, Errno::Proto);
    }
    let (s, _): (String, Bytes) = conn
        .call(&EchoRequest::Echo("still here".into()), Bytes::new())
        .await
        .unwrap();
    assert_eq!(s, "still here");
}

#[tokio::test]
async fn hostile_frames_close_only_their_connection() {
    let (_server, addr) = start().await;
    let good = connect(&addr, None).await;

    // Random bytes instead of a handshake.
    let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
    s.write_all(&[0x42; 100]).await.unwrap();
    expect_closed(s).await;

    // A header announcing a body far over the limit: refused before any allocation.
    let mut s = raw_handshake(&addr).await;
    let mut h = FrameHeader::new(900, 0, 2, b"", b"").unwrap();
    h.body_len = MAX_BODY * 4;
    s.write_all(&h.encode()).await.unwrap();
    expect_closed(s).await;

    // A valid header whose body never comes: the client vanishes mid-request.
    let mut s = raw_handshake(&addr).await;
    let body = weft_proto::encode(&EchoRequest::Echo("half".into())).unwrap();
    let h = FrameHeader::new(900, 0, 2, &body, &[]).unwrap();
    s.write_all(&h.encode()).await.unwrap();
    s.write_all(&body[..2]).await.unwrap();
    drop(s);

    // A damaged bulk payload fails that request with EIO and nothing else.
    let mut s = raw_handshake(&addr).await;
    let body = weft_proto::encode(&EchoRequest::Reverse).unwrap();
    let h = FrameHeader::new(901, 0, 3, &body, b"abcdef").unwrap();
    s.write_all(&h.encode()).await.unwrap();
    s.write_all(&body).await.unwrap();
    s.write_all(b"abcdeX").await.unwrap();
    let mut hdr = [0u8; HEADER_LEN];
    s.read_exact(&mut hdr).await.unwrap();
    let rh = FrameHeader::decode(&hdr).unwrap();
    let mut rbody = vec![0u8; rh.body_len as usize];
    s.read_exact(&mut rbody).await.unwrap();
    let reply: WireResult<String> = weft_proto::decode(&rbody).unwrap();
    assert_eq!(reply.unwrap_err().errno, Errno::Io);

    // Through all of it, the well-behaved client is served.
    let (s, _): (String, Bytes) = good
        .call(&EchoRequest::Echo("fine".into()), Bytes::new())
        .await
        .unwrap();
    assert_eq!(s, "fine");
}

#[tokio::test]
async fn calls_fail_promptly_when_the_server_goes_away() {
    let (server, addr) = start().await;
    let conn = Arc::new(connect(&addr, None).await);
    let c2 = conn.clone();
    let slow = tokio::spawn(async move {
        c2.call::<_, String>(&EchoRequest::Sleep(10_000), Bytes::new())
            .await
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    server.shutdown().await;
    let err = tokio::time::timeout(Duration::from_secs(5), slow)
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    assert_eq!(err.errno(), Errno::Io);
    assert!(conn.is_closed());
}
