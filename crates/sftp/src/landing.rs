//! A file put to the server lands whole or not at all: it is written as
//! `REMOTE.volley-part`, then renamed over `REMOTE` once every byte is acknowledged, by
//! `posix-rename@openssh.com` (which replaces the target in one step) where the server
//! offers it, else by removing the target and a plain RENAME (SFTP v3's RENAME fails on
//! an existing target).

use crate::client::{SftpClient, SftpError};

/// Appended to a remote name while its file is being written.
pub const PART_SUFFIX: &[u8] = b".volley-part";

/// The name to write `remote` under: its part name, or `None` to write in place when
/// `remote` exists and is not a regular file (a device such as `/dev/null`, a FIFO),
/// which a rename would replace.
pub(crate) async fn part_for(sftp: &SftpClient, remote: &[u8]) -> Option<Vec<u8>> {
    if let Ok(attrs) = sftp.stat(remote).await {
        let regular = attrs.permissions.is_none_or(|p| p & 0o170000 == 0o100000);
        if !regular {
            return None;
        }
    }
    let mut part = remote.to_vec();
    part.extend_from_slice(PART_SUFFIX);
    Some(part)
}

/// Renames the finished `part` over `remote`.
pub(crate) async fn land(sftp: &SftpClient, part: &[u8], remote: &[u8]) -> Result<(), SftpError> {
    if sftp.has_extension(b"posix-rename@openssh.com") {
        return sftp.posix_rename(part, remote).await;
    }
    // Gone already is fine; a target that cannot be removed fails the RENAME, which says so.
    let _ = sftp.remove(remote).await;
    sftp.rename(part, remote).await
}
