//! Acknowledgements, loss detection and timers: what the sender learns from the peer's
//! acks (RTT samples, the congestion window, fragments done), when a packet counts as
//! lost (packet and time thresholds, tail-loss probes, the retransmission timeout), and
//! the deadlines `poll_timeout` reports and `handle_timeout` acts on.

use alloc::vec::Vec;

use super::{ACK_DELAY, Closed, Connection, Fragment, PACKET_THRESHOLD, SentPacket, State};
use crate::channel::packet as wire;
use crate::time::{Duration, Instant};

impl Connection {
    pub(super) fn on_ack(&mut self, now: Instant, ack: &wire::Ack<'_>) {
        self.send.peer_window = self.send.peer_window.max(ack.window);
        let newly_largest = self.recovery.largest_acked.is_none_or(|l| ack.largest > l);
        let mut acked_any = false;
        let mut sample = None;
        for (lo, hi) in ack.ranges() {
            // Sent packets are in packet-number order.
            let from = self.recovery.sent.partition_point(|p| p.pn < lo);
            let to = self.recovery.sent.partition_point(|p| p.pn <= hi);
            let mut acked = core::mem::take(&mut self.recovery.scratch);
            acked.extend(self.recovery.sent.drain(from..to));
            for p in acked.drain(..) {
                acked_any = true;
                if p.pn == ack.largest && newly_largest && p.in_flight {
                    sample = Some(now.saturating_duration_since(p.time));
                }
                if p.in_flight {
                    self.recovery.in_flight -= p.size;
                    self.recovery.cc.on_ack(p.size, p.time);
                }
                for f in &p.fragments {
                    self.fragment_acked(*f);
                }
            }
            self.recovery.scratch = acked;
        }
        if !acked_any {
            return;
        }
        self.recovery.probed = false;
        if newly_largest {
            self.recovery.largest_acked = Some(ack.largest);
        }
        if let Some(rtt) = sample {
            let delay = Duration::from_micros(u64::from(ack.delay_us));
            self.recovery.rtt.sample(rtt, delay);
            self.recovery.backoff = 0;
        }
        self.detect_losses(now);
        self.pop_acked_messages();
    }

    pub(super) fn fragment_acked(&mut self, f: Fragment) {
        let i = self.send.out.partition_point(|m| m.start < f.start);
        if let Some(m) = self.send.out.get_mut(i).filter(|m| m.start == f.start) {
            if f.offset == 0 && f.len as usize == m.data.len() {
                m.whole = true;
                return;
            }
            // An empty message's one fragment stands for its first (absent) byte.
            let end = u64::from(f.offset) + u64::from(f.len.max(1));
            m.acked.insert(u64::from(f.offset), end);
        }
    }

    /// Drops whole, acknowledged messages from the front of the queue.
    pub(super) fn pop_acked_messages(&mut self) {
        // Only messages sent whole (before the cursor) can be whole acknowledged.
        while self.send.cursor > 0 {
            let Some(m) = self.send.out.front() else {
                break;
            };
            let len = m.data.len() as u64;
            if !m.whole && !m.acked.contains_all(0, len.max(1)) {
                break;
            }
            self.send.out_bytes -= len;
            self.send.out.pop_front();
            self.send.cursor -= 1;
        }
    }

    pub(super) fn detect_losses(&mut self, now: Instant) {
        let Some(largest) = self.recovery.largest_acked else {
            return;
        };
        let threshold = self.recovery.rtt.loss_delay();
        let mut lost = Vec::new();
        while let Some(p) = self.recovery.sent.front() {
            if p.pn >= largest {
                break;
            }
            let by_count = largest - p.pn >= PACKET_THRESHOLD;
            let by_time = now.saturating_duration_since(p.time) >= threshold;
            if !(by_count || by_time) {
                break;
            }
            lost.push(self.recovery.sent.pop_front().expect("front exists"));
        }
        for p in lost {
            self.packet_lost(now, p);
        }
    }

    /// When the oldest packet still unacknowledged, with a later one acknowledged, counts
    /// as lost by time: the loss timer, so it is not left to the next acknowledgement.
    pub(super) fn loss_deadline(&self) -> Option<Instant> {
        let largest = self.recovery.largest_acked?;
        let p = self.recovery.sent.front().filter(|p| p.pn < largest)?;
        Some(p.time + self.recovery.rtt.loss_delay())
    }

    /// When to send a tail-loss probe: RFC 9002's probe timeout (SRTT + max(4 RTTVAR,
    /// 1 ms) + the peer's ack delay) after the last packet that asks for an ack, once per
    /// flight, and only if it comes before the retransmission timeout. A lost last
    /// packet has no later one to reveal it; the probe does, without the timeout's
    /// collapse of the congestion window.
    pub(super) fn probe_deadline(&self) -> Option<Instant> {
        if self.recovery.probed || self.recovery.backoff > 0 || self.recovery.sent.is_empty() {
            return None;
        }
        let pto = self.recovery.rtt.pto(ACK_DELAY)?;
        let at = self.recovery.last_eliciting_sent? + pto;
        self.rto_deadline().filter(|rto| at < *rto).map(|_| at)
    }

    pub(super) fn packet_lost(&mut self, now: Instant, p: SentPacket) {
        self.stats.lost += 1;
        if p.in_flight {
            self.recovery.in_flight -= p.size;
            self.recovery.cc.on_loss(p.time, now);
        }
        self.send.retransmit.extend(p.fragments);
        if p.handshake {
            self.send.handshake_due = true;
        }
    }

    /// The receive window we advertise: what the application took plus our window.
    pub(super) fn window(&self) -> u64 {
        self.receive.taken + self.config.window
    }

    /// The next instant [`Connection::handle_timeout`] must be called, if any. Ask again
    /// after every other call: any of them may move it.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.state == State::Closed {
            return None;
        }
        // Nothing is due before the first datagram either way.
        self.receive.last_heard?;
        Timer::ALL.iter().filter_map(|&t| self.deadline(t)).min()
    }

    /// When `timer` fires, if it is armed: the one place each deadline is computed, for
    /// [`Connection::poll_timeout`] and [`Connection::handle_timeout`] alike.
    fn deadline(&self, timer: Timer) -> Option<Instant> {
        match timer {
            Timer::Idle => Some(self.receive.last_heard? + self.config.idle_timeout),
            Timer::Ack => self.receive.ack_timer,
            Timer::Pace => self.send.pace_until,
            Timer::Loss => self.loss_deadline(),
            Timer::Probe => self.probe_deadline(),
            Timer::Rto => self.rto_deadline(),
            Timer::KeepAlive => (self.state == State::Established)
                .then(|| self.send.last_sent + self.config.keep_alive),
        }
    }

    pub(super) fn rto_deadline(&self) -> Option<Instant> {
        let last = self.recovery.last_eliciting_sent?;
        if self.recovery.sent.is_empty() {
            return None;
        }
        Some(last + self.recovery.rtt.backed_off(self.recovery.backoff))
    }

    /// Acts on time passing: idle timeout, delayed acknowledgements, pacing, loss by
    /// time, probes, retransmission. Call this when the instant
    /// [`Connection::poll_timeout`] gave has come, then poll for datagrams and events.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.state == State::Closed {
            return;
        }
        self.receive.last_heard.get_or_insert(now);
        for timer in Timer::ALL {
            if self.deadline(timer).is_some_and(|t| now >= t) {
                self.fire(timer, now);
                if self.state == State::Closed {
                    return;
                }
            }
        }
    }

    /// Does what `timer` coming due means.
    fn fire(&mut self, timer: Timer, now: Instant) {
        match timer {
            Timer::Idle => self.fail(Closed::TimedOut),
            Timer::Ack => {
                self.receive.ack_timer = None;
                self.receive.ack_due = true;
            }
            Timer::Pace => self.send.pace_until = None,
            Timer::Loss => self.detect_losses(now),
            Timer::Probe => {
                // The newest packet's fragments go again, ahead of the window (the packet
                // stays outstanding: whichever copy is acknowledged first counts).
                self.recovery.probed = true;
                self.stats.probes += 1;
                if let Some(p) = self
                    .recovery
                    .sent
                    .iter()
                    .rev()
                    .find(|p| !p.fragments.is_empty())
                {
                    for f in p.fragments.iter().rev() {
                        self.send.retransmit.push_front(*f);
                    }
                }
                self.recovery.probe_due = true;
            }
            Timer::Rto => {
                self.stats.timeouts += 1;
                self.recovery.backoff += 1;
                self.recovery.cc.on_timeout(now);
                // Everything outstanding is retransmitted (RFC 6298 §5.4).
                let lost: Vec<SentPacket> = self.recovery.sent.drain(..).collect();
                for p in lost {
                    if p.in_flight {
                        self.recovery.in_flight -= p.size;
                    }
                    self.send.retransmit.extend(p.fragments);
                    if p.handshake {
                        self.send.handshake_due = true;
                    }
                }
                self.recovery.probe_due = true;
            }
            // Sending finds it due: `poll_transmit` sends the ping.
            Timer::KeepAlive => {}
        }
    }
}

/// A connection's timers, in the order [`Connection::handle_timeout`] acts on them: the
/// idle timeout first (it ends everything), retransmission last (it empties what loss
/// detection and probes look at).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Timer {
    Idle,
    Ack,
    Pace,
    Loss,
    Probe,
    Rto,
    KeepAlive,
}

impl Timer {
    const ALL: [Self; 7] = [
        Self::Idle,
        Self::Ack,
        Self::Pace,
        Self::Loss,
        Self::Probe,
        Self::Rto,
        Self::KeepAlive,
    ];
}
