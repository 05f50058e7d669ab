//! The listener: a cap on the connections open at once, and frames both ways on what it
//! accepts.

use core::time::Duration;

use bytes::Bytes;
use volley_testkit::within;
use volley_transport_tcp::{Config, Connection, Listener, PeerAddr, ServerConfig};

#[tokio::test]
async fn past_the_cap_a_peer_waits_until_a_connection_closes() {
    within(30, async {
        let config = ServerConfig {
            max_connections: 2,
            ..ServerConfig::default()
        };
        let listener = Listener::bind_tcp("127.0.0.1:0".parse().unwrap(), config)
            .await
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let mut clients = Vec::new();
        for _ in 0..3 {
            clients.push(
                Connection::connect_tcp(addr, Config::default())
                    .await
                    .unwrap(),
            );
        }
        let first = listener.accept().await.unwrap();
        let second = listener.accept().await.unwrap();
        assert!(matches!(first.peer, PeerAddr::Tcp(_)));
        assert_eq!(listener.stats().open, 2);
        let third = tokio::time::timeout(Duration::from_millis(200), listener.accept()).await;
        assert!(
            third.is_err(),
            "a third connection was accepted past a cap of 2"
        );
        // The first client goes; once its connection has ended, the third is accepted.
        drop(clients.remove(0));
        let mut first_in = first.incoming;
        assert!(first_in.recv().await.is_err());
        drop((first.framed, first_in));
        let mut third = listener.accept().await.unwrap();
        // It works both ways: the client calls, the server answers.
        let client = clients.pop().unwrap();
        let call = tokio::spawn(async move { client.call(9, b"ping", Bytes::new()).await });
        let request = third.incoming.recv().await.unwrap();
        third
            .framed
            .send(request.ty, request.id, b"pong", Bytes::new())
            .await
            .unwrap();
        assert_eq!(&call.await.unwrap().unwrap().body[..], b"pong");
        assert_eq!(listener.stats().accepted, 3);
        drop(second);
    })
    .await;
}
