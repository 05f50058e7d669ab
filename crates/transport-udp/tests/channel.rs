//! The channel on real sockets: messages of every size both ways, checked byte for byte,
//! over loopback and through the link simulator (loss, duplication, reordering); a
//! largest message; a peer that is not there; a peer that goes away.

use core::time::Duration;

use bytes::Bytes;
use volley_netsim::LinkConfig;
use volley_proto::time::Duration as ProtoDuration;
use volley_testkit::within;
use volley_transport_udp::channel::{
    ChannelConfig, ChannelConnection, ChannelEndpoint, ChannelError,
};

fn message(i: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|j| (i * 131 + j * 7 + j / 509) as u8)
        .collect()
}

/// A server that echoes every message on every connection it accepts.
async fn echo_server(config: ChannelConfig) -> ChannelEndpoint {
    let server = ChannelEndpoint::bind("127.0.0.1:0".parse().unwrap(), config)
        .await
        .unwrap();
    let accepting = server.clone();
    tokio::spawn(async move {
        while let Ok(mut conn) = accepting.accept().await {
            tokio::spawn(async move {
                while let Ok(m) = conn.recv().await {
                    if conn.send(&m, &[]).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    server
}

/// Sends `count` messages of sizes up to `max` (head and two segments each) while
/// reading the echoes, and checks every one.
async fn round_trip(conn: &mut ChannelConnection, count: usize, max: usize) {
    let sizes: Vec<usize> = (0..count).map(|i| (i * 7919) % (max + 1)).collect();
    let (mut sent, mut got) = (0, 0);
    while got < count {
        // Keep a few in flight.
        while sent < count && sent - got < 32 {
            let m = message(sent, sizes[sent]);
            let (head, rest) = m.split_at(m.len().min(10));
            let (a, b) = rest.split_at(rest.len() / 2);
            conn.send(
                head,
                &[Bytes::copy_from_slice(a), Bytes::copy_from_slice(b)],
            )
            .await
            .unwrap();
            sent += 1;
        }
        let back = conn.recv().await.unwrap();
        assert_eq!(back.len(), sizes[got], "message {got}");
        assert!(back == message(got, sizes[got]), "message {got} differs");
        got += 1;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_of_every_size_both_ways_over_loopback() {
    within(60, async {
        let server = echo_server(ChannelConfig::server()).await;
        let client = ChannelEndpoint::bind("127.0.0.1:0".parse().unwrap(), ChannelConfig::client())
            .await
            .unwrap();
        assert!(client.socket_buffer() > 0);
        let mut conn = client.connect(server.local_addr()).await.unwrap();
        round_trip(&mut conn, 500, 300_000).await;
        // A largest message.
        let big = message(9, 16 << 20);
        conn.send(&big, &[]).await.unwrap();
        assert!(conn.recv().await.unwrap() == big);
        assert!(matches!(
            conn.send(&vec![0; (16 << 20) + 1], &[]).await,
            Err(ChannelError::TooLarge { .. })
        ));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loss_duplication_and_reordering_through_the_link_simulator() {
    within(120, async {
        let mut config = ChannelConfig::server();
        // Real-network datagrams, so a message spans many.
        config.endpoint.connection.max_datagram = 1452;
        let server = echo_server(config).await;
        let link = volley_netsim::testing::relay(
            server.local_addr(),
            LinkConfig {
                loss: 0.05,
                dup: 0.01,
                reorder: 0.02,
                delay: Duration::from_micros(300),
                seed: 7,
                ..LinkConfig::default()
            },
        );
        let mut client_config = ChannelConfig::client();
        client_config.endpoint.connection.max_datagram = 1452;
        let client = ChannelEndpoint::bind("127.0.0.1:0".parse().unwrap(), client_config)
            .await
            .unwrap();
        let mut conn = client.connect(link.local_addr()).await.unwrap();
        round_trip(&mut conn, 300, 100_000).await;
        let stats = link.stats();
        assert!(stats.dropped > 0, "the link lost some: {stats:?}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nobody_there_is_a_timeout_naming_the_address() {
    within(30, async {
        let mut config = ChannelConfig::client();
        config.connect_timeout = Duration::from_millis(500);
        let client = ChannelEndpoint::bind("127.0.0.1:0".parse().unwrap(), config)
            .await
            .unwrap();
        let nobody = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = nobody.local_addr().unwrap();
        let e = client.connect(addr).await.unwrap_err();
        assert!(matches!(e, ChannelError::ConnectTimeout { .. }), "{e}");
        assert!(e.to_string().contains(&addr.to_string()), "{e}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_port_is_connection_refused_at_once() {
    within(30, async {
        let client = ChannelEndpoint::bind("127.0.0.1:0".parse().unwrap(), ChannelConfig::client())
            .await
            .unwrap();
        let addr = std::net::UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        // The socket is closed: the kernel answers the initial with a port unreachable.
        let started = std::time::Instant::now();
        let e = client.connect(addr).await.unwrap_err();
        assert!(
            matches!(e, ChannelError::Refused { addr: a } if a == addr),
            "{e}"
        );
        assert!(e.to_string().contains("connection refused"), "{e}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "not the connect timeout: {:?}",
            started.elapsed()
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_retries_every_initial_still_serves() {
    within(30, async {
        let mut config = ChannelConfig::server();
        config.endpoint.retry_above = 0;
        let server = echo_server(config).await;
        let client = ChannelEndpoint::bind("127.0.0.1:0".parse().unwrap(), ChannelConfig::client())
            .await
            .unwrap();
        let mut conn = client.connect(server.local_addr()).await.unwrap();
        round_trip(&mut conn, 50, 10_000).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_goes_away_ends_the_connection_within_the_idle_limit() {
    within(30, async {
        let mut config = ChannelConfig::server();
        config.endpoint.connection.idle_timeout = ProtoDuration::from_secs(1);
        config.endpoint.connection.keep_alive = ProtoDuration::from_millis(200);
        let server = ChannelEndpoint::bind("127.0.0.1:0".parse().unwrap(), config)
            .await
            .unwrap();
        let mut client_config = ChannelConfig::client();
        client_config.endpoint.connection.idle_timeout = ProtoDuration::from_secs(1);
        client_config.endpoint.connection.keep_alive = ProtoDuration::from_millis(200);
        let client = ChannelEndpoint::bind("127.0.0.1:0".parse().unwrap(), client_config)
            .await
            .unwrap();
        let mut conn = client.connect(server.local_addr()).await.unwrap();
        let theirs = server.accept().await.unwrap();
        // The server process "dies": every handle gone, its driver stops.
        drop(theirs);
        drop(server);
        let started = std::time::Instant::now();
        let e = conn.recv().await.unwrap_err();
        assert!(matches!(e, ChannelError::Closed(_)), "{e}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    })
    .await;
}
