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
        "{cmd} to chip {chip} at {address:#010x} timed out after {tries} tries ({elapsed_ms} ms)"
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
    },
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
    window: Window<ScpProtocol, Token>,
    epoch: StdInstant,
    spare: Vec<Vec<u8>>,
    refused: u64,
    peer: SocketAddr,
    spin: core::time::Duration,
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
    /// Window 8, adaptive timeout (100 ms initial, 10 ms..2 s), 8 tries, rig's retry codes.
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
}

impl ScpClient {
    /// Opens a UDP socket connected to the board at `addr` (SC&MP listens on
    /// [`scp::PORT`]). With [`WindowSize::Auto`] this also sets the board's transient-tag
    /// timeout and sizes the window from its tag pool.
    pub async fn connect(addr: SocketAddr, config: ScpConfig) -> Result<Self, ScpError> {
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

    async fn start(link: Link, peer: SocketAddr, config: ScpConfig) -> Result<Self, ScpError> {
        let window_config = Config {
            window: match config.window {
                WindowSize::Fixed(n) => n,
                WindowSize::Auto => 1,
            },
            rto: config.rto,
            max_tries: config.max_tries,
        };
        let mut client = Self {
            spin: config.spin,
            link,
            window: Window::new(
                ScpProtocol::with_retry_codes(config.retry_codes.iter().copied()),
                window_config,
            ),
            epoch: StdInstant::now(),
            spare: Vec::new(),
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
        self.window.set_rto(rto);
        self.window.set_window(usize::from(info.pool_size).max(1));
        Ok(())
    }

    /// The board's address.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// Requests kept in flight.
    pub fn window_size(&self) -> usize {
        self.window.config().window
    }

    /// The counters so far.
    pub fn stats(&self) -> ClientStats {
        let s = self.window.stats();
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
            srtt: self.window.rtt().srtt(),
            rto: self.window.rtt().rto(),
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

    /// Reads `len` bytes from `address` on `chip` into a new buffer.
    pub async fn read_bytes(
        &mut self,
        chip: Address,
        address: u32,
        len: usize,
    ) -> Result<Bytes, ScpError> {
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
        let result = self.drive(ops).await;
        if result.is_err() {
            for (_, bytes) in self.window.clear() {
                self.spare.push(bytes);
            }
        }
        result
    }

    fn now(&self) -> Instant {
        Instant::from_micros(self.epoch.elapsed().as_micros() as u64)
    }

    async fn drive(&mut self, ops: &mut [Op<'_>]) -> Result<(), ScpError> {
        let mut chunks = Chunks::new(ops)?;
        loop {
            let now = self.now();
            self.window.handle_timeout(now);
            if let Some(Event::TimedOut {
                token,
                tries,
                request,
                ..
            }) = self.window.poll_event()
            {
                self.spare.push(request);
                let (cmd, chip, address) = describe(ops, &token);
                return Err(ScpError::Timeout {
                    cmd,
                    chip,
                    address,
                    tries,
                    elapsed_ms: (now - token.first_sent).as_millis(),
                });
            }
            // Fill the window, plus one request queued behind it so a freed slot
            // refills at once.
            while self.window.outstanding() + self.window.queued() <= self.window_size() {
                let Some(mut token) = chunks.next(ops) else {
                    break;
                };
                token.first_sent = now;
                let bytes = build(ops, &token, self.spare.pop().unwrap_or_default())?;
                self.window.push(bytes, token);
            }
            self.transmit(now).await?;
            if self.window.is_idle() {
                return Ok(());
            }
            self.receive(ops).await?;
        }
    }

    /// Sends everything the window has ready.
    async fn transmit(&mut self, now: Instant) -> Result<(), ScpError> {
        match &mut self.link {
            Link::Udp(socket, io) => {
                // Everything ready goes out in as few system calls as the kernel allows.
                // Nothing listening (an earlier ICMP error) counts as loss: the requests
                // are retried until they time out.
                while let Some(datagram) = self.window.poll_transmit(now) {
                    self.refused += io.tx.queue(socket, datagram, self.peer).await?.refused as u64;
                }
                self.refused += io.tx.flush(socket).await?.refused as u64;
            }
            Link::Tcp(tcp) => {
                // Small packets: coalesced into one write (copying 282 bytes is cheaper
                // than a slice per packet).
                tcp.write_buf.clear();
                while let Some(datagram) = self.window.poll_transmit(now) {
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
        let deadline = self.window.poll_timeout().map(|t| {
            tokio::time::Instant::from_std(
                self.epoch + core::time::Duration::from_micros(t.as_micros()),
            )
        });
        let sleep = async {
            match deadline {
                Some(at) => tokio::time::sleep_until(at).await,
                None => core::future::pending().await,
            }
        };
        let spin = self
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
                                on_batch(io, &mut self.window, &mut self.spare, ops, self.epoch)?;
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
                            Err(e) if refused(&e) => self.refused += 1,
                            Err(e) => return Err(e.into()),
                        }
                    }
                }
                tokio::select! {
                    biased;
                    ready = socket.readable() => {
                        ready?;
                        self.refused += drain(socket, io, &mut self.window, &mut self.spare, ops, self.epoch)?;
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
                        let now = Instant::from_micros(self.epoch.elapsed().as_micros() as u64);
                        while let Some((frame, used)) = tcp.decoder.decode(&tcp.read_buf)? {
                            let _ = frame;
                            let datagram = &tcp.read_buf[frame::HEADER_LEN..used];
                            on_reply(&mut self.window, &mut self.spare, ops, now, datagram)?;
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

/// Handles every reply that is ready, without waiting (after the reactor saw the socket
/// readable); returns how many "connection refused" reports came instead.
fn drain(
    socket: &UdpSocket,
    io: &mut Datagrams,
    window: &mut Window<ScpProtocol, Token>,
    spare: &mut Vec<Vec<u8>>,
    ops: &mut [Op<'_>],
    epoch: StdInstant,
) -> Result<u64, ScpError> {
    let mut refused_count = 0;
    loop {
        match io.rx.try_recv(socket, false) {
            Ok(()) => on_batch(io, window, spare, ops, epoch)?,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(refused_count),
            Err(e) if refused(&e) => refused_count += 1,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Applies every reply of the last receive call.
fn on_batch(
    io: &Datagrams,
    window: &mut Window<ScpProtocol, Token>,
    spare: &mut Vec<Vec<u8>>,
    ops: &mut [Op<'_>],
    epoch: StdInstant,
) -> Result<(), ScpError> {
    let now = Instant::from_micros(epoch.elapsed().as_micros() as u64);
    io.rx
        .datagrams()
        .try_for_each(|(datagram, _)| on_reply(window, spare, ops, now, datagram))
}

/// Applies one reply to the window and, if it completes a request, to its operation.
fn on_reply(
    window: &mut Window<ScpProtocol, Token>,
    spare: &mut Vec<Vec<u8>>,
    ops: &mut [Op<'_>],
    now: Instant,
    datagram: &[u8],
) -> Result<(), ScpError> {
    match window.handle_reply(now, datagram) {
        ReplyOutcome::Completed { token, request, .. } => {
            spare.push(request);
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
                Op::Write { .. } | Op::Fill { .. } => {}
            }
            Ok(())
        }
        ReplyOutcome::Failed {
            token,
            code,
            request,
        } => {
            spare.push(request);
            let (cmd, chip, address) = describe(ops, &token);
            Err(ScpError::Rc {
                rc: ReturnCode(code),
                cmd,
                chip,
                address,
            })
        }
        ReplyOutcome::RetryLater | ReplyOutcome::Duplicate | ReplyOutcome::Unknown => Ok(()),
    }
}

/// The command, chip and chunk address a token stands for.
fn describe(ops: &[Op<'_>], token: &Token) -> (Command, Address, u32) {
    let offset = token.offset as u32;
    match &ops[token.op] {
        Op::Read { chip, address, .. } => (Command::READ, *chip, address.wrapping_add(offset)),
        Op::Write { chip, address, .. } => (Command::WRITE, *chip, address.wrapping_add(offset)),
        Op::Fill { chip, address, .. } => (Command::FILL, *chip, *address),
        Op::Raw { request, .. } => (request.cmd, request.sdp.dest, request.args[0]),
    }
}

/// Encodes the request for one chunk into a recycled buffer.
fn build(ops: &[Op<'_>], token: &Token, mut buf: Vec<u8>) -> Result<Vec<u8>, ScpError> {
    let offset = token.offset as u32;
    let request = match &ops[token.op] {
        Op::Read { chip, address, .. } => scp::read_request(*chip, address + offset, token.len)?,
        Op::Write {
            chip,
            address,
            data,
        } => scp::write_request(
            *chip,
            address + offset,
            &data[token.offset..token.offset + token.len],
        )?,
        Op::Fill {
            chip,
            address,
            value,
            len,
        } => scp::fill_request(*chip, *address, *value, *len),
        Op::Raw { request, .. } => *request,
    };
    buf.resize(request.buffer_len(), 0);
    request.emit(&mut buf)?;
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
            let (address, len) = match op {
                Op::Read { address, buf, .. } => (*address, buf.len()),
                Op::Write { address, data, .. } => (*address, data.len()),
                Op::Fill { address, len, .. } => (*address, *len as usize),
                Op::Raw { .. } => continue,
            };
            let fits = u32::try_from(len)
                .ok()
                .and_then(|len| address.checked_add(len.saturating_sub(1)))
                .is_some();
            if !fits {
                return Err(ScpError::InvalidArgument(format!(
                    "{len} bytes at {address:#010x} run past the end of the 32-bit address space"
                )));
            }
        }
        Ok(Self { op: 0, offset: 0 })
    }

    fn next(&mut self, ops: &[Op<'_>]) -> Option<Token> {
        while let Some(op) = ops.get(self.op) {
            let total = match op {
                Op::Read { buf, .. } => buf.len(),
                Op::Write { data, .. } => data.len(),
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
