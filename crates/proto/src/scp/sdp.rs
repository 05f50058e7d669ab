//! The SDP header as SpiNNaker boards see it over UDP: 2 pad bytes, then flags, tag,
//! destination and source port/cpu bytes and chip addresses.

use core::fmt;

use crate::wire::{Error, Result};

/// Bytes of pad + SDP header at the start of every datagram.
pub const HEADER_LEN: usize = 10;
/// The largest SDP part (everything after the 2 pad bytes) SC&MP accepts; it silently
/// drops longer datagrams.
pub const MAX_SDP_LEN: usize = 280;
/// The largest datagram: pad + [`MAX_SDP_LEN`].
pub const MAX_DATAGRAM_LEN: usize = 2 + MAX_SDP_LEN;

mod field {
    pub(super) const FLAGS: usize = 2;
    pub(super) const TAG: usize = 3;
    pub(super) const DEST_PORT_CPU: usize = 4;
    pub(super) const SRC_PORT_CPU: usize = 5;
    pub(super) const DEST_Y: usize = 6;
    pub(super) const DEST_X: usize = 7;
    pub(super) const SRC_Y: usize = 8;
    pub(super) const SRC_X: usize = 9;
}

/// A read/write view of a datagram that starts with pad + SDP header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

/// The SDP flags byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Flags(pub u8);

/// A chip, port and core: one end of an SDP exchange.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Address {
    /// Chip x coordinate.
    pub x: u8,
    /// Chip y coordinate.
    pub y: u8,
    /// SDP port, 0..=7 (0 for SCP to the monitor, 7 for the host).
    pub port: u8,
    /// Core, 0..=31 (31 for the host).
    pub cpu: u8,
}

/// The decoded SDP header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Repr {
    /// The flags byte.
    pub flags: Flags,
    /// The IPTag; `0xFF` asks the board for a transient tag to send the reply through.
    pub tag: u8,
    /// Where the packet goes.
    pub dest: Address,
    /// Where the packet comes from.
    pub src: Address,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking its length; the getters may panic on a short one.
    /// Use [`Packet::new_checked`] for anything that came from the network.
    pub const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wraps a buffer after checking it holds a header and is no longer than
    /// [`MAX_DATAGRAM_LEN`].
    pub fn new_checked(buffer: T) -> Result<Self> {
        let len = buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error::Truncated {
                what: "SDP header",
                needed: HEADER_LEN,
                available: len,
            });
        }
        if len > MAX_DATAGRAM_LEN {
            return Err(Error::TooLarge {
                what: "SDP datagram",
                len: len as u64,
                max: MAX_DATAGRAM_LEN as u64,
            });
        }
        Ok(Self { buffer })
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The flags byte.
    pub fn flags(&self) -> Flags {
        Flags(self.buffer.as_ref()[field::FLAGS])
    }

    /// The IPTag byte.
    pub fn tag(&self) -> u8 {
        self.buffer.as_ref()[field::TAG]
    }

    /// The destination chip, port and core.
    pub fn dest(&self) -> Address {
        let b = self.buffer.as_ref();
        Address::from_port_cpu(b[field::DEST_X], b[field::DEST_Y], b[field::DEST_PORT_CPU])
    }

    /// The source chip, port and core.
    pub fn src(&self) -> Address {
        let b = self.buffer.as_ref();
        Address::from_port_cpu(b[field::SRC_X], b[field::SRC_Y], b[field::SRC_PORT_CPU])
    }

    /// Everything after the SDP header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the flags byte.
    pub fn set_flags(&mut self, flags: Flags) {
        self.buffer.as_mut()[field::FLAGS] = flags.0;
    }

    /// Sets the IPTag byte.
    pub fn set_tag(&mut self, tag: u8) {
        self.buffer.as_mut()[field::TAG] = tag;
    }

    /// Sets the destination; fails if its port or core is out of range.
    pub fn set_dest(&mut self, addr: Address) -> Result<()> {
        let port_cpu = addr.port_cpu()?;
        let b = self.buffer.as_mut();
        b[field::DEST_PORT_CPU] = port_cpu;
        b[field::DEST_X] = addr.x;
        b[field::DEST_Y] = addr.y;
        Ok(())
    }

    /// Sets the source; fails if its port or core is out of range.
    pub fn set_src(&mut self, addr: Address) -> Result<()> {
        let port_cpu = addr.port_cpu()?;
        let b = self.buffer.as_mut();
        b[field::SRC_PORT_CPU] = port_cpu;
        b[field::SRC_X] = addr.x;
        b[field::SRC_Y] = addr.y;
        Ok(())
    }

    /// Everything after the SDP header, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }
}

impl Flags {
    /// A request that expects a reply (`0x87`).
    pub const REPLY_EXPECTED: Self = Self(0x87);
    /// A packet that expects no reply (`0x07`); also what replies carry.
    pub const NO_REPLY: Self = Self(0x07);
    /// The bit that asks for a reply.
    pub const REPLY_BIT: u8 = 0x80;

    /// Whether the sender wants a reply.
    pub const fn reply_expected(self) -> bool {
        self.0 & Self::REPLY_BIT != 0
    }
}

impl Address {
    /// The host end as rig writes it: chip (0, 0), port 7, core 31 (`0xFF`).
    pub const HOST: Self = Self {
        x: 0,
        y: 0,
        port: 7,
        cpu: 31,
    };

    /// Core `cpu` of chip (`x`, `y`), port 0 (the monitor's SCP port).
    pub const fn core(x: u8, y: u8, cpu: u8) -> Self {
        Self { x, y, port: 0, cpu }
    }

    /// Splits a `(port & 7) << 5 | (cpu & 31)` byte.
    pub const fn from_port_cpu(x: u8, y: u8, port_cpu: u8) -> Self {
        Self {
            x,
            y,
            port: port_cpu >> 5,
            cpu: port_cpu & 31,
        }
    }

    /// The `(port << 5) | cpu` byte; fails if either is out of range.
    pub fn port_cpu(self) -> Result<u8> {
        if self.port > 7 {
            return Err(Error::InvalidValue {
                what: "SDP port (0..=7)",
                value: u64::from(self.port),
            });
        }
        if self.cpu > 31 {
            return Err(Error::InvalidValue {
                what: "SDP cpu (0..=31)",
                value: u64::from(self.cpu),
            });
        }
        Ok(self.port << 5 | self.cpu)
    }

    /// The chip's 16-bit P2P address, `x << 8 | y`.
    pub const fn p2p(self) -> u16 {
        (self.x as u16) << 8 | self.y as u16
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "({}, {}, {})", self.x, self.y, self.cpu)
    }
}

impl Repr {
    /// A request from rig's host address to `dest` that wants a reply through a
    /// transient tag.
    pub const fn request(dest: Address) -> Self {
        Self {
            flags: Flags::REPLY_EXPECTED,
            tag: 0xFF,
            dest,
            src: Address {
                x: 0,
                y: 0,
                port: 7,
                cpu: 31,
            },
        }
    }

    /// Reads the header of a checked packet.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Self {
        Self {
            flags: packet.flags(),
            tag: packet.tag(),
            dest: packet.dest(),
            src: packet.src(),
        }
    }

    /// The header of the reply to a packet with this header: reply bit cleared,
    /// destination and source swapped, tag kept.
    pub const fn reply(&self) -> Self {
        Self {
            flags: Flags(self.flags.0 & !Flags::REPLY_BIT),
            tag: self.tag,
            dest: self.src,
            src: self.dest,
        }
    }

    /// Bytes the header takes, pad included.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes pad + header into a packet; fails if a port or core is out of range.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(
        &self,
        packet: &mut Packet<&mut T>,
    ) -> Result<()> {
        packet.buffer.as_mut()[..2].fill(0);
        packet.set_flags(self.flags);
        packet.set_tag(self.tag);
        packet.set_dest(self.dest)?;
        packet.set_src(self.src)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // rig 2.4.1's write request to x=1, y=2, p=3, header only.
    const WRITE_REQ_HEADER: [u8; 10] = [0x00, 0x00, 0x87, 0xff, 0x03, 0xff, 0x02, 0x01, 0x00, 0x00];

    #[test]
    fn parses_and_emits_rig_header() {
        let packet = Packet::new_checked(&WRITE_REQ_HEADER[..]).unwrap();
        let repr = Repr::parse(&packet);
        assert_eq!(repr, Repr::request(Address::core(1, 2, 3)));
        assert!(repr.flags.reply_expected());
        let mut out = [0xAAu8; 10];
        repr.emit(&mut Packet::new_unchecked(&mut out[..])).unwrap();
        assert_eq!(out, WRITE_REQ_HEADER);
    }

    #[test]
    fn reply_swaps_ends_and_clears_reply_bit() {
        let reply = Repr::request(Address::core(1, 2, 3)).reply();
        let mut out = [0u8; 10];
        reply
            .emit(&mut Packet::new_unchecked(&mut out[..]))
            .unwrap();
        assert_eq!(
            out,
            [0x00, 0x00, 0x07, 0xff, 0xff, 0x03, 0x00, 0x00, 0x02, 0x01]
        );
    }

    #[test]
    fn checks_lengths_and_ranges() {
        assert_eq!(
            Packet::new_checked(&[0u8; 9][..]).unwrap_err(),
            Error::Truncated {
                what: "SDP header",
                needed: 10,
                available: 9
            }
        );
        assert!(matches!(
            Packet::new_checked(&[0u8; 283][..]),
            Err(Error::TooLarge {
                len: 283,
                max: 282,
                ..
            })
        ));
        let bad = Address {
            port: 8,
            ..Address::HOST
        };
        assert!(bad.port_cpu().is_err());
        assert_eq!(Address::HOST.port_cpu(), Ok(0xFF));
        assert_eq!(Address::core(1, 2, 0).p2p(), 0x0102);
    }
}
