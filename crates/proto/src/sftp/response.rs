//! SFTP v3 responses: what a server answers with.

use super::{Attrs, Error, Message, PacketType, Pairs, Reader, Result, Sink, StatusCode, Writer};
use crate::wire::frame::Frame;

/// A server's response. Strings and DATA's payload are borrowed from the frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Response<'a> {
    /// Hello: the server's version and extensions.
    Version {
        /// Protocol version (3).
        version: u32,
        /// Extension name/data pairs, e.g. `limits@openssh.com` / `1`.
        extensions: Pairs<'a>,
    },
    /// The outcome of a request that returns nothing else, or of any failed request.
    Status {
        /// Request id.
        id: u32,
        /// Status code.
        code: StatusCode,
        /// Human-readable message (UTF-8 by the spec; kept as bytes).
        message: &'a [u8],
        /// Language tag.
        language: &'a [u8],
    },
    /// An open file or directory handle.
    Handle {
        /// Request id.
        id: u32,
        /// The handle.
        handle: &'a [u8],
    },
    /// Bytes read; may be fewer than asked for without being EOF.
    Data {
        /// Request id.
        id: u32,
        /// The payload: the bulk part, encoded apart from the head.
        data: &'a [u8],
    },
    /// Names with attributes: READDIR, REALPATH, READLINK.
    Name {
        /// Request id.
        id: u32,
        /// The entries.
        names: Names<'a>,
    },
    /// Attributes: STAT, LSTAT, FSTAT.
    Attrs {
        /// Request id.
        id: u32,
        /// The attributes.
        attrs: Attrs<'a>,
    },
    /// A vendor extension's reply.
    ExtendedReply {
        /// Request id.
        id: u32,
        /// The extension's data, to the end of the message.
        data: &'a [u8],
    },
}

/// The entries of a NAME reply, kept in wire form and validated when decoded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Names<'a> {
    raw: &'a [u8],
    count: u32,
}

/// One NAME entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NameEntry<'a> {
    /// The file name.
    pub filename: &'a [u8],
    /// An `ls -l` style line.
    pub longname: &'a [u8],
    /// The attributes.
    pub attrs: Attrs<'a>,
}

/// Iterates over [`Names`].
#[derive(Clone, Debug)]
pub struct NamesIter<'a> {
    reader: Reader<'a>,
    left: u32,
}

impl<'a> Response<'a> {
    /// The message type.
    pub const fn packet_type(&self) -> PacketType {
        match self {
            Self::Version { .. } => PacketType::VERSION,
            Self::Status { .. } => PacketType::STATUS,
            Self::Handle { .. } => PacketType::HANDLE,
            Self::Data { .. } => PacketType::DATA,
            Self::Name { .. } => PacketType::NAME,
            Self::Attrs { .. } => PacketType::ATTRS,
            Self::ExtendedReply { .. } => PacketType::EXTENDED_REPLY,
        }
    }

    /// The request id, or the version for VERSION (the same word on the wire).
    pub const fn id(&self) -> u32 {
        match *self {
            Self::Version { version, .. } => version,
            Self::Status { id, .. }
            | Self::Handle { id, .. }
            | Self::Data { id, .. }
            | Self::Name { id, .. }
            | Self::Attrs { id, .. }
            | Self::ExtendedReply { id, .. } => id,
        }
    }

    /// Decodes a response from a frame. A STATUS without message and language (as some
    /// servers send) decodes with both empty.
    pub fn parse(frame: Frame<'a>) -> Result<Self> {
        let id = frame.id;
        let mut r = Reader::new(frame.body);
        let response = match PacketType(frame.ty) {
            PacketType::VERSION => Self::Version {
                version: id,
                extensions: Pairs::from_wire(r.take_rest())?,
            },
            PacketType::STATUS => {
                let code = StatusCode(r.u32_be("STATUS code")?);
                let (message, language) = if r.is_empty() {
                    (&[][..], &[][..])
                } else {
                    (r.string("STATUS message")?, r.string("STATUS language")?)
                };
                Self::Status {
                    id,
                    code,
                    message,
                    language,
                }
            }
            PacketType::HANDLE => Self::Handle {
                id,
                handle: r.string("HANDLE handle")?,
            },
            PacketType::DATA => Self::Data {
                id,
                data: r.string("DATA data")?,
            },
            PacketType::NAME => Self::Name {
                id,
                names: Names::take(&mut r)?,
            },
            PacketType::ATTRS => Self::Attrs {
                id,
                attrs: Attrs::take(&mut r)?,
            },
            PacketType::EXTENDED_REPLY => Self::ExtendedReply {
                id,
                data: r.take_rest(),
            },
            _ => {
                return Err(Error::UnexpectedType {
                    expected: "an SFTP response",
                    found: frame.ty,
                });
            }
        };
        r.finish("SFTP response")?;
        Ok(response)
    }

    /// The bulk payload encoded apart from the head: DATA's payload, else empty.
    pub const fn bulk(&self) -> &'a [u8] {
        match *self {
            Self::Data { data, .. } => data,
            _ => &[],
        }
    }

    /// Bytes of the whole frame, length field and bulk payload included.
    pub fn buffer_len(&self) -> usize {
        Message::buffer_len(self)
    }

    /// Bytes [`Response::emit_head`] writes.
    pub fn head_len(&self) -> usize {
        Message::head_len(self)
    }

    /// Writes the frame up to the bulk payload; the caller sends [`Response::bulk`] after.
    pub fn emit_head(&self, buf: &mut [u8]) -> Result<usize> {
        Message::emit_head(self, buf)
    }

    /// Writes the whole frame, bulk payload copied in.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        Message::emit(self, buf)
    }

    /// Encodes the whole frame into a new vector.
    #[cfg(feature = "alloc")]
    pub fn to_vec(&self) -> Result<alloc::vec::Vec<u8>> {
        Message::to_vec(self)
    }
}

impl Message for Response<'_> {
    fn packet_type(&self) -> PacketType {
        Response::packet_type(self)
    }

    fn frame_id(&self) -> u32 {
        self.id()
    }

    fn bulk(&self) -> &[u8] {
        Response::bulk(self)
    }

    fn put_head(&self, w: &mut impl Sink) -> Result<()> {
        match *self {
            Self::Version { extensions, .. } => w.put(extensions.as_bytes()),
            Self::Status {
                code,
                message,
                language,
                ..
            } => {
                w.u32_be(code.0)?;
                w.string(message, "STATUS message")?;
                w.string(language, "STATUS language")
            }
            Self::Handle { handle, .. } => w.string(handle, "HANDLE handle"),
            Self::Data { data, .. } => w.u32_be(crate::wire::len_u32(data.len(), "DATA data")?),
            Self::Name { names, .. } => {
                w.u32_be(names.count)?;
                w.put(names.raw)
            }
            Self::Attrs { attrs, .. } => attrs.put(w),
            Self::ExtendedReply { data, .. } => w.put(data),
        }
    }
}

impl<'a> Names<'a> {
    /// No entries.
    pub const EMPTY: Self = Self { raw: &[], count: 0 };

    /// Reads a count and that many entries off the front of `r`, checking each.
    fn take(r: &mut Reader<'a>) -> Result<Self> {
        let count = r.u32_be("NAME count")?;
        let start = r.clone().rest();
        let before = r.remaining();
        for _ in 0..count {
            take_entry(r)?;
        }
        let used = before - r.remaining();
        Ok(Self {
            raw: &start[..used],
            count,
        })
    }

    /// Encodes `entries` into `buf` and returns them as wire-form [`Names`] borrowing it.
    pub fn write<'b>(entries: &[NameEntry<'_>], buf: &'b mut [u8]) -> Result<Names<'b>> {
        let mut counter = super::Counter::default();
        for entry in entries {
            put_entry(entry, &mut counter)?;
        }
        let len = counter.len;
        let mut w = Writer::with_capacity(buf, len)?;
        for entry in entries {
            put_entry(entry, &mut w)?;
        }
        Ok(Names {
            raw: &buf[..len],
            count: crate::wire::len_u32(entries.len(), "NAME count")?,
        })
    }

    /// Number of entries.
    pub const fn count(&self) -> u32 {
        self.count
    }

    /// The entries in order.
    pub fn iter(&self) -> NamesIter<'a> {
        NamesIter {
            reader: Reader::new(self.raw),
            left: self.count,
        }
    }
}

impl<'a> IntoIterator for Names<'a> {
    type Item = NameEntry<'a>;
    type IntoIter = NamesIter<'a>;

    fn into_iter(self) -> NamesIter<'a> {
        self.iter()
    }
}

impl<'a> Iterator for NamesIter<'a> {
    type Item = NameEntry<'a>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        // Validated when decoded or written; a failure cannot happen and would end the
        // iteration rather than panic.
        take_entry(&mut self.reader).ok()
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.left as usize))
    }
}

fn take_entry<'a>(r: &mut Reader<'a>) -> Result<NameEntry<'a>> {
    Ok(NameEntry {
        filename: r.string("NAME filename")?,
        longname: r.string("NAME longname")?,
        attrs: Attrs::take(r)?,
    })
}

fn put_entry(entry: &NameEntry<'_>, w: &mut impl Sink) -> Result<()> {
    w.string(entry.filename, "NAME filename")?;
    w.string(entry.longname, "NAME longname")?;
    entry.attrs.put(w)
}
