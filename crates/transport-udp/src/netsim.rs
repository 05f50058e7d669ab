//! [`LinkSim`]: a user-space link simulator. A UDP relay between clients and one upstream
//! address that delays, jitters, drops, duplicates, reorders and rate-limits datagrams in
//! each direction, from a seed, because `tc netem` is not available on our machines.
//!
//! It runs on its own thread with plain non-blocking sockets, polling them and spinning
//! (with `yield_now`) while traffic is in flight, so sub-millisecond delays hold to a few
//! microseconds (tokio's timers tick in whole milliseconds, and a sleep oversleeps by the
//! kernel's timer slack). Idle, it sleeps.

use core::net::SocketAddr;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use core::time::Duration;
use std::collections::{BTreeMap, HashMap};
use std::io;
use std::net::UdpSocket;
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Instant;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Link settings, applied to each direction separately.
#[derive(Clone, Debug, Default, PartialEq)]
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
    /// Bits per second each direction carries; `None` = unlimited. Datagrams queue behind
    /// each other, and are dropped once the queue would wait over 200 ms.
    pub rate_bps: Option<u64>,
    /// Seed for every random choice.
    pub seed: u64,
}

impl LinkConfig {
    /// Checks every number before anything is bound: delay and jitter of at most
    /// [`MAX_DELAY`](crate::MAX_DELAY), probabilities in 0..=1, and a rate, if any, of at
    /// least one bit per second.
    pub fn check(&self) -> io::Result<()> {
        crate::check_delay("delay", self.delay)?;
        crate::check_delay("jitter", self.jitter)?;
        crate::check_fraction("loss", self.loss)?;
        crate::check_fraction("duplication", self.dup)?;
        crate::check_fraction("reordering", self.reorder)?;
        if self.rate_bps == Some(0) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a rate of 0 bit/s carries nothing (leave the rate unset for no cap)",
            ));
        }
        Ok(())
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
}

/// A running link simulator.
#[derive(Debug)]
pub struct LinkSim {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    counters: Arc<Counters>,
    thread: Option<JoinHandle<()>>,
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
    clients: HashMap<SocketAddr, UdpSocket>,
    config: LinkConfig,
    rng: StdRng,
    queue: BTreeMap<(Instant, u64), (Dest, Vec<u8>)>,
    order: u64,
    busy_until: [Instant; 2],
    counters: Arc<Counters>,
}

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
        let mut relay = Relay {
            listen: socket,
            upstream,
            clients: HashMap::new(),
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
            stop,
            counters,
            thread: Some(thread),
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
        }
    }

    /// Waits until the relay thread ends without being stopped, which it does only if it
    /// fails, and says why: a process that runs a link simulator should end with this
    /// error rather than go on relaying nothing.
    pub async fn stopped(&mut self) -> io::Error {
        if let Some(ended) = self.ended.take() {
            let _ = ended.await;
        }
        match self.thread.take().map(JoinHandle::join) {
            Some(Err(payload)) => io::Error::other(format!(
                "the relay thread panicked: {}",
                crate::board::panic_message(payload.as_ref())
            )),
            Some(Ok(())) | None => io::Error::other("the relay thread ended"),
        }
    }

    /// Stops relaying and waits for the thread.
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for LinkSim {
    fn drop(&mut self) {
        self.halt();
    }
}

impl Relay {
    fn run(&mut self, stop: &AtomicBool) {
        let mut buf = vec![0u8; 65536];
        let mut idle_since = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            let mut progress = false;
            // Client -> upstream.
            while let Ok((n, from)) = self.listen.recv_from(&mut buf) {
                progress = true;
                if !self.clients.contains_key(&from) && self.open_client(from).is_err() {
                    continue;
                }
                self.schedule(0, Dest::Up(from), &buf[..n]);
            }
            // Upstream -> clients.
            let mut replies = Vec::new();
            for (client, socket) in &self.clients {
                while let Ok(n) = socket.recv(&mut buf) {
                    replies.push((*client, buf[..n].to_vec()));
                }
            }
            for (client, bytes) in replies {
                progress = true;
                self.schedule(1, Dest::Down(client), &bytes);
            }
            self.deliver_due();
            if progress {
                idle_since = Instant::now();
                continue;
            }
            // Nothing arrived. While datagrams are in flight or traffic is recent, spin
            // (yielding the core to anyone who wants it): a sleep would oversleep by the
            // timer slack (~50-100 us) and add that to every hop. Idle, sleep.
            let now = Instant::now();
            let idle = now - idle_since;
            if !self.queue.is_empty() || idle < Duration::from_millis(5) {
                thread::yield_now();
            } else if idle < Duration::from_millis(100) {
                thread::sleep(Duration::from_micros(50));
            } else {
                thread::sleep(Duration::from_millis(1));
            }
        }
    }

    fn open_client(&mut self, client: SocketAddr) -> io::Result<()> {
        let bind: SocketAddr = if self.upstream.is_ipv4() {
            "0.0.0.0:0".parse().map_err(io::Error::other)?
        } else {
            "[::]:0".parse().map_err(io::Error::other)?
        };
        let socket = UdpSocket::bind(bind)?;
        socket.connect(self.upstream)?;
        socket.set_nonblocking(true)?;
        self.clients.insert(client, socket);
        Ok(())
    }

    /// Decides the fate of one datagram in direction `dir` (0 up, 1 down).
    fn schedule(&mut self, dir: usize, dest: Dest, bytes: &[u8]) {
        let now = Instant::now();
        if self.rng.random_bool(self.config.loss.clamp(0.0, 1.0)) {
            self.counters.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let mut depart = now;
        if let Some(rate) = self.config.rate_bps.filter(|&r| r > 0) {
            let start = self.busy_until[dir].max(now);
            if start - now > Duration::from_millis(200) {
                self.counters.dropped.fetch_add(1, Ordering::Relaxed);
                return;
            }
            let bits = bytes.len() as u64 * 8;
            self.busy_until[dir] =
                start + Duration::from_nanos(bits.saturating_mul(1_000_000_000) / rate);
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
            match dest {
                Dest::Up(client) => {
                    if let Some(socket) = self.clients.get(&client) {
                        if socket.send(&bytes).is_ok() {
                            self.counters.delivered_up.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                Dest::Down(client) => {
                    if self.listen.send_to(&bytes, client).is_ok() {
                        self.counters.delivered_down.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
    }
}
