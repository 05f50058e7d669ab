//! The method table an end sends after its hello ([`Kind::METHODS`](super::Kind::METHODS),
//! to a peer whose hello sets [`CAP_METHOD_TABLE`](super::CAP_METHOD_TABLE)): the name of
//! the service it serves and, for each method, its id, its kind and a fingerprint of its
//! own argument and result types. A caller looks a method up in the peer's table before
//! it sends a call, so a method one end lacks, or declares with other types, fails alone
//! while every other call goes on.
//!
//! | bytes | field |
//! |---|---|
//! | 2 | service name's length n (at most [`MAX_SERVICE_NAME`]) |
//! | n | service name, UTF-8 |
//! | 4 | methods m (at most [`MAX_METHODS`]) |
//! | 13 each | method id (u32), flags (u8: bit 0 one-way; others 0), types fingerprint (u64) |
//!
//! All integers little-endian. [`MethodTable::parse`] checks that the count matches the
//! bytes given before anything is read, and allocates nothing.
//!
//! ```
//! use volley_proto::rpc::methods::{MethodEntry, MethodTable};
//!
//! let entries = [
//!     MethodEntry { id: 1, one_way: false, types: 0xfeed },
//!     MethodEntry { id: 7, one_way: true, types: 0xbeef },
//! ];
//! let mut buf = [0u8; 64];
//! let n = MethodTable::emit("Kv", &entries, &mut buf).unwrap();
//! let table = MethodTable::parse(&buf[..n]).unwrap();
//! assert_eq!(table.service(), "Kv");
//! assert_eq!(table.get(7), Some(entries[1]));
//! assert_eq!(table.get(2), None);
//! ```

use crate::wire::{Error, Reader, Result, Sink, Writer};

/// The longest service name a table carries.
pub const MAX_SERVICE_NAME: usize = 256;
/// The most methods a table lists.
pub const MAX_METHODS: usize = 65_536;
/// Bytes of one method's entry.
pub const ENTRY_LEN: usize = 13;

const FLAG_ONE_WAY: u8 = 1;

/// One method as a table lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MethodEntry {
    /// Its id.
    pub id: u32,
    /// Whether it is called one way (no reply).
    pub one_way: bool,
    /// A fingerprint of its argument and result types.
    pub types: u64,
}

/// A method table as received: read in place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MethodTable<'a> {
    service: &'a str,
    entries: &'a [u8],
}

impl<'a> MethodTable<'a> {
    /// The bytes a table of `service` and `entries` takes.
    pub const fn buffer_len(service: &str, entries: usize) -> usize {
        2 + service.len() + 4 + entries * ENTRY_LEN
    }

    /// Writes the table of `service` and `entries` into `out`; gives the length written.
    /// A name or a count over its limit, or an `out` too short, is an error.
    pub fn emit(service: &str, entries: &[MethodEntry], out: &mut [u8]) -> Result<usize> {
        if service.len() > MAX_SERVICE_NAME {
            return Err(Error::TooLarge {
                what: "rpc service name",
                len: service.len() as u64,
                max: MAX_SERVICE_NAME as u64,
            });
        }
        if entries.len() > MAX_METHODS {
            return Err(Error::TooLarge {
                what: "rpc method table",
                len: entries.len() as u64,
                max: MAX_METHODS as u64,
            });
        }
        let len = Self::buffer_len(service, entries.len());
        let mut w = Writer::with_capacity(out, len)?;
        // Both fit: checked against their limits above.
        w.u16_le(service.len() as u16)?;
        w.put(service.as_bytes())?;
        w.u32_le(entries.len() as u32)?;
        for entry in entries {
            w.u32_le(entry.id)?;
            w.u8(if entry.one_way { FLAG_ONE_WAY } else { 0 })?;
            w.u64_le(entry.types)?;
        }
        Ok(w.position())
    }

    /// Reads a table; every length is checked against the bytes given first.
    pub fn parse(bytes: &'a [u8]) -> Result<Self> {
        let mut r = Reader::new(bytes);
        let name_len = usize::from(r.u16_le("rpc service name length")?);
        if name_len > MAX_SERVICE_NAME {
            return Err(Error::TooLarge {
                what: "rpc service name",
                len: name_len as u64,
                max: MAX_SERVICE_NAME as u64,
            });
        }
        let name = r.bytes(name_len, "rpc service name")?;
        let service = core::str::from_utf8(name).map_err(|_| Error::InvalidValue {
            what: "rpc service name (not UTF-8)",
            value: name_len as u64,
        })?;
        let count = r.u32_le("rpc method count")? as usize;
        if count > MAX_METHODS {
            return Err(Error::TooLarge {
                what: "rpc method table",
                len: count as u64,
                max: MAX_METHODS as u64,
            });
        }
        let entries = r.bytes(count * ENTRY_LEN, "rpc method table entries")?;
        r.finish("rpc method table")?;
        for entry in entries.chunks_exact(ENTRY_LEN) {
            if entry[4] & !FLAG_ONE_WAY != 0 {
                return Err(Error::InvalidValue {
                    what: "rpc method flags",
                    value: u64::from(entry[4]),
                });
            }
        }
        Ok(Self { service, entries })
    }

    /// The name of the service the table lists.
    pub fn service(&self) -> &'a str {
        self.service
    }

    /// How many methods it lists.
    pub fn len(&self) -> usize {
        self.entries.len() / ENTRY_LEN
    }

    /// Whether it lists none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Its methods, in the order listed.
    pub fn iter(&self) -> impl Iterator<Item = MethodEntry> + use<'a> {
        self.entries.chunks_exact(ENTRY_LEN).map(|e| {
            let id = u32::from_le_bytes([e[0], e[1], e[2], e[3]]);
            let mut types = [0u8; 8];
            types.copy_from_slice(&e[5..13]);
            MethodEntry {
                id,
                one_way: e[4] & FLAG_ONE_WAY != 0,
                types: u64::from_le_bytes(types),
            }
        })
    }

    /// The method with id `id`, if listed (the first, if listed twice).
    pub fn get(&self, id: u32) -> Option<MethodEntry> {
        self.iter().find(|e| e.id == id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lying_counts_and_flags_are_errors() {
        let entries = [MethodEntry {
            id: 3,
            one_way: false,
            types: 9,
        }];
        let mut buf = [0u8; 64];
        let n = MethodTable::emit("S", &entries, &mut buf).unwrap();
        assert_eq!(n, MethodTable::buffer_len("S", 1));
        assert_eq!(MethodTable::parse(&buf[..n]).unwrap().len(), 1);
        // One entry claimed more than the bytes hold, one byte short, one too many.
        let mut more = buf;
        more[3..7].copy_from_slice(&2u32.to_le_bytes());
        assert!(MethodTable::parse(&more[..n]).is_err());
        assert!(MethodTable::parse(&buf[..n - 1]).is_err());
        assert!(MethodTable::parse(&buf[..n + 1]).is_err());
        // A count past the limit is refused before anything is read.
        let mut huge = buf;
        huge[3..7].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(MethodTable::parse(&huge[..n]).is_err());
        let mut flags = buf;
        flags[7 + 4] = 0x80;
        assert!(MethodTable::parse(&flags[..n]).is_err());
        let long = [b'x'; MAX_SERVICE_NAME + 1];
        let long = core::str::from_utf8(&long).unwrap();
        assert!(MethodTable::emit(long, &entries, &mut [0u8; 512]).is_err());
    }
}
