//! Eviction of silent peers, and a reconnecting client trying each address of its target.

use super::*;
/// Eviction (see `weft_rpc::session`): a connected client pings, so a server with a short
/// eviction timeout keeps it however long it idles; a peer that stays silent is evicted
/// (its connection closed, the target counting it), and its node's next connection is told
/// so, once; a `Reconnecting` told so refuses, before sending, a request carrying content
/// of the epoch before the eviction, and sends everything else.
#[tokio::test]
async fn silent_peers_are_evicted_and_their_node_refuses_its_older_content() {
    let (_server, addr) = start_with(ServerOptions {
        evict_timeout: Some(Duration::from_millis(400)),
        ..ServerOptions::default()
    })
    .await;
    let live = connect(&addr, None).await;
    assert_eq!(live.connect_reply().evict_timeout_ms, 400);
    assert!(!live.connect_reply().evicted);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(echo(&live, "idle but alive").await, "idle but alive");

    let mut node = hello(FS, TargetId::ost(0));
    let silent = raw_handshake_as(&addr, &node).await;
    expect_closed_within(silent, Duration::from_secs(5)).await;
    let evictions = |s: &weft_proto::handshake::ServiceStats| {
        s.counters
            .iter()
            .find(|c| c.name == "evictions")
            .map(|c| c.value)
    };
    assert_eq!(evictions(&live.stats().await.unwrap()), Some(1));

    let session = Arc::new(weft_rpc::ClientSession::new());
    let before = RequestContext::new().in_epoch(session.epoch());
    let back = weft_rpc::Reconnecting::new(
        Arc::new(transport()),
        addr.clone(),
        node.clone(),
        None,
        ClientOptions::default(),
    )
    .with_session(session.clone());
    let stale: Result<(String, Bytes), _> = back
        .call_in(&before, &EchoRequest::Echo("stale".into()), Bytes::new())
        .await;
    assert!(matches!(stale, Err(RpcError::Evicted)), "{stale:?}");
    assert_eq!(session.epoch(), 1);
    let fresh = RequestContext::new().in_epoch(session.epoch());
    let (s, _): (String, _) = back
        .call_in(&fresh, &EchoRequest::Echo("fresh".into()), Bytes::new())
        .await
        .unwrap();
    assert_eq!(s, "fresh");
    let (s, _): (String, _) = back
        .call(&EchoRequest::Echo("unbound".into()), Bytes::new())
        .await
        .unwrap();
    assert_eq!(s, "unbound");

    // Told once: the node's next connection starts clean; another node never was.
    let again = Connection::connect(&transport(), &addr, &node, None, &ClientOptions::default())
        .await
        .unwrap();
    assert!(!again.connect_reply().evicted);
    node.client_uuid = Uuid::new_v4();
    let other = Connection::connect(&transport(), &addr, &node, None, &ClientOptions::default())
        .await
        .unwrap();
    assert!(!other.connect_reply().evicted);
}

/// Failover: a target served from several addresses. A new connection tries them in turn
/// from the one that answered last, so a client whose server died reaches the failover
/// server without being told; a dead address is skipped, and a new list resets the order.
#[tokio::test]
async fn a_reconnecting_client_tries_each_address_of_its_target() {
    let dead = {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap().to_string()
    };
    let (first, first_addr) = start().await;
    let (_second, second_addr) = start().await;
    let conn = Reconnecting::new(
        Arc::new(transport()),
        dead.clone(),
        hello(FS, TargetId::ost(0)),
        None,
        ClientOptions::default(),
    );
    conn.set_addresses(vec![dead.clone(), first_addr.clone(), second_addr.clone()]);
    let echo = || async {
        conn.call::<_, String>(&EchoRequest::Echo("hi".into()), Bytes::new())
            .await
            .map(|(s, _)| s)
    };
    assert_eq!(echo().await.unwrap(), "hi");
    assert_eq!(conn.address(), first_addr, "the dead address is skipped");
    assert_eq!(
        conn.addresses(),
        vec![first_addr.clone(), second_addr.clone(), dead.clone()]
    );

    // The server dies: a call on the broken connection fails in a way worth resending (if
    // the connection was not seen closed before it), the next one reaches the other server.
    first.shutdown().await;
    if let Err(e) = echo().await {
        assert!(e.is_worth_resending(), "{e}");
    }
    assert_eq!(echo().await.unwrap(), "hi");
    assert_eq!(conn.address(), second_addr);

    // A new list (a configuration naming another order) starts from its first address.
    conn.set_addresses(vec![dead.clone(), second_addr.clone()]);
    assert_eq!(conn.address(), dead);
    // The same list again changes nothing.
    conn.set_addresses(vec![dead.clone(), second_addr.clone()]);
    assert_eq!(conn.addresses(), vec![dead.clone(), second_addr.clone()]);

    // A refusal another server could not cure ends the search at once.
    let wrong = Reconnecting::new(
        Arc::new(transport()),
        second_addr.clone(),
        hello("other", TargetId::ost(0)),
        None,
        ClientOptions::default(),
    );
    wrong.set_addresses(vec![second_addr.clone(), dead.clone()]);
    let err = wrong.connection().await.err().unwrap();
    assert!(matches!(err, RpcError::Handshake(_)), "{err}");
    assert_eq!(wrong.address(), second_addr);
}

/// A silent connection of a node that has another connection open to the same target is
/// one the node gave up (its side died in a partition), not the node gone silent: it is
/// closed like a broken connection, not counted as an eviction, and the node is not told.
#[tokio::test]
async fn a_silent_connection_of_a_node_connected_again_is_not_an_eviction() {
    let (_server, addr) = start_with(ServerOptions {
        evict_timeout: Some(Duration::from_millis(400)),
        ..ServerOptions::default()
    })
    .await;
    let node = hello(FS, TargetId::ost(0));
    let live = Connection::connect(&transport(), &addr, &node, None, &ClientOptions::default())
        .await
        .unwrap();
    let given_up = raw_handshake_as(&addr, &node).await;
    expect_closed_within(given_up, Duration::from_secs(5)).await;
    let stats = live.stats().await.unwrap();
    let evictions = stats.counters.iter().find(|c| c.name == "evictions");
    assert_eq!(evictions.map(|c| c.value), Some(0));
    assert_eq!(echo(&live, "still here").await, "still here");
    let again = Connection::connect(&transport(), &addr, &node, None, &ClientOptions::default())
        .await
        .unwrap();
    assert!(!again.connect_reply().evicted);
}
