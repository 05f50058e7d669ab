//! Pipelined request/response over any byte stream, in SFTP-style frames
//! (`u32 BE length | u8 type | u32 BE id | body`), without copying payloads and with one
//! wake-up per batch of replies, for clients and servers alike.
//!
//! Two layers:
//!
//! - [`Framed`] (below): frames out with any type and id ([`Framed::send`]), frames in
//!   that answer none of this end's requests as [`Unsolicited`]. A server uses it as it
//!   is: [`Listener`] accepts TCP or Unix connections with a cap on how many are open, a
//!   back-off while out of file descriptors, and an idle timeout.
//! - [`Connection`] and [`Pipeline`] (above): requests with ids, replies matched to
//!   them in any order, at most `max_in_flight` outstanding (callers wait for a slot),
//!   deadlines, cancellation when a pipeline is dropped. Both ends may call on one
//!   connection: [`Role`] gives each end ids of its own parity, so they never collide.
//!
//! Underneath:
//!
//! - The writer task gathers every queued frame into one vectored write: header arrays,
//!   small bodies coalesced, large payloads passed as their own `Bytes` slices, never
//!   copied. It flushes when its queue runs dry, never on a timer. A payload can also be
//!   a region of a file ([`Pipeline::send_file`]), which on Linux sockets the kernel
//!   sends from the page cache (`sendfile(2)`) without it entering this process.
//! - The reader task reads large chunks into buffers with room for the largest frame
//!   after each read, so a frame is never moved once read; it splits each complete frame
//!   off with `split_to().freeze()` (shared, not copied), hands every reply of the read
//!   to its waiter, and wakes each waiter once per batch, on the first frame (early, so
//!   latency does not suffer: the Linux SCTP lesson).
//! - Every queue is bounded: the writer's by a byte budget that every send waits on
//!   ([`Config::write_budget`]), the incoming frames by a count
//!   ([`Config::incoming_queue`]) past which the reader stops reading, and the owner
//!   can stop it at any time ([`Framed::pause_reading`]). Every waiter gets a clear
//!   error when the peer closes or sends garbage.
//!
//! # Example
//!
//! An echo peer on the other end of an in-memory pipe:
//!
//! ```
//! use bytes::Bytes;
//! use volley_transport_tcp::{Config, Connection, Framed, Role};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), volley_transport_tcp::Error> {
//! let (ours, theirs) = tokio::io::duplex(1 << 20);
//! // The other end answers every frame with its type, id and bytes (uncopied).
//! tokio::spawn(async move {
//!     let (read, write) = tokio::io::split(theirs);
//!     let config = Config { role: Role::Acceptor, ..Config::default() };
//!     let (framed, mut incoming) = Framed::new(read, write, config);
//!     while let Ok(frame) = incoming.recv().await {
//!         if framed.send(frame.ty, frame.id, &[], frame.body).await.is_err() {
//!             break;
//!         }
//!     }
//! });
//!
//! let (read, write) = tokio::io::split(ours);
//! let conn = Connection::new(read, write, Config::default());
//!
//! let reply = conn.call(7, b"head", Bytes::from_static(b" and payload")).await?;
//! assert_eq!((reply.ty, &reply.body[..]), (7, &b"head and payload"[..]));
//!
//! // Many requests in flight on one pipeline; replies come back in any order.
//! let mut pipeline = conn.pipeline();
//! for i in 0..100u32 {
//!     pipeline.send(1, &i.to_be_bytes(), Bytes::new()).await?;
//! }
//! let mut sum = 0;
//! for _ in 0..100 {
//!     let reply = pipeline.recv().await?;
//!     sum += u32::from_be_bytes(reply.body[..4].try_into().unwrap());
//! }
//! assert_eq!(sum, 4950);
//! # Ok(())
//! # }
//! ```
//!
//! Both ends calling each other on one connection, each answering what it is asked:
//!
//! ```
//! use bytes::Bytes;
//! use volley_transport_tcp::{Config, Connection, Framed, Unsolicited, Role};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), volley_transport_tcp::Error> {
//! let (a, b) = tokio::io::duplex(1 << 20);
//! let (ra, wa) = tokio::io::split(a);
//! let (rb, wb) = tokio::io::split(b);
//! let (a, a_in) = Framed::new(ra, wa, Config::default());
//! let acceptor = Config { role: Role::Acceptor, ..Config::default() };
//! let (b, b_in) = Framed::new(rb, wb, acceptor);
//! // Each end answers every call with its own name.
//! let answer = |framed: Framed, mut incoming: Unsolicited, name: &'static [u8]| async move {
//!     while let Ok(call) = incoming.recv().await {
//!         let _ = framed.send(call.ty, call.id, name, Bytes::new()).await;
//!     }
//! };
//! tokio::spawn(answer(a.clone(), a_in, b"a"));
//! tokio::spawn(answer(b.clone(), b_in, b"b"));
//! let reply = Connection::from(a).call(1, b"hello", Bytes::new()).await?;
//! assert_eq!(&reply.body[..], b"b");
//! let reply = Connection::from(b).call(1, b"hello", Bytes::new()).await?;
//! assert_eq!(&reply.body[..], b"a");
//! # Ok(())
//! # }
//! ```

mod config;
mod connection;
mod error;
mod framed;
mod frames;
mod reader;
mod sendfile;
mod server;
mod shared;
mod socket;
mod stats;
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod testing;
mod write_memory;
mod writer;

pub use config::{Config, Role, SOCKET_BUFFER, Signal};
pub use connection::{Connection, Pipeline};
pub use error::Error;
pub use framed::{Framed, TrySendError, Unsolicited};
pub use frames::Frame;
pub use sendfile::FileRegion;
pub use server::{
    Accepted, AcceptedStream, Admission, Listener, ListenerStats, PeerAddr, Seat, ServerConfig,
    Unframed,
};
pub use socket::{LOOPBACK_CONGESTION, tune};
pub use stats::Stats;
pub use write_memory::FRAME_COST;
