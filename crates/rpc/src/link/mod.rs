//! [`MessageLink`]: the seam between RPC and a transport. A link moves messages (a small
//! head, the serialized arguments as a [`Payload`], held in the message when small, and
//! bulk segments as `Bytes`) in order, with backpressure on send; it knows nothing of
//! calls. RPC owns the call bookkeeping.
//!
//! Links provided: [`framed`] over transport-tcp's framed layer (TCP and Unix sockets,
//! any byte stream), [`udp`] over volley's reliable UDP channel, and [`local`] between
//! two tasks in one process (messages pass by value: nothing encoded, nothing copied).

use std::sync::Arc;

use bytes::Bytes;
use volley_proto::rpc::{self, Head, Kind};

#[cfg(feature = "tcp")]
pub mod framed;
mod payload;
pub use payload::{INLINE, Payload};
#[cfg(feature = "local")]
pub mod local;
#[cfg(feature = "quic")]
pub mod quic;
#[cfg(feature = "tls")]
pub mod tls;
#[cfg(feature = "udp")]
pub mod udp;

/// How long the reader keeps polling for the peer's next message before it sleeps
/// (transport-tcp's `Config::spin`; the in-process link's reader too): a reply that comes
/// within it skips the thread's wake-up, most of a loopback round trip. Sequential calls
/// need little; callers pipelining on one connection need long enough to cover the gap
/// between batches, or each end sleeps between them. The cost is up to this much CPU
/// after each burst of traffic, per connection.
#[cfg(any(feature = "tcp", feature = "local"))]
pub(crate) const SPIN: core::time::Duration = core::time::Duration::from_micros(250);

/// Polls of the in-process link's spin per offer of the CPU to other threads, as
/// transport-tcp's reader has it: each offer is a system call, and never offering would
/// starve a peer that shares this CPU.
#[cfg(feature = "local")]
pub(crate) const YIELD_THREAD_EVERY: u32 = 4;

/// One RPC message as links move it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// Kind, call id, method or error code, deadline.
    pub head: Head,
    /// The serialized arguments, result or error text (inline when small).
    pub args: Payload,
    /// Bulk segments, carried beside the arguments uncopied.
    pub segments: Vec<Bytes>,
}

impl Message {
    /// A message with no bulk segments.
    pub fn new(kind: Kind, call_id: u32, method: u32, args: impl Into<Payload>) -> Self {
        Self {
            head: Head {
                kind,
                call_id,
                method,
                deadline_us: None,
                metadata: false,
            },
            args: args.into(),
            segments: Vec::new(),
        }
    }

    /// Bytes the message takes on a wire: head, arguments and segments.
    pub fn wire_len(&self) -> usize {
        self.head.buffer_len(self.segments.len())
            + self.args.len()
            + self.segments.iter().map(Bytes::len).sum::<usize>()
    }
}

/// The largest encoded head: fixed part, deadline, a full segment table. A link that
/// carries messages as bytes encodes each head into a buffer of this size
/// ([`Message::into_wire`]).
pub const MAX_HEAD: usize = rpc::FIXED_LEN + rpc::DEADLINE_LEN + 4 * rpc::MAX_SEGMENTS;

/// Room for the largest head and inline arguments after it
/// ([`Message::encode_prefix`]).
pub const MAX_PREFIX: usize = MAX_HEAD + INLINE;

/// A message laid out by [`Message::encode_prefix`]: its first `len` bytes are in the
/// caller's buffer, the rest are `args` and then `segments`.
#[derive(Debug)]
pub struct Prefixed {
    /// Bytes of the buffer written: the head, and the arguments if inline.
    pub len: usize,
    /// The arguments still to write after those (empty if they were inline).
    pub args: Bytes,
    /// The bulk segments, after the arguments.
    pub segments: Vec<Bytes>,
    /// What rebuilds the message if the link gives the pieces back unsent.
    pub unsent: Unsent,
}

/// What [`Prefixed`] keeps of its message beside the pieces: its head and inline
/// arguments.
#[derive(Debug)]
pub struct Unsent {
    head: Head,
    inline: Option<Payload>,
}

impl Unsent {
    /// The message again, from the `args` and `segments` of its [`Prefixed`] that a
    /// transport handed back unsent.
    pub fn message(self, args: Bytes, segments: Vec<Bytes>) -> Message {
        Message {
            head: self.head,
            args: self.inline.unwrap_or_else(|| args.into()),
            segments,
        }
    }
}

impl Message {
    /// Encodes the head into `head` (returning its length) and gives the pieces that
    /// follow it on the wire: the arguments, then the segments, uncopied (arguments held
    /// inline are copied into new `Bytes`, an allocation that
    /// [`encode_prefix`](Self::encode_prefix) avoids). For links that carry a message as
    /// bytes: the head and the pieces, in order, are the message, and
    /// [`Message::from_wire`] reads it back.
    pub fn into_wire(self, head: &mut [u8; MAX_HEAD]) -> Result<(usize, Vec<Bytes>), LinkError> {
        let n = self
            .head
            .emit(self.args.len(), self.segments.iter().map(Bytes::len), head)?;
        let mut pieces = self.segments;
        pieces.insert(0, self.args.into_bytes());
        Ok((n, pieces))
    }

    /// Encodes the head into `buf`, returning its length: what goes on a wire before the
    /// arguments and then the segments.
    pub fn emit_head(&self, buf: &mut [u8; MAX_HEAD]) -> Result<usize, LinkError> {
        Ok(self
            .head
            .emit(self.args.len(), self.segments.iter().map(Bytes::len), buf)?)
    }

    /// Lays the message out for a link that writes bytes: the head, followed by the
    /// arguments if they are held inline, into `buf` (the first [`Prefixed::len`] bytes);
    /// then [`Prefixed::args`] (empty if inline) and [`Prefixed::segments`], uncopied.
    /// The same bytes as [`emit_head`](Self::emit_head) and then the arguments,
    /// without allocating for small arguments. A link that is given the pieces back
    /// unsent rebuilds the message with [`Unsent::message`].
    pub fn encode_prefix(self, buf: &mut [u8; MAX_PREFIX]) -> Result<Prefixed, LinkError> {
        let head: &mut [u8; MAX_HEAD] = buf.first_chunk_mut().expect("MAX_PREFIX is past MAX_HEAD");
        let mut len = self.emit_head(head)?;
        let inline = self.args.inline().is_some();
        if let Some(bytes) = self.args.inline() {
            buf[len..len + bytes.len()].copy_from_slice(bytes);
            len += bytes.len();
        }
        let unsent = Unsent {
            head: self.head,
            inline: inline.then(|| self.args.clone()),
        };
        Ok(Prefixed {
            len,
            args: if inline {
                Bytes::new()
            } else {
                self.args.into_bytes()
            },
            segments: self.segments,
            unsent,
        })
    }

    /// Parses a whole message from `bytes` (what [`Message::into_wire`] gave, joined),
    /// arguments and segments as slices of them, every length checked first.
    pub fn from_wire(bytes: &Bytes) -> Result<Self, LinkError> {
        let parsed = rpc::Message::parse(bytes)?;
        Ok(Self {
            head: parsed.head,
            args: bytes.slice(parsed.args_range()).into(),
            segments: parsed.segments().map(|r| bytes.slice(r)).collect(),
        })
    }
}

/// Why a link failed: the transport, or bytes that are not RPC. Why a connection ended
/// (a link that failed, or a policy of either end) is [`Ended`](crate::Ended).
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LinkError {
    /// The peer closed the link.
    #[error("the peer closed the connection")]
    Closed,
    /// The transport under the link failed; its own error is the source (a
    /// transport-tcp `Error`, a UDP `ChannelError`, or whatever a link of another crate
    /// gives [`LinkError::transport`]).
    #[error("{source}")]
    Transport {
        /// The transport's error.
        source: Arc<dyn core::error::Error + Send + Sync>,
    },
    /// The peer sent bytes that are not an RPC message.
    #[error("the peer sent a malformed rpc message: {0}")]
    Malformed(#[from] volley_proto::wire::Error),
    /// The peer's first bytes are a TLS record: it speaks TLS, this end does not.
    #[error("the peer speaks TLS (its first bytes are a TLS record, not an rpc hello)")]
    PeerSpeaksTls,
    /// The peer sent a frame that is not RPC.
    #[error("the peer sent a frame of type {0:#04x}, not an rpc message")]
    NotRpc(u8),
}

impl LinkError {
    /// A transport's failure, for a link of any crate: `error` is kept as the source.
    pub fn transport(error: impl core::error::Error + Send + Sync + 'static) -> Self {
        Self::Transport {
            source: Arc::new(error),
        }
    }
}

#[cfg(feature = "tcp")]
impl From<volley_transport_tcp::Error> for LinkError {
    fn from(error: volley_transport_tcp::Error) -> Self {
        match error {
            volley_transport_tcp::Error::PeerSpeaksTls => Self::PeerSpeaksTls,
            error => Self::transport(error),
        }
    }
}

/// A bidirectional message link, split into its two halves when a connection starts.
pub trait MessageLink: Send + 'static {
    /// The sending half.
    type Sender: LinkSender;
    /// The receiving half.
    type Receiver: LinkReceiver;

    /// Splits the link.
    fn split(self) -> (Self::Sender, Self::Receiver);

    /// Sets the largest message either way to `max`, before the first message after the
    /// hello: an [`Endpoint`](crate::Endpoint) calls it with its `Config::max_message`
    /// when a connection starts, so the size is set in one place. A link with a limit of
    /// its own that it cannot change keeps it (the default does nothing): the endpoint then
    /// offers the smaller of the two ([`LinkSender::max_message`]).
    fn limit_message(&mut self, max: usize) {
        let _ = max;
    }

    /// What is known of the connection (the peer's address), read before the split and
    /// given to handlers through `Call::connection`. Nothing by default.
    fn connection(&self) -> ConnectionInfo {
        ConnectionInfo::default()
    }
}

/// What is known of a connection: the peer's address where the link has one, and what
/// TLS says of the peer. More may be added, so it is built with [`ConnectionInfo::new`]
/// and its `with_` methods.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConnectionInfo {
    /// The address the peer connects from (TCP, UDP); `None` for a Unix socket or an
    /// in-process link.
    pub peer_addr: Option<core::net::SocketAddr>,
    /// The peer's TLS identity; `None` when the link is not TLS.
    pub tls: Option<TlsIdentity>,
}

/// What a TLS handshake established about the peer (feature `tls` fills it in).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TlsIdentity {
    /// The peer's own (leaf) certificate in DER, checked against the trusted roots;
    /// `None` if it presented none (a client where the server asks for no certificate).
    pub certificate: Option<Bytes>,
    /// The DNS names among the certificate's subject alternative names.
    pub dns_names: Vec<String>,
    /// The URI names among them (a SPIFFE id, for example).
    pub uri_names: Vec<String>,
    /// The IP addresses among them.
    pub ip_addresses: Vec<core::net::IpAddr>,
    /// The TLS version negotiated ("TLSv1_3").
    pub version: String,
}

impl ConnectionInfo {
    /// Nothing known yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// With the peer's address.
    #[must_use]
    pub fn with_peer_addr(mut self, addr: core::net::SocketAddr) -> Self {
        self.peer_addr = Some(addr);
        self
    }

    /// With the peer's TLS identity.
    #[must_use]
    pub fn with_tls(mut self, identity: TlsIdentity) -> Self {
        self.tls = Some(identity);
        self
    }
}

/// Sends messages; cheap to clone, shared by every caller and handler on a connection.
pub trait LinkSender: Clone + Send + Sync + 'static {
    /// Queues a message, waiting while the link is at capacity (backpressure lives here).
    fn send(&self, message: Message) -> impl Future<Output = Result<(), LinkError>> + Send;

    /// Queues a message if the link has room now, without waiting, or gives it back in
    /// [`TrySendError::Full`]. Every message a connection sends tries this first and
    /// waits in [`send`](Self::send) (through a box) only when it is given back, so a link
    /// that implements it takes the path the built-in links take. By default it always
    /// gives the message back.
    fn try_send(&self, message: Message) -> Result<(), TrySendError> {
        Err(TrySendError::Full(message))
    }

    /// The largest message (as [`Message::wire_len`]) this link carries.
    fn max_message(&self) -> usize;

    /// Ends the link both ways: what is queued goes out (within a bound the link sets, so
    /// a peer that never reads cannot hold it open), the peer sees the link close, and
    /// nothing more is read from it.
    fn close(&self);
}

/// Why [`LinkSender::try_send`] did not queue a message.
#[derive(Debug)]
pub enum TrySendError {
    /// The link is at capacity: the message, to send by waiting.
    Full(Message),
    /// The link cannot send it (it has ended, or the message is too large for it).
    Failed(LinkError),
}

impl Message {
    /// Puts a message back together from its head and the pieces
    /// [`Message::into_wire`] gave (the arguments, then the segments), for a link whose
    /// transport handed the pieces back unsent.
    pub fn from_pieces(head: Head, mut pieces: Vec<Bytes>) -> Self {
        let args = if pieces.is_empty() {
            Payload::new()
        } else {
            pieces.remove(0).into()
        };
        Self {
            head,
            args,
            segments: pieces,
        }
    }
}

/// Receives messages in the order sent; owned by one task.
pub trait LinkReceiver: Send + 'static {
    /// The next message; an error once the link has ended.
    fn recv(&mut self) -> impl Future<Output = Result<Message, LinkError>> + Send;
}
