//! One service, one server endpoint, every link: in process, TCP, TLS, a Unix socket,
//! QUIC and the reliable UDP channel, each serving the same calls with the same bulk
//! segments back byte for byte.

use core::time::Duration;

use bytes::Bytes;
use volley_rpc::link::framed::FramedLink;
use volley_rpc::link::local;
use volley_rpc::link::quic::{self, QuicListener};
use volley_rpc::link::tls::{self, Roots, TlsListener};
use volley_rpc::link::udp::UdpLink;
use volley_rpc::{Config, Endpoint, Peer, ServerHandle, serve};
use volley_rpc::{Listener, listener_config};
use volley_transport_udp::channel::{ChannelConfig, ChannelEndpoint};

mod secure;
use secure::{Here, Pki, Secure, SecureClient, SecureServer};

/// Calls `peer` as every test of a link does: the same segments must come back.
async fn exercise(name: &str, peer: Peer<Secure>, tls: bool) {
    let client = SecureClient::new(peer);
    let blob: Bytes = (0..300_000u32).map(|i| (i * 29 % 255) as u8).collect();
    let reply = client
        .bounce()
        .segments(vec![blob.clone(), Bytes::from_static(b"x")])
        .reply()
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(reply.value, blob.len() as u64 + 1, "{name}");
    assert_eq!(reply.segments, [blob, Bytes::from_static(b"x")], "{name}");
    // Only the TLS and QUIC links know the peer's TLS identity.
    assert_eq!(client.who().await.is_ok(), tls, "{name}");
}

#[tokio::test]
async fn one_service_runs_over_every_link() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let pki = Pki::new("every-link");
        let (cert, key, _) = pki.issue("server", &["localhost"], &[]);
        let server_tls = tls::server_config(&cert, &key, None).unwrap();
        let client_tls = tls::client_config(Roots::File(&pki.ca()), None).unwrap();
        let name = || tls::server_name("localhost").unwrap();
        let config = Config::default();
        let server = Endpoint::<Secure>::new(config)
            .unwrap()
            .serve(Here.into_router());
        let client = || Endpoint::<Secure>::new(config).unwrap();
        let listener = || async {
            Listener::bind_tcp("127.0.0.1:0".parse().unwrap(), listener_config(8))
                .await
                .unwrap()
        };
        let mut servers: Vec<ServerHandle> = Vec::new();

        let (a, b) = local::pair(64);
        let ours = client();
        let (_serving, peer) = tokio::try_join!(server.connect(a), ours.connect(b)).unwrap();
        exercise("in process", peer, false).await;

        servers.push(serve(server.clone(), listener().await));
        let addr = servers[0].local_addr().unwrap();
        let link = FramedLink::connect_tcp(addr).await.unwrap();
        exercise("tcp", client().connect(link).await.unwrap(), false).await;

        servers.push(serve(
            server.clone(),
            TlsListener::new(listener().await, server_tls.clone()),
        ));
        let addr = servers[1].local_addr().unwrap();
        let link = tls::connect(addr, name(), client_tls.clone())
            .await
            .unwrap();
        exercise("tls", client().connect(link).await.unwrap(), true).await;

        let path = pki.dir.join("every-link.sock");
        let unix = tokio::net::UnixListener::bind(&path).unwrap();
        servers.push(serve(
            server.clone(),
            Listener::from_unix(unix, listener_config(8)),
        ));
        let link = FramedLink::connect_unix(&path).await.unwrap();
        exercise("unix", client().connect(link).await.unwrap(), false).await;

        let quic =
            QuicListener::bind("127.0.0.1:0".parse().unwrap(), server_tls, &config, 8).unwrap();
        servers.push(serve(server.clone(), quic));
        let addr = servers[3].local_addr().unwrap();
        let link = quic::connect(addr, name(), client_tls, &config)
            .await
            .unwrap();
        exercise("quic", client().connect(link).await.unwrap(), true).await;

        let channel =
            ChannelEndpoint::bind("127.0.0.1:0".parse().unwrap(), ChannelConfig::server())
                .await
                .unwrap();
        let addr = channel.local_addr();
        servers.push(serve(server, channel));
        let ours = ChannelEndpoint::bind("127.0.0.1:0".parse().unwrap(), ChannelConfig::client())
            .await
            .unwrap();
        let link = UdpLink::new(ours.connect(addr).await.unwrap());
        exercise("udp", client().connect(link).await.unwrap(), false).await;

        for server in servers {
            server.shutdown().await.unwrap();
        }
    })
    .await
    .expect("did not finish within 60 s");
}
