//! The range checks every emulator setting passes before anything is bound, and the typed
//! error a setting out of range gives: a leaf that the settings and the cost model share.

use core::time::Duration;
use std::io;

/// The longest delay or latency a setting takes: an hour (the link simulator's limit too).
pub const MAX_DELAY: Duration = Duration::from_secs(3600);

/// An emulator setting out of its range, from [`BoardConfig::check`](crate::BoardConfig::check) or
/// [`ScampCosts::check`](crate::ScampCosts::check): which setting, its value, and the range it must be in.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq)]
pub enum ConfigError {
    /// A delay or latency over [`MAX_DELAY`].
    Delay {
        /// Which one.
        what: &'static str,
        /// Its value.
        value: Duration,
    },
    /// A chance outside 0..=1.
    Fraction {
        /// Which one.
        what: &'static str,
        /// Its value.
        value: f64,
    },
    /// A spin over a second.
    Spin(Duration),
    /// A cap of no TCP connections.
    NoTcpConnections,
    /// A transient-tag pool of none.
    NoTags,
    /// A transient-tag timeout code outside 0..=15.
    Tto(u8),
    /// No P2P streams.
    NoStreams,
    /// No message buffers.
    NoBuffers,
}

impl core::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Delay { what, value } => {
                write!(f, "a {what} of {value:?} is over the limit of one hour")
            }
            Self::Fraction { what, value } => {
                write!(f, "a {what} of {value} is not a fraction between 0 and 1")
            }
            Self::Spin(spin) => write!(f, "a spin of {spin:?} is over a second"),
            Self::NoTcpConnections => f.write_str("a cap of 0 TCP connections accepts nothing"),
            Self::NoTags => f.write_str("a transient-tag pool of 0 answers nothing over UDP"),
            Self::Tto(code) => write!(f, "transient-tag timeout code {code} is not in 0..=15"),
            Self::NoStreams => f.write_str("0 P2P streams can reach no chip without Ethernet"),
            Self::NoBuffers => f.write_str("0 message buffers can hold no request"),
        }
    }
}

impl core::error::Error for ConfigError {}

impl From<ConfigError> for io::Error {
    /// An `InvalidInput` error whose inner error is the typed one.
    fn from(e: ConfigError) -> Self {
        Self::new(io::ErrorKind::InvalidInput, e)
    }
}

/// `Ok` if `value` is at most [`MAX_DELAY`], else [`ConfigError::Delay`] naming `what`.
pub(crate) fn check_delay(what: &'static str, value: Duration) -> Result<(), ConfigError> {
    if value > MAX_DELAY {
        return Err(ConfigError::Delay { what, value });
    }
    Ok(())
}

/// `Ok` if `value` is in 0..=1, else [`ConfigError::Fraction`] naming `what`.
pub(crate) fn check_fraction(what: &'static str, value: f64) -> Result<(), ConfigError> {
    if !(0.0..=1.0).contains(&value) {
        return Err(ConfigError::Fraction { what, value });
    }
    Ok(())
}
