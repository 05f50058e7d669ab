//! Wire formats for volley, with no IO: this crate never touches a socket, a clock or a
//! task. Bytes come in as slices, time comes in as an argument, results go out as values.
//!
//! One module per protocol, beside what they share:
//!
//! - [`scp`]: SpiNNaker's SCP request and reply packets and ([`scp::sdp`]) the SDP header,
//!   byte-identical to what rig and SpiNNMan put on the wire; `scp::window` (feature
//!   `alloc`), the sans-IO sliding window that keeps many requests in flight over a lossy
//!   datagram link, with exact retransmission and an RTT-estimated timeout; and
//!   [`scp::machine`], a SpiNNaker machine's geometry (SpiNN-5 boards, triads, Ethernet
//!   chips, hops, P2P routes) and what a chip tells the host about it.
//! - [`sftp`]: SFTP v3 requests and replies (draft-ietf-secsh-filexfer-02 as OpenSSH
//!   implements it), decoded by borrowing from the input.
//! - [`rpc`]: volley-rpc's message, hello, method table and metadata.
//! - [`channel`]: the reliable UDP channel: its datagram format ([`channel::packet`]) and
//!   (feature `alloc`) its state machine, ordered messages of any size over lossy datagrams
//!   with congestion and flow control.
//! - Shared: [`wire`] (the error type, the bounds-checked cursor, and [`wire::frame`], the
//!   frame `u32 BE length | u8 type | u32 BE id | body` that SFTP and framed RPC use, with
//!   an incremental decoder that checks the length against a limit before anything is
//!   reserved), [`recovery`] (the loss recovery both reliability machines use) and
//!   [`time`] (microsecond `Instant` and `Duration`).
//!
//! The crate is `#![no_std]`; the `alloc` and `std` features (on by default) only add
//! conveniences.
//!
//! # Example
//!
//! Build an SCP read request, parse the reply a board sends back:
//!
//! ```
//! use volley_proto::scp::{self, Command, ReplyRepr, ReturnCode};
//! use volley_proto::scp::sdp::Address;
//!
//! let chip = Address::core(1, 2, 3);
//! let mut request = scp::read_request(chip, 0x6024_0000, 8)?;
//! request.seq = 7;
//! let mut datagram = [0u8; scp::MAX_DATAGRAM_LEN];
//! let n = request.emit(&mut datagram)?;
//! assert_eq!(&datagram[..n], &[
//!     0x00, 0x00, 0x87, 0xff, 0x03, 0xff, 0x02, 0x01, 0x00, 0x00, // pad + SDP header
//!     0x02, 0x00, 0x07, 0x00,                                     // cmd read, seq 7
//!     0x00, 0x00, 0x24, 0x60, 0x08, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00,
//! ]);
//!
//! // What the board answers: the request's addresses swapped, RC_OK, the same seq, data.
//! let reply = [
//!     0x00, 0x00, 0x07, 0xff, 0xff, 0x03, 0x00, 0x00, 0x02, 0x01,
//!     0x80, 0x00, 0x07, 0x00, 1, 2, 3, 4, 5, 6, 7, 8,
//! ];
//! let reply = ReplyRepr::parse(&reply)?;
//! assert_eq!(reply.rc, ReturnCode::OK);
//! assert_eq!(reply.seq, 7);
//! assert_eq!(reply.body, &[1, 2, 3, 4, 5, 6, 7, 8]);
//! assert_eq!(request.cmd, Command::READ);
//! # Ok::<(), volley_proto::wire::Error>(())
//! ```
#![no_std]
#![forbid(unsafe_code)]

#[cfg(feature = "alloc")]
extern crate alloc;
#[cfg(any(feature = "std", test))]
extern crate std;

pub mod channel;
pub mod recovery;
pub mod rpc;
pub mod scp;
pub mod sftp;
#[cfg(test)]
mod simlink;
pub mod time;
pub mod wire;
