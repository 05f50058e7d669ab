//! SFTP v3 ATTRS: a flags word, then each group of fields its flags announce.

use super::{Error, Pairs, Reader, Result, Sink};

/// File attributes; each `Some` field is present on the wire.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Attrs<'a> {
    /// Size in bytes (flag 0x1).
    pub size: Option<u64>,
    /// Owner and group ids (flag 0x2).
    pub uid_gid: Option<(u32, u32)>,
    /// Mode bits, file type included (flag 0x4).
    pub permissions: Option<u32>,
    /// Access and modification times, unix seconds (flag 0x8).
    pub atime_mtime: Option<(u32, u32)>,
    /// Extended attributes (flag 0x80000000).
    pub extended: Option<Pairs<'a>>,
}

impl<'a> Attrs<'a> {
    /// Size present.
    pub const FLAG_SIZE: u32 = 0x1;
    /// Uid and gid present.
    pub const FLAG_UIDGID: u32 = 0x2;
    /// Permissions present.
    pub const FLAG_PERMISSIONS: u32 = 0x4;
    /// Times present.
    pub const FLAG_ACMODTIME: u32 = 0x8;
    /// Extended pairs present.
    pub const FLAG_EXTENDED: u32 = 0x8000_0000;
    const KNOWN_FLAGS: u32 = 0x8000_000F;

    /// No attributes at all (flags 0).
    pub const EMPTY: Self = Self {
        size: None,
        uid_gid: None,
        permissions: None,
        atime_mtime: None,
        extended: None,
    };

    /// The flags word this value encodes with.
    pub const fn flags(&self) -> u32 {
        let mut flags = 0;
        if self.size.is_some() {
            flags |= Self::FLAG_SIZE;
        }
        if self.uid_gid.is_some() {
            flags |= Self::FLAG_UIDGID;
        }
        if self.permissions.is_some() {
            flags |= Self::FLAG_PERMISSIONS;
        }
        if self.atime_mtime.is_some() {
            flags |= Self::FLAG_ACMODTIME;
        }
        if self.extended.is_some() {
            flags |= Self::FLAG_EXTENDED;
        }
        flags
    }

    /// Reads ATTRS off the front of `r`. Unknown flag bits are refused: the fields they
    /// would announce have no defined layout, so nothing after them could be trusted.
    pub(crate) fn take(r: &mut Reader<'a>) -> Result<Self> {
        let flags = r.u32_be("ATTRS flags")?;
        if flags & !Self::KNOWN_FLAGS != 0 {
            return Err(Error::InvalidValue {
                what: "ATTRS flags",
                value: u64::from(flags),
            });
        }
        let mut attrs = Self::EMPTY;
        if flags & Self::FLAG_SIZE != 0 {
            attrs.size = Some(r.u64_be("ATTRS size")?);
        }
        if flags & Self::FLAG_UIDGID != 0 {
            attrs.uid_gid = Some((r.u32_be("ATTRS uid")?, r.u32_be("ATTRS gid")?));
        }
        if flags & Self::FLAG_PERMISSIONS != 0 {
            attrs.permissions = Some(r.u32_be("ATTRS permissions")?);
        }
        if flags & Self::FLAG_ACMODTIME != 0 {
            attrs.atime_mtime = Some((r.u32_be("ATTRS atime")?, r.u32_be("ATTRS mtime")?));
        }
        if flags & Self::FLAG_EXTENDED != 0 {
            let count = r.u32_be("ATTRS extended count")?;
            attrs.extended = Some(Pairs::take_counted(r, count)?);
        }
        Ok(attrs)
    }

    /// Decodes ATTRS that make up all of `bytes`.
    pub fn parse(bytes: &'a [u8]) -> Result<Self> {
        let mut r = Reader::new(bytes);
        let attrs = Self::take(&mut r)?;
        r.finish("ATTRS")?;
        Ok(attrs)
    }

    pub(crate) fn put(&self, w: &mut impl Sink) -> Result<()> {
        w.u32_be(self.flags())?;
        if let Some(size) = self.size {
            w.u64_be(size)?;
        }
        if let Some((uid, gid)) = self.uid_gid {
            w.u32_be(uid)?;
            w.u32_be(gid)?;
        }
        if let Some(permissions) = self.permissions {
            w.u32_be(permissions)?;
        }
        if let Some((atime, mtime)) = self.atime_mtime {
            w.u32_be(atime)?;
            w.u32_be(mtime)?;
        }
        if let Some(extended) = self.extended {
            w.u32_be(extended.count())?;
            w.put(extended.as_bytes())?;
        }
        Ok(())
    }

    /// Whether the permissions say this is a directory (`S_IFDIR`).
    pub const fn is_dir(&self) -> bool {
        matches!(self.permissions, Some(p) if p & 0o170000 == 0o040000)
    }

    /// Whether the permissions say this is a regular file (`S_IFREG`).
    pub const fn is_file(&self) -> bool {
        matches!(self.permissions, Some(p) if p & 0o170000 == 0o100000)
    }

    /// Whether the permissions say this is a symbolic link (`S_IFLNK`).
    pub const fn is_symlink(&self) -> bool {
        matches!(self.permissions, Some(p) if p & 0o170000 == 0o120000)
    }
}
