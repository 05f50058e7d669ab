//! A hostile peer's datagrams, forged by hand: what a server holds for them is counted
//! and bounded, and unproven addresses get no state at all.

extern crate std;

use alloc::vec;
use alloc::vec::Vec;

use super::*;

const CLIENT_CID: u64 = 0x1111;
const SERVER_CID: u64 = 0x3333;

/// A datagram of `ty` to `dcid` with packet number `pn`, carrying `frames`, padded to
/// the smallest datagram if it is an initial (as the endpoint requires).
fn forge(ty: PacketType, dcid: u64, pn: u32, frames: &[PacketFrame<'_>]) -> Vec<u8> {
    let mut buf = vec![0u8; 1500];
    let header = PacketHeader {
        ty,
        dcid,
        scid: (ty != PacketType::DATA).then_some(CLIENT_CID),
        pn,
    };
    let mut n = wire::emit_header(&header, &mut buf).unwrap();
    for frame in frames {
        n += wire::emit_frame(frame, &mut buf[n..]).unwrap();
    }
    if ty == PacketType::INITIAL {
        n = n.max(MIN_DATAGRAM);
    }
    buf.truncate(n);
    buf
}

/// Empty messages at stream positions `first..first + count`, one frame each, as many as
/// fit a datagram.
fn empty_messages(first: u64, count: u64) -> Vec<PacketFrame<'static>> {
    (first..first + count)
        .map(|start| PacketFrame::Data {
            start,
            total: 0,
            offset: 0,
            data: &[],
        })
        .collect()
}

/// A server connection that has answered a real client's initial and whose address is
/// proven by a data packet, plus the client (for its packet numbers to stay apart).
fn proven_server(config: Config) -> Connection {
    let mut client = Connection::client(config, CLIENT_CID, 0x2222).unwrap();
    let mut server = Connection::server(config, SERVER_CID).unwrap();
    let mut buf = vec![0u8; 1500];
    let now = Instant::from_millis(1);
    client.send(b"hello".to_vec()).unwrap();
    for _ in 0..4 {
        while let Some(n) = client.poll_transmit(now, &mut buf) {
            server.handle_datagram(now, &buf[..n]);
        }
        while let Some(n) = server.poll_transmit(now, &mut buf) {
            client.handle_datagram(now, &buf[..n]);
        }
    }
    assert!(server.is_validated() && server.is_established());
    assert_eq!(server.poll_event(), Some(Event::Connected));
    assert_eq!(server.poll_event(), Some(Event::Message(b"hello".to_vec())));
    server
}

#[test]
fn data_in_unproven_initials_makes_no_state() {
    // The attack: initials (never reading a byte of the answers, so from any source)
    // full of empty messages at new positions; each used to cost a map entry and a
    // range list (189 bytes of RSS per 19 wire bytes).
    let config = Config::default();
    let mut server = Connection::server(config, SERVER_CID).unwrap();
    let now = Instant::from_millis(1);
    let mut sent = 0u64;
    let mut start = 1;
    for pn in 0..2_000u32 {
        let frames = empty_messages(start, 60);
        start += 60;
        let datagram = forge(PacketType::INITIAL, 0x2222, pn, &frames);
        sent += datagram.len() as u64;
        server.handle_datagram(now, &datagram);
    }
    assert_eq!(server.receive_memory(), 0, "{sent} wire bytes of initials");
    assert!(server.receive.incoming.is_empty());
    assert!(!server.is_validated());
    assert!(
        server.poll_event().is_none(),
        "no message from an unproven peer"
    );
}

#[test]
fn empty_messages_out_of_order_are_counted_and_bounded() {
    let config = Config {
        window: 1 << 20,
        receive_memory: (1 << 20) + (1 << 18),
        max_message: 1 << 16,
        ..Config::default()
    };
    let mut server = proven_server(config);
    let now = Instant::from_millis(2);
    let mut buf = vec![0u8; 1500];
    let mut peak = 0;
    // Position `deliver_next` is skipped, so nothing is ever whole in order: every
    // empty message waits for reassembly.
    let mut start = 10;
    let mut pn = 1_000_000;
    let mut datagrams = 0;
    while !server.is_closed() && datagrams < 100_000 {
        let frames = empty_messages(start, 60);
        start += 60;
        server.handle_datagram(now, &forge(PacketType::DATA, SERVER_CID, pn, &frames));
        pn += 1;
        datagrams += 1;
        peak = peak.max(server.receive_memory());
        assert!(server.receive_memory() <= config.receive_memory);
    }
    assert!(server.is_closed(), "still open after {datagrams} datagrams");
    // It took about the budget's worth of messages, not the window's million positions.
    let messages = (datagrams - 1) * 60;
    assert!(
        messages < config.receive_memory / MESSAGE_COST + 60,
        "{messages} messages held"
    );
    assert!(peak > config.receive_memory / 2, "peak {peak}");
    // The peer is told why, in the close frame.
    let n = server.poll_transmit(now, &mut buf).expect("a close frame");
    let (_, frames) = wire::parse(&buf[..n]).unwrap();
    let reason = frames
        .flatten()
        .find_map(|f| match f {
            PacketFrame::Close { code, reason } => Some((code, reason.to_vec())),
            _ => None,
        })
        .expect("a close frame");
    assert_eq!(reason.0, CLOSE_PROTOCOL);
    let text = std::string::String::from_utf8(reason.1).unwrap();
    assert!(
        text.contains("memory held for the peer's messages"),
        "{text}"
    );
    assert_eq!(server.receive_memory(), 0, "all freed once closed");
}

#[test]
fn scattered_fragments_pay_for_their_ranges() {
    // One large message sent as one-byte fragments at every other offset: each leaves a
    // range of its own.
    let config = Config {
        window: 1 << 20,
        receive_memory: (1 << 20) + (1 << 17),
        max_message: 1 << 20,
        ..Config::default()
    };
    let mut server = proven_server(config);
    let now = Instant::from_millis(2);
    let total = 1 << 20;
    let start = 5; // after "hello"
    let byte = [7u8];
    let mut pn = 1_000_000;
    let mut offset = 0u32;
    while !server.is_closed() && offset < total {
        let frames: Vec<PacketFrame<'_>> = (0..50)
            .map(|i| PacketFrame::Data {
                start,
                total,
                offset: offset + 2 * i,
                data: &byte,
            })
            .collect();
        offset += 100;
        server.handle_datagram(now, &forge(PacketType::DATA, SERVER_CID, pn, &frames));
        pn += 1;
        assert!(server.receive_memory() <= config.receive_memory);
        if !server.is_closed() {
            let m = &server.receive.incoming[&start];
            assert_eq!(
                server.receive_memory(),
                u64::from(total) + MESSAGE_COST + RANGE_COST * m.received.len() as u64
            );
        }
    }
    // 128 KiB of slack pays for 8192 ranges: the peer is cut off there.
    assert!(server.is_closed());
    assert!(
        offset / 2 < 8192 + 100,
        "closed after {} ranges",
        offset / 2
    );
}

#[test]
fn receive_memory_follows_messages_through_to_the_application() {
    let config = Config::default();
    let mut server = proven_server(config);
    let now = Instant::from_millis(2);
    // "hello" took positions 0..5. Out of order: the second message first, then the first; both whole.
    let first = PacketFrame::Data {
        start: 5,
        total: 3,
        offset: 0,
        data: b"abc",
    };
    let second = PacketFrame::Data {
        start: 8,
        total: 2,
        offset: 0,
        data: b"de",
    };
    server.handle_datagram(now, &forge(PacketType::DATA, SERVER_CID, 900, &[second]));
    assert_eq!(server.receive_memory(), 2 + MESSAGE_COST + RANGE_COST);
    server.handle_datagram(now, &forge(PacketType::DATA, SERVER_CID, 901, &[first]));
    assert_eq!(server.receive_memory(), 3 + 2 + 2 * MESSAGE_COST);
    assert_eq!(server.poll_event(), Some(Event::Message(b"abc".to_vec())));
    assert_eq!(server.receive_memory(), 2 + MESSAGE_COST);
    assert_eq!(server.poll_event(), Some(Event::Message(b"de".to_vec())));
    assert_eq!(server.receive_memory(), 0);
}

#[test]
fn the_endpoint_bounds_all_peers_together() {
    let config = Config::default();
    let mut endpoint = ChannelEndpoint::new(
        EndpointConfig {
            connection: config,
            accept: true,
            max_receive_memory: 64 * 1024,
            ..EndpointConfig::default()
        },
        7,
    )
    .unwrap();
    let mut client = Connection::client(config, CLIENT_CID, 0x2222).unwrap();
    // Each peer within its own 48 MiB, but the application takes nothing: the messages
    // wait, counted, until the sum passes the endpoint's budget.
    for _ in 0..20 {
        client.send(vec![1u8; 10_000]).unwrap();
    }
    let mut buf = vec![0u8; 1500];
    let mut now = Instant::from_millis(1);
    for _ in 0..200 {
        while let Some(n) = client.poll_transmit(now, &mut buf) {
            endpoint.handle_datagram(now, 1u8, &buf[..n]);
        }
        while let Some((_, n)) = endpoint.poll_transmit(now, &mut buf) {
            client.handle_datagram(now, &buf[..n]);
        }
        assert!(endpoint.receive_memory() <= 64 * 1024 + 10_000 + 2 * MESSAGE_COST);
        if client.is_closed() {
            break;
        }
        now += Duration::from_millis(1);
    }
    assert_eq!(endpoint.stats().memory_closed, 1);
    let closed = core::iter::from_fn(|| client.poll_event())
        .find_map(|e| match e {
            Event::Closed(why) => Some(why),
            _ => None,
        })
        .expect("the client hears the connection end");
    assert_eq!(
        closed,
        Closed::Peer {
            code: CLOSE_PROTOCOL,
            reason: b"the server's receive memory is exhausted".to_vec()
        }
    );
}

/// A server endpoint with a token key, so it answers with retries past `retry_above`.
fn server_with_key(config: EndpointConfig) -> ChannelEndpoint<u32> {
    let mut server = ChannelEndpoint::new(
        EndpointConfig {
            accept: true,
            ..config
        },
        7,
    )
    .unwrap();
    server.rotate_token_key([0x0123_4567, 0x89ab_cdef]);
    server
}

/// Every datagram the server has to send now, as (destination, bytes) pairs.
fn sent_by(server: &mut ChannelEndpoint<u32>, now: Instant) -> Vec<(u32, Vec<u8>)> {
    let mut buf = vec![0u8; 1500];
    core::iter::from_fn(|| {
        server
            .poll_transmit(now, &mut buf)
            .map(|(a, n)| (a, buf[..n].to_vec()))
    })
    .collect()
}

#[test]
fn half_open_setups_cannot_lock_clients_out() {
    let config = EndpointConfig {
        max_half_open: 64,
        retry_above: 16,
        ..EndpointConfig::default()
    };
    let mut server = server_with_key(config);
    let now = Instant::from_millis(1);
    // 80 padded initials from 80 addresses that will never answer: the attack that held
    // every half-open slot for the idle timeout.
    for addr in 1000..1080u32 {
        let initial = forge(PacketType::INITIAL, 0x5000 + u64::from(addr), 0, &[]);
        server.handle_datagram(now, addr, &initial);
    }
    let out = sent_by(&mut server, now);
    assert_eq!(server.half_open(), 16, "no more than retry_above held");
    assert_eq!(server.stats().retries, 64);
    let retries: Vec<_> = out
        .iter()
        .filter(|(_, d)| d[0] == PacketType::RETRY.0)
        .collect();
    assert_eq!(retries.len(), 64);
    for (addr, retry) in &retries {
        // Stateless and small: far under three times the initial.
        assert!(retry.len() <= wire::LONG_HEADER + 2 + TOKEN_LEN);
        let (header, mut frames) = wire::parse(retry).unwrap();
        assert_eq!(header.dcid, CLIENT_CID);
        assert_eq!(header.scid, Some(0x5000 + u64::from(*addr)));
        assert!(matches!(frames.next(), Some(Ok(PacketFrame::Token(t))) if t.len() == TOKEN_LEN));
    }
    // A real client still gets in, one round trip later, its address proven.
    let mut client: ChannelEndpoint<u32> =
        ChannelEndpoint::new(EndpointConfig::default(), 99).unwrap();
    let handle = client.connect(1).unwrap();
    client.send(handle, b"hello".to_vec()).unwrap();
    let mut buf = vec![0u8; 1500];
    let mut got = None;
    for _ in 0..10 {
        while let Some((_, n)) = client.poll_transmit(now, &mut buf) {
            server.handle_datagram(now, 2, &buf[..n]);
        }
        for (addr, d) in sent_by(&mut server, now) {
            if addr == 2 {
                client.handle_datagram(now, 1, &d);
            }
        }
        while let Some((h, event)) = server.poll_event() {
            if let Event::Message(m) = event {
                got = Some((h, m));
            }
        }
    }
    let (server_handle, message) = got.expect("the real client's message arrived");
    assert_eq!(message, b"hello");
    assert_eq!(client.connection(handle).unwrap().stats().retries, 1);
    assert!(client.connection(handle).unwrap().is_established());
    assert_eq!(server.stats().validated_by_token, 1);
    assert!(server.connection(server_handle).unwrap().is_validated());
    assert_eq!(server.half_open(), 16);
}

#[test]
fn a_token_proves_only_its_own_address_for_its_lifetime() {
    let mut server = server_with_key(EndpointConfig {
        retry_above: 0,
        ..EndpointConfig::default()
    });
    let now = Instant::from_millis(1);
    server.handle_datagram(now, 1000, &forge(PacketType::INITIAL, 0x5000, 0, &[]));
    let out = sent_by(&mut server, now);
    assert_eq!(
        out.len(),
        1,
        "retry_above 0: every tokenless initial gets a retry"
    );
    assert_eq!(server.len(), 0, "and no state");
    let (_, mut frames) = wire::parse(&out[0].1).unwrap();
    let Some(Ok(PacketFrame::Token(token))) = frames.next() else {
        panic!("a token frame")
    };
    let with_token = forge(PacketType::INITIAL, 0x5000, 1, &[PacketFrame::Token(token)]);
    // From another address, or too late: dropped, counted, no connection, no answer.
    server.handle_datagram(now, 1001, &with_token);
    let late = now + TOKEN_LIFETIME + Duration::from_millis(1);
    server.handle_datagram(late, 1000, &with_token);
    let mut forged = token.to_vec();
    forged[9] ^= 0x40;
    server.handle_datagram(
        now,
        1000,
        &forge(
            PacketType::INITIAL,
            0x5000,
            1,
            &[PacketFrame::Token(&forged)],
        ),
    );
    assert_eq!(server.stats().bad_tokens, 3);
    assert_eq!(server.len(), 0);
    assert!(sent_by(&mut server, late).is_empty());
    // From its own address in time: a connection, proven at once.
    server.handle_datagram(now, 1000, &with_token);
    assert_eq!(server.len(), 1);
    assert_eq!(server.half_open(), 0);
    assert_eq!(server.stats().validated_by_token, 1);
}

#[test]
fn without_a_key_the_half_open_cap_refuses() {
    let mut server = ChannelEndpoint::new(
        EndpointConfig {
            accept: true,
            max_half_open: 4,
            retry_above: 2,
            ..EndpointConfig::default()
        },
        7,
    )
    .unwrap();
    let now = Instant::from_millis(1);
    for addr in 0..6u32 {
        let initial = forge(PacketType::INITIAL, 0x5000 + u64::from(addr), 0, &[]);
        server.handle_datagram(now, addr, &initial);
    }
    assert_eq!(server.half_open(), 4);
    assert_eq!(server.stats().refused, 2);
    assert_eq!(server.stats().retries, 0);
}

#[test]
fn a_client_answers_one_retry_only() {
    let config = Config::default();
    let mut client = Connection::client(config, CLIENT_CID, 0x2222).unwrap();
    let mut buf = vec![0u8; 1500];
    let now = Instant::from_millis(1);
    assert!(client.poll_transmit(now, &mut buf).is_some());
    assert!(client.poll_transmit(now, &mut buf).is_none());
    let retry = |token: &[u8], echo: u64| {
        let mut buf = vec![0u8; 64];
        let header = PacketHeader {
            ty: PacketType::RETRY,
            dcid: CLIENT_CID,
            scid: Some(echo),
            pn: 0,
        };
        let mut n = wire::emit_header(&header, &mut buf).unwrap();
        n += wire::emit_frame(&PacketFrame::Token(token), &mut buf[n..]).unwrap();
        buf.truncate(n);
        buf
    };
    // A retry that does not echo the id our initial went to is not for us.
    client.handle_datagram(now, &retry(b"first", 0x9999));
    assert_eq!(client.stats().retries, 0);
    client.handle_datagram(now, &retry(b"first", 0x2222));
    assert_eq!(client.stats().retries, 1);
    let n = client
        .poll_transmit(now, &mut buf)
        .expect("the initial again, at once");
    let (header, frames) = wire::parse(&buf[..n]).unwrap();
    assert_eq!(header.ty, PacketType::INITIAL);
    assert!(n >= MIN_DATAGRAM);
    assert!(frames.flatten().any(|f| f == PacketFrame::Token(b"first")));
    client.handle_datagram(now, &retry(b"second", 0x2222));
    assert_eq!(client.stats().retries, 1, "a second retry is ignored");
}
