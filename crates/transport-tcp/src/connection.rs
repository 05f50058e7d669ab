//! [`Connection`] and [`Pipeline`]: ids, waiters, slots, and the handle callers use.

use core::fmt;
use core::future::poll_fn;
use core::net::SocketAddr;
use core::sync::atomic::{AtomicU64, Ordering};
use core::task::{Poll, Waker};
use core::time::Duration;
use std::collections::{HashMap, HashSet, VecDeque};
use std::io;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpStream, UnixStream};
use tokio::process::{Child, Command};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use volley_proto::wire::frame::{self, Header};

use crate::sendfile::{FileRegion, Plain, SendFile};
use crate::{reader, writer};

/// Connection settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Most requests outstanding at once; senders wait for a slot beyond it.
    pub max_in_flight: usize,
    /// Largest frame accepted or sent, length field included.
    pub max_frame_len: usize,
    /// Payloads shorter than this are copied into the coalescing buffer (cheaper than an
    /// iovec entry of their own); longer ones go to the socket uncopied.
    pub copy_threshold: usize,
    /// How the reader wakes waiters.
    pub signal: Signal,
    /// Bytes the reader asks for per read, and the size of its read buffers. Replies are
    /// slices of these buffers; a buffer is reused once every reply cut from it has been
    /// dropped, and the reader keeps up to 16 of them for that.
    pub read_chunk: usize,
    /// Socket buffer sizes to ask the kernel for on a socketpair made by
    /// [`Connection::spawn`] (both ends, both directions); `None` keeps the defaults.
    pub socket_buffer: Option<usize>,
}

/// How the reader signals a waiter that replies arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// Once per batch: when a waiter's queue goes from empty to non-empty (the first
    /// frame, so early), not again until it has drained it.
    Batched,
    /// On every frame (kept so the comparison stays runnable).
    PerFrame,
}

/// A reply frame; `body` shares the reader's buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// Frame type.
    pub ty: u8,
    /// The request id it answers.
    pub id: u32,
    /// Everything after the id.
    pub body: Bytes,
}

/// Why a call failed. Cloneable: one failure of the connection reaches every waiter.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The peer closed the stream.
    #[error("the peer closed the connection")]
    Closed,
    /// This side closed the connection.
    #[error("the connection was closed")]
    Shutdown,
    /// The stream failed.
    #[error("connection I/O error: {message}")]
    Io {
        /// The kind of error.
        kind: io::ErrorKind,
        /// Its text.
        message: String,
    },
    /// The peer sent bytes that are not a frame; the stream cannot be trusted after it.
    #[error("the peer sent a malformed frame: {0}")]
    Protocol(volley_proto::wire::Error),
    /// A request too large to frame.
    #[error("request of {len} bytes exceeds the {max}-byte frame limit")]
    TooLarge {
        /// Frame length asked for.
        len: u64,
        /// The limit.
        max: u64,
    },
    /// `send_with_id` with an id already outstanding.
    #[error("request id {0} is already outstanding")]
    IdInUse(u32),
    /// `recv` on a pipeline with nothing outstanding.
    #[error("no request outstanding to wait for")]
    NothingOutstanding,
    /// A deadline passed.
    #[error("timed out after {after:?} waiting for {what}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// The deadline.
        after: Duration,
    },
}

/// Counters kept by the reader and writer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Frames sent.
    pub frames_sent: u64,
    /// Write calls made (vectored or not).
    pub writes: u64,
    /// Payload bytes copied into the coalescing buffer.
    pub bytes_copied: u64,
    /// Frames received.
    pub frames_received: u64,
    /// Reads made.
    pub reads: u64,
    /// Waker calls made by the reader.
    pub wakeups: u64,
    /// Replies to ids nobody waits for (cancelled requests).
    pub unmatched: u64,
    /// Payload bytes of file regions the kernel sent straight from the file
    /// (`sendfile(2)`), never entering this process's memory.
    pub file_bytes_sent: u64,
    /// Read buffers allocated. The reader reuses a buffer once every frame split from
    /// it has been dropped, so in a steady stream this stops growing.
    pub read_buffers: u64,
}

/// A cheap, cloneable handle to a framed connection. When the last handle (and the last
/// [`Pipeline`]) is dropped, the connection closes as by [`Connection::close`].
#[derive(Clone)]
pub struct Connection {
    shared: Arc<Shared>,
    owner: Arc<Owner>,
}

/// Closes the connection when the last user-held handle goes; the reader and writer
/// tasks hold `Shared` only, so they cannot keep it open by themselves.
struct Owner {
    shared: Arc<Shared>,
}

impl Drop for Owner {
    fn drop(&mut self) {
        self.shared.lock_tx().take();
    }
}

/// Requests in flight whose replies come back to one waiter, in any order.
/// Dropping it cancels what is still outstanding.
pub struct Pipeline {
    shared: Arc<Shared>,
    _owner: Arc<Owner>,
    waiter: Arc<Waiter>,
    outstanding: HashSet<u32>,
}

pub(crate) struct Shared {
    pub(crate) config: Config,
    state: Mutex<State>,
    slots: Arc<Semaphore>,
    tx: Mutex<Option<mpsc::UnboundedSender<Outgoing>>>,
    pub(crate) counters: Counters,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) frames_sent: AtomicU64,
    pub(crate) writes: AtomicU64,
    pub(crate) bytes_copied: AtomicU64,
    pub(crate) frames_received: AtomicU64,
    pub(crate) reads: AtomicU64,
    pub(crate) wakeups: AtomicU64,
    pub(crate) unmatched: AtomicU64,
    pub(crate) read_buffers: AtomicU64,
    pub(crate) file_bytes_sent: AtomicU64,
}

struct State {
    pending: HashMap<u32, Entry>,
    next_id: u32,
    failed: Option<Error>,
}

struct Entry {
    waiter: Arc<Waiter>,
    _slot: OwnedSemaphorePermit,
}

pub(crate) struct Waiter {
    state: Mutex<WaiterState>,
}

#[derive(Default)]
struct WaiterState {
    replies: VecDeque<Reply>,
    waker: Option<Waker>,
}

/// A frame for the writer: its header, a small head copied inline, and a payload.
pub(crate) struct Outgoing {
    pub(crate) header: [u8; frame::HEADER_LEN],
    pub(crate) head: Head,
    pub(crate) payload: Payload,
}

/// What follows a frame's head on the wire.
pub(crate) enum Payload {
    /// Bytes in memory.
    Mem(Bytes),
    /// A file region.
    File(FileRegion),
}

impl Payload {
    fn len(&self) -> usize {
        match self {
            Self::Mem(bytes) => bytes.len(),
            Self::File(region) => region.len(),
        }
    }
}

/// Socketpair buffer size [`Connection::spawn`] asks for by default (Linux doubles it
/// for bookkeeping, and caps it at `net.core.wmem_max`/`rmem_max`).
pub const SOCKET_BUFFER: usize = 1024 * 1024;

impl Default for Config {
    /// 256 in flight, OpenSSH's 256 KiB frame limit, copies under 512 bytes, batched
    /// signalling, 256 KiB reads, 1 MiB socketpair buffers. A Unix stream wakes a
    /// blocked writer only once its bytes in flight fall to a quarter of the send
    /// buffer, so a small buffer lets a fast reader (sftp-server) run dry before the
    /// writer is back (`unix_writable` in Linux's `net/unix/af_unix.c`); against
    /// 256 KiB, 1 MiB moved 3-6% more per second each way.
    fn default() -> Self {
        Self {
            max_in_flight: 256,
            max_frame_len: frame::DEFAULT_MAX_FRAME_LEN,
            copy_threshold: 512,
            signal: Signal::Batched,
            read_chunk: 256 * 1024,
            socket_buffer: Some(SOCKET_BUFFER),
        }
    }
}

impl Connection {
    /// Starts the reader and writer tasks over the two halves of a stream. Must be
    /// called within a tokio runtime.
    pub fn new<R, W>(reader: R, writer: W, config: Config) -> Self
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        Self::start(reader, Plain(writer), config)
    }

    /// A connection over a TCP stream, with Nagle's algorithm off (the writer batches by
    /// itself). On Linux, file regions ([`Pipeline::send_file`]) go by `sendfile(2)`.
    pub fn from_tcp(stream: TcpStream, config: Config) -> io::Result<Self> {
        stream.set_nodelay(true)?;
        let (read, write) = stream.into_split();
        Ok(Self::start(read, write, config))
    }

    /// A connection over a Unix stream socket. On Linux, file regions
    /// ([`Pipeline::send_file`]) go by `sendfile(2)`.
    pub fn from_unix(stream: UnixStream, config: Config) -> Self {
        let (read, write) = stream.into_split();
        Self::start(read, write, config)
    }

    fn start<R, W>(reader: R, writer: W, config: Config) -> Self
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + SendFile + Unpin + Send + 'static,
    {
        let config = Config {
            max_in_flight: config.max_in_flight.max(1),
            max_frame_len: config.max_frame_len.max(frame::HEADER_LEN),
            read_chunk: config.read_chunk.max(4096),
            ..config
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            config,
            state: Mutex::new(State {
                pending: HashMap::new(),
                next_id: 1,
                failed: None,
            }),
            slots: Arc::new(Semaphore::new(config.max_in_flight)),
            tx: Mutex::new(Some(tx)),
            counters: Counters::default(),
        });
        tokio::spawn(reader::run(reader, shared.clone()));
        tokio::spawn(writer::run(writer, rx, shared.clone()));
        let owner = Arc::new(Owner {
            shared: shared.clone(),
        });
        Self { shared, owner }
    }

    /// Connects over TCP with Nagle's algorithm off (the writer batches by itself).
    pub async fn connect_tcp(addr: SocketAddr, config: Config) -> io::Result<Self> {
        Self::from_tcp(TcpStream::connect(addr).await?, config)
    }

    /// Connects to a Unix socket.
    pub async fn connect_unix(path: impl AsRef<Path>, config: Config) -> io::Result<Self> {
        Ok(Self::from_unix(UnixStream::connect(path).await?, config))
    }

    /// Spawns `command` with its stdin and stdout on one end of a socketpair (faster
    /// than pipes) and talks to it over the other end. Afterwards the command's stdin
    /// and stdout are set to null, so that it holds no end of the socketpair: when the
    /// child exits, every waiter gets [`Error::Closed`].
    pub fn spawn(command: &mut Command, config: Config) -> io::Result<(Self, Child)> {
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
        Ok((Self::from_unix(UnixStream::from_std(ours)?, config), child))
    }

    /// A new pipeline on this connection.
    pub fn pipeline(&self) -> Pipeline {
        Pipeline {
            shared: self.shared.clone(),
            _owner: self.owner.clone(),
            waiter: Arc::new(Waiter {
                state: Mutex::new(WaiterState::default()),
            }),
            outstanding: HashSet::new(),
        }
    }

    /// Sends one request (`head` copied, `payload` not) and waits for its reply.
    pub async fn call(&self, ty: u8, head: &[u8], payload: Bytes) -> Result<Reply, Error> {
        let mut pipeline = self.pipeline();
        pipeline.send(ty, head, payload).await?;
        pipeline.recv().await
    }

    /// [`Connection::call`] with a deadline.
    pub async fn call_timeout(
        &self,
        ty: u8,
        head: &[u8],
        payload: Bytes,
        deadline: Duration,
    ) -> Result<Reply, Error> {
        tokio::time::timeout(deadline, self.call(ty, head, payload))
            .await
            .unwrap_or_else(|_| {
                Err(Error::Timeout {
                    what: format!("the reply to a type-{ty} request"),
                    after: deadline,
                })
            })
    }

    /// Stops sending: the writer flushes what is queued and shuts its half down, so the
    /// peer sees end of stream. Replies still arrive until the peer closes.
    pub fn close(&self) {
        self.shared.lock_tx().take();
    }

    /// The error that ended the connection, if it has ended.
    pub fn failure(&self) -> Option<Error> {
        self.shared.lock().failed.clone()
    }

    /// Requests outstanding now.
    pub fn in_flight(&self) -> usize {
        self.shared.lock().pending.len()
    }

    /// The settings in force.
    pub fn config(&self) -> Config {
        self.shared.config
    }

    /// The counters so far.
    pub fn stats(&self) -> Stats {
        let c = &self.shared.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Stats {
            frames_sent: get(&c.frames_sent),
            writes: get(&c.writes),
            bytes_copied: get(&c.bytes_copied),
            frames_received: get(&c.frames_received),
            reads: get(&c.reads),
            wakeups: get(&c.wakeups),
            unmatched: get(&c.unmatched),
            read_buffers: get(&c.read_buffers),
            file_bytes_sent: get(&c.file_bytes_sent),
        }
    }
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("config", &self.shared.config)
            .field("in_flight", &self.in_flight())
            .field("failure", &self.failure())
            .finish()
    }
}

impl Pipeline {
    /// Queues a request once a slot is free and returns its id. `head` (the small part of
    /// the body) is copied; `payload` follows it on the wire uncopied.
    pub async fn send(&mut self, ty: u8, head: &[u8], payload: Bytes) -> Result<u32, Error> {
        self.send_inner(ty, None, head, Payload::Mem(payload)).await
    }

    /// [`Pipeline::send`] with a file region as the payload. On Linux, over the
    /// sockets of [`Connection::from_unix`], [`Connection::from_tcp`] and the
    /// constructors built on them, the kernel sends the region from the page cache
    /// (`sendfile(2)`): its bytes are never copied into or out of this process. Over any
    /// other stream the writer reads the region in itself, a chunk at a time.
    pub async fn send_file(
        &mut self,
        ty: u8,
        head: &[u8],
        region: FileRegion,
    ) -> Result<u32, Error> {
        self.send_inner(ty, None, head, Payload::File(region)).await
    }

    /// [`Pipeline::send`] with the id chosen by the caller, for handshakes that put
    /// something else in the id field (SFTP's INIT and VERSION carry the protocol
    /// version there). Fails with [`Error::IdInUse`] if a request with that id is
    /// outstanding.
    pub async fn send_with_id(
        &mut self,
        ty: u8,
        id: u32,
        head: &[u8],
        payload: Bytes,
    ) -> Result<u32, Error> {
        self.send_inner(ty, Some(id), head, Payload::Mem(payload))
            .await
    }

    async fn send_inner(
        &mut self,
        ty: u8,
        fixed_id: Option<u32>,
        head: &[u8],
        payload: Payload,
    ) -> Result<u32, Error> {
        let body_len = head.len() + payload.len();
        let frame_len = body_len as u64 + frame::HEADER_LEN as u64;
        if frame_len > self.shared.config.max_frame_len as u64 {
            return Err(Error::TooLarge {
                len: frame_len,
                max: self.shared.config.max_frame_len as u64,
            });
        }
        if let Some(e) = self.shared.lock().failed.clone() {
            return Err(e);
        }
        let slot = self
            .shared
            .slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| self.shared.lock().failed.clone().unwrap_or(Error::Shutdown))?;
        let id = {
            let mut state = self.shared.lock();
            if let Some(e) = state.failed.clone() {
                return Err(e);
            }
            let id = match fixed_id {
                Some(id) if state.pending.contains_key(&id) => return Err(Error::IdInUse(id)),
                Some(id) => id,
                None => state.allocate_id(),
            };
            state.pending.insert(
                id,
                Entry {
                    waiter: self.waiter.clone(),
                    _slot: slot,
                },
            );
            id
        };
        let header = Header::new(ty, id, body_len).map_err(Error::Protocol)?;
        let outgoing = Outgoing {
            header: header.encode(),
            head: Head::new(head),
            payload,
        };
        let sent = self
            .shared
            .lock_tx()
            .as_ref()
            .is_some_and(|tx| tx.send(outgoing).is_ok());
        if sent {
            self.outstanding.insert(id);
            Ok(id)
        } else {
            self.shared.lock().pending.remove(&id);
            Err(Error::Shutdown)
        }
    }

    /// The next reply to any of this pipeline's requests.
    pub async fn recv(&mut self) -> Result<Reply, Error> {
        if self.outstanding.is_empty() {
            return Err(Error::NothingOutstanding);
        }
        let reply = poll_fn(|cx| {
            let mut state = lock(&self.waiter.state);
            if let Some(reply) = state.replies.pop_front() {
                return Poll::Ready(Ok(reply));
            }
            // Register before checking for failure, so a failure recorded after the check
            // still finds the waker.
            state.waker = Some(cx.waker().clone());
            drop(state);
            match self.shared.lock().failed.clone() {
                Some(e) => Poll::Ready(Err(e)),
                None => Poll::Pending,
            }
        })
        .await?;
        self.outstanding.remove(&reply.id);
        Ok(reply)
    }

    /// [`Pipeline::recv`] with a deadline.
    pub async fn recv_timeout(&mut self, deadline: Duration) -> Result<Reply, Error> {
        tokio::time::timeout(deadline, self.recv())
            .await
            .unwrap_or_else(|_| {
                Err(Error::Timeout {
                    what: format!("one of {} outstanding replies", self.outstanding.len()),
                    after: deadline,
                })
            })
    }

    /// Requests sent whose replies have not been taken by `recv`.
    pub fn outstanding(&self) -> usize {
        self.outstanding.len()
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        // Cancel: forget the ids (their slots free now; late replies count as unmatched).
        let mut state = self.shared.lock();
        for id in &self.outstanding {
            state.pending.remove(id);
        }
    }
}

impl fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pipeline")
            .field("outstanding", &self.outstanding.len())
            .finish()
    }
}

/// Bytes of a head kept inside the frame descriptor instead of on the heap.
const INLINE_HEAD: usize = 64;

/// A request's small head: inline when short (no allocation per request), else on the heap.
pub(crate) enum Head {
    Inline { len: u8, bytes: [u8; INLINE_HEAD] },
    Heap(Bytes),
}

impl Head {
    fn new(head: &[u8]) -> Self {
        if head.len() <= INLINE_HEAD {
            let mut bytes = [0; INLINE_HEAD];
            bytes[..head.len()].copy_from_slice(head);
            // Fits: at most INLINE_HEAD (64) bytes.
            Self::Inline {
                len: head.len() as u8,
                bytes,
            }
        } else {
            Self::Heap(Bytes::copy_from_slice(head))
        }
    }

    pub(crate) fn as_slice(&self) -> &[u8] {
        match self {
            Self::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Self::Heap(bytes) => bytes,
        }
    }
}

impl State {
    fn allocate_id(&mut self) -> u32 {
        loop {
            let id = self.next_id;
            self.next_id = self.next_id.wrapping_add(1);
            if !self.pending.contains_key(&id) {
                return id;
            }
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    fn lock_tx(&self) -> MutexGuard<'_, Option<mpsc::UnboundedSender<Outgoing>>> {
        lock(&self.tx)
    }

    /// Hands a reply to whoever waits for its id.
    pub(crate) fn deliver(&self, reply: Reply) {
        let entry = self.lock().pending.remove(&reply.id);
        match entry {
            Some(entry) => entry.waiter.push(reply, self),
            None => {
                self.counters.unmatched.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Ends the connection: every waiter, now and later, gets `error`.
    pub(crate) fn fail(&self, error: Error) {
        let entries: Vec<Entry> = {
            let mut state = self.lock();
            if state.failed.is_none() {
                state.failed = Some(error);
            }
            state.pending.drain().map(|(_, e)| e).collect()
        };
        self.slots.close();
        for entry in entries {
            entry.waiter.wake();
        }
    }
}

impl Waiter {
    fn push(&self, reply: Reply, shared: &Shared) {
        let mut state = lock(&self.state);
        let was_empty = state.replies.is_empty();
        state.replies.push_back(reply);
        let waker = match shared.config.signal {
            Signal::Batched if was_empty => state.waker.take(),
            Signal::Batched => None,
            Signal::PerFrame => state.waker.clone(),
        };
        drop(state);
        if let Some(waker) = waker {
            shared.counters.wakeups.fetch_add(1, Ordering::Relaxed);
            waker.wake();
        }
    }

    fn wake(&self) {
        if let Some(waker) = lock(&self.state).waker.take() {
            waker.wake();
        }
    }
}

/// Locks a mutex, carrying on with the data if a panicking thread poisoned it (every
/// critical section here leaves the data consistent).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl From<io::Error> for Error {
    /// A broken pipe or a reset is the peer having gone away: [`Error::Closed`].
    fn from(e: io::Error) -> Self {
        match e.kind() {
            io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset => Self::Closed,
            kind => Self::Io {
                kind,
                message: e.to_string(),
            },
        }
    }
}
