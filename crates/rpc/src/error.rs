//! The errors of calls, of making a connection, and of handlers.

use core::fmt;
use core::time::Duration;

use volley_proto::rpc::{CodecId, ErrorCode, Kind};

use crate::codec::CodecError;
use crate::link::LinkError;

/// Why a call failed. Each names the method called.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CallError {
    /// The peer already ran as many calls as its credit allows (a well-behaved caller
    /// waits for credit, so this means the peer's credit changed or a caller ignored it).
    #[error("rpc {method}: the peer is busy: {detail}")]
    Busy {
        /// The method called.
        method: &'static str,
        /// The peer's explanation.
        detail: String,
    },
    /// The peer does not serve this method (its build has no method with this id):
    /// known from its method table before anything was sent, or from its answer. Only
    /// this call fails.
    #[error("rpc {method}: the peer does not serve this method (id {id})")]
    Unimplemented {
        /// The method called.
        method: &'static str,
        /// Its id.
        id: u32,
    },
    /// The peer declares this method with other argument or result types (or as the
    /// other kind, sync or one-way): refused before anything was sent. Only this call
    /// fails.
    #[error(
        "rpc {method}: the peer declares this method with other types \
         (types fingerprint here {ours:#018x}, at the peer {theirs:#018x})"
    )]
    TypesDiffer {
        /// The method called.
        method: &'static str,
        /// This end's fingerprint of its types.
        ours: u64,
        /// The peer's.
        theirs: u64,
    },
    /// The call's metadata could not be sent: a key or the whole over its limit, or a
    /// peer that takes none. Nothing was sent.
    #[error("rpc {method}: cannot send the call's metadata: {problem}")]
    Metadata {
        /// The method called.
        method: &'static str,
        /// What is wrong.
        problem: String,
    },
    /// The peer's [`Router::authorize`](crate::Router::authorize) check refused this
    /// call (its per-call token, say); the handler did not run.
    #[error("rpc {method}: not authorised: {detail}")]
    Unauthorized {
        /// The method called.
        method: &'static str,
        /// The peer's explanation.
        detail: String,
    },
    /// The peer could not decode the arguments.
    #[error("rpc {method}: the peer could not decode the arguments: {detail}")]
    RemoteDecode {
        /// The method called.
        method: &'static str,
        /// The decoder's message.
        detail: String,
    },
    /// The handler returned an error.
    #[error("rpc {method}: the handler failed: {detail}")]
    Handler {
        /// The method called.
        method: &'static str,
        /// The handler's message.
        detail: String,
    },
    /// The handler panicked; the peer goes on serving.
    #[error("rpc {method}: the handler panicked: {detail}")]
    Panicked {
        /// The method called.
        method: &'static str,
        /// The panic's message.
        detail: String,
    },
    /// The call's deadline passed (here, or at the peer before its handler finished).
    #[error("rpc {method}: no reply within the deadline of {after:?}")]
    DeadlineExceeded {
        /// The method called.
        method: &'static str,
        /// The deadline.
        after: Duration,
    },
    /// A message over the receiver's largest size: refused before anything was sent
    /// (a call), or by the peer (a reply too large for us).
    #[error("rpc {method}: the message is {len} bytes, the receiver takes at most {max}")]
    TooLarge {
        /// The method called.
        method: &'static str,
        /// The message's size, head, arguments and segments.
        len: usize,
        /// The receiver's largest message.
        max: usize,
    },
    /// The peer is shutting down and took no new calls.
    #[error("rpc {method}: the peer is shutting down")]
    ShuttingDown {
        /// The method called.
        method: &'static str,
    },
    /// The arguments could not be encoded.
    #[error("rpc {method}: cannot encode the arguments: {source}")]
    Encode {
        /// The method called.
        method: &'static str,
        /// The codec's error.
        source: CodecError,
    },
    /// The reply could not be decoded.
    #[error("rpc {method}: cannot decode the reply: {source}")]
    DecodeReply {
        /// The method called.
        method: &'static str,
        /// The codec's error.
        source: CodecError,
    },
    /// An error reply with a code this version does not know.
    #[error("rpc {method}: the peer failed the call ({code}): {detail}")]
    Remote {
        /// The method called.
        method: &'static str,
        /// The code.
        code: ErrorCode,
        /// The peer's explanation.
        detail: String,
    },
    /// A [`Reconnecting`](crate::Reconnecting) client had no connection within the time
    /// the call could wait (its deadline): the call was never sent.
    #[error("rpc {method}: no connection to the server within {after:?} ({why})")]
    Unavailable {
        /// The method called.
        method: &'static str,
        /// How long the call waited.
        after: Duration,
        /// Why there was none: the last try's error.
        why: String,
    },
    /// The connection ended before the reply came. A [`Peer`](crate::Peer) does not
    /// reconnect; a [`Reconnecting`](crate::Reconnecting) client does, and fails with
    /// this only the calls that were in flight when the connection was lost.
    #[error("rpc {method}: the connection is lost {}: {cause}", if *.sent { "with the call in flight (it may have run)" } else { "before the call was sent" })]
    ConnectionLost {
        /// The method called.
        method: &'static str,
        /// Why the connection ended.
        cause: Ended,
        /// Whether the peer may have run the call: it had gone to the link, and the
        /// connection did not end in the peer's idle close (a peer closing as idle runs
        /// no call that arrives then).
        sent: bool,
    },
}

impl CallError {
    /// Whether the peer may have run the call: it failed after it was sent, on a lost
    /// connection or at a deadline, so it may or may not have run. Errors that say the
    /// call never ran, or ran and failed, are `false`.
    pub fn may_have_run(&self) -> bool {
        matches!(
            self,
            Self::ConnectionLost { sent: true, .. } | Self::DeadlineExceeded { .. }
        )
    }
}

/// Why a connection could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// Making the transport connection failed.
    #[error("cannot connect: {0}")]
    Io(#[from] std::io::Error),
    /// The link failed during the hello.
    #[error("rpc hello failed: {0}")]
    Link(#[from] LinkError),
    /// The peer's hello did not come in time.
    #[error("rpc hello: no hello from the peer within {0:?}")]
    Timeout(Duration),
    /// The peer's first message was not a hello.
    #[error("rpc hello: the peer's first message is a {0}, not a hello (is it an rpc peer?)")]
    NotHello(Kind),
    /// The peer's hello is malformed.
    #[error("rpc hello: {0}")]
    Malformed(volley_proto::wire::Error),
    /// The peer speaks another wire version.
    #[error("rpc hello: the peer speaks wire version {theirs}; this end speaks {ours}")]
    Version {
        /// Ours.
        ours: u16,
        /// The peer's.
        theirs: u16,
    },
    /// The peer serializes with another codec.
    #[error("rpc hello: the peer encodes with {theirs}; this end with {ours}")]
    Codec {
        /// Ours.
        ours: CodecId,
        /// The peer's.
        theirs: CodecId,
    },
    /// The peer serves another service than the one this end calls (or another
    /// definition of it).
    #[error(
        "rpc hello: the peer serves another service than the {service} this end calls (fingerprint {theirs:#018x}, ours {ours:#018x}): the two ends were built from different service definitions"
    )]
    Service {
        /// The name of the service this end calls.
        service: &'static str,
        /// Its fingerprint.
        ours: u64,
        /// The fingerprint of the service the peer serves.
        theirs: u64,
    },
    /// The peer's method table lists another service than the one this end calls.
    #[error("rpc hello: this end calls the service {calls}, the peer serves {serves}")]
    OtherService {
        /// The service this end calls.
        calls: &'static str,
        /// The service the peer serves.
        serves: String,
    },
    /// The peer calls (back) another service than the one this end serves.
    #[error(
        "rpc hello: the peer calls another service than the {service} this end serves (fingerprint {theirs:#018x}, ours {ours:#018x}): serve the service it calls, or call it with an endpoint of the service this end serves"
    )]
    CallsBack {
        /// The name of the service this end serves.
        service: &'static str,
        /// Its fingerprint.
        ours: u64,
        /// The fingerprint of the service the peer calls.
        theirs: u64,
    },
    /// The server refused this end's authentication token (missing or wrong), or, at a
    /// server, the peer's hello did not pass the check.
    #[error("unauthenticated")]
    Unauthenticated,
    /// A setting is out of range.
    #[error("rpc settings: {0}")]
    Config(#[from] crate::config::ConfigError),
    /// The server answered the connection with an error instead of a hello (it has no
    /// free connection slot, for example) and closed it.
    #[error("the server refused: {0}")]
    Refused(String),
}

/// A handler's failure, sent back to the caller as [`CallError::Handler`]. Any error
/// converts with `?`; [`HandlerError::msg`] makes one from text.
pub struct HandlerError {
    pub(crate) code: ErrorCode,
    pub(crate) message: String,
}

impl HandlerError {
    /// A failure with this message.
    pub fn msg(message: impl fmt::Display) -> Self {
        Self {
            code: ErrorCode::HANDLER,
            message: message.to_string(),
        }
    }

    /// The message sent to the caller.
    pub fn message(&self) -> &str {
        &self.message
    }

    pub(crate) fn with_code(code: ErrorCode, message: impl fmt::Display) -> Self {
        Self {
            code,
            message: message.to_string(),
        }
    }
}

impl<E: core::error::Error> From<E> for HandlerError {
    fn from(e: E) -> Self {
        Self::msg(e)
    }
}

impl fmt::Debug for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HandlerError({}: {})", self.code, self.message)
    }
}

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl CallError {
    /// The error an error reply stands for.
    pub(crate) fn from_reply(
        method: &'static str,
        id: u32,
        code: ErrorCode,
        detail: String,
    ) -> Self {
        match code {
            ErrorCode::BUSY => Self::Busy { method, detail },
            ErrorCode::UNKNOWN_METHOD => Self::Unimplemented { method, id },
            ErrorCode::UNAUTHENTICATED => Self::Unauthorized { method, detail },
            ErrorCode::DECODE => Self::RemoteDecode { method, detail },
            ErrorCode::HANDLER => Self::Handler { method, detail },
            ErrorCode::PANIC => Self::Panicked { method, detail },
            ErrorCode::SHUTTING_DOWN => Self::ShuttingDown { method },
            _ => Self::Remote {
                method,
                code,
                detail,
            },
        }
    }
}

/// Why a connection ended: its link failed, or one end ended it by policy (a peer that
/// floods or goes silent, an idle connection). A [`Peer`](crate::Peer)'s
/// [`closed`](crate::Peer::closed), and the cause in [`CallError::ConnectionLost`].
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Ended {
    /// The link failed, or the peer closed it.
    #[error(transparent)]
    Link(#[from] LinkError),
    /// The peer kept calling past the credit this end gave it without reading the
    /// answers, so the connection was dropped.
    #[error(
        "the peer made {0} calls past its credit whose busy answers it did not read; connection dropped"
    )]
    Flooded(usize),
    /// The peer answered no ping for three keep-alive intervals: it is gone, or cannot
    /// be reached.
    #[error("the peer went silent: no answer to pings for {0:?}; connection dropped")]
    Silent(Duration),
    /// Nothing was in flight either way for the idle timeout, so the connection was
    /// closed.
    #[error("the connection was idle for {0:?} with nothing in flight; closed")]
    Idle(Duration),
    /// The peer said it closed the connection because nothing was in flight either way
    /// for its idle timeout (the time given). Not a failure of the service: a
    /// [`Reconnecting`](crate::Reconnecting) client connects again at its next call.
    #[error("closed by the server after {} s idle", seconds(.0))]
    IdleClosed(Duration),
}

/// `d` in seconds as a person writes them: `120`, `0.5`, `1.25`.
fn seconds(d: &Duration) -> String {
    let text = format!("{:.3}", d.as_secs_f64());
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}
