//! A message queued for sending: one buffer, or pieces the sender owns and the channel
//! never joins.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::fmt;

/// A message's bytes held in pieces (say, a header and buffers shared with the
/// application), sent without first being joined into one buffer: each fragment the
/// channel sends is read from one piece, straight into its datagram.
///
/// ```
/// use volley_proto::channel::{Payload, Pieces};
///
/// /// A header, then a body, both owned elsewhere in a real program.
/// struct Two(Vec<u8>, Vec<u8>);
///
/// impl Pieces for Two {
///     fn total_len(&self) -> usize {
///         self.0.len() + self.1.len()
///     }
///     fn chunk(&self, offset: usize) -> &[u8] {
///         volley_proto::channel::chunk_in([&self.0[..], &self.1[..]], offset)
///     }
/// }
///
/// let payload = Payload::pieces(Two(b"head".to_vec(), b"body".to_vec()));
/// assert_eq!(payload.len(), 8);
/// ```
pub trait Pieces: Send {
    /// The message's length: every piece's, added.
    fn total_len(&self) -> usize;

    /// The bytes from `offset` to the end of the piece holding it; empty at or past
    /// [`total_len`](Pieces::total_len). For every `offset` below the length it must not
    /// be empty (an empty piece is skipped), and it must give the same bytes each time:
    /// a lost fragment is read again to be resent.
    fn chunk(&self, offset: usize) -> &[u8];
}

/// The bytes from `offset` to the end of the piece holding it, in `pieces` taken in
/// order (empty ones skipped); empty past the end. What most [`Pieces::chunk`]
/// implementations need.
///
/// ```
/// assert_eq!(volley_proto::channel::chunk_in([&b"ab"[..], b"", b"cde"], 3), b"de");
/// ```
pub fn chunk_in<'a>(pieces: impl IntoIterator<Item = &'a [u8]>, offset: usize) -> &'a [u8] {
    let mut offset = offset;
    for piece in pieces {
        if offset < piece.len() {
            return &piece[offset..];
        }
        offset -= piece.len();
    }
    &[]
}

/// What [`Connection::send`](super::Connection::send) queues: one buffer (a `Vec<u8>`
/// converts), or [`Pieces`].
pub enum Payload {
    /// One buffer.
    Buffer(Vec<u8>),
    /// Pieces, never joined.
    Pieces(Box<dyn Pieces>),
}

impl Payload {
    /// Boxes `pieces`.
    pub fn pieces(pieces: impl Pieces + 'static) -> Self {
        Self::Pieces(Box::new(pieces))
    }

    /// The message's length.
    pub fn len(&self) -> usize {
        match self {
            Self::Buffer(v) => v.len(),
            Self::Pieces(p) => p.total_len(),
        }
    }

    /// Whether the message is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes from `offset` to the end of its piece.
    pub(crate) fn chunk(&self, offset: usize) -> &[u8] {
        match self {
            Self::Buffer(v) => v.get(offset..).unwrap_or(&[]),
            Self::Pieces(p) => {
                let len = p.total_len();
                let chunk = p.chunk(offset);
                // Never past the message's end, whatever the pieces say.
                &chunk[..chunk.len().min(len.saturating_sub(offset))]
            }
        }
    }

    /// The first offset below the length whose chunk is empty, if any.
    pub(crate) fn gap(&self) -> Option<usize> {
        let Self::Pieces(_) = self else {
            return None;
        };
        let len = self.len();
        let mut offset = 0;
        while offset < len {
            let n = self.chunk(offset).len();
            if n == 0 {
                return Some(offset);
            }
            offset += n;
        }
        None
    }
}

impl From<Vec<u8>> for Payload {
    fn from(v: Vec<u8>) -> Self {
        Self::Buffer(v)
    }
}

impl fmt::Debug for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Buffer(v) => write!(f, "Payload::Buffer({} bytes)", v.len()),
            Self::Pieces(p) => write!(f, "Payload::Pieces({} bytes)", p.total_len()),
        }
    }
}
