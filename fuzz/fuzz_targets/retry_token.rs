//! The channel's retry tokens: a server that retries every initial mints a token for the
//! client's address; the client's initial that carries it is then mutated by the input
//! and sent from another address, beside the input's own datagrams. A token is bound to
//! the address it was minted for, so no connection may ever be made from there, and
//! nothing may panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use volley_proto::channel::{ChannelEndpoint, Config, EndpointConfig};
use volley_proto::time::{Duration, Instant};

/// The client's address, which its token is minted for.
const CLIENT: u8 = 1;
/// The server's.
const SERVER: u8 = 2;
/// Where the mutated datagrams come from.
const OTHER: u8 = 3;

fn server() -> ChannelEndpoint<u8> {
    let mut server = ChannelEndpoint::new(
        EndpointConfig {
            connection: Config::default(),
            accept: true,
            // Every initial without a token gets a retry.
            retry_above: 0,
            ..EndpointConfig::default()
        },
        9,
    )
    .expect("a valid config");
    server.rotate_token_key([0x0123_4567_89ab_cdef, 0xfedc_ba98_7654_3210]);
    server
}

fuzz_target!(|data: &[u8]| {
    let mut server = server();
    let mut client: ChannelEndpoint<u8> =
        ChannelEndpoint::new(EndpointConfig::default(), 4).expect("a valid config");
    client.connect(SERVER).expect("room for one connection");
    let mut buf = vec![0u8; 2048];
    let mut now = Instant::from_millis(1);
    // The handshake up to the client's initial with its token in it, kept aside.
    let mut tokened = Vec::new();
    for round in 0..4 {
        while let Some((_, n)) = client.poll_transmit(now, &mut buf) {
            if round > 0 && tokened.is_empty() {
                tokened = buf[..n].to_vec();
            }
            server.handle_datagram(now, CLIENT, &buf[..n]);
        }
        while let Some((_, n)) = server.poll_transmit(now, &mut buf) {
            client.handle_datagram(now, SERVER, &buf[..n]);
        }
        now += Duration::from_micros(100);
    }
    // A fresh server with the same key, which has seen nothing from OTHER.
    let mut server = self::server();
    let mut mutated = tokened.clone();
    for (i, b) in data.iter().take(mutated.len()).enumerate() {
        mutated[i] ^= b;
    }
    server.handle_datagram(now, OTHER, &mutated);
    for chunk in data.split(|&b| b == 0xfe) {
        server.handle_datagram(now, OTHER, chunk);
        now += Duration::from_micros(50);
        server.handle_timeout(now);
        while server.poll_transmit(now, &mut buf).is_some() {}
        while server.poll_event().is_some() {}
    }
    assert_eq!(server.len(), 0, "a connection from an address no token was minted for");
});
