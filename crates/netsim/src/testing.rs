//! Helpers for integration tests: a link simulator in front of an address, in one call.
//!
//! ```
//! use std::net::UdpSocket;
//! use volley_netsim::LinkConfig;
//!
//! let upstream = UdpSocket::bind("127.0.0.1:0").unwrap();
//! let link = volley_netsim::testing::relay(upstream.local_addr().unwrap(), LinkConfig::default());
//! assert!(link.local_addr().ip().is_loopback());
//! ```

use core::net::SocketAddr;

use crate::{LinkConfig, LinkSim};

/// A UDP relay on `127.0.0.1` (a port the kernel picks) to `upstream` with `config`.
/// Panics, saying why, if it cannot start: a test cannot go on without it.
pub fn relay(upstream: SocketAddr, config: LinkConfig) -> LinkSim {
    LinkSim::start("127.0.0.1:0".parse().expect("an address"), upstream, config)
        .unwrap_or_else(|e| panic!("the link simulator cannot start in front of {upstream}: {e}"))
}
