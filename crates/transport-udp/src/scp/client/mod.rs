//! [`ScpClient`]: bulk reads, writes and fills split into 256-byte SCP requests and driven
//! through the sliding window over one connected UDP socket (or a TCP stream to volley's
//! emulator). The window runs inline in the caller's task: no driver task, no channel, no
//! cross-thread wake-up per reply.
//!
//! - `ops`: what a batch is made of ([`Op`]) and how it is cut into requests;
//! - `driver`: the window and its books while an operation runs, and the loop that drives
//!   it;
//! - `link`: the UDP socket or TCP stream, behind `send_ready` and `recv_ready`;
//! - `error`: what can go wrong ([`ScpError`], [`NoReply`]).

use core::net::SocketAddr;
use std::time::Instant as StdInstant;

use bytes::Bytes;
use socket2::{Domain, Protocol as SockProtocol, Socket, Type};
use tokio::net::{TcpStream, UdpSocket};
use volley_proto::scp::sdp::Address;
use volley_proto::scp::window::{Config, Rto, RtoBounds, ScpProtocol, Window};
use volley_proto::scp::{self, RequestRepr, ReturnCode, TtoInfo, Version, VersionInfo};
use volley_proto::time::Duration;

use crate::datagrams::Datagrams;

mod driver;
mod error;
mod link;
mod ops;

use driver::Driver;
pub use error::{ConfigError, NoReply, ScpError};
use link::Link;
pub use ops::{Op, Source, check_range};

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
    driver: Driver,
    refused: u64,
    peer: SocketAddr,
    spin: core::time::Duration,
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
    /// [`MAX_WINDOW`](volley_proto::scp::window::MAX_WINDOW), at least one try, timeouts
    /// from 1 µs to an hour, a spin of at most a second.
    pub fn check(&self) -> Result<(), ScpError> {
        self.window_config().check().map_err(ConfigError::from)?;
        if self.spin > core::time::Duration::from_secs(1) {
            return Err(ConfigError::Spin(self.spin).into());
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
        Self::start(Link::tcp(stream), addr, config).await
    }

    /// Resolves `target` (`HOST`, `HOST:PORT` or `[V6]:PORT`, port 17893 by default:
    /// [`target::split`](crate::target::split)) and connects to the first of its
    /// addresses that answers ([`connect_any`](Self::connect_any)).
    pub async fn connect_host(
        target: &str,
        tcp: bool,
        config: ScpConfig,
    ) -> Result<Self, ScpError> {
        config.check()?;
        let addrs = crate::target::lookup(target, scp::PORT)
            .await
            .map_err(|e| ScpError::InvalidArgument(format!("cannot resolve `{target}`: {e}")))?;
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
            driver: Driver {
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
            client
                .auto_window(Address::core(0, 0, 0), config.rto)
                .await?;
        }
        tracing::info!(
            %peer,
            window = client.window_size(),
            give_up_after = ?config.give_up_after(),
            "SCP client ready"
        );
        Ok(client)
    }

    /// Sets the transient-tag timeout of the board whose Ethernet chip is `ethernet` to
    /// 10 ms, keeps the retransmit timeout at least twice that, and takes the window size
    /// from the tag pool.
    pub(crate) async fn auto_window(
        &mut self,
        ethernet: Address,
        rto: Rto,
    ) -> Result<(), ScpError> {
        let info = self.iptag_tto(ethernet, Some(AUTO_TTO)).await?;
        let tto = Duration::from_millis(scp::tto_millis(AUTO_TTO).unwrap_or(10));
        let floor = tto.saturating_mul(2);
        let rto = match rto {
            Rto::Fixed(t) => Rto::Fixed(t.max(floor)),
            Rto::Adaptive(b) => Rto::Adaptive(RtoBounds::new(
                b.initial.max(floor),
                b.min.max(floor),
                b.max.max(floor),
            )),
        };
        tracing::debug!(
            pool = info.pool_size,
            previous_tto = info.tto,
            "the board's transient-tag timeout set to 10 ms; window sized from its tag pool"
        );
        self.driver.window.set_rto(rto);
        self.driver
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
        self.driver.window.config().window
    }

    /// The counters so far.
    pub fn stats(&self) -> ClientStats {
        let window = &self.driver.window;
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

    /// Writes `len` bytes read in order from `source` to `address` on `chip`
    /// ([`Op::WriteFrom`]: a request's worth at a time, as the window has room).
    pub async fn write_from(
        &mut self,
        chip: Address,
        address: u32,
        len: u32,
        source: &mut (dyn std::io::Read + Send),
    ) -> Result<(), ScpError> {
        self.execute(&mut [Op::WriteFrom {
            chip,
            address,
            len,
            source: Source(source),
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
        // An operation whose future was dropped (a timeout, a `select!`, Ctrl-C in
        // Python) left its requests in the window: abandon them first, so that no reply
        // to them is taken for one of this operation's.
        if !self.driver.window.is_idle() {
            self.abandon();
        }
        self.driver.done = 0;
        self.driver.garbage = (0, None);
        let result = self.drive(ops, progress).await;
        if result.is_err() {
            self.abandon();
        }
        result
    }

    /// Drops every request of the operation that ended or was interrupted, and what was
    /// queued for sending, holding their sequence numbers back from new requests.
    fn abandon(&mut self) {
        let now = self.driver.now();
        for (_, bytes) in self.driver.window.abandon(now) {
            self.driver.spare.push(bytes);
        }
        self.link.discard_unsent();
    }
}
