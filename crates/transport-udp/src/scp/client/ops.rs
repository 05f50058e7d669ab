//! What a batch is made of: [`Op`]s, cut into 256-byte requests in order (`Chunks`), each
//! encoded into a recycled buffer (`build`) and described in errors (`describe`).

use std::io;

use volley_proto::scp::sdp::Address;
use volley_proto::scp::{self, Command, MAX_DATA_LEN, RequestRepr};
use volley_proto::time::Instant;

use super::ScpError;

/// One operation of a batch run by [`ScpClient::execute`](super::ScpClient::execute).
#[derive(Debug)]
pub enum Op<'a> {
    /// Read `buf.len()` bytes from `address` on `chip`.
    Read {
        /// The chip and core.
        chip: Address,
        /// Start address.
        address: u32,
        /// Where the bytes go.
        buf: &'a mut [u8],
    },
    /// Write `data` to `address` on `chip`.
    Write {
        /// The chip and core.
        chip: Address,
        /// Start address.
        address: u32,
        /// The bytes.
        data: &'a [u8],
    },
    /// Write `len` bytes read from `source` to `address` on `chip`, without holding them
    /// all in memory: the source is read in order, a request's worth (256 bytes) at a
    /// time, as the window has room, on the caller's task. Give it a buffered reader
    /// (`std::io::BufReader`) over a file or pipe; a source that ends early fails the
    /// operation with [`ScpError::Source`].
    WriteFrom {
        /// The chip and core.
        chip: Address,
        /// Start address.
        address: u32,
        /// Bytes to write.
        len: u32,
        /// Where the bytes come from.
        source: Source<'a>,
    },
    /// Fill `len` bytes from `address` with the word `value`.
    Fill {
        /// The chip and core.
        chip: Address,
        /// Start address (word aligned).
        address: u32,
        /// The word.
        value: u32,
        /// Bytes to fill (a multiple of 4).
        len: u32,
    },
    /// Any single SCP request; the reply's body is copied into `reply`.
    Raw {
        /// The request (its sequence number is set by the window).
        request: RequestRepr<'a>,
        /// Receives the reply body.
        reply: &'a mut Vec<u8>,
    },
}

/// The reader behind an [`Op::WriteFrom`].
pub struct Source<'a>(pub &'a mut (dyn io::Read + Send));

impl core::fmt::Debug for Source<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Source(..)")
    }
}

/// Which chunk of which operation a request carries.
#[derive(Clone, Copy, Debug)]
pub(super) struct Token {
    pub(super) op: usize,
    pub(super) offset: usize,
    pub(super) len: usize,
    pub(super) first_sent: Instant,
}

/// Checks that `len` bytes from `address` fit the 32-bit address space (what every
/// bulk operation is checked against before anything is sent or allocated).
pub fn check_range(address: u32, len: usize) -> Result<(), ScpError> {
    let fits = u32::try_from(len)
        .ok()
        .and_then(|len| address.checked_add(len.saturating_sub(1)))
        .is_some();
    if fits {
        Ok(())
    } else {
        Err(ScpError::InvalidArgument(format!(
            "{len} bytes at {address:#010x} run past the end of the 32-bit address space"
        )))
    }
}

/// The command, chip and chunk address a token stands for.
pub(super) fn describe(ops: &[Op<'_>], token: &Token) -> (Command, Address, u32) {
    let offset = token.offset as u32;
    match &ops[token.op] {
        Op::Read { chip, address, .. } => (Command::READ, *chip, address.wrapping_add(offset)),
        Op::Write { chip, address, .. } | Op::WriteFrom { chip, address, .. } => {
            (Command::WRITE, *chip, address.wrapping_add(offset))
        }
        Op::Fill { chip, address, .. } => (Command::FILL, *chip, *address),
        Op::Raw { request, .. } => (request.cmd, request.sdp.dest, request.args[0]),
    }
}

/// Encodes the request for one chunk into a recycled buffer (reading a
/// [`Op::WriteFrom`]'s chunk from its source: chunks are built once each, in order).
pub(super) fn build(
    ops: &mut [Op<'_>],
    token: &Token,
    mut buf: Vec<u8>,
) -> Result<Vec<u8>, ScpError> {
    let offset = token.offset as u32;
    let mut emit = |request: RequestRepr<'_>| {
        buf.resize(request.buffer_len(), 0);
        request.emit(&mut buf)?;
        Ok::<(), ScpError>(())
    };
    match &mut ops[token.op] {
        Op::Read { chip, address, .. } => {
            emit(scp::read_request(*chip, *address + offset, token.len)?)?;
        }
        Op::Write {
            chip,
            address,
            data,
        } => emit(scp::write_request(
            *chip,
            *address + offset,
            &data[token.offset..token.offset + token.len],
        )?)?,
        Op::WriteFrom {
            chip,
            address,
            len,
            source,
        } => {
            let mut staged = [0u8; MAX_DATA_LEN];
            let data = &mut staged[..token.len];
            source.0.read_exact(data).map_err(|e| {
                ScpError::Source(if e.kind() == io::ErrorKind::UnexpectedEof {
                    io::Error::new(
                        e.kind(),
                        format!(
                            "the source ended before byte {} of the {len} promised",
                            token.offset + token.len
                        ),
                    )
                } else {
                    e
                })
            })?;
            emit(scp::write_request(*chip, *address + offset, data)?)?;
        }
        Op::Fill {
            chip,
            address,
            value,
            len,
        } => emit(scp::fill_request(*chip, *address, *value, *len))?,
        Op::Raw { request, .. } => emit(*request)?,
    }
    Ok(buf)
}

/// Walks the operations chunk by chunk.
#[derive(Debug)]
pub(super) struct Chunks {
    op: usize,
    offset: usize,
}

impl Chunks {
    /// Checks every operation fits the address space before anything is sent.
    pub(super) fn new(ops: &[Op<'_>]) -> Result<Self, ScpError> {
        for op in ops {
            if let Some((address, len)) = op.range() {
                check_range(address, len)?;
            }
        }
        Ok(Self { op: 0, offset: 0 })
    }

    pub(super) fn next(&mut self, ops: &[Op<'_>]) -> Option<Token> {
        while let Some(op) = ops.get(self.op) {
            let total = match op {
                Op::Read { .. } | Op::Write { .. } | Op::WriteFrom { .. } => {
                    op.range().map_or(0, |(_, len)| len)
                }
                // One request whatever the size.
                Op::Fill { .. } | Op::Raw { .. } => {
                    if self.offset == 0 {
                        self.offset = 1;
                        return Some(Token {
                            op: self.op,
                            offset: 0,
                            len: 0,
                            first_sent: Instant::ZERO,
                        });
                    }
                    0
                }
            };
            if self.offset < total {
                let len = (total - self.offset).min(MAX_DATA_LEN);
                let token = Token {
                    op: self.op,
                    offset: self.offset,
                    len,
                    first_sent: Instant::ZERO,
                };
                self.offset += len;
                return Some(token);
            }
            self.op += 1;
            self.offset = 0;
        }
        None
    }
}

impl Op<'_> {
    /// The start address and length of a bulk operation.
    fn range(&self) -> Option<(u32, usize)> {
        match self {
            Op::Read { address, buf, .. } => Some((*address, buf.len())),
            Op::Write { address, data, .. } => Some((*address, data.len())),
            Op::WriteFrom { address, len, .. } => Some((*address, *len as usize)),
            Op::Fill { address, len, .. } => Some((*address, *len as usize)),
            Op::Raw { .. } => None,
        }
    }
}
