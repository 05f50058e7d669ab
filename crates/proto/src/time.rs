//! Microsecond time for the sans-IO state machines: an [`Instant`] is a count of
//! microseconds since an epoch the driver picks, a [`Duration`] a count of microseconds.
//! Drivers convert from their own clocks; the machines never read one.

use core::fmt;
use core::ops::{Add, AddAssign, Sub};

/// A point in time, in microseconds since an epoch chosen by whoever drives the machine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant {
    micros: u64,
}

/// A span of time in microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Duration {
    micros: u64,
}

impl Instant {
    /// The epoch itself.
    pub const ZERO: Self = Self { micros: 0 };

    /// An instant `micros` microseconds after the epoch.
    pub const fn from_micros(micros: u64) -> Self {
        Self { micros }
    }

    /// An instant `millis` milliseconds after the epoch (saturating).
    pub const fn from_millis(millis: u64) -> Self {
        Self {
            micros: millis.saturating_mul(1000),
        }
    }

    /// Microseconds since the epoch.
    pub const fn as_micros(self) -> u64 {
        self.micros
    }

    /// The time from `earlier` to `self`, zero if `earlier` is later.
    pub const fn saturating_duration_since(self, earlier: Self) -> Duration {
        Duration {
            micros: self.micros.saturating_sub(earlier.micros),
        }
    }
}

impl Duration {
    /// No time at all.
    pub const ZERO: Self = Self { micros: 0 };
    /// The longest representable span.
    pub const MAX: Self = Self { micros: u64::MAX };

    /// A span of `micros` microseconds.
    pub const fn from_micros(micros: u64) -> Self {
        Self { micros }
    }

    /// A span of `millis` milliseconds (saturating).
    pub const fn from_millis(millis: u64) -> Self {
        Self {
            micros: millis.saturating_mul(1000),
        }
    }

    /// A span of `secs` seconds (saturating).
    pub const fn from_secs(secs: u64) -> Self {
        Self {
            micros: secs.saturating_mul(1_000_000),
        }
    }

    /// The span in microseconds.
    pub const fn as_micros(self) -> u64 {
        self.micros
    }

    /// The span in whole milliseconds, rounded down.
    pub const fn as_millis(self) -> u64 {
        self.micros / 1000
    }

    /// `self * factor`, saturating at [`Duration::MAX`].
    pub const fn saturating_mul(self, factor: u64) -> Self {
        Self {
            micros: self.micros.saturating_mul(factor),
        }
    }

    /// `self + other`, saturating at [`Duration::MAX`].
    pub const fn saturating_add(self, other: Self) -> Self {
        Self {
            micros: self.micros.saturating_add(other.micros),
        }
    }

    /// `self - other`, zero if `other` is longer.
    pub const fn saturating_sub(self, other: Self) -> Self {
        Self {
            micros: self.micros.saturating_sub(other.micros),
        }
    }
}

impl Add<Duration> for Instant {
    type Output = Self;

    /// Saturates at the latest representable instant rather than wrapping.
    fn add(self, rhs: Duration) -> Self {
        Self {
            micros: self.micros.saturating_add(rhs.micros),
        }
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, rhs: Duration) {
        *self = *self + rhs;
    }
}

impl Sub for Instant {
    type Output = Duration;

    /// The span between two instants, zero if `rhs` is later.
    fn sub(self, rhs: Self) -> Duration {
        self.saturating_duration_since(rhs)
    }
}

impl Add for Duration {
    type Output = Self;

    fn add(self, rhs: Self) -> Self {
        self.saturating_add(rhs)
    }
}

impl From<core::time::Duration> for Duration {
    /// Saturates spans too long for a `u64` of microseconds.
    fn from(d: core::time::Duration) -> Self {
        Self {
            micros: u64::try_from(d.as_micros()).unwrap_or(u64::MAX),
        }
    }
}

impl From<Duration> for core::time::Duration {
    fn from(d: Duration) -> Self {
        Self::from_micros(d.micros)
    }
}

impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.micros % 1000 == 0 {
            write!(f, "{} ms", self.micros / 1000)
        } else {
            write!(f, "{} us", self.micros)
        }
    }
}

impl fmt::Display for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "t+{} us", self.micros)
    }
}

#[cfg(test)]
mod tests {
    use std::string::ToString;

    use super::*;

    #[test]
    fn arithmetic_saturates_instead_of_wrapping() {
        let t = Instant::from_millis(5);
        assert_eq!((t + Duration::from_millis(3)).as_micros(), 8000);
        assert_eq!(Instant::from_millis(2) - t, Duration::ZERO);
        assert_eq!(t - Instant::from_millis(2), Duration::from_millis(3));
        assert_eq!(
            (Instant::from_micros(u64::MAX) + Duration::from_secs(1)).as_micros(),
            u64::MAX
        );
        assert_eq!(Duration::MAX.saturating_mul(2), Duration::MAX);
    }

    #[test]
    fn converts_to_and_from_core_durations() {
        let d = Duration::from(core::time::Duration::from_millis(1500));
        assert_eq!(d.as_micros(), 1_500_000);
        assert_eq!(
            core::time::Duration::from(d),
            core::time::Duration::from_millis(1500)
        );
        assert_eq!(Duration::from(core::time::Duration::MAX), Duration::MAX);
        assert_eq!(Duration::from_millis(2).to_string(), "2 ms");
    }
}
