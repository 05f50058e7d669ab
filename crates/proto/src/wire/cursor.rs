//! Bounds-checked big- and little-endian readers and writers over byte slices, the only
//! place wire code indexes into untrusted input.

use super::{Error, Result};

/// Reads fields front to back; every read checks the remaining length first.
#[derive(Clone, Debug)]
pub(crate) struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Self { rest: bytes }
    }

    pub(crate) fn remaining(&self) -> usize {
        self.rest.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    /// Everything not read yet.
    pub(crate) fn rest(self) -> &'a [u8] {
        self.rest
    }

    /// Takes everything not read yet, leaving the reader empty.
    pub(crate) fn take_rest(&mut self) -> &'a [u8] {
        core::mem::take(&mut self.rest)
    }

    pub(crate) fn bytes(&mut self, n: usize, what: &'static str) -> Result<&'a [u8]> {
        if self.rest.len() < n {
            return Err(Error::Truncated {
                what,
                needed: n,
                available: self.rest.len(),
            });
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N]> {
        let mut out = [0; N];
        out.copy_from_slice(self.bytes(N, what)?);
        Ok(out)
    }

    pub(crate) fn u8(&mut self, what: &'static str) -> Result<u8> {
        self.array::<1>(what).map(|[b]| b)
    }

    pub(crate) fn u64_le(&mut self, what: &'static str) -> Result<u64> {
        self.array(what).map(u64::from_le_bytes)
    }

    pub(crate) fn u16_le(&mut self, what: &'static str) -> Result<u16> {
        self.array(what).map(u16::from_le_bytes)
    }

    pub(crate) fn u32_le(&mut self, what: &'static str) -> Result<u32> {
        self.array(what).map(u32::from_le_bytes)
    }

    pub(crate) fn u32_be(&mut self, what: &'static str) -> Result<u32> {
        self.array(what).map(u32::from_be_bytes)
    }

    pub(crate) fn u64_be(&mut self, what: &'static str) -> Result<u64> {
        self.array(what).map(u64::from_be_bytes)
    }

    /// An SSH-style string: `u32 BE length` then that many bytes, checked against what
    /// is left before anything is taken.
    pub(crate) fn string(&mut self, what: &'static str) -> Result<&'a [u8]> {
        let len = self.u32_be(what)?;
        let len = usize::try_from(len).map_err(|_| Error::TooLarge {
            what,
            len: u64::from(len),
            max: usize::MAX as u64,
        })?;
        self.bytes(len, what)
    }

    /// Fails unless every byte has been read.
    pub(crate) fn finish(&self, what: &'static str) -> Result<()> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(Error::TrailingBytes {
                what,
                extra: self.rest.len(),
            })
        }
    }
}

/// Somewhere encoded fields go: a [`Writer`] into a buffer, or a [`Counter`] that only
/// adds up lengths, so one encoding function serves both.
pub(crate) trait Sink {
    fn put(&mut self, bytes: &[u8]) -> Result<()>;

    fn u8(&mut self, v: u8) -> Result<()> {
        self.put(&[v])
    }

    fn u16_le(&mut self, v: u16) -> Result<()> {
        self.put(&v.to_le_bytes())
    }

    fn u32_le(&mut self, v: u32) -> Result<()> {
        self.put(&v.to_le_bytes())
    }

    fn u64_le(&mut self, v: u64) -> Result<()> {
        self.put(&v.to_le_bytes())
    }

    fn u32_be(&mut self, v: u32) -> Result<()> {
        self.put(&v.to_be_bytes())
    }

    fn u64_be(&mut self, v: u64) -> Result<()> {
        self.put(&v.to_be_bytes())
    }

    /// An SSH-style string: `u32 BE length` then the bytes.
    fn string(&mut self, bytes: &[u8], what: &'static str) -> Result<()> {
        self.u32_be(len_u32(bytes.len(), what)?)?;
        self.put(bytes)
    }
}

/// Writes fields front to back into a caller's buffer; every write checks space first.
#[derive(Debug)]
pub(crate) struct Writer<'a> {
    buf: &'a mut [u8],
    pos: usize,
}

/// Adds up the bytes an encoding would write.
#[derive(Debug, Default)]
pub(crate) struct Counter {
    pub(crate) len: usize,
}

impl<'a> Writer<'a> {
    /// A writer that fails up front unless `buf` holds `needed` bytes, so a too-small
    /// buffer reports the full size required rather than the first field that overflowed.
    pub(crate) fn with_capacity(buf: &'a mut [u8], needed: usize) -> Result<Self> {
        if buf.len() < needed {
            return Err(Error::BufferTooSmall {
                needed,
                available: buf.len(),
            });
        }
        Ok(Self { buf, pos: 0 })
    }

    pub(crate) fn position(&self) -> usize {
        self.pos
    }
}

impl Sink for Writer<'_> {
    fn put(&mut self, bytes: &[u8]) -> Result<()> {
        let end = self
            .pos
            .checked_add(bytes.len())
            .filter(|&end| end <= self.buf.len())
            .ok_or(Error::BufferTooSmall {
                needed: self.pos.saturating_add(bytes.len()),
                available: self.buf.len(),
            })?;
        self.buf[self.pos..end].copy_from_slice(bytes);
        self.pos = end;
        Ok(())
    }
}

impl Sink for Counter {
    fn put(&mut self, bytes: &[u8]) -> Result<()> {
        self.len = self.len.saturating_add(bytes.len());
        Ok(())
    }
}

/// A length as the `u32` the wire carries, or an error naming the field.
pub(crate) fn len_u32(len: usize, what: &'static str) -> Result<u32> {
    u32::try_from(len).map_err(|_| Error::TooLarge {
        what,
        len: len as u64,
        max: u64::from(u32::MAX),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reader_refuses_to_run_past_the_end() {
        let mut r = Reader::new(&[0, 0, 0, 9, 1, 2]);
        assert_eq!(
            r.string("name"),
            Err(Error::Truncated {
                what: "name",
                needed: 9,
                available: 2
            })
        );
        let mut r = Reader::new(&[1, 2, 3]);
        assert!(r.u32_le("x").is_err());
        assert_eq!(r.u16_le("y"), Ok(0x0201));
        assert_eq!(
            r.finish("msg"),
            Err(Error::TrailingBytes {
                what: "msg",
                extra: 1
            })
        );
    }

    #[test]
    fn writer_reports_the_size_it_needed() {
        let mut buf = [0u8; 4];
        assert_eq!(
            Writer::with_capacity(&mut buf, 9).unwrap_err(),
            Error::BufferTooSmall {
                needed: 9,
                available: 4
            }
        );
        let mut w = Writer::with_capacity(&mut buf, 4).unwrap();
        w.u16_le(0xbeef).unwrap();
        assert!(w.u32_be(1).is_err());
        assert_eq!(w.position(), 2);
    }
}
