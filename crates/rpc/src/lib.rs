//! volley-rpc: typed sync and one-way calls over any message link, with bulk payloads
//! carried beside the arguments and never copied.
//!
//! ```
//! use bytes::Bytes;
//! use volley_rpc::{Config, Context, Endpoint, HandlerError, link::local};
//!
//! volley_rpc::service! {
//!     /// A tiny store.
//!     pub service Store {
//!         /// Stores the bulk segments under a name; returns their length.
//!         1 => fn put(name: String) -> u64;
//!         /// Adds to a counter; nothing comes back.
//!         2 => oneway fn bump(by: u32);
//!     }
//! }
//!
//! struct Here;
//!
//! // Leaving a method out is a compile error.
//! impl StoreServer for Here {
//!     async fn put(&self, cx: Context<Store>, _name: String) -> Result<u64, HandlerError> {
//!         Ok(cx.segments().iter().map(Bytes::len).sum::<usize>() as u64)
//!     }
//!
//!     async fn bump(&self, _cx: Context<Store>, _by: u32) -> Result<(), HandlerError> {
//!         Ok(())
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let server = Endpoint::<Store>::new(Config::default())?.serve(Here.into_router());
//! let client = Endpoint::<Store>::new(Config::default())?;
//!
//! // Two tasks in one process; over TCP use `volley_rpc::serve` and
//! // `link::framed::FramedLink::connect_tcp`.
//! let (a, b) = local::pair(64);
//! let (_server, peer) = tokio::try_join!(server.connect(a), client.connect(b))?;
//! let store = StoreClient::new(peer);
//!
//! let blob = Bytes::from(vec![7u8; 1 << 20]);
//! assert_eq!(store.put("blob".into()).segments(vec![blob]).await?, 1 << 20);
//! store.bump(1).await?;
//! # Ok(())
//! # }
//! ```
//!
//! # The pieces
//! - A **service** ([`service!`]) lists methods with explicit ids, parameters and
//!   results. From it come a client (`StoreClient`: a method per call, arguments by
//!   value, options on the [`Request`]) and a server trait (`StoreServer`: a method per
//!   call, given a [`Context`]). Both ends name the service, so calls are checked at
//!   compile time, and the hello compares its [`fingerprint`](Service::FINGERPRINT) so
//!   that two builds of different definitions refuse each other at once.
//! - An [`Endpoint`] holds the settings and, to serve, a [`Router`] of handlers (a server
//!   trait's `into_router()`, or [`Router::route`] by hand). Its
//!   [`connect`](Endpoint::connect) runs the hello over a link and gives a [`Peer`]:
//!   either end can call the other, so a server's handler can call back into the client
//!   ([`Context::peer`]). Each end serves one service and calls one, the same by default:
//!   `Endpoint::<Events>::new(..)?.serve(Hub.into_router())` serves the hub's service and
//!   calls `Events` back (the `callbacks` example).
//! - A [`MessageLink`](link::MessageLink) moves messages: over transport-tcp's framed
//!   layer ([`link::framed`], TCP or Unix), over the reliable UDP channel
//!   ([`link::udp`]), or between tasks ([`link::local`]); a link written in another crate
//!   takes the same path. [`serve`] serves every connection of an [`Incoming`]: a TCP
//!   or Unix listener, the UDP channel's endpoint, or any stream of links ([`Links`]).
//!   Features pick the links: `tcp` (framed links, listeners), `udp` (the reliable UDP
//!   channel) and `local`, all on by default; `tls` (TLS 1.3 on stream links, rustls),
//!   `quic` (quinn); `postcard` adds that codec, `opentelemetry` trace context across
//!   calls (module `trace`). The benchmark service `volley rpc serve|bench` speaks is the
//!   `volley-rpc-bench` crate.
//! - Arguments and results go through a [`Codec`]: [`Bincode`] (bincode 2.0.1) by
//!   default, `Postcard` with the `postcard` feature (bincode is unmaintained:
//!   RUSTSEC-2025-0141). Bulk payloads (`Bytes`) travel as segments beside them: never
//!   through serde, never copied; [`LeArray`] reads numeric arrays from them in place.
//! - Arguments are encoded into buffers from a pool ([`PoolConfig`]), shared by `Arc` with the
//!   writer and returned when written; taking one spins a little before it waits.
//!
//! # Flow control and failure
//! Each end tells the other its *credit*, the calls it will run at once. A caller waits
//! for credit before sending, sync or one-way, so no queue grows without bound; a call
//! that arrives past the credit anyway is answered [`CallError::Busy`] at once (the
//! reader never stops reading for it, so replies keep flowing). Unknown methods, bad
//! arguments, handler errors and panics, deadlines, messages over the receiver's limit
//! (refused before sending) and shutdown each come back as their own [`CallError`]
//! while the connection goes on serving. A lost connection fails every pending call with
//! [`CallError::ConnectionLost`], which says whether the call was sent (and so may have
//! run). A [`Peer`] is one connection and stays lost; a [`Reconnecting`] client connects
//! at its first call and again whenever its connection is lost, and calls made
//! meanwhile wait for it up to their deadline (a generated client takes either). An end
//! that closes an idle connection tells the peer first, which reports
//! [`Ended::IdleClosed`], not a failure. Dropping a
//! call's future cancels it at the peer.
//!
//! # Exposure
//! A server may check each connection at its hello ([`Endpoint::require_token`], or
//! [`Endpoint::authenticate`] with a check of its own, see [`auth`]); without a check,
//! anyone who can reach the socket can call every method. Over plain TCP, Unix and UDP
//! links nothing is encrypted and a token crosses the wire in the clear: bind those to
//! loopback (the CLI's default) or a Unix socket, or use the `tls` or `quic` feature's
//! links, which encrypt and can check the client's certificate (mutual TLS).

mod array;
pub mod auth;
mod codec;
mod config;
mod context;
mod error;
pub mod link;
mod log;
mod metadata;
mod peer;
mod pool;
mod reconnecting;
mod reply;
mod request;
mod router;
mod server;
mod service;
#[cfg(feature = "opentelemetry")]
pub mod trace;

pub use array::LeArray;
pub use auth::AuthRequest;
#[cfg(feature = "postcard")]
pub use codec::Postcard;
pub use codec::{Bincode, Codec, CodecError};
pub use config::{Config, ConfigError, PoolConfig};
pub use context::Context;
pub use error::{CallError, ConnectError, Ended, HandlerError};
pub use metadata::Metadata;
pub use peer::{Endpoint, Peer, PeerStats};
pub use pool::PoolStats;
pub use reconnecting::{Caller, Reconnecting};
pub use reply::{ReplyFuture, SendFuture, ValueFuture};
pub use request::{OneWay, Request, WithSegments};
pub use router::{Call, CallCheck, Router};
/// serde, whose `Serialize` and `Deserialize` arguments and results derive: with
/// `#[serde(crate = "volley_rpc::serde")]` a crate need not depend on it itself.
pub use serde;
pub use server::{Incoming, Links, ServerHandle, ServerStats, serve};
#[cfg(feature = "tcp")]
pub use server::{Listener, listener_config};
pub use service::{Method, Reply, Service};

/// What `service!` expands to reaches its proc-macro through here.
#[doc(hidden)]
pub mod __private {
    pub use crate::service::{MethodEntry, fingerprint};
    pub use volley_rpc_macros::service;
}
