//! [`Config`]: the settings of a framed connection, and the choices inside it
//! ([`Signal`], [`Role`]).

use core::time::Duration;

use volley_proto::wire::frame;

/// Connection settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Most requests outstanding at once; senders wait for a slot beyond it. Replies and
    /// one-way frames ([`Framed::send`](crate::Framed::send)) take no slot.
    pub max_in_flight: usize,
    /// Largest frame accepted or sent, length field included.
    pub max_frame_len: usize,
    /// Payloads shorter than this are copied into the coalescing buffer (cheaper than an
    /// iovec entry of their own); longer ones go to the socket uncopied.
    pub copy_threshold: usize,
    /// How the reader wakes waiters.
    pub signal: Signal,
    /// Most bytes the reader asks for per read. Its buffers hold four reads plus the
    /// largest frame, so that any frame that starts in a buffer ends in it: frames are
    /// handed on as slices of these buffers and never moved. A buffer is reused once every
    /// frame cut from it has been dropped, and the reader keeps up to 16 of them for that.
    pub read_chunk: usize,
    /// Bytes of frames queued for the writer and not yet written (headers, heads and
    /// in-memory payloads; a file region's bytes stay in the file). Every send waits for
    /// room (requests, replies and one-way frames alike); a frame larger than the whole
    /// budget waits for the queue to empty.
    pub write_budget: usize,
    /// Most frames the writer puts in one write (at least 1). The writer takes what is
    /// queued when it wakes, up to this many, so with many calls in flight a smaller
    /// figure turns one large write into a few back to back: the peer starts on the first
    /// while this end still writes the rest, and its answers come back in parts too, so
    /// both ends work at once instead of taking turns. The default, 1024, writes
    /// everything queued at once.
    pub write_batch: usize,
    /// Frames nobody asked for (the peer's requests, one-way frames) held for the
    /// application's [`Unsolicited`](crate::Unsolicited) before the reader stops reading: a
    /// server that takes no more work stops the peer by not taking frames.
    pub incoming_queue: usize,
    /// Which ids this end gives its requests, so that both ends can call on one
    /// connection without their ids colliding.
    pub role: Role,
    /// Close the connection after this long without a byte from the peer; `None` waits
    /// for ever (a client's requests have deadlines of their own).
    pub idle_timeout: Option<Duration>,
    /// Socket buffer sizes to ask the kernel for on a socketpair made by
    /// [`Framed::spawn`](crate::Framed::spawn) (both ends, both directions); `None` keeps
    /// the defaults.
    pub socket_buffer: Option<usize>,
    /// After the reader has taken everything the peer sent, keep polling the stream for
    /// this long (letting other tasks run and the runtime poll its sockets between
    /// polls, and offering the CPU to other threads) before sleeping until it is readable.
    /// A reply that comes within it is read without the thread being woken from sleep,
    /// which on loopback is most of a round trip's cost. `None` (the default) sleeps at
    /// once; request/response links that want latency set a few hundred microseconds.
    /// Applies on a current-thread runtime only: on a multi-thread one, spinning took the
    /// CPU the other workers needed and was slower in every case measured.
    pub spin: Option<Duration>,
    /// The largest first frame the peer may send, if lower than `max_frame_len` (a
    /// protocol whose first frame is a small handshake sets it, so a stranger cannot make
    /// the reader hold a largest frame before it has said who it is); a longer first
    /// frame ends the connection at once. `None`: `max_frame_len`.
    pub first_frame_max: Option<usize>,
    /// How long [`Framed::close_both`](crate::Framed::close_both) lets the writer finish
    /// what is queued and the reader wait for the peer's end of stream before the socket
    /// is closed regardless.
    pub linger: Duration,
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

/// Which end of a connection this is, for the ids of its requests: as HTTP/2 gives odd
/// stream ids to clients and even ones to servers, an initiator numbers its requests
/// 1, 3, 5, ... and an acceptor 2, 4, 6, ..., so a request from the peer can never carry
/// the id of one of ours. A frame whose id is one of our outstanding requests is its
/// reply; any other frame goes to the application as [`Unsolicited`](crate::Unsolicited).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Role {
    /// The end that connected: odd request ids.
    #[default]
    Initiator,
    /// The end that accepted: even request ids.
    Acceptor,
}

impl Role {
    /// The first request id this end gives out.
    pub(crate) fn first_id(self) -> u32 {
        match self {
            Self::Initiator => 1,
            Self::Acceptor => 2,
        }
    }
}

/// Socketpair buffer size [`Framed::spawn`](crate::Framed::spawn) asks for by default
/// (Linux doubles it for bookkeeping, and caps it at `net.core.wmem_max`/`rmem_max`).
pub const SOCKET_BUFFER: usize = 1024 * 1024;

impl Default for Config {
    /// 256 in flight, OpenSSH's 256 KiB frame limit, copies under 512 bytes, batched
    /// signalling, 256 KiB reads, a 4 MiB write queue, up to 1024 frames a write, 1024
    /// incoming frames, the initiator's ids, no idle timeout, 1 MiB socketpair buffers.
    /// A Unix stream wakes a blocked writer only once its bytes in flight fall to a
    /// quarter of the send buffer, so a small buffer lets a fast reader (sftp-server) run
    /// dry before the writer is back (`unix_writable` in Linux's `net/unix/af_unix.c`);
    /// 1 MiB keeps it fed.
    fn default() -> Self {
        Self {
            max_in_flight: 256,
            max_frame_len: frame::DEFAULT_MAX_FRAME_LEN,
            copy_threshold: 512,
            signal: Signal::Batched,
            read_chunk: 256 * 1024,
            write_budget: 4 << 20,
            write_batch: 1024,
            incoming_queue: 1024,
            role: Role::Initiator,
            idle_timeout: None,
            socket_buffer: Some(SOCKET_BUFFER),
            spin: None,
            first_frame_max: None,
            linger: Duration::from_secs(2),
        }
    }
}

impl Config {
    /// The settings with every count raised to what can work (at least one request in
    /// flight, room for a frame header, a read of at least 4 KiB, a write budget and an
    /// incoming queue of at least one).
    pub(crate) fn normalised(self) -> Self {
        Self {
            max_in_flight: self.max_in_flight.max(1),
            max_frame_len: self.max_frame_len.max(frame::HEADER_LEN),
            read_chunk: self.read_chunk.max(4096),
            write_budget: self.write_budget.clamp(1, u32::MAX as usize),
            write_batch: self.write_batch.max(1),
            incoming_queue: self.incoming_queue.max(1),
            // Longer would be a busy loop by another name.
            spin: self.spin.map(|s| s.min(Duration::from_millis(10))),
            first_frame_max: self
                .first_frame_max
                .map(|m| m.clamp(frame::HEADER_LEN, self.max_frame_len.max(frame::HEADER_LEN))),
            ..self
        }
    }
}
