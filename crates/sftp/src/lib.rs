//! An SFTP v3 client for OpenSSH's sftp-server that keeps many READ and WRITE requests in
//! flight, sized from the server's own limits (`limits@openssh.com`), over volley's
//! pipelined framed connection: WRITE payloads reach the socket uncopied and DATA
//! payloads are slices of the read buffer.
//!
//! - [`SftpClient::spawn`] runs a server over a socketpair; [`SftpClient::connect`] speaks
//!   over any stream.
//! - File and directory operations map one to one onto SFTP requests; failures are
//!   [`SftpError::Status`] with the server's code and message and the path involved.
//! - [`SftpClient::get`] and [`SftpClient::put`] move whole files with `requests` (64 by
//!   default) requests in flight; a short read is asked again for its tail, never taken
//!   for end of file.
//!
//! # Example
//!
//! ```no_run
//! use volley_sftp::{SftpClient, TransferOptions};
//!
//! # async fn demo() -> Result<(), volley_sftp::SftpError> {
//! let mut command = tokio::process::Command::new("/usr/lib/openssh/sftp-server");
//! command.args(["-e", "-l", "ERROR"]);
//! let sftp = SftpClient::spawn(&mut command).await?;
//! let moved = sftp.put("/tmp/local.bin".as_ref(), b"/tmp/remote.bin", &TransferOptions::default(), |_| {}).await?;
//! let back = sftp.get(b"/tmp/remote.bin", "/tmp/back.bin".as_ref(), &TransferOptions::default(), |_| {}).await?;
//! assert_eq!(moved, back);
//! sftp.shutdown().await?;
//! # Ok(())
//! # }
//! ```

mod client;
mod transfer;

pub use client::{DEFAULT_TIMEOUT, DirEntry, FileAttrs, Handle, SftpClient, SftpError};
pub use transfer::{Progress, TransferOptions};
pub use volley_proto::wire::sftp::{Limits, OpenFlags, StatusCode};

/// The README's examples, compiled and run as doctests so they cannot rot (this crate
/// sees every crate the README shows examples of).
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
