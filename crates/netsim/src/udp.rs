//! [`LinkSim`], the UDP relay: each client address a flow with its own socket towards the
//! upstream, every datagram delayed, jittered, dropped, duplicated, reordered or held to
//! the rate cap as [`LinkConfig`] says, on one thread with one `epoll` set.

use core::net::SocketAddr;
use core::num::NonZeroU64;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use core::time::Duration;
use std::collections::{BTreeMap, HashMap};
use std::io;
use std::net::UdpSocket;
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Instant;

use crate::checks::{ConfigError, MAX_DELAY, check_delay, check_fraction, panic_message};
use crate::worker::Worker;
use nix::errno::Errno;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Link settings, applied to each direction separately.
#[derive(Clone, Debug, PartialEq)]
pub struct LinkConfig {
    /// One-way delay added to every datagram (the RTT grows by twice this).
    pub delay: Duration,
    /// Extra delay drawn uniformly from `0..=jitter` per datagram.
    pub jitter: Duration,
    /// Chance of dropping a datagram (0.05 = 5%).
    pub loss: f64,
    /// Chance of delivering a datagram twice.
    pub dup: f64,
    /// Chance of holding a datagram back by up to `2 * delay + 1 ms` so later ones pass it.
    pub reorder: f64,
    /// Bits per second each direction carries; `None` = no cap. Datagrams queue behind
    /// each other, and are dropped once the queue would wait over 200 ms.
    pub rate_bps: Option<NonZeroU64>,
    /// Seed for every random choice.
    pub seed: u64,
    /// A flow (a client address and its socket towards the upstream) with no traffic
    /// either way for this long is closed.
    pub idle_timeout: Duration,
    /// Flows open at once; past it, the least recently used is closed for a new one.
    pub max_flows: usize,
}

impl LinkConfig {
    /// Checks every number before anything is bound: delay and jitter of at most
    /// [`MAX_DELAY`], probabilities in 0..=1, and a rate, if any, of at
    /// least one bit per second (the type sees to that), an idle timeout from 1 ms to an
    /// hour, and room for at least one flow.
    pub fn check(&self) -> Result<(), ConfigError> {
        check_delay("delay", self.delay)?;
        check_delay("jitter", self.jitter)?;
        check_fraction("loss", self.loss)?;
        check_fraction("duplication", self.dup)?;
        check_fraction("reordering", self.reorder)?;
        if self.idle_timeout < Duration::from_millis(1) || self.idle_timeout > MAX_DELAY {
            return Err(ConfigError::IdleTimeout(self.idle_timeout));
        }
        if self.max_flows == 0 {
            return Err(ConfigError::NoFlows);
        }
        Ok(())
    }
}

impl Default for LinkConfig {
    /// A perfect link: no delay, loss or cap; flows closed after 60 s idle, 4096 open at
    /// most.
    fn default() -> Self {
        Self {
            delay: Duration::ZERO,
            jitter: Duration::ZERO,
            loss: 0.0,
            dup: 0.0,
            reorder: 0.0,
            rate_bps: None,
            seed: 0,
            idle_timeout: Duration::from_secs(60),
            max_flows: 4096,
        }
    }
}

/// Counters of what the link did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Datagrams delivered towards the upstream.
    pub delivered_up: u64,
    /// Datagrams delivered back to clients.
    pub delivered_down: u64,
    /// Datagrams dropped (loss or a full rate queue).
    pub dropped: u64,
    /// Extra copies delivered.
    pub duplicated: u64,
    /// Datagrams held back to reorder.
    pub reordered: u64,
    /// Flows closed after [`LinkConfig::idle_timeout`] without traffic.
    pub expired: u64,
    /// Flows closed to make room for a new one (the flow cap or the file-descriptor
    /// limit reached).
    pub evicted: u64,
    /// Flows open now.
    pub flows: u64,
}

/// A running link simulator.
#[derive(Debug)]
pub struct LinkSim {
    addr: SocketAddr,
    counters: Arc<Counters>,
    worker: Worker,
    /// Closed when the relay thread ends, by returning or by a panic.
    ended: Option<tokio::sync::oneshot::Receiver<()>>,
}

#[derive(Debug, Default)]
struct Counters {
    delivered_up: AtomicU64,
    delivered_down: AtomicU64,
    dropped: AtomicU64,
    duplicated: AtomicU64,
    reordered: AtomicU64,
    expired: AtomicU64,
    evicted: AtomicU64,
    flows: AtomicU64,
}

/// Where a scheduled datagram goes.
#[derive(Clone, Copy, Debug)]
enum Dest {
    /// To the upstream, through the socket kept for this client.
    Up(SocketAddr),
    /// Back to this client.
    Down(SocketAddr),
}

struct Relay {
    listen: UdpSocket,
    upstream: SocketAddr,
    epoll: Epoll,
    flows: HashMap<SocketAddr, Flow>,
    /// Which client each epoll token (above 0, which is `listen`) stands for.
    tokens: HashMap<u64, SocketAddr>,
    next_token: u64,
    config: LinkConfig,
    rng: StdRng,
    queue: BTreeMap<(Instant, u64), (Dest, Vec<u8>)>,
    order: u64,
    busy_until: [Instant; 2],
    counters: Arc<Counters>,
}

/// One client's way to the upstream.
struct Flow {
    socket: UdpSocket,
    token: u64,
    last_used: Instant,
}

/// The epoll token of the listening socket.
const LISTEN: u64 = 0;

impl LinkSim {
    /// Binds `listen` (port 0 picks one) and relays between it and `upstream` until
    /// stopped or dropped.
    /// The settings are checked first ([`LinkConfig::check`]).
    pub fn start(listen: SocketAddr, upstream: SocketAddr, config: LinkConfig) -> io::Result<Self> {
        config.check()?;
        let socket = UdpSocket::bind(listen)?;
        socket.set_nonblocking(true)?;
        let addr = socket.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let counters = Arc::new(Counters::default());
        let now = Instant::now();
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).map_err(io::Error::from)?;
        epoll
            .add(&socket, EpollEvent::new(EpollFlags::EPOLLIN, LISTEN))
            .map_err(io::Error::from)?;
        let mut relay = Relay {
            listen: socket,
            upstream,
            epoll,
            flows: HashMap::new(),
            tokens: HashMap::new(),
            next_token: LISTEN + 1,
            rng: StdRng::seed_from_u64(config.seed),
            config,
            queue: BTreeMap::new(),
            order: 0,
            busy_until: [now, now],
            counters: counters.clone(),
        };
        let stop_flag = stop.clone();
        let (alive, ended) = tokio::sync::oneshot::channel::<()>();
        let thread = thread::Builder::new()
            .name("volley-netsim".into())
            .spawn(move || {
                // Dropped when the thread ends, unwinding included.
                let _alive = alive;
                relay.run(&stop_flag);
            })?;
        Ok(Self {
            addr,
            counters,
            worker: Worker {
                stop,
                thread: Some(thread),
            },
            ended: Some(ended),
        })
    }

    /// Where clients send.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The counters so far.
    pub fn stats(&self) -> LinkStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        LinkStats {
            delivered_up: get(&c.delivered_up),
            delivered_down: get(&c.delivered_down),
            dropped: get(&c.dropped),
            duplicated: get(&c.duplicated),
            reordered: get(&c.reordered),
            expired: get(&c.expired),
            evicted: get(&c.evicted),
            flows: get(&c.flows),
        }
    }

    /// Waits until the relay thread ends without being stopped, which it does only if it
    /// fails, and says why: a process that runs a link simulator should end with this
    /// error rather than go on relaying nothing.
    pub async fn stopped(&mut self) -> io::Error {
        if let Some(ended) = self.ended.take() {
            let _ = ended.await;
        }
        match self.worker.thread.take().map(JoinHandle::join) {
            Some(Err(payload)) => io::Error::other(format!(
                "the relay thread panicked: {}",
                panic_message(payload.as_ref())
            )),
            Some(Ok(())) | None => io::Error::other("the relay thread ended"),
        }
    }

    /// Stops relaying and waits for the thread.
    pub fn stop(mut self) {
        self.worker.halt();
    }
}

impl Relay {
    fn run(&mut self, stop: &AtomicBool) {
        let mut buf = vec![0u8; 65536];
        let mut events = vec![EpollEvent::empty(); 256];
        let mut last_traffic = Instant::now();
        let mut last_sweep = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            // How long to wait: not at all while datagrams are due within 2 ms or traffic
            // was recent (spinning keeps sub-millisecond delays exact); else until the
            // next datagram is nearly due, at most 100 ms (to see the stop flag).
            let now = Instant::now();
            let next_due = self.queue.keys().next().map(|(at, _)| *at);
            let wait = match next_due {
                Some(at) if at <= now + Duration::from_millis(2) => Duration::ZERO,
                _ if now - last_traffic < Duration::from_millis(5) => Duration::ZERO,
                Some(at) => (at - now - Duration::from_millis(1)).min(Duration::from_millis(100)),
                None => Duration::from_millis(100),
            };
            let ready = match self.epoll.wait(&mut events, wait.as_millis() as u16) {
                Ok(n) => n,
                // A signal: look again.
                Err(Errno::EINTR) => 0,
                Err(e) => panic!("epoll_wait failed: {e}"),
            };
            for event in &events[..ready] {
                match event.data() {
                    LISTEN => self.relay_up(&mut buf),
                    token => self.relay_down(token, &mut buf),
                }
            }
            self.deliver_due();
            let now = Instant::now();
            if ready > 0 {
                last_traffic = now;
            } else if wait.is_zero() {
                thread::yield_now();
            }
            if now - last_sweep >= Duration::from_secs(1).min(self.config.idle_timeout) {
                last_sweep = now;
                self.expire(now);
            }
        }
    }

    /// Client -> upstream: everything the listening socket has.
    fn relay_up(&mut self, buf: &mut [u8]) {
        while let Ok((n, from)) = self.listen.recv_from(buf) {
            if !self.flows.contains_key(&from) && self.open_flow(from).is_err() {
                self.counters.dropped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            if let Some(flow) = self.flows.get_mut(&from) {
                flow.last_used = Instant::now();
            }
            self.schedule(0, Dest::Up(from), &buf[..n]);
        }
    }

    /// Upstream -> one client: everything its flow's socket has.
    fn relay_down(&mut self, token: u64, buf: &mut [u8]) {
        let Some(&client) = self.tokens.get(&token) else {
            return;
        };
        loop {
            let Some(flow) = self.flows.get_mut(&client) else {
                return;
            };
            let Ok(n) = flow.socket.recv(buf) else {
                return;
            };
            flow.last_used = Instant::now();
            self.schedule(1, Dest::Down(client), &buf[..n]);
        }
    }

    /// Opens a flow for `client`, closing the least recently used one first if the cap
    /// or the file-descriptor limit is reached.
    fn open_flow(&mut self, client: SocketAddr) -> io::Result<()> {
        if self.flows.len() >= self.config.max_flows {
            self.evict_oldest();
        }
        let socket = match self.upstream_socket() {
            Err(e) if is_out_of_files(&e) && !self.flows.is_empty() => {
                self.evict_oldest();
                self.upstream_socket()?
            }
            other => other?,
        };
        let token = self.next_token;
        self.next_token += 1;
        self.epoll
            .add(&socket, EpollEvent::new(EpollFlags::EPOLLIN, token))
            .map_err(io::Error::from)?;
        self.tokens.insert(token, client);
        self.flows.insert(
            client,
            Flow {
                socket,
                token,
                last_used: Instant::now(),
            },
        );
        self.counters
            .flows
            .store(self.flows.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    fn upstream_socket(&self) -> io::Result<UdpSocket> {
        let bind: SocketAddr = if self.upstream.is_ipv4() {
            (core::net::Ipv4Addr::UNSPECIFIED, 0).into()
        } else {
            (core::net::Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let socket = UdpSocket::bind(bind)?;
        socket.connect(self.upstream)?;
        socket.set_nonblocking(true)?;
        Ok(socket)
    }

    fn evict_oldest(&mut self) {
        let oldest = self
            .flows
            .iter()
            .min_by_key(|(_, flow)| flow.last_used)
            .map(|(client, _)| *client);
        if let Some(client) = oldest {
            self.close_flow(client);
            self.counters.evicted.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Closes every flow idle for the configured timeout.
    fn expire(&mut self, now: Instant) {
        let idle: Vec<SocketAddr> = self
            .flows
            .iter()
            .filter(|(_, flow)| now - flow.last_used >= self.config.idle_timeout)
            .map(|(client, _)| *client)
            .collect();
        for client in idle {
            self.close_flow(client);
            self.counters.expired.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn close_flow(&mut self, client: SocketAddr) {
        if let Some(flow) = self.flows.remove(&client) {
            let _ = self.epoll.delete(&flow.socket);
            self.tokens.remove(&flow.token);
        }
        self.counters
            .flows
            .store(self.flows.len() as u64, Ordering::Relaxed);
    }

    /// Decides the fate of one datagram in direction `dir` (0 up, 1 down).
    fn schedule(&mut self, dir: usize, dest: Dest, bytes: &[u8]) {
        let now = Instant::now();
        if self.rng.random_bool(self.config.loss.clamp(0.0, 1.0)) {
            self.counters.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let mut depart = now;
        if let Some(rate) = self.config.rate_bps {
            let start = self.busy_until[dir].max(now);
            if start - now > Duration::from_millis(200) {
                self.counters.dropped.fetch_add(1, Ordering::Relaxed);
                return;
            }
            let bits = bytes.len() as u64 * 8;
            self.busy_until[dir] =
                start + Duration::from_nanos(bits.saturating_mul(1_000_000_000) / rate.get());
            depart = self.busy_until[dir];
        }
        let copies = if self.rng.random_bool(self.config.dup.clamp(0.0, 1.0)) {
            self.counters.duplicated.fetch_add(1, Ordering::Relaxed);
            2
        } else {
            1
        };
        for _ in 0..copies {
            let mut at = depart + self.config.delay + self.draw(self.config.jitter);
            if self.rng.random_bool(self.config.reorder.clamp(0.0, 1.0)) {
                self.counters.reordered.fetch_add(1, Ordering::Relaxed);
                at += self.draw(self.config.delay * 2 + Duration::from_millis(1));
            }
            self.order += 1;
            self.queue.insert((at, self.order), (dest, bytes.to_vec()));
        }
    }

    fn draw(&mut self, max: Duration) -> Duration {
        if max.is_zero() {
            Duration::ZERO
        } else {
            Duration::from_nanos(self.rng.random_range(0..=max.as_nanos() as u64))
        }
    }

    fn deliver_due(&mut self) {
        let now = Instant::now();
        while let Some(entry) = self.queue.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let (dest, bytes) = entry.remove();
            let sent = match dest {
                // A flow closed while its datagram waited: the datagram is lost with it.
                Dest::Up(client) => self
                    .flows
                    .get(&client)
                    .is_some_and(|flow| flow.socket.send(&bytes).is_ok()),
                Dest::Down(client) => self.listen.send_to(&bytes, client).is_ok(),
            };
            let counter = match (dest, sent) {
                (_, false) => &self.counters.dropped,
                (Dest::Up(_), true) => &self.counters.delivered_up,
                (Dest::Down(_), true) => &self.counters.delivered_down,
            };
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Whether opening a socket failed for want of file descriptors (per process or system).
fn is_out_of_files(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error().map(Errno::from_raw),
        Some(Errno::EMFILE | Errno::ENFILE)
    )
}
