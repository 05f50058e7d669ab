//! The TCP relay: bytes arrive intact and in order, no sooner than the delay allows, no
//! faster than the rate cap allows, and a close passes through.

use core::num::NonZeroU64;
use core::time::Duration;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Instant;

use volley_netsim::tcp::{TcpLinkConfig, TcpLinkSim};

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 4099) as u8).collect()
}

#[test]
fn bytes_arrive_intact_delayed_and_rate_capped() {
    let sink = TcpListener::bind("127.0.0.1:0").unwrap();
    let upstream = sink.local_addr().unwrap();
    let len = 4 << 20;
    let receiver = std::thread::spawn(move || {
        let (mut s, _) = sink.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).unwrap();
        // Answer with a short reply so the sender sees the other direction work too.
        s.write_all(b"done").unwrap();
        got
    });
    let config = TcpLinkConfig {
        delay: Duration::from_millis(2),
        jitter: Duration::from_millis(1),
        rate_bps: NonZeroU64::new(200_000_000),
        seed: 3,
        ..TcpLinkConfig::default()
    };
    let link = TcpLinkSim::start("127.0.0.1:0".parse().unwrap(), upstream, config).unwrap();
    let mut client = TcpStream::connect(link.local_addr()).unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let data = pattern(len);
    let start = Instant::now();
    client.write_all(&data).unwrap();
    client.shutdown(std::net::Shutdown::Write).unwrap();
    let mut reply = Vec::new();
    client.read_to_end(&mut reply).unwrap();
    let took = start.elapsed();
    let got = receiver.join().unwrap();
    assert!(got == data, "every byte, in order");
    assert_eq!(reply, b"done");
    // 4 MiB at 200 Mbit/s is 168 ms on the wire, plus the delay each way.
    assert!(took >= Duration::from_millis(168 + 4), "{took:?}");
    let stats = link.stats();
    assert_eq!(stats.connections, 1);
    assert_eq!(stats.bytes_up, len as u64);
    assert_eq!(stats.bytes_down, 4);
}

#[test]
fn a_round_trip_takes_twice_the_delay() {
    let echo = TcpListener::bind("127.0.0.1:0").unwrap();
    let upstream = echo.local_addr().unwrap();
    std::thread::spawn(move || {
        let (mut s, _) = echo.accept().unwrap();
        let mut buf = [0u8; 1];
        while s.read_exact(&mut buf).is_ok() {
            if s.write_all(&buf).is_err() {
                return;
            }
        }
    });
    let config = TcpLinkConfig {
        delay: Duration::from_micros(500),
        ..TcpLinkConfig::default()
    };
    let link = TcpLinkSim::start("127.0.0.1:0".parse().unwrap(), upstream, config).unwrap();
    let mut client = TcpStream::connect(link.local_addr()).unwrap();
    client.set_nodelay(true).unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut trips = Vec::with_capacity(50);
    for i in 0..50u8 {
        let start = Instant::now();
        client.write_all(&[i]).unwrap();
        let mut buf = [0u8; 1];
        client.read_exact(&mut buf).unwrap();
        assert_eq!(buf[0], i);
        trips.push(start.elapsed());
    }
    // Every trip pays the delay both ways; the median, not the mean, says it is paid only
    // once each way (a loaded machine stalls some trips, never shortens one).
    trips.sort();
    assert!(trips[0] >= Duration::from_millis(1), "{trips:?}");
    let median = trips[trips.len() / 2];
    assert!(median < Duration::from_millis(5), "{trips:?}");
}

#[test]
fn settings_out_of_range_are_refused() {
    let bad = [
        TcpLinkConfig {
            max_connections: 0,
            ..TcpLinkConfig::default()
        },
        TcpLinkConfig {
            delay: Duration::from_secs(7200),
            ..TcpLinkConfig::default()
        },
    ];
    for config in bad {
        let started = TcpLinkSim::start(
            "127.0.0.1:0".parse().unwrap(),
            "127.0.0.1:9".parse().unwrap(),
            config.clone(),
        );
        assert!(started.is_err(), "{config:?} was taken");
    }
}
