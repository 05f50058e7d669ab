//! What a hostile or silent peer can hold on a server: a connection ended both ways
//! frees its socket and its slot whatever the peer does, a first frame past the
//! handshake's limit ends the connection, and connections past the cap are accepted to
//! be refused (at a bounded rate), not left in the backlog.

use core::time::Duration;
use std::io::{Read, Write};
use std::net::TcpStream;

use volley_proto::wire::frame::{HEADER_LEN, Header};
use volley_testkit::within;
use volley_transport_tcp::{Accepted, Admission, Config, Error, Listener, ServerConfig};

async fn listener(max_connections: usize, connection: Config) -> Listener {
    Listener::bind_tcp(
        "127.0.0.1:0".parse().unwrap(),
        ServerConfig {
            connection,
            max_connections,
            max_refusals_per_second: 3,
            ..ServerConfig::default()
        },
    )
    .await
    .unwrap()
}

/// A blocking client socket (the attacker: it reads nothing and never closes).
fn connect(listener: &Listener) -> TcpStream {
    let stream = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
}

/// Waits until the listener has `open` connections (the slot is freed by a task).
async fn wait_open(listener: &Listener, open: usize) {
    within(10, async {
        while listener.stats().open != open {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
}

#[tokio::test]
async fn close_both_frees_the_slot_of_a_peer_that_never_closes() {
    let config = Config {
        linger: Duration::from_millis(300),
        ..Config::default()
    };
    let listener = listener(1, config).await;
    // A peer that sends a frame, then neither reads nor closes.
    let mut silent = connect(&listener);
    let accepted = within(10, listener.accept()).await.unwrap();
    let header = Header::new(7, 1, 3).unwrap().emit();
    silent.write_all(&header).unwrap();
    silent.write_all(b"abc").unwrap();
    let mut incoming = accepted.incoming;
    let frame = within(10, incoming.recv()).await.unwrap();
    assert_eq!(&frame.body[..], b"abc");
    assert_eq!(listener.stats().open, 1);
    accepted
        .framed
        .send(9, 1, b"bye", Default::default())
        .await
        .unwrap();
    accepted.framed.close_both();
    // The slot comes back within the linger, though the peer still holds its end.
    wait_open(&listener, 0).await;
    assert_eq!(
        accepted.framed.failure(),
        Some(Error::Shutdown),
        "the reader stopped because this end closed"
    );
    // The peer got what was queued, then the end of the stream.
    let mut got = Vec::new();
    silent.read_to_end(&mut got).unwrap();
    assert_eq!(&got[got.len() - 3..], b"bye");
}

#[tokio::test]
async fn close_both_gives_up_on_a_peer_that_never_reads() {
    let config = Config {
        linger: Duration::from_millis(300),
        write_budget: 64 << 20,
        max_frame_len: 2 << 20,
        ..Config::default()
    };
    let listener = listener(1, config).await;
    let _stalled = connect(&listener);
    let accepted = within(10, listener.accept()).await.unwrap();
    // More than the socket buffers hold: the last write can never finish.
    let big = bytes::Bytes::from(vec![1u8; 1 << 20]);
    for i in 0..40 {
        accepted.framed.send(1, i, &[], big.clone()).await.unwrap();
    }
    accepted.framed.close_both();
    wait_open(&listener, 0).await;
    assert!(matches!(
        accepted.framed.failure(),
        Some(Error::Timeout { .. } | Error::Shutdown)
    ));
}

#[tokio::test]
async fn a_first_frame_past_its_limit_ends_the_connection_at_once() {
    let config = Config {
        first_frame_max: Some(1024),
        max_frame_len: 16 << 20,
        ..Config::default()
    };
    let listener = listener(4, config).await;
    let mut client = connect(&listener);
    let accepted = within(10, listener.accept()).await.unwrap();
    // The header of a 16 MiB frame, then a trickle: refused at the header.
    client
        .write_all(&Header::new(1, 1, (16 << 20) - 20).unwrap().emit())
        .unwrap();
    let mut incoming = accepted.incoming;
    let e = within(10, incoming.recv()).await.unwrap_err();
    assert!(matches!(e, Error::Protocol(_)), "{e}");
    // After a small first frame, a large one is fine.
    let mut client = connect(&listener);
    let accepted = within(10, listener.accept()).await.unwrap();
    client
        .write_all(&Header::new(1, 1, 10).unwrap().emit())
        .unwrap();
    client.write_all(&[0; 10]).unwrap();
    let big = 1 << 20;
    client
        .write_all(&Header::new(1, 3, big).unwrap().emit())
        .unwrap();
    client.write_all(&vec![5; big]).unwrap();
    let mut incoming = accepted.incoming;
    assert_eq!(within(10, incoming.recv()).await.unwrap().body.len(), 10);
    assert_eq!(within(10, incoming.recv()).await.unwrap().body.len(), big);
}

#[tokio::test]
async fn past_the_cap_connections_are_accepted_to_be_refused_at_a_bounded_rate() {
    let config = Config {
        linger: Duration::from_millis(200),
        ..Config::default()
    };
    let listener = listener(1, config).await;
    let _first = connect(&listener);
    let Admission::Accepted(_held) = within(10, listener.accept_or_refuse()).await.unwrap() else {
        panic!("the first connection takes the slot");
    };
    // The next ones find no slot: accepted without one, up to 3 a second.
    let mut clients = Vec::new();
    let started = std::time::Instant::now();
    for _ in 0..4 {
        clients.push(connect(&listener));
        match within(10, listener.accept_or_refuse()).await.unwrap() {
            Admission::Full(refused) => {
                refused
                    .framed
                    .send(2, 0, b"full", Default::default())
                    .await
                    .unwrap();
                refused.framed.close_both();
            }
            Admission::Accepted(_) => panic!("no slot was free"),
        }
    }
    // The fourth waited for the next second.
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(listener.stats().refused, 4);
    assert_eq!(listener.stats().open, 1, "refusals hold no slot");
    // Read on another thread: the runtime's thread runs the refused connections' tasks.
    for mut client in clients {
        let got = within(
            20,
            tokio::task::spawn_blocking(move || {
                let mut got = Vec::new();
                client.read_to_end(&mut got).map(|_| got)
            }),
        )
        .await
        .unwrap()
        .unwrap();
        assert!(got.ends_with(b"full"));
    }
}

/// A connection whose accepting end spins 250 us before sleeping (as volley-rpc's links
/// do), and the blocking socket of its peer; the listener is kept with them.
async fn spinning_connection() -> (Listener, TcpStream, Accepted) {
    let config = Config {
        spin: Some(Duration::from_micros(250)),
        ..Config::default()
    };
    let listener = listener(4, config).await;
    let peer = connect(&listener);
    let accepted = within(10, listener.accept()).await.unwrap();
    (listener, peer, accepted)
}

/// A peer that trickles: first a large frame one byte at a time, then tiny whole frames,
/// each a little under the spin apart, so that a reader spinning after every read would
/// never sleep. The reader spins before few of its reads (the time it spun is printed:
/// time is what it costs, but under a loaded test run it is not a steady measure).
#[tokio::test]
async fn a_trickle_does_not_keep_the_reader_spinning() {
    let (_listener, mut peer, accepted) = spinning_connection().await;
    let mut incoming = accepted.incoming;
    let trickle = std::thread::spawn(move || {
        // Paced by sleeping: this is the attack's rate, not synchronisation.
        let gap = Duration::from_micros(150);
        let header = Header::new(7, 1, 1500).unwrap().emit();
        peer.write_all(&header).unwrap();
        for _ in 0..1500 {
            peer.write_all(b"x").unwrap();
            std::thread::sleep(gap);
        }
        let tiny = Header::new(7, 2, 1).unwrap().emit();
        for _ in 0..1500 {
            peer.write_all(&tiny).unwrap();
            peer.write_all(b"y").unwrap();
            std::thread::sleep(gap);
        }
        peer
    });
    let started = std::time::Instant::now();
    within(30, async {
        for _ in 0..1501 {
            incoming.recv().await.unwrap();
        }
    })
    .await;
    let elapsed = started.elapsed().as_micros() as u64;
    let _peer = trickle.join().unwrap();
    let stats = accepted.framed.stats();
    println!(
        "trickle: {} spins in {} reads, spun {} us of {elapsed} us ({:.0}%)",
        stats.spins,
        stats.reads,
        stats.spun_us,
        100.0 * stats.spun_us as f64 / elapsed as f64
    );
    // Spinning before every read would spin about once per paced send (3,000 of them: the
    // bytes, then the tiny frames). Counted against the sends, not the reads: on a loaded
    // host the reader is late, one read takes several sends, and the reads (not the
    // spins) halve, which made a bound on spins per read fail there.
    let sends = 3000;
    assert!(
        stats.spins * 4 < sends,
        "{} spins for {sends} paced sends ({} reads): a trickle kept the reader spinning",
        stats.spins,
        stats.reads
    );
}

/// A peer that answers what this end writes, but trickles each answer: its header
/// whole, then its body a byte at a time, a little under the spin apart. Only the wait
/// for the start of an answer is free (it is what spinning after a write is for); the
/// trickle after it is charged as any other, so the reader spins before few reads.
#[tokio::test]
async fn a_trickled_answer_does_not_keep_the_reader_spinning() {
    const ASKS: usize = 12;
    const BODY: usize = 100;
    let (_listener, mut peer, accepted) = spinning_connection().await;
    let mut incoming = accepted.incoming;
    let answerer = std::thread::spawn(move || {
        // Paced by sleeping: this is the attack's rate, not synchronisation.
        let gap = Duration::from_micros(150);
        let mut ask = [0u8; HEADER_LEN + 1];
        for i in 0..ASKS {
            peer.read_exact(&mut ask).unwrap();
            let id = u32::try_from(i).unwrap() + 1;
            let header = Header::new(7, id, BODY).unwrap().emit();
            peer.write_all(&header).unwrap();
            for _ in 0..BODY {
                peer.write_all(b"z").unwrap();
                std::thread::sleep(gap);
            }
        }
        peer
    });
    within(30, async {
        for i in 0..ASKS {
            let id = u32::try_from(i).unwrap() + 1;
            accepted
                .framed
                .send(7, id, &[], bytes::Bytes::from_static(b"?"))
                .await
                .unwrap();
            let answer = incoming.recv().await.unwrap();
            assert_eq!(answer.body.len(), BODY);
        }
    })
    .await;
    let _peer = answerer.join().unwrap();
    let stats = accepted.framed.stats();
    println!(
        "trickled answers: {} spins in {} reads, spun {} us",
        stats.spins, stats.reads, stats.spun_us
    );
    assert!(
        stats.spins * 8 < stats.reads,
        "{} spins in {} reads: trickled answers kept the reader spinning",
        stats.spins,
        stats.reads
    );
}

/// Sends 64 KiB frames on `framed` until its queue holds `until` bytes (the kernel's
/// buffers full, since its peer does not read), or it fails.
async fn fill(framed: &volley_transport_tcp::Framed, until: u64) -> Result<(), Error> {
    let chunk = bytes::Bytes::from(vec![7u8; 64 * 1024]);
    for _ in 0..4096 {
        if framed.stats().queued >= until {
            return Ok(());
        }
        framed.send(1, 1, b"", chunk.clone()).await?;
    }
    panic!("256 MiB sent to a peer that never reads and the queue never filled");
}

/// Peers that never read fill the listener's memory for queued frames: past it the
/// connection likeliest not to be read (the most queued, the longest without a write)
/// ends with the reason, and a peer that reads is served in full, even in a burst.
#[tokio::test]
async fn the_listener_bounds_all_connections_queued_frames_together() {
    let listener = Listener::bind_tcp(
        "127.0.0.1:0".parse().unwrap(),
        ServerConfig {
            connection: Config {
                write_budget: 5 << 20,
                ..ServerConfig::default().connection
            },
            max_connections: 3,
            total_write_budget: 6 << 20,
            ..ServerConfig::default()
        },
    )
    .await
    .unwrap();
    let _a_peer = connect(&listener);
    let a = within(10, listener.accept()).await.unwrap();
    let _b_peer = connect(&listener);
    let b = within(10, listener.accept()).await.unwrap();
    let mut reader = connect(&listener);
    let good = within(10, listener.accept()).await.unwrap();
    let full = (5 << 20) - (128 << 10);
    within(30, fill(&a.framed, full)).await.unwrap();
    // B's frames take the total past 6 MiB: A, stalled with the most, is ended.
    within(30, fill(&b.framed, full)).await.unwrap();
    let error = a.framed.failure().expect("A was ended");
    assert!(
        matches!(error, Error::MemoryExhausted { held } if held >= full),
        "{error}"
    );
    assert!(
        error
            .to_string()
            .contains("memory for queued frames is exhausted"),
        "{error}"
    );
    assert!(listener.stats().queued <= 6 << 20);
    // A burst of 4 MiB to a peer that reads takes the total past 6 MiB again: B goes,
    // not the reader's connection.
    let chunk = bytes::Bytes::from(vec![7u8; 64 * 1024]);
    let sending = tokio::spawn(async move {
        for i in 0..64u32 {
            good.framed.send(1, i, b"", chunk.clone()).await.unwrap();
        }
        good
    });
    let mut got = vec![0u8; 64 * (9 + 64 * 1024)];
    let got = tokio::task::spawn_blocking(move || reader.read_exact(&mut got).map(|()| got))
        .await
        .unwrap()
        .expect("the reading peer gets every frame");
    assert!(
        got.chunks(9 + 64 * 1024)
            .all(|f| f[9..].iter().all(|&x| x == 7))
    );
    within(10, sending).await.unwrap();
    assert!(matches!(
        b.framed.failure(),
        Some(Error::MemoryExhausted { .. })
    ));
    assert!(listener.stats().queued <= 6 << 20);
}
