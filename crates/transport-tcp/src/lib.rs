//! Pipelined request/response over any byte stream, in SFTP-style frames
//! (`u32 BE length | u8 type | u32 BE id | body`), without copying payloads and with one
//! wake-up per batch of replies.
//!
//! - The writer task gathers every queued frame into one vectored write: header arrays,
//!   small bodies coalesced, large payloads passed as their own `Bytes` slices, never
//!   copied. It flushes when its queue runs dry, never on a timer. A payload can also be
//!   a region of a file ([`Pipeline::send_file`]), which on Linux sockets the kernel
//!   sends from the page cache (`sendfile(2)`) without it entering this process.
//! - The reader task reads large chunks, splits each complete frame off with
//!   `split_to().freeze()` (shared, not copied), hands every reply of the read to its
//!   waiter, and wakes each waiter once per batch, on the first frame (early, so latency
//!   does not suffer: the Linux SCTP lesson).
//! - Requests get ids; replies may come in any order; at most `max_in_flight` requests
//!   are outstanding (callers wait for a slot, so memory stays bounded); dropping a
//!   [`Pipeline`] cancels its requests; every waiter gets a clear error when the peer
//!   closes or sends garbage.
//!
//! # Example
//!
//! An echo peer on the other end of an in-memory pipe:
//!
//! ```
//! use bytes::Bytes;
//! use volley_transport_tcp::{Config, Connection};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), volley_transport_tcp::Error> {
//! let (ours, theirs) = tokio::io::duplex(1 << 20);
//! let (read, write) = tokio::io::split(ours);
//! let conn = Connection::new(read, write, Config::default());
//! tokio::spawn(volley_transport_tcp::testing::echo(theirs));
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

mod connection;
mod reader;
mod sendfile;
pub mod testing;
mod writer;

pub use connection::{Config, Connection, Error, Pipeline, Reply, SOCKET_BUFFER, Signal, Stats};
pub use sendfile::FileRegion;
