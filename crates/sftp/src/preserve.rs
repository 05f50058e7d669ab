//! `-p`: a copy takes its source's modification and access times and permission bits
//! (not its owner), as OpenSSH's `sftp -p` does.

use core::time::Duration;
use std::fs::{File, FileTimes, Permissions};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::UNIX_EPOCH;

use crate::{FileAttrs, SftpError};

/// Gives the local file at `path` the times and permission bits the server stated.
pub(crate) fn to_local(path: &Path, attrs: FileAttrs) -> Result<(), SftpError> {
    let io = |what: &str| {
        let what = format!("cannot {what} {}", path.display());
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
        std::fs::set_permissions(path, Permissions::from_mode(mode & 0o7777))
            .map_err(io("set the permissions of"))?;
    }
    Ok(())
}

/// The times and permission bits of a local file, for SETSTAT. SFTP v3 carries times
/// as 32-bit unsigned seconds: times outside 1970-2106 are clamped.
pub(crate) fn of_local(meta: &std::fs::Metadata) -> FileAttrs {
    let secs = |t: i64| u32::try_from(t.max(0)).unwrap_or(u32::MAX);
    FileAttrs {
        permissions: Some(meta.mode() & 0o7777),
        atime_mtime: Some((secs(meta.atime()), secs(meta.mtime()))),
        ..FileAttrs::default()
    }
}
