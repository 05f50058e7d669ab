//! The driver task: one per socket, owning every peer's state machine and running one
//! turn at a time in named steps.

use core::net::SocketAddr;
use core::time::Duration;
use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::sync::Arc;
use std::time::Instant as StdInstant;

use tokio::net::UdpSocket;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use volley_proto::channel::{ChannelEndpoint, ConnectionHandle, Event, Payload, TOKEN_KEY_PERIOD};
use volley_proto::time::Instant;

use super::{
    ChannelConfig, ChannelConnection, ChannelError, ChannelReceiver, ChannelSender, CloseOnDrop,
    Command, Ended,
};
use crate::datagrams::Datagrams;

pub(super) struct PeerState {
    messages: mpsc::Sender<Result<Vec<u8>, ChannelError>>,
    /// Messages waiting for room in the state machine's send buffer.
    pending: VecDeque<(Payload, OwnedSemaphorePermit)>,
    budget: Arc<Semaphore>,
}

pub(super) struct Driver {
    pub(super) socket: UdpSocket,
    pub(super) endpoint: ChannelEndpoint<SocketAddr>,
    pub(super) config: ChannelConfig,
    pub(super) epoch: StdInstant,
    pub(super) commands: mpsc::Receiver<Command>,
    /// Connections to close (after every command sent before the close).
    pub(super) closes: mpsc::UnboundedReceiver<ConnectionHandle>,
    /// What each connection handed out closes through.
    pub(super) closes_tx: mpsc::UnboundedSender<ConnectionHandle>,
    pub(super) accept: mpsc::Sender<ChannelConnection>,
    pub(super) peers: BTreeMap<ConnectionHandle, PeerState>,
    pub(super) connecting:
        BTreeMap<ConnectionHandle, oneshot::Sender<Result<ChannelConnection, ChannelError>>>,
    /// For the connections the driver hands out; weak, so the driver ends once every
    /// handle is gone.
    pub(super) self_commands: mpsc::WeakSender<Command>,
    pub(super) taken: Arc<Notify>,
    pub(super) connect_deadlines: Vec<(ConnectionHandle, StdInstant, SocketAddr)>,
    /// When the retry tokens' key is next replaced (servers only).
    pub(super) rotate_key_at: Option<StdInstant>,
}

impl Driver {
    /// The machines' time for a clock reading.
    fn at(&self, t: StdInstant) -> Instant {
        Instant::from_micros(t.saturating_duration_since(self.epoch).as_micros() as u64)
    }

    fn now(&self) -> Instant {
        Instant::from_micros(self.epoch.elapsed().as_micros() as u64)
    }

    /// A connection's application half, and the driver's.
    fn open(&mut self, handle: ConnectionHandle) -> Option<ChannelConnection> {
        let commands = self.self_commands.upgrade()?;
        // A connected handle always has its peer; the fallback is never seen.
        let peer_addr =
            (self.endpoint.peer_addr(handle)).unwrap_or(SocketAddr::from(([0, 0, 0, 0], 0)));
        let (tx, rx) = mpsc::channel(self.config.queue);
        let send_buffer = self.config.endpoint.connection.send_buffer;
        let budget = Arc::new(Semaphore::new(
            usize::try_from(send_buffer)
                .unwrap_or(Semaphore::MAX_PERMITS)
                .min(Semaphore::MAX_PERMITS),
        ));
        self.peers.insert(
            handle,
            PeerState {
                messages: tx,
                pending: VecDeque::new(),
                budget: budget.clone(),
            },
        );
        Some(ChannelConnection {
            sender: ChannelSender {
                handle,
                commands,
                closes: self.closes_tx.clone(),
                budget,
                max_message: self.config.endpoint.connection.max_message,
                _close: Arc::new(CloseOnDrop {
                    handle,
                    closes: self.closes_tx.clone(),
                }),
            },
            receiver: ChannelReceiver {
                messages: rx,
                taken: self.taken.clone(),
            },
            peer_addr,
        })
    }

    fn command(&mut self, command: Command) {
        match command {
            Command::Connect(addr, reply) => match self.endpoint.connect(addr) {
                Ok(handle) => {
                    self.connecting.insert(handle, reply);
                    self.connect_deadlines.push((
                        handle,
                        StdInstant::now() + self.config.connect_timeout,
                        addr,
                    ));
                }
                Err(_) => {
                    let _ = reply.send(Err(ChannelError::Closed(Ended::TooManyPeers)));
                }
            },
            Command::Send(handle, message, permit) => {
                if let Some(peer) = self.peers.get_mut(&handle) {
                    peer.pending.push_back((message, permit));
                }
            }
        }
    }

    /// The kernel said a destination's port is closed: connections still connecting to
    /// it fail with [`ChannelError::Refused`] (established ones have their idle timeout).
    fn refused(&mut self) {
        let mut refused = Vec::new();
        crate::datagrams::take_refusals(&self.socket, &mut refused);
        for (handle, _, addr) in &self.connect_deadlines {
            if !refused.contains(addr) {
                continue;
            }
            if let Some(reply) = self.connecting.remove(handle) {
                let _ = reply.send(Err(ChannelError::Refused { addr: *addr }));
                self.endpoint.close(*handle, 0, b"refused");
            }
        }
    }

    /// A fresh key for retry tokens from the system's generator, at start and then every
    /// [`TOKEN_KEY_PERIOD`] (checked as the loop turns: a quiet server mints no tokens).
    fn rotate_key(&mut self, clock: StdInstant) {
        if self.rotate_key_at.is_some_and(|at| clock >= at) {
            self.endpoint.rotate_token_key(rand::random());
            self.rotate_key_at = Some(clock + Duration::from_micros(TOKEN_KEY_PERIOD.as_micros()));
        }
    }

    /// The driver's loop, one turn a step at a time: commands, receive, statuses and
    /// connect deadlines, deliver, admit sends, transmit, then spin or park.
    pub(super) async fn run(mut self) -> io::Result<()> {
        let mut io = Datagrams::new(&self.socket);
        let mut buf = vec![0u8; 65_536];
        let current_thread = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::CurrentThread);
        let spin = self.config.spin.filter(|_| current_thread);
        let mut last_traffic = StdInstant::now();
        let mut spinning = false;
        let mut readable: Vec<ConnectionHandle> = Vec::new();
        loop {
            // One clock reading per turn.
            let clock = StdInstant::now();
            let now = self.at(clock);
            self.rotate_key(clock);
            self.take_commands();
            if self.receive(&mut io, now, spinning)? {
                last_traffic = clock;
            }
            self.endpoint.handle_timeout(now);
            if !self.statuses() {
                return Ok(());
            }
            self.expire_connects(clock);
            self.deliver(&mut readable);
            self.admit_sends();
            if self.transmit(&mut io, now, &mut buf).await? {
                last_traffic = clock;
            }
            // Spin a while after traffic: poll the socket again instead of sleeping.
            spinning =
                spin.is_some_and(|spin| clock.saturating_duration_since(last_traffic) < spin);
            if spinning {
                std::thread::yield_now();
                tokio::task::yield_now().await;
                continue;
            }
            if !self.park().await? {
                return Ok(());
            }
        }
    }

    /// Commands from the applications, as many as have come.
    fn take_commands(&mut self) {
        loop {
            while let Ok(command) = self.commands.try_recv() {
                self.command(command);
            }
            let Ok(handle) = self.closes.try_recv() else {
                return;
            };
            // What was queued before the close was sent is visible now: take it first.
            while let Ok(command) = self.commands.try_recv() {
                self.command(command);
            }
            self.endpoint.close(handle, 0, b"closed");
        }
    }

    /// Datagrams in, every one the socket holds; `true` if any came.
    fn receive(&mut self, io: &mut Datagrams, now: Instant, spinning: bool) -> io::Result<bool> {
        let mut any = false;
        loop {
            match io.rx().try_recv(&self.socket, spinning) {
                Ok(()) => {
                    any = true;
                    for (datagram, from) in io.rx().datagrams() {
                        if let Some(from) = from {
                            self.endpoint.handle_datagram(now, from, datagram);
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(any),
                Err(e) if crate::datagrams::refused(&e) => self.refused(),
                Err(e) => return Err(e),
            }
        }
    }

    /// Connections made and ended: a connected one goes to whoever waits for it (its
    /// `connect` or the accept queue), an ended one's waiters learn why. `false` once
    /// every application handle is gone.
    fn statuses(&mut self) -> bool {
        while let Some((handle, event)) = self.endpoint.poll_status() {
            match event {
                Event::Connected => {
                    let Some(connection) = self.open(handle) else {
                        return false;
                    };
                    if let Some(reply) = self.connecting.remove(&handle) {
                        let _ = reply.send(Ok(connection));
                    } else {
                        // Never full: it holds at most the endpoint's peers.
                        let _ = self.accept.try_send(connection);
                    }
                }
                Event::Closed(why) => {
                    let error = ChannelError::Closed(Ended::Connection(why));
                    if let Some(reply) = self.connecting.remove(&handle) {
                        let _ = reply.send(Err(error.clone()));
                    }
                    if let Some(peer) = self.peers.remove(&handle) {
                        peer.budget.close();
                        let _ = peer.messages.try_send(Err(error));
                    }
                }
                Event::Message(_) => {}
            }
        }
        true
    }

    /// Connections whose handshake has run out of time fail with
    /// [`ChannelError::ConnectTimeout`].
    fn expire_connects(&mut self, clock: StdInstant) {
        let mut deadlines = core::mem::take(&mut self.connect_deadlines);
        deadlines.retain(|(handle, deadline, addr)| {
            if !self.connecting.contains_key(handle) {
                return false;
            }
            if clock >= *deadline {
                if let Some(reply) = self.connecting.remove(handle) {
                    let _ = reply.send(Err(ChannelError::ConnectTimeout {
                        addr: *addr,
                        after: self.config.connect_timeout,
                    }));
                }
                self.endpoint.close(*handle, 0, b"gave up");
                return false;
            }
            true
        });
        self.connect_deadlines = deadlines;
    }

    /// Messages out to the applications, as their queues have room.
    fn deliver(&mut self, readable: &mut Vec<ConnectionHandle>) {
        readable.clear();
        readable.extend(self.endpoint.readable());
        for &handle in readable.iter() {
            let Some(peer) = self.peers.get(&handle) else {
                continue;
            };
            while let Ok(slot) = peer.messages.try_reserve() {
                let Some(message) = self.endpoint.poll_message(handle) else {
                    break;
                };
                slot.send(Ok(message));
            }
        }
    }

    /// Messages in from the applications, as the state machines' send buffers have room.
    fn admit_sends(&mut self) {
        let send_buffer = self.config.endpoint.connection.send_buffer;
        for (handle, peer) in self.peers.iter_mut() {
            let queued = self.endpoint.connection(*handle).map_or(0, |c| c.queued());
            let mut room = send_buffer.saturating_sub(queued);
            while let Some((message, _)) = peer.pending.front() {
                if message.len() as u64 > room {
                    break;
                }
                let (message, permit) = peer.pending.pop_front().expect("peeked");
                room -= message.len() as u64;
                // Refused only for a connection that has ended: its close comes next.
                let _ = self.endpoint.send(*handle, message);
                drop(permit);
            }
        }
    }

    /// Datagrams out, batched; `true` if any went.
    async fn transmit(
        &mut self,
        io: &mut Datagrams,
        now: Instant,
        buf: &mut [u8],
    ) -> io::Result<bool> {
        let mut sent_any = false;
        let mut refused = 0;
        while let Some((to, n)) = self.endpoint.poll_transmit(now, buf) {
            refused += io.tx().queue(&self.socket, &buf[..n], to).await?.refused;
            sent_any = true;
        }
        refused += io.tx().flush(&self.socket).await?.refused;
        if refused > 0 {
            self.refused();
        }
        Ok(sent_any)
    }

    /// Waits for the next thing to do: a datagram, a command, the state machines' next
    /// deadline, an application taking a message, or the first connect deadline.
    /// `false` once every application handle is gone.
    async fn park(&mut self) -> io::Result<bool> {
        let wait = self
            .endpoint
            .poll_timeout()
            .map(|t| Duration::from_micros(t.saturating_duration_since(self.now()).as_micros()));
        let sleep = async move {
            match wait {
                Some(wait) => tokio::time::sleep(wait).await,
                None => core::future::pending().await,
            }
        };
        let first_connect = self.connect_deadlines.iter().map(|&(_, at, _)| at).min();
        let connect_deadline = async move {
            match first_connect {
                Some(at) => tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await,
                None => core::future::pending().await,
            }
        };
        tokio::select! {
            ready = self.socket.readable() => ready?,
            command = self.commands.recv() => match command {
                Some(command) => self.command(command),
                // Every handle is gone.
                None => return Ok(false),
            },
            Some(handle) = self.closes.recv() => {
                self.take_commands();
                self.endpoint.close(handle, 0, b"closed");
            }
            () = sleep => {}
            () = self.taken.notified() => {}
            () = connect_deadline => {}
        }
        Ok(true)
    }
}
