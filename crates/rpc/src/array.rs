//! [`LeArray`]: a numeric array carried as a raw little-endian block in a bulk segment,
//! read in place whatever the block's alignment.

use core::fmt;
use core::marker::PhantomData;

use bytes::{Bytes, BytesMut};

mod sealed {
    pub trait Sealed {}
}

/// A number an [`LeArray`] can hold.
pub trait Scalar: sealed::Sealed + Copy + Send + Sync + 'static {
    /// Bytes per element.
    const SIZE: usize;
    /// Reads one element from exactly `SIZE` little-endian bytes.
    fn read(bytes: &[u8]) -> Self;
    /// Appends the element's little-endian bytes.
    fn write(self, out: &mut BytesMut);
}

macro_rules! scalar {
    ($($t:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl Scalar for $t {
            const SIZE: usize = size_of::<$t>();
            fn read(bytes: &[u8]) -> Self {
                let mut raw = [0; size_of::<$t>()];
                raw.copy_from_slice(bytes);
                <$t>::from_le_bytes(raw)
            }
            fn write(self, out: &mut BytesMut) {
                out.extend_from_slice(&self.to_le_bytes());
            }
        }
    )*};
}

scalar!(u8, i8, u16, i16, u32, i32, u64, i64, f32, f64);

/// Why bytes are not an array of `T`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{len} bytes are not a whole number of {size}-byte elements")]
pub struct NotWhole {
    /// Bytes given.
    pub len: usize,
    /// Bytes per element.
    pub size: usize,
}

/// A read-only array of `T` over a little-endian block, which may start at any address
/// (a segment cut from a receive buffer has no alignment to speak of). Elements are read
/// one at a time with `from_le_bytes`, so no alignment is assumed and nothing is copied
/// up front.
///
/// ```
/// use volley_rpc::LeArray;
///
/// let array = LeArray::from_slice(&[123i32, -4, 7]);
/// let bytes = array.into_bytes();          // send this as a bulk segment
/// let back = LeArray::<i32>::new(bytes.slice(4..)).unwrap(); // any offset works
/// assert_eq!(back.get(0), Some(-4));
/// assert_eq!(back.iter().collect::<Vec<_>>(), [-4, 7]);
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct LeArray<T> {
    bytes: Bytes,
    _t: PhantomData<T>,
}

impl<T: Scalar> LeArray<T> {
    /// Views `bytes` as an array; fails unless their length is a multiple of the size.
    pub fn new(bytes: Bytes) -> Result<Self, NotWhole> {
        if bytes.len() % T::SIZE != 0 {
            return Err(NotWhole {
                len: bytes.len(),
                size: T::SIZE,
            });
        }
        Ok(Self {
            bytes,
            _t: PhantomData,
        })
    }

    /// Encodes `values` (one copy, into a fresh block).
    pub fn from_slice(values: &[T]) -> Self {
        let mut out = BytesMut::with_capacity(values.len() * T::SIZE);
        for v in values {
            v.write(&mut out);
        }
        Self {
            bytes: out.freeze(),
            _t: PhantomData,
        }
    }

    /// Elements held.
    pub fn len(&self) -> usize {
        self.bytes.len() / T::SIZE
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The element at `index`, if there is one.
    pub fn get(&self, index: usize) -> Option<T> {
        let start = index.checked_mul(T::SIZE)?;
        self.bytes.get(start..start + T::SIZE).map(T::read)
    }

    /// The elements in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = T> + '_ {
        self.bytes.chunks_exact(T::SIZE).map(T::read)
    }

    /// The elements as a `Vec` (one copy).
    pub fn to_vec(&self) -> Vec<T> {
        self.iter().collect()
    }

    /// The block, to send as a bulk segment.
    pub fn into_bytes(self) -> Bytes {
        self.bytes
    }

    /// The block.
    pub fn as_bytes(&self) -> &Bytes {
        &self.bytes
    }
}

impl<T: Scalar + fmt::Debug> fmt::Debug for LeArray<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_at_every_misalignment() {
        let values: Vec<f64> = (0..100).map(|i| f64::from(i) * 1.5 - 7.0).collect();
        let block = LeArray::from_slice(&values).into_bytes();
        for shift in 0..8 {
            let mut shifted = vec![0xaa; shift];
            shifted.extend_from_slice(&block);
            let bytes = Bytes::from(shifted).slice(shift..);
            let array = LeArray::<f64>::new(bytes).unwrap();
            assert_eq!(array.to_vec(), values);
            assert_eq!(array.get(99), Some(values[99]));
            assert_eq!(array.get(100), None);
            assert_eq!(array.get(usize::MAX), None);
        }
        assert_eq!(
            LeArray::<i32>::new(Bytes::from_static(&[1, 2, 3])),
            Err(NotWhole { len: 3, size: 4 })
        );
    }
}
