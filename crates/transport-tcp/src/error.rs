//! [`Error`]: why a frame could not be sent or a reply did not come.

use core::time::Duration;
use std::io;

/// Why a call failed. Cloneable: one failure of the connection reaches every waiter.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The peer closed the stream.
    #[error("the peer closed the connection")]
    Closed,
    /// The listener's memory for queued frames was used up, and this connection held the
    /// most of it (its peer was not reading what it was sent).
    #[error(
        "the server's memory for queued frames is exhausted; this connection held {held} bytes"
    )]
    MemoryExhausted {
        /// Bytes of memory its queued frames held.
        held: u64,
    },
    /// This side closed the connection.
    #[error("the connection was closed")]
    Shutdown,
    /// The stream failed.
    #[error("connection I/O error: {message}")]
    Io {
        /// The kind of error.
        kind: io::ErrorKind,
        /// Its text.
        message: String,
    },
    /// The peer sent bytes that are not a frame; the stream cannot be trusted after it.
    #[error("the peer sent a malformed frame: {0}")]
    Protocol(#[source] volley_proto::wire::Error),
    /// The peer's first bytes are a TLS record, not a frame: it speaks TLS on a stream
    /// that expects frames (checked only for a first frame held to
    /// [`Config::first_frame_max`](crate::Config::first_frame_max)).
    #[error("the peer speaks TLS (its first bytes are a TLS record, not a frame)")]
    PeerSpeaksTls,
    /// A request too large to frame.
    #[error("request of {len} bytes exceeds the {max}-byte frame limit")]
    TooLarge {
        /// Frame length asked for.
        len: u64,
        /// The limit.
        max: u64,
    },
    /// `send_with_id` with an id already outstanding.
    #[error("request id {0} is already outstanding")]
    IdInUse(u32),
    /// `recv` on a pipeline with nothing outstanding.
    #[error("no request outstanding to wait for")]
    NothingOutstanding,
    /// A deadline passed.
    #[error("timed out after {after:?} waiting for {what}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// The deadline.
        after: Duration,
    },
}

impl From<io::Error> for Error {
    /// A broken pipe or a reset is the peer having gone away: [`Error::Closed`].
    fn from(e: io::Error) -> Self {
        match e.kind() {
            io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset => Self::Closed,
            kind => Self::Io {
                kind,
                message: e.to_string(),
            },
        }
    }
}
