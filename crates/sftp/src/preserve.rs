//! Which mode bits a copy takes, with and without `-p`, as OpenSSH's `sftp` and `scp`
//! take them: never a setuid or setgid bit, and never a sticky bit from the server.
//!
//! Without `-p` a new copy gets its source's permission bits (`0o777`) under the umask
//! of whoever creates it (this process for a get, the server for a put); a copy over an
//! existing file keeps that file's permission bits. With `-p` the copy takes the
//! source's modification and access times and permission bits (not its owner): masked
//! `0o777` on a get (the server's word raises nothing here), `0o1777` on a put.

use core::time::Duration;
use std::fs::{File, FileTimes, Permissions};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::UNIX_EPOCH;

use crate::{FileAttrs, SftpError};

/// The permission bits (read, write, execute): all a get ever takes from the server,
/// and all a copy takes without `-p`.
pub(crate) const PERMISSION_BITS: u32 = 0o777;
/// The mode bits a put with `-p` gives the server: those and the sticky bit.
pub(crate) const PUT_PRESERVED: u32 = 0o1777;

/// The permission bits a new local copy of a remote file is created with, before the
/// umask: the source's, always writable by its owner (as OpenSSH's `sftp` creates it,
/// so that a resume can write it again), or `0o666` when the server states none.
pub(crate) fn new_local_mode(source: FileAttrs) -> u32 {
    source
        .permissions
        .map_or(0o666, |p| (p & PERMISSION_BITS) | 0o200)
}

/// Gives the local file at `path` the times and permission bits the server stated.
pub(crate) fn to_local(path: &Path, attrs: FileAttrs) -> Result<(), SftpError> {
    let io = |what: &str| {
        let what = format!("cannot {what} {}", crate::client::shown_local(path));
        move |source| SftpError::Io { what, source }
    };
    if let Some((atime, mtime)) = attrs.atime_mtime {
        let at = |secs: u32| UNIX_EPOCH + Duration::from_secs(u64::from(secs));
        File::open(path)
            .and_then(|f| {
                f.set_times(
                    FileTimes::new()
                        .set_accessed(at(atime))
                        .set_modified(at(mtime)),
                )
            })
            .map_err(io("set the times of"))?;
    }
    if let Some(mode) = attrs.permissions {
        std::fs::set_permissions(path, Permissions::from_mode(mode & PERMISSION_BITS))
            .map_err(io("set the permissions of"))?;
    }
    Ok(())
}

/// The times and permission bits of a local file, for SETSTAT. SFTP v3 carries times
/// as 32-bit unsigned seconds: times outside 1970-2106 are clamped.
pub(crate) fn of_local(meta: &std::fs::Metadata) -> FileAttrs {
    let secs = |t: i64| u32::try_from(t.max(0)).unwrap_or(u32::MAX);
    FileAttrs {
        permissions: Some(meta.mode() & PUT_PRESERVED),
        atime_mtime: Some((secs(meta.atime()), secs(meta.mtime()))),
        ..FileAttrs::default()
    }
}
