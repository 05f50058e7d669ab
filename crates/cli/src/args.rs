//! The parsers of numbers and addresses the subcommands' arguments share: each checks its
//! range and says what it takes, before anything is opened.

use volley_transport_udp::target;

/// Parses a fraction in 0..=1 (0.05 = 5%).
pub(crate) fn fraction(text: &str) -> Result<f64, String> {
    let value: f64 = text
        .parse()
        .map_err(|e| format!("`{text}` is not a number: {e}"))?;
    if (0.0..=1.0).contains(&value) {
        Ok(value)
    } else {
        Err(format!(
            "{value} is not a fraction between 0 and 1 (0.05 = 5%)"
        ))
    }
}

/// Parses non-negative fractional milliseconds into a duration.
pub(crate) fn millis(text: &str) -> Result<core::time::Duration, String> {
    duration(text, "milliseconds", 1e3)
}

/// Parses non-negative fractional microseconds into a duration.
pub(crate) fn micros(text: &str) -> Result<core::time::Duration, String> {
    duration(text, "microseconds", 1e6)
}

/// Parses a non-negative fraction of `per_second`ths of a second.
fn duration(text: &str, unit: &str, per_second: f64) -> Result<core::time::Duration, String> {
    let value: f64 = text
        .parse()
        .map_err(|e| format!("`{text}` is not a number: {e}"))?;
    if !(value.is_finite() && value >= 0.0) {
        return Err(format!("{value} is not a non-negative number of {unit}"));
    }
    // Too large for any duration; smaller but still absurd values reach the library,
    // which says what its limit is.
    core::time::Duration::try_from_secs_f64(value / per_second)
        .map_err(|_| format!("{text} {unit} is too long (the limit is one hour)"))
}

/// --duration: more than 0 s, at most a week.
pub(crate) fn duration_secs(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(secs) if secs > 0.0 && secs <= 7.0 * 86400.0 => Ok(secs),
        _ => Err(format!(
            "{text:?}: seconds from 0 (excluded) to 604800 (a week)"
        )),
    }
}

/// --rate: calls a second, from one a day to ten million.
pub(crate) fn rate_per_sec(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(rate) if (1.0 / 86400.0..=1e7).contains(&rate) => Ok(rate),
        _ => Err(format!(
            "{text:?}: calls a second from 0.0000116 (one a day) to 10000000"
        )),
    }
}

/// Decimal seconds, 0.1 to 3600.
pub(crate) fn seconds(text: &str) -> Result<f64, String> {
    let s: f64 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds"))?;
    if !(0.1..=3600.0).contains(&s) {
        return Err(format!("{text} s is out of range: 0.1 to 3600"));
    }
    Ok(s)
}

/// [`seconds`], or 0 for off.
pub(crate) fn seconds_or_off(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(0.0) => Ok(0.0),
        _ => seconds(text),
    }
}

/// `--connect`'s HOST:PORT (the one address rule, with no default port).
pub(crate) fn host_port(text: &str) -> Result<String, String> {
    match target::split(text, 0)? {
        (_, 0) => Err(format!("`{text}` names no port: HOST:PORT")),
        _ => Ok(text.to_owned()),
    }
}

/// A 32-bit address in hex, with or without `0x`.
pub(crate) fn hex(s: &str) -> Result<u32, String> {
    let digits = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .unwrap_or(s);
    // from_str_radix would take a leading '+'.
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("`{s}` is not a 32-bit hex address (0x60000000)"));
    }
    u32::from_str_radix(digits, 16).map_err(|e| format!("`{s}` is not a 32-bit hex address: {e}"))
}

/// A count of 1 or more.
pub(crate) fn at_least_one(arg: &str) -> Result<usize, String> {
    match arg.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}
