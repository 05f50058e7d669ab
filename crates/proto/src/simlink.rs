//! The seeded simulated link both reliability machines' tests run over (the window's
//! requests and replies, the channel's datagrams): each datagram may be lost, sent
//! twice, and delayed by a one-way delay plus jitter (which reorders), all drawn from one
//! seed, so a failing run can be replayed exactly. Datagrams land in time order, ties in
//! the order they were sent.

use alloc::collections::BinaryHeap;
use alloc::vec::Vec;
use core::cmp::Reverse;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::time::{Duration, Instant};

/// How the link treats datagrams.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LinkSpec {
    /// Chance a datagram is lost.
    pub(crate) loss: f64,
    /// Chance a datagram arrives twice.
    pub(crate) duplicate: f64,
    /// One-way delay.
    pub(crate) delay: Duration,
    /// The most extra delay a datagram that is held back gets.
    pub(crate) jitter: Duration,
    /// Chance a datagram is held back by up to `jitter` (1.0: every one).
    pub(crate) reorder: f64,
}

impl LinkSpec {
    /// No loss, no duplication, no reordering, `delay` each way.
    pub(crate) const fn perfect(delay: Duration) -> Self {
        Self {
            loss: 0.0,
            duplicate: 0.0,
            delay,
            jitter: Duration::ZERO,
            reorder: 0.0,
        }
    }
}

/// A datagram on its way: when it lands, a tie-breaker, where it goes, its bytes.
type Landing<T> = Reverse<(Instant, u64, T, Vec<u8>)>;

/// Datagrams in flight between two ends named by `T`.
pub(crate) struct SimLink<T: Ord> {
    rng: StdRng,
    spec: LinkSpec,
    in_flight: BinaryHeap<Landing<T>>,
    sent: u64,
}

impl<T: Ord + Copy> SimLink<T> {
    pub(crate) fn new(seed: u64, spec: LinkSpec) -> Self {
        Self {
            rng: StdRng::seed_from_u64(seed),
            spec,
            in_flight: BinaryHeap::new(),
            sent: 0,
        }
    }

    /// Puts `bytes` on the link towards `to` at `now`: lost, once or twice, each copy
    /// delayed (and maybe held back), in that order of draws.
    pub(crate) fn send(&mut self, now: Instant, to: T, bytes: &[u8]) {
        if self.rng.random_bool(self.spec.loss) {
            return;
        }
        let copies = if self.rng.random_bool(self.spec.duplicate) {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let mut at = now + self.spec.delay;
            let jitter = self.spec.jitter.as_micros();
            if jitter > 0 && self.rng.random_bool(self.spec.reorder) {
                at += Duration::from_micros(self.rng.random_range(0..jitter));
            }
            self.sent += 1;
            self.in_flight
                .push(Reverse((at, self.sent, to, bytes.to_vec())));
        }
    }

    /// When the next datagram lands, if any is in flight.
    pub(crate) fn next_at(&self) -> Option<Instant> {
        self.in_flight.peek().map(|Reverse((at, ..))| *at)
    }

    /// The next datagram that has landed by `now`, and where it goes.
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<(T, Vec<u8>)> {
        if self.next_at()? > now {
            return None;
        }
        let Reverse((_, _, to, bytes)) = self.in_flight.pop()?;
        Some((to, bytes))
    }
}
