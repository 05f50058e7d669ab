//! What can go wrong with an SCP operation, said so that a user can act on it.

use core::net::SocketAddr;
use std::io;

use volley_proto::scp::sdp::Address;
use volley_proto::scp::{Command, ReturnCode};

/// Why no reply came to a request that timed out, as far as the client can tell.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoReply {
    /// Nothing came back at all.
    Silence,
    /// The board answered with a retry code every time (or some of the times).
    Busy {
        /// The last such code.
        code: ReturnCode,
        /// How many busy replies came.
        replies: u32,
        /// How many times the request was sent.
        tries: u32,
    },
    /// The kernel reported the board's port closed (ICMP port unreachable), this many
    /// times during the operation.
    Refused {
        /// Reports seen.
        reports: u64,
    },
    /// Datagrams came back that were not SCP replies.
    Garbage {
        /// How many.
        replies: u64,
        /// Why the first one did not parse.
        first: volley_proto::wire::Error,
    },
}

impl core::fmt::Display for NoReply {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Silence => f.write_str("no reply"),
            Self::Busy {
                code,
                replies,
                tries,
            } if replies >= tries => write!(f, "board busy ({code}) for all {tries} tries"),
            Self::Busy {
                code,
                replies,
                tries,
            } => write!(f, "board busy ({code}) for {replies} of {tries} tries"),
            Self::Refused { reports } => write!(
                f,
                "connection refused ({reports} ICMP port-unreachable reports: nothing listens there)"
            ),
            Self::Garbage { replies, first } => {
                write!(f, "{replies} replies that did not parse: {first}")
            }
        }
    }
}

/// Why an SCP operation failed.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum ScpError {
    /// The board answered with a return code that is not retried.
    #[error("{cmd} to chip {chip} at {address:#010x} failed: {rc}")]
    Rc {
        /// The return code.
        rc: ReturnCode,
        /// The command.
        cmd: Command,
        /// The chip and core.
        chip: Address,
        /// The address of the failing chunk.
        address: u32,
    },
    /// No reply after every try.
    #[error(
        "{cmd} to chip {chip} at {address:#010x} timed out after {tries} tries ({elapsed_ms} ms): {why}"
    )]
    Timeout {
        /// The command.
        cmd: Command,
        /// The chip and core.
        chip: Address,
        /// The address of the chunk that got no reply.
        address: u32,
        /// How many times it was sent.
        tries: u32,
        /// Milliseconds from its first send to giving up.
        elapsed_ms: u64,
        /// What came back instead of a reply.
        why: NoReply,
    },
    /// Nothing listens at the board's address: the kernel reported the port closed
    /// (ICMP port unreachable) before the board ever answered.
    #[error("connection refused: nothing is listening at {peer}")]
    Refused {
        /// The address.
        peer: SocketAddr,
    },
    /// The reader behind an [`Op::WriteFrom`](super::Op::WriteFrom) failed, or ended early.
    #[error("cannot read the data to write: {0}")]
    Source(#[source] io::Error),
    /// A read reply carried the wrong number of bytes.
    #[error("read from chip {chip} at {address:#010x} returned {got} bytes, expected {expected}")]
    ReadLength {
        /// The chip and core.
        chip: Address,
        /// The chunk's address.
        address: u32,
        /// Bytes asked for.
        expected: usize,
        /// Bytes returned.
        got: usize,
    },
    /// An argument the protocol cannot carry.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A setting out of its range, from [`ScpConfig::check`](crate::ScpConfig::check).
    #[error("invalid argument: {0}")]
    Config(#[from] ConfigError),
    /// A reply or request that could not be encoded or decoded.
    #[error("SCP packet error: {0}")]
    Wire(#[from] volley_proto::wire::Error),
    /// The TCP connection to the emulator closed.
    #[error("the board closed the TCP connection")]
    Closed,
    /// A socket error.
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
}

/// An [`ScpConfig`](crate::ScpConfig) the client cannot honour: which setting, its value,
/// and the range it must be in.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The window's settings (its size, tries, timeouts).
    #[error("{0}")]
    Window(#[from] volley_proto::scp::window::ConfigError),
    /// A spin over a second.
    #[error("a spin of {0:?} is over a second")]
    Spin(core::time::Duration),
}
