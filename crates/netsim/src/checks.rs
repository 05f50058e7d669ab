//! Checks the testbed's settings share (the link simulator's and the emulator's): the
//! longest delay a setting takes, fractions, and how a dead thread's panic is reported.

use core::time::Duration;
use std::io;

/// The longest delay, jitter or latency the emulator and the link simulator take: an hour.
pub const MAX_DELAY: Duration = Duration::from_secs(3600);

/// `Ok` if `value` is at most [`MAX_DELAY`], else an `InvalidInput` error naming `what`.
pub fn check_delay(what: &str, value: Duration) -> io::Result<()> {
    if value > MAX_DELAY {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("a {what} of {value:?} is over the limit of one hour"),
        ));
    }
    Ok(())
}

/// `Ok` if `value` is in 0..=1, else an `InvalidInput` error naming `what`.
pub fn check_fraction(what: &str, value: f64) -> io::Result<()> {
    if !(0.0..=1.0).contains(&value) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("a {what} of {value} is not a fraction between 0 and 1"),
        ));
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
