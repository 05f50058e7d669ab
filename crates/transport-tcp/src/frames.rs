//! Frames as this crate passes them around: [`Frame`] as received, `Outgoing` as queued
//! for the writer (header, a small head, then a payload in memory or in a file).

use bytes::Bytes;
use tokio::sync::OwnedSemaphorePermit;
use volley_proto::wire::frame;

use crate::sendfile::FileRegion;
use crate::write_memory::MemoryShare;

/// A frame as received; `body` shares the reader's buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// Frame type.
    pub ty: u8,
    /// The id: of the request it answers, or the peer's own.
    pub id: u32,
    /// Everything after the id.
    pub body: Bytes,
}

/// A frame for the writer: its header, a small head copied inline, and a payload.
pub(crate) struct Outgoing {
    pub(crate) header: [u8; frame::HEADER_LEN],
    pub(crate) head: Head,
    pub(crate) payload: Payload,
    /// Its share of the write budget, given back once it is written.
    pub(crate) budget: OwnedSemaphorePermit,
    /// Its share of the listener's memory for all connections, if it has one.
    pub(crate) share: Option<MemoryShare>,
}

impl Outgoing {
    /// Sets the id in the encoded header (its last four bytes, big-endian).
    pub(crate) fn set_id(&mut self, id: u32) {
        self.header[frame::HEADER_LEN - 4..].copy_from_slice(&id.to_be_bytes());
    }
}

/// What follows a frame's head on the wire.
pub(crate) enum Payload {
    /// Bytes in memory.
    Mem(Bytes),
    /// Pieces of memory, back to back (the writer splits them up): a first piece and the
    /// rest, so a caller holding them apart (arguments and segments) need not put the
    /// first in the list, which would allocate when the list is full.
    Parts(Bytes, Vec<Bytes>),
    /// A file region.
    File(FileRegion),
}

impl Payload {
    pub(crate) fn len(&self) -> usize {
        match self {
            Self::Mem(bytes) => bytes.len(),
            Self::Parts(first, rest) => first.len() + rest.iter().map(Bytes::len).sum::<usize>(),
            Self::File(region) => region.len(),
        }
    }

    /// Bytes of memory it holds while queued.
    pub(crate) fn in_memory(&self) -> usize {
        match self {
            Self::Mem(bytes) => bytes.len(),
            Self::Parts(..) => self.len(),
            Self::File(_) => 0,
        }
    }
}

/// Bytes of a head kept inside the frame descriptor instead of on the heap.
const INLINE_HEAD: usize = 64;

/// A frame's small head: inline when short (no allocation per frame), else on the heap.
pub(crate) enum Head {
    Inline { len: u8, bytes: [u8; INLINE_HEAD] },
    Heap(Bytes),
}

impl Head {
    pub(crate) fn new(head: &[u8]) -> Self {
        if head.len() <= INLINE_HEAD {
            let mut bytes = [0; INLINE_HEAD];
            bytes[..head.len()].copy_from_slice(head);
            // Fits: at most INLINE_HEAD (64) bytes.
            Self::Inline {
                len: head.len() as u8,
                bytes,
            }
        } else {
            Self::Heap(Bytes::copy_from_slice(head))
        }
    }

    pub(crate) fn as_slice(&self) -> &[u8] {
        match self {
            Self::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Self::Heap(bytes) => bytes,
        }
    }
}
