//! The link simulator's setting checks: the longest delay a setting takes, fractions, the
//! typed error a setting out of range gives, and how a dead thread's panic is reported.

use core::fmt;
use core::time::Duration;
use std::io;

/// The longest delay, jitter or latency the link simulator takes: an hour (the emulator's
/// limit too).
pub const MAX_DELAY: Duration = Duration::from_secs(3600);

/// A link simulator setting out of its range, from [`LinkConfig::check`] or
/// [`TcpLinkConfig::check`]: which setting, its value, and the range it must be in.
///
/// [`LinkConfig::check`]: crate::LinkConfig::check
/// [`TcpLinkConfig::check`]: crate::tcp::TcpLinkConfig::check
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq)]
pub enum ConfigError {
    /// A delay, jitter or latency over [`MAX_DELAY`].
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
    /// A flow idle timeout outside 1 ms..=[`MAX_DELAY`].
    IdleTimeout(Duration),
    /// Room for no flow at all.
    NoFlows,
    /// Room for no TCP connection at all.
    NoConnections,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Delay { what, value } => {
                write!(f, "a {what} of {value:?} is over the limit of one hour")
            }
            Self::Fraction { what, value } => {
                write!(f, "a {what} of {value} is not a fraction between 0 and 1")
            }
            Self::IdleTimeout(value) => write!(
                f,
                "a flow idle timeout of {value:?} is out of range (1 ms to an hour)"
            ),
            Self::NoFlows => f.write_str("at least one flow must be allowed"),
            Self::NoConnections => f.write_str("max_connections must be at least 1"),
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
pub fn check_delay(what: &'static str, value: Duration) -> Result<(), ConfigError> {
    if value > MAX_DELAY {
        return Err(ConfigError::Delay { what, value });
    }
    Ok(())
}

/// `Ok` if `value` is in 0..=1, else [`ConfigError::Fraction`] naming `what`.
pub fn check_fraction(what: &'static str, value: f64) -> Result<(), ConfigError> {
    if !(0.0..=1.0).contains(&value) {
        return Err(ConfigError::Fraction { what, value });
    }
    Ok(())
}

/// The text of a panic's payload, for a task or thread that died.
pub fn panic_message(payload: &(dyn core::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_owned())
}
