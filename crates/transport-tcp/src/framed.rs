//! The lower layer: [`Framed`], frames in and frames out over any byte stream, with the
//! frames nobody asked for delivered to the application as [`Unsolicited`].

use core::fmt;
use core::net::SocketAddr;
use core::time::Duration;
use std::io;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Weak};

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpStream, UnixStream};
use tokio::process::{Child, Command};
use tokio::sync::{OwnedSemaphorePermit, mpsc};

use volley_proto::wire::frame;

use crate::config::Config;
use crate::error::Error;
use crate::frames::{Frame, Payload};
use crate::sendfile::{FileRegion, Plain, SendFile};
use crate::shared::Shared;
use crate::stats::Stats;
use crate::write_memory::{Holder, WriteMemory};
use crate::{reader, writer};

/// A cheap, cloneable handle to a framed connection: send frames with any type and id,
/// and take the frames the peer sends from the [`Unsolicited`] made with it. When the last
/// handle is dropped (with the last [`Connection`](crate::Connection) and
/// [`Pipeline`](crate::Pipeline) built on it), the connection closes as by
/// [`Framed::close`].
#[derive(Clone)]
pub struct Framed {
    pub(crate) shared: Arc<Shared>,
    pub(crate) _owner: Arc<Owner>,
}

/// Closes the connection when the last user-held handle goes; the reader and writer
/// tasks hold `Shared` only, so they cannot keep it open by themselves.
pub(crate) struct Owner {
    shared: Arc<Shared>,
}

impl Drop for Owner {
    fn drop(&mut self) {
        self.shared.close();
    }
}

/// The frames from the peer that answer none of this end's requests (its own requests
/// and one-way frames), in the order they came. At most
/// [`Config::incoming_queue`] wait here; past that the reader stops reading, so a peer
/// that sends faster than the application takes is held back by TCP. Dropping it
/// discards such frames from then on (counted in [`Stats::unmatched`]).
pub struct Unsolicited {
    rx: mpsc::Receiver<Frame>,
    shared: Arc<Shared>,
}

impl Framed {
    /// Starts the reader and writer tasks over the two halves of a stream. Must be
    /// called within a tokio runtime.
    pub fn new<R, W>(reader: R, writer: W, config: Config) -> (Self, Unsolicited)
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        Self::start(reader, Plain(writer), config, None, None)
    }

    /// A connection over a TCP stream, set up by [`tune`](crate::tune): Nagle's algorithm
    /// off (the writer batches by itself), TCP keep-alive on, reno on loopback. On Linux,
    /// file regions ([`Framed::send_file`]) go by `sendfile(2)`.
    pub fn from_tcp(stream: TcpStream, config: Config) -> io::Result<(Self, Unsolicited)> {
        crate::socket::tune(&stream)?;
        let (read, write) = stream.into_split();
        Ok(Self::start(read, write, config, None, None))
    }

    /// A connection over a Unix stream socket. On Linux, file regions
    /// ([`Framed::send_file`]) go by `sendfile(2)`.
    pub fn from_unix(stream: UnixStream, config: Config) -> (Self, Unsolicited) {
        let (read, write) = stream.into_split();
        Self::start(read, write, config, None, None)
    }

    /// Connects over TCP, the stream set up by [`tune`](crate::tune).
    pub async fn connect_tcp(addr: SocketAddr, config: Config) -> io::Result<(Self, Unsolicited)> {
        Self::from_tcp(TcpStream::connect(addr).await?, config)
    }

    /// Connects to a Unix socket.
    pub async fn connect_unix(
        path: impl AsRef<Path>,
        config: Config,
    ) -> io::Result<(Self, Unsolicited)> {
        Ok(Self::from_unix(UnixStream::connect(path).await?, config))
    }

    /// Spawns `command` with its stdin and stdout on one end of a socketpair (faster
    /// than pipes) and talks to it over the other end. Afterwards the command's stdin
    /// and stdout are set to null, so that it holds no end of the socketpair: when the
    /// child exits, every waiter gets [`Error::Closed`].
    pub fn spawn(command: &mut Command, config: Config) -> io::Result<(Self, Unsolicited, Child)> {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
        if let Some(size) = config.socket_buffer {
            // Both ends: the kernel charges a Unix stream's bytes in flight to the
            // sender, so the child's end limits what it can write before blocking.
            for end in [&ours, &theirs] {
                let sock = socket2::SockRef::from(end);
                // Best effort: the kernel caps these at net.core.[rw]mem_max.
                let _ = sock.set_send_buffer_size(size);
                let _ = sock.set_recv_buffer_size(size);
            }
        }
        let theirs_out = theirs.try_clone()?;
        command
            .stdin(Stdio::from(std::os::fd::OwnedFd::from(theirs)))
            .stdout(Stdio::from(std::os::fd::OwnedFd::from(theirs_out)));
        let child = command.spawn();
        // The command still holds the child's end of the socketpair: drop it, or the
        // child's exit would never show here as end of stream (the stream stays open
        // for as long as the caller keeps the command).
        command.stdin(Stdio::null()).stdout(Stdio::null());
        let child = child?;
        ours.set_nonblocking(true)?;
        let (framed, incoming) = Self::from_unix(UnixStream::from_std(ours)?, config);
        Ok((framed, incoming, child))
    }

    /// Starts the tasks; `held` (a listener's connection slot) is released when both
    /// have ended; `memory` is the listener's for all its connections' queued frames.
    pub(crate) fn start<R, W>(
        reader: R,
        writer: W,
        config: Config,
        held: Option<OwnedSemaphorePermit>,
        memory: Option<Arc<WriteMemory>>,
    ) -> (Self, Unsolicited)
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + SendFile + Unpin + Send + 'static,
    {
        let config = config.normalised();
        let (tx, rx) = mpsc::unbounded_channel();
        let (incoming_tx, incoming_rx) = mpsc::channel(config.incoming_queue);
        let shared = Arc::new(Shared::new(config, tx, memory.clone()));
        if let Some(memory) = memory {
            let holder: Weak<dyn Holder> = Arc::downgrade(&shared) as Weak<Shared>;
            memory.register(holder);
        }
        let read = tokio::spawn(reader::run(reader, shared.clone(), incoming_tx));
        let write = tokio::spawn(writer::run_until_ended(writer, rx, shared.clone()));
        if let Some(held) = held {
            tokio::spawn(async move {
                let _ = read.await;
                let _ = write.await;
                drop(held);
            });
        }
        let owner = Arc::new(Owner {
            shared: shared.clone(),
        });
        let incoming = Unsolicited {
            rx: incoming_rx,
            shared: shared.clone(),
        };
        (
            Self {
                shared,
                _owner: owner,
            },
            incoming,
        )
    }

    /// Sends one frame with the type and id given, taking no request slot: a reply to a
    /// frame from [`Unsolicited`] (with its id), or a one-way frame. `head` is copied;
    /// `payload` follows it on the wire uncopied. Waits while the writer's queue is at
    /// its byte budget ([`Config::write_budget`]).
    pub async fn send(&self, ty: u8, id: u32, head: &[u8], payload: Bytes) -> Result<(), Error> {
        self.shared
            .enqueue(ty, id, head, Payload::Mem(payload))
            .await
    }

    /// [`Framed::send`] with a payload in several pieces, written back to back after
    /// `head` in the same vectored write; none of them is copied unless it is shorter than
    /// [`Config::copy_threshold`].
    pub async fn send_segments(
        &self,
        ty: u8,
        id: u32,
        head: &[u8],
        mut segments: Vec<Bytes>,
    ) -> Result<(), Error> {
        let first = if segments.is_empty() {
            Bytes::new()
        } else {
            segments.remove(0)
        };
        self.send_parts(ty, id, head, first, segments).await
    }

    /// [`Framed::send_segments`] with the payload as a first piece and the rest (so a
    /// caller holding them apart need not allocate a list with room for both).
    pub async fn send_parts(
        &self,
        ty: u8,
        id: u32,
        head: &[u8],
        first: Bytes,
        rest: Vec<Bytes>,
    ) -> Result<(), Error> {
        self.shared
            .enqueue(ty, id, head, Payload::Parts(first, rest))
            .await
    }

    /// [`Framed::send_parts`] if the write budget has room now, without waiting: a full
    /// budget gives the pieces back in [`TrySendError::Full`].
    pub fn try_send_parts(
        &self,
        ty: u8,
        id: u32,
        head: &[u8],
        first: Bytes,
        rest: Vec<Bytes>,
    ) -> Result<(), TrySendError<(Bytes, Vec<Bytes>)>> {
        match self
            .shared
            .try_enqueue(ty, id, head, Payload::Parts(first, rest))
        {
            Ok(result) => result.map_err(TrySendError::Failed),
            Err(Payload::Parts(first, rest)) => Err(TrySendError::Full((first, rest))),
            Err(_) => unreachable!("try_enqueue gives back the payload it was given"),
        }
    }

    /// [`Framed::send`] with a file region as the payload (see
    /// [`Pipeline::send_file`](crate::Pipeline::send_file)).
    pub async fn send_file(
        &self,
        ty: u8,
        id: u32,
        head: &[u8],
        region: FileRegion,
    ) -> Result<(), Error> {
        self.shared
            .enqueue(ty, id, head, Payload::File(region))
            .await
    }

    /// Stops reading from the peer until [`Framed::resume_reading`]: frames already read
    /// are still delivered, and TCP's flow control holds the peer back once the socket
    /// buffers fill. Other connections are not affected.
    pub fn pause_reading(&self) {
        self.shared.paused.send_replace(true);
    }

    /// Reads again after [`Framed::pause_reading`].
    pub fn resume_reading(&self) {
        self.shared.paused.send_replace(false);
    }

    /// Stops sending: the writer flushes what is queued and shuts its half down, so the
    /// peer sees end of stream. Frames still arrive until the peer closes.
    pub fn close(&self) {
        self.shared.close();
    }

    /// Ends the connection both ways, as a server does with a peer it refuses or drops:
    /// what is queued is written and the write half shut down, what the peer still
    /// sends is read and discarded until its end of stream, each for at most
    /// [`Config::linger`]; then the socket is closed (and a listener's connection slot
    /// freed) whatever the peer does. Waiters get [`Error::Shutdown`].
    pub fn close_both(&self) {
        self.shared.close_both();
    }

    /// The error that ended the connection, if it has ended.
    pub fn failure(&self) -> Option<Error> {
        self.shared.failure()
    }

    /// The settings in force.
    pub fn config(&self) -> Config {
        Config {
            max_frame_len: self.shared.max_frame_len(),
            ..self.shared.config
        }
    }

    /// Changes the largest frame either way (at least a header) from the next frame on,
    /// for a protocol that learns its limit after the connection is made: frames are
    /// checked against it before a byte of their body is buffered, as with
    /// [`Config::max_frame_len`]. A first frame held to [`Config::first_frame_max`] stays
    /// held to it.
    pub fn set_max_frame_len(&self, len: usize) {
        self.shared.max_frame.store(
            len.max(frame::HEADER_LEN),
            core::sync::atomic::Ordering::Relaxed,
        );
    }

    /// The counters so far.
    pub fn stats(&self) -> Stats {
        Stats {
            queued: self.shared.queued(),
            ..self.shared.counters.snapshot()
        }
    }
}

/// Why [`Framed::try_send_parts`] did not queue a frame.
#[derive(Debug)]
pub enum TrySendError<T> {
    /// The write budget is full: the payload, to send later.
    Full(T),
    /// The frame cannot be sent (too large, or the connection has ended).
    Failed(Error),
}

impl fmt::Debug for Framed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Framed")
            .field("config", &self.shared.config)
            .field("failure", &self.failure())
            .finish()
    }
}

impl Unsolicited {
    /// The next frame from the peer that answers none of this end's requests; the
    /// connection's error once it has ended and every earlier frame has been taken.
    pub async fn recv(&mut self) -> Result<Frame, Error> {
        match self.rx.recv().await {
            Some(frame) => Ok(frame),
            None => Err(self.shared.failure().unwrap_or(Error::Closed)),
        }
    }

    /// [`Unsolicited::recv`] with a deadline.
    pub async fn recv_timeout(&mut self, deadline: Duration) -> Result<Frame, Error> {
        tokio::time::timeout(deadline, self.recv())
            .await
            .unwrap_or_else(|_| {
                Err(Error::Timeout {
                    what: "a frame from the peer".into(),
                    after: deadline,
                })
            })
    }

    /// A frame if one is waiting, without waiting.
    pub fn try_recv(&mut self) -> Option<Frame> {
        self.rx.try_recv().ok()
    }
}

impl fmt::Debug for Unsolicited {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Unsolicited")
            .field("queued", &self.rx.len())
            .finish()
    }
}
