//! [`SftpError`]: why an SFTP operation failed, printed with whatever the server sent
//! made harmless ([`printable`]).

use std::io;

use volley_proto::sftp::{PacketType, StatusCode};

/// Why an SFTP operation failed.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum SftpError {
    /// The server answered with a status other than OK. Printed with control characters
    /// escaped (the message is the server's, and may hold anything).
    #[error("{op} {path}: {code}: {}", printable(message))]
    Status {
        /// The operation.
        op: &'static str,
        /// The path or handle it was about, as [`printable_bytes`] shows it.
        path: String,
        /// The status code.
        code: StatusCode,
        /// The server's message.
        message: String,
    },
    /// The server answered with a message this request does not expect.
    #[error("{op}: unexpected {found} reply")]
    Unexpected {
        /// The operation.
        op: &'static str,
        /// What came back.
        found: PacketType,
    },
    /// The stream began with text, not the server's VERSION: something printed before
    /// the SFTP server started (a shell's startup file on the server, run for ssh's
    /// session). OpenSSH's `sftp` fails the same way, with the same advice.
    #[error(
        "the server's first bytes were \"{first}\", not an SFTP packet: ensure the remote shell produces no output for non-interactive sessions"
    )]
    NotSftp {
        /// The first four bytes, escaped.
        first: String,
    },
    /// The server speaks another protocol version.
    #[error("the server speaks SFTP version {0}; volley speaks 3")]
    Version(u32),
    /// The connection failed: the server died, closed the stream, sent garbage, or did
    /// not answer in time.
    #[error("{op}: {source}")]
    Connection {
        /// The operation.
        op: &'static str,
        /// What happened.
        source: volley_transport_tcp::Error,
    },
    /// A request had no answer within the session's timeout
    /// ([`SftpClient::set_timeout`](crate::SftpClient::set_timeout)): a server that
    /// stopped answering (a hung disk, a stalled process) while the stream stays open.
    #[error(
        "{op} {path}: no answer from the server in {} s (a longer timeout waits longer)",
        after.as_secs_f64()
    )]
    TimedOut {
        /// The operation.
        op: &'static str,
        /// The path (or handle) it was about, as [`printable_bytes`] shows it.
        path: String,
        /// How long it waited.
        after: core::time::Duration,
    },
    /// The transfer was asked to stop ([`Stop`](crate::Stop)) before it was complete;
    /// the requests already out were answered first, so what arrived is kept whole.
    #[error("stopped on request")]
    Stopped,
    /// The server this client spawned exited: the connection closed under `op`, and
    /// the process had ended by then (or within a second).
    #[error("{op}: the server exited ({status})")]
    ServerExited {
        /// The operation.
        op: &'static str,
        /// How it exited.
        status: std::process::ExitStatus,
    },
    /// ssh (run by [`SftpClient::ssh`](crate::SftpClient::ssh)) exited before the session
    /// started: what it said last is the reason (a refused key, an unknown host key, a
    /// host that does not answer).
    #[error("ssh to {host} failed ({status}): {message}")]
    Ssh {
        /// The host it was to reach.
        host: String,
        /// How ssh exited.
        status: std::process::ExitStatus,
        /// ssh's last lines on stderr.
        message: String,
    },
    /// A reply that is not valid SFTP.
    #[error("{op}: malformed reply: {source}")]
    Wire {
        /// The operation.
        op: &'static str,
        /// What was wrong.
        source: volley_proto::wire::Error,
    },
    /// A local file or process error.
    #[error("{what}: {source}")]
    Io {
        /// What was being done (paths in it as [`printable_bytes`] shows them).
        what: String,
        /// The error.
        source: io::Error,
    },
    /// A local path that cannot take part in the transfer (a directory, a FIFO).
    #[error("{path} {problem}")]
    Local {
        /// The path, as [`printable_bytes`] shows it.
        path: String,
        /// What is wrong with it.
        problem: String,
    },
    /// A download that ended before the size the server stated at its start (the
    /// remote file shrank, or the server lies); the partial copy was not kept (see
    /// [`TransferOptions::allow_shrink`](crate::TransferOptions::allow_shrink)).
    #[error(
        "{path}: the server stated {stated} bytes but the file ended at {got}; the short copy was discarded (allow a shrinking file to keep it)"
    )]
    Shrank {
        /// The remote path, as [`printable_bytes`] shows it.
        path: String,
        /// The size FSTAT gave at the start.
        stated: u64,
        /// Where end of file came.
        got: u64,
    },
    /// A transfer failed after bytes arrived: they are kept in the part file, for a
    /// transfer with [`TransferOptions::resume`](crate::TransferOptions::resume) to
    /// continue from.
    #[error("{source}; {kept} bytes kept in {part} to resume from")]
    Kept {
        /// The part file (a local path for a get, a remote one for a put), as
        /// [`printable_bytes`] shows it.
        part: String,
        /// Its length: the bytes it holds with no gap before them.
        kept: u64,
        /// Why the transfer stopped.
        source: Box<Self>,
    },
    /// A transfer ended with a different size than the server reported.
    #[error("{path}: transfer ended at {got} bytes, but {expected} were expected")]
    SizeMismatch {
        /// The remote path, as [`printable_bytes`] shows it.
        path: String,
        /// Bytes moved.
        got: u64,
        /// Bytes expected.
        expected: u64,
    },
}

/// `text` with every control character and backslash escaped (`\u{1b}`, `\u{0}`,
/// `\n`, `\\`), so a string a server sent cannot drive the terminal it is printed on,
/// nor two different strings print alike.
pub fn printable(text: &str) -> String {
    printable_bytes(text.as_bytes())
}

/// `bytes` as [`printable`] shows text, and each byte that is not UTF-8 as `\xff`: how
/// volley shows a name (SFTP names are bytes) in listings, progress and errors.
pub fn printable_bytes(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c.is_control() || c == '\\' {
                out.extend(c.escape_default());
            } else {
                out.push(c);
            }
        }
        for byte in chunk.invalid() {
            out.push_str(&format!("\\x{byte:02x}"));
        }
    }
    out
}

/// A local path as [`printable_bytes`] shows it.
pub(crate) fn shown_local(path: &std::path::Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    printable_bytes(path.as_os_str().as_bytes())
}
