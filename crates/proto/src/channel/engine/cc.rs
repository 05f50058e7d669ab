//! Congestion control: NewReno (RFC 6582 / RFC 9002 §7), and a pacer.
//!
//! NewReno, not CUBIC: the channel's first home is loopback and short LAN paths, where
//! CUBIC's advantage (regrowing a large window quickly on long fat paths) does not apply,
//! and NewReno's rules are few enough to prove in simulation. It halves the window once per
//! loss episode (losses of packets sent before the episode began do not halve it again),
//! grows it by one datagram per window of acknowledged bytes in congestion avoidance, and
//! doubles it per round trip in slow start.

use crate::time::{Duration, Instant};

/// The window after a retransmission timeout, and its floor: two datagrams.
const MIN_WINDOW_DATAGRAMS: u64 = 2;

#[derive(Clone, Debug)]
pub(crate) struct NewReno {
    pub(crate) window: u64,
    ssthresh: u64,
    datagram: u64,
    /// Acknowledged bytes not yet counted towards growth in congestion avoidance.
    acked: u64,
    /// Packets sent before this instant belong to the current loss episode.
    recovery_start: Option<Instant>,
}

impl NewReno {
    pub(crate) fn new(datagram: u64, initial_datagrams: u64) -> Self {
        Self {
            window: datagram * initial_datagrams.max(MIN_WINDOW_DATAGRAMS),
            ssthresh: u64::MAX,
            datagram,
            acked: 0,
            recovery_start: None,
        }
    }

    pub(crate) fn on_ack(&mut self, bytes: u64, sent: Instant) {
        if self.recovery_start.is_some_and(|start| sent <= start) {
            return;
        }
        if self.window < self.ssthresh {
            self.window += bytes;
        } else {
            self.acked += bytes;
            if self.acked >= self.window {
                self.acked -= self.window;
                self.window += self.datagram;
            }
        }
    }

    /// A packet sent at `sent` was lost, detected at `now`.
    pub(crate) fn on_loss(&mut self, sent: Instant, now: Instant) {
        if self.recovery_start.is_some_and(|start| sent <= start) {
            return;
        }
        self.recovery_start = Some(now);
        self.window = (self.window / 2).max(self.min());
        self.ssthresh = self.window;
        self.acked = 0;
    }

    /// A retransmission timeout: back to the floor, slow start to half the old window.
    pub(crate) fn on_timeout(&mut self, now: Instant) {
        self.ssthresh = (self.window / 2).max(self.min());
        self.window = self.min();
        self.recovery_start = Some(now);
        self.acked = 0;
    }

    fn min(&self) -> u64 {
        self.datagram * MIN_WINDOW_DATAGRAMS
    }
}

/// Spreads a window's datagrams over a round trip: a token bucket refilled at 1.25 x
/// window / RTT, holding at most ten datagrams, so a sender never bursts a whole window
/// into a switch's queue at once.
#[derive(Clone, Debug)]
pub(crate) struct Pacer {
    tokens: u64,
    capacity: u64,
    last: Instant,
}

impl Pacer {
    pub(crate) fn new(datagram: u64) -> Self {
        Self {
            tokens: 10 * datagram,
            capacity: 10 * datagram,
            last: Instant::ZERO,
        }
    }

    fn refill(&mut self, now: Instant, window: u64, rtt: Duration) {
        let elapsed = now.saturating_duration_since(self.last).as_micros();
        self.last = now;
        let rtt = rtt.as_micros().max(1);
        let add = (u128::from(window) * 5 * u128::from(elapsed)) / (4 * u128::from(rtt));
        self.tokens = (u128::from(self.tokens) + add).min(u128::from(self.capacity)) as u64;
    }

    /// When a datagram of `size` bytes may go: `None` now (and the tokens are taken), else
    /// the instant enough tokens will have come.
    pub(crate) fn delay(
        &mut self,
        now: Instant,
        size: u64,
        window: u64,
        rtt: Duration,
    ) -> Option<Instant> {
        self.refill(now, window, rtt);
        if self.tokens >= size {
            return None;
        }
        let missing = size - self.tokens;
        let rate_num = u128::from(window) * 5;
        let rate_den = 4 * u128::from(rtt.as_micros().max(1));
        let wait = (u128::from(missing) * rate_den).div_ceil(rate_num.max(1));
        Some(now + Duration::from_micros(wait.min(u128::from(u64::MAX)) as u64))
    }

    pub(crate) fn take(&mut self, size: u64) {
        self.tokens = self.tokens.saturating_sub(size);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn halves_once_per_episode_and_grows_back() {
        let mut cc = NewReno::new(1000, 10);
        assert_eq!(cc.window, 10_000);
        cc.on_ack(5000, Instant::from_millis(1));
        assert_eq!(cc.window, 15_000, "slow start adds what was acked");
        cc.on_loss(Instant::from_millis(2), Instant::from_millis(5));
        assert_eq!(cc.window, 7500);
        cc.on_loss(Instant::from_millis(3), Instant::from_millis(6));
        assert_eq!(
            cc.window, 7500,
            "a loss from the same episode does not halve again"
        );
        cc.on_ack(7500, Instant::from_millis(7));
        assert_eq!(
            cc.window, 8500,
            "congestion avoidance: a datagram per window acked"
        );
        cc.on_timeout(Instant::from_millis(9));
        assert_eq!(cc.window, 2000);
    }

    #[test]
    fn the_pacer_spreads_a_window_over_a_round_trip() {
        let mut p = Pacer::new(1000);
        let rtt = Duration::from_millis(10);
        let now = Instant::from_millis(100);
        let mut sent = 0;
        while p.delay(now, 1000, 100_000, rtt).is_none() {
            p.take(1000);
            sent += 1;
        }
        assert_eq!(sent, 10, "a burst of at most ten datagrams");
        let next = p.delay(now, 1000, 100_000, rtt).unwrap();
        // 100 kB per 10 ms x 1.25 = 12.5 bytes/us: 1000 bytes take 80 us.
        assert_eq!(next, now + Duration::from_micros(80));
    }
}
