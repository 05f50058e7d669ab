//! [`LinkSim`]: a user-space link simulator. A UDP relay between clients and one upstream
//! address that delays, jitters, drops, duplicates, reorders and rate-limits datagrams in
//! each direction, from a seed, because `tc netem` is not available on our machines.
//! [`tcp::TcpLinkSim`] relays TCP connections with delay, jitter and a rate cap, so TCP
//! can run at the same RTT.
//!
//! It runs on its own thread with plain non-blocking sockets and one `epoll` set: it
//! spins (with `yield_now`) while traffic is in flight, so sub-millisecond delays hold to
//! a few microseconds (tokio's timers tick in whole milliseconds, and a sleep oversleeps by
//! the kernel's timer slack); idle, it blocks in `epoll_wait`, so its CPU stays near zero
//! however many flows are open.
//!
//! Each client address is a flow with its own socket towards the upstream (so replies
//! find their way back). A flow idle for [`LinkConfig::idle_timeout`] is closed; when
//! [`LinkConfig::max_flows`] are open, or the process is out of file descriptors, the
//! least recently used flow is closed to make room for a new one, never the new one
//! dropped.
//!
//! # Example
//!
//! ```
//! use std::net::UdpSocket;
//! use std::time::Duration;
//! use volley_netsim::{LinkConfig, LinkSim};
//!
//! # fn main() -> std::io::Result<()> {
//! let echo = UdpSocket::bind("127.0.0.1:0")?;
//! let config = LinkConfig { delay: Duration::from_millis(5), ..LinkConfig::default() };
//! let link = LinkSim::start("127.0.0.1:0".parse().unwrap(), echo.local_addr()?, config)?;
//!
//! let client = UdpSocket::bind("127.0.0.1:0")?;
//! client.set_read_timeout(Some(Duration::from_secs(5)))?;
//! echo.set_read_timeout(Some(Duration::from_secs(5)))?;
//! client.send_to(b"ping", link.local_addr())?;
//! let mut buf = [0u8; 16];
//! let (n, relay) = echo.recv_from(&mut buf)?; // 5 ms later, from the link's flow socket
//! echo.send_to(&buf[..n], relay)?;
//! let n = client.recv(&mut buf)?; // 5 ms more
//! assert_eq!(&buf[..n], b"ping");
//! assert_eq!(link.stats().delivered_up, 1);
//! # Ok(())
//! # }
//! ```

pub mod checks;
pub mod tcp;
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod testing;
mod udp;
mod worker;

pub use udp::{LinkConfig, LinkSim, LinkStats};
