//! SFTP v3 requests: what a client sends.

use super::{Attrs, Error, Message, OpenFlags, PacketType, Pairs, Reader, Result, Sink, Writer};
use crate::wire::frame::{self, Frame, HEADER_LEN};
use crate::wire::{Counter, len_u32};

/// A client's request. Byte strings (paths, handles) are borrowed, as is WRITE's payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Request<'a> {
    /// Hello: the client's version and its extensions.
    Init {
        /// Protocol version (3).
        version: u32,
        /// Extension name/data pairs.
        extensions: Pairs<'a>,
    },
    /// Open a file.
    Open {
        /// Request id.
        id: u32,
        /// Path.
        filename: &'a [u8],
        /// How to open it.
        pflags: OpenFlags,
        /// Attributes for a new file.
        attrs: Attrs<'a>,
    },
    /// Close a handle.
    Close {
        /// Request id.
        id: u32,
        /// The handle.
        handle: &'a [u8],
    },
    /// Read up to `len` bytes at `offset`.
    Read {
        /// Request id.
        id: u32,
        /// The handle.
        handle: &'a [u8],
        /// Offset in the file.
        offset: u64,
        /// Bytes wanted.
        len: u32,
    },
    /// Write `data` at `offset`.
    Write {
        /// Request id.
        id: u32,
        /// The handle.
        handle: &'a [u8],
        /// Offset in the file.
        offset: u64,
        /// The payload: the bulk part, encoded apart from the head.
        data: &'a [u8],
    },
    /// Attributes of a path, not following a final symlink.
    Lstat {
        /// Request id.
        id: u32,
        /// Path.
        path: &'a [u8],
    },
    /// Attributes of an open handle.
    Fstat {
        /// Request id.
        id: u32,
        /// The handle.
        handle: &'a [u8],
    },
    /// Set a path's attributes.
    Setstat {
        /// Request id.
        id: u32,
        /// Path.
        path: &'a [u8],
        /// What to set.
        attrs: Attrs<'a>,
    },
    /// Set an open handle's attributes.
    Fsetstat {
        /// Request id.
        id: u32,
        /// The handle.
        handle: &'a [u8],
        /// What to set.
        attrs: Attrs<'a>,
    },
    /// Open a directory for reading.
    Opendir {
        /// Request id.
        id: u32,
        /// Path.
        path: &'a [u8],
    },
    /// Read the next entries of a directory.
    Readdir {
        /// Request id.
        id: u32,
        /// The handle.
        handle: &'a [u8],
    },
    /// Remove a file.
    Remove {
        /// Request id.
        id: u32,
        /// Path.
        filename: &'a [u8],
    },
    /// Make a directory.
    Mkdir {
        /// Request id.
        id: u32,
        /// Path.
        path: &'a [u8],
        /// Attributes for it.
        attrs: Attrs<'a>,
    },
    /// Remove a directory.
    Rmdir {
        /// Request id.
        id: u32,
        /// Path.
        path: &'a [u8],
    },
    /// Canonicalise a path.
    Realpath {
        /// Request id.
        id: u32,
        /// Path.
        path: &'a [u8],
    },
    /// Attributes of a path, following symlinks.
    Stat {
        /// Request id.
        id: u32,
        /// Path.
        path: &'a [u8],
    },
    /// Rename a path (fails if `newpath` exists; see the posix-rename extension).
    Rename {
        /// Request id.
        id: u32,
        /// Current path.
        oldpath: &'a [u8],
        /// New path.
        newpath: &'a [u8],
    },
    /// Read a symlink's target.
    Readlink {
        /// Request id.
        id: u32,
        /// Path.
        path: &'a [u8],
    },
    /// Make a symlink. The draft orders the strings (linkpath, targetpath); OpenSSH's
    /// server reads them the other way round, so a client talking to OpenSSH puts the
    /// target first. This type keeps wire order and leaves that choice to the client.
    Symlink {
        /// Request id.
        id: u32,
        /// The first string on the wire.
        linkpath: &'a [u8],
        /// The second string on the wire.
        targetpath: &'a [u8],
    },
    /// A vendor extension, such as `limits@openssh.com`.
    Extended {
        /// Request id.
        id: u32,
        /// The extension's name.
        request: &'a [u8],
        /// The extension's own data, to the end of the message.
        data: &'a [u8],
    },
}

impl<'a> Request<'a> {
    /// The message type.
    pub const fn packet_type(&self) -> PacketType {
        match self {
            Self::Init { .. } => PacketType::INIT,
            Self::Open { .. } => PacketType::OPEN,
            Self::Close { .. } => PacketType::CLOSE,
            Self::Read { .. } => PacketType::READ,
            Self::Write { .. } => PacketType::WRITE,
            Self::Lstat { .. } => PacketType::LSTAT,
            Self::Fstat { .. } => PacketType::FSTAT,
            Self::Setstat { .. } => PacketType::SETSTAT,
            Self::Fsetstat { .. } => PacketType::FSETSTAT,
            Self::Opendir { .. } => PacketType::OPENDIR,
            Self::Readdir { .. } => PacketType::READDIR,
            Self::Remove { .. } => PacketType::REMOVE,
            Self::Mkdir { .. } => PacketType::MKDIR,
            Self::Rmdir { .. } => PacketType::RMDIR,
            Self::Realpath { .. } => PacketType::REALPATH,
            Self::Stat { .. } => PacketType::STAT,
            Self::Rename { .. } => PacketType::RENAME,
            Self::Readlink { .. } => PacketType::READLINK,
            Self::Symlink { .. } => PacketType::SYMLINK,
            Self::Extended { .. } => PacketType::EXTENDED,
        }
    }

    /// The request id, or the version for INIT (the same word on the wire).
    pub const fn id(&self) -> u32 {
        match *self {
            Self::Init { version, .. } => version,
            Self::Open { id, .. }
            | Self::Close { id, .. }
            | Self::Read { id, .. }
            | Self::Write { id, .. }
            | Self::Lstat { id, .. }
            | Self::Fstat { id, .. }
            | Self::Setstat { id, .. }
            | Self::Fsetstat { id, .. }
            | Self::Opendir { id, .. }
            | Self::Readdir { id, .. }
            | Self::Remove { id, .. }
            | Self::Mkdir { id, .. }
            | Self::Rmdir { id, .. }
            | Self::Realpath { id, .. }
            | Self::Stat { id, .. }
            | Self::Rename { id, .. }
            | Self::Readlink { id, .. }
            | Self::Symlink { id, .. }
            | Self::Extended { id, .. } => id,
        }
    }

    /// Decodes a request from a frame. Every string is checked against the bytes left
    /// before it is taken; bytes after the last field are an error.
    pub fn parse(frame: Frame<'a>) -> Result<Self> {
        let id = frame.id;
        let mut r = Reader::new(frame.body);
        let ty = PacketType(frame.ty);
        let request = match ty {
            PacketType::INIT => Self::Init {
                version: id,
                extensions: Pairs::from_wire(r.take_rest())?,
            },
            PacketType::OPEN => Self::Open {
                id,
                filename: r.string("OPEN filename")?,
                pflags: OpenFlags(r.u32_be("OPEN pflags")?),
                attrs: Attrs::take(&mut r)?,
            },
            PacketType::CLOSE => Self::Close {
                id,
                handle: r.string("CLOSE handle")?,
            },
            PacketType::READ => Self::Read {
                id,
                handle: r.string("READ handle")?,
                offset: r.u64_be("READ offset")?,
                len: r.u32_be("READ length")?,
            },
            PacketType::WRITE => Self::Write {
                id,
                handle: r.string("WRITE handle")?,
                offset: r.u64_be("WRITE offset")?,
                data: r.string("WRITE data")?,
            },
            PacketType::LSTAT => Self::Lstat {
                id,
                path: r.string("LSTAT path")?,
            },
            PacketType::FSTAT => Self::Fstat {
                id,
                handle: r.string("FSTAT handle")?,
            },
            PacketType::SETSTAT => Self::Setstat {
                id,
                path: r.string("SETSTAT path")?,
                attrs: Attrs::take(&mut r)?,
            },
            PacketType::FSETSTAT => Self::Fsetstat {
                id,
                handle: r.string("FSETSTAT handle")?,
                attrs: Attrs::take(&mut r)?,
            },
            PacketType::OPENDIR => Self::Opendir {
                id,
                path: r.string("OPENDIR path")?,
            },
            PacketType::READDIR => Self::Readdir {
                id,
                handle: r.string("READDIR handle")?,
            },
            PacketType::REMOVE => Self::Remove {
                id,
                filename: r.string("REMOVE filename")?,
            },
            PacketType::MKDIR => Self::Mkdir {
                id,
                path: r.string("MKDIR path")?,
                attrs: Attrs::take(&mut r)?,
            },
            PacketType::RMDIR => Self::Rmdir {
                id,
                path: r.string("RMDIR path")?,
            },
            PacketType::REALPATH => Self::Realpath {
                id,
                path: r.string("REALPATH path")?,
            },
            PacketType::STAT => Self::Stat {
                id,
                path: r.string("STAT path")?,
            },
            PacketType::RENAME => Self::Rename {
                id,
                oldpath: r.string("RENAME oldpath")?,
                newpath: r.string("RENAME newpath")?,
            },
            PacketType::READLINK => Self::Readlink {
                id,
                path: r.string("READLINK path")?,
            },
            PacketType::SYMLINK => Self::Symlink {
                id,
                linkpath: r.string("SYMLINK linkpath")?,
                targetpath: r.string("SYMLINK targetpath")?,
            },
            PacketType::EXTENDED => Self::Extended {
                id,
                request: r.string("EXTENDED request name")?,
                data: r.take_rest(),
            },
            _ => {
                return Err(Error::UnexpectedType {
                    expected: "an SFTP request",
                    found: frame.ty,
                });
            }
        };
        r.finish("SFTP request")?;
        Ok(request)
    }

    /// The bulk payload encoded apart from the head: WRITE's data, else empty.
    pub const fn bulk(&self) -> &'a [u8] {
        match *self {
            Self::Write { data, .. } => data,
            _ => &[],
        }
    }

    /// Bytes of the whole frame, length field and bulk payload included.
    pub fn buffer_len(&self) -> usize {
        Message::buffer_len(self)
    }

    /// Bytes [`Request::emit_head`] writes.
    pub fn head_len(&self) -> usize {
        Message::head_len(self)
    }

    /// Writes the frame up to the bulk payload (for WRITE: up to and including the
    /// data's length word); the caller sends [`Request::bulk`] after it.
    pub fn emit_head(&self, buf: &mut [u8]) -> Result<usize> {
        Message::emit_head(self, buf)
    }

    /// Writes the whole frame, bulk payload copied in.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        Message::emit(self, buf)
    }

    /// Bytes [`Request::emit_body_head`] writes: [`Request::head_len`] less the 9-byte
    /// frame header.
    pub fn body_head_len(&self) -> usize {
        Message::head_len(self) - HEADER_LEN
    }

    /// Writes the body fields after the id, up to the bulk payload, for a connection that
    /// writes the frame header (length, type, id) itself.
    pub fn emit_body_head(&self, buf: &mut [u8]) -> Result<usize> {
        Message::emit_body_head(self, buf)
    }

    /// Encodes the whole frame into a new vector.
    #[cfg(feature = "alloc")]
    pub fn to_vec(&self) -> Result<alloc::vec::Vec<u8>> {
        Message::to_vec(self)
    }
}

impl Message for Request<'_> {
    fn packet_type(&self) -> PacketType {
        Request::packet_type(self)
    }

    fn frame_id(&self) -> u32 {
        self.id()
    }

    fn bulk(&self) -> &[u8] {
        Request::bulk(self)
    }

    fn put_head(&self, w: &mut impl Sink) -> Result<()> {
        match *self {
            Self::Init { extensions, .. } => w.put(extensions.as_bytes()),
            Self::Open {
                filename,
                pflags,
                attrs,
                ..
            } => {
                w.string(filename, "OPEN filename")?;
                w.u32_be(pflags.0)?;
                attrs.put(w)
            }
            Self::Close { handle, .. }
            | Self::Fstat { handle, .. }
            | Self::Readdir { handle, .. } => w.string(handle, "handle"),
            Self::Read {
                handle,
                offset,
                len,
                ..
            } => {
                w.string(handle, "READ handle")?;
                w.u64_be(offset)?;
                w.u32_be(len)
            }
            Self::Write {
                handle,
                offset,
                data,
                ..
            } => put_write(w, handle, offset, data.len()),
            Self::Lstat { path, .. }
            | Self::Opendir { path, .. }
            | Self::Rmdir { path, .. }
            | Self::Realpath { path, .. }
            | Self::Stat { path, .. }
            | Self::Readlink { path, .. }
            | Self::Remove { filename: path, .. } => w.string(path, "path"),
            Self::Setstat { path, attrs, .. }
            | Self::Fsetstat {
                handle: path,
                attrs,
                ..
            }
            | Self::Mkdir { path, attrs, .. } => {
                w.string(path, "path")?;
                attrs.put(w)
            }
            Self::Rename {
                oldpath: first,
                newpath: second,
                ..
            }
            | Self::Symlink {
                linkpath: first,
                targetpath: second,
                ..
            } => {
                w.string(first, "path")?;
                w.string(second, "path")
            }
            Self::Extended { request, data, .. } => {
                w.string(request, "EXTENDED request name")?;
                w.put(data)
            }
        }
    }
}

/// WRITE's fields after the id, up to its data.
fn put_write(w: &mut impl Sink, handle: &[u8], offset: u64, len: usize) -> Result<()> {
    w.string(handle, "WRITE handle")?;
    w.u64_be(offset)?;
    w.u32_be(len_u32(len, "WRITE data")?)
}

/// The head of a WRITE whose `len` data bytes are not in memory (they go to the wire
/// from a file, say): the bytes [`Request::emit_head`] writes for a
/// [`Request::Write`] carrying that much data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WriteHead<'a> {
    /// Request id.
    pub id: u32,
    /// Handle from OPEN.
    pub handle: &'a [u8],
    /// Where the data goes.
    pub offset: u64,
    /// Bytes of data that will follow the head (at most `u32::MAX`).
    pub len: usize,
}

impl WriteHead<'_> {
    /// Writes the frame up to and including the data's length word; returns its length.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let mut counter = Counter::default();
        put_write(&mut counter, self.handle, self.offset, self.len)?;
        let head_len = HEADER_LEN + counter.len;
        let body_len = counter.len.saturating_add(self.len);
        let header = frame::Header::new(PacketType::WRITE.0, self.id, body_len)?;
        let mut w = Writer::with_capacity(buf, head_len)?;
        w.put(&header.emit())?;
        put_write(&mut w, self.handle, self.offset, self.len)?;
        Ok(w.position())
    }

    /// Bytes [`WriteHead::emit_body`] writes.
    pub fn body_len(&self) -> usize {
        let mut counter = Counter::default();
        // A Counter fails only where the real encoding would, which then says so.
        let _ = put_write(&mut counter, self.handle, self.offset, self.len);
        counter.len
    }

    /// Writes the fields after the id up to and including the data's length word, for a
    /// connection that writes the frame header itself.
    pub fn emit_body(&self, buf: &mut [u8]) -> Result<usize> {
        let mut w = Writer::with_capacity(buf, self.body_len())?;
        put_write(&mut w, self.handle, self.offset, self.len)?;
        Ok(w.position())
    }
}
