//! The retransmit-timeout estimator: RFC 6298's smoothed RTT and variance, bounded, or a
//! fixed timeout.

use super::Rto;
use crate::time::Duration;

/// Smoothed RTT, its variance and the timeout they give (RFC 6298 §2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RttEstimator {
    rule: Rto,
    srtt: Option<Duration>,
    rttvar: Duration,
    latest: Option<Duration>,
}

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

    /// Takes an RTT sample from a request sent once.
    pub fn sample(&mut self, rtt: Duration) {
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

    /// The timeout for a first send: fixed, or SRTT + 4 * RTTVAR within the bounds.
    pub fn rto(&self) -> Duration {
        match self.rule {
            Rto::Fixed(timeout) => timeout,
            Rto::Adaptive { initial, min, max } => {
                let rto = match self.srtt {
                    None => initial,
                    Some(srtt) => srtt.saturating_add(self.rttvar.saturating_mul(4)),
                };
                clamp(rto, min, max)
            }
        }
    }

    /// The timeout after a retransmission of a request whose last timeout was `rto`:
    /// doubled within the bounds (RFC 6298 §5.5), or unchanged when fixed.
    pub fn backoff(&self, rto: Duration) -> Duration {
        match self.rule {
            Rto::Fixed(timeout) => timeout,
            Rto::Adaptive { min, max, .. } => clamp(rto.saturating_mul(2), min, max),
        }
    }

    /// The smoothed RTT, once there is a sample.
    pub fn srtt(&self) -> Option<Duration> {
        self.srtt
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

fn clamp(value: Duration, min: Duration, max: Duration) -> Duration {
    if value < min {
        min
    } else if value > max {
        max.max(min)
    } else {
        value
    }
}
