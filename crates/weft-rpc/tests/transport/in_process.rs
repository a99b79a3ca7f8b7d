//! Servers a client calls in-process (through the `LocalServers` list given to both ends),
//! and the caller's context reaching the handler either way.

use super::*;
#[tokio::test]
async fn only_servers_that_opt_in_are_called_in_process() {
    let (_plain, plain_addr) = start().await;
    assert!(!connect(&plain_addr, None).await.is_in_process());
    let (_server, addr) = start_in_process().await;
    let conn = connect(&addr, None).await;
    assert!(conn.is_in_process());
    // A transport that may change the bytes on their way always uses the stream.
    struct Plain;
    impl weft_rpc::Transport for Plain {
        fn connect<'a>(
            &'a self,
            addr: &'a str,
        ) -> weft_rpc::service::BoxFuture<
            'a,
            std::io::Result<(
                weft_rpc::transport::BoxRead,
                weft_rpc::transport::BoxWrite,
                std::net::SocketAddr,
            )>,
        > {
            TcpTransport.connect(addr)
        }
    }
    let streamed = Connection::connect(
        &Plain,
        &addr,
        &hello(FS, TargetId::ost(0)),
        None,
        &ClientOptions::default(),
    )
    .await
    .unwrap();
    assert!(!streamed.is_in_process());
    assert_eq!(echo(&streamed, "streamed").await, "streamed");
}

#[tokio::test]
async fn in_process_calls_carry_bodies_bulk_errors_and_statistics() {
    let (_server, addr) = start_in_process().await;
    let conn = connect(&addr, None).await;
    let bulk = Bytes::from((0..300_000u32).map(|i| i as u8).collect::<Vec<u8>>());
    let (echo, back): (String, Bytes) = conn
        .call(&EchoRequest::Echo("hi".into()), bulk.clone())
        .await
        .unwrap();
    assert_eq!((echo.as_str(), &back), ("hi", &bulk));
    // The server gets bulk on a page boundary, as from a socket, even from an unaligned
    // slice (the echo hands back the very buffer it got).
    let unaligned = bulk.slice(1..);
    let (_, back): (String, Bytes) = conn
        .call(&EchoRequest::Echo("hi".into()), unaligned.clone())
        .await
        .unwrap();
    assert_eq!(back, unaligned);
    assert!((back.as_ptr() as usize).is_multiple_of(weft_proto::frame::BULK_ALIGN));
    let (_, reversed): (String, Bytes) = conn
        .call(&EchoRequest::Reverse, Bytes::from_static(b"abc"))
        .await
        .unwrap();
    assert_eq!(&reversed[..], b"cba");
    let err = conn
        .call::<_, String>(&EchoRequest::Echo("fail".into()), Bytes::new())
        .await
        .unwrap_err();
    assert!(
        matches!(err, RpcError::Remote(ref e) if e.errno == Errno::NoEnt),
        "{err:?}"
    );
    conn.ping().await.unwrap();
    let stats = conn.stats().await.unwrap();
    let echo = stats.ops.iter().find(|o| o.name == "echo").unwrap();
    assert_eq!((echo.count, echo.errors), (3, 1));
    assert_eq!(echo.bulk_bytes, 2 * (2 * bulk.len() as u64 - 1));
}

#[tokio::test]
async fn in_process_handshakes_are_checked_like_socket_ones() {
    let (_server, addr) = start_in_process().await;
    let e = refused(&addr, &hello("otherfs", TargetId::ost(0))).await;
    assert!(
        matches!(e, RpcError::Handshake(ref w) if w.errno == Errno::Inval),
        "{e:?}"
    );
    let e = refused(&addr, &hello(FS, TargetId::ost(7))).await;
    assert!(
        matches!(e, RpcError::Handshake(ref w) if w.errno == Errno::NoEnt),
        "{e:?}"
    );
    let mut old = hello(FS, TargetId::ost(0));
    old.protocol_version = PROTOCOL_VERSION + 1;
    let e = refused(&addr, &old).await;
    assert!(
        matches!(e, RpcError::Handshake(ref w) if w.errno == Errno::Proto),
        "{e:?}"
    );
}

#[tokio::test]
async fn callbacks_reach_an_in_process_client() {
    let (_server, addr) = start_in_process().await;
    let counter = Arc::new(CountCallbacks::default());
    let conn = connect(&addr, Some(counter.clone())).await;
    assert!(conn.is_in_process());
    let _: (String, Bytes) = conn
        .call(&EchoRequest::Notify(5), Bytes::new())
        .await
        .unwrap();
    for _ in 0..200 {
        if counter.0.load(Ordering::SeqCst) == 5 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "{} callbacks of 5 arrived",
        counter.0.load(Ordering::SeqCst)
    );
}

#[tokio::test]
async fn an_in_process_request_its_caller_gave_up_on_runs_to_its_end() {
    let (_server, addr) = start_in_process().await;
    let conn = connect(&addr, None).await;
    let e = conn
        .call_with_timeout::<_, String>(
            &EchoRequest::Sleep(300),
            Bytes::new(),
            Duration::from_millis(20),
        )
        .await
        .unwrap_err();
    assert!(matches!(e, RpcError::TimedOut(_)), "{e:?}");
    // The server counts a request when it ends: the abandoned sleep still ends.
    for _ in 0..100 {
        let stats = conn.stats().await.unwrap();
        if stats.ops.iter().any(|o| o.name == "sleep" && o.count == 1) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the abandoned request never finished");
}

#[tokio::test]
async fn in_process_connections_close_when_their_server_stops() {
    let (server, addr) = start_in_process().await;
    let conn = connect(&addr, None).await;
    assert!(conn.is_in_process());
    server.shutdown().await;
    assert!(conn.is_closed());
    let e = conn
        .call::<_, String>(&EchoRequest::Echo("late".into()), Bytes::new())
        .await
        .unwrap_err();
    assert!(matches!(e, RpcError::Closed), "{e:?}");
    // Nothing listens any more: a new connection goes to the socket and is refused.
    let e = refused(&addr, &hello(FS, TargetId::ost(0))).await;
    assert!(matches!(e, RpcError::Io { .. }), "{e:?}");
}

#[tokio::test]
async fn the_in_process_path_is_taken_only_through_the_list_given_to_both_ends() {
    use weft_rpc::{LocalServers, Tcp};
    let local = LocalServers::new();
    let (_server, addr) = start_with(ServerOptions {
        local_servers: Some(local.clone()),
        ..ServerOptions::default()
    })
    .await;
    let direct = connect_through(&Tcp::with_local(local), &addr, None).await;
    assert!(direct.is_in_process());
    // Sockets when asked for, through another list, or with plain TCP.
    for transport in [
        Box::new(Tcp::sockets()) as Box<dyn weft_rpc::Transport>,
        Box::new(Tcp::with_local(LocalServers::new())),
        Box::new(TcpTransport),
    ] {
        let conn = connect_through(transport.as_ref(), &addr, None).await;
        assert!(!conn.is_in_process());
        assert_eq!(echo(&conn, "s").await, "s");
    }
    assert_eq!(echo(&direct, "d").await, "d");
}

/// The job id and resend numbers a caller passes to `call_in` reach the handler through
/// the request's header, over a socket and in-process alike, with no task-local state;
/// the plain `call` sends none.
#[tokio::test]
async fn the_callers_context_reaches_the_handler() {
    let (_sock_server, sock_addr) = start().await;
    let (_local_server, local_addr) = start_in_process().await;
    let ctx = RequestContext::new()
        .for_job(Some("train.7".into()))
        .numbered(42, 40);
    for addr in [&sock_addr, &local_addr] {
        let conn = connect(addr, None).await;
        let (seen, _): (String, _) = conn
            .call_in(&ctx, &EchoRequest::Context, Bytes::new())
            .await
            .unwrap();
        assert_eq!(seen, r#"Some("train.7") 42 40"#, "{addr}");
        let (seen, _): (String, _) = conn
            .call(&EchoRequest::Context, Bytes::new())
            .await
            .unwrap();
        assert_eq!(seen, "None 0 0", "{addr}");
    }
}
