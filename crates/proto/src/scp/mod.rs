//! SCP, the SpiNNaker Command Protocol, over SDP over UDP (as rig 2.4.1 and SpiNNMan send it): command and
//! return codes, requests and replies, and builders and parsers for the commands volley
//! drives (sver, read, write, fill, iptag TTO).
//!
//! A request always carries all three argument words (SC&MP answers `RC_LEN` when the SDP
//! part is under 24 bytes). A reply carries the return code, the request's sequence number
//! unchanged, then only what the command returns: see [`ReplyRepr::body`].

use core::str;

use self::sdp::{Address, HEADER_LEN};
use crate::wire::open_enum;
use crate::wire::{Counter, Error, Reader, Result, Sink, Writer};

pub use self::sdp::MAX_DATAGRAM_LEN;

/// Largest data field of one request or reply (`SDP_BUF_SIZE`).
pub const MAX_DATA_LEN: usize = 256;
/// Bytes of a request before its data: pad, SDP header, cmd, seq, three args.
pub const REQUEST_HEADER_LEN: usize = HEADER_LEN + 16;
/// Bytes of a reply before its body: pad, SDP header, return code, seq.
pub const REPLY_HEADER_LEN: usize = HEADER_LEN + 4;
/// The UDP port SC&MP listens on.
pub const PORT: u16 = 17893;

mod field {
    pub(super) const CMD_RC: usize = 10;
    pub(super) const SEQ: usize = 12;
}

open_enum! {
    /// An SCP command code.
    pub struct Command(u16) {
        /// Software version query.
        SVER = 0 => "sver",
        /// Run an application (legacy).
        RUN = 1 => "run",
        /// Read memory.
        READ = 2 => "read",
        /// Write memory.
        WRITE = 3 => "write",
        /// Load and run an APLX image.
        APLX = 4 => "aplx",
        /// Fill memory with a word.
        FILL = 5 => "fill",
        /// Count cores in a state.
        COUNT = 15 => "count",
        /// Remap the monitor core.
        REMAP = 16 => "remap",
        /// Read a neighbour's memory over a link.
        LINK_READ = 17 => "link_read",
        /// Write a neighbour's memory over a link.
        LINK_WRITE = 18 => "link_write",
        /// Application reset.
        AR = 19 => "ar",
        /// Send a nearest-neighbour packet.
        NNP = 20 => "nnp",
        /// Copy and run an application.
        APP_COPY_RUN = 21 => "app_copy_run",
        /// Send a signal.
        SIGNAL = 22 => "signal",
        /// Flood-fill data.
        FFD = 23 => "ffd",
        /// Application start.
        AS = 24 => "as",
        /// Set LEDs.
        LED = 25 => "led",
        /// IPTag operations.
        IPTAG = 26 => "iptag",
        /// Serial ROM access.
        SROM = 27 => "srom",
        /// Memory allocation.
        ALLOC = 28 => "alloc",
        /// Router operations.
        ROUTER = 29 => "router",
        /// Chip information.
        INFO = 31 => "info",
        /// Synchronisation.
        SYNC = 32 => "sync",
        /// BMP information.
        BMP_INFO = 48 => "bmp_info",
        /// Board power.
        POWER = 57 => "power",
        /// Tube output.
        TUBE = 64 => "tube",
    }
}

open_enum! {
    /// An SCP return code, carried where a request carries its command.
    pub struct ReturnCode(u16) {
        /// Success.
        OK = 0x80 => "RC_OK",
        /// Bad packet length.
        LEN = 0x81 => "RC_LEN",
        /// Bad checksum.
        SUM = 0x82 => "RC_SUM",
        /// Bad or unknown command.
        CMD = 0x83 => "RC_CMD",
        /// Invalid argument.
        ARG = 0x84 => "RC_ARG",
        /// Bad port.
        PORT = 0x85 => "RC_PORT",
        /// Timeout.
        TIMEOUT = 0x86 => "RC_TIMEOUT",
        /// No P2P route.
        ROUTE = 0x87 => "RC_ROUTE",
        /// Bad core number.
        CPU = 0x88 => "RC_CPU",
        /// Dead destination.
        DEAD = 0x89 => "RC_DEAD",
        /// No free shared buffer.
        BUF = 0x8a => "RC_BUF",
        /// No reply to open.
        P2P_NOREPLY = 0x8b => "RC_P2P_NOREPLY",
        /// Open rejected.
        P2P_REJECT = 0x8c => "RC_P2P_REJECT",
        /// Destination busy.
        P2P_BUSY = 0x8d => "RC_P2P_BUSY",
        /// Destination did not respond.
        P2P_TIMEOUT = 0x8e => "RC_P2P_TIMEOUT",
        /// Packet transmission failed.
        PKT_TX = 0x8f => "RC_PKT_TX",
    }
}

/// The width a read or write moves memory in (arg3 of read and write).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DataType {
    /// Single bytes.
    Byte = 0,
    /// 16-bit halfwords.
    Short = 1,
    /// 32-bit words.
    Word = 2,
}

/// A view of a datagram holding an SCP request or reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

/// A decoded SCP request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RequestRepr<'a> {
    /// The SDP header.
    pub sdp: sdp::Repr,
    /// The command.
    pub cmd: Command,
    /// The sequence number the reply will echo.
    pub seq: u16,
    /// The three argument words.
    pub args: [u32; 3],
    /// Data after the arguments, at most [`MAX_DATA_LEN`] bytes.
    pub data: &'a [u8],
}

/// A decoded SCP reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReplyRepr<'a> {
    /// The SDP header.
    pub sdp: sdp::Repr,
    /// The return code.
    pub rc: ReturnCode,
    /// The request's sequence number, unchanged.
    pub seq: u16,
    /// What the command returns after the sequence number: for sver, three argument words
    /// and the version text; for read, the data itself; for write and fill, nothing; for
    /// an error, nothing.
    pub body: &'a [u8],
}

/// What the sver reply says about the board's software.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct VersionInfo<'a> {
    /// The chip and cores that answered.
    pub core: Address,
    /// The physical core number.
    pub phys_cpu: u8,
    /// The largest data field the board accepts (arg2 & 0xFFFF).
    pub buffer_size: u16,
    /// Build date, unix seconds.
    pub build_date: u32,
    /// The software name, e.g. `SC&MP/SpiNNaker`.
    pub name: &'a str,
    /// The version, from the text (new form) or arg2's top half (legacy form).
    pub version: Version,
}

/// A software version as sver reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Version {
    /// `major.minor.patch` from the version text (arg2's top half is `0xFFFF`).
    Semantic {
        /// Major.
        major: u16,
        /// Minor.
        minor: u16,
        /// Patch.
        patch: u16,
    },
    /// The legacy form: arg2's top half is `major * 100 + minor`, e.g. 133 for 1.33.
    Legacy(u16),
}

/// The transient IPTag settings in the reply to an iptag TTO request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TtoInfo {
    /// Number of fixed tags.
    pub fixed_tags: u8,
    /// Number of transient tags: how many requests may wait for a reply at once.
    pub pool_size: u8,
    /// Bytes of one tag record in the firmware (32).
    pub record_size: u8,
    /// The timeout code in force before the request (`t`: 10 ms * 2^(t-1), 0 = never).
    pub tto: u8,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checks; getters may panic on a short one.
    pub const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wraps a buffer after checking it holds at least a reply header (return code and
    /// sequence number) and no more than [`MAX_DATAGRAM_LEN`] bytes.
    pub fn new_checked(buffer: T) -> Result<Self> {
        sdp::Packet::new_checked(buffer.as_ref())?;
        let len = buffer.as_ref().len();
        if len < REPLY_HEADER_LEN {
            return Err(Error::Truncated {
                what: "SCP header",
                needed: REPLY_HEADER_LEN,
                available: len,
            });
        }
        Ok(Self { buffer })
    }

    /// The SDP header view.
    pub fn sdp(&self) -> sdp::Packet<&[u8]> {
        sdp::Packet::new_unchecked(self.buffer.as_ref())
    }

    /// The command (request) or return code (reply) word.
    pub fn cmd_rc(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_le_bytes([b[field::CMD_RC], b[field::CMD_RC + 1]])
    }

    /// The sequence number.
    pub fn seq(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_le_bytes([b[field::SEQ], b[field::SEQ + 1]])
    }

    /// Everything after the sequence number.
    pub fn body(&self) -> &[u8] {
        &self.buffer.as_ref()[REPLY_HEADER_LEN..]
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the sequence number in place, the only field a retransmitting window touches.
    pub fn set_seq(&mut self, seq: u16) {
        self.buffer.as_mut()[field::SEQ..field::SEQ + 2].copy_from_slice(&seq.to_le_bytes());
    }
}

impl<'a> RequestRepr<'a> {
    /// A request with sequence number 0 from the host to `dest`.
    pub const fn new(dest: Address, cmd: Command, args: [u32; 3], data: &'a [u8]) -> Self {
        Self {
            sdp: sdp::Repr::request(dest),
            cmd,
            seq: 0,
            args,
            data,
        }
    }

    /// Decodes a request datagram.
    ///
    /// Fails on a datagram over [`MAX_DATAGRAM_LEN`] (SC&MP drops those) and on one whose
    /// SDP part is under 24 bytes (SC&MP answers `RC_LEN`: all three args are required).
    pub fn parse(bytes: &'a [u8]) -> Result<Self> {
        let packet = sdp::Packet::new_checked(bytes)?;
        if bytes.len() < REQUEST_HEADER_LEN {
            return Err(Error::TooShort {
                what: "SCP request",
                len: bytes.len() as u64,
                min: REQUEST_HEADER_LEN as u64,
            });
        }
        let sdp = sdp::Repr::parse(&packet);
        let mut r = Reader::new(&bytes[HEADER_LEN..]);
        let cmd = Command(r.u16_le("SCP command")?);
        let seq = r.u16_le("SCP seq")?;
        let args = [
            r.u32_le("SCP arg1")?,
            r.u32_le("SCP arg2")?,
            r.u32_le("SCP arg3")?,
        ];
        Ok(Self {
            sdp,
            cmd,
            seq,
            args,
            data: r.rest(),
        })
    }

    /// Bytes the request takes on the wire.
    pub const fn buffer_len(&self) -> usize {
        REQUEST_HEADER_LEN + self.data.len()
    }

    /// Writes the request into `buf`, returning the bytes written.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        check_data_len("SCP request data", self.data.len())?;
        let len = self.buffer_len();
        let mut w = Writer::with_capacity(buf, len)?;
        w.put(&[0; HEADER_LEN])?;
        w.u16_le(self.cmd.0)?;
        w.u16_le(self.seq)?;
        for arg in self.args {
            w.u32_le(arg)?;
        }
        w.put(self.data)?;
        self.sdp
            .emit(&mut sdp::Packet::new_unchecked(&mut buf[..len]))?;
        Ok(len)
    }

    /// The header and `rc` of a reply to this request, with no body.
    pub const fn reply(&self, rc: ReturnCode) -> ReplyRepr<'static> {
        ReplyRepr {
            sdp: self.sdp.reply(),
            rc,
            seq: self.seq,
            body: &[],
        }
    }

    /// For read and write: the address, length and data type in the arguments, checked
    /// as SC&MP checks them (length 1..=256, type 0..=2) so an emulator can answer
    /// `RC_ARG` for anything else.
    pub fn transfer_args(&self) -> Result<(u32, usize, DataType)> {
        let [address, len, ty] = self.args;
        if len == 0 || len as usize > MAX_DATA_LEN {
            return Err(Error::InvalidValue {
                what: "SCP transfer length (1..=256)",
                value: u64::from(len),
            });
        }
        let ty = DataType::from_arg(ty).ok_or(Error::InvalidValue {
            what: "SCP data type (0..=2)",
            value: u64::from(ty),
        })?;
        Ok((address, len as usize, ty))
    }
}

impl<'a> ReplyRepr<'a> {
    /// Decodes a reply datagram: pad, SDP header, return code and sequence number at
    /// least, at most [`MAX_DATAGRAM_LEN`] bytes.
    pub fn parse(bytes: &'a [u8]) -> Result<Self> {
        let packet = Packet::new_checked(bytes)?;
        Ok(Self {
            sdp: sdp::Repr::parse(&packet.sdp()),
            rc: ReturnCode(packet.cmd_rc()),
            seq: packet.seq(),
            body: &bytes[REPLY_HEADER_LEN..],
        })
    }

    /// Bytes the reply takes on the wire.
    pub const fn buffer_len(&self) -> usize {
        REPLY_HEADER_LEN + self.body.len()
    }

    /// Writes the reply into `buf`, returning the bytes written.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let len = self.buffer_len();
        if len > MAX_DATAGRAM_LEN {
            return Err(Error::TooLarge {
                what: "SCP reply",
                len: len as u64,
                max: MAX_DATAGRAM_LEN as u64,
            });
        }
        let mut w = Writer::with_capacity(buf, len)?;
        w.put(&[0; HEADER_LEN])?;
        w.u16_le(self.rc.0)?;
        w.u16_le(self.seq)?;
        w.put(self.body)?;
        self.sdp
            .emit(&mut sdp::Packet::new_unchecked(&mut buf[..len]))?;
        Ok(len)
    }

    /// Fails with the return code unless it is `RC_OK`.
    pub fn check_ok(&self) -> Result<&Self, ReturnCode> {
        if self.rc == ReturnCode::OK {
            Ok(self)
        } else {
            Err(self.rc)
        }
    }
}

impl DataType {
    /// The widest type both `address` and `len` are aligned to: word when both are
    /// multiples of 4, short when both are even, else byte. Chosen per chunk.
    pub const fn for_transfer(address: u32, len: usize) -> Self {
        if address % 4 == 0 && len % 4 == 0 {
            Self::Word
        } else if address % 2 == 0 && len % 2 == 0 {
            Self::Short
        } else {
            Self::Byte
        }
    }

    /// The type an arg3 value names, if any.
    pub const fn from_arg(arg: u32) -> Option<Self> {
        match arg {
            0 => Some(Self::Byte),
            1 => Some(Self::Short),
            2 => Some(Self::Word),
            _ => None,
        }
    }
}

/// A sver request to `dest`.
pub const fn sver_request(dest: Address) -> RequestRepr<'static> {
    RequestRepr::new(dest, Command::SVER, [0; 3], &[])
}

/// A read of `len` (1..=256) bytes at `address`, with the data-type rule applied.
pub fn read_request(dest: Address, address: u32, len: usize) -> Result<RequestRepr<'static>> {
    check_transfer_len("SCP read length", len)?;
    let ty = DataType::for_transfer(address, len);
    Ok(RequestRepr::new(
        dest,
        Command::READ,
        [address, len as u32, ty as u32],
        &[],
    ))
}

/// A write of `data` (1..=256 bytes) to `address`, with the data-type rule applied.
pub fn write_request(dest: Address, address: u32, data: &[u8]) -> Result<RequestRepr<'_>> {
    check_transfer_len("SCP write length", data.len())?;
    let ty = DataType::for_transfer(address, data.len());
    Ok(RequestRepr::new(
        dest,
        Command::WRITE,
        [address, data.len() as u32, ty as u32],
        data,
    ))
}

/// Fills `byte_count` bytes from `address` with the word `value`.
pub const fn fill_request(
    dest: Address,
    address: u32,
    value: u32,
    byte_count: u32,
) -> RequestRepr<'static> {
    RequestRepr::new(dest, Command::FILL, [address, value, byte_count], &[])
}

/// The iptag sub-command that sets or queries the transient-tag timeout.
pub const IPTAG_TTO: u32 = 4;

/// An iptag TTO request: `Some(code)` (0..=15) sets the transient-tag timeout to
/// 10 ms * 2^(code-1) (0 = never expire); `None` only queries it.
pub fn iptag_tto_request(dest: Address, tto: Option<u8>) -> Result<RequestRepr<'static>> {
    let arg2 = match tto {
        None => 16,
        Some(code @ 0..=15) => u32::from(code),
        Some(code) => {
            return Err(Error::InvalidValue {
                what: "transient IPTag timeout code (0..=15)",
                value: u64::from(code),
            });
        }
    };
    Ok(RequestRepr::new(
        dest,
        Command::IPTAG,
        [IPTAG_TTO << 16, arg2, 0],
        &[],
    ))
}

/// How long TTO code `code` lets a transient tag wait for a reply, in milliseconds:
/// 10 ms * 2^(code-1); `None` for 0 (never expires) and for codes over 15.
pub const fn tto_millis(code: u8) -> Option<u64> {
    match code {
        1..=15 => Some(10 << (code - 1)),
        _ => None,
    }
}

impl<'a> VersionInfo<'a> {
    /// Decodes a sver reply body: arg1 (chip and cores), arg2 (version marker and buffer
    /// size), arg3 (build date), then NUL-terminated name and, in the new form, version.
    pub fn parse(body: &'a [u8]) -> Result<Self> {
        let mut r = Reader::new(body);
        let arg1 = r.u32_le("sver arg1")?;
        let arg2 = r.u32_le("sver arg2")?;
        let build_date = r.u32_le("sver arg3")?;
        let text = r.rest();
        let (name, rest) = split_cstr(text, "sver software name")?;
        let marker = (arg2 >> 16) as u16;
        let version = if marker == 0xFFFF {
            let (version, _) = split_cstr(rest, "sver version text")?;
            parse_semver(version)?
        } else {
            Version::Legacy(marker)
        };
        let p2p = (arg1 >> 16) as u16;
        Ok(Self {
            core: Address::core((p2p >> 8) as u8, p2p as u8, arg1 as u8),
            phys_cpu: (arg1 >> 8) as u8,
            buffer_size: arg2 as u16,
            build_date,
            name,
            version,
        })
    }

    /// Bytes [`VersionInfo::emit`] writes.
    pub fn buffer_len(&self) -> usize {
        let mut counter = Counter::default();
        // A Counter never fails.
        let _ = self.put(&mut counter);
        counter.len
    }

    /// Writes the reply body a board sends for sver.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let mut w = Writer::with_capacity(buf, self.buffer_len())?;
        self.put(&mut w)?;
        Ok(w.position())
    }

    /// The body, field by field: what `emit` writes and `buffer_len` counts.
    fn put(&self, w: &mut impl Sink) -> Result<()> {
        let p2p = u32::from(self.core.p2p());
        w.u32_le(p2p << 16 | u32::from(self.phys_cpu) << 8 | u32::from(self.core.cpu))?;
        let marker = match self.version {
            Version::Semantic { .. } => 0xFFFF,
            Version::Legacy(v) => u32::from(v),
        };
        w.u32_le(marker << 16 | u32::from(self.buffer_size))?;
        w.u32_le(self.build_date)?;
        w.put(self.name.as_bytes())?;
        w.u8(0)?;
        if let Version::Semantic {
            major,
            minor,
            patch,
        } = self.version
        {
            for (i, part) in [major, minor, patch].into_iter().enumerate() {
                if i > 0 {
                    w.u8(b'.')?;
                }
                let mut digits_buf = [0u8; 5];
                w.put(format_u16(part, &mut digits_buf))?;
            }
            w.u8(0)?;
        }
        Ok(())
    }
}

impl TtoInfo {
    /// Decodes the iptag TTO reply body (arg1; anything after it is ignored).
    pub fn parse(body: &[u8]) -> Result<Self> {
        let arg1 = Reader::new(body).u32_le("iptag TTO reply arg1")?;
        let [tto, record_size, pool_size, fixed_tags] = arg1.to_le_bytes();
        Ok(Self {
            fixed_tags,
            pool_size,
            record_size,
            tto,
        })
    }

    /// The reply body: arg1 only.
    pub fn to_body(&self) -> [u8; 4] {
        [self.tto, self.record_size, self.pool_size, self.fixed_tags]
    }
}

fn check_transfer_len(what: &'static str, len: usize) -> Result<()> {
    if len == 0 {
        return Err(Error::TooShort {
            what,
            len: 0,
            min: 1,
        });
    }
    check_data_len(what, len)
}

fn check_data_len(what: &'static str, len: usize) -> Result<()> {
    if len > MAX_DATA_LEN {
        return Err(Error::TooLarge {
            what,
            len: len as u64,
            max: MAX_DATA_LEN as u64,
        });
    }
    Ok(())
}

/// Splits a NUL-terminated UTF-8 string off the front of `bytes`.
fn split_cstr<'a>(bytes: &'a [u8], what: &'static str) -> Result<(&'a str, &'a [u8])> {
    let nul = bytes.iter().position(|&b| b == 0).ok_or(Error::Truncated {
        what,
        needed: bytes.len() + 1,
        available: bytes.len(),
    })?;
    let text = str::from_utf8(&bytes[..nul]).map_err(|e| Error::InvalidValue {
        what,
        value: e.valid_up_to() as u64,
    })?;
    Ok((text, &bytes[nul + 1..]))
}

/// Parses `\d+.\d+.\d+` (what rig asserts the text matches).
fn parse_semver(text: &str) -> Result<Version> {
    let mut parts = text.split('.');
    let mut next = || -> Result<u16> {
        let part = parts.next().unwrap_or("");
        if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
            return Err(Error::InvalidValue {
                what: "sver version text (major.minor.patch)",
                value: text.len() as u64,
            });
        }
        part.parse().map_err(|_| Error::InvalidValue {
            what: "sver version number (0..=65535)",
            value: text.len() as u64,
        })
    };
    let version = Version::Semantic {
        major: next()?,
        minor: next()?,
        patch: next()?,
    };
    if parts.next().is_some() {
        return Err(Error::InvalidValue {
            what: "sver version text (major.minor.patch)",
            value: text.len() as u64,
        });
    }
    Ok(version)
}

fn format_u16(mut n: u16, buf: &mut [u8; 5]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[i..];
        }
    }
}

#[cfg(any(test, feature = "fixtures"))]
pub mod fixtures;
pub mod machine;
pub mod sdp;
#[cfg(test)]
mod tests;
#[cfg(feature = "alloc")]
pub mod window;
