//! The reliable channel on a real UDP socket: one task per socket owns every peer's state
//! machine ([`volley_proto::channel::Endpoint`], peers told apart by connection id) and
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
use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::sync::Arc;
use std::time::Instant as StdInstant;

use bytes::Bytes;
use tokio::net::UdpSocket;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use volley_proto::channel::{
    Closed, ConfigError, ConnectionHandle, Endpoint, EndpointConfig, Event, MESSAGE_COST, Payload,
    Pieces, TOKEN_KEY_PERIOD, chunk_in,
};
use volley_proto::time::Instant;

use crate::datagrams::Datagrams;

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

enum Command {
    Connect(
        SocketAddr,
        oneshot::Sender<Result<ChannelConnection, ChannelError>>,
    ),
    Send(ConnectionHandle, Payload, OwnedSemaphorePermit),
    Close(ConnectionHandle),
}

/// A socket carrying channel connections; cheap to clone.
#[derive(Clone, Debug)]
pub struct ChannelEndpoint {
    commands: mpsc::UnboundedSender<Command>,
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
    commands: mpsc::UnboundedSender<Command>,
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
    commands: mpsc::UnboundedSender<Command>,
}

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        let _ = self.commands.send(Command::Close(self.handle));
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
        // Commands need no count bound: each send holds its cost of the connection's
        // send buffer until the driver takes it, each connect has a caller waiting, and
        // each connection closes once. Accepted connections are peers of the endpoint,
        // so its peer cap bounds them; the queue says so.
        let (commands, command_rx) = mpsc::unbounded_channel();
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
            endpoint: Endpoint::new(endpoint_config, seed())?,
            config,
            epoch: StdInstant::now(),
            commands: command_rx,
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
        self.queue(head, segments, len, permit)
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
        self.queue(head, segments, len, permit).map(|()| true)
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

    fn queue(
        &self,
        head: &[u8],
        segments: &[Bytes],
        len: usize,
        permit: OwnedSemaphorePermit,
    ) -> Result<(), ChannelError> {
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
        self.commands
            .send(Command::Send(self.handle, message, permit))
            .map_err(|_| ChannelError::Closed(Ended::DriverStopped))
    }

    /// The largest message the peer takes.
    pub fn max_message(&self) -> u32 {
        self.max_message
    }

    /// Closes the connection: queued messages go first, then a close.
    pub fn close(&self) {
        let _ = self.commands.send(Command::Close(self.handle));
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

struct PeerState {
    messages: mpsc::Sender<Result<Vec<u8>, ChannelError>>,
    /// Messages waiting for room in the state machine's send buffer.
    pending: VecDeque<(Payload, OwnedSemaphorePermit)>,
    budget: Arc<Semaphore>,
}

struct Driver {
    socket: UdpSocket,
    endpoint: Endpoint<SocketAddr>,
    config: ChannelConfig,
    epoch: StdInstant,
    commands: mpsc::UnboundedReceiver<Command>,
    accept: mpsc::Sender<ChannelConnection>,
    peers: BTreeMap<ConnectionHandle, PeerState>,
    connecting:
        BTreeMap<ConnectionHandle, oneshot::Sender<Result<ChannelConnection, ChannelError>>>,
    /// For the connections the driver hands out; weak, so the driver ends once every
    /// handle is gone.
    self_commands: mpsc::WeakUnboundedSender<Command>,
    taken: Arc<Notify>,
    connect_deadlines: Vec<(ConnectionHandle, StdInstant, SocketAddr)>,
    /// When the retry tokens' key is next replaced (servers only).
    rotate_key_at: Option<StdInstant>,
}

impl Driver {
    /// The machines' time for a clock reading.
    fn at(&self, t: StdInstant) -> Instant {
        Instant::from_micros(t.saturating_duration_since(self.epoch).as_micros() as u64)
    }

    fn now(&self) -> Instant {
        Instant::from_micros(self.epoch.elapsed().as_micros() as u64)
    }

    /// A connection's application half, and the driver's.
    fn open(&mut self, handle: ConnectionHandle) -> Option<ChannelConnection> {
        let commands = self.self_commands.upgrade()?;
        // A connected handle always has its peer; the fallback is never seen.
        let peer_addr =
            (self.endpoint.peer_addr(handle)).unwrap_or(SocketAddr::from(([0, 0, 0, 0], 0)));
        let (tx, rx) = mpsc::channel(self.config.queue);
        let send_buffer = self.config.endpoint.connection.send_buffer;
        let budget = Arc::new(Semaphore::new(
            usize::try_from(send_buffer)
                .unwrap_or(Semaphore::MAX_PERMITS)
                .min(Semaphore::MAX_PERMITS),
        ));
        self.peers.insert(
            handle,
            PeerState {
                messages: tx,
                pending: VecDeque::new(),
                budget: budget.clone(),
            },
        );
        Some(ChannelConnection {
            sender: ChannelSender {
                handle,
                commands: commands.clone(),
                budget,
                max_message: self.config.endpoint.connection.max_message,
                _close: Arc::new(CloseOnDrop { handle, commands }),
            },
            receiver: ChannelReceiver {
                messages: rx,
                taken: self.taken.clone(),
            },
            peer_addr,
        })
    }

    fn command(&mut self, command: Command) {
        match command {
            Command::Connect(addr, reply) => match self.endpoint.connect(addr) {
                Ok(handle) => {
                    self.connecting.insert(handle, reply);
                    self.connect_deadlines.push((
                        handle,
                        StdInstant::now() + self.config.connect_timeout,
                        addr,
                    ));
                }
                Err(_) => {
                    let _ = reply.send(Err(ChannelError::Closed(Ended::TooManyPeers)));
                }
            },
            Command::Send(handle, message, permit) => {
                if let Some(peer) = self.peers.get_mut(&handle) {
                    peer.pending.push_back((message, permit));
                }
            }
            Command::Close(handle) => self.endpoint.close(handle, 0, b"closed"),
        }
    }

    /// The kernel said a destination's port is closed: connections still connecting to
    /// it fail with [`ChannelError::Refused`] (established ones have their idle timeout).
    fn refused(&mut self) {
        let mut refused = Vec::new();
        crate::datagrams::take_refusals(&self.socket, &mut refused);
        for (handle, _, addr) in &self.connect_deadlines {
            if !refused.contains(addr) {
                continue;
            }
            if let Some(reply) = self.connecting.remove(handle) {
                let _ = reply.send(Err(ChannelError::Refused { addr: *addr }));
                self.endpoint.close(*handle, 0, b"refused");
            }
        }
    }

    /// A fresh key for retry tokens from the system's generator, at start and then every
    /// [`TOKEN_KEY_PERIOD`] (checked as the loop turns: a quiet server mints no tokens).
    fn rotate_key(&mut self, clock: StdInstant) {
        if self.rotate_key_at.is_some_and(|at| clock >= at) {
            self.endpoint.rotate_token_key(rand::random());
            self.rotate_key_at = Some(clock + Duration::from_micros(TOKEN_KEY_PERIOD.as_micros()));
        }
    }

    /// The driver's loop, one turn a step at a time: commands, receive, statuses and
    /// connect deadlines, deliver, admit sends, transmit, then spin or park.
    async fn run(mut self) -> io::Result<()> {
        let mut io = Datagrams::new(&self.socket);
        let mut buf = vec![0u8; 65_536];
        let current_thread = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::CurrentThread);
        let spin = self.config.spin.filter(|_| current_thread);
        let mut last_traffic = StdInstant::now();
        let mut spinning = false;
        let mut readable: Vec<ConnectionHandle> = Vec::new();
        loop {
            // One clock reading per turn.
            let clock = StdInstant::now();
            let now = self.at(clock);
            self.rotate_key(clock);
            self.take_commands();
            if self.receive(&mut io, now, spinning)? {
                last_traffic = clock;
            }
            self.endpoint.handle_timeout(now);
            if !self.statuses() {
                return Ok(());
            }
            self.expire_connects(clock);
            self.deliver(&mut readable);
            self.admit_sends();
            if self.transmit(&mut io, now, &mut buf).await? {
                last_traffic = clock;
            }
            // Spin a while after traffic: poll the socket again instead of sleeping.
            spinning =
                spin.is_some_and(|spin| clock.saturating_duration_since(last_traffic) < spin);
            if spinning {
                std::thread::yield_now();
                tokio::task::yield_now().await;
                continue;
            }
            if !self.park().await? {
                return Ok(());
            }
        }
    }

    /// Commands from the applications, as many as have come.
    fn take_commands(&mut self) {
        while let Ok(command) = self.commands.try_recv() {
            self.command(command);
        }
    }

    /// Datagrams in, every one the socket holds; `true` if any came.
    fn receive(&mut self, io: &mut Datagrams, now: Instant, spinning: bool) -> io::Result<bool> {
        let mut any = false;
        loop {
            match io.rx().try_recv(&self.socket, spinning) {
                Ok(()) => {
                    any = true;
                    for (datagram, from) in io.rx().datagrams() {
                        if let Some(from) = from {
                            self.endpoint.handle_datagram(now, from, datagram);
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(any),
                Err(e) if crate::datagrams::refused(&e) => self.refused(),
                Err(e) => return Err(e),
            }
        }
    }

    /// Connections made and ended: a connected one goes to whoever waits for it (its
    /// `connect` or the accept queue), an ended one's waiters learn why. `false` once
    /// every application handle is gone.
    fn statuses(&mut self) -> bool {
        while let Some((handle, event)) = self.endpoint.poll_status() {
            match event {
                Event::Connected => {
                    let Some(connection) = self.open(handle) else {
                        return false;
                    };
                    if let Some(reply) = self.connecting.remove(&handle) {
                        let _ = reply.send(Ok(connection));
                    } else {
                        // Never full: it holds at most the endpoint's peers.
                        let _ = self.accept.try_send(connection);
                    }
                }
                Event::Closed(why) => {
                    let error = ChannelError::Closed(Ended::Connection(why));
                    if let Some(reply) = self.connecting.remove(&handle) {
                        let _ = reply.send(Err(error.clone()));
                    }
                    if let Some(peer) = self.peers.remove(&handle) {
                        peer.budget.close();
                        let _ = peer.messages.try_send(Err(error));
                    }
                }
                Event::Message(_) => {}
            }
        }
        true
    }

    /// Connections whose handshake has run out of time fail with
    /// [`ChannelError::ConnectTimeout`].
    fn expire_connects(&mut self, clock: StdInstant) {
        let mut deadlines = core::mem::take(&mut self.connect_deadlines);
        deadlines.retain(|(handle, deadline, addr)| {
            if !self.connecting.contains_key(handle) {
                return false;
            }
            if clock >= *deadline {
                if let Some(reply) = self.connecting.remove(handle) {
                    let _ = reply.send(Err(ChannelError::ConnectTimeout {
                        addr: *addr,
                        after: self.config.connect_timeout,
                    }));
                }
                self.endpoint.close(*handle, 0, b"gave up");
                return false;
            }
            true
        });
        self.connect_deadlines = deadlines;
    }

    /// Messages out to the applications, as their queues have room.
    fn deliver(&mut self, readable: &mut Vec<ConnectionHandle>) {
        readable.clear();
        readable.extend(self.endpoint.readable());
        for &handle in readable.iter() {
            let Some(peer) = self.peers.get(&handle) else {
                continue;
            };
            while let Ok(slot) = peer.messages.try_reserve() {
                let Some(message) = self.endpoint.poll_message(handle) else {
                    break;
                };
                slot.send(Ok(message));
            }
        }
    }

    /// Messages in from the applications, as the state machines' send buffers have room.
    fn admit_sends(&mut self) {
        let send_buffer = self.config.endpoint.connection.send_buffer;
        for (handle, peer) in self.peers.iter_mut() {
            let queued = self.endpoint.connection(*handle).map_or(0, |c| c.queued());
            let mut room = send_buffer.saturating_sub(queued);
            while let Some((message, _)) = peer.pending.front() {
                if message.len() as u64 > room {
                    break;
                }
                let (message, permit) = peer.pending.pop_front().expect("peeked");
                room -= message.len() as u64;
                // Refused only for a connection that has ended: its close comes next.
                let _ = self.endpoint.send(*handle, message);
                drop(permit);
            }
        }
    }

    /// Datagrams out, batched; `true` if any went.
    async fn transmit(
        &mut self,
        io: &mut Datagrams,
        now: Instant,
        buf: &mut [u8],
    ) -> io::Result<bool> {
        let mut sent_any = false;
        let mut refused = 0;
        while let Some((to, n)) = self.endpoint.poll_transmit(now, buf) {
            refused += io.tx().queue(&self.socket, &buf[..n], to).await?.refused;
            sent_any = true;
        }
        refused += io.tx().flush(&self.socket).await?.refused;
        if refused > 0 {
            self.refused();
        }
        Ok(sent_any)
    }

    /// Waits for the next thing to do: a datagram, a command, the state machines' next
    /// deadline, an application taking a message, or the first connect deadline.
    /// `false` once every application handle is gone.
    async fn park(&mut self) -> io::Result<bool> {
        let wait = self
            .endpoint
            .poll_timeout()
            .map(|t| Duration::from_micros(t.saturating_duration_since(self.now()).as_micros()));
        let sleep = async move {
            match wait {
                Some(wait) => tokio::time::sleep(wait).await,
                None => core::future::pending().await,
            }
        };
        let first_connect = self.connect_deadlines.iter().map(|&(_, at, _)| at).min();
        let connect_deadline = async move {
            match first_connect {
                Some(at) => tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await,
                None => core::future::pending().await,
            }
        };
        tokio::select! {
            ready = self.socket.readable() => ready?,
            command = self.commands.recv() => match command {
                Some(command) => self.command(command),
                // Every handle is gone.
                None => return Ok(false),
            },
            () = sleep => {}
            () = self.taken.notified() => {}
            () = connect_deadline => {}
        }
        Ok(true)
    }
}
