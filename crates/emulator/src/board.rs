//! [`Board`]: a SpiNNaker-like board on a UDP socket (and, if asked, a TCP listener for
//! the same SCP packets in SFTP-style frames), its settings and its counters; the logic
//! lives in `logic`, the sockets in `serve`.

use core::future::Future;
use core::net::SocketAddr;
use core::time::Duration;
use std::io;
use std::sync::Arc;

use tokio::net::{TcpListener, UdpSocket};
use tokio::task::JoinHandle;
use volley_transport_udp::checks::{check_delay, check_fraction, panic_message};

use crate::costs::ScampCosts;
use crate::logic::Fabric;
use crate::pacer::Pacer;
use crate::serve::{serve_tcp, serve_udp};

/// Where SDRAM starts on every chip.
pub const SDRAM_BASE: u32 = 0x6000_0000;
/// Where the same SDRAM is reached again without the write buffer (SC&MP reads and
/// writes both).
pub const SDRAM_UNBUFFERED: u32 = 0x7000_0000;
/// SDRAM per chip: 128 MiB.
pub const SDRAM_SIZE: u32 = 128 << 20;

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
    /// board's dedicated core answers without a wake-up; zero parks at once. Each empty
    /// poll yields the CPU, so on a machine with no core to spare the spin costs the
    /// client nothing.
    pub spin: Duration,
    /// SC&MP's costs (its monitor's time per request, P2P forwarding, its buffers), or
    /// `None` to answer as fast as the host allows.
    pub scamp: Option<ScampCosts>,
    /// The most bytes of written memory the board holds, over all chips (a FILL holds
    /// none: a filled page is one word). A WRITE or FILL that would pass it is answered
    /// `RC_BUF` and changes nothing.
    pub memory_budget: usize,
    /// TCP connections open at once; further peers wait in the kernel's backlog until
    /// one closes.
    pub max_tcp_connections: usize,
}

/// A running emulated board.
#[derive(Debug)]
pub struct Board {
    udp_addr: SocketAddr,
    tcp_addr: Option<SocketAddr>,
    fabric: Arc<Fabric>,
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
    /// Requests dropped because every message buffer was held (SC&MP's costs on).
    pub dropped_no_buffer: u64,
    /// Datagrams over 282 bytes, dropped unread.
    pub dropped_oversize: u64,
    /// Datagrams too short to carry a sequence number, dropped.
    pub dropped_malformed: u64,
    /// Replies lost inside the board (fault injection).
    pub replies_lost: u64,
    /// Bytes of written memory held (filled pages hold none).
    pub memory_bytes: u64,
}

impl BoardConfig {
    /// Checks every number before anything is bound: delays of at most
    /// [`MAX_DELAY`](volley_transport_udp::checks::MAX_DELAY), a reply-loss fraction in 0..=1, a spin of at most
    /// a second, a tag pool of at least one, a TTO code of 0..=15, at least one TCP
    /// connection.
    pub fn check(&self) -> io::Result<()> {
        check_delay("processing delay", self.processing_delay)?;
        check_delay("hop latency", self.hop_latency)?;
        check_fraction("reply loss", self.reply_loss)?;
        let invalid = |what: String| Err(io::Error::new(io::ErrorKind::InvalidInput, what));
        if self.spin > Duration::from_secs(1) {
            return invalid(format!("a spin of {:?} is over a second", self.spin));
        }
        if self.max_tcp_connections == 0 {
            return invalid("a cap of 0 TCP connections accepts nothing".into());
        }
        if self.pool_size == 0 {
            return invalid("a transient-tag pool of 0 answers nothing over UDP".into());
        }
        if let Some(costs) = &self.scamp {
            costs.check()?;
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
    /// 256 MiB of written memory at most, 256 TCP connections.
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
            max_tcp_connections: 256,
            scamp: None,
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
        let for_pacer = socket.try_clone()?;
        let socket = UdpSocket::from_std(socket)?;
        let udp_addr = socket.local_addr()?;
        let fabric = Arc::new(Fabric::single(config));
        let pacer = Arc::new(Pacer::start(fabric.clone(), vec![for_pacer]));
        let mut tasks = vec![tokio::spawn(serve_udp(socket, fabric.clone(), pacer, 0))];
        let mut tcp_addr = None;
        if let Some(addr) = tcp {
            let listener = TcpListener::bind(addr).await?;
            tcp_addr = Some(listener.local_addr()?);
            tasks.push(tokio::spawn(serve_tcp(listener, fabric.clone())));
        }
        Ok(Self {
            udp_addr,
            tcp_addr,
            fabric,
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
        self.fabric.boards[0].stats()
    }

    /// Copies `len` bytes of chip (`x`, `y`)'s SDRAM from `address`, or `None` outside it.
    pub fn read_memory(&self, x: u8, y: u8, address: u32, len: usize) -> Option<Vec<u8>> {
        self.fabric.boards[0].read_memory(x, y, address, len)
    }

    /// Writes into chip (`x`, `y`)'s SDRAM; `false` outside it or past the memory budget.
    pub fn write_memory(&self, x: u8, y: u8, address: u32, data: &[u8]) -> bool {
        self.fabric.boards[0]
            .lock()
            .memory
            .write(x, y, address, data)
            .is_ok()
    }

    /// The transient-tag timeout code in force.
    pub fn tto(&self) -> u8 {
        self.fabric.boards[0].lock().tto
    }

    /// Waits until a serving task stops, which it does only when it fails, and says why
    /// (a socket error, or a panic): a process that runs a board should end with this
    /// error rather than go on answering nothing.
    pub async fn stopped(&mut self) -> io::Error {
        first_to_stop(&mut self.tasks).await
    }

    /// Stops serving and waits for the tasks to end.
    pub async fn shutdown(mut self) {
        shut_down(&mut self.tasks).await;
    }
}

/// Waits for the first of `tasks` to end and says why; a finished task is removed, as
/// it must not be polled again.
pub(crate) async fn first_to_stop(tasks: &mut Vec<JoinHandle<io::Result<()>>>) -> io::Error {
    if tasks.is_empty() {
        return io::Error::other("the board was shut down");
    }
    let (result, i) = core::future::poll_fn(|cx| {
        for (i, task) in tasks.iter_mut().enumerate() {
            if let core::task::Poll::Ready(result) = core::pin::Pin::new(task).poll(cx) {
                return core::task::Poll::Ready((result, i));
            }
        }
        core::task::Poll::Pending
    })
    .await;
    tasks.remove(i);
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

/// Aborts `tasks` and waits for them to end.
pub(crate) async fn shut_down(tasks: &mut Vec<JoinHandle<io::Result<()>>>) {
    for task in tasks.drain(..) {
        task.abort();
        let _ = task.await;
    }
}

impl Drop for Board {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}
