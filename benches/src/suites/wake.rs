//! `wake`: small request/response frames over loopback TCP through volley's connection
//! with 1, 16 and 256 requests in flight; the reader's wake-ups per delivered frame and
//! p50/p99 latency, batched signalling (wake on the first frame of a batch) against
//! signalling every frame (the Linux SCTP lesson), and the CPU per frame. Every echo is
//! compared with the request it answers (each carries its number).

use core::time::Duration;
use std::sync::mpsc;
use std::thread;
use std::time::Instant;

use bytes::Bytes;
use serde_json::json;
use tokio::net::TcpListener;
use volley_transport_tcp::{Config, Connection, Signal, testing};

use crate::harness::{Mode, Report, median};

pub(crate) fn run(mode: Mode) -> Report {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    // Many short rounds rather than a few long ones: a p99 moves with the machine's
    // load from one second to the next, and pairs of short back-to-back runs share it.
    let (rounds, requests): (usize, usize) = match mode {
        Mode::Quick => (15, 30_000),
        Mode::Full => (45, 100_000),
    };
    let server = echo_server();
    let mut report = Report::new(
        "wake",
        "Wake-ups per frame and latency, 64-byte frames over loopback TCP",
        mode,
    );
    report.rounds = rounds;
    report.columns = vec![
        "in flight",
        "signal",
        "wake-ups/frame",
        "p50 us",
        "p99 us",
        "p99 min..max",
        "frames/s",
        "CPU us/frame",
    ];
    for in_flight in [1usize, 16, 256] {
        // Both modes in every round, alternating which goes first, so drift in the
        // machine's load falls on both alike.
        let modes = [Signal::PerFrame, Signal::Batched];
        let mut results: [Vec<(f64, f64, f64, f64)>; 2] = [Vec::new(), Vec::new()];
        let mut cpu: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
        for round in 0..rounds {
            for k in 0..2 {
                let m = if round % 2 == 0 { k } else { 1 - k };
                let before = crate::harness::cpu_split();
                results[m].push(runtime.block_on(one_run(server, modes[m], in_flight, requests)));
                let after = crate::harness::cpu_split();
                let secs = (after.0 - before.0) + (after.1 - before.1);
                cpu[m].push(secs * 1e6 / requests as f64);
            }
        }
        for (m, signal) in modes.into_iter().enumerate() {
            let pick = |f: fn(&(f64, f64, f64, f64)) -> f64| {
                median(&results[m].iter().map(f).collect::<Vec<_>>())
            };
            let name = match signal {
                Signal::Batched => "batched",
                Signal::PerFrame => "per frame",
            };
            let (w, a, b, f) = (pick(|r| r.0), pick(|r| r.1), pick(|r| r.2), pick(|r| r.3));
            let p99s = results[m].iter().map(|r| r.2);
            let (lo, hi) = (
                p99s.clone().fold(f64::INFINITY, f64::min),
                p99s.fold(0.0, f64::max),
            );
            report.rows.push(vec![
                in_flight.to_string(),
                name.into(),
                format!("{w:.3}"),
                format!("{a:.1}"),
                format!("{b:.1}"),
                format!("{lo:.0}..{hi:.0}"),
                crate::harness::si(f),
                format!("{:.2}", median(&cpu[m])),
            ]);
            report.data.push(json!({
                "in_flight": in_flight, "signal": name, "wakeups_per_frame": w,
                "p50_us": a, "p99_us": b, "frames_per_sec": f, "cpu_us_per_frame": median(&cpu[m]),
            }));
        }
        // Each round ran both modes back to back: compare them pairwise, so a slow
        // stretch of the machine falls on both sides of a ratio.
        let paired: Vec<f64> = results[1]
            .iter()
            .zip(&results[0])
            .map(|(batched, per_frame)| batched.2 / per_frame.2)
            .collect();
        let ratio = median(&paired);
        report.notes.push(format!(
            "{in_flight} in flight: p99 batched / per frame, paired by round: median {ratio:.2} \
             (rounds {:.2}..{:.2})",
            paired.iter().copied().fold(f64::INFINITY, f64::min),
            paired.iter().copied().fold(0.0, f64::max),
        ));
        report.data.push(json!({
            "in_flight": in_flight, "p99_batched_over_per_frame_paired": paired,
            "p99_ratio_median": ratio,
        }));
        eprintln!("wake: {in_flight} in flight done");
    }
    report.notes.push(
        "CPU us/frame: every thread of the process (the client's and the echo server's), \
         per request and its reply"
            .into(),
    );
    report
}

/// An echo server on its own thread and runtime.
fn echo_server() -> core::net::SocketAddr {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime")
            .block_on(async move {
                let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
                let _ = tx.send(listener.local_addr().expect("addr"));
                while let Ok((stream, _)) = listener.accept().await {
                    let _ = stream.set_nodelay(true);
                    tokio::spawn(testing::echo(stream));
                }
            });
    });
    rx.recv_timeout(Duration::from_secs(10))
        .expect("the echo server started")
}

/// Returns (wake-ups per frame, p50 us, p99 us, frames/s).
async fn one_run(
    server: core::net::SocketAddr,
    signal: Signal,
    in_flight: usize,
    requests: usize,
) -> (f64, f64, f64, f64) {
    let config = Config {
        signal,
        max_in_flight: in_flight.max(1),
        ..Config::default()
    };
    let conn = Connection::connect_tcp(server, config)
        .await
        .expect("connect");
    let mut pipeline = conn.pipeline();
    // Each request's 64 bytes carry its number, so that its echo can be checked.
    let frame = |n: usize| {
        let mut head = [7u8; 64];
        head[..8].copy_from_slice(&(n as u64).to_le_bytes());
        head
    };
    let mut sent_at = std::collections::HashMap::with_capacity(in_flight * 2);
    let mut latencies = Vec::with_capacity(requests);
    let start = Instant::now();
    let mut sent = 0;
    while latencies.len() < requests {
        while sent < requests && pipeline.outstanding() < in_flight {
            let id = pipeline
                .send(1, &frame(sent), Bytes::new())
                .await
                .expect("send");
            sent_at.insert(id, (Instant::now(), sent));
            sent += 1;
        }
        let reply = tokio::time::timeout(Duration::from_secs(10), pipeline.recv())
            .await
            .expect("a reply within 10 s")
            .expect("a reply");
        let (at, n) = sent_at
            .remove(&reply.id)
            .expect("a reply to a request in flight");
        assert_eq!(
            reply.body[..],
            frame(n)[..],
            "the echo of request {n} differs from what was sent"
        );
        latencies.push(at.elapsed().as_secs_f64() * 1e6);
    }
    let rate = requests as f64 / start.elapsed().as_secs_f64();
    let stats = conn.stats();
    latencies.sort_by(f64::total_cmp);
    let pick = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
    (
        stats.wakeups as f64 / stats.frames_received.max(1) as f64,
        pick(0.5),
        pick(0.99),
        rate,
    )
}
