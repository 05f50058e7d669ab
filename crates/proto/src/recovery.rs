//! Loss recovery's clock, shared by both reliability machines (the SCP [`window`] and the
//! UDP [`channel`]): RTT estimation (RFC 6298's smoothed RTT and variance, with RFC 9002's
//! adjustment for the peer's ack delay), the retransmission timeout within its bounds and
//! its backoff, the probe timeout, and the loss delay. Each machine keeps its own timers
//! (the window one per request, the channel one per connection) and asks this module how
//! long each should be.
//!
//! ```
//! use volley_proto::recovery::{Rto, RtoBounds, RttEstimator};
//! use volley_proto::time::Duration;
//!
//! let ms = Duration::from_millis;
//! let mut rtt = RttEstimator::new(Rto::Adaptive(RtoBounds::new(ms(100), ms(10), ms(2000))));
//! assert_eq!(rtt.rto(), ms(100), "before any sample: the initial timeout");
//! rtt.sample(ms(20), Duration::ZERO);
//! assert_eq!(rtt.rto(), ms(60), "SRTT + 4 RTTVAR = 20 + 4 x 10 ms");
//! assert_eq!(rtt.backed_off(2), ms(240), "doubled per timeout in a row");
//! assert_eq!(rtt.loss_delay(), Duration::from_micros(22_500), "9/8 of the RTT");
//! ```
//!
//! [`window`]: crate::scp::window
//! [`channel`]: crate::channel

use crate::time::Duration;

/// Where an adaptive retransmission timeout starts and the range it stays in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RtoBounds {
    /// Before the first RTT sample.
    pub initial: Duration,
    /// Lower bound.
    pub min: Duration,
    /// Upper bound.
    pub max: Duration,
}

impl RtoBounds {
    /// Bounds from their three values.
    pub const fn new(initial: Duration, min: Duration, max: Duration) -> Self {
        Self { initial, min, max }
    }

    /// `value` within `min..=max` (at least `min` if the two cross).
    pub fn clamp(&self, value: Duration) -> Duration {
        if value < self.min {
            self.min
        } else if value > self.max {
            self.max.max(self.min)
        } else {
            value
        }
    }
}

/// How the retransmission timeout is chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rto {
    /// The same timeout for every try (rig: 0.5 s).
    Fixed(Duration),
    /// Estimated from RTT samples (RFC 6298) within its bounds; each retransmission in a
    /// row doubles it, up to the bound.
    Adaptive(RtoBounds),
}

/// Smoothed RTT, its variance, the latest sample, and the timeouts they give.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RttEstimator {
    rule: Rto,
    srtt: Option<Duration>,
    rttvar: Duration,
    latest: Option<Duration>,
}

/// The least a probe timeout allows for the RTT's variation (RFC 9002's kGranularity).
const GRANULARITY: Duration = Duration::from_millis(1);

impl RttEstimator {
    /// An estimator with no samples yet.
    pub const fn new(rule: Rto) -> Self {
        Self {
            rule,
            srtt: None,
            rttvar: Duration::ZERO,
            latest: None,
        }
    }

    /// Replaces the rule, keeping the samples.
    pub fn set_rule(&mut self, rule: Rto) {
        self.rule = rule;
    }

    /// Takes an RTT sample from something sent once, less `ack_delay`, the time the peer
    /// says it held its acknowledgement, unless that would leave under a microsecond
    /// (RFC 9002 §5.3). A request/response peer that answers at once gives zero.
    pub fn sample(&mut self, rtt: Duration, ack_delay: Duration) {
        let rtt = if rtt > ack_delay + Duration::from_micros(1) {
            Duration::from_micros(rtt.as_micros() - ack_delay.as_micros())
        } else {
            rtt
        };
        self.latest = Some(rtt);
        let r = rtt.as_micros();
        match self.srtt {
            // (2.2) SRTT <- R, RTTVAR <- R/2
            None => {
                self.srtt = Some(rtt);
                self.rttvar = Duration::from_micros(r / 2);
            }
            // (2.3) RTTVAR <- 3/4 RTTVAR + 1/4 |SRTT - R|; SRTT <- 7/8 SRTT + 1/8 R
            Some(srtt) => {
                let s = srtt.as_micros();
                let v = self.rttvar.as_micros();
                self.rttvar = Duration::from_micros((3 * v + s.abs_diff(r)) / 4);
                self.srtt = Some(Duration::from_micros((7 * s + r) / 8));
            }
        }
    }

    /// The timeout for a first send: fixed, or SRTT + 4 RTTVAR within the bounds.
    pub fn rto(&self) -> Duration {
        match self.rule {
            Rto::Fixed(timeout) => timeout,
            Rto::Adaptive(bounds) => bounds.clamp(match self.srtt {
                None => bounds.initial,
                Some(srtt) => srtt.saturating_add(self.rttvar.saturating_mul(4)),
            }),
        }
    }

    /// The timeout after a retransmission whose last timeout was `rto`: doubled within
    /// the bounds (RFC 6298 §5.5), or unchanged when fixed.
    pub fn backoff(&self, rto: Duration) -> Duration {
        match self.rule {
            Rto::Fixed(timeout) => timeout,
            Rto::Adaptive(bounds) => bounds.clamp(rto.saturating_mul(2)),
        }
    }

    /// The timeout after `timeouts` in a row: [`Self::rto`] backed off that many times
    /// (at most 16, past which every bound has long been reached).
    pub fn backed_off(&self, timeouts: u32) -> Duration {
        (0..timeouts.min(16)).fold(self.rto(), |rto, _| self.backoff(rto))
    }

    /// The probe timeout, once there is a sample: SRTT + max(4 RTTVAR, 1 ms) + the peer's
    /// largest ack delay (RFC 9002 §6.2.1).
    pub fn pto(&self, max_ack_delay: Duration) -> Option<Duration> {
        let variation = self.rttvar.saturating_mul(4).max(GRANULARITY);
        Some(self.srtt? + variation + max_ack_delay)
    }

    /// How long after a later packet was acknowledged an earlier one counts as lost: 9/8
    /// of the larger of the smoothed and the latest RTT (RFC 9002 §6.1.2), the timeout
    /// standing in for both before any sample.
    pub fn loss_delay(&self) -> Duration {
        let rtt = self.srtt.unwrap_or(self.rto());
        let latest = self.latest.unwrap_or(rtt);
        Duration::from_micros(rtt.max(latest).as_micros() * 9 / 8)
    }

    /// The smoothed RTT, once there is a sample.
    pub fn srtt(&self) -> Option<Duration> {
        self.srtt
    }

    /// The smoothed RTT, or before any sample the timeout in its place.
    pub fn srtt_or_rto(&self) -> Duration {
        self.srtt.unwrap_or(self.rto())
    }

    /// The RTT variance estimate.
    pub fn rttvar(&self) -> Duration {
        self.rttvar
    }

    /// The latest sample.
    pub fn latest(&self) -> Option<Duration> {
        self.latest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn adaptive() -> RttEstimator {
        RttEstimator::new(Rto::Adaptive(RtoBounds::new(ms(100), ms(10), ms(2000))))
    }

    #[test]
    fn the_ack_delay_comes_off_a_sample_unless_it_would_leave_nothing() {
        let mut rtt = adaptive();
        rtt.sample(ms(30), ms(10));
        assert_eq!(rtt.latest(), Some(ms(20)));
        rtt.sample(ms(5), ms(10));
        assert_eq!(
            rtt.latest(),
            Some(ms(5)),
            "a delay over the sample is ignored"
        );
    }

    #[test]
    fn timeouts_stay_in_bounds_and_double_per_timeout() {
        let mut rtt = adaptive();
        rtt.sample(Duration::from_micros(100), Duration::ZERO);
        assert_eq!(rtt.rto(), ms(10), "raised to the minimum");
        assert_eq!(rtt.backed_off(3), ms(80));
        assert_eq!(rtt.backed_off(100), ms(2000), "held at the maximum");
        let fixed = RttEstimator::new(Rto::Fixed(ms(500)));
        assert_eq!(fixed.backed_off(5), ms(500));
    }

    #[test]
    fn the_probe_timeout_needs_a_sample_and_allows_a_millisecond() {
        let mut rtt = adaptive();
        assert_eq!(rtt.pto(ms(25)), None);
        rtt.sample(ms(2), Duration::ZERO);
        // RTTVAR starts at half the sample: 4 RTTVAR = 4 ms.
        assert_eq!(rtt.pto(ms(25)), Some(ms(2) + ms(4) + ms(25)));
        for _ in 0..30 {
            rtt.sample(ms(2), Duration::ZERO);
        }
        // A steady RTT leaves RTTVAR near zero: the 1 ms floor holds.
        assert_eq!(rtt.pto(ms(25)), Some(ms(2) + ms(1) + ms(25)));
    }
}
