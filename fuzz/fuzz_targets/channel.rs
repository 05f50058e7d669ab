//! Feeds arbitrary datagrams to an established channel connection (half of them aimed at
//! its id, so they get past the header) and to a server endpoint: nothing may panic, and
//! what the connection holds for receiving stays within its window.
#![no_main]

use libfuzzer_sys::fuzz_target;
use volley_proto::channel::{ChannelEndpoint, Config, Connection, EndpointConfig};
use volley_proto::time::{Duration, Instant};
use volley_proto::channel::packet::parse;

fn config() -> Config {
    Config {
        max_message: 64 << 10,
        window: 128 << 10,
        send_buffer: 128 << 10,
        ..Config::default()
    }
}

fuzz_target!(|data: &[u8]| {
    // Whatever parses re-reads the same way.
    if let Ok((_, frames)) = parse(data) {
        for frame in frames {
            let _ = frame;
        }
    }
    let mut client = Connection::client(config(), 1, 2).expect("a valid config");
    let mut server = Connection::server(config(), 3).expect("a valid config");
    let mut buf = vec![0u8; 2048];
    let mut now = Instant::from_millis(1);
    for _ in 0..4 {
        while let Some(n) = client.poll_transmit(now, &mut buf) {
            server.handle_datagram(now, &buf[..n]);
        }
        while let Some(n) = server.poll_transmit(now, &mut buf) {
            client.handle_datagram(now, &buf[..n]);
        }
        now += Duration::from_micros(100);
    }
    let mut endpoint: ChannelEndpoint<u8> = ChannelEndpoint::new(
        EndpointConfig {
            connection: config(),
            accept: true,
            ..EndpointConfig::default()
        },
        5,
    ).expect("a valid config");
    for (i, chunk) in data.split(|&b| b == 0xfe).enumerate() {
        let mut d = chunk.to_vec();
        if i % 2 == 0 && d.len() >= 9 {
            d[0] = 3;
            d[1..9].copy_from_slice(&3u64.to_le_bytes());
        }
        server.handle_datagram(now, &d);
        endpoint.handle_datagram(now, i as u8, &d);
        now += Duration::from_micros(50);
        server.handle_timeout(now);
        while server.poll_transmit(now, &mut buf).is_some() {}
        while endpoint.poll_transmit(now, &mut buf).is_some() {}
        while server.poll_event().is_some() {}
        while endpoint.poll_event().is_some() {}
        assert!(server.receive_buffered() <= config().window);
        assert!(server.receive_memory() <= config().receive_memory);
    }
});
