//! What the channel's calls fail with: [`ChannelError`], and [`Ended`], why a
//! connection ended.

use core::net::SocketAddr;
use core::time::Duration;
use std::io;

use volley_proto::channel::{Closed, ConfigError};

/// Why a channel call failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChannelError {
    /// The socket failed: the kind and text of the system's error.
    #[error("channel socket: {message}")]
    Io {
        /// The error's kind, as the system gave it.
        kind: io::ErrorKind,
        /// What it said.
        message: String,
    },
    /// The kernel reported the peer's port closed (an ICMP port unreachable) while the
    /// connection was still connecting (client endpoints only: see
    /// [`report_refusals`](crate::datagrams::report_refusals)).
    #[error("connection refused: nothing listens on UDP {addr}")]
    Refused {
        /// Whom.
        addr: SocketAddr,
    },
    /// The handshake did not finish in time.
    #[error("no answer from {addr} within {after:?}")]
    ConnectTimeout {
        /// Whom.
        addr: SocketAddr,
        /// How long it waited.
        after: Duration,
    },
    /// The connection ended, and why.
    #[error("the channel connection ended: {0}")]
    Closed(Ended),
    /// The message is larger than the peer takes.
    #[error("message of {len} bytes; the peer takes at most {max}")]
    TooLarge {
        /// Its length.
        len: usize,
        /// The largest allowed.
        max: u32,
    },
    /// The connection settings are out of range.
    #[error("channel settings: {0}")]
    Config(#[from] ConfigError),
    /// The queue of messages the application has not taken holds none.
    #[error("channel settings: queue must hold at least one message")]
    EmptyQueue,
}

/// Why a connection ended, as [`ChannelError::Closed`] carries it.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ended {
    /// Its state machine closed it: this end, the peer (with its code and reason), the
    /// peer's silence, or a breach of the protocol.
    Connection(Closed),
    /// The endpoint's driver task has stopped.
    DriverStopped,
    /// The endpoint already holds as many peers as it takes.
    TooManyPeers,
    /// The connection had ended when this call came (the reason went to its receiver).
    Gone,
}

impl core::fmt::Display for Ended {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Connection(Closed::Local) => f.write_str("closed by this end"),
            Self::Connection(Closed::Peer { code, reason }) => write!(
                f,
                "closed by the peer (code {code}: {})",
                String::from_utf8_lossy(reason)
            ),
            Self::Connection(Closed::TimedOut) => f.write_str("the peer went silent"),
            Self::Connection(Closed::Protocol(e)) => {
                write!(f, "the peer broke the protocol: {e}")
            }
            Self::DriverStopped => f.write_str("the channel driver stopped"),
            Self::TooManyPeers => f.write_str("too many peers"),
            Self::Gone => f.write_str("the connection ended"),
        }
    }
}

impl From<io::Error> for ChannelError {
    fn from(e: io::Error) -> Self {
        Self::Io {
            kind: e.kind(),
            message: e.to_string(),
        }
    }
}
