//! Criterion micro-benchmark of the reliable UDP channel's state machine, no IO: the cost
//! of one datagram's whole trip through both ends (the sender queues, packs and sends it;
//! the receiver parses it, places its bytes and hands the messages over; the receiver's
//! acknowledgements go back and are applied). One 1 KiB message per datagram, and sixteen
//! 64-byte messages packed into one: `cargo bench -p volley-benches --bench channel`.

#![allow(missing_docs)]

use core::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use volley_proto::channel::{Config, Connection, Event};
use volley_proto::time::{Duration, Instant};

fn config() -> Config {
    Config {
        max_datagram: 1452,
        initial_window: 1000,
        ..Config::default()
    }
}

/// A connected pair, handshake done.
fn pair(now: &mut Instant) -> (Connection, Connection) {
    let mut client = Connection::client(config(), 1, 2).expect("a valid config");
    let mut server = Connection::server(config(), 3).expect("a valid config");
    let mut buf = vec![0u8; 2048];
    for _ in 0..4 {
        while let Some(n) = client.poll_transmit(*now, &mut buf) {
            server.handle_datagram(*now, &buf[..n]);
        }
        while let Some(n) = server.poll_transmit(*now, &mut buf) {
            client.handle_datagram(*now, &buf[..n]);
        }
        *now += Duration::from_micros(10);
    }
    while client.poll_event().is_some() {}
    while server.poll_event().is_some() {}
    assert!(client.is_established() && server.is_established());
    (client, server)
}

fn trip(c: &mut Criterion) {
    let mut group = c.benchmark_group("channel_datagram_trip");
    group.throughput(Throughput::Elements(1));
    for (name, count, size) in [
        ("1 KiB message", 1usize, 1024usize),
        ("16 x 64 B messages", 16, 64),
    ] {
        group.bench_function(name, |b| {
            let mut now = Instant::from_millis(1);
            let (mut client, mut server) = pair(&mut now);
            let mut buf = vec![0u8; 2048];
            let mut back = vec![0u8; 2048];
            let message = vec![7u8; size];
            b.iter(|| {
                now += Duration::from_micros(10);
                for _ in 0..count {
                    client.send(message.clone()).expect("room");
                }
                let mut datagrams = 0;
                while let Some(n) = client.poll_transmit(now, &mut buf) {
                    server.handle_datagram(now, black_box(&buf[..n]));
                    datagrams += 1;
                }
                assert_eq!(datagrams, 1, "one datagram per turn");
                let mut got = 0;
                while let Some(e) = server.poll_event() {
                    if let Event::Message(m) = e {
                        got += black_box(m).len();
                    }
                }
                assert_eq!(got, count * size);
                while let Some(n) = server.poll_transmit(now, &mut back) {
                    client.handle_datagram(now, &back[..n]);
                }
            });
        });
    }
    group.finish();
}

criterion_group!(benches, trip);
criterion_main!(benches);
