//! One rule for where a board, a machine or a server is: `HOST`, `HOST:PORT`,
//! `[V6]:PORT` or a bare IPv6 address, names and IP addresses alike, with a default port
//! where none is given. `Board`, `Machine` and `accelerate` in Python and the CLI's
//! `--target`, `--machine` and `--connect` all take it.
//!
//! ```
//! use volley_transport_udp::target::split;
//!
//! assert_eq!(split("127.0.0.2", 17893), Ok(("127.0.0.2", 17893)));
//! assert_eq!(split("board-7:5000", 17893), Ok(("board-7", 5000)));
//! assert_eq!(split("[::1]:5000", 17893), Ok(("::1", 5000)));
//! assert_eq!(split("::1", 17893), Ok(("::1", 17893)));
//! assert!(split("host:70000", 17893).is_err());
//! ```

use core::net::SocketAddr;
use std::io;

/// `target` as its host and port (`default_port` where it names none), or why it names
/// neither.
pub fn split(target: &str, default_port: u16) -> Result<(&str, u16), String> {
    let port = |text: &str| match text.parse::<u16>() {
        Ok(port) if port > 0 => Ok(port),
        _ => Err(format!("`{text}` in `{target}` is not a port (1 to 65535)")),
    };
    let (host, port) = if let Some(rest) = target.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or_else(|| format!("`{target}` opens `[` and never closes it"))?;
        match after {
            "" => (host, default_port),
            _ => match after.strip_prefix(':') {
                Some(p) => (host, port(p)?),
                None => return Err(format!("`{target}`: after `]` comes `:PORT` or nothing")),
            },
        }
    } else {
        match target.matches(':').count() {
            0 => (target, default_port),
            // An IPv6 address with a port is written in brackets.
            1 => {
                let (host, p) = target.split_once(':').unwrap_or((target, ""));
                (host, port(p)?)
            }
            _ => (target, default_port),
        }
    };
    if host.is_empty() {
        return Err(format!("`{target}` names no host"));
    }
    Ok((host, port))
}

/// `host` and `port` as one target that [`split`] and the resolver read back (an IPv6
/// address in brackets).
pub fn join(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Every address `target` resolves to, IPv4 first.
pub async fn lookup(target: &str, default_port: u16) -> io::Result<Vec<SocketAddr>> {
    let (host, port) = split(target, default_port)
        .map_err(|why| io::Error::new(io::ErrorKind::InvalidInput, why))?;
    let mut addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, port)).await?.collect();
    addrs.sort_by_key(|a| !a.is_ipv4());
    if addrs.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("`{target}` names no address"),
        ));
    }
    Ok(addrs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_is_read_alike() {
        assert_eq!(split("h", 1), Ok(("h", 1)));
        assert_eq!(split("h:2", 1), Ok(("h", 2)));
        assert_eq!(split("[fe80::1]", 1), Ok(("fe80::1", 1)));
        assert_eq!(split("[fe80::1]:3", 1), Ok(("fe80::1", 3)));
        assert_eq!(split("fe80::1", 1), Ok(("fe80::1", 1)));
        for bad in ["", ":5", "h:", "h:0", "h:x", "[::1", "[::1]5", "[]:5"] {
            assert!(split(bad, 1).is_err(), "{bad}");
        }
        assert_eq!(join("::1", 5), "[::1]:5");
        assert_eq!(join("h", 5), "h:5");
    }
}
