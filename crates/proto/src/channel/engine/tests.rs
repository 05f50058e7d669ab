//! Deterministic simulation: two connections, a fake clock, and a seeded link that loses,
//! duplicates, delays and reorders datagrams. Every message is checked byte for byte and
//! in order; memory is checked against its bounds at every step.

extern crate std;

use alloc::collections::{BTreeMap, BinaryHeap};
use alloc::vec;
use alloc::vec::Vec;
use core::cmp::Reverse;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;
use crate::simlink::{LinkSpec, SimLink};

/// A link with `delay` each way, `loss` and `duplicate` chances, and every datagram
/// delayed by up to `jitter` more (which reorders them).
fn lossy(loss: f64, duplicate: f64, delay: Duration, jitter: Duration) -> LinkSpec {
    LinkSpec {
        loss,
        duplicate,
        delay,
        jitter,
        reorder: 1.0,
    }
}

fn perfect() -> LinkSpec {
    LinkSpec::perfect(Duration::from_micros(500))
}

struct Sim {
    link: SimLink<bool>,
    now: Instant,
    client: Connection,
    server: Connection,
    /// Messages each side has received, in order: (to client, to server).
    got: (Vec<Vec<u8>>, Vec<Vec<u8>>),
    closed: (Option<Closed>, Option<Closed>),
    /// Whether the server takes its events (a slow receiver does not, for a while).
    server_reads: bool,
    /// Whether the server is there at all (a vanished peer is not).
    server_alive: bool,
    /// The largest bytes each end held for receiving, to check against the window.
    peak_buffered: u64,
    buf: Vec<u8>,
    /// The next this many datagrams to the server are lost, whatever the link's odds.
    drop_to_server: u32,
}

impl Sim {
    fn new(seed: u64, spec: LinkSpec, config: Config) -> Self {
        Self {
            link: SimLink::new(seed, spec),
            now: Instant::from_millis(1),
            client: Connection::client(config, 0x1111, 0x2222).unwrap(),
            server: Connection::server(config, 0x3333).unwrap(),
            got: (Vec::new(), Vec::new()),
            closed: (None, None),
            server_reads: true,
            server_alive: true,
            peak_buffered: 0,
            buf: vec![0; 65536],
            drop_to_server: 0,
        }
    }

    /// Puts a datagram on the link: maybe lost, maybe twice, delayed with jitter.
    fn launch(&mut self, to_server: bool, datagram: Vec<u8>) {
        if to_server && self.drop_to_server > 0 {
            self.drop_to_server -= 1;
            return;
        }
        self.link.send(self.now, to_server, &datagram);
    }

    /// Sends what both ends have to send.
    fn transmit(&mut self) {
        while let Some(n) = self.client.poll_transmit(self.now, &mut self.buf) {
            let d = self.buf[..n].to_vec();
            self.launch(true, d);
        }
        if self.server_alive {
            while let Some(n) = self.server.poll_transmit(self.now, &mut self.buf) {
                let d = self.buf[..n].to_vec();
                self.launch(false, d);
            }
        }
    }

    fn collect(&mut self) {
        while let Some(e) = self.client.poll_event() {
            match e {
                Event::Message(m) => self.got.0.push(m),
                Event::Closed(why) => self.closed.0 = Some(why),
                Event::Connected => {}
            }
        }
        let buffered = self.server.receive_buffered();
        self.peak_buffered = self.peak_buffered.max(buffered);
        if self.server_alive && self.server_reads {
            while let Some(e) = self.server.poll_event() {
                match e {
                    Event::Message(m) => self.got.1.push(m),
                    Event::Closed(why) => self.closed.1 = Some(why),
                    Event::Connected => {}
                }
            }
        }
    }

    /// Runs until `done` holds or `limit` of simulated time passes; returns whether `done`.
    fn run(&mut self, limit: Duration, mut done: impl FnMut(&Self) -> bool) -> bool {
        let end = self.now + limit;
        let mut steps = 0u64;
        while self.now < end {
            steps += 1;
            assert!(steps < 5_000_000, "the simulation does not settle");
            self.transmit();
            self.collect();
            if done(self) {
                return true;
            }
            // The next thing to happen: a landing or a timer.
            let mut next = end;
            if let Some(at) = self.link.next_at() {
                next = next.min(at);
            }
            if let Some(t) = self.client.poll_timeout() {
                next = next.min(t);
            }
            if self.server_alive {
                if let Some(t) = self.server.poll_timeout() {
                    next = next.min(t);
                }
            }
            self.now = next.max(self.now);
            while let Some((to_server, d)) = self.link.pop_due(self.now) {
                if to_server {
                    if self.server_alive {
                        self.server.handle_datagram(self.now, &d);
                    }
                } else {
                    self.client.handle_datagram(self.now, &d);
                }
            }
            self.client.handle_timeout(self.now);
            if self.server_alive {
                self.server.handle_timeout(self.now);
            }
            // Time moves on even when only a timer fired at `now`.
            if self.link.next_at().is_none_or(|at| at > self.now) {
                self.now += Duration::from_micros(1);
            }
        }
        done(self)
    }
}

/// Messages of random sizes with contents that depend on their index.
fn messages(rng: &mut StdRng, count: usize, max: usize) -> Vec<Vec<u8>> {
    (0..count)
        .map(|i| {
            let len = if i % 7 == 3 {
                0
            } else {
                rng.random_range(0..=max)
            };
            (0..len).map(|j| (i * 31 + j * 7 + j / 251) as u8).collect()
        })
        .collect()
}

/// A message cut into pieces of 0, 1, 13, 0, 1500, 4000 and 65 536 bytes, over and over
/// (empty pieces, and boundaries inside datagrams and fragments).
struct Cut(Vec<Vec<u8>>);

impl Cut {
    fn new(message: &[u8]) -> Self {
        let sizes = [0, 1, 13, 0, 1500, 4000, 65_536];
        let mut pieces = Vec::new();
        let mut rest = message;
        for size in sizes.iter().cycle() {
            if rest.is_empty() {
                break;
            }
            let (piece, tail) = rest.split_at((*size).min(rest.len()));
            pieces.push(piece.to_vec());
            rest = tail;
        }
        Self(pieces)
    }
}

impl Pieces for Cut {
    fn total_len(&self) -> usize {
        self.0.iter().map(Vec::len).sum()
    }

    fn chunk(&self, offset: usize) -> &[u8] {
        chunk_in(self.0.iter().map(Vec::as_slice), offset)
    }
}

/// Queues `messages` on the client as the send buffer allows, as a driver would; as
/// [`Cut`] pieces if `pieces`.
fn feed(sim: &mut Sim, pending: &mut VecDeque<Vec<u8>>, pieces: bool) {
    while let Some(m) = pending.pop_front() {
        let payload = if pieces {
            Payload::pieces(Cut::new(&m))
        } else {
            Payload::from(m.clone())
        };
        match sim.client.send(payload) {
            Ok(()) => {}
            Err(SendError::Full) => {
                pending.push_front(m);
                return;
            }
            Err(e) => panic!("send refused: {e:?}"),
        }
    }
}

fn transfer(seed: u64, spec: LinkSpec, config: Config, count: usize, max: usize) -> Sim {
    transfer_as(seed, spec, config, count, max, false)
}

fn transfer_as(
    seed: u64,
    spec: LinkSpec,
    config: Config,
    count: usize,
    max: usize,
    pieces: bool,
) -> Sim {
    let mut rng = StdRng::seed_from_u64(seed ^ 0xabcdef);
    let want = messages(&mut rng, count, max);
    let mut sim = Sim::new(seed, spec, config);
    let mut pending: VecDeque<Vec<u8>> = want.iter().cloned().collect();
    let total: usize = want.len();
    let mut rounds = 0;
    while sim.got.1.len() < total {
        rounds += 1;
        assert!(rounds < 100_000, "no progress");
        feed(&mut sim, &mut pending, pieces);
        let before = sim.got.1.len();
        let finished = sim.run(Duration::from_millis(50), |s| {
            s.got.1.len() > before && !pending.is_empty() || s.got.1.len() == total
        });
        assert!(
            sim.closed.0.is_none() && sim.closed.1.is_none(),
            "closed: {:?} (seed {seed})",
            sim.closed
        );
        assert!(
            finished || sim.now < Instant::from_millis(60_000),
            "stalled at {} of {total} messages (seed {seed}, {:?})",
            sim.got.1.len(),
            sim.client.stats()
        );
        assert!(sim.client.queued() <= config.send_buffer);
        assert!(
            sim.peak_buffered <= config.window,
            "receiver held more than its window"
        );
    }
    for (i, (got, want)) in sim.got.1.iter().zip(&want).enumerate() {
        assert_eq!(got.len(), want.len(), "message {i} length (seed {seed})");
        assert!(got == want, "message {i} differs (seed {seed})");
    }
    sim
}

fn small_config() -> Config {
    Config {
        max_message: 1 << 20,
        window: 2 << 20,
        send_buffer: 2 << 20,
        ..Config::default()
    }
}

#[test]
fn a_perfect_link_carries_everything_in_order() {
    let sim = transfer(1, perfect(), small_config(), 300, 20_000);
    assert_eq!(sim.client.stats().lost, 0);
    assert_eq!(sim.client.stats().timeouts, 0);
    assert_eq!(sim.client.stats().probes, 0, "a probe on a perfect link");
}

#[test]
fn small_messages_share_datagrams() {
    let config = small_config();
    let mut sim = Sim::new(2, perfect(), config);
    sim.run(Duration::from_millis(20), |s| s.client.is_established());
    let sent_before = sim.client.stats().sent;
    for i in 0..100u8 {
        sim.client.send(vec![i; 10]).unwrap();
    }
    sim.run(Duration::from_secs(1), |s| s.got.1.len() == 100);
    assert_eq!(sim.got.1.len(), 100);
    let datagrams = sim.client.stats().sent - sent_before;
    assert!(
        datagrams <= 5,
        "100 ten-byte messages took {datagrams} datagrams"
    );
}

#[test]
fn a_lost_last_datagram_is_probed_for_before_the_timeout() {
    let config = small_config();
    let mut sim = Sim::new(3, perfect(), config);
    // Warm up: RTT samples on a 1 ms round trip.
    for i in 0..20u8 {
        sim.client.send(vec![i; 100]).unwrap();
        assert!(sim.run(Duration::from_secs(1), |s| s.got.1.len()
            == usize::from(i) + 1));
    }
    assert!(sim.run(Duration::from_secs(1), |s| s.client.queued() == 0));
    let window = sim.client.congestion_window();
    // The next datagram, carrying the only message in flight, is lost.
    sim.drop_to_server = 1;
    let sent_at = sim.now;
    sim.client.send(b"last".to_vec()).unwrap();
    assert!(sim.run(Duration::from_secs(1), |s| s.got.1.len() == 21));
    let took = sim.now.saturating_duration_since(sent_at);
    assert_eq!(sim.got.1[20], b"last");
    let stats = sim.client.stats();
    assert_eq!((stats.probes, stats.timeouts), (1, 0), "{stats:?}");
    // The timeout is at least `rto.min` (5 ms): the probe came well before it.
    assert!(
        took < config.rto.min,
        "the lost message took {took:?}, not less than the {:?} timeout floor",
        config.rto.min
    );
    assert!(
        sim.client.congestion_window() >= window / 2,
        "the probe collapsed the window"
    );
}

#[test]
fn loss_duplication_and_reordering_up_to_30_percent() {
    for (seed, loss) in [(11, 0.05), (12, 0.15), (13, 0.30)] {
        let spec = lossy(
            loss,
            0.05,
            Duration::from_millis(2),
            Duration::from_millis(3),
        );
        let sim = transfer(seed, spec, small_config(), 150, 40_000);
        assert!(sim.client.stats().lost > 0, "loss {loss}: nothing lost?");
    }
}

#[test]
fn pieces_cross_a_lossy_link_as_they_are() {
    let spec = lossy(
        0.15,
        0.05,
        Duration::from_millis(2),
        Duration::from_millis(3),
    );
    let sim = transfer_as(14, spec, small_config(), 60, 150_000, true);
    assert!(sim.client.stats().lost > 0, "nothing lost?");
}

#[test]
fn pieces_with_a_gap_are_refused() {
    /// Says it is 10 bytes long but holds none.
    struct Hollow;
    impl Pieces for Hollow {
        fn total_len(&self) -> usize {
            10
        }
        fn chunk(&self, _: usize) -> &[u8] {
            &[]
        }
    }
    let mut sim = Sim::new(15, perfect(), small_config());
    sim.run(Duration::from_millis(20), |s| s.client.is_established());
    assert_eq!(
        sim.client.send(Payload::pieces(Hollow)),
        Err(SendError::Gap { offset: 0 })
    );
    let cut = Cut(vec![b"ab".to_vec(), Vec::new(), b"cd".to_vec()]);
    sim.client.send(Payload::pieces(cut)).unwrap();
    assert!(sim.run(Duration::from_secs(1), |s| s.got.1.len() == 1));
    assert_eq!(
        sim.got.1[0], b"abcd",
        "the refused message left nothing behind"
    );
}

#[test]
fn a_largest_message_crosses_a_lossy_link() {
    let config = Config {
        max_message: 4 << 20,
        window: 8 << 20,
        send_buffer: 8 << 20,
        ..Config::default()
    };
    let spec = lossy(
        0.1,
        0.02,
        Duration::from_millis(1),
        Duration::from_millis(1),
    );
    let mut sim = Sim::new(21, spec, config);
    let big: Vec<u8> = (0..4 << 20).map(|i: usize| (i ^ (i >> 9)) as u8).collect();
    sim.client.send(big.clone()).unwrap();
    sim.client.send(b"after".to_vec()).unwrap();
    assert!(sim.run(Duration::from_secs(120), |s| s.got.1.len() == 2));
    assert!(sim.got.1[0] == big);
    assert_eq!(sim.got.1[1], b"after");
    assert!(sim.client.stats().duplicate_bytes + sim.server.stats().duplicate_bytes < 8 << 20);
}

#[test]
fn a_16_mib_message_with_the_default_settings() {
    let spec = lossy(
        0.01,
        0.01,
        Duration::from_micros(200),
        Duration::from_micros(200),
    );
    let mut sim = Sim::new(22, spec, Config::default());
    let big: Vec<u8> = (0..16usize << 20).map(|i| (i ^ (i >> 11)) as u8).collect();
    sim.client.send(big.clone()).unwrap();
    assert!(matches!(
        sim.client.send(vec![0; (16 << 20) + 1]),
        Err(SendError::TooLarge { .. })
    ));
    assert!(sim.run(Duration::from_secs(120), |s| s.got.1.len() == 1));
    assert!(sim.got.1[0] == big);
}

#[test]
fn a_slow_receiver_holds_the_sender_to_its_window() {
    let config = Config {
        max_message: 64 << 10,
        window: 256 << 10,
        send_buffer: 4 << 20,
        ..Config::default()
    };
    let mut sim = Sim::new(31, perfect(), config);
    sim.server_reads = false;
    let mut rng = StdRng::seed_from_u64(3);
    let want = messages(&mut rng, 60, 64 << 10);
    for m in &want {
        sim.client.send(m.clone()).unwrap();
    }
    sim.run(Duration::from_secs(2), |_| false);
    assert!(sim.peak_buffered <= config.window);
    assert!(sim.got.1.is_empty());
    assert!(
        sim.client.queued() > 0,
        "the sender is held back: {:?} window {} next {} server buffered {} closed {:?} est {} {}",
        sim.client.stats(),
        sim.client.send.peer_window,
        sim.client.send.next_start,
        sim.server.receive_buffered(),
        sim.closed,
        sim.client.is_established(),
        sim.server.is_established()
    );
    // Reading again lets everything through.
    sim.server_reads = true;
    let done = sim.run(Duration::from_secs(10), |s| s.got.1.len() == want.len());
    assert!(
        done,
        "{} of {} messages; closed {:?}; client {:?} queued {} window {}",
        sim.got.1.len(),
        want.len(),
        sim.closed,
        sim.client.stats(),
        sim.client.queued(),
        sim.client.send.peer_window
    );
    assert_eq!(sim.got.1, want);
}

#[test]
fn a_vanished_peer_is_a_timeout_within_the_idle_limit() {
    let config = small_config();
    let mut sim = Sim::new(41, perfect(), config);
    sim.run(Duration::from_millis(50), |s| s.client.is_established());
    sim.client.send(vec![7; 500_000]).unwrap();
    sim.run(Duration::from_millis(3), |_| false);
    sim.server_alive = false;
    let vanished = sim.now;
    assert!(sim.run(Duration::from_secs(60), |s| s.closed.0.is_some()));
    assert_eq!(sim.closed.0, Some(Closed::TimedOut));
    let took = sim.now.saturating_duration_since(vanished);
    assert!(
        took <= config.idle_timeout + Duration::from_millis(10),
        "{took:?}"
    );
}

#[test]
fn an_idle_connection_stays_up_on_keep_alives() {
    let config = small_config();
    let mut sim = Sim::new(51, perfect(), config);
    sim.run(Duration::from_millis(50), |s| s.client.is_established());
    sim.run(Duration::from_secs(30), |_| false);
    assert!(sim.closed.0.is_none() && sim.closed.1.is_none());
    sim.client.send(b"still here".to_vec()).unwrap();
    assert!(sim.run(Duration::from_secs(1), |s| s.got.1.len() == 1));
}

#[test]
fn close_reaches_the_peer() {
    let mut sim = Sim::new(61, perfect(), small_config());
    sim.run(Duration::from_millis(50), |s| s.client.is_established());
    sim.client.close(42, b"done");
    assert!(sim.run(Duration::from_secs(1), |s| s.closed.1.is_some()));
    assert_eq!(
        sim.closed.1,
        Some(Closed::Peer {
            code: 42,
            reason: b"done".to_vec()
        })
    );
    assert_eq!(sim.closed.0, Some(Closed::Local));
    assert_eq!(sim.client.send(vec![1]), Err(SendError::Closed));
}

#[test]
fn an_unproven_peer_gets_at_most_three_times_its_bytes() {
    // A spoofed initial: 1200 bytes from an address that will never answer.
    let config = small_config();
    let mut client = Connection::client(config, 5, 6).unwrap();
    let mut buf = vec![0u8; 65536];
    let n = client.poll_transmit(Instant::ZERO, &mut buf).unwrap();
    assert!(n >= MIN_DATAGRAM, "the initial is padded");
    let mut server = Connection::server(config, 9).unwrap();
    server.handle_datagram(Instant::ZERO, &buf[..n]);
    // The server may resend its accept on every timeout; count what it sends in a minute.
    let mut sent = 0;
    let mut now = Instant::ZERO;
    for _ in 0..10_000 {
        while let Some(k) = server.poll_transmit(now, &mut buf) {
            sent += k;
        }
        match server.poll_timeout() {
            Some(t) if t < Instant::from_millis(60_000) => now = t,
            _ => break,
        }
        server.handle_timeout(now);
    }
    assert!(sent > 0 && sent <= 3 * n, "sent {sent} for {n} received");
    assert!(!server.is_validated());
}

#[test]
fn a_message_past_the_window_is_a_protocol_error() {
    let config = small_config();
    let mut sim = Sim::new(71, perfect(), config);
    sim.run(Duration::from_millis(50), |s| s.client.is_established());
    let mut d = vec![0u8; 64];
    let header = PacketHeader {
        ty: PacketType::DATA,
        dcid: sim.server.local_cid(),
        scid: None,
        pn: 1000,
    };
    let mut n = wire::emit_header(&header, &mut d).unwrap();
    n += wire::emit_frame(
        &PacketFrame::Data {
            start: config.window,
            total: 4,
            offset: 0,
            data: b"boom",
        },
        &mut d[n..],
    )
    .unwrap();
    let now = sim.now;
    sim.server.handle_datagram(now, &d[..n]);
    sim.collect();
    assert!(
        matches!(sim.closed.1, Some(Closed::Protocol(_))),
        "{:?}",
        sim.closed
    );
    // And the client hears why.
    assert!(sim.run(Duration::from_secs(1), |s| s.closed.0.is_some()));
    assert!(matches!(sim.closed.0, Some(Closed::Peer { code: 1, .. })));
}

#[test]
fn garbage_and_strangers_are_ignored() {
    let config = small_config();
    let mut sim = Sim::new(81, perfect(), config);
    sim.run(Duration::from_millis(50), |s| s.client.is_established());
    let mut rng = StdRng::seed_from_u64(8);
    for _ in 0..2000 {
        let len = rng.random_range(0..200);
        let mut d: Vec<u8> = (0..len).map(|_| rng.random()).collect();
        if len > 9 && rng.random::<bool>() {
            // Aimed at the server's id, to get past the header check.
            d[0] = 3;
            d[1..9].copy_from_slice(&sim.server.local_cid().to_le_bytes());
        }
        let now = sim.now;
        sim.server.handle_datagram(now, &d);
    }
    sim.client.send(b"fine".to_vec()).unwrap();
    assert!(sim.run(Duration::from_secs(1), |s| s.got.1.len() == 1));
}

#[test]
fn config_ranges_are_checked() {
    assert!(Config::default().check().is_ok());
    for bad in [
        Config {
            max_datagram: 500,
            ..Config::default()
        },
        Config {
            window: 10,
            ..Config::default()
        },
        Config {
            keep_alive: Duration::from_secs(60),
            ..Config::default()
        },
    ] {
        assert!(bad.check().is_err());
    }
}

/// A datagram on its way: when it lands, a tie-breaker, to, from, its bytes.
type Landing = Reverse<(Instant, u64, u32, u32, Vec<u8>)>;

/// Endpoints on a perfect link, addressed by number: runs until `done` or `limit`.
struct Net {
    now: Instant,
    /// (destination, source, datagram) landing at an instant.
    queue: BinaryHeap<Landing>,
    seq: u64,
    endpoints: Vec<(u32, ChannelEndpoint<u32>)>,
    /// Bytes each address received.
    received: BTreeMap<u32, u64>,
    buf: Vec<u8>,
}

impl Net {
    fn new() -> Self {
        Self {
            now: Instant::from_millis(1),
            queue: BinaryHeap::new(),
            seq: 0,
            endpoints: Vec::new(),
            received: BTreeMap::new(),
            buf: vec![0; 65536],
        }
    }

    fn inject(&mut self, from: u32, to: u32, datagram: Vec<u8>) {
        self.seq += 1;
        let at = self.now + Duration::from_micros(200);
        self.queue.push(Reverse((at, self.seq, to, from, datagram)));
    }

    fn step(&mut self) {
        for i in 0..self.endpoints.len() {
            let (addr, ep) = &mut self.endpoints[i];
            let from = *addr;
            let mut out = Vec::new();
            while let Some((to, n)) = ep.poll_transmit(self.now, &mut self.buf) {
                out.push((to, self.buf[..n].to_vec()));
            }
            for (to, d) in out {
                self.inject(from, to, d);
            }
        }
        let mut next = self.now + Duration::from_secs(1);
        if let Some(Reverse((at, ..))) = self.queue.peek() {
            next = next.min(*at);
        }
        for (_, ep) in &self.endpoints {
            if let Some(t) = ep.poll_timeout() {
                next = next.min(t);
            }
        }
        self.now = next.max(self.now + Duration::from_micros(1));
        while let Some(Reverse((at, ..))) = self.queue.peek() {
            if *at > self.now {
                break;
            }
            let Reverse((_, _, to, from, d)) = self.queue.pop().expect("peeked");
            *self.received.entry(to).or_default() += d.len() as u64;
            if let Some((_, ep)) = self.endpoints.iter_mut().find(|(a, _)| *a == to) {
                ep.handle_datagram(self.now, from, &d);
            }
        }
        for (_, ep) in &mut self.endpoints {
            ep.handle_timeout(self.now);
        }
    }
}

fn server_config() -> EndpointConfig {
    EndpointConfig {
        connection: small_config(),
        accept: true,
        max_peers: 100,
        max_half_open: 16,
        ..EndpointConfig::default()
    }
}

#[test]
fn one_server_endpoint_serves_many_clients() {
    let mut net = Net::new();
    net.endpoints
        .push((1, ChannelEndpoint::new(server_config(), 7).unwrap()));
    for c in 0..3u32 {
        let mut ep = ChannelEndpoint::new(EndpointConfig::default(), 100 + u64::from(c)).unwrap();
        let h = ep.connect(1).unwrap();
        for i in 0..50u32 {
            ep.send(
                h,
                (0..(i * 97 % 3000))
                    .map(|j| (j ^ c) as u8)
                    .collect::<Vec<u8>>(),
            )
            .unwrap();
        }
        net.endpoints.push((10 + c, ep));
    }
    // The server echoes every message back on the connection it came from.
    let mut echoed = 0;
    let mut got: Vec<Vec<Vec<u8>>> = vec![Vec::new(); 3];
    for _ in 0..100_000 {
        net.step();
        while let Some((h, e)) = net.endpoints[0].1.poll_event() {
            if let Event::Message(m) = e {
                net.endpoints[0].1.send(h, m).unwrap();
                echoed += 1;
            }
        }
        for (c, mine) in got.iter_mut().enumerate() {
            while let Some((_, e)) = net.endpoints[1 + c].1.poll_event() {
                if let Event::Message(m) = e {
                    mine.push(m);
                }
            }
        }
        if got.iter().all(|g| g.len() == 50) {
            break;
        }
    }
    assert_eq!(echoed, 150);
    for (c, g) in got.iter().enumerate() {
        for (i, m) in g.iter().enumerate() {
            let want: Vec<u8> = (0..(i as u32 * 97 % 3000))
                .map(|j| (j ^ c as u32) as u8)
                .collect();
            assert_eq!(*m, want, "client {c} message {i}");
        }
    }
    assert_eq!(net.endpoints[0].1.len(), 3);
}

/// A client's padded initial, as from a spoofed source.
fn initial(seed: u64) -> Vec<u8> {
    let mut c = Connection::client(small_config(), seed, seed ^ 0x55).unwrap();
    let mut buf = vec![0; 2048];
    let n = c.poll_transmit(Instant::ZERO, &mut buf).unwrap();
    buf[..n].to_vec()
}

#[test]
fn a_flood_of_setups_is_capped_and_drains_away() {
    let mut net = Net::new();
    net.endpoints
        .push((1, ChannelEndpoint::new(server_config(), 9).unwrap()));
    // 5000 initials from 5000 addresses that never answer.
    for a in 0..5000u32 {
        let d = initial(u64::from(a) + 1);
        net.inject(100_000 + a, 1, d);
        if a % 100 == 0 {
            net.step();
        }
        assert!(net.endpoints[0].1.half_open() <= 16);
        assert!(net.endpoints[0].1.len() <= 16);
    }
    // An unpadded initial is not even considered.
    let mut short = initial(77);
    short.truncate(200);
    net.inject(9, 1, short);
    for _ in 0..10 {
        net.step();
    }
    let stats = net.endpoints[0].1.stats();
    assert_eq!(stats.accepted, 16);
    assert!(stats.refused >= 4900, "{stats:?}");
    assert!(stats.dropped >= 1);
    // The half-open ones time out, and a real client gets in.
    let idle = small_config().idle_timeout;
    let until = net.now + idle + Duration::from_secs(1);
    while net.now < until {
        net.step();
    }
    assert_eq!(net.endpoints[0].1.len(), 0, "half-open connections expire");
    let mut client = ChannelEndpoint::new(EndpointConfig::default(), 3).unwrap();
    let h = client.connect(1).unwrap();
    client.send(h, b"let me in".to_vec()).unwrap();
    net.endpoints.push((2, client));
    let mut got = None;
    for _ in 0..10_000 {
        net.step();
        while let Some((_, e)) = net.endpoints[0].1.poll_event() {
            if let Event::Message(m) = e {
                got = Some(m);
            }
        }
        if got.is_some() {
            break;
        }
    }
    assert_eq!(got.as_deref(), Some(&b"let me in"[..]));
}

#[test]
fn spoofed_initials_draw_at_most_three_times_their_bytes() {
    let mut net = Net::new();
    net.endpoints
        .push((1, ChannelEndpoint::new(server_config(), 11).unwrap()));
    // A victim at address 5 that never answers; someone sends initials in its name.
    let mut sent_in_its_name = 0u64;
    for k in 0..10u64 {
        let d = initial(1000 + k);
        sent_in_its_name += d.len() as u64;
        net.inject(5, 1, d);
    }
    let until = net.now + Duration::from_secs(60);
    while net.now < until {
        net.step();
    }
    let to_victim = net.received.get(&5).copied().unwrap_or(0);
    assert!(to_victim > 0);
    assert!(
        to_victim <= 3 * sent_in_its_name,
        "{to_victim} bytes to the victim for {sent_in_its_name} in its name"
    );
}

#[test]
fn an_endpoint_holds_messages_against_the_window_until_taken() {
    let config = Config {
        max_message: 64 << 10,
        window: 256 << 10,
        send_buffer: 4 << 20,
        ..Config::default()
    };
    let mut net = Net::new();
    net.endpoints.push((
        1,
        ChannelEndpoint::new(
            EndpointConfig {
                connection: config,
                accept: true,
                ..EndpointConfig::default()
            },
            1,
        )
        .unwrap(),
    ));
    let mut client = ChannelEndpoint::new(
        EndpointConfig {
            connection: config,
            ..EndpointConfig::default()
        },
        2,
    )
    .unwrap();
    let h = client.connect(1).unwrap();
    let want: Vec<Vec<u8>> = (0..60u32)
        .map(|i| {
            (0..(i * 1009 % (60 << 10)))
                .map(|j| (i + j) as u8)
                .collect()
        })
        .collect();
    for m in &want {
        client.send(h, m.clone()).unwrap();
    }
    net.endpoints.push((2, client));
    // The server's application takes nothing for a while.
    let until = net.now + Duration::from_secs(2);
    let mut server_handle = None;
    while net.now < until {
        net.step();
        while let Some((sh, e)) = net.endpoints[0].1.poll_status() {
            assert_eq!(e, Event::Connected);
            server_handle = Some(sh);
        }
    }
    let sh = server_handle.expect("connected");
    let held = net.endpoints[0]
        .1
        .connection(sh)
        .unwrap()
        .receive_buffered();
    assert!(held > 0 && held <= config.window, "held {held}");
    assert!(
        net.endpoints[1].1.connection(h).unwrap().queued() > 0,
        "the sender waits"
    );
    // Taking them lets the rest through, in order.
    let mut got = Vec::new();
    for _ in 0..100_000 {
        net.step();
        while let Some(m) = net.endpoints[0].1.poll_message(sh) {
            got.push(m);
        }
        if got.len() == want.len() {
            break;
        }
    }
    assert_eq!(got, want);
}
