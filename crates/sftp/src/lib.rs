//! An SFTP v3 client for OpenSSH's sftp-server that keeps many READ and WRITE requests in
//! flight, within the server's own limits (`limits@openssh.com`), over volley's
//! pipelined framed connection: a put's WRITE data is read from the local file by the
//! connection's writer just as the socket can take it (through one reused buffer, never
//! copied behind its header), and DATA payloads are slices of the read buffer.
//!
//! - [`SftpClient::spawn`] runs a server over a socketpair; [`SftpClient::connect`] speaks
//!   over any stream.
//! - File and directory operations map one to one onto SFTP requests; failures are
//!   [`SftpError::Status`] with the server's code and message and the path involved.
//! - [`SftpClient::get`] and [`SftpClient::put`] move whole files with `requests` (64 by
//!   default) requests in flight; a short read is asked again for its tail, never taken
//!   for end of file. With [`TransferOptions::send_from_file`], a put's WRITE data goes
//!   from the file to the socket by `sendfile(2)`, never entering this process.
//! - [`SftpClient::ssh`] reaches a host as OpenSSH's `sftp` does; [`Sessions`] holds
//!   several sessions to one server, a tree's files spread over them and a large file
//!   cut into ranges, one a session.
//! - Each copy lands whole or not at all (`.volley-part`, renamed into place); an
//!   interrupted one keeps what arrived, and [`TransferOptions::resume`] continues it.
//! - A spawned server that exits is reported as [`SftpError::ServerExited`], with its
//!   exit status, at once.
//!
//! # Example
//!
//! ```
//! use volley_sftp::{SftpClient, TransferOptions};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = std::env::temp_dir().join(format!("volley-sftp-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir)?;
//! std::fs::write(dir.join("local.bin"), vec![42u8; 1 << 20])?;
//!
//! let mut command = tokio::process::Command::new("/usr/lib/openssh/sftp-server");
//! command.args(["-e", "-l", "ERROR"]);
//! let sftp = SftpClient::spawn(&mut command).await?;
//! let remote = dir.join("remote.bin");
//! let remote = remote.to_str().ok_or("a UTF-8 temp dir")?.as_bytes();
//! let opts = TransferOptions::default(); // 64 requests in flight
//! let sent = sftp.put(&dir.join("local.bin"), remote, &opts).await?;
//! let got = sftp.get(remote, &dir.join("back.bin"), &opts).await?;
//! assert_eq!((sent, got), (1 << 20, 1 << 20));
//! assert_eq!(std::fs::read(dir.join("back.bin"))?, vec![42u8; 1 << 20]);
//! sftp.shutdown().await?;
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok(())
//! # }
//! ```

mod client;
mod get;
mod glob;
mod kept;
mod landing;
mod preserve;
mod put;
mod remote_file;
mod sessions;
mod span;
mod ssh;
mod sys;
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod testing;
mod transfer;
mod tree;

pub use client::{
    DEFAULT_TIMEOUT, DirEntry, FileAttrs, Handle, MAX_CHUNK, MAX_PACKET, SftpClient, SftpError,
    printable, printable_bytes,
};
pub use landing::{PART_SUFFIX, kept_part};
pub use remote_file::RemoteFile;
pub use sessions::{LOGINS_AT_ONCE, Sessions};
pub use span::Stop;
pub use ssh::{Destination, Remote, RemoteError, SSH_DEFAULTS, SshOptions};
pub use transfer::{MAX_DEPTH, MAX_ENTRIES, PIECE, Progress, ProgressFn, TransferOptions};
pub use tree::{DEFAULT_FILES_AT_ONCE, MAX_FILES_AT_ONCE, Skip, TreeEvent, TreeReport};
pub use volley_proto::sftp::{Limits, OpenFlags, StatusCode};
