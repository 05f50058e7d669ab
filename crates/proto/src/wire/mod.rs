//! Wire formats: views and reprs over untrusted bytes, and the one error type they share.
//!
//! Untrusted bytes enter only through a `parse`/`new_checked`/`decode` function, which
//! checks every length before it reads and never panics. Encoding writes into a buffer the
//! caller owns; a buffer that is too small is an error naming the size it needed.

use core::fmt;

/// Declares an open enum: a newtype over the wire integer with one associated constant per
/// value the spec names, so values a peer adds still round-trip (the rustls pattern).
macro_rules! open_enum {
    (
        $(#[$meta:meta])*
        pub struct $name:ident($repr:ty) {
            $( $(#[$cmeta:meta])* $konst:ident = $value:literal => $text:literal, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub $repr);

        impl $name {
            $( $(#[$cmeta])* pub const $konst: Self = Self($value); )*

            /// Every value the spec names, in wire order.
            pub const KNOWN: &'static [Self] = &[$(Self::$konst),*];

            /// The spec's name for this value, or `None` for a value it does not define.
            pub const fn name(self) -> Option<&'static str> {
                match self.0 {
                    $( $value => Some($text), )*
                    _ => None,
                }
            }
        }

        impl core::fmt::Debug for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                core::fmt::Display::fmt(self, f)
            }
        }

        impl core::fmt::Display for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                match self.name() {
                    Some(name) => f.write_str(name),
                    None => write!(f, "unknown({:#x})", self.0),
                }
            }
        }

        impl From<$repr> for $name {
            fn from(value: $repr) -> Self {
                Self(value)
            }
        }

        impl From<$name> for $repr {
            fn from(value: $name) -> Self {
                value.0
            }
        }
    };
}

pub(crate) use open_enum;

pub mod frame;

pub(crate) mod cursor;

pub(crate) use cursor::{Counter, Reader, Sink, Writer, len_u32};

/// Why bytes could not be decoded or a message could not be encoded.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// The input ends before the field `what` does.
    Truncated {
        /// The structure or field being read.
        what: &'static str,
        /// Bytes the field needed from where it starts.
        needed: usize,
        /// Bytes that were left.
        available: usize,
    },
    /// A length or size is over the limit that applies to it.
    TooLarge {
        /// The structure or field.
        what: &'static str,
        /// The length found or asked for.
        len: u64,
        /// The largest allowed.
        max: u64,
    },
    /// A length is under the minimum for its structure.
    TooShort {
        /// The structure or field.
        what: &'static str,
        /// The length found.
        len: u64,
        /// The smallest allowed.
        min: u64,
    },
    /// The caller's output buffer cannot hold the encoding.
    BufferTooSmall {
        /// Bytes the encoding needs.
        needed: usize,
        /// Bytes the buffer has.
        available: usize,
    },
    /// A field holds a value this format does not allow.
    InvalidValue {
        /// The field.
        what: &'static str,
        /// The value found.
        value: u64,
    },
    /// Bytes are left over after a message that should have ended.
    TrailingBytes {
        /// The message.
        what: &'static str,
        /// How many bytes were left.
        extra: usize,
    },
    /// The message type is not one this decoder handles.
    UnexpectedType {
        /// What kind of message was expected.
        expected: &'static str,
        /// The type byte found.
        found: u8,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Truncated {
                what,
                needed,
                available,
            } => write!(
                f,
                "truncated {what}: needs {needed} bytes, only {available} left"
            ),
            Self::TooLarge { what, len, max } => {
                write!(f, "{what} too large: {len} bytes, at most {max} allowed")
            }
            Self::TooShort { what, len, min } => {
                write!(f, "{what} too short: {len} bytes, at least {min} needed")
            }
            Self::BufferTooSmall { needed, available } => write!(
                f,
                "output buffer too small: needs {needed} bytes, has {available}"
            ),
            Self::InvalidValue { what, value } => write!(f, "invalid {what}: {value:#x}"),
            Self::TrailingBytes { what, extra } => {
                write!(f, "{extra} unexpected bytes after the end of {what}")
            }
            Self::UnexpectedType { expected, found } => {
                write!(
                    f,
                    "unexpected message type {found} where {expected} was expected"
                )
            }
        }
    }
}

impl core::error::Error for Error {}

/// Shorthand for results of this module.
pub type Result<T, E = Error> = core::result::Result<T, E>;
