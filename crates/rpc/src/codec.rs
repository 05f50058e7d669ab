//! [`Codec`]: how arguments and results become bytes. bincode 2 ([`Bincode`]) by
//! default; postcard ([`Postcard`], feature `postcard`) as the maintained alternative.
//! Both ends must use the same one; the hello checks it.

use bytes::{BufMut, BytesMut};
use serde::{Deserialize, Serialize};
use volley_proto::rpc::CodecId;

/// Why a value could not be encoded or decoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CodecError(pub String);

/// A serde format for arguments and results. Implementations are zero-sized markers.
pub trait Codec: Send + Sync + 'static {
    /// The id the hello carries.
    const ID: CodecId;

    /// Appends `value`'s encoding to `out` (a pooled buffer,
    /// frozen into `Bytes` without a copy or an allocation once written).
    fn encode<T: Serialize + ?Sized>(value: &T, out: &mut BytesMut) -> Result<(), CodecError>;

    /// Writes `value`'s encoding at the start of `out` if it fits, giving its length;
    /// `None` if it does not fit or cannot be encoded (the caller then encodes it with
    /// [`encode`](Self::encode), which says why). Small values travel inline in their
    /// message this way. By default `None`: every value goes through `encode`.
    fn encode_small<T: Serialize + ?Sized>(value: &T, out: &mut [u8]) -> Option<usize> {
        let _ = (value, out);
        None
    }

    /// Decodes a value from all of `bytes`; a value may borrow from them (`&str`,
    /// `&[u8]`) where its type allows. Bytes left over are an error.
    fn decode<'de, T: Deserialize<'de>>(bytes: &'de [u8]) -> Result<T, CodecError>;
}

/// bincode 2.0.1 through serde, standard configuration (variable-length integers,
/// little-endian).
#[derive(Clone, Copy, Debug, Default)]
pub struct Bincode;

impl Codec for Bincode {
    const ID: CodecId = CodecId::BINCODE2;

    fn encode<T: Serialize + ?Sized>(value: &T, out: &mut BytesMut) -> Result<(), CodecError> {
        let mut out = out.writer();
        bincode::serde::encode_into_std_write(value, &mut out, bincode::config::standard())
            .map(drop)
            .map_err(|e| CodecError(e.to_string()))
    }

    fn encode_small<T: Serialize + ?Sized>(value: &T, out: &mut [u8]) -> Option<usize> {
        bincode::serde::encode_into_slice(value, out, bincode::config::standard()).ok()
    }

    fn decode<'de, T: Deserialize<'de>>(bytes: &'de [u8]) -> Result<T, CodecError> {
        let (value, used) =
            bincode::serde::borrow_decode_from_slice(bytes, bincode::config::standard())
                .map_err(|e| CodecError(e.to_string()))?;
        if used != bytes.len() {
            return Err(CodecError(format!(
                "{} bytes left over after the value",
                bytes.len() - used
            )));
        }
        Ok(value)
    }
}

/// postcard 1 (feature `postcard`): maintained, with a documented stable format.
#[cfg(feature = "postcard")]
#[derive(Clone, Copy, Debug, Default)]
pub struct Postcard;

#[cfg(feature = "postcard")]
impl Codec for Postcard {
    const ID: CodecId = CodecId::POSTCARD;

    fn encode<T: Serialize + ?Sized>(value: &T, out: &mut BytesMut) -> Result<(), CodecError> {
        postcard::to_extend(value, Extender(out))
            .map(drop)
            .map_err(|e| CodecError(e.to_string()))
    }

    fn encode_small<T: Serialize + ?Sized>(value: &T, out: &mut [u8]) -> Option<usize> {
        postcard::to_slice(value, out)
            .ok()
            .map(|written| written.len())
    }

    fn decode<'de, T: Deserialize<'de>>(bytes: &'de [u8]) -> Result<T, CodecError> {
        let (value, rest) =
            postcard::take_from_bytes(bytes).map_err(|e| CodecError(e.to_string()))?;
        if !rest.is_empty() {
            return Err(CodecError(format!(
                "{} bytes left over after the value",
                rest.len()
            )));
        }
        Ok(value)
    }
}

/// postcard's `to_extend` takes its buffer by value: this lends it the pool's.
#[cfg(feature = "postcard")]
struct Extender<'a>(&'a mut BytesMut);

#[cfg(feature = "postcard")]
impl Extend<u8> for Extender<'_> {
    fn extend<I: IntoIterator<Item = u8>>(&mut self, bytes: I) {
        self.0.extend(bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Borrowing<'a> {
        name: &'a str,
        #[serde(with = "serde_bytes_like")]
        blob: &'a [u8],
        n: u64,
    }

    /// `&[u8]` as a serde byte string, so it decodes borrowed.
    mod serde_bytes_like {
        use serde::{Deserializer, Serializer};

        pub(super) fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
            s.serialize_bytes(v)
        }

        pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<&'de [u8], D::Error> {
            serde::Deserialize::deserialize(d)
        }
    }

    fn round_trip<C: Codec>() {
        let value = Borrowing {
            name: "chip",
            blob: &[1, 2, 3],
            n: 1 << 40,
        };
        let mut out = BytesMut::new();
        C::encode(&value, &mut out).unwrap();
        let back: Borrowing<'_> = C::decode(&out).unwrap();
        assert_eq!(back, value);
        // The strings point into the encoded bytes: nothing was copied.
        let range = out.as_ptr_range();
        assert!(range.contains(&back.name.as_ptr()));
        assert!(range.contains(&back.blob.as_ptr()));
        // Left-over bytes and truncation are errors, not panics.
        out.extend_from_slice(&[0]);
        assert!(C::decode::<Borrowing<'_>>(&out).is_err());
        out.truncate(3);
        assert!(C::decode::<Borrowing<'_>>(&out).is_err());
    }

    /// A small value's inline encoding is its encoding; a large one does not fit.
    fn small_encodings<C: Codec>() {
        let mut inline = [0u8; 16];
        let n = C::encode_small(&(1u64 << 40), &mut inline).expect("fits");
        let mut out = BytesMut::new();
        C::encode(&(1u64 << 40), &mut out).unwrap();
        assert_eq!(&inline[..n], &out[..]);
        assert_eq!(
            C::encode_small(&"a string of more than sixteen bytes", &mut inline),
            None
        );
    }

    #[test]
    fn bincode_round_trips_and_borrows() {
        round_trip::<Bincode>();
        small_encodings::<Bincode>();
    }

    #[cfg(feature = "postcard")]
    #[test]
    fn postcard_round_trips_and_borrows() {
        round_trip::<Postcard>();
        small_encodings::<Postcard>();
    }
}
