//! The link over transport-tcp's framed layer: each RPC message is the body of one frame
//! of type [`FRAME_TYPE`], its bulk segments written after the head in the same vectored
//! write and received as slices of the read buffer. Works over TCP, Unix sockets and any
//! byte stream [`Framed`] runs on.

use core::net::SocketAddr;
use core::time::Duration;
use std::io;
use std::path::Path;

use volley_proto::rpc::MAX_HELLO_FRAME;
use volley_proto::wire::frame;
use volley_transport_tcp::{Config, Framed, Role, TrySendError as FramedTrySend, Unsolicited};

use super::{
    ConnectionInfo, LinkError, LinkReceiver, LinkSender, MAX_PREFIX, Message, MessageLink,
    Prefixed, TrySendError,
};

/// The frame type RPC messages travel in (`'R'`).
pub const FRAME_TYPE: u8 = 0x52;

/// The largest RPC message by default: 16 MiB.
pub const DEFAULT_MAX_MESSAGE: usize = 16 << 20;

use super::SPIN;

/// Framed-layer settings for RPC: frames up to [`DEFAULT_MAX_MESSAGE`] plus the frame
/// header until the endpoint sets its own `Config::max_message` before the hello (the
/// first frame, the hello, at most [`MAX_HELLO_FRAME`]), a write budget of twice the
/// default (a larger message costs the whole budget, so it never waits behind itself), the reader spinning for 250 µs after
/// traffic, at most 32 frames a write, and no idle timeout at this layer (RPC keeps its
/// own, which knows whether calls are in flight).
pub fn config(role: Role) -> Config {
    Config {
        spin: Some(SPIN),
        max_frame_len: DEFAULT_MAX_MESSAGE + frame::HEADER_LEN,
        write_budget: 2 * DEFAULT_MAX_MESSAGE,
        // Measured with the rpc suite: 64 KiB reads beat 256 KiB ones by a fifth on 1 MiB
        // calls over loopback (32 KiB was no better).
        read_chunk: 64 * 1024,
        // With many calls in flight, writing them in parts keeps both ends busy at once
        // (see `Config::write_batch`); measured best at 32 frames with 16 to 256 calls
        // in flight (the commit that set it has the figures).
        write_batch: 32,
        first_frame_max: Some(MAX_HELLO_FRAME),
        linger: Duration::from_secs(1),
        role,
        ..Config::default()
    }
}

/// An RPC link over a framed connection.
#[derive(Debug)]
pub struct FramedLink {
    framed: Framed,
    incoming: Unsolicited,
    connection: ConnectionInfo,
}

/// The sending half of a [`FramedLink`].
#[derive(Clone, Debug)]
pub struct FramedSender {
    framed: Framed,
    max_message: usize,
}

/// The receiving half of a [`FramedLink`].
#[derive(Debug)]
pub struct FramedReceiver {
    incoming: Unsolicited,
}

impl FramedLink {
    /// A link over a framed connection already made (RPC then owns its incoming frames).
    pub fn new(framed: Framed, incoming: Unsolicited) -> Self {
        Self {
            framed,
            incoming,
            connection: ConnectionInfo::default(),
        }
    }

    /// The same link, its peer at `addr` (as handlers see it in `Call::connection`).
    #[must_use]
    pub fn with_peer_addr(mut self, addr: SocketAddr) -> Self {
        self.connection = self.connection.with_peer_addr(addr);
        self
    }

    /// The same link, with `connection` as what handlers learn of it.
    #[must_use]
    pub fn with_connection(mut self, connection: ConnectionInfo) -> Self {
        self.connection = connection;
        self
    }

    /// Connects over TCP to `addr` with [`config`]'s settings.
    pub async fn connect_tcp(addr: SocketAddr) -> io::Result<Self> {
        let (framed, incoming) = Framed::connect_tcp(addr, config(Role::Initiator)).await?;
        Ok(Self::new(framed, incoming).with_peer_addr(addr))
    }

    /// Connects to a Unix socket with [`config`]'s settings.
    pub async fn connect_unix(path: impl AsRef<Path>) -> io::Result<Self> {
        let (framed, incoming) = Framed::connect_unix(path, config(Role::Initiator)).await?;
        Ok(Self::new(framed, incoming))
    }

    /// The framed connection underneath (for its statistics).
    pub fn framed(&self) -> &Framed {
        &self.framed
    }
}

impl MessageLink for FramedLink {
    type Sender = FramedSender;
    type Receiver = FramedReceiver;

    fn connection(&self) -> ConnectionInfo {
        self.connection.clone()
    }

    fn limit_message(&mut self, max: usize) {
        self.framed
            .set_max_frame_len(max.saturating_add(frame::HEADER_LEN));
    }

    fn split(self) -> (FramedSender, FramedReceiver) {
        let max_message = self.framed.config().max_frame_len - frame::HEADER_LEN;
        (
            FramedSender {
                framed: self.framed,
                max_message,
            },
            FramedReceiver {
                incoming: self.incoming,
            },
        )
    }
}

impl FramedSender {
    /// The framed connection underneath.
    pub fn framed(&self) -> &Framed {
        &self.framed
    }
}

impl LinkSender for FramedSender {
    async fn send(&self, message: Message) -> Result<(), LinkError> {
        let mut prefix = [0u8; MAX_PREFIX];
        let laid = message.encode_prefix(&mut prefix)?;
        self.framed
            .send_parts(FRAME_TYPE, 0, &prefix[..laid.len], laid.args, laid.segments)
            .await?;
        Ok(())
    }

    fn try_send(&self, message: Message) -> Result<(), TrySendError> {
        let mut prefix = [0u8; MAX_PREFIX];
        let Prefixed {
            len,
            args,
            segments,
            unsent,
        } = message
            .encode_prefix(&mut prefix)
            .map_err(TrySendError::Failed)?;
        self.framed
            .try_send_parts(FRAME_TYPE, 0, &prefix[..len], args, segments)
            .map_err(|e| match e {
                FramedTrySend::Full((args, segments)) => {
                    TrySendError::Full(unsent.message(args, segments))
                }
                FramedTrySend::Failed(e) => TrySendError::Failed(e.into()),
            })
    }

    fn max_message(&self) -> usize {
        self.max_message
    }

    fn close(&self) {
        self.framed.close_both();
    }
}

impl LinkReceiver for FramedReceiver {
    async fn recv(&mut self) -> Result<Message, LinkError> {
        let frame = match self.incoming.recv().await {
            Ok(frame) => frame,
            Err(volley_transport_tcp::Error::Closed) => return Err(LinkError::Closed),
            Err(e) => return Err(e.into()),
        };
        if frame.ty != FRAME_TYPE {
            return Err(LinkError::NotRpc(frame.ty));
        }
        Message::from_wire(&frame.body)
    }
}
