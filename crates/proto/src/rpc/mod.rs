//! volley-rpc's message: a small head, the serialized arguments, then bulk segments that
//! travel beside the arguments uncopied.
//!
//! Every message, over any link, is laid out as below (all integers little-endian). A
//! stream link carries it as the body of one frame; a datagram channel as one message.
//!
//! | offset | bytes | field |
//! |---|---|---|
//! | 0 | 1 | kind: 1 call, 2 one-way call, 3 reply, 4 error reply, 5 cancel, 6 hello, 7 credit, 8 ping, 9 pong, 10 closing, 11 method table |
//! | 1 | 1 | flags: bit 0 set when a deadline follows; bit 1 when the arguments begin with [`metadata`]; other bits are 0 |
//! | 2 | 2 | segments: how many bulk segments follow the arguments (at most [`MAX_SEGMENTS`]) |
//! | 4 | 4 | call id: chosen by the caller, echoed by the reply, error reply or cancel |
//! | 8 | 4 | method id for calls; [`ErrorCode`] for error replies; calls finished for credit; a ping's number, echoed by its pong; a [`CloseReason`] for closing; else 0 |
//! | 12 | 4 | arguments' length in bytes |
//! | 16 | 8 | only if flag bit 0: microseconds the caller will still wait for the reply |
//! | then | 4 each | each segment's length |
//! | then | args | the serialized arguments (or result, or error text) |
//! | then | ... | the segments, in order, back to back |
//!
//! The message carries its own call id because a datagram channel has no frame id. The
//! deadline is relative (time left, not a clock reading), since the two ends' clocks are
//! not comparable. [`Message::parse`] checks that the lengths add up to exactly the bytes
//! given before it hands out a range, so a lying length field is an error, never a read
//! past the end or an allocation.
//!
//! A hello ([`Hello`]) is a message of kind 6 whose arguments are the 32 bytes below; each
//! end sends one first and checks the peer's before any call.
//!
//! | offset | bytes | field |
//! |---|---|---|
//! | 0 | 4 | magic `VRPC` |
//! | 4 | 2 | wire version ([`WIRE_VERSION`]) |
//! | 6 | 1 | codec id ([`CodecId`]) |
//! | 7 | 1 | capability bits ([`Hello::capabilities`]): bit 0 [`CAP_ANSWERS_PINGS`], bit 1 [`CAP_HEARS_CLOSING`], bit 2 [`CAP_METHOD_TABLE`], bit 3 [`CAP_METADATA`]; others 0 |
//! | 8 | 4 | the largest message this end takes, in bytes |
//! | 12 | 4 | call credit: calls in flight this end accepts before answering Busy |
//! | 16 | 8 | fingerprint of the service this end serves: a hash of its method ids, kinds, names and types |
//! | 24 | 8 | fingerprint of the service this end calls (appended; a hello without it calls the service it serves) |
//! | 32 | 2 + n | authentication token (appended, optional): a u16 length n (at most [`MAX_TOKEN`]), then n bytes |
//!
//! **How the hello grows** (the rule every later change follows):
//! - New fields are appended after these 24 bytes. A peer ignores bytes it does not
//!   know, so a version-1 peer keeps working with a hello that carries more.
//! - A feature both ends must agree on is a capability bit in byte 7, set by an end that
//!   supports it; it is used only when both ends set it (or, for a feature that only asks
//!   something of the peer, such as answering pings, when the peer sets it).
//! - The whole hello message, as a stream link frames it (the 9-byte frame header
//!   included), is at most [`MAX_HELLO_FRAME`] bytes: room for later fields such as an
//!   authentication token. Before the hello, a receiver takes no longer frame: it ends
//!   the connection at once.
//! - The wire version stays 1 unless a change cannot be ignored by a version-1 peer.
//!
//! A ping (kind 8) asks the peer to answer with a pong (kind 9) carrying the same number
//! in the method field; both have no arguments and no segments. An end sends pings only
//! to a peer whose hello sets [`CAP_ANSWERS_PINGS`], so a version-1 peer, which would
//! take an unknown kind as a protocol error, never sees one.
//!
//! A closing message (kind 10) tells the peer why this end is about to close the
//! connection, so that it can say so and a reconnecting client need not report an error:
//! its method field holds a [`CloseReason`], its arguments 8 bytes, the idle time that
//! led to the close in milliseconds. It has no call id and no segments, and is sent only
//! to a peer whose hello sets [`CAP_HEARS_CLOSING`].
//!
//! ```
//! use volley_proto::rpc::{Head, Kind, Message};
//!
//! let head = Head { kind: Kind::CALL, call_id: 7, method: 3, deadline_us: Some(250_000), metadata: false };
//! let args = b"args";
//! let segments: [&[u8]; 2] = [b"bulk one", b"two"];
//! let mut buf = [0u8; 64];
//! let n = head.emit(args.len(), segments.iter().map(|s| s.len()), &mut buf).unwrap();
//! let mut msg = buf[..n].to_vec();
//! msg.extend_from_slice(args);
//! for s in segments {
//!     msg.extend_from_slice(s);
//! }
//!
//! let parsed = Message::parse(&msg).unwrap();
//! assert_eq!(parsed.head, head);
//! assert_eq!(parsed.args(), b"args");
//! let bulk: Vec<&[u8]> = parsed.segments().map(|r| &msg[r]).collect();
//! assert_eq!(bulk, segments);
//! ```

use core::ops::Range;

use crate::wire::open_enum;
use crate::wire::{Error, Reader, Result, Sink, Writer, len_u32};

/// The wire version this module speaks.
pub const WIRE_VERSION: u16 = 1;
/// Bytes of the fixed part of the head, without deadline and segment table.
pub const FIXED_LEN: usize = 16;
/// Bytes of the optional deadline.
pub const DEADLINE_LEN: usize = 8;
/// The most bulk segments one message may carry.
pub const MAX_SEGMENTS: usize = 64;
/// Bytes of the hello this version sends: the first 24 every version-1 peer sends, then
/// the fingerprint of the service the end calls.
pub const HELLO_LEN: usize = 32;
/// Bytes of the shortest hello a version-1 peer may send (one without the fields appended
/// since).
pub const HELLO_MIN_LEN: usize = 24;
/// The longest authentication token a hello carries.
pub const MAX_TOKEN: usize = 512;

/// The hello's first four bytes.
pub const MAGIC: [u8; 4] = *b"VRPC";
/// The largest hello message as a stream frame, header included: a receiver takes no
/// longer first frame.
pub const MAX_HELLO_FRAME: usize = 1024;
/// Hello capability bit: this end answers [`Kind::PING`] with [`Kind::PONG`].
pub const CAP_ANSWERS_PINGS: u8 = 0x01;
/// Hello capability bit: this end takes a [`Kind::CLOSING`] message before the connection
/// closes.
pub const CAP_HEARS_CLOSING: u8 = 0x02;
/// Hello capability bit: this end sends its [`methods::MethodTable`] right after its
/// hello, and takes the peer's. When both ends set it, a connection no longer needs the
/// two services' fingerprints to match: each call is checked against the peer's table.
pub const CAP_METHOD_TABLE: u8 = 0x04;
/// Hello capability bit: this end takes calls whose arguments begin with
/// [`metadata`] (flag bit 1).
pub const CAP_METADATA: u8 = 0x08;
/// Bytes of a closing message's arguments: the idle time in milliseconds.
pub const CLOSING_LEN: usize = 8;

const FLAG_DEADLINE: u8 = 1;
const FLAG_METADATA: u8 = 2;

open_enum! {
    /// What a message is.
    pub struct Kind(u8) {
        /// A call that wants a reply.
        CALL = 1 => "call",
        /// A call that gets no reply.
        ONE_WAY = 2 => "one-way call",
        /// A call's result.
        REPLY = 3 => "reply",
        /// A call's failure; the method field holds an [`ErrorCode`].
        ERROR = 4 => "error reply",
        /// The caller no longer wants the reply to this call id.
        CANCEL = 5 => "cancel",
        /// The first message each way: versions, limits and the service's fingerprint.
        HELLO = 6 => "hello",
        /// The callee finished this many one-way calls (in the method field): the caller
        /// may send as many more. Sync calls return their credit with their reply.
        CREDIT = 7 => "credit",
        /// Are you there? Answered with a pong carrying the same number (method field);
        /// sent only to a peer whose hello sets [`CAP_ANSWERS_PINGS`].
        PING = 8 => "ping",
        /// The answer to a ping.
        PONG = 9 => "pong",
        /// This end closes the connection next, for the [`CloseReason`] in the method
        /// field; sent only to a peer whose hello sets [`CAP_HEARS_CLOSING`].
        CLOSING = 10 => "closing",
        /// The services's method table ([`methods::MethodTable`]) as the arguments, sent
        /// right after the hello by an end whose hello and the peer's both set
        /// [`CAP_METHOD_TABLE`].
        METHODS = 11 => "method table",
    }
}

open_enum! {
    /// Why an end closes a connection, carried in a [`Kind::CLOSING`] message's method
    /// field.
    pub struct CloseReason(u32) {
        /// Nothing was in flight either way for the end's idle timeout.
        IDLE = 1 => "idle",
    }
}

open_enum! {
    /// Why a call failed, carried in an error reply's method field; the arguments hold a
    /// human-readable explanation in UTF-8.
    pub struct ErrorCode(u32) {
        /// The callee already runs as many calls as its credit allows.
        BUSY = 1 => "busy",
        /// The callee has no method with this id.
        UNKNOWN_METHOD = 2 => "unknown method",
        /// The callee could not decode the arguments.
        DECODE = 3 => "decode failure",
        /// The handler returned an error.
        HANDLER = 4 => "handler error",
        /// The handler panicked.
        PANIC = 5 => "handler panicked",
        /// The call's deadline passed before the handler finished.
        DEADLINE = 6 => "deadline exceeded",
        /// The reply would be larger than the caller takes.
        TOO_LARGE = 7 => "too large",
        /// The callee is shutting down and takes no new calls.
        SHUTTING_DOWN = 8 => "shutting down",
        /// The caller broke the protocol with this call (it reused the id of a call
        /// still running, for one); the connection goes on.
        PROTOCOL = 9 => "protocol error",
        /// The hello's authentication token is missing or wrong (sent in place of a
        /// hello, then the connection closes).
        UNAUTHENTICATED = 10 => "unauthenticated",
    }
}

open_enum! {
    /// How the arguments are serialized; both ends must agree.
    pub struct CodecId(u8) {
        /// bincode 2 with its standard configuration, through serde.
        BINCODE2 = 1 => "bincode 2",
        /// postcard 1.
        POSTCARD = 2 => "postcard",
        /// Raw bytes, no serializer (tests and tools).
        RAW = 3 => "raw",
    }
}

/// A message's head: everything but the lengths, which come from what it carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Head {
    /// What the message is.
    pub kind: Kind,
    /// The call it belongs to.
    pub call_id: u32,
    /// Method id (calls), error code (error replies), else 0.
    pub method: u32,
    /// Microseconds the caller still waits, if it set a deadline.
    pub deadline_us: Option<u64>,
    /// The arguments begin with a [`metadata`] block (flag bit 1).
    pub metadata: bool,
}

impl Head {
    /// Bytes the encoded head takes with `segments` segments.
    pub const fn buffer_len(&self, segments: usize) -> usize {
        FIXED_LEN
            + if self.deadline_us.is_some() {
                DEADLINE_LEN
            } else {
                0
            }
            + 4 * segments
    }

    /// Writes the head for `args_len` bytes of arguments and segments of the lengths
    /// given into `buf`; returns the bytes written. The arguments and then the segments
    /// follow it on the wire.
    pub fn emit<I>(&self, args_len: usize, segment_lens: I, buf: &mut [u8]) -> Result<usize>
    where
        I: IntoIterator<Item = usize>,
        I::IntoIter: ExactSizeIterator,
    {
        let lens = segment_lens.into_iter();
        let count = lens.len();
        if count > MAX_SEGMENTS {
            return Err(Error::TooLarge {
                what: "rpc segment count",
                len: count as u64,
                max: MAX_SEGMENTS as u64,
            });
        }
        let needed = self.buffer_len(count);
        let mut w = Writer::with_capacity(buf, needed)?;
        w.u8(self.kind.0)?;
        let deadline = if self.deadline_us.is_some() {
            FLAG_DEADLINE
        } else {
            0
        };
        w.u8(deadline | if self.metadata { FLAG_METADATA } else { 0 })?;
        // Fits: at most MAX_SEGMENTS (64).
        w.u16_le(count as u16)?;
        w.u32_le(self.call_id)?;
        w.u32_le(self.method)?;
        w.u32_le(len_u32(args_len, "rpc arguments")?)?;
        if let Some(deadline) = self.deadline_us {
            w.u64_le(deadline)?;
        }
        for len in lens {
            w.u32_le(len_u32(len, "rpc segment")?)?;
        }
        Ok(w.position())
    }
}

/// A parsed message borrowed from its bytes; arguments and segments as ranges into them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Message<'a> {
    /// The head.
    pub head: Head,
    bytes: &'a [u8],
    table: &'a [u8],
    args_at: usize,
    args_len: usize,
}

impl<'a> Message<'a> {
    /// Parses a whole message; fails unless its lengths account for every byte.
    pub fn parse(bytes: &'a [u8]) -> Result<Self> {
        let mut r = Reader::new(bytes);
        let kind = Kind(r.u8("rpc message kind")?);
        if kind.name().is_none() {
            return Err(Error::InvalidValue {
                what: "rpc message kind",
                value: u64::from(kind.0),
            });
        }
        let flags = r.u8("rpc flags")?;
        if flags & !(FLAG_DEADLINE | FLAG_METADATA) != 0 {
            return Err(Error::InvalidValue {
                what: "rpc flags",
                value: u64::from(flags),
            });
        }
        let count = usize::from(r.u16_le("rpc segment count")?);
        if count > MAX_SEGMENTS {
            return Err(Error::TooLarge {
                what: "rpc segment count",
                len: count as u64,
                max: MAX_SEGMENTS as u64,
            });
        }
        let call_id = r.u32_le("rpc call id")?;
        let method = r.u32_le("rpc method")?;
        let args_len = r.u32_le("rpc arguments length")?;
        let deadline_us = if flags & FLAG_DEADLINE != 0 {
            Some(r.u64_le("rpc deadline")?)
        } else {
            None
        };
        let table = r.bytes(4 * count, "rpc segment table")?;
        let args_at = bytes.len() - r.remaining();
        // Sum in u64: at most 65 lengths of u32 cannot overflow it.
        let body: u64 = u64::from(args_len)
            + table
                .chunks_exact(4)
                .map(|c| u64::from(u32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                .sum::<u64>();
        let left = r.remaining() as u64;
        if body > left {
            return Err(Error::Truncated {
                what: "rpc message body",
                needed: usize::try_from(body).unwrap_or(usize::MAX),
                available: r.remaining(),
            });
        }
        if body < left {
            return Err(Error::TrailingBytes {
                what: "rpc message",
                // Fits: smaller than `left`, a usize.
                extra: (left - body) as usize,
            });
        }
        Ok(Self {
            head: Head {
                kind,
                call_id,
                method,
                deadline_us,
                metadata: flags & FLAG_METADATA != 0,
            },
            bytes,
            table,
            args_at,
            // Fits: no more than the bytes present.
            args_len: args_len as usize,
        })
    }

    /// The serialized arguments (or result, or error text).
    pub fn args(&self) -> &'a [u8] {
        &self.bytes[self.args_range()]
    }

    /// Where the arguments lie in the bytes parsed.
    pub fn args_range(&self) -> Range<usize> {
        self.args_at..self.args_at + self.args_len
    }

    /// How many bulk segments follow the arguments.
    pub fn segment_count(&self) -> usize {
        self.table.len() / 4
    }

    /// Where each bulk segment lies in the bytes parsed, in order.
    pub fn segments(&self) -> Segments<'a> {
        Segments {
            table: self.table,
            at: self.args_at + self.args_len,
        }
    }
}

/// The ranges of a message's bulk segments; see [`Message::segments`].
#[derive(Clone, Debug)]
pub struct Segments<'a> {
    table: &'a [u8],
    at: usize,
}

impl Iterator for Segments<'_> {
    type Item = Range<usize>;

    fn next(&mut self) -> Option<Range<usize>> {
        let (len, rest) = self.table.split_first_chunk::<4>()?;
        self.table = rest;
        // Fits: `Message::parse` checked every length against the bytes present.
        let len = u32::from_le_bytes(*len) as usize;
        let start = self.at;
        self.at += len;
        Some(start..self.at)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.table.len() / 4;
        (n, Some(n))
    }
}

impl ExactSizeIterator for Segments<'_> {}

/// What each end declares before any call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Hello {
    /// Wire version.
    pub version: u16,
    /// How arguments are serialized.
    pub codec: CodecId,
    /// The largest message this end takes, in bytes.
    pub max_message: u32,
    /// Calls in flight this end accepts before answering Busy.
    pub credit: u32,
    /// The fingerprint of the service this end serves: a hash of its method ids, kinds,
    /// names and types.
    pub fingerprint: u64,
    /// The fingerprint of the service this end calls (bytes 24..32; a hello of 24 bytes
    /// calls the service it serves, as every end did before the field was appended).
    pub calls: u64,
    /// Capability bits (byte 7): [`CAP_ANSWERS_PINGS`]; a version-1 peer that predates
    /// them sends 0.
    pub capabilities: u8,
}

impl Hello {
    /// The hello's bytes, to send as the arguments of a [`Kind::HELLO`] message.
    pub fn emit(&self) -> [u8; HELLO_LEN] {
        let mut out = [0; HELLO_LEN];
        out[..4].copy_from_slice(&MAGIC);
        out[4..6].copy_from_slice(&self.version.to_le_bytes());
        out[6] = self.codec.0;
        out[7] = self.capabilities;
        out[8..12].copy_from_slice(&self.max_message.to_le_bytes());
        out[12..16].copy_from_slice(&self.credit.to_le_bytes());
        out[16..24].copy_from_slice(&self.fingerprint.to_le_bytes());
        out[24..32].copy_from_slice(&self.calls.to_le_bytes());
        out
    }

    /// The hello's bytes followed by an authentication token (a u16 length, then the
    /// token), written into `out`; gives the length written. A token over [`MAX_TOKEN`]
    /// or an `out` too short is an error.
    pub fn emit_with_token(&self, token: &[u8], out: &mut [u8]) -> Result<usize> {
        if token.len() > MAX_TOKEN {
            return Err(Error::TooLarge {
                what: "rpc hello token",
                len: token.len() as u64,
                max: MAX_TOKEN as u64,
            });
        }
        let len = HELLO_LEN + 2 + token.len();
        if out.len() < len {
            return Err(Error::Truncated {
                what: "rpc hello buffer",
                needed: len,
                available: out.len(),
            });
        }
        out[..HELLO_LEN].copy_from_slice(&self.emit());
        out[HELLO_LEN..HELLO_LEN + 2].copy_from_slice(&(token.len() as u16).to_le_bytes());
        out[HELLO_LEN + 2..len].copy_from_slice(token);
        Ok(len)
    }

    /// The authentication token a hello's bytes carry after its fields, if any; a length
    /// over [`MAX_TOKEN`] or past the bytes given is an error.
    pub fn token(bytes: &[u8]) -> Result<Option<&[u8]>> {
        let Some(rest) = bytes.get(HELLO_LEN..) else {
            return Ok(None);
        };
        if rest.is_empty() {
            return Ok(None);
        }
        let mut r = Reader::new(rest);
        let len = usize::from(r.u16_le("rpc hello token length")?);
        if len > MAX_TOKEN {
            return Err(Error::TooLarge {
                what: "rpc hello token",
                len: len as u64,
                max: MAX_TOKEN as u64,
            });
        }
        Ok(Some(r.bytes(len, "rpc hello token")?))
    }

    /// Reads a hello from a hello message's arguments. Checks the magic; the version is
    /// returned as found, for the caller to compare, and bytes after the known fields are
    /// ignored.
    pub fn parse(bytes: &[u8]) -> Result<Self> {
        let mut r = Reader::new(bytes);
        let magic = r.bytes(4, "rpc hello magic")?;
        if magic != MAGIC {
            return Err(Error::InvalidValue {
                what: "rpc hello magic",
                value: u64::from(u32::from_be_bytes([magic[0], magic[1], magic[2], magic[3]])),
            });
        }
        let version = r.u16_le("rpc hello version")?;
        let codec = CodecId(r.u8("rpc hello codec")?);
        let capabilities = r.u8("rpc hello capabilities")?;
        let max_message = r.u32_le("rpc hello max message")?;
        let credit = r.u32_le("rpc hello credit")?;
        let fingerprint = r.u64_le("rpc hello fingerprint")?;
        // Appended fields: absent from an older version-1 peer's hello.
        let calls = if r.remaining() >= 8 {
            r.u64_le("rpc hello calls")?
        } else {
            fingerprint
        };
        Ok(Self {
            version,
            codec,
            capabilities,
            max_message,
            credit,
            fingerprint,
            calls,
        })
    }
}

pub mod metadata;
pub mod methods;

#[cfg(test)]
mod tests;
