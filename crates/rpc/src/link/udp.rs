//! The link over volley's reliable UDP channel ([`volley_transport_udp::channel`]): each
//! RPC message is one channel message (the head, then arguments and segments; the
//! segments are read straight into datagrams, not joined, once the message reaches
//! 4 KiB), received whole (copied once out of the datagrams) and sliced without a
//! further copy.

use bytes::Bytes;
use volley_transport_udp::channel::{
    ChannelConnection, ChannelError, ChannelReceiver, ChannelSender,
};

use super::{
    ConnectionInfo, LinkError, LinkReceiver, LinkSender, MAX_PREFIX, Message, MessageLink,
    TrySendError, Unsent,
};

/// An RPC link over a channel connection.
#[derive(Debug)]
pub struct UdpLink {
    connection: ChannelConnection,
}

/// The sending half of a [`UdpLink`].
#[derive(Clone, Debug)]
pub struct UdpSender {
    sender: ChannelSender,
}

/// The receiving half of a [`UdpLink`].
#[derive(Debug)]
pub struct UdpReceiver {
    receiver: ChannelReceiver,
}

impl UdpLink {
    /// A link over a connection from [`ChannelEndpoint::connect`] or
    /// [`ChannelEndpoint::accept`](volley_transport_udp::channel::ChannelEndpoint::accept).
    ///
    /// [`ChannelEndpoint::connect`]: volley_transport_udp::channel::ChannelEndpoint::connect
    pub fn new(connection: ChannelConnection) -> Self {
        Self { connection }
    }
}

impl MessageLink for UdpLink {
    type Sender = UdpSender;
    type Receiver = UdpReceiver;

    fn connection(&self) -> ConnectionInfo {
        ConnectionInfo::new().with_peer_addr(self.connection.peer_addr())
    }

    fn split(self) -> (UdpSender, UdpReceiver) {
        let (sender, receiver) = self.connection.split();
        (UdpSender { sender }, UdpReceiver { receiver })
    }
}

/// The message as the channel takes it: the head (and inline arguments) in `prefix`, of
/// the length given, then the arguments (empty if inline) and the segments; and what
/// rebuilds it if the channel gives the pieces back.
fn pieces(
    message: Message,
    prefix: &mut [u8; MAX_PREFIX],
) -> Result<(usize, Vec<Bytes>, Unsent), LinkError> {
    let laid = message.encode_prefix(prefix)?;
    let mut pieces = laid.segments;
    pieces.insert(0, laid.args);
    Ok((laid.len, pieces, laid.unsent))
}

fn lost(e: ChannelError) -> LinkError {
    LinkError::transport(e)
}

impl LinkSender for UdpSender {
    async fn send(&self, message: Message) -> Result<(), LinkError> {
        let mut prefix = [0u8; MAX_PREFIX];
        let (n, pieces, _) = pieces(message, &mut prefix)?;
        self.sender.send(&prefix[..n], &pieces).await.map_err(lost)
    }

    fn try_send(&self, message: Message) -> Result<(), TrySendError> {
        let mut prefix = [0u8; MAX_PREFIX];
        let (n, mut pieces, unsent) = pieces(message, &mut prefix).map_err(TrySendError::Failed)?;
        match self.sender.try_send(&prefix[..n], &pieces) {
            Ok(true) => Ok(()),
            Ok(false) => {
                let args = pieces.remove(0);
                Err(TrySendError::Full(unsent.message(args, pieces)))
            }
            Err(e) => Err(TrySendError::Failed(lost(e))),
        }
    }

    fn max_message(&self) -> usize {
        self.sender.max_message() as usize
    }

    fn close(&self) {
        self.sender.close();
    }
}

impl LinkReceiver for UdpReceiver {
    async fn recv(&mut self) -> Result<Message, LinkError> {
        Message::from_wire(&Bytes::from(self.receiver.recv().await.map_err(lost)?))
    }
}
