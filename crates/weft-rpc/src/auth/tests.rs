//! Unit tests of keys and proofs.

use super::*;
use uuid::Uuid;

/// A key's bytes are zeros once it is dropped.
#[test]
fn a_dropped_key_leaves_zeros() {
    let mut key = std::mem::ManuallyDrop::new(ClusterKey::generate());
    assert_ne!(key.client, [0; AUTH_LEN]);
    // SAFETY: the key is dropped once (ManuallyDrop never drops it again) and only its
    // fields, plain byte arrays that its Drop overwrites in place, are read afterwards.
    unsafe { std::ptr::drop_in_place(&mut *key) };
    assert_eq!(key.client, [0; AUTH_LEN]);
    assert_eq!(key.server, Some([0; AUTH_LEN]));
}

fn hello(role: AuthRole) -> AuthHello {
    AuthHello {
        role,
        fsname: "weft".into(),
        client_uuid: Uuid::nil(),
        protocol_version: 4,
        nonce: [7; AUTH_LEN],
    }
}

#[test]
fn key_text_round_trips_and_the_client_key_is_derived() {
    let k = ClusterKey::generate();
    assert_eq!(k.role(), AuthRole::Server);
    let again = ClusterKey::parse(&k.to_text()).unwrap();
    assert_eq!(again, k);
    let client = ClusterKey::parse(&k.client_text()).unwrap();
    assert_eq!(client.role(), AuthRole::Client);
    assert_eq!(client.secret(AuthRole::Client), k.secret(AuthRole::Client));
    assert_eq!(client.secret(AuthRole::Server), None);
    assert_ne!(k.secret(AuthRole::Client), k.secret(AuthRole::Server));
    assert!(!format!("{k:?}").contains(&k.to_text()[16..40]));
}

#[test]
fn malformed_key_text_is_refused() {
    for bad in [
        "",
        "weft-server-key",
        "weft-server-key 00",
        "weft-other-key 0000000000000000000000000000000000000000000000000000000000000000",
        "weft-server-key zz00000000000000000000000000000000000000000000000000000000000000",
        "weft-client-key 0000000000000000000000000000000000000000000000000000000000000000 x",
        "weft-client-key é000000000000000000000000000000000000000000000000000000000000000",
    ] {
        assert!(
            matches!(ClusterKey::parse(bad), Err(KeyError::Malformed)),
            "{bad:?}"
        );
    }
}

#[test]
fn a_key_file_readable_by_others_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("key");
    std::fs::write(&path, ClusterKey::generate().to_text()).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert!(matches!(
        ClusterKey::load(&path),
        Err(KeyError::Exposed { .. })
    ));
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(ClusterKey::load(&path).unwrap().role(), AuthRole::Server);
}

#[test]
fn proofs_bind_key_side_and_every_field() {
    let k = ClusterKey::generate();
    let s = k.secret(AuthRole::Server).unwrap();
    let h = hello(AuthRole::Server);
    let n = [9; AUTH_LEN];
    let p = proof(s, Side::Peer, &h, &n);
    assert!(verify(s, Side::Peer, &h, &n, &p));
    // Reflected: the server's label differs.
    assert!(!verify(s, Side::Server, &h, &n, &p));
    // Another key, nonce, role, name, node or version.
    let other = ClusterKey::generate();
    assert!(!verify(
        other.secret(AuthRole::Server).unwrap(),
        Side::Peer,
        &h,
        &n,
        &p
    ));
    assert!(!verify(s, Side::Peer, &h, &[8; AUTH_LEN], &p));
    let changed = [
        AuthHello {
            role: AuthRole::Client,
            ..h.clone()
        },
        AuthHello {
            fsname: "other".into(),
            ..h.clone()
        },
        AuthHello {
            client_uuid: Uuid::from_u128(1),
            ..h.clone()
        },
        AuthHello {
            protocol_version: 5,
            ..h.clone()
        },
        AuthHello {
            nonce: [1; AUTH_LEN],
            ..h.clone()
        },
    ];
    for c in changed {
        assert!(!verify(s, Side::Peer, &c, &n, &p), "{c:?}");
    }
}

/// A server on loopback with one target whose only request is server-only.
mod over_tcp {
    use super::*;
    use crate::{Connection, Handler, Peer, Router, Server, ServerOptions, Tcp, TypedService};
    use bytes::Bytes;
    use serde::{Deserialize, Serialize};
    use std::sync::Arc;
    use weft_proto::{Errno, Message, TargetId, WireResult};

    #[derive(Debug, Serialize, Deserialize)]
    enum Req {
        Anyone,
        ServersOnly,
    }

    impl Message for Req {
        fn opcode(&self) -> u16 {
            match self {
                Req::Anyone => 900,
                Req::ServersOnly => 901,
            }
        }
        fn op_name(&self) -> &'static str {
            match self {
                Req::Anyone => "anyone",
                Req::ServersOnly => "servers_only",
            }
        }
        fn server_only(&self) -> bool {
            matches!(self, Req::ServersOnly)
        }
    }

    struct H;

    impl Handler for H {
        type Request = Req;
        type Reply = String;
        async fn handle(&self, peer: &Peer, _: Req, _: Bytes) -> WireResult<(String, Bytes)> {
            Ok((format!("{:?}", peer.auth), Bytes::new()))
        }
    }

    async fn server(key: Option<ClusterKey>) -> (Server, String) {
        let router = Router::new("fs");
        router.add(TypedService::new(
            TargetId::ost(0),
            Uuid::new_v4(),
            Arc::new(H),
        ));
        let opts = ServerOptions {
            key: key.map(Arc::new),
            ..ServerOptions::default()
        };
        let s = Server::bind("127.0.0.1:0", router, opts).await.unwrap();
        let addr = s.local_addr().to_string();
        (s, addr)
    }

    async fn connect(addr: &str, key: Option<ClusterKey>) -> Result<Connection, crate::RpcError> {
        crate::test_support::connect_ost0(addr, &Tcp::sockets().with_key(key.map(Arc::new))).await
    }

    async fn call(c: &Connection, r: Req) -> WireResult<String> {
        match c.call::<Req, String>(&r, Bytes::new()).await {
            Ok((reply, _)) => Ok(reply),
            Err(crate::RpcError::Remote(e)) => Err(e),
            Err(e) => panic!("{e}"),
        }
    }

    #[tokio::test]
    async fn keys_roles_and_server_only_requests() {
        let key = ClusterKey::generate();
        let client_key = ClusterKey::parse(&key.client_text()).unwrap();
        let (_s, addr) = server(Some(key.clone())).await;
        let before = COUNTERS.snapshot();

        let as_server = connect(&addr, Some(key.clone())).await.unwrap();
        assert_eq!(call(&as_server, Req::ServersOnly).await.unwrap(), "Server");
        let as_client = connect(&addr, Some(client_key.clone())).await.unwrap();
        assert_eq!(call(&as_client, Req::Anyone).await.unwrap(), "Client");
        let e = call(&as_client, Req::ServersOnly).await.unwrap_err();
        assert_eq!(e.errno, Errno::Perm);

        // No key, a wrong key, and the right client key claiming the server role: each
        // refused, the last two with the same text.
        let none = connect(&addr, None).await.err().unwrap().to_string();
        assert!(none.contains(REFUSED), "{none}");
        let wrong = connect(&addr, Some(ClusterKey::generate()))
            .await
            .err()
            .unwrap();
        let forged = ClusterKey {
            server: Some(client_key.client),
            client: client_key.client,
        };
        let claimed = connect(&addr, Some(forged)).await.err().unwrap();
        assert_eq!(wrong.to_string(), claimed.to_string());
        assert_eq!(
            wrong.to_string(),
            format!("handshake refused: EACCES: {REFUSED}")
        );
        assert_eq!(wrong.errno(), Errno::Access);

        // A client that found the server's proof wrong just leaves: the server counts it
        // when it sees the connection close.
        let mut after = COUNTERS.snapshot();
        for _ in 0..100 {
            if after.1 >= before.1 + 3 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            after = COUNTERS.snapshot();
        }
        assert!(after.0 >= before.0 + 2, "{before:?} {after:?}");
        assert!(after.1 >= before.1 + 3, "{before:?} {after:?}");
        assert!(after.2 > before.2, "{before:?} {after:?}");
    }

    #[tokio::test]
    async fn without_a_key_the_server_trusts_everyone_and_refuses_to_authenticate() {
        let (_s, addr) = server(None).await;
        let open = connect(&addr, None).await.unwrap();
        assert_eq!(call(&open, Req::ServersOnly).await.unwrap(), "Open");
        let e = connect(&addr, Some(ClusterKey::generate()))
            .await
            .err()
            .unwrap();
        assert!(e.to_string().contains("without authentication"), "{e}");
    }
}
