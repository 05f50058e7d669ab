//! A request as the server keeps it once read: owned, so it can run on a pool thread,
//! its WRITE data still a slice of the bytes read (not copied).

use bytes::Bytes;
use volley_proto::sftp::{Attrs, OpenFlags, Request};

/// Attributes a request sets; the fields it leaves out stay as they are.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SetAttrs {
    pub(crate) size: Option<u64>,
    pub(crate) uid_gid: Option<(u32, u32)>,
    pub(crate) permissions: Option<u32>,
    pub(crate) atime_mtime: Option<(u32, u32)>,
}

impl From<Attrs<'_>> for SetAttrs {
    fn from(a: Attrs<'_>) -> Self {
        Self {
            size: a.size,
            uid_gid: a.uid_gid,
            permissions: a.permissions,
            atime_mtime: a.atime_mtime,
        }
    }
}

/// One request, owned.
#[derive(Debug)]
pub(crate) enum Op {
    Open {
        path: Bytes,
        flags: OpenFlags,
        mode: Option<u32>,
    },
    Close {
        handle: Bytes,
    },
    Read {
        handle: Bytes,
        offset: u64,
        len: u32,
    },
    Write {
        handle: Bytes,
        offset: u64,
        data: Bytes,
    },
    Lstat {
        path: Bytes,
    },
    Fstat {
        handle: Bytes,
    },
    Setstat {
        path: Bytes,
        attrs: SetAttrs,
    },
    Fsetstat {
        handle: Bytes,
        attrs: SetAttrs,
    },
    Opendir {
        path: Bytes,
    },
    Readdir {
        handle: Bytes,
    },
    Remove {
        path: Bytes,
    },
    Mkdir {
        path: Bytes,
        mode: Option<u32>,
    },
    Rmdir {
        path: Bytes,
    },
    Realpath {
        path: Bytes,
    },
    Stat {
        path: Bytes,
    },
    Rename {
        from: Bytes,
        to: Bytes,
    },
    Readlink {
        path: Bytes,
    },
    /// OpenSSH's order: the link's target first, then the link (the reverse of the
    /// draft's, which every client follows OpenSSH in).
    Symlink {
        target: Bytes,
        link: Bytes,
    },
    Extended {
        name: Bytes,
        data: Bytes,
    },
}

/// How a request is ordered against the others.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Order {
    /// Runs beside the other shared requests: it changes nothing another depends on
    /// (a READ or WRITE at its own offset, a look at the file system).
    Shared,
    /// Waits for every request before it to finish, and every request after it waits
    /// for it: it changes what others see (CLOSE, RENAME, SETSTAT, ...).
    Alone,
}

impl Op {
    /// `request`, owned; `frame` the bytes it was parsed from (WRITE's data is sliced
    /// out of them).
    pub(crate) fn new(request: &Request<'_>, frame: &Bytes) -> Option<Self> {
        // Paths and handles are slices of the frame too: no allocation per request.
        let v = |field: &[u8]| frame.slice_ref(field);
        Some(match *request {
            Request::Init { .. } => return None,
            Request::Open {
                filename,
                pflags,
                attrs,
                ..
            } => Self::Open {
                path: v(filename),
                flags: pflags,
                mode: attrs.permissions,
            },
            Request::Close { handle, .. } => Self::Close { handle: v(handle) },
            Request::Read {
                handle,
                offset,
                len,
                ..
            } => Self::Read {
                handle: v(handle),
                offset,
                len,
            },
            Request::Write {
                handle,
                offset,
                data,
                ..
            } => Self::Write {
                handle: v(handle),
                offset,
                data: frame.slice_ref(data),
            },
            Request::Lstat { path, .. } => Self::Lstat { path: v(path) },
            Request::Fstat { handle, .. } => Self::Fstat { handle: v(handle) },
            Request::Setstat { path, attrs, .. } => Self::Setstat {
                path: v(path),
                attrs: attrs.into(),
            },
            Request::Fsetstat { handle, attrs, .. } => Self::Fsetstat {
                handle: v(handle),
                attrs: attrs.into(),
            },
            Request::Opendir { path, .. } => Self::Opendir { path: v(path) },
            Request::Readdir { handle, .. } => Self::Readdir { handle: v(handle) },
            Request::Remove { filename, .. } => Self::Remove { path: v(filename) },
            Request::Mkdir { path, attrs, .. } => Self::Mkdir {
                path: v(path),
                mode: attrs.permissions,
            },
            Request::Rmdir { path, .. } => Self::Rmdir { path: v(path) },
            Request::Realpath { path, .. } => Self::Realpath { path: v(path) },
            Request::Stat { path, .. } => Self::Stat { path: v(path) },
            Request::Rename {
                oldpath, newpath, ..
            } => Self::Rename {
                from: v(oldpath),
                to: v(newpath),
            },
            Request::Readlink { path, .. } => Self::Readlink { path: v(path) },
            Request::Symlink {
                linkpath,
                targetpath,
                ..
            } => Self::Symlink {
                target: v(linkpath),
                link: v(targetpath),
            },
            Request::Extended { request, data, .. } => Self::Extended {
                name: v(request),
                data: frame.slice_ref(data),
            },
        })
    }

    /// Its name in [`REQUESTS`](crate::REQUESTS) (an extension's without its
    /// `@openssh.com`), or `None` for an extension the server does not know.
    pub(crate) fn name(&self) -> Option<&'static str> {
        Some(match self {
            Self::Open { .. } => "open",
            Self::Close { .. } => "close",
            Self::Read { .. } => "read",
            Self::Write { .. } => "write",
            Self::Lstat { .. } => "lstat",
            Self::Fstat { .. } => "fstat",
            Self::Setstat { .. } => "setstat",
            Self::Fsetstat { .. } => "fsetstat",
            Self::Opendir { .. } => "opendir",
            Self::Readdir { .. } => "readdir",
            Self::Remove { .. } => "remove",
            Self::Mkdir { .. } => "mkdir",
            Self::Rmdir { .. } => "rmdir",
            Self::Realpath { .. } => "realpath",
            Self::Stat { .. } => "stat",
            Self::Rename { .. } => "rename",
            Self::Readlink { .. } => "readlink",
            Self::Symlink { .. } => "symlink",
            Self::Extended { name, .. } => crate::config::short_name(name)?,
        })
    }

    /// Whether it would change the file system (refused with `-R`).
    pub(crate) fn writes(&self) -> bool {
        match self {
            Self::Open { flags, .. } => {
                let changes =
                    OpenFlags::WRITE | OpenFlags::APPEND | OpenFlags::CREAT | OpenFlags::TRUNC;
                flags.0 & changes.0 != 0
            }
            Self::Write { .. }
            | Self::Setstat { .. }
            | Self::Fsetstat { .. }
            | Self::Remove { .. }
            | Self::Mkdir { .. }
            | Self::Rmdir { .. }
            | Self::Rename { .. }
            | Self::Symlink { .. } => true,
            Self::Extended { name, .. } => crate::config::writes(name),
            _ => false,
        }
    }

    /// How it is ordered against the requests around it.
    pub(crate) fn order(&self) -> Order {
        match self {
            Self::Read { .. }
            | Self::Write { .. }
            | Self::Open { .. }
            | Self::Lstat { .. }
            | Self::Fstat { .. }
            | Self::Opendir { .. }
            | Self::Readdir { .. }
            | Self::Realpath { .. }
            | Self::Stat { .. }
            | Self::Readlink { .. } => Order::Shared,
            Self::Extended { name, .. } if !crate::config::writes(name) => Order::Shared,
            _ => Order::Alone,
        }
    }

    /// Bytes it holds, and its reply may: what it takes of the session's budget.
    pub(crate) fn cost(&self, max_io: u32) -> usize {
        const BASE: usize = 1024;
        match self {
            Self::Read { len, .. } => BASE + (*len).min(max_io) as usize,
            Self::Write { data, .. } | Self::Extended { data, .. } => BASE + data.len(),
            // A directory's names, a hundred to a reply.
            Self::Readdir { .. } => 64 << 10,
            _ => BASE,
        }
    }
}
