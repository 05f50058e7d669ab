//! The sans-IO sliding window: many requests in flight over an unreliable datagram link,
//! each retransmitted with its exact bytes until its reply arrives or it runs out of tries.
//!
//! The window never touches a socket or a clock. Its driver feeds it:
//!
//! - [`Window::push`] a request's bytes (sequence number still unset) with a token of the
//!   caller's choosing;
//! - [`Window::handle_reply`] every datagram that arrives, which says at once whether it
//!   completed a request (the caller still holds the reply bytes, so nothing is copied);
//! - [`Window::handle_timeout`] when the instant from [`Window::poll_timeout`] has passed;
//!
//! and drains it: [`Window::poll_transmit`] until it returns `None` (send each datagram),
//! [`Window::poll_event`] for requests that gave up.
//!
//! Sequence numbers are 16-bit, assigned in order over the full range and skipping any
//! still outstanding. A retransmitting request keeps its slot (selective repeat). The
//! retransmit timeout is fixed (rig parity: 0.5 s, 5 tries) or estimated from RTT samples
//! as RFC 6298 describes, with samples never taken from retransmitted requests (Karn) and
//! each retransmission doubling that request's timeout up to a bound.
//!
//! ```
//! use volley_proto::time::{Duration, Instant};
//! use volley_proto::window::{Config, Outcome, Protocol, ReplyOutcome, Window};
//!
//! /// A toy format: 2-byte little-endian sequence number, then a payload; a reply echoes it.
//! struct Echo;
//! impl Protocol for Echo {
//!     fn set_seq(&self, request: &mut [u8], seq: u16) {
//!         request[..2].copy_from_slice(&seq.to_le_bytes());
//!     }
//!     fn classify(&self, reply: &[u8]) -> Option<(u16, Outcome)> {
//!         Some((u16::from_le_bytes([*reply.first()?, *reply.get(1)?]), Outcome::Done))
//!     }
//! }
//!
//! let mut window = Window::new(Echo, Config::fixed(Duration::from_millis(500), 5, 8));
//! window.push(vec![0, 0, b'a'], "first");
//! let now = Instant::ZERO;
//! let sent = window.poll_transmit(now).expect("a free slot").to_vec();
//! assert_eq!(window.poll_timeout(), Some(now + Duration::from_millis(500)));
//!
//! // The peer echoes the datagram back.
//! match window.handle_reply(now + Duration::from_millis(1), &sent) {
//!     ReplyOutcome::Completed { token, .. } => assert_eq!(token, "first"),
//!     other => panic!("{other:?}"),
//! }
//! assert!(window.is_idle());
//! ```

use alloc::collections::VecDeque;
use alloc::vec;
use alloc::vec::Vec;

use crate::time::{Duration, Instant};

mod rtt;
mod scp;
#[cfg(test)]
mod tests;

pub use rtt::RttEstimator;
pub use scp::ScpProtocol;

/// What the window needs to know of a packet format.
pub trait Protocol {
    /// Writes `seq` into a request's bytes.
    fn set_seq(&self, request: &mut [u8], seq: u16);

    /// The sequence number of a reply and what it means, or `None` if the bytes are not
    /// a reply this format understands.
    fn classify(&self, reply: &[u8]) -> Option<(u16, Outcome)>;
}

/// What a reply says about its request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The request is done.
    Done,
    /// The peer was busy: ignore this reply, let the request's timer resend it.
    Retry,
    /// The request failed for good with this code.
    Fatal(u16),
}

/// How the retransmit timeout is chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rto {
    /// The same timeout for every try (rig: 0.5 s).
    Fixed(Duration),
    /// Estimated from RTT samples (RFC 6298), starting at `initial`, kept within
    /// `min..=max`; each retransmission doubles the request's own timeout up to `max`.
    Adaptive {
        /// Before the first sample.
        initial: Duration,
        /// Lower bound.
        min: Duration,
        /// Upper bound.
        max: Duration,
    },
}

/// Window settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Most requests outstanding at once (at least 1).
    pub window: usize,
    /// The retransmit timeout.
    pub rto: Rto,
    /// Sends per request, the first included, before it gives up (at least 1).
    pub max_tries: u32,
}

/// A request that gave up, from [`Window::poll_event`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event<T> {
    /// No reply after `tries` sends.
    TimedOut {
        /// The caller's token.
        token: T,
        /// The request's sequence number.
        seq: u16,
        /// How many times it was sent.
        tries: u32,
        /// The request's bytes, returned for reuse.
        request: Vec<u8>,
    },
}

/// What [`Window::handle_reply`] made of a datagram.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use = "a completed or failed request is reported only here"]
pub enum ReplyOutcome<T> {
    /// The reply completed this request; the reply bytes are still the caller's.
    Completed {
        /// The caller's token.
        token: T,
        /// The request's bytes, returned for reuse.
        request: Vec<u8>,
        /// Round-trip time of the last send.
        rtt: Duration,
    },
    /// The reply failed this request for good.
    Failed {
        /// The caller's token.
        token: T,
        /// The code the reply carried.
        code: u16,
        /// The request's bytes, returned for reuse.
        request: Vec<u8>,
    },
    /// A retry-later code: the request stays outstanding and its timer will resend it.
    RetryLater,
    /// A reply for a request already completed (a late answer to a retransmission).
    Duplicate,
    /// A reply matching no request, or bytes that are not a reply.
    Unknown,
}

/// Counters kept by the window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Requests sent for the first time.
    pub sent: u64,
    /// Retransmissions.
    pub retransmits: u64,
    /// Retransmit timer expiries.
    pub timeouts: u64,
    /// Requests that gave up after their last try.
    pub gave_up: u64,
    /// Requests completed.
    pub completed: u64,
    /// Requests failed by a fatal reply.
    pub failed: u64,
    /// Retry-later replies.
    pub retry_replies: u64,
    /// Replies to requests already completed.
    pub duplicates: u64,
    /// Replies matching nothing, or not replies at all.
    pub unknown: u64,
}

/// The sliding window. `P` knows the packet format, `T` is the caller's per-request token.
#[derive(Debug)]
pub struct Window<P, T> {
    protocol: P,
    config: Config,
    queue: VecDeque<(Vec<u8>, T)>,
    slots: Vec<Slot<T>>,
    events: VecDeque<Event<T>>,
    next_seq: u16,
    /// One bit per sequence number: completed since last assigned (to tell duplicates).
    completed: Vec<u64>,
    rtt: RttEstimator,
    stats: Stats,
}

#[derive(Debug)]
struct Slot<T> {
    seq: u16,
    bytes: Vec<u8>,
    token: T,
    last_sent: Instant,
    deadline: Instant,
    tries: u32,
    rto: Duration,
    /// Timer expired; waiting in `poll_transmit` to be resent.
    due: bool,
}

impl Config {
    /// A fixed timeout per try, as rig does.
    pub const fn fixed(timeout: Duration, max_tries: u32, window: usize) -> Self {
        Self {
            window,
            rto: Rto::Fixed(timeout),
            max_tries,
        }
    }

    /// rig's settings: window 8, 0.5 s per try, 5 tries.
    pub const fn rig() -> Self {
        Self::fixed(Duration::from_millis(500), 5, 8)
    }
}

impl Default for Config {
    /// Window 8, adaptive timeout from 100 ms within 10 ms..2 s, 8 tries: a dead peer
    /// is declared after 10 + 20 + ... + 1280 ms = 2.55 s, about rig's 5 x 0.5 s.
    fn default() -> Self {
        Self {
            window: 8,
            rto: Rto::Adaptive {
                initial: Duration::from_millis(100),
                min: Duration::from_millis(10),
                max: Duration::from_secs(2),
            },
            max_tries: 8,
        }
    }
}

impl<P: Protocol, T> Window<P, T> {
    /// A window speaking `protocol`.
    pub fn new(protocol: P, config: Config) -> Self {
        let config = Config {
            window: config.window.max(1),
            max_tries: config.max_tries.max(1),
            ..config
        };
        Self {
            protocol,
            rtt: RttEstimator::new(config.rto),
            config,
            queue: VecDeque::new(),
            slots: Vec::with_capacity(config.window),
            events: VecDeque::new(),
            next_seq: 0,
            completed: vec![0; 1 << 10],
            stats: Stats::default(),
        }
    }

    /// Queues a request; its sequence number is set when a slot frees and it is first
    /// sent. The queue is unbounded: drivers push as slots free (see [`Window::queued`]).
    pub fn push(&mut self, request: Vec<u8>, token: T) {
        self.queue.push_back((request, token));
    }

    /// The next datagram to send, if any: first a request whose timer expired (its
    /// exact bytes again), else a queued one if a slot is free. Call until it returns
    /// `None` after every `push`, `handle_reply` and `handle_timeout`.
    #[must_use]
    pub fn poll_transmit(&mut self, now: Instant) -> Option<&[u8]> {
        if let Some(i) = self.slots.iter().position(|s| s.due) {
            let slot = &mut self.slots[i];
            slot.due = false;
            slot.tries += 1;
            slot.last_sent = now;
            slot.deadline = now + slot.rto;
            self.stats.retransmits += 1;
            return Some(&self.slots[i].bytes);
        }
        if self.slots.len() >= self.config.window {
            return None;
        }
        let (mut bytes, token) = self.queue.pop_front()?;
        let seq = self.allocate_seq();
        self.protocol.set_seq(&mut bytes, seq);
        let rto = self.rtt.rto();
        self.slots.push(Slot {
            seq,
            bytes,
            token,
            last_sent: now,
            deadline: now + rto,
            tries: 1,
            rto,
            due: false,
        });
        self.stats.sent += 1;
        self.slots.last().map(|s| &s.bytes[..])
    }

    /// Feeds a datagram that arrived. Completion and failure are reported here, while
    /// the caller still holds the reply bytes; call [`Window::poll_transmit`] afterwards,
    /// since a slot may have freed.
    pub fn handle_reply(&mut self, now: Instant, reply: &[u8]) -> ReplyOutcome<T> {
        let Some((seq, outcome)) = self.protocol.classify(reply) else {
            self.stats.unknown += 1;
            return ReplyOutcome::Unknown;
        };
        let Some(i) = self.slots.iter().position(|s| s.seq == seq) else {
            return if self.is_completed(seq) {
                self.stats.duplicates += 1;
                ReplyOutcome::Duplicate
            } else {
                self.stats.unknown += 1;
                ReplyOutcome::Unknown
            };
        };
        match outcome {
            Outcome::Retry => {
                self.stats.retry_replies += 1;
                ReplyOutcome::RetryLater
            }
            Outcome::Done => {
                let slot = self.slots.swap_remove(i);
                self.mark_completed(seq);
                let rtt = now.saturating_duration_since(slot.last_sent);
                // Karn: a reply to a retransmitted request could answer any of its sends.
                if slot.tries == 1 {
                    self.rtt.sample(rtt);
                }
                self.stats.completed += 1;
                ReplyOutcome::Completed {
                    token: slot.token,
                    request: slot.bytes,
                    rtt,
                }
            }
            Outcome::Fatal(code) => {
                let slot = self.slots.swap_remove(i);
                self.mark_completed(seq);
                self.stats.failed += 1;
                ReplyOutcome::Failed {
                    token: slot.token,
                    code,
                    request: slot.bytes,
                }
            }
        }
    }

    /// Expires every request whose deadline is at or before `now`: it is resent by the
    /// next [`Window::poll_transmit`], or, out of tries, reported by
    /// [`Window::poll_event`]. Call when the instant from [`Window::poll_timeout`] passes.
    pub fn handle_timeout(&mut self, now: Instant) {
        let mut i = 0;
        while i < self.slots.len() {
            let slot = &mut self.slots[i];
            if slot.due || slot.deadline > now {
                i += 1;
                continue;
            }
            self.stats.timeouts += 1;
            if slot.tries >= self.config.max_tries {
                let slot = self.slots.swap_remove(i);
                self.stats.gave_up += 1;
                self.events.push_back(Event::TimedOut {
                    token: slot.token,
                    seq: slot.seq,
                    tries: slot.tries,
                    request: slot.bytes,
                });
                continue;
            }
            slot.due = true;
            slot.rto = self.rtt.backoff(slot.rto);
            i += 1;
        }
    }

    /// When [`Window::handle_timeout`] should next be called: the earliest deadline of
    /// an outstanding request, or `None` with nothing outstanding.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.slots
            .iter()
            .filter(|s| !s.due)
            .map(|s| s.deadline)
            .min()
    }

    /// The next request that gave up. Call after [`Window::handle_timeout`].
    #[must_use]
    pub fn poll_event(&mut self) -> Option<Event<T>> {
        self.events.pop_front()
    }

    /// Drops every queued and outstanding request and every unreported event (replies to
    /// them will count as unknown) and returns their tokens and bytes. Sequence numbers
    /// carry on.
    pub fn clear(&mut self) -> Vec<(T, Vec<u8>)> {
        let mut dropped: Vec<(T, Vec<u8>)> =
            self.slots.drain(..).map(|s| (s.token, s.bytes)).collect();
        dropped.extend(self.queue.drain(..).map(|(bytes, token)| (token, bytes)));
        dropped.extend(self.events.drain(..).map(|event| match event {
            Event::TimedOut { token, request, .. } => (token, request),
        }));
        dropped
    }

    /// Nothing queued, outstanding, or waiting to be reported.
    pub fn is_idle(&self) -> bool {
        self.queue.is_empty() && self.slots.is_empty() && self.events.is_empty()
    }

    /// Requests sent and not yet answered.
    pub fn outstanding(&self) -> usize {
        self.slots.len()
    }

    /// Requests pushed and not yet sent.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// The settings in force.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Changes the window size (at least 1); outstanding requests beyond a smaller size
    /// finish before new ones are sent.
    pub fn set_window(&mut self, window: usize) {
        self.config.window = window.max(1);
    }

    /// Replaces the timeout rule; the estimator keeps its samples.
    pub fn set_rto(&mut self, rto: Rto) {
        self.config.rto = rto;
        self.rtt.set_rule(rto);
    }

    /// The counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The RTT estimator.
    pub fn rtt(&self) -> &RttEstimator {
        &self.rtt
    }

    /// The packet format.
    pub fn protocol(&self) -> &P {
        &self.protocol
    }

    fn allocate_seq(&mut self) -> u16 {
        // At most `window` numbers are taken, so this finds a free one quickly.
        loop {
            let seq = self.next_seq;
            self.next_seq = self.next_seq.wrapping_add(1);
            if !self.slots.iter().any(|s| s.seq == seq) {
                self.completed[usize::from(seq) / 64] &= !(1 << (seq % 64));
                return seq;
            }
        }
    }

    fn mark_completed(&mut self, seq: u16) {
        self.completed[usize::from(seq) / 64] |= 1 << (seq % 64);
    }

    fn is_completed(&self, seq: u16) -> bool {
        self.completed[usize::from(seq) / 64] & (1 << (seq % 64)) != 0
    }
}
