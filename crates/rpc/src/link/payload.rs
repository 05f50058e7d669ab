//! [`Payload`]: a message's encoded arguments, result or error text, held in the message
//! itself when small. A small call then crosses between threads as one value: no pool
//! buffer taken and given back, and no reference count that the encoding thread raises
//! and the decoding thread lowers, which on an in-process link moves a cache line between
//! cores twice per message.

use core::fmt;
use core::ops::Deref;

use bytes::Bytes;

/// Bytes a [`Payload`] holds inline; longer ones are `Bytes`.
pub const INLINE: usize = 30;

/// A message's encoded arguments, result or error text: inline up to [`INLINE`] bytes,
/// else `Bytes` (shared, uncopied). It reads as a byte slice either way; links that
/// write it out take the inline bytes by [`Payload::inline`] and the rest by
/// [`Payload::into_bytes`].
#[derive(Clone)]
pub struct Payload(Repr);

#[derive(Clone)]
enum Repr {
    Inline { len: u8, bytes: [u8; INLINE] },
    Shared(Bytes),
}

impl Payload {
    /// An empty payload.
    pub const fn new() -> Self {
        Self(Repr::Inline {
            len: 0,
            bytes: [0; INLINE],
        })
    }

    /// `bytes` copied inline if they fit, else into new `Bytes`.
    pub fn copy_from_slice(bytes: &[u8]) -> Self {
        Self::try_inline(bytes).unwrap_or_else(|| Self(Repr::Shared(Bytes::copy_from_slice(bytes))))
    }

    /// `bytes` copied inline, or `None` if they are longer than [`INLINE`].
    pub fn try_inline(bytes: &[u8]) -> Option<Self> {
        let mut inline = [0; INLINE];
        inline.get_mut(..bytes.len())?.copy_from_slice(bytes);
        Some(Self(Repr::Inline {
            len: bytes.len() as u8,
            bytes: inline,
        }))
    }

    /// A payload whose first `len` bytes of `bytes` were written in place (an encoder's
    /// output); `None` if `len` is past the end.
    pub(crate) fn from_written(bytes: [u8; INLINE], len: usize) -> Option<Self> {
        (len <= INLINE).then_some(Self(Repr::Inline {
            len: len as u8,
            bytes,
        }))
    }

    /// The bytes, if held inline (a link copies them after the head it writes).
    pub fn inline(&self) -> Option<&[u8]> {
        match &self.0 {
            Repr::Inline { len, bytes } => Some(&bytes[..usize::from(*len)]),
            Repr::Shared(_) => None,
        }
    }

    /// The bytes as `Bytes`: uncopied if they are `Bytes` already, else copied into new
    /// ones (an allocation).
    pub fn into_bytes(self) -> Bytes {
        match self.0 {
            Repr::Inline { len, bytes } => Bytes::copy_from_slice(&bytes[..usize::from(len)]),
            Repr::Shared(bytes) => bytes,
        }
    }
}

impl Default for Payload {
    fn default() -> Self {
        Self::new()
    }
}

impl Deref for Payload {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Repr::Shared(bytes) => bytes,
        }
    }
}

impl AsRef<[u8]> for Payload {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl From<Bytes> for Payload {
    fn from(bytes: Bytes) -> Self {
        Self(Repr::Shared(bytes))
    }
}

impl From<Vec<u8>> for Payload {
    fn from(bytes: Vec<u8>) -> Self {
        Self(Repr::Shared(bytes.into()))
    }
}

impl From<&'static [u8]> for Payload {
    fn from(bytes: &'static [u8]) -> Self {
        Self(Repr::Shared(Bytes::from_static(bytes)))
    }
}

impl PartialEq for Payload {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for Payload {}

impl fmt::Debug for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // As `Bytes` shows itself: a byte string.
        f.write_str("b\"")?;
        for &byte in self.iter() {
            write!(f, "{}", core::ascii::escape_default(byte))?;
        }
        f.write_str("\"")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::{MAX_HEAD, MAX_PREFIX, Message};
    use volley_proto::rpc::Kind;

    #[test]
    fn small_payloads_are_inline_and_large_ones_shared_reading_the_same() {
        let small = Payload::copy_from_slice(b"echo");
        assert_eq!(small.inline(), Some(&b"echo"[..]));
        assert_eq!(&*small, b"echo");
        let full = Payload::copy_from_slice(&[7; INLINE]);
        assert_eq!(
            full.inline().map(<[u8]>::len),
            Some(INLINE),
            "up to INLINE inline"
        );
        let large = Payload::copy_from_slice(&[7; INLINE + 1]);
        assert_eq!(large.inline(), None);
        assert_eq!(large.len(), INLINE + 1);
        assert!(Payload::try_inline(&[0; INLINE + 1]).is_none());
        // Equal by content, whichever way each is held.
        assert_eq!(small, Payload::from(Bytes::from_static(b"echo")));
        assert_eq!(
            format!("{small:?}"),
            format!("{:?}", Bytes::from_static(b"echo"))
        );
        assert_eq!(Payload::new(), Payload::default());
        assert!(Payload::new().is_empty());
        // Shared bytes come back uncopied; inline ones as a copy.
        let bytes = Bytes::from(vec![1u8; 100]);
        let ptr = bytes.as_ptr();
        assert_eq!(Payload::from(bytes).into_bytes().as_ptr(), ptr);
        assert_eq!(small.into_bytes(), Bytes::from_static(b"echo"));
        assert!(Payload::from_written([0; INLINE], INLINE + 1).is_none());
    }

    #[test]
    fn a_prefix_is_the_head_then_inline_arguments_and_parses_back() {
        for args in [
            Payload::copy_from_slice(b"small"),
            Payload::from(vec![9u8; 64]),
        ] {
            let mut message = Message::new(Kind::CALL, 7, 3, args.clone());
            message.segments = vec![Bytes::from_static(b"segment")];
            let mut head = [0u8; MAX_HEAD];
            let head_len = message.emit_head(&mut head).unwrap();
            let mut prefix = [0u8; MAX_PREFIX];
            let laid = message.clone().encode_prefix(&mut prefix).unwrap();
            let (n, rest) = (laid.len, laid.args);
            // On the wire: the head, the arguments, the segments, in that order.
            let mut wire = prefix[..n].to_vec();
            wire.extend_from_slice(&rest);
            let mut expected = head[..head_len].to_vec();
            expected.extend_from_slice(&args);
            assert_eq!(wire, expected);
            if args.inline().is_some() {
                assert!(rest.is_empty(), "inline arguments go in the prefix");
            } else {
                assert_eq!(n, head_len, "shared arguments follow uncopied");
            }
            wire.extend_from_slice(b"segment");
            assert_eq!(Message::from_wire(&Bytes::from(wire)).unwrap(), message);
        }
    }
}
