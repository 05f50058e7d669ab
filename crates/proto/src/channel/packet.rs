//! The reliable UDP channel's datagrams: a short header, then frames, QUIC-style.
//!
//! All integers are little-endian. Every datagram starts with:
//!
//! | offset | bytes | field |
//! |---|---|---|
//! | 0 | 1 | packet type: 1 initial, 2 accept, 3 data, 4 retry |
//! | 1 | 8 | destination connection id |
//! | 9 | 8 | source connection id (all but data) |
//! | 9 or 17 | 4 | packet number: counts up from 0 per direction, never reused |
//!
//! The rest of the datagram is frames, each opening with its type byte:
//!
//! | type | frame | fields after the type byte |
//! |---|---|---|
//! | 0x00 | padding | none: one byte of padding |
//! | 0x01 | ping | none: asks for an acknowledgement |
//! | 0x02 | ack | largest `u32`, delay µs `u32`, window `u64`, ranges `u8` (at most [`MAX_ACK_RANGES`]), first range `u32`, then per range: gap `u32`, length `u32` |
//! | 0x03 | data | message start `u64`, message length `u32`, offset in message `u32`, length `u16`, the bytes |
//! | 0x04 | close | code `u32`, reason length `u16` (at most [`MAX_REASON`]), reason (UTF-8) |
//! | 0x05 | params | largest message `u32`, window `u64`, largest datagram `u16` |
//! | 0x06 | token | length `u8` (at most [`MAX_TOKEN`]), the token |
//!
//! A **retry** packet is a server's stateless answer to an initial while many setups are
//! half open (QUIC's Retry): its destination is the initial's source id, its source the
//! id the initial was sent to (so the client knows the answer is to its own initial), its
//! packet number 0, and it carries one token frame: an address-validation token (today
//! 16 bytes: the time it was issued, `u64` µs, then a keyed MAC over that time and the
//! client's address). The client answers at most one retry per connection by sending its
//! initial again with that token frame in it; the server then takes the address as
//! proven. A retry is never acknowledged and takes no packet number from either side's
//! count. Peers that do not know retry or token frames are never sent them: a server
//! sends a retry only in answer to an initial, and a token frame travels only in an
//! initial that answers a retry.
//!
//! An ack describes packet numbers as QUIC's ACK frame does: the first range is
//! `largest - first ..= largest`; each further range lies `gap + 2` below the smallest
//! number of the previous one and covers `length + 1` numbers. `window` is the receiver's
//! flow-control limit: the sender may send message bytes only below that position in the
//! stream of all message bytes. A data frame carries a fragment of the message that
//! starts at `start` in that stream, so the receiver can place a fragment (and check it
//! against the window and the largest message) whatever order fragments come in.
//!
//! ```
//! use volley_proto::channel::packet::{PacketFrame, PacketHeader, PacketType, parse, emit_frame, emit_header};
//!
//! let header = PacketHeader { ty: PacketType::DATA, dcid: 7, scid: None, pn: 3 };
//! let mut buf = [0u8; 64];
//! let mut n = emit_header(&header, &mut buf).unwrap();
//! n += emit_frame(&PacketFrame::Data { start: 0, total: 5, offset: 0, data: b"hello" }, &mut buf[n..]).unwrap();
//! let (got, mut frames) = parse(&buf[..n]).unwrap();
//! assert_eq!(got, header);
//! assert_eq!(frames.next(), Some(Ok(PacketFrame::Data { start: 0, total: 5, offset: 0, data: b"hello" })));
//! assert_eq!(frames.next(), None);
//! ```

use crate::wire::open_enum;
use crate::wire::{Error, Reader, Result, Sink, Writer};

/// Most ranges one ack frame carries.
pub const MAX_ACK_RANGES: usize = 64;
/// Longest close reason.
pub const MAX_REASON: usize = 256;
/// Longest address-validation token.
pub const MAX_TOKEN: usize = 64;
/// Bytes of a data frame before its bytes.
pub const DATA_OVERHEAD: usize = 1 + 8 + 4 + 4 + 2;
/// Bytes of an initial or accept packet's header.
pub const LONG_HEADER: usize = 1 + 8 + 8 + 4;
/// Bytes of a data packet's header.
pub const SHORT_HEADER: usize = 1 + 8 + 4;

open_enum! {
    /// What a datagram is.
    pub struct PacketType(u8) {
        /// A client's first packets: opens a connection.
        INITIAL = 1 => "initial",
        /// The server's answer to an initial.
        ACCEPT = 2 => "accept",
        /// Everything after the handshake.
        DATA = 3 => "data",
        /// A server's stateless answer to an initial: try again with this token.
        RETRY = 4 => "retry",
    }
}

/// A datagram's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PacketHeader {
    /// The packet type.
    pub ty: PacketType,
    /// The receiver's connection id.
    pub dcid: u64,
    /// The sender's connection id (initial and accept only).
    pub scid: Option<u64>,
    /// The packet number.
    pub pn: u32,
}

/// One frame, borrowing from the datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PacketFrame<'a> {
    /// One byte of padding.
    Padding,
    /// Asks for an acknowledgement.
    Ping,
    /// Acknowledges packet numbers.
    Ack(Ack<'a>),
    /// A fragment of a message.
    Data {
        /// Where the message starts in the stream of all message bytes.
        start: u64,
        /// The message's length.
        total: u32,
        /// Where this fragment starts in the message.
        offset: u32,
        /// The fragment.
        data: &'a [u8],
    },
    /// The sender closes the connection.
    Close {
        /// Why, as a number (0: no error).
        code: u32,
        /// Why, in words.
        reason: &'a [u8],
    },
    /// The sender's limits, in initial and accept packets.
    Params(Params),
    /// An address-validation token, in retry packets and the initial that answers one.
    Token(&'a [u8]),
}

/// An ack frame; its ranges are read lazily with [`Ack::ranges`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ack<'a> {
    /// The largest packet number acknowledged.
    pub largest: u32,
    /// Microseconds the receiver held the largest before acknowledging it.
    pub delay_us: u32,
    /// The receiver's flow-control limit in the stream of message bytes.
    pub window: u64,
    /// `largest - first ..= largest` is acknowledged.
    pub first: u32,
    /// The further (gap, length) pairs, 8 bytes each.
    extra: &'a [u8],
}

/// A sender's limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Params {
    /// The largest message it takes.
    pub max_message: u32,
    /// Its initial flow-control limit.
    pub window: u64,
    /// The largest datagram it takes.
    pub max_datagram: u16,
}

/// Parses a datagram's header and returns an iterator over its frames.
pub fn parse(datagram: &[u8]) -> Result<(PacketHeader, Frames<'_>)> {
    let mut r = Reader::new(datagram);
    let ty = PacketType(r.u8("channel packet type")?);
    if ty.name().is_none() {
        return Err(Error::InvalidValue {
            what: "channel packet type",
            value: u64::from(ty.0),
        });
    }
    let dcid = r.u64_le("channel destination id")?;
    let scid = if ty == PacketType::DATA {
        None
    } else {
        Some(r.u64_le("channel source id")?)
    };
    let pn = r.u32_le("channel packet number")?;
    Ok((PacketHeader { ty, dcid, scid, pn }, Frames { r }))
}

/// The frames of a datagram, in order; stops at the first malformed one.
#[derive(Clone, Debug)]
pub struct Frames<'a> {
    r: Reader<'a>,
}

impl<'a> Iterator for Frames<'a> {
    type Item = Result<PacketFrame<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.r.is_empty() {
            return None;
        }
        let frame = read_frame(&mut self.r);
        if frame.is_err() {
            // Nothing after a malformed frame can be trusted.
            self.r = Reader::new(&[]);
        }
        Some(frame)
    }
}

fn read_frame<'a>(r: &mut Reader<'a>) -> Result<PacketFrame<'a>> {
    let ty = r.u8("channel frame type")?;
    Ok(match ty {
        0x00 => PacketFrame::Padding,
        0x01 => PacketFrame::Ping,
        0x02 => {
            let largest = r.u32_le("ack largest")?;
            let delay_us = r.u32_le("ack delay")?;
            let window = r.u64_le("ack window")?;
            let count = usize::from(r.u8("ack range count")?);
            if count > MAX_ACK_RANGES {
                return Err(Error::TooLarge {
                    what: "ack range count",
                    len: count as u64,
                    max: MAX_ACK_RANGES as u64,
                });
            }
            let first = r.u32_le("ack first range")?;
            if first > largest {
                return Err(Error::InvalidValue {
                    what: "ack first range",
                    value: u64::from(first),
                });
            }
            let extra = r.bytes(8 * count, "ack ranges")?;
            PacketFrame::Ack(Ack {
                largest,
                delay_us,
                window,
                first,
                extra,
            })
        }
        0x03 => {
            let start = r.u64_le("data start")?;
            let total = r.u32_le("data message length")?;
            let offset = r.u32_le("data offset")?;
            let len = r.u16_le("data length")?;
            if u64::from(offset) + u64::from(len) > u64::from(total) {
                return Err(Error::InvalidValue {
                    what: "data fragment past its message's end",
                    value: u64::from(offset) + u64::from(len),
                });
            }
            let data = r.bytes(usize::from(len), "data bytes")?;
            PacketFrame::Data {
                start,
                total,
                offset,
                data,
            }
        }
        0x04 => {
            let code = r.u32_le("close code")?;
            let len = usize::from(r.u16_le("close reason length")?);
            if len > MAX_REASON {
                return Err(Error::TooLarge {
                    what: "close reason",
                    len: len as u64,
                    max: MAX_REASON as u64,
                });
            }
            PacketFrame::Close {
                code,
                reason: r.bytes(len, "close reason")?,
            }
        }
        0x05 => PacketFrame::Params(Params {
            max_message: r.u32_le("params max message")?,
            window: r.u64_le("params window")?,
            max_datagram: r.u16_le("params max datagram")?,
        }),
        0x06 => {
            let len = usize::from(r.u8("token length")?);
            if len > MAX_TOKEN {
                return Err(Error::TooLarge {
                    what: "token",
                    len: len as u64,
                    max: MAX_TOKEN as u64,
                });
            }
            PacketFrame::Token(r.bytes(len, "token")?)
        }
        other => {
            return Err(Error::InvalidValue {
                what: "channel frame type",
                value: u64::from(other),
            });
        }
    })
}

impl Ack<'_> {
    /// The acknowledged packet numbers as inclusive ranges, largest first; a range that
    /// would fall below 0 ends the list.
    pub fn ranges(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        let first = (self.largest - self.first, self.largest);
        let mut low = first.0;
        let mut done = false;
        core::iter::once(first).chain(self.extra.chunks_exact(8).map_while(move |pair| {
            if done {
                return None;
            }
            let gap = u32::from_le_bytes([pair[0], pair[1], pair[2], pair[3]]);
            let len = u32::from_le_bytes([pair[4], pair[5], pair[6], pair[7]]);
            let Some(high) = low.checked_sub(gap).and_then(|v| v.checked_sub(2)) else {
                done = true;
                return None;
            };
            let Some(bottom) = high.checked_sub(len) else {
                done = true;
                return None;
            };
            low = bottom;
            Some((bottom, high))
        }))
    }
}

/// Bytes a header takes.
pub const fn header_len(ty: PacketType) -> usize {
    if ty.0 == PacketType::DATA.0 {
        SHORT_HEADER
    } else {
        LONG_HEADER
    }
}

/// Writes a header; returns its length.
pub fn emit_header(header: &PacketHeader, buf: &mut [u8]) -> Result<usize> {
    let mut w = Writer::with_capacity(buf, header_len(header.ty))?;
    w.u8(header.ty.0)?;
    w.u64_le(header.dcid)?;
    if header.ty != PacketType::DATA {
        w.u64_le(header.scid.unwrap_or(0))?;
    }
    w.u32_le(header.pn)?;
    Ok(w.position())
}

/// Writes an ack frame for `ranges` (inclusive, largest first, disjoint, at most
/// [`MAX_ACK_RANGES`] + 1 of them; more are left out); returns its length.
pub fn emit_ack(
    ranges: &[(u32, u32)],
    delay_us: u32,
    window: u64,
    buf: &mut [u8],
) -> Result<usize> {
    let Some(&(low, largest)) = ranges.first() else {
        return Err(Error::TooShort {
            what: "ack ranges",
            len: 0,
            min: 1,
        });
    };
    let extra = &ranges[1..ranges.len().min(MAX_ACK_RANGES + 1)];
    let needed = ack_len(extra.len() + 1);
    let mut w = Writer::with_capacity(buf, needed)?;
    w.u8(0x02)?;
    w.u32_le(largest)?;
    w.u32_le(delay_us)?;
    w.u64_le(window)?;
    // Fits: at most MAX_ACK_RANGES (64).
    w.u8(extra.len() as u8)?;
    w.u32_le(largest - low)?;
    let mut prev_low = low;
    for &(lo, hi) in extra {
        let gap = prev_low
            .checked_sub(hi)
            .and_then(|d| d.checked_sub(2))
            .ok_or(Error::InvalidValue {
                what: "ack ranges out of order",
                value: u64::from(hi),
            })?;
        w.u32_le(gap)?;
        w.u32_le(hi - lo)?;
        prev_low = lo;
    }
    Ok(w.position())
}

/// Bytes an ack frame with `ranges` ranges takes.
pub const fn ack_len(ranges: usize) -> usize {
    1 + 4 + 4 + 8 + 1 + 4 + 8 * (ranges - 1)
}

/// Writes one frame (not an ack: see [`emit_ack`]); returns its length.
pub fn emit_frame(frame: &PacketFrame<'_>, buf: &mut [u8]) -> Result<usize> {
    match *frame {
        PacketFrame::Padding => Writer::with_capacity(buf, 1)?.u8(0x00).map(|()| 1),
        PacketFrame::Ping => Writer::with_capacity(buf, 1)?.u8(0x01).map(|()| 1),
        PacketFrame::Ack(ack) => {
            let ranges: heapless_ranges::Ranges = ack.ranges().collect();
            emit_ack(ranges.as_slice(), ack.delay_us, ack.window, buf)
        }
        PacketFrame::Data {
            start,
            total,
            offset,
            data,
        } => {
            let len = u16::try_from(data.len()).map_err(|_| Error::TooLarge {
                what: "data fragment",
                len: data.len() as u64,
                max: u64::from(u16::MAX),
            })?;
            let mut w = Writer::with_capacity(buf, DATA_OVERHEAD + data.len())?;
            w.u8(0x03)?;
            w.u64_le(start)?;
            w.u32_le(total)?;
            w.u32_le(offset)?;
            w.u16_le(len)?;
            w.put(data)?;
            Ok(w.position())
        }
        PacketFrame::Close { code, reason } => {
            let reason = &reason[..reason.len().min(MAX_REASON)];
            let mut w = Writer::with_capacity(buf, 1 + 4 + 2 + reason.len())?;
            w.u8(0x04)?;
            w.u32_le(code)?;
            // Fits: at most MAX_REASON (256).
            w.u16_le(reason.len() as u16)?;
            w.put(reason)?;
            Ok(w.position())
        }
        PacketFrame::Params(p) => {
            let mut w = Writer::with_capacity(buf, PARAMS_LEN)?;
            w.u8(0x05)?;
            w.u32_le(p.max_message)?;
            w.u64_le(p.window)?;
            w.u16_le(p.max_datagram)?;
            Ok(w.position())
        }
        PacketFrame::Token(token) => {
            if token.len() > MAX_TOKEN {
                return Err(Error::TooLarge {
                    what: "token",
                    len: token.len() as u64,
                    max: MAX_TOKEN as u64,
                });
            }
            let mut w = Writer::with_capacity(buf, 2 + token.len())?;
            w.u8(0x06)?;
            // Fits: at most MAX_TOKEN (64).
            w.u8(token.len() as u8)?;
            w.put(token)?;
            Ok(w.position())
        }
    }
}

/// Bytes of a params frame.
pub const PARAMS_LEN: usize = 1 + 4 + 8 + 2;

/// A fixed-capacity list of ranges, so re-encoding a parsed ack needs no allocation.
mod heapless_ranges {
    use super::MAX_ACK_RANGES;

    pub(super) struct Ranges {
        items: [(u32, u32); MAX_ACK_RANGES + 1],
        len: usize,
    }

    impl Ranges {
        pub(super) fn as_slice(&self) -> &[(u32, u32)] {
            &self.items[..self.len]
        }
    }

    impl FromIterator<(u32, u32)> for Ranges {
        fn from_iter<I: IntoIterator<Item = (u32, u32)>>(iter: I) -> Self {
            let mut out = Self {
                items: [(0, 0); MAX_ACK_RANGES + 1],
                len: 0,
            };
            for item in iter.into_iter().take(MAX_ACK_RANGES + 1) {
                out.items[out.len] = item;
                out.len += 1;
            }
            out
        }
    }
}

#[cfg(test)]
mod tests;
