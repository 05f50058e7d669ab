//! The QUIC link: calls and bulk segments over QUIC with mutual TLS and the identity
//! handlers see, the server's CA checked, connections past the limit refused, and a
//! closed connection's slot given back.

use core::net::SocketAddr;
use core::time::Duration;

use bytes::Bytes;
use volley_rpc::link::MessageLink;
use volley_rpc::link::quic::{self, Connections, QuicListener};
use volley_rpc::link::tls::{self, Roots};
use volley_rpc::{Config, ConnectError, Endpoint, Peer, ServerHandle, serve};

mod secure;
use secure::{Here, Pki, Secure, SecureClient, SecureServer};
use volley_testkit::within;

/// A QUIC server of the test service on loopback, with mutual TLS when `mutual`.
fn server(
    pki: &Pki,
    mutual: bool,
    max_connections: usize,
) -> (ServerHandle, SocketAddr, Connections) {
    let (cert, key, _) = pki.issue("server", &["localhost"], &[]);
    let ca = pki.ca();
    let tls = tls::server_config(&cert, &key, mutual.then_some(ca.as_path())).unwrap();
    let config = Config::default();
    let listener = QuicListener::bind(
        "127.0.0.1:0".parse().unwrap(),
        tls,
        &config,
        max_connections,
    )
    .unwrap();
    let endpoint = Endpoint::<Secure>::new(config)
        .unwrap()
        .serve(Here.into_router());
    let connections = listener.connections();
    let server = serve(endpoint, listener);
    let addr = server.local_addr().unwrap();
    (server, addr, connections)
}

async fn client(
    addr: SocketAddr,
    pki: &Pki,
    identity: Option<(&std::path::Path, &std::path::Path)>,
) -> Result<Peer<Secure>, ConnectError> {
    let tls = tls::client_config(Roots::File(&pki.ca()), identity).unwrap();
    let config = Config::default();
    let link = quic::connect(addr, tls::server_name("localhost").unwrap(), tls, &config).await?;
    assert_eq!(link.connection().peer_addr, Some(addr));
    Endpoint::<Secure>::new(config).unwrap().connect(link).await
}

#[tokio::test]
async fn calls_and_bulk_segments_cross_quic_with_mutual_tls() {
    within(30, async {
        let pki = Pki::new("quic-bulk");
        let (_server, addr, _) = server(&pki, true, 8);
        let (cert, key, der) = pki.issue("client", &["client.test"], &["spiffe://volley/q"]);
        let client = SecureClient::new(client(addr, &pki, Some((&cert, &key))).await.unwrap());
        let (dns, uris, seen, version) = client.who().await.unwrap();
        assert_eq!(
            (dns, uris),
            (
                vec!["client.test".to_owned()],
                vec!["spiffe://volley/q".to_owned()]
            )
        );
        assert_eq!(seen.as_deref(), Some(der.as_slice()));
        assert_eq!(version, "TLSv1_3");
        let blob: Bytes = (0..(3 << 20) + 5).map(|i| (i * 7 % 253) as u8).collect();
        for _ in 0..3 {
            let reply = client
                .bounce()
                .segments(vec![blob.clone(), Bytes::from_static(b"end")])
                .reply()
                .await
                .unwrap();
            assert_eq!(reply.value, blob.len() as u64 + 3);
            assert_eq!(reply.segments, [blob.clone(), Bytes::from_static(b"end")]);
        }
        // Many small calls at once on the one stream.
        let calls = (0..200).map(|_| client.who().into_future());
        for reply in futures::future::join_all(calls).await {
            reply.unwrap();
        }
    })
    .await;
}

#[tokio::test]
async fn a_server_from_another_ca_is_refused() {
    within(30, async {
        let pki = Pki::new("quic-ca");
        let (_server, addr, _) = server(&pki, false, 8);
        let stranger = Pki::new("quic-stranger");
        let err = client(addr, &stranger, None).await.unwrap_err();
        assert!(err.to_string().contains("UnknownIssuer"), "{err}");
    })
    .await;
}

#[tokio::test]
async fn past_the_limit_is_refused_and_a_closed_connection_frees_its_slot() {
    within(30, async {
        let pki = Pki::new("quic-limit");
        let (_server, addr, connections) = server(&pki, false, 1);
        let first = client(addr, &pki, None).await.unwrap();
        SecureClient::new(first.clone()).who().await.unwrap();
        let err = client(addr, &pki, None).await.unwrap_err();
        assert!(err.to_string().contains("refused"), "{err}");
        // The first leaves; its slot comes back (the refusal above is not sticky).
        first.shutdown().await;
        drop(first);
        assert_eq!(connections.open(), 1);
        tokio::time::timeout(Duration::from_secs(5), connections.all_closed())
            .await
            .expect("the slot of a closed connection was not given back within 5 s");
        let again = client(addr, &pki, None).await.unwrap();
        SecureClient::new(again).who().await.unwrap();
    })
    .await;
}
