//! TLS on stream links: calls and bulk segments over TLS, mutual TLS and the identity
//! handlers see, the server's name and CA checked, refusals with their reasons, a plain
//! peer and a TLS peer told apart, and a stalled handshake dropped. Certificates are made
//! here with rcgen.

use core::net::{IpAddr, SocketAddr};
use core::time::Duration;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use tokio::io::AsyncReadExt;
use volley_rpc::link::framed::FramedLink;
use volley_rpc::link::tls::{self, Roots, TlsListener};
use volley_rpc::link::{LinkError, MessageLink};
use volley_rpc::{AuthRequest, Config, ConnectError, Endpoint, Peer, ServerHandle, serve};
use volley_rpc::{Listener, listener_config};

mod secure;
use secure::{Here, Pki, Secure, SecureClient, SecureServer};
use volley_testkit::within;

fn endpoint() -> Endpoint<Secure> {
    Endpoint::<Secure>::new(Config::default()).unwrap()
}

/// A TLS server of the test service on loopback, asking for client certificates signed by
/// `client_ca` if given.
async fn tls_server(
    pki: &Pki,
    client_ca: Option<&Path>,
    endpoint: Endpoint<Secure>,
    max_connections: usize,
) -> (ServerHandle, SocketAddr) {
    let (cert, key, _) = pki.issue("server", &["localhost", "127.0.0.1"], &[]);
    let config = tls::server_config(&cert, &key, client_ca).unwrap();
    let listener = Listener::bind_tcp(
        "127.0.0.1:0".parse().unwrap(),
        listener_config(max_connections),
    )
    .await
    .unwrap();
    let server = serve(
        endpoint.serve(Here.into_router()),
        TlsListener::new(listener, config),
    );
    let addr = server.local_addr().unwrap();
    (server, addr)
}

async fn tls_client(
    addr: SocketAddr,
    ca: &Path,
    identity: Option<(&Path, &Path)>,
    name: &str,
) -> Result<Peer<Secure>, ConnectError> {
    let config = tls::client_config(Roots::File(ca), identity).unwrap();
    let link = tls::connect(addr, tls::server_name(name).unwrap(), config).await?;
    endpoint().connect(link).await
}

#[tokio::test]
async fn calls_and_bulk_segments_cross_tls_intact() {
    within(30, async {
        let pki = Pki::new("bulk");
        let (_server, addr) = tls_server(&pki, None, endpoint(), 8).await;
        // The IP of the address is checked against the certificate's IP name.
        for name in ["localhost", "127.0.0.1"] {
            let config = tls::client_config(Roots::File(&pki.ca()), None).unwrap();
            let link = tls::connect(addr, tls::server_name(name).unwrap(), config)
                .await
                .unwrap();
            let seen = link.connection().tls.expect("a TLS link");
            assert_eq!(seen.dns_names, ["localhost"]);
            assert_eq!(seen.ip_addresses, [IpAddr::from([127, 0, 0, 1])]);
            assert_eq!(seen.version, "TLSv1_3");
            let client = SecureClient::new(endpoint().connect(link).await.unwrap());
            let blob: Bytes = (0..(1 << 20) + 7).map(|i| (i * 31 % 251) as u8).collect();
            let reply = client
                .bounce()
                .segments(vec![blob.clone(), Bytes::from_static(b"tail")])
                .reply()
                .await
                .unwrap();
            assert_eq!(reply.value, blob.len() as u64 + 4);
            assert_eq!(reply.segments, [blob, Bytes::from_static(b"tail")]);
            // No client certificate was asked for.
            let (dns, uris, cert, version) = client.who().await.unwrap();
            assert!(
                dns.is_empty() && uris.is_empty() && cert.is_none(),
                "{dns:?}"
            );
            assert_eq!(version, "TLSv1_3");
        }
    })
    .await;
}

#[tokio::test]
async fn mutual_tls_gives_handlers_and_the_check_the_client_identity() {
    within(30, async {
        let pki = Pki::new("mutual");
        let (cert, key, der) =
            pki.issue("client", &["client.test"], &["spiffe://volley/test/client"]);
        let checked = Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = checked.clone();
        let server_end = endpoint().authenticate(move |request: AuthRequest| {
            let log = log.clone();
            async move {
                let names = request
                    .connection
                    .tls
                    .map(|tls| tls.dns_names)
                    .unwrap_or_default();
                log.lock().unwrap().push(names);
                true
            }
        });
        let (_server, addr) = tls_server(&pki, Some(&pki.ca()), server_end, 8).await;
        let client = SecureClient::new(
            tls_client(addr, &pki.ca(), Some((&cert, &key)), "localhost")
                .await
                .unwrap(),
        );
        let (dns, uris, seen_der, _) = client.who().await.unwrap();
        assert_eq!(dns, ["client.test"]);
        assert_eq!(uris, ["spiffe://volley/test/client"]);
        assert_eq!(seen_der.as_deref(), Some(der.as_slice()));
        assert_eq!(*checked.lock().unwrap(), [vec!["client.test".to_owned()]]);
    })
    .await;
}

#[tokio::test]
async fn a_client_refused_for_its_certificate_learns_the_alert() {
    within(30, async {
        let pki = Pki::new("refused");
        let (_server, addr) = tls_server(&pki, Some(&pki.ca()), endpoint(), 8).await;
        // No certificate: TLS 1.3 finishes the client's handshake first, so the refusal
        // comes at its first read, the hello.
        let err = tls_client(addr, &pki.ca(), None, "localhost")
            .await
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("received fatal alert: CertificateRequired"),
            "{err}"
        );
        // A certificate from another CA.
        let stranger = Pki::new("stranger");
        let (cert, key, _) = stranger.issue("client", &["client.test"], &[]);
        let err = tls_client(addr, &pki.ca(), Some((&cert, &key)), "localhost")
            .await
            .unwrap_err();
        assert!(err.to_string().contains("received fatal alert"), "{err}");
        // The server goes on serving a client it trusts.
        let (cert, key, _) = pki.issue("client", &["client.test"], &[]);
        let client = tls_client(addr, &pki.ca(), Some((&cert, &key)), "localhost")
            .await
            .unwrap();
        SecureClient::new(client).who().await.unwrap();
    })
    .await;
}

#[tokio::test]
async fn the_client_checks_the_server_name_and_its_ca() {
    within(30, async {
        let pki = Pki::new("names");
        let (_server, addr) = tls_server(&pki, None, endpoint(), 8).await;
        let err = tls_client(addr, &pki.ca(), None, "elsewhere.test")
            .await
            .unwrap_err();
        assert!(err.to_string().contains("not valid for name"), "{err}");
        let other = Pki::new("other-ca");
        let err = tls_client(addr, &other.ca(), None, "localhost")
            .await
            .unwrap_err();
        assert!(err.to_string().contains("UnknownIssuer"), "{err}");
        // Bad files are named.
        let missing = pki.dir.join("missing.pem");
        let err = tls::client_config(Roots::File(&missing), None).unwrap_err();
        assert!(err.to_string().contains("missing.pem"), "{err}");
        let (cert, _, _) = pki.issue("keyless", &["x.test"], &[]);
        let err = tls::server_config(&cert, &cert, None).unwrap_err();
        assert!(err.to_string().contains("private key"), "{err}");
        assert!(tls::server_name("not a name").is_err());
    })
    .await;
}

#[tokio::test]
async fn plain_and_tls_peers_are_told_apart() {
    within(30, async {
        let pki = Pki::new("apart");
        let (_server, addr) = tls_server(&pki, None, endpoint(), 8).await;
        // A plain client on a TLS port reads the server's alert where a hello belongs.
        let link = FramedLink::connect_tcp(addr).await.unwrap();
        let err = endpoint().connect(link).await.unwrap_err();
        assert!(
            matches!(err, ConnectError::Link(LinkError::PeerSpeaksTls)),
            "{err}"
        );

        // A TLS client on a plain port: the server reads a ClientHello where the hello
        // belongs, and the client's handshake fails.
        let listener = Listener::bind_tcp("127.0.0.1:0".parse().unwrap(), listener_config(8))
            .await
            .unwrap();
        let plain = listener.local_addr().unwrap();
        let server_side = tokio::spawn(async move {
            let accepted = listener.accept().await.unwrap();
            let link = FramedLink::new(accepted.framed, accepted.incoming);
            endpoint()
                .serve(Here.into_router())
                .connect(link)
                .await
                .map(drop)
        });
        let config = tls::client_config(Roots::File(&pki.ca()), None).unwrap();
        let client = tls::connect(plain, tls::server_name("localhost").unwrap(), config).await;
        assert!(
            client.is_err(),
            "a TLS handshake with a plain server succeeded"
        );
        let err = server_side.await.unwrap().unwrap_err();
        assert!(
            matches!(err, ConnectError::Link(LinkError::PeerSpeaksTls)),
            "{err}"
        );
    })
    .await;
}

#[tokio::test]
async fn a_stalled_handshake_is_dropped_and_frees_its_slot() {
    within(30, async {
        let pki = Pki::new("stalled");
        let (cert, key, _) = pki.issue("server", &["localhost"], &[]);
        let config = tls::server_config(&cert, &key, None).unwrap();
        let listener = Listener::bind_tcp("127.0.0.1:0".parse().unwrap(), listener_config(1))
            .await
            .unwrap();
        let incoming =
            TlsListener::new(listener, config).handshake_timeout(Duration::from_millis(300));
        let server = serve(endpoint().serve(Here.into_router()), incoming);
        let addr = server.local_addr().unwrap();
        // Connects and says nothing: dropped at the timeout.
        let mut silent = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut buf = [0u8; 64];
        let n = tokio::time::timeout(Duration::from_secs(5), silent.read(&mut buf))
            .await
            .expect("the stalled handshake was not dropped");
        assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
        // Its slot (the only one) is free again.
        let client = tls_client(addr, &pki.ca(), None, "localhost")
            .await
            .unwrap();
        SecureClient::new(client).who().await.unwrap();
        // The next one is past max_connections: told so over TLS.
        let err = tls_client(addr, &pki.ca(), None, "localhost")
            .await
            .unwrap_err();
        assert!(
            matches!(&err, ConnectError::Refused(why) if why == "no free connection slot"),
            "{err}"
        );
    })
    .await;
}

/// A server's certificate that every client would refuse is refused at start, saying
/// why: a CA's, an expired one, one whose key is another's.
#[test]
fn a_certificate_no_client_would_accept_fails_at_start() {
    let pki = Pki::new("bad-certs");
    let ca_key = pki.dir.join("ca.key");
    let err = tls::server_config(&pki.ca(), &ca_key, None).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("it is a CA certificate"), "{text}");
    assert!(text.contains("CA:FALSE"), "{text}");

    let (expired, key) = pki.expired("old", "localhost");
    let err = tls::server_config(&expired, &key, None).unwrap_err();
    assert!(err.to_string().contains("it expired on"), "{err}");

    let (cert, _, _) = pki.issue("mine", &["localhost"], &[]);
    let (_, other_key, _) = pki.issue("theirs", &["localhost"], &[]);
    let err = tls::server_config(&cert, &other_key, None).unwrap_err();
    assert!(err.to_string().contains("does not belong to it"), "{err}");
}
