//! Criterion micro-benchmark of the sliding window's bookkeeping: one request answered and
//! one sent in its place, with the window full, at window sizes from 8 to the maximum.
//! The cost per request should not grow with the window: `cargo bench -p volley-benches
//! --bench window`.

#![allow(missing_docs)]

use core::hint::black_box;
use std::collections::VecDeque;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use volley_proto::scp::window::{Config, Outcome, Protocol, ReplyOutcome, Window};
use volley_proto::time::{Duration, Instant};

/// A format with nothing to parse: the sequence number in the first two bytes.
struct Bare;

impl Protocol for Bare {
    fn check_request(&self, _: &[u8]) -> Result<(), volley_proto::wire::Error> {
        Ok(())
    }

    fn set_seq(&self, request: &mut [u8], seq: u16) {
        request[..2].copy_from_slice(&seq.to_le_bytes());
    }

    fn classify(&self, reply: &[u8]) -> Option<(u16, Outcome)> {
        Some((
            u16::from_le_bytes([*reply.first()?, *reply.get(1)?]),
            Outcome::Done,
        ))
    }
}

fn turnover(c: &mut Criterion) {
    let mut group = c.benchmark_group("window_turnover");
    group.throughput(Throughput::Elements(1));
    for size in [8, 16, 64, 256, 1024] {
        group.bench_with_input(BenchmarkId::from_parameter(size), &size, |b, &size| {
            let config = Config::fixed(Duration::from_secs(10), 5, size);
            let mut window: Window<Bare, u32> = Window::new(Bare, config);
            let mut sent = VecDeque::new();
            let mut now = Instant::ZERO;
            for token in 0..size as u32 {
                window.push(vec![0; 16], token).expect("a request");
                let bytes = window.poll_transmit(now).expect("a free slot");
                sent.push_back([bytes[0], bytes[1]]);
            }
            b.iter(|| {
                now += Duration::from_micros(1);
                let reply = sent.pop_front().expect("a full window");
                let ReplyOutcome::Completed { token, request, .. } =
                    window.handle_reply(now, black_box(&reply))
                else {
                    panic!("the oldest request completes");
                };
                window.push(request, token).expect("a request");
                let bytes = window.poll_transmit(now).expect("the freed slot");
                sent.push_back([bytes[0], bytes[1]]);
                window.handle_timeout(now);
                black_box(window.poll_timeout())
            });
        });
    }
    group.finish();
}

criterion_group!(benches, turnover);
criterion_main!(benches);
