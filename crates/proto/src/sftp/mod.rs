//! SFTP v3 (draft-ietf-secsh-filexfer-02) as OpenSSH's sftp-server speaks it:
//! [`Request`]s a client sends, [`Response`]s a server answers with, [`Attrs`], status
//! codes and the `limits@openssh.com` reply.
//!
//! Decoding borrows from the frame: a DATA reply's or WRITE request's payload is a slice of
//! the input, never copied. Encoding writes everything but the bulk payload with
//! `emit_head`, so the payload can follow in a vectored write uncopied; `emit` writes
//! both into one buffer for callers that do not care.
//!
//! ```
//! use volley_proto::wire::frame::Decoder;
//! use volley_proto::sftp::Request;
//!
//! let write = Request::Write { id: 9, handle: b"h1", offset: 4096, data: &[7; 1000] };
//! let mut head = [0u8; 64];
//! let n = write.emit_head(&mut head)?;
//! assert_eq!(n + write.bulk().len(), write.buffer_len());
//!
//! // On the wire: head then payload. Decoding borrows the payload from the input.
//! let mut wire = head[..n].to_vec();
//! wire.extend_from_slice(write.bulk());
//! let (frame, used) = Decoder::default().decode(&wire)?.expect("a whole frame");
//! assert_eq!(used, wire.len());
//! assert_eq!(Request::parse(frame)?, write);
//! # Ok::<(), volley_proto::wire::Error>(())
//! ```

use core::ops::BitOr;

use crate::wire::frame::{self, HEADER_LEN};
use crate::wire::open_enum;
use crate::wire::{Counter, Error, Reader, Result, Sink, Writer};

mod attrs;
mod request;
mod response;
#[cfg(test)]
mod tests;

pub use attrs::Attrs;
pub use request::{Request, WriteHead};
pub use response::{NameEntry, Names, Response};

/// The protocol version this module implements.
pub const VERSION: u32 = 3;
/// The extension that asks OpenSSH for its limits.
pub const LIMITS_EXTENSION: &[u8] = b"limits@openssh.com";
/// The extension for a rename that replaces an existing target.
pub const POSIX_RENAME_EXTENSION: &[u8] = b"posix-rename@openssh.com";
/// The extension that flushes an open file to the server's disk.
pub const FSYNC_EXTENSION: &[u8] = b"fsync@openssh.com";

open_enum! {
    /// An SFTP message type.
    pub struct PacketType(u8) {
        /// Client hello.
        INIT = 1 => "SSH_FXP_INIT",
        /// Server hello.
        VERSION = 2 => "SSH_FXP_VERSION",
        /// Open a file.
        OPEN = 3 => "SSH_FXP_OPEN",
        /// Close a handle.
        CLOSE = 4 => "SSH_FXP_CLOSE",
        /// Read from a file.
        READ = 5 => "SSH_FXP_READ",
        /// Write to a file.
        WRITE = 6 => "SSH_FXP_WRITE",
        /// Attributes of a path, not following symlinks.
        LSTAT = 7 => "SSH_FXP_LSTAT",
        /// Attributes of an open handle.
        FSTAT = 8 => "SSH_FXP_FSTAT",
        /// Set a path's attributes.
        SETSTAT = 9 => "SSH_FXP_SETSTAT",
        /// Set an open handle's attributes.
        FSETSTAT = 10 => "SSH_FXP_FSETSTAT",
        /// Open a directory.
        OPENDIR = 11 => "SSH_FXP_OPENDIR",
        /// Read directory entries.
        READDIR = 12 => "SSH_FXP_READDIR",
        /// Remove a file.
        REMOVE = 13 => "SSH_FXP_REMOVE",
        /// Make a directory.
        MKDIR = 14 => "SSH_FXP_MKDIR",
        /// Remove a directory.
        RMDIR = 15 => "SSH_FXP_RMDIR",
        /// Canonicalise a path.
        REALPATH = 16 => "SSH_FXP_REALPATH",
        /// Attributes of a path, following symlinks.
        STAT = 17 => "SSH_FXP_STAT",
        /// Rename a path.
        RENAME = 18 => "SSH_FXP_RENAME",
        /// Read a symlink.
        READLINK = 19 => "SSH_FXP_READLINK",
        /// Make a symlink.
        SYMLINK = 20 => "SSH_FXP_SYMLINK",
        /// Result code of a request.
        STATUS = 101 => "SSH_FXP_STATUS",
        /// An open handle.
        HANDLE = 102 => "SSH_FXP_HANDLE",
        /// Bytes read.
        DATA = 103 => "SSH_FXP_DATA",
        /// Names and attributes.
        NAME = 104 => "SSH_FXP_NAME",
        /// Attributes.
        ATTRS = 105 => "SSH_FXP_ATTRS",
        /// A vendor extension request.
        EXTENDED = 200 => "SSH_FXP_EXTENDED",
        /// A vendor extension reply.
        EXTENDED_REPLY = 201 => "SSH_FXP_EXTENDED_REPLY",
    }
}

open_enum! {
    /// An SFTP status code.
    pub struct StatusCode(u32) {
        /// Success.
        OK = 0 => "SSH_FX_OK",
        /// End of file, or no more directory entries.
        EOF = 1 => "SSH_FX_EOF",
        /// No such file or directory.
        NO_SUCH_FILE = 2 => "SSH_FX_NO_SUCH_FILE",
        /// Permission denied.
        PERMISSION_DENIED = 3 => "SSH_FX_PERMISSION_DENIED",
        /// Some other failure.
        FAILURE = 4 => "SSH_FX_FAILURE",
        /// A badly formed message.
        BAD_MESSAGE = 5 => "SSH_FX_BAD_MESSAGE",
        /// No connection.
        NO_CONNECTION = 6 => "SSH_FX_NO_CONNECTION",
        /// Connection lost.
        CONNECTION_LOST = 7 => "SSH_FX_CONNECTION_LOST",
        /// Operation not supported.
        OP_UNSUPPORTED = 8 => "SSH_FX_OP_UNSUPPORTED",
    }
}

/// OPEN's `pflags` bits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct OpenFlags(pub u32);

impl OpenFlags {
    /// Open for reading.
    pub const READ: Self = Self(0x01);
    /// Open for writing.
    pub const WRITE: Self = Self(0x02);
    /// Every write goes to the end of the file.
    pub const APPEND: Self = Self(0x04);
    /// Create the file if it does not exist.
    pub const CREAT: Self = Self(0x08);
    /// Truncate an existing file (needs `CREAT`).
    pub const TRUNC: Self = Self(0x10);
    /// Fail if the file exists (needs `CREAT`).
    pub const EXCL: Self = Self(0x20);

    /// Whether every bit of `other` is set here.
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }
}

impl BitOr for OpenFlags {
    type Output = Self;

    fn bitor(self, rhs: Self) -> Self {
        Self(self.0 | rhs.0)
    }
}

/// The `limits@openssh.com` reply: what the server accepts. Zero means "no limit given".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Limits {
    /// Largest packet (length field value) the server accepts.
    pub max_packet_len: u64,
    /// Largest READ length it honours (longer reads are clamped).
    pub max_read_len: u64,
    /// Largest WRITE payload it accepts.
    pub max_write_len: u64,
    /// Most handles open at once.
    pub max_open_handles: u64,
}

impl Limits {
    /// Bytes of the reply data.
    pub const LEN: usize = 32;

    /// Decodes the data of the EXTENDED_REPLY to a `limits@openssh.com` request.
    pub fn parse(data: &[u8]) -> Result<Self> {
        let mut r = Reader::new(data);
        let limits = Self {
            max_packet_len: r.u64_be("limits max-packet-length")?,
            max_read_len: r.u64_be("limits max-read-length")?,
            max_write_len: r.u64_be("limits max-write-length")?,
            max_open_handles: r.u64_be("limits max-open-handles")?,
        };
        r.finish("limits@openssh.com reply")?;
        Ok(limits)
    }

    /// The reply data.
    pub fn emit(&self) -> [u8; Self::LEN] {
        let mut out = [0; Self::LEN];
        for (chunk, v) in out.chunks_exact_mut(8).zip([
            self.max_packet_len,
            self.max_read_len,
            self.max_write_len,
            self.max_open_handles,
        ]) {
            chunk.copy_from_slice(&v.to_be_bytes());
        }
        out
    }
}

/// Name/value string pairs, kept in wire form: VERSION and INIT extensions (up to the end
/// of the message) and ATTRS extended attributes (counted).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Pairs<'a> {
    raw: &'a [u8],
    count: u32,
}

/// Iterates over [`Pairs`].
#[derive(Clone, Debug)]
pub struct PairsIter<'a> {
    reader: Reader<'a>,
    left: u32,
}

impl<'a> Pairs<'a> {
    /// No pairs.
    pub const EMPTY: Self = Self { raw: &[], count: 0 };

    /// Checks `raw` holds whole string pairs and nothing else.
    pub fn from_wire(raw: &'a [u8]) -> Result<Self> {
        let mut r = Reader::new(raw);
        let mut count = 0u32;
        while !r.is_empty() {
            r.string("extension name")?;
            r.string("extension data")?;
            count = count.checked_add(1).ok_or(Error::TooLarge {
                what: "pair count",
                len: u64::from(u32::MAX) + 1,
                max: u64::from(u32::MAX),
            })?;
        }
        Ok(Self { raw, count })
    }

    /// Takes exactly `count` pairs off the front of `r`.
    pub(crate) fn take_counted(r: &mut Reader<'a>, count: u32) -> Result<Self> {
        let start = r.clone().rest();
        let before = r.remaining();
        for _ in 0..count {
            r.string("extended attribute name")?;
            r.string("extended attribute data")?;
        }
        let used = before - r.remaining();
        Ok(Self {
            raw: &start[..used],
            count,
        })
    }

    /// Encodes `pairs` into `buf` and returns them as wire-form [`Pairs`] borrowing it.
    pub fn write<'b>(pairs: &[(&[u8], &[u8])], buf: &'b mut [u8]) -> Result<Pairs<'b>> {
        let len = pairs.iter().fold(0usize, |acc, (name, value)| {
            acc.saturating_add(8)
                .saturating_add(name.len())
                .saturating_add(value.len())
        });
        let mut w = Writer::with_capacity(buf, len)?;
        for (name, value) in pairs {
            w.string(name, "pair name")?;
            w.string(value, "pair value")?;
        }
        let count = crate::wire::len_u32(pairs.len(), "pair count")?;
        Ok(Pairs {
            raw: &buf[..len],
            count,
        })
    }

    /// Number of pairs.
    pub const fn count(&self) -> u32 {
        self.count
    }

    /// The pairs in wire form.
    pub const fn as_bytes(&self) -> &'a [u8] {
        self.raw
    }

    /// The value of the first pair named `name`.
    pub fn get(&self, name: &[u8]) -> Option<&'a [u8]> {
        self.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    }

    /// The pairs in order.
    pub fn iter(&self) -> PairsIter<'a> {
        PairsIter {
            reader: Reader::new(self.raw),
            left: self.count,
        }
    }
}

impl<'a> IntoIterator for Pairs<'a> {
    type Item = (&'a [u8], &'a [u8]);
    type IntoIter = PairsIter<'a>;

    fn into_iter(self) -> PairsIter<'a> {
        self.iter()
    }
}

impl<'a> Iterator for PairsIter<'a> {
    type Item = (&'a [u8], &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        // Validated when the Pairs were built; an error here cannot happen, and ends
        // the iteration rather than panicking if it somehow did.
        let name = self.reader.string("pair name").ok()?;
        let value = self.reader.string("pair value").ok()?;
        Some((name, value))
    }
}

/// What [`Request`] and [`Response`] share for encoding: a type, an id (or version), the
/// body fields before any bulk payload, and the bulk payload itself.
trait Message {
    fn packet_type(&self) -> PacketType;
    fn frame_id(&self) -> u32;
    /// The bulk payload that follows the head uncopied (empty for most messages).
    fn bulk(&self) -> &[u8];
    /// Every body field after the id, up to (not including) the bulk payload.
    fn put_head(&self, w: &mut impl Sink) -> Result<()>;

    fn head_len(&self) -> usize {
        let mut counter = Counter::default();
        // A Counter never fails.
        let _ = self.put_head(&mut counter);
        HEADER_LEN.saturating_add(counter.len)
    }

    fn buffer_len(&self) -> usize {
        self.head_len().saturating_add(self.bulk().len())
    }

    /// The body fields after the id, up to the bulk payload: what a framed connection
    /// sends after the frame header it writes itself.
    fn emit_body_head(&self, buf: &mut [u8]) -> Result<usize> {
        let mut w = Writer::with_capacity(buf, self.head_len() - HEADER_LEN)?;
        self.put_head(&mut w)?;
        Ok(w.position())
    }

    fn emit_head(&self, buf: &mut [u8]) -> Result<usize> {
        let head_len = self.head_len();
        let body_len = (head_len - HEADER_LEN).saturating_add(self.bulk().len());
        let header = frame::Header::new(self.packet_type().0, self.frame_id(), body_len)?;
        let mut w = Writer::with_capacity(buf, head_len)?;
        w.put(&header.emit())?;
        self.put_head(&mut w)?;
        Ok(w.position())
    }

    #[cfg(feature = "alloc")]
    fn to_vec(&self) -> Result<alloc::vec::Vec<u8>> {
        let mut out = alloc::vec![0; self.buffer_len()];
        self.emit(&mut out)?;
        Ok(out)
    }

    fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let total = self.buffer_len();
        if buf.len() < total {
            return Err(Error::BufferTooSmall {
                needed: total,
                available: buf.len(),
            });
        }
        let head = self.emit_head(buf)?;
        buf[head..total].copy_from_slice(self.bulk());
        Ok(total)
    }
}
