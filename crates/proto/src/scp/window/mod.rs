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
//! use volley_proto::scp::window::{Config, Outcome, Protocol, ReplyOutcome, Window};
//!
//! /// A toy format: 2-byte little-endian sequence number, then a payload; a reply echoes it.
//! struct Echo;
//! impl Protocol for Echo {
//!     fn check_request(&self, request: &[u8]) -> Result<(), volley_proto::wire::Error> {
//!         match request.len() {
//!             2.. => Ok(()),
//!             n => Err(volley_proto::wire::Error::TooShort { what: "echo request", len: n as u64, min: 2 }),
//!         }
//!     }
//!     fn set_seq(&self, request: &mut [u8], seq: u16) {
//!         request[..2].copy_from_slice(&seq.to_le_bytes());
//!     }
//!     fn classify(&self, reply: &[u8]) -> Option<(u16, Outcome)> {
//!         Some((u16::from_le_bytes([*reply.first()?, *reply.get(1)?]), Outcome::Done))
//!     }
//! }
//!
//! let mut window = Window::new(Echo, Config::fixed(Duration::from_millis(500), 5, 8));
//! window.push(vec![0, 0, b'a'], "first").expect("long enough to number");
//! assert!(window.push(vec![0], "short").is_err());
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

use alloc::collections::{BinaryHeap, VecDeque};
use alloc::vec;
use alloc::vec::Vec;
use core::cmp::Reverse;

use crate::time::{Duration, Instant};

mod protocol;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_abandon;

pub use crate::recovery::{Rto, RtoBounds, RttEstimator};
pub use protocol::ScpProtocol;

/// What the window needs to know of a packet format.
pub trait Protocol {
    /// Checks that `request` is one this format can number; [`Window::push`] refuses
    /// anything else, so [`Protocol::set_seq`] only ever sees requests that passed.
    fn check_request(&self, request: &[u8]) -> Result<(), crate::wire::Error>;

    /// Writes `seq` into a request's bytes (one that [`Protocol::check_request`] took).
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
    /// The peer was busy (with this code): ignore this reply, let the request's timer
    /// resend it.
    Retry(u16),
    /// The request failed for good with this code.
    Fatal(u16),
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

/// A request [`Window::push`] would not take, handed back with why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused<T> {
    /// The request's bytes.
    pub request: Vec<u8>,
    /// The caller's token.
    pub token: T,
    /// What was wrong with it.
    pub error: crate::wire::Error,
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
        /// If the peer answered "busy": the last such code and how many such replies came.
        busy: Option<(u16, u32)>,
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
    /// A reply for a request dropped by [`Window::abandon`], or one that gave up: its
    /// sequence number is held back from new requests for as long as such a reply can
    /// come, so it can never be taken for another request's.
    Abandoned,
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
    /// Requests dropped by [`Window::abandon`] while outstanding.
    pub abandoned: u64,
    /// Replies to abandoned requests, recognised and dropped.
    pub abandoned_replies: u64,
}

/// The largest window [`Window`] takes: far below the 65 536 sequence numbers, so the
/// allocator always finds a free one at once (SCP boards take 8 requests at a time).
pub const MAX_WINDOW: usize = 1024;

/// The sliding window. `P` knows the packet format, `T` is the caller's per-request token.
///
/// Every call costs the same whatever the window size: outstanding requests sit in a ring
/// indexed by sequence number, expired ones in a queue, deadlines in a heap.
#[derive(Debug)]
pub struct Window<P, T> {
    protocol: P,
    config: Config,
    queue: VecDeque<(Vec<u8>, T)>,
    /// Outstanding requests, each at `seq & (ring.len() - 1)`; the length is a power of
    /// two at least twice the window, so a new sequence number rarely skips a slot.
    ring: Vec<Option<Slot<T>>>,
    outstanding: usize,
    /// Sequence numbers whose timer expired, oldest first, to be resent.
    due: VecDeque<u16>,
    /// Deadlines, earliest on top, each a [`Timer`]. An entry whose request has since
    /// been answered or resent is stale: skipped, and pruned from the top after every
    /// change, so the top is always live.
    timers: BinaryHeap<Reverse<Timer>>,
    /// Sends so far, modulo 2^48: tells a live timer from a stale one.
    sends: u64,
    events: VecDeque<Event<T>>,
    next_seq: u16,
    /// One bit per sequence number: completed since last assigned (to tell duplicates).
    completed: Vec<u64>,
    /// One bit per sequence number: abandoned while outstanding, not to be assigned again
    /// before its entry in `holds` expires.
    held: Vec<u64>,
    /// Held sequence numbers and when each may be assigned again, oldest first.
    holds: VecDeque<(u16, Instant)>,
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
    /// Which send set `deadline` (see `Window::sends`).
    send: u64,
    /// Timer expired; waiting in `poll_transmit` to be resent.
    due: bool,
    /// Retry-later replies to this request, and the last code among them.
    busy: Option<(u16, u32)>,
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

    /// Checks every number against what the window can do: a window of
    /// `1..=`[`MAX_WINDOW`], at least one try, and timeouts of at least 1 µs and at most
    /// [`MAX_TIMEOUT`] with `min <= max`.
    pub fn check(&self) -> Result<(), ConfigError> {
        if !(1..=MAX_WINDOW).contains(&self.window) {
            return Err(ConfigError::Window(self.window));
        }
        if self.max_tries == 0 {
            return Err(ConfigError::Tries);
        }
        let timeouts: &[(&'static str, Duration)] = match &self.rto {
            Rto::Fixed(t) => &[("timeout", *t)],
            Rto::Adaptive(RtoBounds { initial, min, max }) => {
                if min > max {
                    return Err(ConfigError::Bounds {
                        min: *min,
                        max: *max,
                    });
                }
                &[
                    ("initial timeout", *initial),
                    ("minimum timeout", *min),
                    ("maximum timeout", *max),
                ]
            }
        };
        for &(what, value) in timeouts {
            if value == Duration::ZERO || value > MAX_TIMEOUT {
                return Err(ConfigError::Timeout { what, value });
            }
        }
        Ok(())
    }

    /// How long a request with no reply at all takes to give up, before any RTT sample:
    /// the sum of its timeouts over every try. With the defaults, 100 + 200 + 400 + 800 +
    /// 1600 + 3 x 2000 ms = 9.1 s; with rig's, 5 x 0.5 s.
    pub fn give_up_after(&self) -> Duration {
        let rtt = RttEstimator::new(self.rto);
        let mut rto = rtt.rto();
        let mut total = Duration::ZERO;
        for _ in 0..self.max_tries {
            total = total.saturating_add(rto);
            rto = rtt.backoff(rto);
        }
        total
    }
}

/// The longest retransmit timeout [`Config::check`] takes: one hour.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(3600);

/// A [`Config`] the window cannot honour, from [`Config::check`].
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigError {
    /// The window is 0 or over [`MAX_WINDOW`].
    Window(usize),
    /// Zero tries.
    Tries,
    /// A timeout of zero or over [`MAX_TIMEOUT`].
    Timeout {
        /// Which one.
        what: &'static str,
        /// Its value.
        value: Duration,
    },
    /// An adaptive timeout whose minimum is over its maximum.
    Bounds {
        /// The minimum.
        min: Duration,
        /// The maximum.
        max: Duration,
    },
}

impl core::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Window(n) => write!(
                f,
                "a window of {n} requests is out of range (1..={MAX_WINDOW}; SCP boards take 8)"
            ),
            Self::Tries => f.write_str("at least one try is needed"),
            Self::Timeout { what, value } => {
                write!(f, "a {what} of {value} is out of range (1 us to 1 hour)")
            }
            Self::Bounds { min, max } => {
                write!(f, "the minimum timeout {min} is over the maximum {max}")
            }
        }
    }
}

impl core::error::Error for ConfigError {}

impl Default for Config {
    /// Window 8, adaptive timeout from 100 ms within 10 ms..2 s, 8 tries. Before any RTT
    /// sample, a dead peer is declared after 100 + 200 + 400 + 800 + 1600 + 3 x 2000 ms
    /// = 9.1 s ([`Config::give_up_after`]); once the RTT is known, after 8 timeouts
    /// starting from the estimate (10 + 20 + ... + 1280 ms = 2.55 s on a fast link).
    fn default() -> Self {
        Self {
            window: 8,
            rto: Rto::Adaptive(RtoBounds::new(
                Duration::from_millis(100),
                Duration::from_millis(10),
                Duration::from_secs(2),
            )),
            max_tries: 8,
        }
    }
}

impl<P: Protocol, T> Window<P, T> {
    /// A window speaking `protocol`. A window of 0 is taken as 1 and one over
    /// [`MAX_WINDOW`] as `MAX_WINDOW`, and `max_tries` of 0 as 1; drivers that take these
    /// numbers from a user should refuse such values first ([`Config::check`]).
    pub fn new(protocol: P, config: Config) -> Self {
        let config = Config {
            window: config.window.clamp(1, MAX_WINDOW),
            max_tries: config.max_tries.max(1),
            ..config
        };
        let mut ring = Vec::new();
        ring.resize_with(ring_len(config.window), || None);
        Self {
            protocol,
            rtt: RttEstimator::new(config.rto),
            config,
            queue: VecDeque::new(),
            ring,
            outstanding: 0,
            due: VecDeque::new(),
            timers: BinaryHeap::new(),
            sends: 0,
            events: VecDeque::new(),
            next_seq: 0,
            completed: vec![0; 1 << 10],
            held: vec![0; 1 << 10],
            holds: VecDeque::new(),
            stats: Stats::default(),
        }
    }

    /// Queues a request; its sequence number is set when a slot frees and it is first
    /// sent. The queue is unbounded: drivers push as slots free (see [`Window::queued`]).
    /// A request the protocol cannot number (too short to hold a sequence number, say) is
    /// refused and handed back.
    pub fn push(&mut self, request: Vec<u8>, token: T) -> Result<(), Refused<T>> {
        if let Err(error) = self.protocol.check_request(&request) {
            return Err(Refused {
                request,
                token,
                error,
            });
        }
        self.queue.push_back((request, token));
        Ok(())
    }

    /// The next datagram to send, if any: first a request whose timer expired (its
    /// exact bytes again), else a queued one if a slot is free. Call until it returns
    /// `None` after every `push`, `handle_reply` and `handle_timeout`.
    #[must_use]
    pub fn poll_transmit(&mut self, now: Instant) -> Option<&[u8]> {
        while let Some(seq) = self.due.pop_front() {
            let i = self.index(seq);
            // Answered while it waited here: nothing to resend.
            if !self.ring[i].as_ref().is_some_and(|s| s.seq == seq && s.due) {
                continue;
            }
            self.sends = (self.sends + 1) & Timer::SEND_MASK;
            let send = self.sends;
            let slot = self.ring[i].as_mut()?;
            slot.due = false;
            slot.tries += 1;
            slot.last_sent = now;
            slot.deadline = now + slot.rto;
            slot.send = send;
            let deadline = slot.deadline;
            self.stats.retransmits += 1;
            self.arm(deadline, send, seq);
            return self.ring[i].as_ref().map(|s| &s.bytes[..]);
        }
        if self.outstanding >= self.config.window {
            return None;
        }
        let (mut bytes, token) = self.queue.pop_front()?;
        let seq = self.allocate_seq(now);
        self.protocol.set_seq(&mut bytes, seq);
        let rto = self.rtt.rto();
        self.sends = (self.sends + 1) & Timer::SEND_MASK;
        let send = self.sends;
        let i = self.index(seq);
        self.ring[i] = Some(Slot {
            seq,
            bytes,
            token,
            last_sent: now,
            deadline: now + rto,
            tries: 1,
            rto,
            send,
            due: false,
            busy: None,
        });
        self.outstanding += 1;
        self.stats.sent += 1;
        self.arm(now + rto, send, seq);
        self.ring[i].as_ref().map(|s| &s.bytes[..])
    }

    /// Feeds a datagram that arrived. Completion and failure are reported here, while
    /// the caller still holds the reply bytes; call [`Window::poll_transmit`] afterwards,
    /// since a slot may have freed.
    pub fn handle_reply(&mut self, now: Instant, reply: &[u8]) -> ReplyOutcome<T> {
        let Some((seq, outcome)) = self.protocol.classify(reply) else {
            self.stats.unknown += 1;
            return ReplyOutcome::Unknown;
        };
        let i = self.index(seq);
        if self.ring[i].as_ref().is_none_or(|s| s.seq != seq) {
            return if bit(&self.held, seq) {
                self.stats.abandoned_replies += 1;
                ReplyOutcome::Abandoned
            } else if self.is_completed(seq) {
                self.stats.duplicates += 1;
                ReplyOutcome::Duplicate
            } else {
                self.stats.unknown += 1;
                ReplyOutcome::Unknown
            };
        }
        if let Outcome::Retry(code) = outcome {
            self.stats.retry_replies += 1;
            if let Some(slot) = self.ring[i].as_mut() {
                let count = slot.busy.map_or(0, |(_, n)| n);
                slot.busy = Some((code, count.saturating_add(1)));
            }
            return ReplyOutcome::RetryLater;
        }
        let Some(slot) = self.take(i) else {
            return ReplyOutcome::Unknown;
        };
        self.mark_completed(seq);
        match outcome {
            Outcome::Fatal(code) => {
                self.stats.failed += 1;
                ReplyOutcome::Failed {
                    token: slot.token,
                    code,
                    request: slot.bytes,
                }
            }
            Outcome::Done | Outcome::Retry(_) => {
                let rtt = now.saturating_duration_since(slot.last_sent);
                // Karn: a reply to a retransmitted request could answer any of its sends.
                if slot.tries == 1 {
                    self.rtt.sample(rtt, Duration::ZERO);
                }
                self.stats.completed += 1;
                ReplyOutcome::Completed {
                    token: slot.token,
                    request: slot.bytes,
                    rtt,
                }
            }
        }
    }

    /// Expires every request whose deadline is at or before `now`: it is resent by the
    /// next [`Window::poll_transmit`], or, out of tries, reported by
    /// [`Window::poll_event`]. Call when the instant from [`Window::poll_timeout`] passes.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(&Reverse(timer)) = self.timers.peek() {
            let (deadline, send, seq) = timer.parts();
            if deadline > now {
                break;
            }
            self.timers.pop();
            let i = self.index(seq);
            if !self.is_live(i, send, seq) {
                continue;
            }
            self.stats.timeouts += 1;
            let give_up = self.ring[i]
                .as_ref()
                .is_some_and(|s| s.tries >= self.config.max_tries);
            if give_up {
                if let Some(slot) = self.take(i) {
                    self.stats.gave_up += 1;
                    // A reply to its last send may still come: held like an abandoned
                    // request's, so it is never taken for a new request's.
                    self.hold(slot.seq, now);
                    self.events.push_back(Event::TimedOut {
                        token: slot.token,
                        seq: slot.seq,
                        tries: slot.tries,
                        busy: slot.busy,
                        request: slot.bytes,
                    });
                }
                continue;
            }
            if let Some(slot) = self.ring[i].as_mut() {
                slot.due = true;
                slot.rto = self.rtt.backoff(slot.rto);
                self.due.push_back(seq);
            }
        }
        self.prune();
    }

    /// When [`Window::handle_timeout`] should next be called: the earliest deadline of
    /// an outstanding request, or `None` with nothing outstanding.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.peek().map(|Reverse(timer)| timer.parts().0)
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
        let mut dropped: Vec<(T, Vec<u8>)> = self
            .ring
            .iter_mut()
            .filter_map(Option::take)
            .map(|s| (s.token, s.bytes))
            .collect();
        self.outstanding = 0;
        self.due.clear();
        self.timers.clear();
        dropped.extend(self.queue.drain(..).map(|(bytes, token)| (token, bytes)));
        dropped.extend(self.events.drain(..).map(|event| match event {
            Event::TimedOut { token, request, .. } => (token, request),
        }));
        dropped
    }

    /// Drops every request as [`Window::clear`] does, and holds back the sequence
    /// numbers of those that were sent: until the longest retransmit timeout the rule
    /// allows has passed after `now`, no new request is given one, and a reply carrying
    /// one is reported as [`ReplyOutcome::Abandoned`]. A driver whose operation was
    /// interrupted calls this before the next, so that no late reply to the old one can
    /// complete a new request.
    pub fn abandon(&mut self, now: Instant) -> Vec<(T, Vec<u8>)> {
        let seqs: Vec<u16> = self.ring.iter().flatten().map(|slot| slot.seq).collect();
        for seq in seqs {
            self.hold(seq, now);
        }
        self.stats.abandoned += self.outstanding as u64;
        self.clear()
    }

    /// Holds `seq` back from new requests until the longest timeout after `now`.
    fn hold(&mut self, seq: u16, now: Instant) {
        if self.holds.len() == MAX_HELD {
            // Bounded: the oldest hold is released early (after many interruptions
            // within one timeout), so the allocator always finds a number at once.
            if let Some((old, _)) = self.holds.pop_front() {
                set_bit(&mut self.held, old, false);
            }
        }
        set_bit(&mut self.held, seq, true);
        self.holds
            .push_back((seq, now + longest_timeout(self.config.rto)));
    }

    /// Nothing queued, outstanding, or waiting to be reported.
    pub fn is_idle(&self) -> bool {
        self.queue.is_empty() && self.outstanding == 0 && self.events.is_empty()
    }

    /// Requests sent and not yet answered.
    pub fn outstanding(&self) -> usize {
        self.outstanding
    }

    /// Requests pushed and not yet sent.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// The settings in force.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Changes the window size (taken into `1..=MAX_WINDOW`); outstanding requests
    /// beyond a smaller size finish before new ones are sent.
    pub fn set_window(&mut self, window: usize) {
        self.config.window = window.clamp(1, MAX_WINDOW);
        let len = ring_len(self.config.window);
        if len > self.ring.len() {
            // Distinct sequence numbers modulo n stay distinct modulo a multiple of n.
            let mut ring = Vec::new();
            ring.resize_with(len, || None);
            for slot in self.ring.drain(..).flatten() {
                let i = usize::from(slot.seq) & (len - 1);
                ring[i] = Some(slot);
            }
            self.ring = ring;
        }
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

    fn index(&self, seq: u16) -> usize {
        usize::from(seq) & (self.ring.len() - 1)
    }

    /// Removes the outstanding request at ring index `i`.
    fn take(&mut self, i: usize) -> Option<Slot<T>> {
        let slot = self.ring[i].take()?;
        self.outstanding -= 1;
        self.prune();
        Some(slot)
    }

    /// Whether a timer entry still stands for the request's current deadline.
    fn is_live(&self, i: usize, send: u64, seq: u16) -> bool {
        self.ring[i]
            .as_ref()
            .is_some_and(|s| s.seq == seq && s.send == send && !s.due)
    }

    fn arm(&mut self, deadline: Instant, send: u64, seq: u16) {
        self.timers.push(Reverse(Timer::new(deadline, send, seq)));
        // Stale entries below the top wait until they surface; once they outnumber the
        // live ones, drop them all (amortised O(1) per send, memory bounded by the
        // window).
        if self.timers.len() > 2 * self.outstanding + 16 {
            let ring = &self.ring;
            let mask = ring.len() - 1;
            self.timers.retain(|Reverse(timer)| {
                let (_, send, seq) = timer.parts();
                ring[usize::from(seq) & mask]
                    .as_ref()
                    .is_some_and(|s| s.seq == seq && s.send == send && !s.due)
            });
        }
    }

    /// Pops stale entries off the top of the timer heap, so `poll_timeout` is exact.
    fn prune(&mut self) {
        while let Some(&Reverse(timer)) = self.timers.peek() {
            let (_, send, seq) = timer.parts();
            if self.is_live(self.index(seq), send, seq) {
                break;
            }
            self.timers.pop();
        }
    }

    fn allocate_seq(&mut self, now: Instant) -> u16 {
        while let Some(&(seq, until)) = self.holds.front() {
            if until > now {
                break;
            }
            self.holds.pop_front();
            set_bit(&mut self.held, seq, false);
        }
        // Fewer than `window` requests are outstanding and the ring holds at least twice
        // that many slots, so a free one is found within a step or two; at most
        // `MAX_HELD` of the 65 536 numbers are held back.
        loop {
            let seq = self.next_seq;
            self.next_seq = self.next_seq.wrapping_add(1);
            if self.ring[self.index(seq)].is_none() && !bit(&self.held, seq) {
                set_bit(&mut self.completed, seq, false);
                return seq;
            }
        }
    }

    fn mark_completed(&mut self, seq: u16) {
        set_bit(&mut self.completed, seq, true);
    }

    fn is_completed(&self, seq: u16) -> bool {
        bit(&self.completed, seq)
    }
}

/// The most sequence numbers [`Window::abandon`] holds back at once: a quarter of them.
const MAX_HELD: usize = 1 << 14;

/// The longest timeout a request can wait under `rto`: a reply later than that after
/// its last send is not waited for by anyone.
fn longest_timeout(rto: Rto) -> Duration {
    match rto {
        Rto::Fixed(timeout) => timeout,
        Rto::Adaptive(bounds) => bounds.max.max(bounds.initial),
    }
}

fn bit(bits: &[u64], seq: u16) -> bool {
    bits[usize::from(seq) / 64] & (1 << (seq % 64)) != 0
}

fn set_bit(bits: &mut [u64], seq: u16, on: bool) {
    let word = &mut bits[usize::from(seq) / 64];
    if on {
        *word |= 1 << (seq % 64);
    } else {
        *word &= !(1 << (seq % 64));
    }
}

/// A deadline, the send that set it (its low 48 bits: a stale timer is one whose send
/// no longer matches its slot's) and the sequence number, packed into one integer so
/// the heap compares them in one step, earliest deadline first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Timer(u128);

impl Timer {
    const SEND_MASK: u64 = (1 << 48) - 1;

    fn new(deadline: Instant, send: u64, seq: u16) -> Self {
        Self(
            u128::from(deadline.as_micros()) << 64
                | u128::from(send & Self::SEND_MASK) << 16
                | u128::from(seq),
        )
    }

    /// The deadline, the send's low 48 bits, and the sequence number.
    fn parts(self) -> (Instant, u64, u16) {
        (
            Instant::from_micros((self.0 >> 64) as u64),
            (self.0 >> 16) as u64 & Self::SEND_MASK,
            self.0 as u16,
        )
    }
}

/// Ring slots for a window of `window`: a power of two, at least twice the window.
fn ring_len(window: usize) -> usize {
    (window.max(1) * 2).next_power_of_two()
}
