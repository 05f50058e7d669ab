//! Per-call metadata: a few key-value pairs (a W3C `traceparent`, a token) that go before
//! a call's arguments when its head sets [`Head::metadata`](super::Head::metadata),
//! sent only to a peer whose hello sets [`CAP_METADATA`](super::CAP_METADATA).
//!
//! | bytes | field |
//! |---|---|
//! | 2 | the block's length L after these two bytes (at most [`MAX_METADATA`]) |
//! | L | entries back to back: key length k (u8), key, value length v (u16 LE), value |
//!
//! A key is 1 to [`MAX_KEY`] bytes of lowercase ASCII letters, digits, `-`, `_` and
//! `.` (as HTTP/2 header names); a value is any bytes. Both ends check every limit, and
//! [`Metadata::split`] checks the whole block before it hands out anything.
//!
//! ```
//! use volley_proto::rpc::metadata::{Metadata, emit};
//!
//! let pairs: [(&[u8], &[u8]); 2] = [(b"traceparent", b"00-4bf9-00f0-01"), (b"tenant", b"7")];
//! let mut args = [0u8; 64];
//! let n = emit(pairs.iter().copied(), &mut args).unwrap();
//! args[n..n + 3].copy_from_slice(b"arg");
//! let (metadata, rest) = Metadata::split(&args[..n + 3]).unwrap();
//! assert_eq!(metadata.get("tenant"), Some(&b"7"[..]));
//! assert_eq!(rest, b"arg");
//! ```

use crate::wire::{Error, Reader, Result, Sink, Writer};

/// The most bytes a call's metadata block carries, its length field excluded.
pub const MAX_METADATA: usize = 4096;
/// The longest key.
pub const MAX_KEY: usize = 64;

/// Whether `key` may be a metadata key.
pub fn valid_key(key: &[u8]) -> bool {
    (1..=MAX_KEY).contains(&key.len())
        && key
            .iter()
            .all(|&b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b))
}

/// The bytes the block of `pairs` takes, its length field included; an error for a bad
/// key or a block over [`MAX_METADATA`].
pub fn buffer_len<'a>(pairs: impl Iterator<Item = (&'a [u8], &'a [u8])>) -> Result<usize> {
    let mut len = 0usize;
    for (key, value) in pairs {
        if !valid_key(key) {
            return Err(Error::InvalidValue {
                what: "rpc metadata key (1-64 bytes of a-z, 0-9, '-', '_', '.')",
                value: key.len() as u64,
            });
        }
        len = len.saturating_add(1 + key.len() + 2 + value.len());
    }
    if len > MAX_METADATA {
        return Err(Error::TooLarge {
            what: "rpc metadata",
            len: len as u64,
            max: MAX_METADATA as u64,
        });
    }
    Ok(2 + len)
}

/// Writes the block of `pairs` at the start of `out`; gives the length written.
pub fn emit<'a, I>(pairs: I, out: &mut [u8]) -> Result<usize>
where
    I: Iterator<Item = (&'a [u8], &'a [u8])> + Clone,
{
    let len = buffer_len(pairs.clone())?;
    let mut w = Writer::with_capacity(out, len)?;
    // Fits: checked by buffer_len against MAX_METADATA.
    w.u16_le((len - 2) as u16)?;
    for (key, value) in pairs {
        w.u8(key.len() as u8)?;
        w.put(key)?;
        w.u16_le(value.len() as u16)?;
        w.put(value)?;
    }
    Ok(w.position())
}

/// A call's metadata as received: read in place.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Metadata<'a> {
    entries: &'a [u8],
}

impl<'a> Metadata<'a> {
    /// Splits a call's arguments into its metadata and what follows (the arguments
    /// proper); every length and key is checked first.
    pub fn split(args: &'a [u8]) -> Result<(Self, &'a [u8])> {
        let mut r = Reader::new(args);
        let len = usize::from(r.u16_le("rpc metadata length")?);
        if len > MAX_METADATA {
            return Err(Error::TooLarge {
                what: "rpc metadata",
                len: len as u64,
                max: MAX_METADATA as u64,
            });
        }
        let entries = r.bytes(len, "rpc metadata")?;
        let mut e = Reader::new(entries);
        while !e.is_empty() {
            let key_len = usize::from(e.u8("rpc metadata key length")?);
            let key = e.bytes(key_len, "rpc metadata key")?;
            if !valid_key(key) {
                return Err(Error::InvalidValue {
                    what: "rpc metadata key",
                    value: key_len as u64,
                });
            }
            let value_len = usize::from(e.u16_le("rpc metadata value length")?);
            e.bytes(value_len, "rpc metadata value")?;
        }
        Ok((Self { entries }, r.rest()))
    }

    /// The pairs, in the order sent.
    pub fn iter(&self) -> impl Iterator<Item = (&'a str, &'a [u8])> + use<'a> {
        let mut rest = self.entries;
        core::iter::from_fn(move || {
            // Checked by split: every entry is whole and every key is ASCII.
            let (&key_len, tail) = rest.split_first()?;
            let (key, tail) = tail.split_at(usize::from(key_len));
            let value_len = usize::from(u16::from_le_bytes([tail[0], tail[1]]));
            let (value, tail) = tail[2..].split_at(value_len);
            rest = tail;
            Some((core::str::from_utf8(key).unwrap_or_default(), value))
        })
    }

    /// The value of the first pair with `key`.
    pub fn get(&self, key: &str) -> Option<&'a [u8]> {
        self.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    /// Whether there are no pairs.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_keys_and_lying_lengths_are_errors() {
        let mut out = [0u8; 64];
        for key in [&b""[..], b"Upper", b"sp ace", &[b'k'; MAX_KEY + 1]] {
            assert!(
                emit([(key, &b"v"[..])].into_iter(), &mut out).is_err(),
                "{key:?}"
            );
        }
        let big = [0u8; MAX_METADATA];
        assert!(buffer_len([(&b"k"[..], &big[..])].into_iter()).is_err());
        let n = emit([(&b"a-b.c_1"[..], &b"xyz"[..])].into_iter(), &mut out).unwrap();
        let (m, rest) = Metadata::split(&out[..n]).unwrap();
        let mut pairs = m.iter();
        assert_eq!(pairs.next(), Some(("a-b.c_1", &b"xyz"[..])));
        assert_eq!(pairs.next(), None);
        assert!(rest.is_empty());
        // A value longer than the block, a block longer than the bytes, a bad key.
        let mut lie = out;
        lie[2 + 1 + 7] = 200;
        assert!(Metadata::split(&lie[..n]).is_err());
        assert!(Metadata::split(&out[..n - 1]).is_err());
        let mut bad = out;
        bad[3] = b'A';
        assert!(Metadata::split(&bad[..n]).is_err());
        let mut huge = out;
        huge[..2].copy_from_slice(&u16::MAX.to_le_bytes());
        assert!(Metadata::split(&huge).is_err());
    }
}
