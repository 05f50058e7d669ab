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
fn forge(ty: PacketType, dcid: u64, pn: u32, frames: &[Frame<'_>]) -> Vec<u8> {
    let mut buf = vec![0u8; 1500];
    let header = Header {
        ty,
        dcid,
        scid: (ty != PacketType::DATA).then_some(CLIENT_CID),
        pn,
    };
    let mut n = wire::write_header(&header, &mut buf).unwrap();
    for frame in frames {
        n += wire::write_frame(frame, &mut buf[n..]).unwrap();
    }
    if ty == PacketType::INITIAL {
        n = n.max(MIN_DATAGRAM);
    }
    buf.truncate(n);
    buf
}

/// Empty messages at stream positions `first..first + count`, one frame each, as many as
/// fit a datagram.
fn empty_messages(first: u64, count: u64) -> Vec<Frame<'static>> {
    (first..first + count)
        .map(|start| Frame::Data {
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
    let mut client = Connection::client(config, CLIENT_CID, 0x2222);
    let mut server = Connection::server(config, SERVER_CID);
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
    let mut server = Connection::server(config, SERVER_CID);
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
    assert!(server.incoming.is_empty());
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
            Frame::Close { code, reason } => Some((code, reason.to_vec())),
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
        let frames: Vec<Frame<'_>> = (0..50)
            .map(|i| Frame::Data {
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
            let m = &server.incoming[&start];
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
    let first = Frame::Data {
        start: 5,
        total: 3,
        offset: 0,
        data: b"abc",
    };
    let second = Frame::Data {
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
    let mut endpoint = Endpoint::new(
        EndpointConfig {
            connection: config,
            accept: true,
            max_receive_memory: 64 * 1024,
            ..EndpointConfig::default()
        },
        7,
    );
    let mut client = Connection::client(config, CLIENT_CID, 0x2222);
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
