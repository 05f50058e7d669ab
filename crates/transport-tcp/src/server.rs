//! Accepting connections: [`Listener`] over a TCP or Unix listener, with a cap on the
//! connections open at once, a back-off while the process is out of file descriptors
//! (instead of a loop that spins on `EMFILE`), and an idle timeout per connection.

use core::fmt;
use core::net::SocketAddr;
use core::sync::atomic::{AtomicU64, Ordering};
use core::time::Duration;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use nix::errno::Errno;
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::config::{Config, Role};
use tokio::io::{AsyncRead, AsyncWrite};

use crate::framed::{Framed, Unsolicited};
use crate::sendfile::Plain;
use crate::write_memory::{WriteMemory, lock};

/// How a [`Listener`] accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerConfig {
    /// The settings of each accepted connection. Its role is always
    /// [`Role::Acceptor`].
    pub connection: Config,
    /// Connections open at once; [`Listener::accept`] waits for one to close beyond it
    /// (the kernel's backlog holds the peers meanwhile).
    pub max_connections: usize,
    /// The longest pause between attempts while the process or the system is out of
    /// file descriptors (the first is 5 ms, doubling up to this).
    pub max_backoff: Duration,
    /// Bytes of memory the frames queued on all connections may hold together (each
    /// connection's own is [`Config::write_budget`]). Past it, the connection holding the
    /// most ends with [`Error::MemoryExhausted`](crate::Error::MemoryExhausted), so peers
    /// that do not read cannot make the others wait or grow the server.
    pub total_write_budget: usize,
    /// With [`Listener::accept_or_refuse`]: connections past `max_connections` accepted
    /// (without a slot) for the caller to refuse with a reason, at most this many a
    /// second; beyond that they wait in the kernel's backlog as with
    /// [`Listener::accept`].
    pub max_refusals_per_second: u32,
}

impl Default for ServerConfig {
    /// [`Config::default`] as an acceptor closing connections idle for 5 minutes, 1024
    /// connections, 256 MiB of queued frames among them, back-off up to one second.
    fn default() -> Self {
        Self {
            connection: Config {
                role: Role::Acceptor,
                idle_timeout: Some(Duration::from_secs(300)),
                ..Config::default()
            },
            max_connections: 1024,
            total_write_budget: 256 << 20,
            max_backoff: Duration::from_secs(1),
            max_refusals_per_second: 100,
        }
    }
}

/// Who connected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerAddr {
    /// Over TCP, from this address.
    Tcp(SocketAddr),
    /// Over a Unix socket.
    Unix,
}

/// A connection just accepted.
#[derive(Debug)]
pub struct Accepted {
    /// Frames out (and requests, through [`Connection::from`](crate::Connection)).
    pub framed: Framed,
    /// Frames in.
    pub incoming: Unsolicited,
    /// Who it is.
    pub peer: PeerAddr,
}

/// What [`Listener::accept_or_refuse`] gives ([`Accepted`] connections), or
/// [`Listener::accept_unframed_or_refuse`] ([`Unframed`] streams).
#[derive(Debug)]
pub enum Admission<T = Accepted> {
    /// A connection that holds one of the `max_connections` slots.
    Accepted(T),
    /// A connection past `max_connections`, holding no slot: tell the peer why, then
    /// [`Framed::close_both`]. Its [`Config::linger`] bounds how long it stays open.
    Full(T),
}

impl<T> Admission<T> {
    /// The same admission of what `f` makes of its connection.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Admission<U> {
        match self {
            Self::Accepted(t) => Admission::Accepted(f(t)),
            Self::Full(t) => Admission::Full(f(t)),
        }
    }
}

/// A stream accepted but not yet framed, for a layer that runs over it first (a TLS
/// handshake): [`Listener::accept_unframed_or_refuse`]. Its [`Seat`] holds the
/// connection's slot until the framed connection made from it ends (or the seat is
/// dropped).
#[derive(Debug)]
pub struct Unframed {
    /// The stream: TCP (Nagle's algorithm off, keep-alive on) or Unix.
    pub stream: AcceptedStream,
    /// Who it is.
    pub peer: PeerAddr,
    /// What the framed connection is started with.
    pub seat: Seat,
}

/// An accepted stream.
#[derive(Debug)]
pub enum AcceptedStream {
    /// TCP.
    Tcp(TcpStream),
    /// A Unix socket.
    Unix(UnixStream),
}

/// A listener's connection slot (if the connection got one), its memory for queued
/// frames and its connection settings: [`Seat::frame`] starts a framed connection with
/// them over any stream.
#[derive(Debug)]
pub struct Seat {
    slot: Option<OwnedSemaphorePermit>,
    memory: Arc<WriteMemory>,
    config: Config,
}

impl Seat {
    /// Starts a framed connection over the halves of any stream (a TLS stream split in
    /// two), with the listener's connection settings, slot and memory.
    pub fn frame<R, W>(self, reader: R, writer: W) -> (Framed, Unsolicited)
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        Framed::start(
            reader,
            Plain(writer),
            self.config,
            self.slot,
            Some(self.memory),
        )
    }

    /// The settings its framed connection gets.
    pub fn config(&self) -> Config {
        self.config
    }
}

impl Unframed {
    /// Frames the stream as it is (a plain connection; over TCP and Unix sockets file
    /// regions go by `sendfile(2)`).
    pub fn frame(self) -> Accepted {
        let Seat {
            slot,
            memory,
            config,
        } = self.seat;
        let (framed, incoming) = match self.stream {
            AcceptedStream::Tcp(stream) => {
                let (read, write) = stream.into_split();
                Framed::start(read, write, config, slot, Some(memory))
            }
            AcceptedStream::Unix(stream) => {
                let (read, write) = stream.into_split();
                Framed::start(read, write, config, slot, Some(memory))
            }
        };
        Accepted {
            framed,
            incoming,
            peer: self.peer,
        }
    }
}

/// Counts kept by a [`Listener`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ListenerStats {
    /// Connections accepted.
    pub accepted: u64,
    /// Accept attempts that found the process or system out of file descriptors (or
    /// socket memory); each is followed by a pause.
    pub out_of_files: u64,
    /// Connections open now.
    pub open: usize,
    /// Connections accepted past `max_connections` to be refused
    /// ([`Admission::Full`]).
    pub refused: u64,
    /// Bytes of memory all connections' queued frames hold now (see
    /// [`ServerConfig::total_write_budget`]).
    pub queued: u64,
}

/// Accepts framed connections on a TCP or Unix listener.
pub struct Listener {
    inner: Inner,
    config: ServerConfig,
    open: Arc<Semaphore>,
    accepted: AtomicU64,
    out_of_files: AtomicU64,
    refused: AtomicU64,
    /// The second refusals are being counted in, and how many it has had.
    refusals: Mutex<(Instant, u32)>,
    memory: Arc<WriteMemory>,
}

enum Inner {
    Tcp(TcpListener),
    Unix(UnixListener),
}

impl Listener {
    /// Binds a TCP address (port 0 picks one).
    pub async fn bind_tcp(addr: SocketAddr, config: ServerConfig) -> io::Result<Self> {
        Ok(Self::from_tcp(TcpListener::bind(addr).await?, config))
    }

    /// Accepts on a TCP listener.
    pub fn from_tcp(listener: TcpListener, config: ServerConfig) -> Self {
        Self::new(Inner::Tcp(listener), config)
    }

    /// Accepts on a Unix listener.
    pub fn from_unix(listener: UnixListener, config: ServerConfig) -> Self {
        Self::new(Inner::Unix(listener), config)
    }

    fn new(inner: Inner, config: ServerConfig) -> Self {
        let config = ServerConfig {
            connection: Config {
                role: Role::Acceptor,
                ..config.connection
            },
            max_connections: config.max_connections.clamp(1, Semaphore::MAX_PERMITS),
            max_backoff: config.max_backoff.max(Duration::from_millis(5)),
            max_refusals_per_second: config.max_refusals_per_second,
            total_write_budget: config.total_write_budget.max(1),
        };
        Self {
            memory: Arc::new(WriteMemory::new(config.total_write_budget)),
            inner,
            open: Arc::new(Semaphore::new(config.max_connections)),
            config,
            accepted: AtomicU64::new(0),
            out_of_files: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            refusals: Mutex::new((Instant::now(), 0)),
        }
    }

    /// The TCP address it listens on (an error for a Unix listener).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        match &self.inner {
            Inner::Tcp(listener) => listener.local_addr(),
            Inner::Unix(_) => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "a Unix listener has no TCP address",
            )),
        }
    }

    /// The next connection, once fewer than `max_connections` are open. While the
    /// process or the system is out of file descriptors it pauses and tries again, each
    /// pause twice the last, up to `max_backoff`; errors that concern one connection
    /// only (it was reset before it was accepted) are skipped. Any other error is
    /// returned, and the listener may be used again.
    pub async fn accept(&self) -> io::Result<Accepted> {
        let slot = self
            .open
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| io::Error::other("the listener's connection slots were closed"))?;
        self.accept_with(Some(slot)).await
    }

    /// As [`Listener::accept`], but the connection is accepted first and then given a
    /// slot; past `max_connections` it is handed over without one, as
    /// [`Admission::Full`], for the caller to refuse with a reason (a peer left waiting
    /// in the backlog only sees a timeout), at most
    /// [`ServerConfig::max_refusals_per_second`] a second. Past that rate the one
    /// connection accepted waits for a slot (the backlog holds the others).
    pub async fn accept_or_refuse(&self) -> io::Result<Admission> {
        Ok(self.accept_unframed_or_refuse().await?.map(Unframed::frame))
    }

    /// As [`Listener::accept_or_refuse`], but the stream is handed over unframed, for a
    /// layer that runs over it first (a TLS handshake), with the [`Seat`] that frames it.
    pub async fn accept_unframed_or_refuse(&self) -> io::Result<Admission<Unframed>> {
        let (stream, peer) = self.accept_stream().await?;
        loop {
            if let Ok(slot) = self.open.clone().try_acquire_owned() {
                return Ok(Admission::Accepted(self.unframed(stream, peer, Some(slot))));
            }
            let next_second = {
                let mut refusals = lock(&self.refusals);
                let now = Instant::now();
                if now.duration_since(refusals.0) >= Duration::from_secs(1) {
                    *refusals = (now, 0);
                }
                if refusals.1 < self.config.max_refusals_per_second {
                    refusals.1 += 1;
                    None
                } else {
                    Some(refusals.0 + Duration::from_secs(1))
                }
            };
            let Some(next_second) = next_second else {
                self.refused.fetch_add(1, Ordering::Relaxed);
                return Ok(Admission::Full(self.unframed(stream, peer, None)));
            };
            // Refused enough this second: wait for a slot, or for the next second.
            tokio::select! {
                slot = self.open.clone().acquire_owned() => {
                    let slot = slot.map_err(|_| {
                        io::Error::other("the listener's connection slots were closed")
                    })?;
                    return Ok(Admission::Accepted(self.unframed(stream, peer, Some(slot))));
                }
                () = tokio::time::sleep_until(next_second.into()) => {}
            }
        }
    }

    /// Accepts the next connection, holding `slot` (if any) for as long as it is open.
    async fn accept_with(&self, slot: Option<OwnedSemaphorePermit>) -> io::Result<Accepted> {
        let (stream, peer) = self.accept_stream().await?;
        Ok(self.unframed(stream, peer, slot).frame())
    }

    /// The next stream from the listener, pausing while out of file descriptors.
    async fn accept_stream(&self) -> io::Result<(AcceptedStream, PeerAddr)> {
        let mut pause = Duration::from_millis(5);
        loop {
            let accepted = match &self.inner {
                Inner::Tcp(listener) => listener.accept().await.map(|(stream, addr)| {
                    // Each only fails on a socket already dead; its reader says so.
                    let _ = crate::socket::tune(&stream);
                    (AcceptedStream::Tcp(stream), PeerAddr::Tcp(addr))
                }),
                Inner::Unix(listener) => listener
                    .accept()
                    .await
                    .map(|(stream, _)| (AcceptedStream::Unix(stream), PeerAddr::Unix)),
            };
            match accepted {
                Ok(accepted) => {
                    self.accepted.fetch_add(1, Ordering::Relaxed);
                    return Ok(accepted);
                }
                Err(e) if out_of_resources(&e) => {
                    if self.out_of_files.fetch_add(1, Ordering::Relaxed) == 0 {
                        tracing::warn!(
                            "cannot accept a connection ({e}); pausing, then trying again"
                        );
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(self.config.max_backoff);
                }
                Err(e) if one_connection(&e) => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// An accepted stream with its seat.
    fn unframed(
        &self,
        stream: AcceptedStream,
        peer: PeerAddr,
        slot: Option<OwnedSemaphorePermit>,
    ) -> Unframed {
        Unframed {
            stream,
            peer,
            seat: Seat {
                slot,
                memory: self.memory.clone(),
                config: self.config.connection,
            },
        }
    }

    /// The counts so far.
    pub fn stats(&self) -> ListenerStats {
        ListenerStats {
            accepted: self.accepted.load(Ordering::Relaxed),
            out_of_files: self.out_of_files.load(Ordering::Relaxed),
            open: self.config.max_connections - self.open.available_permits(),
            refused: self.refused.load(Ordering::Relaxed),
            queued: self.memory.held(),
        }
    }

    /// The settings in force.
    pub fn config(&self) -> ServerConfig {
        self.config
    }
}

impl fmt::Debug for Listener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Listener")
            .field("config", &self.config)
            .field("stats", &self.stats())
            .finish()
    }
}

/// Out of file descriptors (per process or system-wide) or of socket memory: waiting
/// may help, trying again at once will not.
fn out_of_resources(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error().map(Errno::from_raw),
        Some(Errno::EMFILE | Errno::ENFILE | Errno::ENOBUFS | Errno::ENOMEM)
    )
}

/// An error about the one connection being accepted (it went away first, or a
/// firewall refused it), as accept(2) lists them: the listener is fine.
fn one_connection(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
    ) || matches!(
        e.raw_os_error().map(Errno::from_raw),
        Some(Errno::EPROTO | Errno::EPERM)
    )
}
