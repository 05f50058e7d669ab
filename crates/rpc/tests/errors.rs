//! Every error path: hello mismatches, unknown methods, undecodable arguments, handler
//! errors and panics, messages too large each way, calls past credit, a lost connection,
//! malformed frames; after each the connection (or the server) goes on serving.

mod common;

use core::error::Error as _;
use core::time::Duration;
use std::sync::Arc;

use bytes::Bytes;
use common::*;
use serde::{Deserialize, Serialize};
use volley_proto::rpc::{CodecId, ErrorCode, Head, Hello, Kind, WIRE_VERSION};
use volley_rpc::link::framed::{FRAME_TYPE, FramedLink};
use volley_rpc::link::local::{self, LocalReceiver, LocalSender};
use volley_rpc::link::{LinkError, LinkReceiver, LinkSender, Message, MessageLink};
use volley_rpc::{
    Bincode, CallError, Codec, CodecError, Config, ConnectError, Ended, Endpoint, Peer, Service,
    serve,
};
use volley_transport_tcp::{Framed, Listener, Role};

/// Bincode under another codec id, to meet a bincode peer.
struct Other;

impl Codec for Other {
    const ID: CodecId = CodecId::RAW;
    fn encode<T: Serialize + ?Sized>(
        value: &T,
        out: &mut bytes::BytesMut,
    ) -> Result<(), CodecError> {
        Bincode::encode(value, out)
    }
    fn decode<'de, T: Deserialize<'de>>(bytes: &'de [u8]) -> Result<T, CodecError> {
        Bincode::decode(bytes)
    }
}

mod elsewhere {
    volley_rpc::service! {
        /// `Test` as another build defines it: Echo takes bytes.
        pub service Test {
            /// Changed.
            1 => fn echo(args: Vec<u8>) -> String;
        }
    }
}

fn hello(version: u16, fingerprint: u64, credit: u32) -> Message {
    let hello = Hello {
        version,
        codec: CodecId::BINCODE2,
        max_message: 1 << 20,
        credit,
        fingerprint,
        calls: fingerprint,
        capabilities: 0,
    };
    Message::new(Kind::HELLO, 0, 0, Bytes::copy_from_slice(&hello.emit()))
}

/// A server end on an in-process link and the raw other end, past the hello.
async fn raw_peer(config: Config) -> ((Peer<Test>, Arc<Seen>), LocalSender, LocalReceiver) {
    let seen = Arc::new(Seen::default());
    let server = Endpoint::<Test>::new(config)
        .unwrap()
        .serve(server_router(seen.clone()));
    let (a, b) = local::pair(1024);
    let (tx, mut rx) = b.split();
    tx.send(hello(WIRE_VERSION, Test::FINGERPRINT, 64))
        .await
        .unwrap();
    let peer = within(10, server.connect(a)).await.unwrap();
    let theirs = within(10, rx.recv()).await.unwrap();
    assert_eq!(theirs.head.kind, Kind::HELLO);
    assert_eq!(
        Hello::parse(&theirs.args).unwrap().credit,
        config.credit,
        "the hello tells the credit"
    );
    ((peer, seen), tx, rx)
}

fn call(id: u32, method: u32, args: impl Serialize) -> Message {
    let mut out = bytes::BytesMut::new();
    Bincode::encode(&args, &mut out).unwrap();
    Message::new(Kind::CALL, id, method, out.freeze())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hello_mismatches_fail_at_once_on_both_ends() {
    within(30, async {
        // Codec.
        let (a, b) = local::pair(8);
        let ours = Endpoint::<Test, Bincode>::new(Config::default()).unwrap();
        let theirs = Endpoint::<Test, Other>::new(Config::default()).unwrap();
        let (x, y) = tokio::join!(ours.connect(a), theirs.connect(b));
        let x = x.unwrap_err();
        assert!(matches!(x, ConnectError::Codec { .. }), "{x}");
        assert!(x.to_string().contains("bincode 2"), "{x}");
        assert!(matches!(y.unwrap_err(), ConnectError::Codec { .. }));

        // Another definition of the service, from a peer without method tables (an
        // older build): the whole service's fingerprint must match, and does not.
        let (a, b) = local::pair(8);
        let (tx, _rx) = b.split();
        tx.send(hello(WIRE_VERSION, elsewhere::Test::FINGERPRINT, 1))
            .await
            .unwrap();
        let x = ours.connect(a).await.unwrap_err();
        assert!(
            matches!(
                x,
                ConnectError::Service {
                    service: "Test",
                    ..
                }
            ),
            "{x}"
        );
        assert!(
            x.to_string().contains("different service definitions"),
            "{x}"
        );
        // Two ends that send method tables connect whatever their method sets; each
        // call is checked against the other's table (tests/evolve.rs).
        let (a, b) = local::pair(8);
        let other = Endpoint::<elsewhere::Test>::new(Config::default()).unwrap();
        let (x, y) = tokio::join!(ours.connect(a), other.connect(b));
        x.unwrap();
        y.unwrap();

        // Wire version.
        let (a, b) = local::pair(8);
        let (tx, _rx) = b.split();
        tx.send(hello(9, Test::FINGERPRINT, 1)).await.unwrap();
        let e = ours.connect(a).await.unwrap_err();
        assert!(
            matches!(e, ConnectError::Version { ours: 1, theirs: 9 }),
            "{e}"
        );

        // Something that is not a hello.
        let (a, b) = local::pair(8);
        let (tx, _rx) = b.split();
        tx.send(call(1, 1, "hi")).await.unwrap();
        let e = ours.connect(a).await.unwrap_err();
        assert!(matches!(e, ConnectError::NotHello(Kind::CALL)), "{e}");

        // A malformed hello.
        let (a, b) = local::pair(8);
        let (tx, _rx) = b.split();
        tx.send(Message::new(Kind::HELLO, 0, 0, Bytes::from_static(b"VRPX")))
            .await
            .unwrap();
        let e = ours.connect(a).await.unwrap_err();
        assert!(matches!(e, ConnectError::Malformed(_)), "{e}");

        // Silence: the hello times out, naming how long it waited.
        let quick = Endpoint::<Test>::new(Config {
            hello_timeout: Duration::from_millis(200),
            ..Config::default()
        })
        .unwrap();
        let (a, _b) = local::pair(8);
        let e = quick.connect(a).await.unwrap_err();
        assert!(matches!(e, ConnectError::Timeout(_)), "{e}");
        assert!(e.to_string().contains("200ms"), "{e}");

        // Settings out of range are refused before anything starts.
        for bad in [
            Config {
                credit: 0,
                ..Config::default()
            },
            Config {
                max_message: 10,
                ..Config::default()
            },
        ] {
            assert!(matches!(
                Endpoint::<Test>::new(bad),
                Err(ConnectError::Config(_))
            ));
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handler_failures_come_back_typed_and_the_connection_goes_on() {
    for link in Link::ALL {
        within(30, async {
            let (server, client, _seen) = pair(link, Config::default(), Config::default()).await;
            let e = client
                .call::<test::Fail>(&"no disk".into())
                .await
                .unwrap_err();
            assert!(
                matches!(&e, CallError::Handler { method: "fail", detail } if detail == "no disk"),
                "{e}"
            );
            let e = client.call::<test::Panic>(&()).await.unwrap_err();
            assert!(
                matches!(&e, CallError::Panicked { detail, .. } if detail.contains("gave up")),
                "{e}"
            );
            let e = client.call::<test::Unrouted>(&()).await.unwrap_err();
            assert!(matches!(e, CallError::Unimplemented { id: 9, .. }), "{e}");
            assert_eq!(
                client.call::<test::Echo>(&"still".into()).await.unwrap(),
                "still"
            );
            assert!(server.failure().is_none());
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undecodable_arguments_and_unknown_ids_are_answered() {
    within(30, async {
        let ((_peer, _seen), tx, mut rx) = raw_peer(Config::default()).await;
        // Echo takes a String: these bytes claim a 255-byte string and end.
        let garbage = Message::new(Kind::CALL, 5, 1, Bytes::from_static(&[0xfb, 0xff, 0x00]));
        tx.send(garbage).await.unwrap();
        tx.send(call(6, 77, ())).await.unwrap();
        tx.send(call(7, 1, "fine")).await.unwrap();
        let mut got = Vec::new();
        for _ in 0..3 {
            got.push(within(10, rx.recv()).await.unwrap());
        }
        got.sort_by_key(|m| m.head.call_id);
        assert_eq!(
            (got[0].head.kind, got[0].head.method),
            (Kind::ERROR, ErrorCode::DECODE.0)
        );
        assert_eq!(
            (got[1].head.kind, got[1].head.method),
            (Kind::ERROR, ErrorCode::UNKNOWN_METHOD.0)
        );
        assert_eq!(got[2].head.kind, Kind::REPLY);
        let echoed: String = Bincode::decode(&got[2].args).unwrap();
        assert_eq!(echoed, "fine");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_past_credit_are_answered_busy_at_once() {
    within(30, async {
        let config = Config {
            credit: 2,
            ..Config::default()
        };
        let ((peer, seen), tx, mut rx) = raw_peer(config).await;
        // A caller that ignores the credit: 2 calls block, 5 more are answered Busy while
        // the first two still run, and the reader keeps reading (an echo still works).
        for id in 1..=7 {
            tx.send(call(id, 10, ())).await.unwrap();
        }
        for _ in 0..5 {
            let m = within(10, rx.recv()).await.unwrap();
            assert_eq!(
                (m.head.kind, m.head.method),
                (Kind::ERROR, ErrorCode::BUSY.0)
            );
            assert!((3..=7).contains(&m.head.call_id));
        }
        assert_eq!(peer.stats().busy, 5);
        // One-way calls past the credit are dropped and counted.
        let oneway = Message::new(Kind::ONE_WAY, 8, 5, {
            let mut out = bytes::BytesMut::new();
            Bincode::encode(&1u64, &mut out).unwrap();
            out.freeze()
        });
        tx.send(oneway).await.unwrap();
        while peer.stats().oneway_dropped == 0 {
            tokio::task::yield_now().await;
        }
        seen.release.notify_waiters();
        for _ in 0..2 {
            let m = within(10, rx.recv()).await.unwrap();
            assert_eq!(m.head.kind, Kind::REPLY);
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_too_large_are_refused_each_way() {
    for link in Link::ALL {
        within(30, async {
            let small = Config {
                max_message: 4096,
                ..Config::default()
            };
            let (server, client, _seen) = pair(link, small, small).await;
            // A call over the server's limit is refused here, before anything is sent.
            let e = client
                .call_with::<test::Bulk>(&(), vec![Bytes::from(vec![0u8; 10_000])], None)
                .await
                .unwrap_err();
            assert!(matches!(e, CallError::TooLarge { max: 4096, .. }), "{e}");
            assert_eq!(server.stats().calls_served, 0);
            assert_eq!(client.stats().calls_sent, 0);
            // A reply over the client's limit comes back as an error, not as a huge message.
            let (_server, client, _seen) = pair(link, Config::default(), small).await;
            let e = client
                .call::<test::Echo>(&"z".repeat(5000))
                .await
                .unwrap_err();
            assert!(matches!(e, CallError::TooLarge { .. }), "{e}");
            assert_eq!(client.call::<test::Echo>(&"ok".into()).await.unwrap(), "ok");
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_connection_fails_every_pending_call_with_one_error() {
    for link in Link::ALL {
        within(30, async {
            let config = Config {
                default_deadline: None,
                ..Config::default()
            };
            let (server, client, seen) = pair(link, config, config).await;
            let mut pending = Vec::new();
            for _ in 0..5 {
                let client = client.clone();
                pending.push(tokio::spawn(async move {
                    client.call::<test::Sleep>(&60_000).await
                }));
            }
            while seen
                .sleeps_started
                .load(core::sync::atomic::Ordering::SeqCst)
                < 5
            {
                tokio::task::yield_now().await;
            }
            drop(server);
            for call in pending {
                let e = call.await.unwrap().unwrap_err();
                assert!(
                    matches!(
                        &e,
                        CallError::ConnectionLost {
                            cause: Ended::Link(LinkError::Closed | LinkError::Transport { .. }),
                            ..
                        }
                    ),
                    "{e}"
                );
                assert!(e.to_string().contains("connection is lost"), "{e}");
            }
            assert!(matches!(
                client.call::<test::Echo>(&"x".into()).await,
                Err(CallError::ConnectionLost { .. })
            ));
            assert!(matches!(
                client.closed().await,
                Ended::Link(LinkError::Closed | LinkError::Transport { .. })
            ));
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_frames_end_that_connection_only() {
    within(30, async {
        let seen = Arc::new(Seen::default());
        let endpoint = Endpoint::<Test>::new(Config::default())
            .unwrap()
            .serve(server_router(seen));
        let listener = Listener::bind_tcp(
            "127.0.0.1:0".parse().unwrap(),
            volley_rpc::listener_config(16),
        )
        .await
        .unwrap();
        let server = serve(endpoint, listener);
        let addr = server.local_addr().unwrap();
        let good = Endpoint::<Test>::new(Config::default())
            .unwrap()
            .connect(FramedLink::connect_tcp(addr).await.unwrap())
            .await
            .unwrap();

        let config = volley_rpc::link::framed::config(Role::Initiator);
        // A frame of another protocol where the hello should be.
        let (raw, mut incoming) = Framed::connect_tcp(addr, config).await.unwrap();
        raw.send(0x01, 3, b"", Bytes::from_static(b"sftp?"))
            .await
            .unwrap();
        assert!(
            incoming.recv_timeout(Duration::from_secs(10)).await.is_ok(),
            "its hello"
        );
        let end = incoming.recv_timeout(Duration::from_secs(10)).await;
        assert!(end.is_err(), "the server closes it: {end:?}");

        // A valid hello, then an rpc frame whose lengths lie.
        let (raw, mut incoming) = Framed::connect_tcp(addr, config).await.unwrap();
        let ours = Hello {
            version: WIRE_VERSION,
            codec: CodecId::BINCODE2,
            max_message: 1 << 20,
            credit: 8,
            fingerprint: Test::FINGERPRINT,
            calls: Test::FINGERPRINT,
            capabilities: 0,
        };
        let mut head = [0u8; 16];
        Head {
            kind: Kind::HELLO,
            call_id: 0,
            method: 0,
            deadline_us: None,
            metadata: false,
        }
        .emit(24, [], &mut head)
        .unwrap();
        raw.send(FRAME_TYPE, 0, &head, Bytes::copy_from_slice(&ours.emit()))
            .await
            .unwrap();
        let mut lying = head;
        lying[0] = Kind::CALL.0;
        lying[12..16].copy_from_slice(&1000u32.to_le_bytes());
        raw.send(FRAME_TYPE, 0, &lying, Bytes::from_static(b"short"))
            .await
            .unwrap();
        assert!(
            incoming.recv_timeout(Duration::from_secs(10)).await.is_ok(),
            "its hello"
        );
        assert!(
            incoming
                .recv_timeout(Duration::from_secs(10))
                .await
                .is_err()
        );

        // The well-behaved client never noticed.
        assert_eq!(
            good.call::<test::Echo>(&"fine".into()).await.unwrap(),
            "fine"
        );
        drop(good);
        server.shutdown().await.unwrap();
    })
    .await;
}

/// postcard end to end, and a postcard peer meeting a bincode one.
#[cfg(feature = "postcard")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postcard_serves_and_refuses_bincode() {
    use volley_rpc::{Postcard, Router};
    within(30, async {
        let seen = Arc::new(Seen::default());
        let server = Endpoint::<Test, Postcard>::new(Config::default())
            .unwrap()
            .serve(server_router::<Postcard>(seen));
        let client = Endpoint::<Test, Postcard>::new(Config::default())
            .unwrap()
            .serve(Router::<Test, Test, Postcard>::new());
        let (a, b) = local::pair(8);
        let (_s, c) = tokio::try_join!(server.connect(a), client.connect(b)).unwrap();
        assert_eq!(c.call::<test::Echo>(&"post".into()).await.unwrap(), "post");
        let data = payload(100_000, 5);
        let reply = c
            .call_with::<test::Bulk>(&(), vec![data.clone()], None)
            .await
            .unwrap();
        assert_eq!(reply.segments, [data]);

        let (a, b) = local::pair(8);
        let bincode = Endpoint::<Test, Bincode>::new(Config::default()).unwrap();
        let (x, _) = tokio::join!(server.connect(a), bincode.connect(b));
        let e = x.unwrap_err();
        assert!(
            e.to_string().contains("postcard") && e.to_string().contains("bincode 2"),
            "{e}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_floods_past_credit_without_reading_is_dropped() {
    within(30, async {
        let seen = Arc::new(Seen::default());
        let server = Endpoint::<Test>::new(Config {
            credit: 1,
            ..Config::default()
        })
        .unwrap()
        .serve(server_router(seen.clone()));
        // The flooder's receiving side holds 8 messages and is never read.
        let (a, b) = local::pair(8);
        let (tx, _never_read) = b.split();
        tx.send(hello(WIRE_VERSION, Test::FINGERPRINT, 1))
            .await
            .unwrap();
        let peer = server.connect(a).await.unwrap();
        tx.send(call(1, 10, ())).await.unwrap();
        let mut id = 2;
        // Every call past the credit gets a busy answer that cannot be delivered; past
        // 1024 of them the server gives up on the connection instead of piling up more.
        while peer.failure().is_none() && id < 5000 {
            if tx.send(call(id, 10, ())).await.is_err() {
                break;
            }
            id += 1;
        }
        let cause = peer.closed().await;
        assert!(matches!(cause, Ended::Flooded(1024)), "{cause}");
        assert!(cause.to_string().contains("past its credit"), "{cause}");
        seen.release.notify_waiters();
    })
    .await;
}

/// A link of any crate reports its transport's error, which stays reachable as the
/// source (not flattened into text).
#[test]
fn a_transport_error_is_kept_as_the_source() {
    let cause = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset by peer");
    let e = LinkError::transport(cause);
    assert_eq!(e.to_string(), "reset by peer");
    let source = e.source().expect("the cause is the source");
    assert_eq!(source.to_string(), "reset by peer");
    let LinkError::Transport { source } = &e else {
        panic!("a transport error: {e:?}");
    };
    let io = source
        .downcast_ref::<std::io::Error>()
        .expect("the transport's own error, typed");
    assert_eq!(io.kind(), std::io::ErrorKind::ConnectionReset);
    // Clone keeps it (a pending call each gets the same cause).
    let again = e.clone();
    assert!(again.source().is_some());
}
