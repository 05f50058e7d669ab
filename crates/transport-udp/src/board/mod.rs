//! [`Board`]: a SpiNNaker-like board on a UDP socket, answering SCP as SC&MP does, with
//! its 8-entry transient-IPTag pool (requests beyond it are dropped, as on hardware),
//! lazily allocated SDRAM per chip, and knobs for delay and loss. It also listens on TCP
//! for the same SCP packets carried in SFTP-style frames.

use core::cmp::Reverse;
use core::future::Future;
use core::net::SocketAddr;
use core::sync::atomic::{AtomicU64, Ordering};
use core::time::Duration;
use std::collections::BinaryHeap;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::BytesMut;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use volley_proto::wire::frame::{self, Decoder};
use volley_proto::wire::scp::{
    self, Command, DataType, MAX_DATAGRAM_LEN, ReplyRepr, RequestRepr, ReturnCode, TtoInfo,
    Version, VersionInfo,
};
use volley_proto::wire::sdp::{self, Address};

use crate::SCP_FRAME_TYPE;
use crate::datagrams::{Datagrams, Sent};

/// Where SDRAM starts on every chip.
pub const SDRAM_BASE: u32 = 0x6000_0000;
/// SDRAM per chip: 128 MiB.
pub const SDRAM_SIZE: u32 = 128 << 20;

mod memory;

use memory::Memory;

/// Emulator settings.
#[derive(Clone, Debug, PartialEq)]
pub struct BoardConfig {
    /// Chips across; chip addresses outside `width` x `height` answer `RC_ROUTE`.
    pub width: u8,
    /// Chips up.
    pub height: u8,
    /// Time to process each request before replying.
    pub processing_delay: Duration,
    /// Extra latency per P2P hop: a request to chip (x, y) waits `(x + y)` times this.
    pub hop_latency: Duration,
    /// Chance that a reply is lost inside the board; its tag stays taken until the
    /// transient-tag timeout expires, as when a P2P reply never comes back.
    pub reply_loss: f64,
    /// Seed for the loss decisions.
    pub seed: u64,
    /// Transient IPTags: requests waiting for a reply at once over UDP.
    pub pool_size: u8,
    /// Transient-tag timeout code at start (9 = 2.56 s, SC&MP's default).
    pub tto: u8,
    /// After answering, keep polling the socket this long before parking the task, as a
    /// board's dedicated core answers without a wake-up; zero parks at once.
    pub spin: Duration,
    /// The most bytes of written memory the board holds, over all chips (a FILL holds
    /// none: a filled page is one word). A WRITE or FILL that would pass it is answered
    /// `RC_BUF` and changes nothing.
    pub memory_budget: usize,
}

/// A running emulated board.
#[derive(Debug)]
pub struct Board {
    udp_addr: SocketAddr,
    tcp_addr: Option<SocketAddr>,
    shared: Arc<Shared>,
    tasks: Vec<JoinHandle<io::Result<()>>>,
}

/// Counters of what the board has seen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BoardStats {
    /// Requests received (UDP and TCP).
    pub requests: u64,
    /// Replies sent.
    pub replies: u64,
    /// Replies with a return code other than `RC_OK`.
    pub error_replies: u64,
    /// Requests dropped because every transient tag was taken.
    pub dropped_no_tag: u64,
    /// Datagrams over 282 bytes, dropped unread.
    pub dropped_oversize: u64,
    /// Datagrams too short to carry a sequence number, dropped.
    pub dropped_malformed: u64,
    /// Replies lost inside the board (fault injection).
    pub replies_lost: u64,
    /// Bytes of written memory held (filled pages hold none).
    pub memory_bytes: u64,
}

#[derive(Debug)]
struct Shared {
    config: BoardConfig,
    state: Mutex<State>,
    requests: AtomicU64,
    replies: AtomicU64,
    error_replies: AtomicU64,
    dropped_no_tag: AtomicU64,
    dropped_oversize: AtomicU64,
    dropped_malformed: AtomicU64,
    replies_lost: AtomicU64,
}

#[derive(Debug)]
struct State {
    memory: Memory,
    tto: u8,
    /// When each transient tag frees; `None` = free.
    tags: Vec<Option<Instant>>,
    rng: StdRng,
}

/// What the board does with one request.
#[derive(Debug, PartialEq, Eq)]
enum Action {
    /// Reply with these many bytes of the output buffer after `delay`.
    Reply { len: usize, delay: Duration },
    /// Nothing to send.
    Silent,
}

/// Replies waiting for their time, earliest first.
#[derive(Debug)]
struct Schedule<T: Ord> {
    heap: BinaryHeap<Reverse<(Instant, u64, T)>>,
    order: u64,
}

impl BoardConfig {
    /// Checks every number before anything is bound: delays of at most
    /// [`MAX_DELAY`](crate::MAX_DELAY), a reply-loss fraction in 0..=1, a spin of at most
    /// a second, a tag pool of at least one, a TTO code of 0..=15.
    pub fn check(&self) -> io::Result<()> {
        crate::check_delay("processing delay", self.processing_delay)?;
        crate::check_delay("hop latency", self.hop_latency)?;
        crate::check_fraction("reply loss", self.reply_loss)?;
        let invalid = |what: String| Err(io::Error::new(io::ErrorKind::InvalidInput, what));
        if self.spin > Duration::from_secs(1) {
            return invalid(format!("a spin of {:?} is over a second", self.spin));
        }
        if self.pool_size == 0 {
            return invalid("a transient-tag pool of 0 answers nothing over UDP".into());
        }
        if self.tto > 15 {
            return invalid(format!(
                "transient-tag timeout code {} is not in 0..=15",
                self.tto
            ));
        }
        Ok(())
    }
}

impl Default for BoardConfig {
    /// An 8 x 8 board, no delay, no loss, 8 transient tags, TTO 9, 50 us of polling,
    /// 256 MiB of written memory at most.
    fn default() -> Self {
        Self {
            width: 8,
            height: 8,
            processing_delay: Duration::ZERO,
            hop_latency: Duration::ZERO,
            reply_loss: 0.0,
            seed: 0,
            pool_size: 8,
            tto: 9,
            spin: Duration::from_micros(50),
            memory_budget: 256 << 20,
        }
    }
}

impl Board {
    /// Binds the UDP socket (and the TCP listener, if asked) and starts serving.
    /// Port 0 picks a free port; see [`Board::udp_addr`].
    pub async fn bind(
        udp: SocketAddr,
        tcp: Option<SocketAddr>,
        config: BoardConfig,
    ) -> io::Result<Self> {
        config.check()?;
        let socket = std::net::UdpSocket::bind(udp)?;
        socket.set_nonblocking(true)?;
        let socket = UdpSocket::from_std(socket)?;
        let udp_addr = socket.local_addr()?;
        let shared = Arc::new(Shared::new(config));
        let mut tasks = vec![tokio::spawn(serve_udp(socket, shared.clone()))];
        let mut tcp_addr = None;
        if let Some(addr) = tcp {
            let listener = TcpListener::bind(addr).await?;
            tcp_addr = Some(listener.local_addr()?);
            tasks.push(tokio::spawn(serve_tcp(listener, shared.clone())));
        }
        Ok(Self {
            udp_addr,
            tcp_addr,
            shared,
            tasks,
        })
    }

    /// Where the board listens for SCP over UDP.
    pub fn udp_addr(&self) -> SocketAddr {
        self.udp_addr
    }

    /// Where the board listens for framed SCP over TCP, if it does.
    pub fn tcp_addr(&self) -> Option<SocketAddr> {
        self.tcp_addr
    }

    /// The counters so far.
    pub fn stats(&self) -> BoardStats {
        let s = &self.shared;
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        BoardStats {
            requests: get(&s.requests),
            replies: get(&s.replies),
            error_replies: get(&s.error_replies),
            dropped_no_tag: get(&s.dropped_no_tag),
            dropped_oversize: get(&s.dropped_oversize),
            dropped_malformed: get(&s.dropped_malformed),
            replies_lost: get(&s.replies_lost),
            memory_bytes: s.lock().memory.held_bytes() as u64,
        }
    }

    /// Copies `len` bytes of chip (`x`, `y`)'s SDRAM from `address`, or `None` outside it.
    pub fn read_memory(&self, x: u8, y: u8, address: u32, len: usize) -> Option<Vec<u8>> {
        if len > SDRAM_SIZE as usize {
            return None;
        }
        let mut out = vec![0; len];
        let memory = &self.shared.lock().memory;
        memory.read(x, y, address, &mut out).ok().map(|()| out)
    }

    /// Writes into chip (`x`, `y`)'s SDRAM; `false` outside it or past the memory budget.
    pub fn write_memory(&self, x: u8, y: u8, address: u32, data: &[u8]) -> bool {
        self.shared.lock().memory.write(x, y, address, data).is_ok()
    }

    /// The transient-tag timeout code in force.
    pub fn tto(&self) -> u8 {
        self.shared.lock().tto
    }

    /// Waits until a serving task stops, which it does only when it fails, and says why
    /// (a socket error, or a panic): a process that runs a board should end with this
    /// error rather than go on answering nothing.
    pub async fn stopped(&mut self) -> io::Error {
        if self.tasks.is_empty() {
            return io::Error::other("the board was shut down");
        }
        let (result, i) = core::future::poll_fn(|cx| {
            for (i, task) in self.tasks.iter_mut().enumerate() {
                if let core::task::Poll::Ready(result) = core::pin::Pin::new(task).poll(cx) {
                    return core::task::Poll::Ready((result, i));
                }
            }
            core::task::Poll::Pending
        })
        .await;
        // A finished task must not be polled again (by shutdown).
        self.tasks.remove(i);
        match result {
            Ok(Err(e)) => e,
            Ok(Ok(())) => io::Error::other("a serving task ended"),
            Err(e) if e.is_panic() => io::Error::other(format!(
                "a serving task panicked: {}",
                panic_message(&e.into_panic())
            )),
            Err(e) => io::Error::other(format!("a serving task was cancelled: {e}")),
        }
    }

    /// Stops serving and waits for the tasks to end.
    pub async fn shutdown(mut self) {
        for task in self.tasks.drain(..) {
            task.abort();
            let _ = task.await;
        }
    }
}

impl Drop for Board {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Shared {
    fn new(config: BoardConfig) -> Self {
        Self {
            state: Mutex::new(State {
                memory: Memory::new(config.memory_budget),
                tto: config.tto,
                tags: vec![None; usize::from(config.pool_size)],
                rng: StdRng::seed_from_u64(config.seed),
            }),
            config,
            requests: AtomicU64::new(0),
            replies: AtomicU64::new(0),
            error_replies: AtomicU64::new(0),
            dropped_no_tag: AtomicU64::new(0),
            dropped_oversize: AtomicU64::new(0),
            dropped_malformed: AtomicU64::new(0),
            replies_lost: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave memory half-written in a way that
        // matters to an emulator; carry on with the data.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Handles one request, writing any reply into `out`. Checks as SC&MP does:
    /// oversize datagrams dropped, a short SDP part answered with `RC_LEN`, unknown
    /// commands `RC_CMD`, bad arguments `RC_ARG`.
    fn handle(
        &self,
        state: &mut State,
        request: &[u8],
        out: &mut [u8; MAX_DATAGRAM_LEN],
    ) -> Action {
        self.requests.fetch_add(1, Ordering::Relaxed);
        if request.len() > MAX_DATAGRAM_LEN {
            self.dropped_oversize.fetch_add(1, Ordering::Relaxed);
            return Action::Silent;
        }
        let Ok(parsed) = RequestRepr::parse(request) else {
            // Under 24 bytes of SDP: RC_LEN, if there is a sequence number to echo.
            let Ok(packet) = scp::Packet::new_checked(request) else {
                self.dropped_malformed.fetch_add(1, Ordering::Relaxed);
                return Action::Silent;
            };
            let header = sdp::Repr::parse(&packet.sdp());
            let reply = ReplyRepr {
                sdp: header.reply(),
                rc: ReturnCode::LEN,
                seq: packet.seq(),
                body: &[],
            };
            return self.reply(&reply, out, Duration::ZERO, header.flags.reply_expected());
        };
        let mut dest = parsed.sdp.dest;
        if (dest.x, dest.y) == (255, 255) {
            // The Ethernet-attached chip answers for "whichever chip you are".
            (dest.x, dest.y) = (0, 0);
        }
        let config = &self.config;
        let hops = u32::from(dest.x) + u32::from(dest.y);
        let delay = config.processing_delay + config.hop_latency * hops;
        let wants_reply = parsed.sdp.flags.reply_expected();
        if dest.x >= config.width || dest.y >= config.height {
            return self.reply(&parsed.reply(ReturnCode::ROUTE), out, delay, wants_reply);
        }
        let mut body = [0u8; scp::MAX_DATA_LEN + 12];
        let (rc, body_len) = execute(state, &parsed, dest, &mut body);
        let reply = ReplyRepr {
            body: &body[..body_len],
            ..parsed.reply(rc)
        };
        self.reply(&reply, out, delay, wants_reply)
    }

    fn reply(
        &self,
        reply: &ReplyRepr<'_>,
        out: &mut [u8; MAX_DATAGRAM_LEN],
        delay: Duration,
        wanted: bool,
    ) -> Action {
        if !wanted {
            return Action::Silent;
        }
        if reply.rc != ReturnCode::OK {
            self.error_replies.fetch_add(1, Ordering::Relaxed);
        }
        match reply.emit(out) {
            Ok(len) => Action::Reply { len, delay },
            Err(_) => Action::Silent,
        }
    }
}

/// Runs one parsed request against the board state; returns the return code and the
/// reply body written into `body`.
fn execute(
    state: &mut State,
    request: &RequestRepr<'_>,
    chip: Address,
    body: &mut [u8],
) -> (ReturnCode, usize) {
    match request.cmd {
        Command::SVER => {
            let info = VersionInfo {
                core: chip,
                phys_cpu: chip.cpu,
                buffer_size: scp::MAX_DATA_LEN as u16,
                build_date: 0,
                name: "SC&MP/SpiNNaker",
                version: Version::Semantic {
                    major: 4,
                    minor: 0,
                    patch: 0,
                },
            };
            match info.emit(body) {
                Ok(n) => (ReturnCode::OK, n),
                Err(_) => (ReturnCode::BUF, 0),
            }
        }
        Command::READ => match request.transfer_args() {
            Ok((address, len, ty)) if aligned(address, len, ty) => {
                match state.memory.read(chip.x, chip.y, address, &mut body[..len]) {
                    Ok(()) => (ReturnCode::OK, len),
                    Err(refused) => (refused.code(), 0),
                }
            }
            _ => (ReturnCode::ARG, 0),
        },
        Command::WRITE => match request.transfer_args() {
            Ok((address, len, ty)) if aligned(address, len, ty) && len == request.data.len() => {
                match state.memory.write(chip.x, chip.y, address, request.data) {
                    Ok(()) => (ReturnCode::OK, 0),
                    Err(refused) => (refused.code(), 0),
                }
            }
            _ => (ReturnCode::ARG, 0),
        },
        Command::FILL => {
            let [address, value, len] = request.args;
            if address % 4 != 0 || len % 4 != 0 {
                return (ReturnCode::ARG, 0);
            }
            match state.memory.fill(chip.x, chip.y, address, value, len) {
                Ok(()) => (ReturnCode::OK, 0),
                Err(refused) => (refused.code(), 0),
            }
        }
        Command::IPTAG if request.args[0] >> 16 == scp::IPTAG_TTO => {
            let info = TtoInfo {
                fixed_tags: 8,
                pool_size: state.tags.len() as u8,
                record_size: 32,
                tto: state.tto,
            };
            // 0..=15 sets the timeout; anything larger only queries it.
            if let code @ 0..=15 = request.args[1] {
                state.tto = code as u8;
            }
            let out = info.to_body();
            body[..4].copy_from_slice(&out);
            (ReturnCode::OK, 4)
        }
        Command::IPTAG => (ReturnCode::ARG, 0),
        _ => (ReturnCode::CMD, 0),
    }
}

/// SC&MP moves words and halfwords only at matching alignment.
fn aligned(address: u32, len: usize, ty: DataType) -> bool {
    let unit = match ty {
        DataType::Byte => 1,
        DataType::Short => 2,
        DataType::Word => 4,
    };
    address % unit == 0 && len % unit as usize == 0
}

impl State {
    /// Takes a free transient tag until `until`; `false` if all are taken.
    fn take_tag(&mut self, now: Instant, until: Instant) -> bool {
        match self
            .tags
            .iter_mut()
            .find(|t| t.is_none_or(|busy| busy <= now))
        {
            Some(tag) => {
                *tag = Some(until);
                true
            }
            None => false,
        }
    }

    fn tto_duration(&self) -> Option<Duration> {
        scp::tto_millis(self.tto).map(Duration::from_millis)
    }
}

impl<T: Ord> Default for Schedule<T> {
    fn default() -> Self {
        Self {
            heap: BinaryHeap::new(),
            order: 0,
        }
    }
}

impl<T: Ord> Schedule<T> {
    fn push(&mut self, at: Instant, item: T) {
        self.order += 1;
        self.heap.push(Reverse((at, self.order, item)));
    }

    fn next_at(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse((at, _, _))| *at)
    }

    fn pop_due(&mut self, now: Instant) -> Option<T> {
        if self.next_at()? > now {
            return None;
        }
        self.heap.pop().map(|Reverse((_, _, item))| item)
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => core::future::pending().await,
    }
}

/// The UDP side: drains every ready datagram, answers each through a transient tag, and
/// sends each batch of replies in as few system calls as the kernel allows. After
/// traffic it polls the socket for `spin` before parking, as a board's dedicated core
/// would answer without a wake-up.
async fn serve_udp(socket: UdpSocket, shared: Arc<Shared>) -> io::Result<()> {
    let mut io = Datagrams::new(&socket);
    let mut out = [0u8; MAX_DATAGRAM_LEN];
    let mut delayed: Schedule<(Vec<u8>, SocketAddr)> = Schedule::default();
    let spin = shared.config.spin;
    loop {
        let mut active = false;
        tokio::select! {
            biased;
            ready = socket.readable() => {
                ready?;
                loop {
                    match io.rx.try_recv(&socket, false) {
                        Ok(()) => {
                            active = true;
                            answer(&socket, &mut io, &shared, &mut out, &mut delayed).await;
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        // ICMP errors from earlier replies to vanished clients.
                        Err(_) => continue,
                    }
                }
            }
            () = sleep_until(delayed.next_at()) => {}
        }
        if active && !spin.is_zero() {
            let mut until = std::time::Instant::now() + spin;
            loop {
                match io.rx.try_recv(&socket, true) {
                    Ok(()) => {
                        until = std::time::Instant::now() + spin;
                        answer(&socket, &mut io, &shared, &mut out, &mut delayed).await;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        if std::time::Instant::now() >= until {
                            break;
                        }
                        core::hint::spin_loop();
                    }
                    Err(_) => {}
                }
                if delayed.next_at().is_some_and(|at| at <= Instant::now()) {
                    break;
                }
            }
        }
        let now = Instant::now();
        while let Some((reply, to)) = delayed.pop_due(now) {
            let sent = io.tx.queue(&socket, &reply, to).await;
            count_sent(&shared, sent);
        }
        count_sent(&shared, io.tx.flush(&socket).await);
    }
}

/// Handles the datagrams of one receive call and sends their replies.
async fn answer(
    socket: &UdpSocket,
    io: &mut Datagrams,
    shared: &Shared,
    out: &mut [u8; MAX_DATAGRAM_LEN],
    delayed: &mut Schedule<(Vec<u8>, SocketAddr)>,
) {
    for (datagram, from) in io.rx.datagrams() {
        let Some(from) = from else { continue };
        if let Some(len) = on_datagram(shared, datagram, from, out, delayed) {
            count_sent(shared, io.tx.queue(socket, &out[..len], from).await);
        }
    }
    count_sent(shared, io.tx.flush(socket).await);
}

/// The board's request handling with no sockets, for fuzzing (`--features fuzzing`).
#[cfg(feature = "fuzzing")]
#[derive(Debug)]
pub struct Handler {
    shared: Shared,
    delayed: Schedule<(Vec<u8>, SocketAddr)>,
}

#[cfg(feature = "fuzzing")]
impl Handler {
    /// A board with these settings (checked as [`Board::bind`] checks them).
    pub fn new(config: BoardConfig) -> io::Result<Self> {
        config.check()?;
        Ok(Self {
            shared: Shared::new(config),
            delayed: Schedule::default(),
        })
    }

    /// Answers one datagram as the board would: the reply's bytes, or `None` (no reply
    /// wanted, dropped, or delayed).
    pub fn handle(&mut self, datagram: &[u8]) -> Option<Vec<u8>> {
        let mut out = [0u8; MAX_DATAGRAM_LEN];
        let from = SocketAddr::from(([127, 0, 0, 1], 1));
        let len = on_datagram(&self.shared, datagram, from, &mut out, &mut self.delayed)?;
        Some(out[..len].to_vec())
    }

    /// Bytes of written memory held.
    pub fn memory_bytes(&self) -> usize {
        self.shared.lock().memory.held_bytes()
    }
}

/// Counts the replies a send delivered (a failed send loses them, as a dropped reply).
fn count_sent(shared: &Shared, sent: io::Result<Sent>) {
    if let Ok(sent) = sent {
        shared
            .replies
            .fetch_add(sent.datagrams as u64, Ordering::Relaxed);
    }
}

/// Handles one datagram: takes a transient tag for its reply (dropping the request if
/// none is free) and returns the length of a reply to send now, or schedules a delayed
/// one.
fn on_datagram(
    shared: &Shared,
    datagram: &[u8],
    from: SocketAddr,
    out: &mut [u8; MAX_DATAGRAM_LEN],
    delayed: &mut Schedule<(Vec<u8>, SocketAddr)>,
) -> Option<usize> {
    let now = Instant::now();
    let mut state = shared.lock();
    let Action::Reply { len, delay } = shared.handle(&mut state, datagram, out) else {
        return None;
    };
    let lost =
        shared.config.reply_loss > 0.0 && state.rng.random_bool(shared.config.reply_loss.min(1.0));
    // The tag is held until the reply leaves or, if the reply is lost, until the
    // transient-tag timeout frees it (code 0: never).
    let hold = if lost {
        state
            .tto_duration()
            .map_or(now + Duration::from_secs(86_400 * 365), |t| now + delay + t)
    } else {
        now + delay
    };
    if !state.take_tag(now, hold) {
        shared.dropped_no_tag.fetch_add(1, Ordering::Relaxed);
        return None;
    }
    if lost {
        shared.replies_lost.fetch_add(1, Ordering::Relaxed);
        return None;
    }
    if delay.is_zero() {
        Some(len)
    } else {
        delayed.push(now + delay, (out[..len].to_vec(), from));
        None
    }
}

async fn serve_tcp(listener: TcpListener, shared: Arc<Shared>) -> io::Result<()> {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let _ = stream.set_nodelay(true);
                connections.spawn(serve_connection(stream, shared.clone()));
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// One TCP connection: frames in, framed replies out, all replies to one read written
/// together. No transient tags over TCP (there is no IPTag to hold).
async fn serve_connection(mut stream: TcpStream, shared: Arc<Shared>) {
    let decoder = Decoder::new(frame::HEADER_LEN + MAX_DATAGRAM_LEN);
    let mut read_buf = BytesMut::with_capacity(64 * 1024);
    let mut write_buf = Vec::with_capacity(64 * 1024);
    let mut replies = 0u64;
    let mut out = [0u8; MAX_DATAGRAM_LEN];
    let mut delayed: Schedule<Vec<u8>> = Schedule::default();
    loop {
        tokio::select! {
            biased;
            n = stream.read_buf(&mut read_buf) => {
                match n {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
                let now = Instant::now();
                loop {
                    let (id, used, action) = match decoder.decode(&read_buf) {
                        Ok(Some((frame, used))) if frame.ty == SCP_FRAME_TYPE => {
                            let mut state = shared.lock();
                            let datagram = &read_buf[frame::HEADER_LEN..used];
                            (frame.id, used, shared.handle(&mut state, datagram, &mut out))
                        }
                        Ok(None) => break,
                        // A frame of another type or a broken length: the stream's framing
                        // cannot be trusted any more.
                        Ok(Some(_)) | Err(_) => return,
                    };
                    let _ = read_buf.split_to(used);
                    if let Action::Reply { len, delay } = action {
                        let Ok(header) = frame::Header::new(SCP_FRAME_TYPE, id, len) else { return };
                        if delay.is_zero() {
                            replies += 1;
                            write_buf.extend_from_slice(&header.encode());
                            write_buf.extend_from_slice(&out[..len]);
                        } else {
                            let mut framed = header.encode().to_vec();
                            framed.extend_from_slice(&out[..len]);
                            delayed.push(now + delay, framed);
                        }
                    }
                }
                if read_buf.capacity() < 4096 {
                    read_buf.reserve(64 * 1024);
                }
            }
            () = sleep_until(delayed.next_at()) => {}
        }
        let now = Instant::now();
        while let Some(framed) = delayed.pop_due(now) {
            replies += 1;
            write_buf.extend_from_slice(&framed);
        }
        if !write_buf.is_empty() {
            if stream.write_all(&write_buf).await.is_err() {
                return;
            }
            shared.replies.fetch_add(replies, Ordering::Relaxed);
            replies = 0;
            write_buf.clear();
        }
    }
}

/// The text of a panic's payload.
pub(crate) fn panic_message(payload: &(dyn core::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_owned())
}
