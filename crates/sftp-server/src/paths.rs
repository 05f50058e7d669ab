//! The file system requests' helpers: paths from bytes, REALPATH, RENAME as v3 has it,
//! and setting attributes.

use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::op::SetAttrs;

/// `bytes` as a path.
pub(crate) fn path(bytes: &[u8]) -> &Path {
    Path::new(OsStr::from_bytes(bytes))
}

/// The absolute path of `p` without `.`, `..` or symbolic links; a path whose last part
/// does not exist yet resolves by its directory (a client asks where a file it is about
/// to create will be). An empty path is the start directory.
pub(crate) fn realpath(p: &[u8]) -> io::Result<Vec<u8>> {
    let p = if p.is_empty() {
        Path::new(".")
    } else {
        path(p)
    };
    match fs::canonicalize(p) {
        Ok(real) => Ok(real.into_os_string().into_vec()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let (Some(parent), Some(name)) = (p.parent(), p.file_name()) else {
                return Err(e);
            };
            let parent = if parent.as_os_str().is_empty() {
                Path::new(".")
            } else {
                parent
            };
            let mut real = fs::canonicalize(parent)?;
            real.push(name);
            Ok(real.into_os_string().into_vec())
        }
        Err(e) => Err(e),
    }
}

/// RENAME as SFTP v3 has it: refused when `to` exists (posix-rename@ overwrites).
pub(crate) fn rename(from: &Path, to: &Path) -> io::Result<()> {
    if fs::symlink_metadata(to).is_ok() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "the target exists",
        ));
    }
    fs::rename(from, to)
}

/// SETSTAT on a path: size, owner, mode, then times (last: the others would change
/// them).
pub(crate) fn set_path(p: &Path, attrs: SetAttrs) -> io::Result<()> {
    if let Some(size) = attrs.size {
        OpenOptions::new().write(true).open(p)?.set_len(size)?;
    }
    if let Some((uid, gid)) = attrs.uid_gid {
        std::os::unix::fs::chown(p, Some(uid), Some(gid))?;
    }
    if let Some(mode) = attrs.permissions {
        fs::set_permissions(p, fs::Permissions::from_mode(mode & 0o7777))?;
    }
    if let Some((atime, mtime)) = attrs.atime_mtime {
        let (atime, mtime) = (timeval(atime), timeval(mtime));
        nix::sys::stat::utimes(p, &atime, &mtime)?;
    }
    Ok(())
}

/// A time of SFTP v3's, as `utimes(2)` takes it.
pub(crate) fn timeval(secs: u32) -> nix::sys::time::TimeVal {
    nix::sys::time::TimeVal::new(i64::from(secs), 0)
}

/// FSETSTAT on an open file.
pub(crate) fn set_file(file: &File, attrs: SetAttrs) -> io::Result<()> {
    if let Some(size) = attrs.size {
        file.set_len(size)?;
    }
    if let Some((uid, gid)) = attrs.uid_gid {
        std::os::unix::fs::fchown(file, Some(uid), Some(gid))?;
    }
    if let Some(mode) = attrs.permissions {
        file.set_permissions(fs::Permissions::from_mode(mode & 0o7777))?;
    }
    if let Some((atime, mtime)) = attrs.atime_mtime {
        file.set_times(times(atime, mtime))?;
    }
    Ok(())
}

fn times(atime: u32, mtime: u32) -> fs::FileTimes {
    let at = |secs: u32| std::time::UNIX_EPOCH + core::time::Duration::from_secs(u64::from(secs));
    fs::FileTimes::new()
        .set_accessed(at(atime))
        .set_modified(at(mtime))
}

/// The user's home directory: `$HOME`, else the start directory.
pub(crate) fn home() -> PathBuf {
    std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from)
}
