//! The SFTP-style frame: `u32 BE length | u8 type | u32 BE id | body`, where the length
//! counts every byte after itself. SFTP uses it as is (INIT and VERSION carry the protocol
//! version where other messages carry a request id); volley also carries SCP packets and
//! RPC messages in it over streams.
//!
//! [`Header::emit`] produces a fixed-size array, so a payload can follow it in a vectored
//! write without being copied. [`Decoder`] splits frames out of a growing buffer and checks
//! the declared length against its maximum before the caller reserves anything.

use super::{Error, Result};

/// Bytes of the length field.
pub const LENGTH_LEN: usize = 4;
/// Bytes of length + type + id.
pub const HEADER_LEN: usize = 9;
/// The smallest legal length field: type + id.
pub const MIN_LENGTH: u32 = 5;
/// The default maximum frame length, length field included: OpenSSH's sftp-server accepts
/// a length field of at most 256 KiB (its SFTP_MAX_MSG_LENGTH), so 256 KiB + 4.
pub const DEFAULT_MAX_FRAME_LEN: usize = 256 * 1024 + LENGTH_LEN;

/// Whether `bytes` (the first a peer sent) begin as a TLS record would: a handshake
/// (0x16) or alert (0x15) record of TLS 1.0 to 1.3 (0x03, then 0x01..=0x04). Read as a
/// frame header they claim hundreds of megabytes, so a stream that expects frames can
/// tell a TLS peer from a broken one.
pub fn looks_like_tls(bytes: &[u8]) -> bool {
    matches!(bytes, [0x15 | 0x16, 0x03, 0x01..=0x04, ..])
}

/// A frame's fixed header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Header {
    /// The message type.
    pub ty: u8,
    /// The request id; for SFTP INIT and VERSION, the protocol version.
    pub id: u32,
    /// Bytes of body after the id.
    pub body_len: u32,
}

/// A complete frame borrowed from the decoder's input.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Frame<'a> {
    /// The message type.
    pub ty: u8,
    /// The request id; for SFTP INIT and VERSION, the protocol version.
    pub id: u32,
    /// Everything after the id.
    pub body: &'a [u8],
}

/// Splits frames out of a byte buffer the caller fills, refusing any frame whose length
/// field exceeds the maximum before a byte of it is buffered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decoder {
    max_frame_len: usize,
}

impl Header {
    /// The header of a frame carrying `body_len` bytes after the id; fails if the length
    /// field (`body_len + 5`) does not fit a `u32`.
    pub fn new(ty: u8, id: u32, body_len: usize) -> Result<Self> {
        let body_len = u32::try_from(body_len)
            .ok()
            .filter(|len| len.checked_add(MIN_LENGTH).is_some())
            .ok_or(Error::TooLarge {
                what: "frame body",
                len: body_len as u64,
                max: u64::from(u32::MAX - MIN_LENGTH),
            })?;
        Ok(Self { ty, id, body_len })
    }

    /// The value of the length field: type + id + body.
    pub const fn length_field(&self) -> u32 {
        self.body_len + MIN_LENGTH
    }

    /// Bytes of the whole frame, length field included.
    pub const fn frame_len(&self) -> usize {
        LENGTH_LEN + self.length_field() as usize
    }

    /// The nine header bytes; the body follows them on the wire.
    pub const fn emit(&self) -> [u8; HEADER_LEN] {
        let len = self.length_field().to_be_bytes();
        let id = self.id.to_be_bytes();
        [
            len[0], len[1], len[2], len[3], self.ty, id[0], id[1], id[2], id[3],
        ]
    }
}

impl Decoder {
    /// A decoder refusing frames longer than `max_frame_len` bytes (length field
    /// included). Values under [`HEADER_LEN`] are raised to it.
    pub const fn new(max_frame_len: usize) -> Self {
        Self {
            max_frame_len: if max_frame_len < HEADER_LEN {
                HEADER_LEN
            } else {
                max_frame_len
            },
        }
    }

    /// The largest frame accepted, length field included.
    pub const fn max_frame_len(&self) -> usize {
        self.max_frame_len
    }

    /// The length of the frame at the front of `buf`, length field included, once its
    /// length field has arrived: `Ok(None)` until then. Checked against the maximum and
    /// the minimum, so a caller may reserve this many bytes.
    pub fn frame_len(&self, buf: &[u8]) -> Result<Option<usize>> {
        let Some(len) = buf.first_chunk::<LENGTH_LEN>() else {
            return Ok(None);
        };
        let len = u32::from_be_bytes(*len);
        if len < MIN_LENGTH {
            return Err(Error::TooShort {
                what: "frame (length field under type + id)",
                len: u64::from(len),
                min: u64::from(MIN_LENGTH),
            });
        }
        let total = u64::from(len) + LENGTH_LEN as u64;
        if total > self.max_frame_len as u64 {
            return Err(Error::TooLarge {
                what: "frame",
                len: total,
                max: self.max_frame_len as u64,
            });
        }
        // Fits in usize: it is at most max_frame_len.
        Ok(Some(total as usize))
    }

    /// The complete frame at the front of `buf` and its length on the wire, or
    /// `Ok(None)` if more bytes are needed. Errors are final for the stream: its framing
    /// is lost.
    pub fn decode<'a>(&self, buf: &'a [u8]) -> Result<Option<(Frame<'a>, usize)>> {
        let Some(total) = self.frame_len(buf)? else {
            return Ok(None);
        };
        let Some(frame) = buf.get(..total) else {
            return Ok(None);
        };
        let ty = frame[LENGTH_LEN];
        let id = u32::from_be_bytes([frame[5], frame[6], frame[7], frame[8]]);
        Ok(Some((
            Frame {
                ty,
                id,
                body: &frame[HEADER_LEN..],
            },
            total,
        )))
    }
}

impl Default for Decoder {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_FRAME_LEN)
    }
}

impl Frame<'_> {
    /// The header this frame would be written with.
    pub fn header(&self) -> Header {
        Header {
            ty: self.ty,
            id: self.id,
            // A decoded body always fits: it came from a u32 length field.
            body_len: self.body.len() as u32,
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use std::vec::Vec;

    use super::*;

    fn emit(ty: u8, id: u32, body: &[u8]) -> Vec<u8> {
        let mut out = Header::new(ty, id, body.len()).unwrap().emit().to_vec();
        out.extend_from_slice(body);
        out
    }

    #[test]
    fn sftp_init_layout() {
        // INIT, version 3, no extensions: length 5, type 1, version 3.
        assert_eq!(emit(1, 3, &[]), [0, 0, 0, 5, 1, 0, 0, 0, 3]);
        let bytes = emit(5, 0x0102_0304, b"abc");
        assert_eq!(&bytes[..9], &[0, 0, 0, 8, 5, 1, 2, 3, 4]);
        let (frame, used) = Decoder::default().decode(&bytes).unwrap().unwrap();
        assert_eq!(used, bytes.len());
        assert_eq!(
            frame,
            Frame {
                ty: 5,
                id: 0x0102_0304,
                body: b"abc"
            }
        );
        assert_eq!(frame.header().emit(), bytes[..9]);
    }

    #[test]
    fn needs_more_bytes_until_the_frame_is_complete() {
        let bytes = emit(103, 7, &[9; 100]);
        let decoder = Decoder::default();
        for cut in 0..bytes.len() {
            assert_eq!(decoder.decode(&bytes[..cut]), Ok(None), "cut at {cut}");
        }
        assert_eq!(decoder.frame_len(&bytes[..4]), Ok(Some(109)));
        // Two frames back to back: the first is split off, the rest stays.
        let mut two = bytes;
        two.extend_from_slice(&emit(101, 8, b"x"));
        let (first, used) = decoder.decode(&two).unwrap().unwrap();
        assert_eq!(first.id, 7);
        let (second, _) = decoder.decode(&two[used..]).unwrap().unwrap();
        assert_eq!((second.ty, second.id, second.body), (101, 8, &b"x"[..]));
    }

    #[test]
    fn a_4_gib_length_is_refused_from_the_length_field_alone() {
        let decoder = Decoder::new(1 << 20);
        assert_eq!(
            decoder.decode(&[0xff, 0xff, 0xff, 0xff]),
            Err(Error::TooLarge {
                what: "frame",
                len: 0xffff_ffff + 4,
                max: 1 << 20
            })
        );
    }

    #[test]
    fn a_length_too_short_for_its_header_is_an_error() {
        assert_eq!(
            Decoder::default().decode(&[0, 0, 0, 3, 1, 2, 3]),
            Err(Error::TooShort {
                what: "frame (length field under type + id)",
                len: 3,
                min: 5
            })
        );
    }

    #[test]
    fn oversized_bodies_cannot_be_encoded() {
        assert!(Header::new(1, 0, u32::MAX as usize).is_err());
        assert!(Header::new(1, 0, (u32::MAX - 5) as usize).is_ok());
    }

    proptest! {
        #[test]
        fn round_trips(ty: u8, id: u32, body in proptest::collection::vec(any::<u8>(), 0..2000)) {
            let bytes = emit(ty, id, &body);
            let (frame, used) = Decoder::new(4096).decode(&bytes).unwrap().unwrap();
            prop_assert_eq!(used, bytes.len());
            prop_assert_eq!(frame, Frame { ty, id, body: &body });
        }

        #[test]
        fn arbitrary_bytes_never_panic(
            max in 0usize..5000,
            bytes in proptest::collection::vec(any::<u8>(), 0..300),
        ) {
            let decoder = Decoder::new(max);
            if let Ok(Some((frame, used))) = decoder.decode(&bytes) {
                prop_assert!(used <= bytes.len() && used <= decoder.max_frame_len());
                prop_assert_eq!(frame.body.len() + HEADER_LEN, used);
            }
        }
    }
}
