//! [`TcpLinkSim`]: the link simulator's TCP relay mode. Each accepted connection is
//! relayed to the upstream with a delay, jitter and a rate cap on each direction, so TCP
//! can run at the same RTT as UDP through [`LinkSim`](crate::LinkSim). Loss does not
//! apply: bytes relayed in user space cannot be lost the way packets are (TCP would only
//! resend them on the relay's own loopback hops).
//!
//! Each direction of each connection has a reader and a writer thread: the reader stamps
//! every chunk with when it may leave (now + delay + jitter, never before the chunk ahead
//! of it, and after the one ahead has had its time on the wire if a rate is set), and the
//! writer sleeps, then spins the last stretch, until then. At most 64 chunks wait per
//! direction, so a reader that gets ahead blocks and TCP's own flow control holds the
//! sender back.
//!
//! ```
//! use std::io::{Read, Write};
//! use std::net::{TcpListener, TcpStream};
//! use std::time::{Duration, Instant};
//! use volley_netsim::tcp::{TcpLinkConfig, TcpLinkSim};
//!
//! # fn main() -> std::io::Result<()> {
//! let echo = TcpListener::bind("127.0.0.1:0")?;
//! let upstream = echo.local_addr()?;
//! std::thread::spawn(move || {
//!     let (mut s, _) = echo.accept().unwrap();
//!     let mut buf = [0u8; 4];
//!     s.read_exact(&mut buf).unwrap();
//!     s.write_all(&buf).unwrap();
//! });
//! let config = TcpLinkConfig { delay: Duration::from_millis(5), ..TcpLinkConfig::default() };
//! let link = TcpLinkSim::start("127.0.0.1:0".parse().unwrap(), upstream, config)?;
//! let mut client = TcpStream::connect(link.local_addr())?;
//! let start = Instant::now();
//! client.write_all(b"ping")?;
//! let mut buf = [0u8; 4];
//! client.read_exact(&mut buf)?;
//! assert_eq!(&buf, b"ping");
//! assert!(start.elapsed() >= Duration::from_millis(10), "5 ms each way");
//! # Ok(())
//! # }
//! ```

use core::net::SocketAddr;
use core::num::NonZeroU64;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use core::time::Duration;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread;
use std::time::Instant;

use crate::checks::{ConfigError, check_delay};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::worker::Worker;

/// Settings of the TCP relay, applied to each direction separately.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcpLinkConfig {
    /// One-way delay added to every chunk (the RTT grows by twice this).
    pub delay: Duration,
    /// Extra delay drawn uniformly from `0..=jitter` per chunk (never reordering bytes).
    pub jitter: Duration,
    /// Bits per second each direction carries; `None` = no cap.
    pub rate_bps: Option<NonZeroU64>,
    /// Seed for the jitter.
    pub seed: u64,
    /// Connections relayed at once; more wait in the listener's backlog.
    pub max_connections: usize,
}

impl Default for TcpLinkConfig {
    fn default() -> Self {
        Self {
            delay: Duration::ZERO,
            jitter: Duration::ZERO,
            rate_bps: None,
            seed: 0,
            max_connections: 64,
        }
    }
}

impl TcpLinkConfig {
    /// Checks every number before anything is bound: delay and jitter of at most an hour,
    /// room for at least one connection.
    pub fn check(&self) -> Result<(), ConfigError> {
        check_delay("delay", self.delay)?;
        check_delay("jitter", self.jitter)?;
        if self.max_connections == 0 {
            return Err(ConfigError::NoConnections);
        }
        Ok(())
    }
}

/// Counters of a [`TcpLinkSim`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpLinkStats {
    /// Connections relayed so far.
    pub connections: u64,
    /// Bytes relayed towards the upstream.
    pub bytes_up: u64,
    /// Bytes relayed back to clients.
    pub bytes_down: u64,
}

#[derive(Default)]
struct Counters {
    connections: AtomicU64,
    bytes_up: AtomicU64,
    bytes_down: AtomicU64,
    open: AtomicU64,
}

/// A running TCP relay; stops accepting when dropped.
#[derive(Debug)]
pub struct TcpLinkSim {
    addr: SocketAddr,
    counters: Arc<Counters>,
    worker: Worker,
}

impl core::fmt::Debug for Counters {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Counters").finish_non_exhaustive()
    }
}

/// Chunks waiting per direction.
const QUEUE: usize = 64;
/// Bytes per read.
const CHUNK: usize = 64 * 1024;
/// The writer spins (rather than sleeps) this close to a chunk's time.
const SPIN: Duration = Duration::from_micros(200);

impl TcpLinkSim {
    /// Binds `listen` (port 0 picks one) and relays each connection to `upstream` until
    /// stopped or dropped. The settings are checked first.
    pub fn start(
        listen: SocketAddr,
        upstream: SocketAddr,
        config: TcpLinkConfig,
    ) -> io::Result<Self> {
        config.check()?;
        let listener = TcpListener::bind(listen)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let counters = Arc::new(Counters::default());
        let (flag, shared) = (stop.clone(), counters.clone());
        let thread = thread::Builder::new()
            .name("volley-netsim-tcp".into())
            .spawn(move || accept_loop(&listener, upstream, &config, &flag, &shared))?;
        Ok(Self {
            addr,
            counters,
            worker: Worker {
                stop,
                thread: Some(thread),
            },
        })
    }

    /// Where clients connect.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The counters so far.
    pub fn stats(&self) -> TcpLinkStats {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        TcpLinkStats {
            connections: get(&self.counters.connections),
            bytes_up: get(&self.counters.bytes_up),
            bytes_down: get(&self.counters.bytes_down),
        }
    }

    /// Stops accepting (connections already relayed go on until either end closes).
    pub fn stop(mut self) {
        self.worker.halt();
    }
}

fn accept_loop(
    listener: &TcpListener,
    upstream: SocketAddr,
    config: &TcpLinkConfig,
    stop: &AtomicBool,
    counters: &Arc<Counters>,
) {
    let mut seed = config.seed;
    while !stop.load(Ordering::Relaxed) {
        if counters.open.load(Ordering::Relaxed) >= config.max_connections as u64 {
            thread::sleep(Duration::from_millis(5));
            continue;
        }
        match listener.accept() {
            Ok((client, _)) => {
                seed = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
                if let Err(e) = relay(client, upstream, config, seed, counters) {
                    eprintln!("volley-netsim: cannot relay a connection to {upstream}: {e}");
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                thread::sleep(Duration::from_millis(2));
            }
            Err(e) => {
                eprintln!("volley-netsim: accept failed: {e}");
                thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

fn relay(
    client: TcpStream,
    upstream: SocketAddr,
    config: &TcpLinkConfig,
    seed: u64,
    counters: &Arc<Counters>,
) -> io::Result<()> {
    client.set_nonblocking(false)?;
    client.set_nodelay(true)?;
    let server = TcpStream::connect(upstream)?;
    server.set_nodelay(true)?;
    counters.connections.fetch_add(1, Ordering::Relaxed);
    counters.open.fetch_add(1, Ordering::Relaxed);
    // Two directions; the connection counts as open until both have ended.
    let ends = Arc::new(AtomicU64::new(2));
    for (up, from, to) in [
        (true, client.try_clone()?, server.try_clone()?),
        (false, server, client),
    ] {
        let (tx, rx) = sync_channel(QUEUE);
        let config = config.clone();
        let counters = counters.clone();
        let ends = ends.clone();
        let reader_from = from.try_clone()?;
        thread::Builder::new()
            .name("volley-netsim-tcp-read".into())
            .spawn(move || read_side(reader_from, &tx, &config, seed ^ u64::from(up)))?;
        thread::Builder::new()
            .name("volley-netsim-tcp-write".into())
            .spawn(move || {
                write_side(to, &rx, &counters, up);
                let _ = from.shutdown(Shutdown::Read);
                if ends.fetch_sub(1, Ordering::SeqCst) == 1 {
                    counters.open.fetch_sub(1, Ordering::Relaxed);
                }
            })?;
    }
    Ok(())
}

/// Reads chunks and stamps each with when it may leave; `None` at the end.
fn read_side(
    mut from: TcpStream,
    tx: &SyncSender<Option<(Instant, Vec<u8>)>>,
    config: &TcpLinkConfig,
    seed: u64,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut last = Instant::now();
    let mut wire_free = Instant::now();
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => {
                let _ = tx.send(None);
                return;
            }
            Ok(n) => n,
        };
        let now = Instant::now();
        let jitter = if config.jitter.is_zero() {
            Duration::ZERO
        } else {
            Duration::from_nanos(rng.random_range(0..=config.jitter.as_nanos() as u64))
        };
        let mut at = now + config.delay + jitter;
        if let Some(rate) = config.rate_bps {
            // The chunk's time on the wire, after whatever is ahead of it.
            let secs = (n as f64 * 8.0) / rate.get() as f64;
            wire_free = wire_free.max(now) + Duration::from_secs_f64(secs);
            at = at.max(wire_free + config.delay);
        }
        // Bytes never overtake each other.
        at = at.max(last);
        last = at;
        if tx.send(Some((at, buf[..n].to_vec()))).is_err() {
            return;
        }
    }
}

/// Writes each chunk once its time has come.
fn write_side(
    mut to: TcpStream,
    rx: &Receiver<Option<(Instant, Vec<u8>)>>,
    counters: &Counters,
    up: bool,
) {
    while let Ok(Some((at, chunk))) = rx.recv() {
        loop {
            let now = Instant::now();
            if now >= at {
                break;
            }
            let left = at - now;
            if left > SPIN {
                thread::sleep(left - SPIN);
            } else {
                thread::yield_now();
            }
        }
        if to.write_all(&chunk).is_err() {
            return;
        }
        let counter = if up {
            &counters.bytes_up
        } else {
            &counters.bytes_down
        };
        counter.fetch_add(chunk.len() as u64, Ordering::Relaxed);
    }
    let _ = to.shutdown(Shutdown::Write);
}
