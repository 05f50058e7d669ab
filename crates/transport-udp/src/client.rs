//! [`ScpClient`]: bulk reads, writes and fills split into 256-byte SCP requests and driven
//! through the sliding window over one connected UDP socket (or a TCP stream to volley's
//! emulator). The window runs inline in the caller's task: no driver task, no channel, no
//! cross-thread wake-up per reply.

use core::net::SocketAddr;
use std::io;
use std::time::Instant as StdInstant;

use bytes::{Bytes, BytesMut};
use socket2::{Domain, Protocol as SockProtocol, Socket, Type};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};
use volley_proto::time::{Duration, Instant};
use volley_proto::window::{Config, Event, ReplyOutcome, Rto, ScpProtocol, Window};
use volley_proto::wire::frame::{self, Decoder};
use volley_proto::wire::scp::{
    self, Command, MAX_DATA_LEN, RequestRepr, ReturnCode, TtoInfo, Version, VersionInfo,
};
use volley_proto::wire::sdp::Address;

use crate::SCP_FRAME_TYPE;
use crate::datagrams::{Datagrams, refused};

/// How many requests the client keeps in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowSize {
    /// Exactly this many (at least 1).
    Fixed(usize),
    /// Ask the board: set its transient-tag timeout below the retransmit timeout, then use
    /// the transient-tag pool size it reports (8 on SC&MP), so a lost reply can never
    /// hold a tag past the moment its request is resent.
    Auto,
}

/// Client settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScpConfig {
    /// Requests in flight.
    pub window: WindowSize,
    /// The retransmit timeout rule.
    pub rto: Rto,
    /// Sends per request before it fails with a timeout.
    pub max_tries: u32,
    /// Return codes that mean "busy, resend later" (rig: `RC_SUM`, `RC_P2P_BUSY`).
    pub retry_codes: Vec<ReturnCode>,
    /// UDP receive buffer to ask the kernel for, in bytes.
    pub recv_buffer: usize,
    /// How long to poll the socket for a reply before parking the task, when the
    /// smoothed RTT is no longer than this (a LAN or loopback board). A reply that comes
    /// within it costs no sleep and wake-up; zero never spins.
    pub spin: core::time::Duration,
}

/// One operation of a batch run by [`ScpClient::execute`].
#[derive(Debug)]
pub enum Op<'a> {
    /// Read `buf.len()` bytes from `address` on `chip`.
    Read {
        /// The chip and core.
        chip: Address,
        /// Start address.
        address: u32,
        /// Where the bytes go.
        buf: &'a mut [u8],
    },
    /// Write `data` to `address` on `chip`.
    Write {
        /// The chip and core.
        chip: Address,
        /// Start address.
        address: u32,
        /// The bytes.
        data: &'a [u8],
    },
    /// Write `len` bytes read from `source` to `address` on `chip`, without holding them
    /// all in memory: the source is read in order, a request's worth (256 bytes) at a
    /// time, as the window has room, on the caller's task. Give it a buffered reader
    /// (`std::io::BufReader`) over a file or pipe; a source that ends early fails the
    /// operation with [`ScpError::Source`].
    WriteFrom {
        /// The chip and core.
        chip: Address,
        /// Start address.
        address: u32,
        /// Bytes to write.
        len: u32,
        /// Where the bytes come from.
        source: Source<'a>,
    },
    /// Fill `len` bytes from `address` with the word `value`.
    Fill {
        /// The chip and core.
        chip: Address,
        /// Start address (word aligned).
        address: u32,
        /// The word.
        value: u32,
        /// Bytes to fill (a multiple of 4).
        len: u32,
    },
    /// Any single SCP request; the reply's body is copied into `reply`.
    Raw {
        /// The request (its sequence number is set by the window).
        request: RequestRepr<'a>,
        /// Receives the reply body.
        reply: &'a mut Vec<u8>,
    },
}

/// The reader behind an [`Op::WriteFrom`].
pub struct Source<'a>(pub &'a mut (dyn io::Read + Send));

impl core::fmt::Debug for Source<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Source(..)")
    }
}

/// Why no reply came to a request that timed out, as far as the client can tell.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoReply {
    /// Nothing came back at all.
    Silence,
    /// The board answered with a retry code every time (or some of the times).
    Busy {
        /// The last such code.
        code: ReturnCode,
        /// How many busy replies came.
        replies: u32,
        /// How many times the request was sent.
        tries: u32,
    },
    /// The kernel reported the board's port closed (ICMP port unreachable), this many
    /// times during the operation.
    Refused {
        /// Reports seen.
        reports: u64,
    },
    /// Datagrams came back that were not SCP replies.
    Garbage {
        /// How many.
        replies: u64,
        /// Why the first one did not parse.
        first: volley_proto::wire::Error,
    },
}

impl core::fmt::Display for NoReply {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Silence => f.write_str("no reply"),
            Self::Busy {
                code,
                replies,
                tries,
            } if replies >= tries => write!(f, "board busy ({code}) for all {tries} tries"),
            Self::Busy {
                code,
                replies,
                tries,
            } => write!(f, "board busy ({code}) for {replies} of {tries} tries"),
            Self::Refused { reports } => write!(
                f,
                "connection refused ({reports} ICMP port-unreachable reports: nothing listens there)"
            ),
            Self::Garbage { replies, first } => {
                write!(f, "{replies} replies that did not parse: {first}")
            }
        }
    }
}

/// Why an SCP operation failed.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum ScpError {
    /// The board answered with a return code that is not retried.
    #[error("{cmd} to chip {chip} at {address:#010x} failed: {rc}")]
    Rc {
        /// The return code.
        rc: ReturnCode,
        /// The command.
        cmd: Command,
        /// The chip and core.
        chip: Address,
        /// The address of the failing chunk.
        address: u32,
    },
    /// No reply after every try.
    #[error(
        "{cmd} to chip {chip} at {address:#010x} timed out after {tries} tries ({elapsed_ms} ms): {why}"
    )]
    Timeout {
        /// The command.
        cmd: Command,
        /// The chip and core.
        chip: Address,
        /// The address of the chunk that got no reply.
        address: u32,
        /// How many times it was sent.
        tries: u32,
        /// Milliseconds from its first send to giving up.
        elapsed_ms: u64,
        /// What came back instead of a reply.
        why: NoReply,
    },
    /// Nothing listens at the board's address: the kernel reported the port closed
    /// (ICMP port unreachable) before the board ever answered.
    #[error("connection refused: nothing is listening at {peer}")]
    Refused {
        /// The address.
        peer: SocketAddr,
    },
    /// The reader behind an [`Op::WriteFrom`] failed, or ended early.
    #[error("cannot read the data to write: {0}")]
    Source(#[source] io::Error),
    /// A read reply carried the wrong number of bytes.
    #[error("read from chip {chip} at {address:#010x} returned {got} bytes, expected {expected}")]
    ReadLength {
        /// The chip and core.
        chip: Address,
        /// The chunk's address.
        address: u32,
        /// Bytes asked for.
        expected: usize,
        /// Bytes returned.
        got: usize,
    },
    /// An argument the protocol cannot carry.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A reply or request that could not be encoded or decoded.
    #[error("SCP packet error: {0}")]
    Wire(#[from] volley_proto::wire::Error),
    /// The TCP connection to the emulator closed.
    #[error("the board closed the TCP connection")]
    Closed,
    /// A socket error.
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
}

/// What the board's sver reply says, owned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SoftwareVersion {
    /// The chip and core that answered.
    pub core: Address,
    /// Physical core number.
    pub phys_cpu: u8,
    /// Largest data field accepted.
    pub buffer_size: u16,
    /// Build date, unix seconds.
    pub build_date: u32,
    /// Software name.
    pub name: String,
    /// Version.
    pub version: Version,
}

/// The client's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientStats {
    /// Requests sent for the first time.
    pub sent: u64,
    /// Retransmissions.
    pub retransmits: u64,
    /// Retransmit timer expiries.
    pub timeouts: u64,
    /// Replies to requests already completed.
    pub duplicates: u64,
    /// Replies matching nothing.
    pub unknown: u64,
    /// Busy replies (retried).
    pub retry_replies: u64,
    /// "Connection refused" reports from the kernel (nothing listening).
    pub refused: u64,
    /// System calls that moved datagrams on the UDP socket: sends, and receives that
    /// returned data (each may carry many datagrams; zero over TCP).
    pub syscalls: u64,
    /// Smoothed RTT, once measured.
    pub srtt: Option<Duration>,
    /// The current retransmit timeout.
    pub rto: Duration,
}

/// A windowed SCP client for one board.
#[derive(Debug)]
pub struct ScpClient {
    link: Link,
    core: Core,
    refused: u64,
    peer: SocketAddr,
    spin: core::time::Duration,
}

/// The window and what the driver keeps beside it while an operation runs.
#[derive(Debug)]
struct Core {
    window: Window<ScpProtocol, Token>,
    epoch: StdInstant,
    /// Request buffers returned by the window, for reuse.
    spare: Vec<Vec<u8>>,
    /// Whether the board has ever answered (after that, "connection refused" is loss,
    /// as while a board reboots; before it, nothing listens there).
    heard: bool,
    /// Datagrams that did not parse during this operation, and the first one's error.
    garbage: (u64, Option<volley_proto::wire::Error>),
    /// Data bytes of reads and writes completed during this operation.
    done: u64,
}

#[derive(Debug)]
enum Link {
    /// The socket and its batched I/O.
    Udp(UdpSocket, Box<Datagrams>),
    Tcp(TcpLink),
}

#[derive(Debug)]
struct TcpLink {
    stream: TcpStream,
    read_buf: BytesMut,
    write_buf: Vec<u8>,
    decoder: Decoder,
}

/// Which chunk of which operation a request carries.
#[derive(Clone, Copy, Debug)]
struct Token {
    op: usize,
    offset: usize,
    len: usize,
    first_sent: Instant,
}

/// The transient-tag timeout code `Auto` sets: 1 = 10 ms, the shortest that expires.
const AUTO_TTO: u8 = 1;

impl Default for ScpConfig {
    /// Window 8, adaptive timeout (100 ms initial, 10 ms..2 s), 8 tries, rig's retry codes:
    /// a board that never answers fails a request after 9.1 s ([`ScpConfig::give_up_after`]).
    fn default() -> Self {
        let window = Config::default();
        Self {
            window: WindowSize::Fixed(window.window),
            rto: window.rto,
            max_tries: window.max_tries,
            retry_codes: vec![ReturnCode::SUM, ReturnCode::P2P_BUSY],
            recv_buffer: 1 << 20,
            spin: core::time::Duration::from_micros(50),
        }
    }
}

impl ScpConfig {
    /// rig's settings: window 8, a fixed 0.5 s per try, 5 tries.
    pub fn rig() -> Self {
        Self {
            rto: Rto::Fixed(Duration::from_millis(500)),
            max_tries: 5,
            ..Self::default()
        }
    }

    /// These settings with a fixed window of `n`.
    pub fn with_window(self, n: usize) -> Self {
        Self {
            window: WindowSize::Fixed(n),
            ..self
        }
    }

    /// Checks every number before anything is opened: a window of 1 to
    /// [`MAX_WINDOW`](volley_proto::window::MAX_WINDOW), at least one try, timeouts
    /// from 1 µs to an hour, a spin of at most a second.
    pub fn check(&self) -> Result<(), ScpError> {
        self.window_config()
            .check()
            .map_err(|e| ScpError::InvalidArgument(e.to_string()))?;
        if self.spin > core::time::Duration::from_secs(1) {
            return Err(ScpError::InvalidArgument(format!(
                "a spin of {:?} is over a second",
                self.spin
            )));
        }
        Ok(())
    }

    /// How long a request gets no reply before it fails, before any RTT sample: the
    /// sum of its timeouts over every try (9.1 s with the defaults).
    pub fn give_up_after(&self) -> core::time::Duration {
        self.window_config().give_up_after().into()
    }

    fn window_config(&self) -> Config {
        Config {
            window: match self.window {
                WindowSize::Fixed(n) => n,
                WindowSize::Auto => 1,
            },
            rto: self.rto,
            max_tries: self.max_tries,
        }
    }
}

impl ScpClient {
    /// Opens a UDP socket connected to the board at `addr` (SC&MP listens on
    /// [`scp::PORT`]). With [`WindowSize::Auto`] this also sets the board's transient-tag
    /// timeout and sizes the window from its tag pool. The settings are checked first
    /// ([`ScpConfig::check`]).
    pub async fn connect(addr: SocketAddr, config: ScpConfig) -> Result<Self, ScpError> {
        config.check()?;
        let socket = Socket::new(
            Domain::for_address(addr),
            Type::DGRAM,
            Some(SockProtocol::UDP),
        )?;
        // A larger buffer than the default keeps bursts of replies from being dropped;
        // the kernel may grant less, which only costs retransmissions.
        let _ = socket.set_recv_buffer_size(config.recv_buffer);
        socket.set_nonblocking(true)?;
        let any: SocketAddr = if addr.is_ipv4() {
            (core::net::Ipv4Addr::UNSPECIFIED, 0).into()
        } else {
            (core::net::Ipv6Addr::UNSPECIFIED, 0).into()
        };
        socket.bind(&any.into())?;
        socket.connect(&addr.into())?;
        let socket = UdpSocket::from_std(socket.into())?;
        let io = Box::new(Datagrams::new(&socket));
        Self::start(Link::Udp(socket, io), addr, config).await
    }

    /// Connects over TCP to volley's emulator, which carries the same SCP datagrams in
    /// SFTP-style frames (for UDP-vs-TCP comparisons on one workload).
    pub async fn connect_tcp(addr: SocketAddr, config: ScpConfig) -> Result<Self, ScpError> {
        config.check()?;
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let link = Link::Tcp(TcpLink {
            stream,
            read_buf: BytesMut::with_capacity(64 * 1024),
            write_buf: Vec::with_capacity(16 * 1024),
            decoder: Decoder::new(frame::HEADER_LEN + scp::MAX_DATAGRAM_LEN),
        });
        Self::start(link, addr, config).await
    }

    /// Resolves `target` (`host:port`, e.g. `localhost:17893`) and connects to the first
    /// of its addresses that answers ([`connect_any`](Self::connect_any)).
    pub async fn connect_host(
        target: &str,
        tcp: bool,
        config: ScpConfig,
    ) -> Result<Self, ScpError> {
        config.check()?;
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host(target)
            .await
            .map_err(|e| ScpError::InvalidArgument(format!("cannot resolve `{target}`: {e}")))?
            .collect();
        Self::connect_any(&addrs, tcp, config)
            .await
            .map_err(|e| match e {
                ScpError::InvalidArgument(why) if addrs.len() != 1 => {
                    ScpError::InvalidArgument(format!("`{target}`: {why}"))
                }
                e => e,
            })
    }

    /// Connects to the first of `addrs` that answers: over UDP
    /// ([`connect`](Self::connect)), or over TCP with `tcp`. With several addresses
    /// (`localhost` may give `::1` before `127.0.0.1`), each is asked for its software
    /// version before it is taken, so one where nothing listens is skipped at its first
    /// "connection refused"; a lone address is taken as it is.
    pub async fn connect_any(
        addrs: &[SocketAddr],
        tcp: bool,
        config: ScpConfig,
    ) -> Result<Self, ScpError> {
        let mut failures = Vec::new();
        for &addr in addrs {
            let attempt = async {
                let mut client = if tcp {
                    Self::connect_tcp(addr, config.clone()).await?
                } else {
                    Self::connect(addr, config.clone()).await?
                };
                if addrs.len() > 1 {
                    client.sver(Address::core(0, 0, 0)).await?;
                }
                Ok::<_, ScpError>(client)
            };
            match attempt.await {
                Ok(client) => return Ok(client),
                Err(e) if addrs.len() == 1 => return Err(e),
                Err(e) => failures.push(format!("{addr}: {e}")),
            }
        }
        Err(ScpError::InvalidArgument(if failures.is_empty() {
            "no address to connect to".to_owned()
        } else {
            format!("no address answered ({})", failures.join("; "))
        }))
    }

    async fn start(link: Link, peer: SocketAddr, config: ScpConfig) -> Result<Self, ScpError> {
        let mut client = Self {
            spin: config.spin,
            link,
            core: Core {
                window: Window::new(
                    ScpProtocol::with_retry_codes(config.retry_codes.iter().copied()),
                    config.window_config(),
                ),
                epoch: StdInstant::now(),
                spare: Vec::new(),
                heard: false,
                garbage: (0, None),
                done: 0,
            },
            refused: 0,
            peer,
        };
        if config.window == WindowSize::Auto {
            client.auto_window(config.rto).await?;
        }
        Ok(client)
    }

    /// Sets the board's transient-tag timeout to 10 ms, keeps the retransmit timeout at
    /// least twice that, and takes the window size from the tag pool.
    async fn auto_window(&mut self, rto: Rto) -> Result<(), ScpError> {
        let info = self
            .iptag_tto(Address::core(0, 0, 0), Some(AUTO_TTO))
            .await?;
        let tto = Duration::from_millis(scp::tto_millis(AUTO_TTO).unwrap_or(10));
        let floor = tto.saturating_mul(2);
        let rto = match rto {
            Rto::Fixed(t) => Rto::Fixed(t.max(floor)),
            Rto::Adaptive { initial, min, max } => Rto::Adaptive {
                initial: initial.max(floor),
                min: min.max(floor),
                max: max.max(floor),
            },
        };
        self.core.window.set_rto(rto);
        self.core
            .window
            .set_window(usize::from(info.pool_size).max(1));
        Ok(())
    }

    /// The board's address.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// Requests kept in flight.
    pub fn window_size(&self) -> usize {
        self.core.window.config().window
    }

    /// The counters so far.
    pub fn stats(&self) -> ClientStats {
        let window = &self.core.window;
        let s = window.stats();
        ClientStats {
            sent: s.sent,
            retransmits: s.retransmits,
            timeouts: s.timeouts,
            duplicates: s.duplicates,
            unknown: s.unknown,
            retry_replies: s.retry_replies,
            refused: self.refused,
            syscalls: match &self.link {
                Link::Udp(_, io) => io.syscalls(),
                Link::Tcp(_) => 0,
            },
            srtt: window.rtt().srtt(),
            rto: window.rtt().rto(),
        }
    }

    /// Asks `chip` for its software version.
    pub async fn sver(&mut self, chip: Address) -> Result<SoftwareVersion, ScpError> {
        let body = self.raw(scp::sver_request(chip)).await?;
        let info = VersionInfo::parse(&body)?;
        Ok(SoftwareVersion {
            core: info.core,
            phys_cpu: info.phys_cpu,
            buffer_size: info.buffer_size,
            build_date: info.build_date,
            name: info.name.to_owned(),
            version: info.version,
        })
    }

    /// Sets (`Some(code)`, 0..=15) or queries (`None`) the transient-tag timeout of the
    /// board `chip` is on; the reply gives the tag pool and the timeout before the call.
    pub async fn iptag_tto(&mut self, chip: Address, tto: Option<u8>) -> Result<TtoInfo, ScpError> {
        let body = self.raw(scp::iptag_tto_request(chip, tto)?).await?;
        Ok(TtoInfo::parse(&body)?)
    }

    /// Reads `buf.len()` bytes from `address` on `chip` into `buf`.
    pub async fn read(
        &mut self,
        chip: Address,
        address: u32,
        buf: &mut [u8],
    ) -> Result<(), ScpError> {
        self.execute(&mut [Op::Read { chip, address, buf }]).await
    }

    /// Reads `len` bytes from `address` on `chip` into a new buffer. The range is
    /// checked against the 32-bit address space before anything is allocated.
    pub async fn read_bytes(
        &mut self,
        chip: Address,
        address: u32,
        len: usize,
    ) -> Result<Bytes, ScpError> {
        check_range(address, len)?;
        let mut buf = vec![0; len];
        self.read(chip, address, &mut buf).await?;
        Ok(Bytes::from(buf))
    }

    /// Writes `data` to `address` on `chip`.
    pub async fn write(
        &mut self,
        chip: Address,
        address: u32,
        data: &[u8],
    ) -> Result<(), ScpError> {
        self.execute(&mut [Op::Write {
            chip,
            address,
            data,
        }])
        .await
    }

    /// Fills `len` bytes from `address` on `chip` with the word `value`.
    pub async fn fill(
        &mut self,
        chip: Address,
        address: u32,
        value: u32,
        len: u32,
    ) -> Result<(), ScpError> {
        self.execute(&mut [Op::Fill {
            chip,
            address,
            value,
            len,
        }])
        .await
    }

    /// Sends one request and returns its reply's body.
    pub async fn raw(&mut self, request: RequestRepr<'_>) -> Result<Vec<u8>, ScpError> {
        let mut reply = Vec::new();
        self.execute(&mut [Op::Raw {
            request,
            reply: &mut reply,
        }])
        .await?;
        Ok(reply)
    }

    /// Runs every operation through one window: chunks of different operations (and
    /// chips) are in flight together. Fails on the first error, abandoning the rest.
    pub async fn execute(&mut self, ops: &mut [Op<'_>]) -> Result<(), ScpError> {
        self.execute_with_progress(ops, |_| {}).await
    }

    /// [`execute`](Self::execute), calling `progress` with the data bytes of reads and
    /// writes completed so far, once per batch of replies that completed any (a
    /// progress bar's feed: the transfer stays one operation, the window never drains
    /// between steps).
    pub async fn execute_with_progress(
        &mut self,
        ops: &mut [Op<'_>],
        progress: impl FnMut(u64),
    ) -> Result<(), ScpError> {
        self.core.done = 0;
        self.core.garbage = (0, None);
        let result = self.drive(ops, progress).await;
        if result.is_err() {
            for (_, bytes) in self.core.window.clear() {
                self.core.spare.push(bytes);
            }
        }
        result
    }

    async fn drive(
        &mut self,
        ops: &mut [Op<'_>],
        mut progress: impl FnMut(u64),
    ) -> Result<(), ScpError> {
        let mut chunks = Chunks::new(ops)?;
        let refused_before = self.refused;
        let mut reported = 0;
        loop {
            let now = self.core.now();
            let window = &mut self.core.window;
            window.handle_timeout(now);
            if let Some(Event::TimedOut {
                token,
                tries,
                request,
                busy,
                ..
            }) = window.poll_event()
            {
                self.core.spare.push(request);
                let (cmd, chip, address) = describe(ops, &token);
                let why = match (busy, self.core.garbage) {
                    (Some((code, replies)), _) => NoReply::Busy {
                        code: ReturnCode(code),
                        replies,
                        tries,
                    },
                    _ if self.refused > refused_before => NoReply::Refused {
                        reports: self.refused - refused_before,
                    },
                    (None, (replies, Some(first))) => NoReply::Garbage { replies, first },
                    (None, _) => NoReply::Silence,
                };
                return Err(ScpError::Timeout {
                    cmd,
                    chip,
                    address,
                    tries,
                    elapsed_ms: (now - token.first_sent).as_millis(),
                    why,
                });
            }
            // Fill the window, plus one request queued behind it so a freed slot
            // refills at once.
            while self.core.window.outstanding() + self.core.window.queued() <= self.window_size() {
                let Some(mut token) = chunks.next(ops) else {
                    break;
                };
                token.first_sent = now;
                let bytes = build(ops, &token, self.core.spare.pop().unwrap_or_default())?;
                self.core.window.push(bytes, token);
            }
            self.transmit(now).await?;
            if self.core.window.is_idle() {
                if self.core.done != reported {
                    progress(self.core.done);
                }
                return Ok(());
            }
            self.receive(ops).await?;
            if self.refused > refused_before && !self.core.heard {
                return Err(ScpError::Refused { peer: self.peer });
            }
            if self.core.done != reported {
                reported = self.core.done;
                progress(reported);
            }
        }
    }

    /// Sends everything the window has ready.
    async fn transmit(&mut self, now: Instant) -> Result<(), ScpError> {
        let window = &mut self.core.window;
        match &mut self.link {
            Link::Udp(socket, io) => {
                // Everything ready goes out in as few system calls as the kernel allows.
                // A "connection refused" (an earlier ICMP error) is counted: before the
                // board has ever answered it fails the operation, after that it is loss.
                while let Some(datagram) = window.poll_transmit(now) {
                    self.refused += io.tx.queue(socket, datagram, self.peer).await?.refused as u64;
                }
                self.refused += io.tx.flush(socket).await?.refused as u64;
            }
            Link::Tcp(tcp) => {
                // Small packets: coalesced into one write (copying 282 bytes is cheaper
                // than a slice per packet).
                tcp.write_buf.clear();
                while let Some(datagram) = window.poll_transmit(now) {
                    let seq = u32::from(scp::Packet::new_unchecked(datagram).seq());
                    let header = frame::Header::new(SCP_FRAME_TYPE, seq, datagram.len())?;
                    tcp.write_buf.extend_from_slice(&header.encode());
                    tcp.write_buf.extend_from_slice(datagram);
                }
                if !tcp.write_buf.is_empty() {
                    tcp.stream.write_all(&tcp.write_buf).await?;
                }
            }
        }
        Ok(())
    }

    /// Waits for replies or the next retransmit deadline; handles every reply that is
    /// ready before returning (one wake-up per batch).
    async fn receive(&mut self, ops: &mut [Op<'_>]) -> Result<(), ScpError> {
        let core = &mut self.core;
        let deadline = core.window.poll_timeout().map(|t| {
            tokio::time::Instant::from_std(
                core.epoch + core::time::Duration::from_micros(t.as_micros()),
            )
        });
        let sleep = async {
            match deadline {
                Some(at) => tokio::time::sleep_until(at).await,
                None => core::future::pending().await,
            }
        };
        let spin = core
            .window
            .rtt()
            .srtt()
            .is_some_and(|srtt| core::time::Duration::from(srtt) <= self.spin);
        match &mut self.link {
            Link::Udp(socket, io) => {
                if spin {
                    // Spin, then park (the ARTIQ lesson): on a fast link the reply often
                    // arrives before a sleep and wake-up would even finish.
                    let until = StdInstant::now() + self.spin;
                    loop {
                        match io.rx.try_recv(socket, true) {
                            Ok(()) => {
                                core.on_batch(io, ops)?;
                                // Back to sending at once: the slots just freed are
                                // refilled before anything else (another receive call
                                // here would mostly find nothing; the next receive
                                // takes whatever else has come).
                                return Ok(());
                            }
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                                if StdInstant::now() >= until {
                                    break;
                                }
                                core::hint::spin_loop();
                            }
                            Err(e) if refused(&e) => {
                                self.refused += 1;
                                return Ok(());
                            }
                            Err(e) => return Err(e.into()),
                        }
                    }
                }
                tokio::select! {
                    biased;
                    ready = socket.readable() => {
                        ready?;
                        self.refused += core.drain(socket, io, ops)?;
                    }
                    () = sleep => {}
                }
            }
            Link::Tcp(tcp) => {
                tokio::select! {
                    biased;
                    n = tcp.stream.read_buf(&mut tcp.read_buf) => {
                        if n? == 0 {
                            return Err(ScpError::Closed);
                        }
                        let now = core.now();
                        while let Some((frame, used)) = tcp.decoder.decode(&tcp.read_buf)? {
                            if frame.ty != SCP_FRAME_TYPE {
                                return Err(ScpError::InvalidArgument(format!(
                                    "the board sent a frame of type {:#04x}, not SCP ({SCP_FRAME_TYPE:#04x})",
                                    frame.ty
                                )));
                            }
                            let datagram = &tcp.read_buf[frame::HEADER_LEN..used];
                            core.on_reply(ops, now, datagram)?;
                            let _ = tcp.read_buf.split_to(used);
                        }
                        if tcp.read_buf.capacity() < 4096 {
                            tcp.read_buf.reserve(64 * 1024);
                        }
                    }
                    () = sleep => {}
                }
            }
        }
        Ok(())
    }
}

impl Core {
    fn now(&self) -> Instant {
        Instant::from_micros(self.epoch.elapsed().as_micros() as u64)
    }

    /// Handles every reply that is ready, without waiting (after the reactor saw the
    /// socket readable); returns how many "connection refused" reports came instead.
    fn drain(
        &mut self,
        socket: &UdpSocket,
        io: &mut Datagrams,
        ops: &mut [Op<'_>],
    ) -> Result<u64, ScpError> {
        let mut refused_count = 0;
        loop {
            match io.rx.try_recv(socket, false) {
                Ok(()) => self.on_batch(io, ops)?,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(refused_count),
                Err(e) if refused(&e) => refused_count += 1,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Applies every reply of the last receive call.
    fn on_batch(&mut self, io: &Datagrams, ops: &mut [Op<'_>]) -> Result<(), ScpError> {
        let now = self.now();
        io.rx
            .datagrams()
            .try_for_each(|(datagram, _)| self.on_reply(ops, now, datagram))
    }

    /// Applies one reply to the window and, if it completes a request, to its operation.
    fn on_reply(
        &mut self,
        ops: &mut [Op<'_>],
        now: Instant,
        datagram: &[u8],
    ) -> Result<(), ScpError> {
        self.heard = true;
        match self.window.handle_reply(now, datagram) {
            ReplyOutcome::Completed { token, request, .. } => {
                self.spare.push(request);
                // The window has already checked the header; take the body from the view.
                let packet = scp::Packet::new_checked(datagram)?;
                let body = packet.body();
                match &mut ops[token.op] {
                    Op::Read { chip, address, buf } => {
                        if body.len() != token.len {
                            return Err(ScpError::ReadLength {
                                chip: *chip,
                                address: address.wrapping_add(token.offset as u32),
                                expected: token.len,
                                got: body.len(),
                            });
                        }
                        buf[token.offset..token.offset + token.len].copy_from_slice(body);
                    }
                    Op::Raw { reply, .. } => {
                        reply.clear();
                        reply.extend_from_slice(body);
                    }
                    Op::Write { .. } | Op::WriteFrom { .. } | Op::Fill { .. } => {}
                }
                self.done += token.len as u64;
                Ok(())
            }
            ReplyOutcome::Failed {
                token,
                code,
                request,
            } => {
                self.spare.push(request);
                let (cmd, chip, address) = describe(ops, &token);
                Err(ScpError::Rc {
                    rc: ReturnCode(code),
                    cmd,
                    chip,
                    address,
                })
            }
            ReplyOutcome::Unknown => {
                if let Err(e) = scp::Packet::new_checked(datagram) {
                    self.garbage.0 += 1;
                    self.garbage.1.get_or_insert(e);
                }
                Ok(())
            }
            ReplyOutcome::RetryLater | ReplyOutcome::Duplicate => Ok(()),
        }
    }
}

/// Checks that `len` bytes from `address` fit the 32-bit address space (what every
/// bulk operation is checked against before anything is sent or allocated).
pub fn check_range(address: u32, len: usize) -> Result<(), ScpError> {
    let fits = u32::try_from(len)
        .ok()
        .and_then(|len| address.checked_add(len.saturating_sub(1)))
        .is_some();
    if fits {
        Ok(())
    } else {
        Err(ScpError::InvalidArgument(format!(
            "{len} bytes at {address:#010x} run past the end of the 32-bit address space"
        )))
    }
}

/// The command, chip and chunk address a token stands for.
fn describe(ops: &[Op<'_>], token: &Token) -> (Command, Address, u32) {
    let offset = token.offset as u32;
    match &ops[token.op] {
        Op::Read { chip, address, .. } => (Command::READ, *chip, address.wrapping_add(offset)),
        Op::Write { chip, address, .. } | Op::WriteFrom { chip, address, .. } => {
            (Command::WRITE, *chip, address.wrapping_add(offset))
        }
        Op::Fill { chip, address, .. } => (Command::FILL, *chip, *address),
        Op::Raw { request, .. } => (request.cmd, request.sdp.dest, request.args[0]),
    }
}

/// Encodes the request for one chunk into a recycled buffer (reading a
/// [`Op::WriteFrom`]'s chunk from its source: chunks are built once each, in order).
fn build(ops: &mut [Op<'_>], token: &Token, mut buf: Vec<u8>) -> Result<Vec<u8>, ScpError> {
    let offset = token.offset as u32;
    let mut emit = |request: RequestRepr<'_>| {
        buf.resize(request.buffer_len(), 0);
        request.emit(&mut buf)?;
        Ok::<(), ScpError>(())
    };
    match &mut ops[token.op] {
        Op::Read { chip, address, .. } => {
            emit(scp::read_request(*chip, *address + offset, token.len)?)?;
        }
        Op::Write {
            chip,
            address,
            data,
        } => emit(scp::write_request(
            *chip,
            *address + offset,
            &data[token.offset..token.offset + token.len],
        )?)?,
        Op::WriteFrom {
            chip,
            address,
            len,
            source,
        } => {
            let mut staged = [0u8; MAX_DATA_LEN];
            let data = &mut staged[..token.len];
            source.0.read_exact(data).map_err(|e| {
                ScpError::Source(if e.kind() == io::ErrorKind::UnexpectedEof {
                    io::Error::new(
                        e.kind(),
                        format!(
                            "the source ended before byte {} of the {len} promised",
                            token.offset + token.len
                        ),
                    )
                } else {
                    e
                })
            })?;
            emit(scp::write_request(*chip, *address + offset, data)?)?;
        }
        Op::Fill {
            chip,
            address,
            value,
            len,
        } => emit(scp::fill_request(*chip, *address, *value, *len))?,
        Op::Raw { request, .. } => emit(*request)?,
    }
    Ok(buf)
}

/// Walks the operations chunk by chunk.
#[derive(Debug)]
struct Chunks {
    op: usize,
    offset: usize,
}

impl Chunks {
    /// Checks every operation fits the address space before anything is sent.
    fn new(ops: &[Op<'_>]) -> Result<Self, ScpError> {
        for op in ops {
            if let Some((address, len)) = op.range() {
                check_range(address, len)?;
            }
        }
        Ok(Self { op: 0, offset: 0 })
    }

    fn next(&mut self, ops: &[Op<'_>]) -> Option<Token> {
        while let Some(op) = ops.get(self.op) {
            let total = match op {
                Op::Read { .. } | Op::Write { .. } | Op::WriteFrom { .. } => {
                    op.range().map_or(0, |(_, len)| len)
                }
                // One request whatever the size.
                Op::Fill { .. } | Op::Raw { .. } => {
                    if self.offset == 0 {
                        self.offset = 1;
                        return Some(Token {
                            op: self.op,
                            offset: 0,
                            len: 0,
                            first_sent: Instant::ZERO,
                        });
                    }
                    0
                }
            };
            if self.offset < total {
                let len = (total - self.offset).min(MAX_DATA_LEN);
                let token = Token {
                    op: self.op,
                    offset: self.offset,
                    len,
                    first_sent: Instant::ZERO,
                };
                self.offset += len;
                return Some(token);
            }
            self.op += 1;
            self.offset = 0;
        }
        None
    }
}

impl Op<'_> {
    /// The start address and length of a bulk operation.
    fn range(&self) -> Option<(u32, usize)> {
        match self {
            Op::Read { address, buf, .. } => Some((*address, buf.len())),
            Op::Write { address, data, .. } => Some((*address, data.len())),
            Op::WriteFrom { address, len, .. } => Some((*address, *len as usize)),
            Op::Fill { address, len, .. } => Some((*address, *len as usize)),
            Op::Raw { .. } => None,
        }
    }
}
