//! What requests take and give back: [`Handle`]s, [`FileAttrs`] and [`DirEntry`]s, owned.

use bytes::Bytes;
use volley_proto::sftp::Attrs;

/// An open file or directory on the server.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Handle(pub Bytes);

impl core::fmt::Display for Handle {
    /// `handle 0x...`, the bytes in hex (for errors about a handle with no path).
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("handle 0x")?;
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

/// File attributes, owned.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FileAttrs {
    /// Size in bytes.
    pub size: Option<u64>,
    /// Owner and group.
    pub uid_gid: Option<(u32, u32)>,
    /// Mode bits, file type included.
    pub permissions: Option<u32>,
    /// Access and modification times, unix seconds.
    pub atime_mtime: Option<(u32, u32)>,
}

/// One entry of a directory listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    /// The name (bytes: SFTP v3 names need not be UTF-8).
    pub name: Vec<u8>,
    /// The `ls -l` style line.
    pub longname: Vec<u8>,
    /// Attributes.
    pub attrs: FileAttrs,
}

impl FileAttrs {
    pub(crate) fn to_wire(self) -> Attrs<'static> {
        Attrs {
            size: self.size,
            uid_gid: self.uid_gid,
            permissions: self.permissions,
            atime_mtime: self.atime_mtime,
            extended: None,
        }
    }

    pub(crate) fn from_wire(attrs: &Attrs<'_>) -> Self {
        Self {
            size: attrs.size,
            uid_gid: attrs.uid_gid,
            permissions: attrs.permissions,
            atime_mtime: attrs.atime_mtime,
        }
    }

    /// Only permissions set (e.g. for a new file or directory).
    pub fn with_permissions(mode: u32) -> Self {
        Self {
            permissions: Some(mode),
            ..Self::default()
        }
    }

    /// Whether this is a directory.
    pub fn is_dir(&self) -> bool {
        self.permissions.is_some_and(|p| p & 0o170000 == 0o040000)
    }

    /// Whether this is a symlink.
    pub fn is_symlink(&self) -> bool {
        self.permissions.is_some_and(|p| p & 0o170000 == 0o120000)
    }

    /// Whether this is something other than a regular file (a device, a FIFO, a
    /// directory): `false` for a regular file and when the server states no type.
    pub fn is_special(&self) -> bool {
        self.permissions.is_some_and(|p| p & 0o170000 != 0o100000)
    }
}

/// `name` in the remote directory `dir` (remote paths are bytes, `/`-separated).
pub(crate) fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut path = dir.to_vec();
    if !path.is_empty() && !path.ends_with(b"/") {
        path.push(b'/');
    }
    path.extend_from_slice(name);
    path
}
