//! A hostile or silent client against `serve`: every refusal closes the connection both
//! ways and frees its slot, a full server says so, a silent peer is pinged and dropped,
//! an idle one closed, a reused call id answered with an error, a hello too long cut off.

mod common;

use core::net::SocketAddr;
use core::time::Duration;
use std::sync::Arc;

use bytes::Bytes;
use common::*;
use volley_proto::rpc::{
    CAP_ANSWERS_PINGS, CodecId, ErrorCode, HELLO_LEN, Head, Hello, Kind, MAX_HELLO_FRAME,
    WIRE_VERSION,
};
use volley_rpc::Ended;
use volley_rpc::link::Message;
use volley_rpc::link::framed::{FRAME_TYPE, FramedLink};
use volley_rpc::{Config, ConnectError, Endpoint, ServerHandle, Service, serve};
use volley_transport_tcp::{Error, Framed, Listener, Role, Unsolicited};

/// A server of the test service with `config`, at most `max_connections` at once, and
/// its address.
/// A running server and its listener, which tells its counts.
struct Server {
    _handle: ServerHandle,
    listener: Arc<Listener>,
}

impl Server {
    fn stats(&self) -> volley_transport_tcp::ListenerStats {
        self.listener.stats()
    }
}

async fn server(config: Config, max_connections: usize) -> (Server, SocketAddr) {
    let endpoint = Endpoint::<Test>::new(config)
        .unwrap()
        .serve(server_router(Arc::new(Seen::default())));
    let listener = Listener::bind_tcp(
        "127.0.0.1:0".parse().unwrap(),
        volley_rpc::listener_config(max_connections),
    )
    .await
    .unwrap();
    let listener = Arc::new(listener);
    let server = serve(endpoint, listener.clone());
    let addr = server.local_addr().unwrap();
    let server = Server {
        _handle: server,
        listener,
    };
    (server, addr)
}

/// A client of the test service at `addr`, connected.
async fn client(config: Config, addr: SocketAddr) -> volley_rpc::Peer<Test> {
    Endpoint::<Test>::new(config)
        .unwrap()
        .connect(FramedLink::connect_tcp(addr).await.unwrap())
        .await
        .unwrap()
}

/// A raw framed connection speaking as a client would, hello or not.
async fn raw(addr: SocketAddr) -> (Framed, Unsolicited) {
    let config = volley_rpc::link::framed::config(Role::Initiator);
    Framed::connect_tcp(addr, config).await.unwrap()
}

fn head(kind: Kind, call_id: u32, method: u32, args: usize) -> Vec<u8> {
    let mut head = [0u8; 16];
    let n = Head {
        kind,
        call_id,
        method,
        deadline_us: None,
        metadata: false,
    }
    .emit(args, [], &mut head)
    .unwrap();
    head[..n].to_vec()
}

/// Sends a hello of the test service with these capability bits.
async fn send_hello(framed: &Framed, capabilities: u8) {
    let hello = Hello {
        version: WIRE_VERSION,
        codec: CodecId::BINCODE2,
        max_message: 1 << 20,
        credit: 8,
        fingerprint: Test::FINGERPRINT,
        calls: Test::FINGERPRINT,
        capabilities,
    };
    framed
        .send(
            FRAME_TYPE,
            0,
            &head(Kind::HELLO, 0, 0, HELLO_LEN),
            Bytes::copy_from_slice(&hello.emit()),
        )
        .await
        .unwrap();
}

/// The next RPC message from a raw connection.
async fn next(incoming: &mut Unsolicited) -> Result<Message, Error> {
    let frame = incoming.recv_timeout(Duration::from_secs(10)).await?;
    let parsed = volley_proto::rpc::Message::parse(&frame.body).unwrap();
    Ok(Message {
        head: parsed.head,
        args: frame.body.slice(parsed.args_range()).into(),
        segments: Vec::new(),
    })
}

/// Waits until the server has `open` connections.
async fn open_now(server: &Server, open: usize) {
    within(20, async {
        while server.stats().open != open {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

#[tokio::test]
async fn a_connection_that_never_says_hello_is_closed_and_its_slot_freed() {
    let config = Config {
        hello_timeout: Duration::from_millis(300),
        ..Config::default()
    };
    let (server, addr) = server(config, 4).await;
    let (_silent, mut incoming) = raw(addr).await;
    // Its hello comes, then the end, though this side never closes or sends a byte.
    assert_eq!(next(&mut incoming).await.unwrap().head.kind, Kind::HELLO);
    assert_eq!(next(&mut incoming).await.unwrap_err(), Error::Closed);
    open_now(&server, 0).await;
}

#[tokio::test]
async fn past_max_connections_the_client_hears_no_free_slot() {
    let (server, addr) = server(Config::default(), 1).await;
    let endpoint = Endpoint::<Test>::new(Config::default()).unwrap();
    let first = endpoint
        .connect(FramedLink::connect_tcp(addr).await.unwrap())
        .await
        .unwrap();
    let second = within(
        10,
        endpoint.connect(FramedLink::connect_tcp(addr).await.unwrap()),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&second, ConnectError::Refused(why) if why == "no free connection slot"),
        "{second}"
    );
    assert_eq!(
        second.to_string(),
        "the server refused: no free connection slot"
    );
    assert_eq!(server.stats().refused, 1);
    // The first is served all along.
    let echoed = first
        .call::<test::Echo>(&"still here".to_string())
        .await
        .unwrap();
    assert_eq!(echoed, "still here");
}

#[tokio::test]
async fn a_hello_longer_than_its_limit_ends_the_connection_at_once() {
    let (server, addr) = server(Config::default(), 4).await;
    let (framed, mut incoming) = raw(addr).await;
    let mut long = Hello {
        version: WIRE_VERSION,
        codec: CodecId::BINCODE2,
        max_message: 1 << 20,
        credit: 8,
        fingerprint: Test::FINGERPRINT,
        calls: Test::FINGERPRINT,
        capabilities: 0,
    }
    .emit()
    .to_vec();
    long.resize(MAX_HELLO_FRAME, 0);
    framed
        .send(
            FRAME_TYPE,
            0,
            &head(Kind::HELLO, 0, 0, long.len()),
            Bytes::from(long),
        )
        .await
        .unwrap();
    // The server's hello may or may not get out first; then the end, at once.
    let started = std::time::Instant::now();
    loop {
        match next(&mut incoming).await {
            Ok(m) => assert_eq!(m.head.kind, Kind::HELLO),
            Err(e) => {
                assert!(matches!(e, Error::Closed | Error::Io { .. }), "{e}");
                break;
            }
        }
    }
    assert!(started.elapsed() < Duration::from_secs(5));
    open_now(&server, 0).await;
}

#[tokio::test]
async fn a_silent_peer_that_answers_pings_is_pinged_then_dropped() {
    let config = Config {
        keepalive: Some(Duration::from_millis(100)),
        idle_timeout: Some(Duration::from_secs(60)),
        ..Config::default()
    };
    let (server, addr) = server(config, 4).await;
    let (framed, mut incoming) = raw(addr).await;
    send_hello(&framed, CAP_ANSWERS_PINGS).await;
    assert_eq!(next(&mut incoming).await.unwrap().head.kind, Kind::HELLO);
    // Pings come; this peer never answers them.
    let mut pings = 0;
    let end = loop {
        match next(&mut incoming).await {
            Ok(m) => {
                assert_eq!(m.head.kind, Kind::PING);
                pings += 1;
            }
            Err(e) => break e,
        }
    };
    assert!((1..=3).contains(&pings), "{pings} pings before the drop");
    assert_eq!(end, Error::Closed);
    open_now(&server, 0).await;
}

#[tokio::test]
async fn a_live_peer_answers_pings_and_stays() {
    let config = Config {
        keepalive: Some(Duration::from_millis(50)),
        idle_timeout: Some(Duration::from_secs(60)),
        ..Config::default()
    };
    let (_server, addr) = server(config, 4).await;
    let client = client(config, addr).await;
    // Ten keep-alive intervals without a call: pings both ways keep it up.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(client.failure().is_none(), "{:?}", client.failure());
    let echoed = client
        .call::<test::Echo>(&"alive".to_string())
        .await
        .unwrap();
    assert_eq!(echoed, "alive");
}

#[tokio::test]
async fn an_idle_connection_is_closed_whatever_its_version() {
    let config = Config {
        keepalive: None,
        idle_timeout: Some(Duration::from_millis(200)),
        ..Config::default()
    };
    let (server, addr) = server(config, 4).await;
    // A version-1 peer that predates pings: no capability bits.
    let (framed, mut incoming) = raw(addr).await;
    send_hello(&framed, 0).await;
    assert_eq!(next(&mut incoming).await.unwrap().head.kind, Kind::HELLO);
    assert_eq!(next(&mut incoming).await.unwrap_err(), Error::Closed);
    open_now(&server, 0).await;
    // With a client of its own, a call in flight keeps the connection: the idle timer
    // counts only time with nothing in flight.
    let client = Endpoint::<Test>::new(Config {
        idle_timeout: None,
        ..config
    })
    .unwrap()
    .connect(FramedLink::connect_tcp(addr).await.unwrap())
    .await
    .unwrap();
    client.call::<test::Sleep>(&500).await.unwrap();
    // This peer hears why: the server says it closes for being idle.
    let cause = within(10, client.closed()).await;
    assert!(matches!(cause, Ended::IdleClosed(_)), "{cause}");
    assert!(
        cause
            .to_string()
            .starts_with("closed by the server after 0.2"),
        "{cause}"
    );
}

#[tokio::test]
async fn a_reused_call_id_gets_an_error_reply_and_the_connection_goes_on() {
    let (_server, addr) = server(Config::default(), 4).await;
    let (framed, mut incoming) = raw(addr).await;
    send_hello(&framed, 0).await;
    assert_eq!(next(&mut incoming).await.unwrap().head.kind, Kind::HELLO);
    // Sleep(300 ms) twice under one id: the second is refused while the first runs.
    let args = bincode_u64(300);
    for _ in 0..2 {
        framed
            .send(
                FRAME_TYPE,
                0,
                &head(
                    Kind::CALL,
                    7,
                    <test::Sleep as volley_rpc::Method>::ID,
                    args.len(),
                ),
                Bytes::from(args.clone()),
            )
            .await
            .unwrap();
    }
    let refused = next(&mut incoming).await.unwrap();
    assert_eq!(
        (
            refused.head.kind,
            refused.head.call_id,
            ErrorCode(refused.head.method)
        ),
        (Kind::ERROR, 7, ErrorCode::PROTOCOL)
    );
    let reply = next(&mut incoming).await.unwrap();
    assert_eq!((reply.head.kind, reply.head.call_id), (Kind::REPLY, 7));
}

#[tokio::test]
async fn a_peer_flooding_past_its_credit_is_dropped_and_closed() {
    let (server, addr) = server(
        Config {
            credit: 1,
            ..Config::default()
        },
        4,
    )
    .await;
    let (framed, mut incoming) = raw(addr).await;
    send_hello(&framed, 0).await;
    assert_eq!(next(&mut incoming).await.unwrap().head.kind, Kind::HELLO);
    // Pause reading: the busy answers pile up unread.
    framed.pause_reading();
    let args = bincode_u64(60_000);
    let mut sent = 0u32;
    let ended = within(60, async {
        loop {
            let call_head = head(
                Kind::CALL,
                sent * 2 + 1,
                <test::Sleep as volley_rpc::Method>::ID,
                args.len(),
            );
            let call = framed.send(FRAME_TYPE, 0, &call_head, Bytes::from(args.clone()));
            match tokio::time::timeout(Duration::from_secs(5), call).await {
                Ok(Ok(())) => sent += 1,
                _ => break,
            }
            if sent > 2_000_000 {
                break;
            }
        }
    })
    .await;
    let () = ended;
    eprintln!("flood: {sent} calls sent before the server stopped taking them");
    framed.resume_reading();
    // The server dropped it (Flooded) and closed both ways: the stream ends.
    let end = within(30, async {
        loop {
            if let Err(e) = incoming.recv().await {
                return e;
            }
        }
    })
    .await;
    assert!(matches!(end, Error::Closed | Error::Io { .. }), "{end}");
    open_now(&server, 0).await;
    assert!(
        sent < 2_000_000,
        "the server took {sent} calls past its credit"
    );
}

/// Bincode 2's encoding of a `u64` argument, as the test service reads it.
fn bincode_u64(value: u64) -> Vec<u8> {
    let mut out = bytes::BytesMut::new();
    <volley_rpc::Bincode as volley_rpc::Codec>::encode(&value, &mut out).unwrap();
    out.to_vec()
}

#[tokio::test]
async fn the_bench_get_is_bounded_and_built_once() {
    use volley_rpc_bench::{self as service, Bench, BenchState, GetArgs, MAX_PAYLOAD, bench::Get};
    let (a, b) = volley_rpc::link::local::pair(64);
    let state = Arc::new(BenchState::default());
    let server = Endpoint::<Bench>::new(Config::default())
        .unwrap()
        .serve(service::router(state));
    let client = Endpoint::<Bench>::new(Config::default()).unwrap();
    let (server, client) = tokio::join!(server.connect(a), client.connect(b));
    let (_server, client) = (server.unwrap(), client.unwrap());
    // One 25-byte call asking for a GiB: refused, not built.
    let huge = client
        .call::<Get>(&GetArgs {
            index: 1,
            len: 1 << 30,
        })
        .await
        .unwrap_err();
    assert!(huge.to_string().contains("at most"), "{huge}");
    // The largest allowed comes back whole and right, from the one pattern.
    let reply = within(
        30,
        client.call_with::<Get>(
            &GetArgs {
                index: 7,
                len: MAX_PAYLOAD as u64,
            },
            Vec::new(),
            None,
        ),
    )
    .await
    .unwrap();
    let start = service::offset(7);
    let want = service::pattern(start + MAX_PAYLOAD);
    assert_eq!(reply.segments[0][..], want[start..]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_endpoints_max_message_sets_the_links_limit_both_ways() {
    within(60, async {
        // Larger than a link's default: the Config alone must carry it to both links.
        let config = Config {
            max_message: 24 << 20,
            ..Config::default()
        };
        let (_server, addr) = server(config, 4).await;
        let client = client(config, addr).await;
        let big: String = (0..20 << 20)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        let back = client.call::<test::Echo>(&big).await.unwrap();
        assert!(back == big, "20 MiB echoed back differently");

        // Smaller than a link's default: a frame past it ends the connection at the
        // framed layer, before its body is buffered.
        let small = Config {
            max_message: 64 << 10,
            ..Config::default()
        };
        let (server, addr) = server(small, 4).await;
        let (framed, mut incoming) = raw(addr).await;
        send_hello(&framed, 0).await;
        assert_eq!(next(&mut incoming).await.unwrap().head.kind, Kind::HELLO);
        let args = Bytes::from(vec![7u8; 1 << 20]);
        framed
            .send(FRAME_TYPE, 0, &head(Kind::CALL, 1, 1, args.len()), args)
            .await
            .unwrap();
        loop {
            match next(&mut incoming).await {
                Ok(message) => assert_ne!(message.head.kind, Kind::REPLY, "the call ran"),
                Err(e) => {
                    assert!(matches!(e, Error::Closed | Error::Io { .. }), "{e}");
                    break;
                }
            }
        }
        open_now(&server, 0).await;
    })
    .await;
}
