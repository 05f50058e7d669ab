//! The reliable channel on a real UDP socket: one task per socket owns every peer's state
//! machine ([`volley_proto::channel::ChannelEndpoint`], peers told apart by connection id) and
//! moves datagrams with the batched I/O of [`datagrams`](crate::datagrams) (GSO/GRO).
//!
//! ```
//! use volley_transport_udp::channel::{ChannelConfig, ChannelEndpoint};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), volley_transport_udp::channel::ChannelError> {
//! let server = ChannelEndpoint::bind("127.0.0.1:0".parse().unwrap(), ChannelConfig::server()).await?;
//! let client = ChannelEndpoint::bind("127.0.0.1:0".parse().unwrap(), ChannelConfig::client()).await?;
//! let mut ours = client.connect(server.local_addr()).await?;
//! ours.send(b"ping", &[]).await?;
//! let mut theirs = server.accept().await?;
//! assert_eq!(theirs.recv().await?, b"ping");
//! # Ok(())
//! # }
//! ```
//!
//! Copies: on send, a message's segments are read straight into its datagrams (only a
//! message under 4 KiB is first joined into one buffer, which costs less than keeping its
//! pieces); on receive, what it does not do yet: each message is copied once out of the
//! datagrams into its own buffer.

use core::net::SocketAddr;
use core::time::Duration;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant as StdInstant;

use bytes::Bytes;
use tokio::net::UdpSocket;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use volley_proto::channel::{
    self as proto, ConnectionHandle, EndpointConfig, MESSAGE_COST, Payload, Pieces, chunk_in,
};

mod driver;
mod error;

use driver::Driver;
pub use error::{ChannelError, Ended};

/// Settings of a channel endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChannelConfig {
    /// The state machines' settings.
    pub endpoint: EndpointConfig,
    /// Socket buffer size to ask the kernel for, both ways; what it grants is read back
    /// and caps each connection's window.
    pub socket_buffer: usize,
    /// Messages each connection holds for its application before it stops taking more
    /// (the peer then waits on the window).
    pub queue: usize,
    /// How long [`ChannelEndpoint::connect`] waits for the handshake.
    pub connect_timeout: Duration,
    /// After traffic, keep polling the socket this long before sleeping (on a
    /// current-thread runtime only), as the TCP reader does: a reply read without a
    /// thread wake-up saves most of a loopback round trip. `None` sleeps at once.
    pub spin: Option<Duration>,
}

impl ChannelConfig {
    /// A client's defaults: 64 KiB datagrams (loopback), 8 MiB socket buffers.
    pub fn client() -> Self {
        let mut endpoint = EndpointConfig::default();
        endpoint.connection.max_datagram = 65_000;
        Self {
            endpoint,
            socket_buffer: 8 << 20,
            queue: 256,
            connect_timeout: Duration::from_secs(10),
            spin: Some(Duration::from_micros(250)),
        }
    }

    /// A server's defaults: the client's, accepting peers.
    pub fn server() -> Self {
        let mut config = Self::client();
        config.endpoint.accept = true;
        config
    }
}

enum Command {
    Connect(
        SocketAddr,
        oneshot::Sender<Result<ChannelConnection, ChannelError>>,
    ),
    Send(ConnectionHandle, Payload, OwnedSemaphorePermit),
}

/// Commands waiting for the driver at most; a sender waits (or `try_send` says no) past
/// it. Closes go on a queue of their own, one per connection at most, so a drop can
/// always close.
const COMMAND_QUEUE: usize = 1024;

/// A socket carrying channel connections; cheap to clone.
#[derive(Clone, Debug)]
pub struct ChannelEndpoint {
    commands: mpsc::Sender<Command>,
    accepted: Arc<tokio::sync::Mutex<mpsc::Receiver<ChannelConnection>>>,
    local_addr: SocketAddr,
    /// What the kernel granted for the socket's receive buffer.
    granted: usize,
}

/// One connection: send and receive whole messages. [`ChannelConnection::split`] gives
/// a cloneable sending half and a receiving half.
#[derive(Debug)]
pub struct ChannelConnection {
    sender: ChannelSender,
    receiver: ChannelReceiver,
    peer_addr: SocketAddr,
}

/// The sending half of a [`ChannelConnection`]; cheap to clone. The connection closes
/// when the last clone is dropped.
#[derive(Clone, Debug)]
pub struct ChannelSender {
    handle: ConnectionHandle,
    commands: mpsc::Sender<Command>,
    closes: mpsc::UnboundedSender<ConnectionHandle>,
    /// Bytes queued towards the driver and not yet taken by the state machine.
    budget: Arc<Semaphore>,
    max_message: u32,
    _close: Arc<CloseOnDrop>,
}

/// The receiving half of a [`ChannelConnection`].
#[derive(Debug)]
pub struct ChannelReceiver {
    messages: mpsc::Receiver<Result<Vec<u8>, ChannelError>>,
    /// Tells the driver the application took a message (room in the queue again).
    taken: Arc<Notify>,
}

#[derive(Debug)]
struct CloseOnDrop {
    handle: ConnectionHandle,
    closes: mpsc::UnboundedSender<ConnectionHandle>,
}

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        let _ = self.closes.send(self.handle);
    }
}

impl ChannelEndpoint {
    /// Binds `addr` and starts the driver task.
    pub async fn bind(addr: SocketAddr, config: ChannelConfig) -> Result<Self, ChannelError> {
        config
            .endpoint
            .connection
            .check()
            .map_err(ChannelError::Config)?;
        if config.queue == 0 {
            return Err(ChannelError::EmptyQueue);
        }
        let io_err = ChannelError::from;
        let socket = std::net::UdpSocket::bind(addr).map_err(io_err)?;
        socket.set_nonblocking(true).map_err(io_err)?;
        let sock = socket2::SockRef::from(&socket);
        let _ = sock.set_recv_buffer_size(config.socket_buffer);
        let _ = sock.set_send_buffer_size(config.socket_buffer);
        let granted = sock.recv_buffer_size().map_err(io_err)?;
        let socket = UdpSocket::from_std(socket).map_err(io_err)?;
        if !config.endpoint.accept {
            // A client learns at once that nothing listens. Not on servers: there a report
            // fails the next send whoever it is to, and many peers come and go.
            crate::datagrams::report_refusals(&socket);
        }
        let local_addr = socket.local_addr().map_err(io_err)?;
        // Closes are one per connection at most; accepted connections are peers of the
        // endpoint, so its peer cap bounds them, and the queue says so.
        let (commands, command_rx) = mpsc::channel(COMMAND_QUEUE);
        let (closes, close_rx) = mpsc::unbounded_channel();
        let (accept_tx, accept_rx) = mpsc::channel(config.endpoint.max_peers.max(1));
        let mut endpoint_config = config.endpoint;
        // A window the socket cannot hold would only be lost in the kernel.
        endpoint_config.connection.window = endpoint_config
            .connection
            .window
            .min(granted as u64)
            .max(u64::from(endpoint_config.connection.max_message));
        let driver = Driver {
            socket,
            endpoint: proto::ChannelEndpoint::new(endpoint_config, seed())?,
            config,
            epoch: StdInstant::now(),
            commands: command_rx,
            closes: close_rx,
            closes_tx: closes,
            accept: accept_tx,
            peers: BTreeMap::new(),
            connecting: BTreeMap::new(),
            self_commands: commands.downgrade(),
            taken: Arc::new(Notify::new()),
            connect_deadlines: Vec::new(),
            rotate_key_at: config.endpoint.accept.then(StdInstant::now),
        };
        tokio::spawn(async move {
            if let Err(e) = driver.run().await {
                tracing::error!("channel driver on {local_addr} stopped: {e}");
            }
        });
        Ok(Self {
            commands,
            accepted: Arc::new(tokio::sync::Mutex::new(accept_rx)),
            local_addr,
            granted,
        })
    }

    /// The address bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The receive buffer the kernel granted.
    pub fn socket_buffer(&self) -> usize {
        self.granted
    }

    /// Opens a connection to `addr` and waits for the handshake.
    pub async fn connect(&self, addr: SocketAddr) -> Result<ChannelConnection, ChannelError> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(Command::Connect(addr, tx))
            .await
            .map_err(|_| ChannelError::Closed(Ended::DriverStopped))?;
        rx.await
            .unwrap_or_else(|_| Err(ChannelError::Closed(Ended::DriverStopped)))
    }

    /// The next connection a peer opened (servers only).
    pub async fn accept(&self) -> Result<ChannelConnection, ChannelError> {
        self.accepted
            .lock()
            .await
            .recv()
            .await
            .ok_or(ChannelError::Closed(Ended::DriverStopped))
    }
}

impl ChannelConnection {
    /// Sends one message made of `head` then `segments` (see [`ChannelSender::send`]).
    pub async fn send(&self, head: &[u8], segments: &[Bytes]) -> Result<(), ChannelError> {
        self.sender.send(head, segments).await
    }

    /// The next message from the peer.
    pub async fn recv(&mut self) -> Result<Vec<u8>, ChannelError> {
        self.receiver.recv().await
    }

    /// The largest message the peer takes.
    pub fn max_message(&self) -> u32 {
        self.sender.max_message
    }

    /// The address the peer sends from.
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer_addr
    }

    /// Closes the connection.
    pub fn close(&self) {
        self.sender.close();
    }

    /// The two halves.
    pub fn split(self) -> (ChannelSender, ChannelReceiver) {
        (self.sender, self.receiver)
    }
}

impl ChannelSender {
    /// Sends one message made of `head` then `segments`, waiting while this connection
    /// has its send buffer's worth queued. The head is copied; the segments are shared
    /// (not copied) until the peer has acknowledged them, and read from straight into
    /// datagrams, unless the whole message is under 4 KiB (then it is joined into one
    /// buffer: cheaper than keeping its pieces).
    pub async fn send(&self, head: &[u8], segments: &[Bytes]) -> Result<(), ChannelError> {
        let (len, cost) = self.cost(head, segments)?;
        let permit = self
            .budget
            .clone()
            .acquire_many_owned(cost)
            .await
            .map_err(|_| ChannelError::Closed(Ended::Gone))?;
        let command = self.command(head, segments, len, permit);
        self.commands
            .send(command)
            .await
            .map_err(|_| ChannelError::Closed(Ended::DriverStopped))
    }

    /// [`ChannelSender::send`] if the send buffer has room now; `Ok(false)`, nothing
    /// sent, if it has not.
    pub fn try_send(&self, head: &[u8], segments: &[Bytes]) -> Result<bool, ChannelError> {
        let (len, cost) = self.cost(head, segments)?;
        let permit = match self.budget.clone().try_acquire_many_owned(cost) {
            Ok(permit) => permit,
            Err(tokio::sync::TryAcquireError::NoPermits) => return Ok(false),
            Err(tokio::sync::TryAcquireError::Closed) => {
                return Err(ChannelError::Closed(Ended::Gone));
            }
        };
        match self
            .commands
            .try_send(self.command(head, segments, len, permit))
        {
            Ok(()) => Ok(true),
            // The permit goes back with the command.
            Err(mpsc::error::TrySendError::Full(_)) => Ok(false),
            Err(mpsc::error::TrySendError::Closed(_)) => {
                Err(ChannelError::Closed(Ended::DriverStopped))
            }
        }
    }

    /// A message's length, checked against the peer's limit, and its cost of the send
    /// buffer.
    fn cost(&self, head: &[u8], segments: &[Bytes]) -> Result<(usize, u32), ChannelError> {
        let len = head.len() + segments.iter().map(Bytes::len).sum::<usize>();
        if len as u64 > u64::from(self.max_message) {
            return Err(ChannelError::TooLarge {
                len,
                max: self.max_message,
            });
        }
        // Even an empty message costs its bookkeeping, so the commands queued towards
        // the driver hold at most about the send buffer's worth of memory.
        let cost = len.max(MESSAGE_COST as usize);
        Ok((len, u32::try_from(cost).unwrap_or(u32::MAX)))
    }

    /// The command that sends `head` then `segments`, holding `permit` of the budget.
    fn command(
        &self,
        head: &[u8],
        segments: &[Bytes],
        len: usize,
        permit: OwnedSemaphorePermit,
    ) -> Command {
        let message = if len < JOIN_BELOW || segments.is_empty() {
            let mut joined = Vec::with_capacity(len);
            joined.extend_from_slice(head);
            for s in segments {
                joined.extend_from_slice(s);
            }
            Payload::Buffer(joined)
        } else {
            Payload::pieces(Segments {
                head: head.to_vec(),
                segments: segments.to_vec(),
                len,
            })
        };
        Command::Send(self.handle, message, permit)
    }

    /// The largest message the peer takes.
    pub fn max_message(&self) -> u32 {
        self.max_message
    }

    /// Closes the connection: queued messages go first, then a close.
    pub fn close(&self) {
        let _ = self.closes.send(self.handle);
    }
}

impl ChannelReceiver {
    /// The next message from the peer; an error once the connection has ended.
    pub async fn recv(&mut self) -> Result<Vec<u8>, ChannelError> {
        let message = self
            .messages
            .recv()
            .await
            .unwrap_or(Err(ChannelError::Closed(Ended::DriverStopped)));
        self.taken.notify_one();
        message
    }
}

/// Messages shorter than this are joined into one buffer on send.
const JOIN_BELOW: usize = 4096;

/// A message's head (copied) and segments (shared), read by the state machine piece by
/// piece.
struct Segments {
    head: Vec<u8>,
    segments: Vec<Bytes>,
    len: usize,
}

impl Pieces for Segments {
    fn total_len(&self) -> usize {
        self.len
    }

    fn chunk(&self, offset: usize) -> &[u8] {
        let segments = self.segments.iter().map(|s| &s[..]);
        chunk_in(core::iter::once(&self.head[..]).chain(segments), offset)
    }
}

/// Randomness for connection ids, from the OS.
fn seed() -> u64 {
    rand::random()
}
