use super::*;
use crate::auth::COUNTERS;
use crate::{Connection, Handler, Peer, Router, Server, ServerOptions, Tcp, TypedService};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use uuid::Uuid;
use weft_proto::{Message, TargetId, WireResult};

#[test]
fn server_names_come_from_the_host_part() {
    let ip = |s: &str| matches!(server_name(s), Ok(ServerName::IpAddress(_)));
    assert!(ip("127.0.0.1:9400"));
    assert!(ip("[::1]:9400"));
    assert!(matches!(
        server_name("mgs.example:9400"),
        Ok(ServerName::DnsName(_))
    ));
    assert!(server_name("bad name:1").is_err());
}

/// A CA and a node certificate it issued for `sans` (see [`super::test_pki::issue`]).
fn pki(dir: &Path, name: &str, sans: &[&str]) -> TlsFiles {
    super::test_pki::issue(dir, name, sans).unwrap()
}

#[derive(Debug, Serialize, Deserialize)]
struct Echo(String);

impl Message for Echo {
    fn opcode(&self) -> u16 {
        900
    }
    fn op_name(&self) -> &'static str {
        "echo"
    }
}

struct H;

impl Handler for H {
    type Request = Echo;
    type Reply = String;
    async fn handle(&self, _: &Peer, r: Echo, bulk: Bytes) -> WireResult<(String, Bytes)> {
        Ok((r.0, bulk))
    }
}

async fn server(tls: Option<Tls>) -> std::io::Result<(Server, String)> {
    let router = Router::new("fs");
    router.add(TypedService::new(
        TargetId::ost(0),
        Uuid::new_v4(),
        Arc::new(H),
    ));
    let opts = ServerOptions {
        tls: tls.map(Arc::new),
        ..ServerOptions::default()
    };
    let s = Server::bind("127.0.0.1:0", router, opts).await?;
    let addr = s.local_addr().to_string();
    Ok((s, addr))
}

async fn connect(addr: &str, tls: Option<Tls>) -> Result<Connection, crate::RpcError> {
    crate::test_support::connect_ost0(addr, &Tcp::sockets().with_tls(tls.map(Arc::new))).await
}

#[tokio::test]
async fn mutual_tls_carries_requests_and_bulk_and_refuses_strangers() {
    let dir = tempfile::tempdir().unwrap();
    let good = pki(dir.path(), "good", &["127.0.0.1"]);
    let other = pki(dir.path(), "other", &["127.0.0.1"]);
    let tls = Tls::load(&good).unwrap().for_server().unwrap();
    let (_s, addr) = server(Some(tls.clone())).await.unwrap();
    let before = COUNTERS
        .tls_refused
        .load(std::sync::atomic::Ordering::Relaxed);

    // A node of the cluster: a request and 1 MiB of bulk each way, byte for byte.
    let c = connect(&addr, Some(tls.clone())).await.unwrap();
    let bulk = Bytes::from((0..1u32 << 20).map(|i| (i % 251) as u8).collect::<Vec<_>>());
    let (reply, back) = c
        .call::<Echo, String>(&Echo("hello".into()), bulk.clone())
        .await
        .unwrap();
    assert_eq!(reply, "hello");
    assert_eq!(back, bulk);

    // A client trusting another CA refuses the server; a client with another CA's
    // certificate, one with no certificate, and one without TLS are refused by it.
    let wrong_ca = TlsFiles {
        ca: other.ca.clone(),
        ..good.clone()
    };
    let e = connect(&addr, Some(Tls::load(&wrong_ca).unwrap()))
        .await
        .err()
        .unwrap();
    assert!(e.to_string().contains("certificate"), "{e}");
    let stranger = TlsFiles {
        ca: good.ca.clone(),
        ..other.clone()
    };
    assert!(
        connect(&addr, Some(Tls::load(&stranger).unwrap()))
            .await
            .is_err()
    );
    let anonymous = TlsFiles {
        ca: good.ca.clone(),
        cert: None,
        key: None,
    };
    assert!(
        connect(&addr, Some(Tls::load(&anonymous).unwrap()))
            .await
            .is_err()
    );
    assert!(connect(&addr, None).await.is_err());
    let mut refused = 0;
    for _ in 0..200 {
        refused = COUNTERS
            .tls_refused
            .load(std::sync::atomic::Ordering::Relaxed)
            - before;
        if refused >= 4 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(refused >= 4, "{refused} refusals counted");

    // A certificate for another address does not pass for this server.
    let elsewhere = pki(dir.path(), "elsewhere", &["10.9.9.9"]);
    let (_s2, addr2) = server(Some(Tls::load(&elsewhere).unwrap())).await.unwrap();
    let e = connect(&addr2, Some(Tls::load(&elsewhere).unwrap()))
        .await
        .err()
        .unwrap();
    assert!(e.to_string().contains("certificate"), "{e}");
}

#[tokio::test]
async fn configurations_that_cannot_work_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let good = pki(dir.path(), "good", &["127.0.0.1"]);
    let e = Tls::load(&TlsFiles {
        ca: dir.path().join("absent.pem"),
        ..Default::default()
    })
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("CA certificate") && e.contains("absent.pem"),
        "{e}"
    );
    let junk = dir.path().join("junk.pem");
    std::fs::write(&junk, "not a certificate\n").unwrap();
    let e = Tls::load(&TlsFiles {
        ca: junk,
        ..Default::default()
    })
    .unwrap_err();
    assert!(matches!(e, TlsError::Empty { .. }), "{e}");
    let half = TlsFiles {
        key: None,
        ..good.clone()
    };
    assert!(matches!(Tls::load(&half), Err(TlsError::Unpaired)));
    // A key that is not the certificate's.
    let other = pki(dir.path(), "other", &["127.0.0.1"]);
    let mismatched = TlsFiles {
        key: other.key.clone(),
        ..good.clone()
    };
    assert!(matches!(Tls::load(&mismatched), Err(TlsError::Config(_))));
    // A client-only configuration cannot serve.
    let client_only = Tls::load(&TlsFiles {
        ca: good.ca.clone(),
        ..Default::default()
    })
    .unwrap();
    assert!(matches!(
        client_only.clone().for_server(),
        Err(TlsError::NoServerCert)
    ));
    assert!(server(Some(client_only)).await.is_err());
}
