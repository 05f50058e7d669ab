//! Calls that work: over TCP, Unix and in-process links; bulk segments verified byte for
//! byte and never copied; one-way calls in order with credit coming back; calls in both
//! directions; deadlines; cancellation; credit; graceful shutdown.

mod common;

use core::sync::atomic::Ordering;
use core::time::Duration;
use std::sync::Arc;

use bytes::Bytes;
use common::*;
use volley_proto::rpc::{CodecId, Hello, Kind, WIRE_VERSION};
use volley_rpc::link::framed::{self, FramedLink};
use volley_rpc::link::local::{self, LocalReceiver, LocalSender};
use volley_rpc::link::{LinkReceiver, LinkSender, Message, MessageLink, Payload};
use volley_rpc::{CallError, Config, Endpoint, Peer, Service, serve};
use volley_transport_tcp::{Framed, Listener, Role};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_and_bulk_over_tcp_with_no_bulk_bytes_copied() {
    within(30, async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Seen::default());
        let server_end = Endpoint::<Test>::new(Config::default())
            .unwrap()
            .serve(server_router(seen.clone()));
        // Accept by hand to keep the server's framed handle for its counters.
        let server = tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            let (framed, incoming) =
                Framed::from_tcp(stream, framed::config(Role::Acceptor)).unwrap();
            let stats = framed.clone();
            let peer = server_end
                .connect(FramedLink::new(framed, incoming))
                .await
                .unwrap();
            (peer, stats)
        });
        let link = FramedLink::connect_tcp(addr).await.unwrap();
        let client_framed = link.framed().clone();
        let client = Endpoint::<Test>::new(Config::default())
            .unwrap()
            .connect(link)
            .await
            .unwrap();
        let (_server, server_framed) = server.await.unwrap();

        assert_eq!(
            client.call::<test::Echo>(&"hello".into()).await.unwrap(),
            "hello"
        );

        let segments = vec![
            payload(1 << 20, 1),
            payload(64 << 10, 2),
            payload(3 << 20, 3),
        ];
        let total: usize = segments.iter().map(|s| s.len()).sum();
        let reply = client
            .call_with::<test::Bulk>(&(), segments.clone(), None)
            .await
            .unwrap();
        assert_eq!(reply.value, total as u64);
        assert_eq!(reply.segments, segments, "every byte back, in order");

        // Socket to handler and handler to socket: the segments were slices of the
        // receive buffers (nothing moved) and went out by iovec (only heads, args and
        // pieces under the copy threshold are coalesced).
        for framed in [&server_framed, &client_framed] {
            let stats = framed.stats();
            assert_eq!(stats.bytes_moved, 0);
            assert!(
                stats.bytes_copied < 1024,
                "{} bytes copied for {total} bytes of segments",
                stats.bytes_copied
            );
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn served_over_a_listener_on_tcp_and_unix() {
    within(30, async {
        let seen = Arc::new(Seen::default());
        let endpoint = Endpoint::<Test>::new(Config::default())
            .unwrap()
            .serve(server_router(seen.clone()));
        let config = volley_rpc::listener_config(64);
        let tcp = Listener::bind_tcp("127.0.0.1:0".parse().unwrap(), config)
            .await
            .unwrap();
        let tcp_server = serve(endpoint.clone(), tcp);
        let addr = tcp_server.local_addr().unwrap();

        let dir = std::env::temp_dir().join(format!("volley-rpc-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("rpc.sock");
        let _ = std::fs::remove_file(&path);
        let unix = Listener::from_unix(tokio::net::UnixListener::bind(&path).unwrap(), config);
        let unix_server = serve(endpoint, unix);

        let client_end = Endpoint::<Test>::new(Config::default()).unwrap();
        let over_tcp = client_end
            .connect(FramedLink::connect_tcp(addr).await.unwrap())
            .await
            .unwrap();
        let over_unix = client_end
            .connect(FramedLink::connect_unix(&path).await.unwrap())
            .await
            .unwrap();
        for peer in [&over_tcp, &over_unix] {
            let data = payload(200_000, 9);
            let reply = peer
                .call_with::<test::Bulk>(&(), vec![data.clone()], None)
                .await
                .unwrap();
            assert_eq!(reply.segments, [data]);
            assert_eq!(
                peer.call::<test::Echo>(&"x".repeat(1000))
                    .await
                    .unwrap()
                    .len(),
                1000
            );
        }
        // Each end knows where the other is: over TCP the address, over Unix nothing.
        assert_eq!(over_tcp.connection().peer_addr, Some(addr));
        assert_eq!(over_unix.connection().peer_addr, None);
        let from = seen.echoed_from.lock().unwrap().clone();
        let tcp_from = from[0].expect("the TCP client's address");
        assert!(
            tcp_from.ip().is_loopback() && tcp_from.port() != 0,
            "{tcp_from}"
        );
        assert_eq!(from[1], None, "a Unix peer has no address");
        drop((over_tcp, over_unix));
        tcp_server.shutdown().await.unwrap();
        unix_server.shutdown().await.unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_process_segments_are_the_same_memory() {
    within(30, async {
        let (_server, client, seen) = local_pair(Config::default(), Config::default()).await;
        let data = payload(1 << 20, 4);
        let reply = client
            .call_with::<test::Bulk>(&(), vec![data.clone()], None)
            .await
            .unwrap();
        // The handler saw the caller's buffer, and the reply hands the same one back.
        assert_eq!(
            seen.segment_ptrs.lock().unwrap()[..],
            [data.as_ptr() as usize]
        );
        assert_eq!(reply.segments[0].as_ptr(), data.as_ptr());
        assert_eq!(reply.segments[0], data);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_arguments_and_results_travel_inline_and_large_ones_in_pool_buffers() {
    for link in Link::ALL {
        within(30, async {
            let (server, client, _seen) = pair(link, Config::default(), Config::default()).await;
            // Small both ways: held in the messages, no pool buffer taken at either end.
            for i in 0..100 {
                let text = format!("#{i}");
                assert_eq!(client.call::<test::Echo>(&text).await.unwrap(), text);
            }
            assert_eq!(client.pool_stats(), Default::default(), "{link:?}");
            assert_eq!(server.pool_stats(), Default::default(), "{link:?}");
            // Past the inline room both ways: a buffer at each end, the bytes intact.
            let text = "z".repeat(volley_rpc::link::INLINE + 1);
            assert_eq!(client.call::<test::Echo>(&text).await.unwrap(), text);
            assert_eq!(client.pool_stats().at_once, 1, "{link:?}");
            assert_eq!(server.pool_stats().at_once, 1, "{link:?}");
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn borrowed_decode_reads_in_place() {
    for link in Link::ALL {
        within(30, async {
            let (_server, client, _seen) = pair(link, Config::default(), Config::default()).await;
            let text = "y".repeat(5000);
            assert_eq!(client.call::<test::Borrow>(&text).await.unwrap(), 5000);
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_way_calls_run_in_order_and_credit_comes_back() {
    for link in Link::ALL {
        within(30, async {
            // A credit of 4 against 2000 one-way calls: the caller must get credit back
            // hundreds of times, or it stalls.
            let config = Config {
                credit: 4,
                ..Config::default()
            };
            let (server, client, seen) = pair(link, config, config).await;
            for i in 0..2000u64 {
                client.send::<test::Record>(&i, Vec::new()).await.unwrap();
            }
            // A failing one-way call is logged and counted, and the rest go on.
            client
                .send::<test::Record>(&u64::MAX, Vec::new())
                .await
                .unwrap();
            client
                .send::<test::Record>(&2000, Vec::new())
                .await
                .unwrap();
            // A sync call after them: credit for it exists only once the one-ways returned it.
            for _ in 0..4 {
                client.call::<test::Echo>(&"sync".into()).await.unwrap();
            }
            loop {
                if seen.recorded.lock().unwrap().len() == 2001 {
                    break;
                }
                tokio::task::yield_now().await;
            }
            let recorded = seen.recorded.lock().unwrap().clone();
            assert_eq!(recorded, (0..=2000).collect::<Vec<_>>());
            assert_eq!(server.stats().oneway_failed, 1);
            assert_eq!(server.stats().oneway_dropped, 0);
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_calls_back_into_its_client() {
    for link in Link::ALL {
        within(30, async {
            let (server, client, _seen) = pair(link, Config::default(), Config::default()).await;
            assert_eq!(client.call::<test::CallBack>(&20).await.unwrap(), 41);
            // And the server may call the client directly.
            assert_eq!(server.call::<test::Double>(&5).await.unwrap(), 10);
            // The client does not serve Echo.
            assert!(matches!(
                server.call::<test::Echo>(&"x".into()).await,
                Err(CallError::Unimplemented { id: 1, .. })
            ));
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_wait_for_credit_and_never_exceed_it() {
    for link in Link::ALL {
        within(30, async {
            let server_config = Config {
                credit: 3,
                ..Config::default()
            };
            let (server, client, seen) = pair(link, server_config, Config::default()).await;
            let mut calls = Vec::new();
            for _ in 0..10 {
                let client = client.clone();
                calls.push(tokio::spawn(async move {
                    client.call::<test::Blocked>(&()).await
                }));
            }
            // Release them a few at a time until all are done.
            while calls.iter().any(|c| !c.is_finished()) {
                while seen.blocked_now.load(Ordering::SeqCst) < 3
                    && calls.iter().filter(|c| !c.is_finished()).count() > 3
                {
                    tokio::task::yield_now().await;
                }
                seen.release.notify_waiters();
                tokio::task::yield_now().await;
            }
            for call in calls {
                call.await.unwrap().unwrap();
            }
            assert_eq!(seen.blocked_max.load(Ordering::SeqCst), 3);
            assert_eq!(
                server.stats().busy,
                0,
                "a waiting caller is never answered busy"
            );
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadlines_travel_and_expire() {
    for link in Link::ALL {
        within(30, async {
            let (_server, client, seen) = pair(link, Config::default(), Config::default()).await;
            let seen_us = client
                .call_with::<test::SeeDeadline>(&(), Vec::new(), Some(Duration::from_secs(7)))
                .await
                .unwrap()
                .value;
            assert_eq!(seen_us, 7_000_000);
            // The default deadline applies when none is given.
            assert_eq!(
                client.call::<test::SeeDeadline>(&()).await.unwrap(),
                60_000_000
            );

            let err = client
                .call_with::<test::Sleep>(&10_000, Vec::new(), Some(Duration::from_millis(50)))
                .await
                .unwrap_err();
            assert!(
                matches!(
                    err,
                    CallError::DeadlineExceeded {
                        method: "sleep",
                        ..
                    }
                ),
                "{err}"
            );
            assert!(err.to_string().contains("sleep"), "{err}");
            // The server stopped the handler too (it was cancelled or timed out there).
            while seen.sleeps_dropped.load(Ordering::SeqCst) == 0 {
                tokio::task::yield_now().await;
            }
        })
        .await;
    }
}

/// A client on an in-process link whose other end says hello, giving `credit`, and then
/// answers nothing; that end's halves.
async fn silent_server(credit: u32) -> (Peer<Test>, LocalSender, LocalReceiver) {
    let (a, b) = local::pair(1024);
    let (tx, mut rx) = b.split();
    let hello = Hello {
        version: WIRE_VERSION,
        codec: CodecId::BINCODE2,
        max_message: 1 << 20,
        credit,
        fingerprint: Test::FINGERPRINT,
        calls: Test::FINGERPRINT,
        capabilities: 0,
    };
    let hello = Message::new(Kind::HELLO, 0, 0, Bytes::copy_from_slice(&hello.emit()));
    tx.send(hello).await.unwrap();
    let client = Endpoint::<Test>::new(Config::default())
        .unwrap()
        .serve(client_router());
    let client = within(10, client.connect(a)).await.unwrap();
    assert_eq!(within(10, rx.recv()).await.unwrap().head.kind, Kind::HELLO);
    (client, tx, rx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_peers_calls_expire_at_their_deadlines_and_are_cancelled_there() {
    within(30, async {
        // Credit for one call: each call after the first needs the one before's back.
        let (client, _tx, mut rx) = silent_server(1).await;
        // A long deadline is kept by the connection's sweep (asleep before the first, and
        // again after the short one), a short one by a timer of its own.
        for deadline in [
            Duration::from_secs(1),
            Duration::from_millis(50),
            Duration::from_secs(1),
        ] {
            let start = std::time::Instant::now();
            let err = client
                .call_with::<test::Echo>(&"anyone?".into(), Vec::new(), Some(deadline))
                .await
                .unwrap_err();
            let took = start.elapsed();
            assert!(
                matches!(err, CallError::DeadlineExceeded { method: "echo", after } if after == deadline),
                "{err}"
            );
            assert!(took >= deadline, "expired after {took:?}, before {deadline:?}");
            assert!(
                took < deadline + Duration::from_millis(500),
                "expired after {took:?}, long past {deadline:?}"
            );
            let call = within(5, rx.recv()).await.unwrap();
            assert_eq!(call.head.kind, Kind::CALL);
            let cancel = within(5, rx.recv()).await.unwrap();
            assert_eq!(
                (cancel.head.kind, cancel.head.call_id),
                (Kind::CANCEL, call.head.call_id),
                "the expired call is cancelled at the peer"
            );
        }
        assert_eq!(client.stats().calls_sent, 3);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_call_cancels_it_at_the_server() {
    for link in Link::ALL {
        within(30, async {
            let config = Config {
                default_deadline: None,
                ..Config::default()
            };
            let (server, client, seen) = pair(link, config, config).await;
            let call = tokio::spawn({
                let client = client.clone();
                async move { client.call::<test::Sleep>(&60_000).await }
            });
            while seen.sleeps_started.load(Ordering::SeqCst) == 0 {
                tokio::task::yield_now().await;
            }
            call.abort();
            while server.stats().cancelled == 0 {
                tokio::task::yield_now().await;
            }
            while seen.sleeps_dropped.load(Ordering::SeqCst) == 0 {
                tokio::task::yield_now().await;
            }
            // The slot is free again: calls go on.
            assert_eq!(
                client.call::<test::Echo>(&"after".into()).await.unwrap(),
                "after"
            );
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_finishes_running_calls() {
    within(30, async {
        let seen = Arc::new(Seen::default());
        let endpoint = Endpoint::<Test>::new(Config::default())
            .unwrap()
            .serve(server_router(seen.clone()));
        let listener = Listener::bind_tcp(
            "127.0.0.1:0".parse().unwrap(),
            volley_rpc::listener_config(16),
        )
        .await
        .unwrap();
        let server = serve(endpoint, listener);
        let addr = server.local_addr().unwrap();
        let client = Endpoint::<Test>::new(Config::default())
            .unwrap()
            .connect(FramedLink::connect_tcp(addr).await.unwrap())
            .await
            .unwrap();
        let slow = tokio::spawn({
            let client = client.clone();
            async move { client.call::<test::Sleep>(&300).await }
        });
        while seen.sleeps_started.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        server.shutdown().await.unwrap();
        // The call that was running finished and got its reply.
        slow.await.unwrap().unwrap();
        assert_eq!(seen.sleeps_dropped.load(Ordering::SeqCst), 0);
        // New calls fail with a clear error: the server has gone.
        let err = client.call::<test::Echo>(&"late".into()).await.unwrap_err();
        assert!(
            matches!(
                err,
                CallError::ConnectionLost { .. } | CallError::ShuttingDown { .. }
            ),
            "{err}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_service_over_the_udp_channel() {
    use volley_rpc::link::udp::UdpLink;
    use volley_transport_udp::channel::{ChannelConfig, ChannelEndpoint};
    within(60, async {
        let seen = Arc::new(Seen::default());
        let endpoint = Endpoint::<Test>::new(Config::default())
            .unwrap()
            .serve(server_router(seen.clone()));
        let channel =
            ChannelEndpoint::bind("127.0.0.1:0".parse().unwrap(), ChannelConfig::server())
                .await
                .unwrap();
        let server = serve(endpoint, channel);
        let addr = server.local_addr().unwrap();
        let ours = ChannelEndpoint::bind("127.0.0.1:0".parse().unwrap(), ChannelConfig::client())
            .await
            .unwrap();
        let client = Endpoint::<Test>::new(Config::default())
            .unwrap()
            .serve(client_router())
            .connect(UdpLink::new(ours.connect(addr).await.unwrap()))
            .await
            .unwrap();
        assert_eq!(
            client.call::<test::Echo>(&"over udp".into()).await.unwrap(),
            "over udp"
        );
        let segments = vec![payload(1 << 20, 1), payload(3 << 20, 2), payload(10, 3)];
        let reply = client
            .call_with::<test::Bulk>(&(), segments.clone(), None)
            .await
            .unwrap();
        assert_eq!(reply.segments, segments, "every byte back, in order");
        assert_eq!(client.call::<test::CallBack>(&4).await.unwrap(), 9);
        for i in 0..500u64 {
            client.send::<test::Record>(&i, Vec::new()).await.unwrap();
        }
        client.call::<test::Echo>(&"sync".into()).await.unwrap();
        while seen.recorded.lock().unwrap().len() < 500 {
            tokio::task::yield_now().await;
        }
        assert_eq!(*seen.recorded.lock().unwrap(), (0..500).collect::<Vec<_>>());
        assert!(matches!(
            client.call::<test::Unrouted>(&()).await,
            Err(CallError::Unimplemented { .. })
        ));
        drop(client);
        server.shutdown().await.unwrap();
    })
    .await;
}

/// Over the UDP channel each end knows the other's address; in-process, nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_end_knows_where_the_other_is() {
    for link in Link::ALL {
        let (server, client, _) = pair(link, Config::default(), Config::default()).await;
        let (s, c) = (server.connection().peer_addr, client.connection().peer_addr);
        match link {
            Link::Local => assert_eq!((s, c), (None, None)),
            Link::Udp => {
                let (s, c) = (s.expect("the client's address"), c.expect("the server's"));
                assert!(s.ip().is_loopback() && c.ip().is_loopback() && s.port() != c.port());
            }
        }
        within(10, client.shutdown()).await;
    }
}

/// Sends `make(id)` for each id of `ids` until the link is full: the id it was full at and
/// the message it gave back.
fn fill(
    sender: &impl LinkSender,
    ids: core::ops::Range<u32>,
    make: impl Fn(u32) -> Message,
) -> (u32, Message) {
    for id in ids {
        match sender.try_send(make(id)) {
            Ok(()) => {}
            Err(volley_rpc::link::TrySendError::Full(back)) => return (id, back),
            Err(volley_rpc::link::TrySendError::Failed(e)) => panic!("{e}"),
        }
    }
    panic!("the link never filled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_framed_link_gives_each_message_back_whole() {
    within(30, async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (link, accepted) = tokio::join!(FramedLink::connect_tcp(addr), listener.accept());
        // The peer never reads: the socket and then the link's queue fill.
        let _unread = accepted.unwrap();
        let (sender, _receiver) = link.unwrap().split();
        let shared = |id| {
            let mut message =
                Message::new(Kind::CALL, id, 1, Bytes::from(vec![id as u8; 64 << 10]));
            message.segments = vec![Bytes::from_static(b"segment")];
            message
        };
        let (id, back) = fill(&sender, 0..10_000, shared);
        assert_eq!(back, shared(id), "shared arguments and segments given back");
        // Small messages may still fit in what room is left; one will not.
        let inline = |id| Message::new(Kind::CALL, id, 1, Payload::copy_from_slice(b"small"));
        let (id, back) = fill(&sender, id..id + 1_000_000, inline);
        assert_eq!(back, inline(id), "inline arguments given back");
        assert!(back.args.inline().is_some(), "and still inline");
    })
    .await;
}
