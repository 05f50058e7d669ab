//! The reliable UDP channel: ordered messages of any size up to a limit over datagrams
//! that may be lost, duplicated or reordered, as a sans-IO state machine (the quinn-proto
//! shape, like [`window`](crate::scp::window)).
//!
//! A [`Connection`] is one peer. Its driver feeds it [`Connection::handle_datagram`] for
//! every datagram from the peer and [`Connection::handle_timeout`] once
//! [`Connection::poll_timeout`] has passed, and drains [`Connection::poll_transmit`]
//! (datagrams to send) and [`Connection::poll_event`] (connected, a message, closed).
//! [`Connection::send`] queues a message: one buffer, or [`Pieces`] the caller owns,
//! which are never joined (each fragment is read from one piece straight into its
//! datagram). Its datagram format is [`packet`].
//!
//! - **Setup**: the client's initial packet (padded to 1200 bytes, as QUIC pads, so the
//!   server may answer it before the client's address is proven) carries its limits; the
//!   server's accept carries its own. Connection ids are chosen at random by each end. Until
//!   the client has proven its address (by sending a packet to the id only the accept told
//!   it), the server sends at most three times the bytes it received.
//! - **Messages** are placed in one stream of message bytes; each is cut into fragments
//!   that fit a datagram, several fragments (of one message or of many small ones) share a
//!   datagram, and an acknowledgement rides on any datagram going that way. The receiver
//!   copies each fragment once, straight into its message's buffer, whatever order they
//!   come in, and hands messages over in order. Head-of-line: a message is delivered only
//!   after every message before it, so a 16 MiB message delays the small ones queued
//!   behind it until it is whole.
//! - **Reliability**: packet numbers are never reused (a retransmission carries the lost
//!   fragments in a new packet), so every RTT sample is unambiguous, which is what Karn's
//!   rule asks for; acknowledgements are QUIC-style ranges; a packet is lost once one sent
//!   three later is acknowledged (fast retransmit) or a packet sent later was acknowledged
//!   and 9/8 of an RTT has passed (a timer of its own, not the next acknowledgement, says
//!   when); a lost last packet, which nothing later reveals, draws a tail-loss probe after
//!   RFC 9002's probe timeout (the newest packet sent again, past the window, without
//!   shrinking it); otherwise the RFC 6298 timeout (doubling while no acknowledgement
//!   comes) retransmits everything outstanding and collapses the window. Duplicates
//!   (packets and fragments) are recognised and dropped.
//! - **Congestion and flow**: NewReno (see `cc`), a pacer that releases at most ten
//!   datagrams at once, and the receiver's window: the sender may send message bytes only
//!   below the position the receiver advertises, which is what the application has taken
//!   plus [`Config::window`]; a receiver that takes nothing stops the sender.
//! - **Teardown**: [`Connection::close`] sends a close frame; a peer silent for
//!   [`Config::idle_timeout`] ends the connection with [`Closed::TimedOut`]; keep-alive
//!   pings go out when nothing else has for [`Config::keep_alive`].
//!
//! ```
//! use volley_proto::channel::{Config, Connection, Event};
//! use volley_proto::time::{Duration, Instant};
//!
//! # fn main() -> Result<(), volley_proto::channel::ConfigError> {
//! let config = Config::default();
//! let mut client = Connection::client(config, 1, 2)?;
//! let mut server = Connection::server(config, 3)?;
//! client.send(b"hello".to_vec()).unwrap();
//!
//! // A perfect link: move every datagram across, both ways, until both are quiet.
//! let mut now = Instant::ZERO;
//! let mut buf = vec![0u8; 1500];
//! for _ in 0..10 {
//!     while let Some(n) = client.poll_transmit(now, &mut buf) {
//!         server.handle_datagram(now, &buf[..n]);
//!     }
//!     while let Some(n) = server.poll_transmit(now, &mut buf) {
//!         client.handle_datagram(now, &buf[..n]);
//!     }
//!     now = now + Duration::from_micros(100);
//! }
//! assert!(matches!(client.poll_event(), Some(Event::Connected)));
//! assert!(matches!(server.poll_event(), Some(Event::Connected)));
//! assert_eq!(server.poll_event(), Some(Event::Message(b"hello".to_vec())));
//! # Ok(())
//! # }
//! ```

pub mod packet;

#[cfg(feature = "alloc")]
mod engine;

#[cfg(feature = "alloc")]
pub use engine::*;
