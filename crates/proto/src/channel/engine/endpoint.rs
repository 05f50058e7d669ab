//! [`ChannelEndpoint`]: many channel connections on one socket, told apart by connection id, as
//! quinn-proto's endpoint does. A server endpoint accepts new peers from their initial
//! packets, within a cap on peers and a smaller cap on half-open ones (whose address is
//! not yet proven), and ignores initials too short to have been padded, so a spoofed
//! source can draw at most three times what it sent (see [`Connection`]).
//!
//! Once [`EndpointConfig::retry_above`] setups are half open, an initial without a token
//! is answered with a stateless retry carrying an address-validation token (as QUIC's
//! Retry), and only an initial that brings a valid token back makes a connection, its
//! address proven. So addresses that never answer (spoofed, or gone) can hold at most
//! `retry_above` setups, and real clients still get in, one round trip later. Tokens need
//! a key from the driver ([`ChannelEndpoint::rotate_token_key`]); without one, initials past
//! [`EndpointConfig::max_half_open`] are refused instead.

use alloc::collections::{BTreeMap, BTreeSet, VecDeque};
use core::hash::Hash;

use super::retry::{TOKEN_LEN, TokenKey, Tokens};
use super::{Config, ConfigError, Connection, Event, MIN_DATAGRAM, Payload, SendError};
use crate::channel::packet::{self as wire, PacketType};
use crate::time::Instant;

/// Names one connection of an endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnectionHandle(pub u64);

/// Settings of an endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EndpointConfig {
    /// Settings of each connection.
    pub connection: Config,
    /// Whether to accept peers (a server); a client endpoint only connects.
    pub accept: bool,
    /// Most connections at once.
    pub max_peers: usize,
    /// Most connections whose peer has not yet proven its address.
    pub max_half_open: usize,
    /// Half-open connections at or past which an initial without a token gets a retry
    /// instead of a connection (at most `max_half_open` counts; 0 retries every initial).
    pub retry_above: usize,
    /// Bytes of memory all peers' messages may hold together (each connection's
    /// [`Connection::receive_memory`], summed); a connection that grows the sum past it
    /// is closed with the reason, so that many peers each within their own budget cannot
    /// exhaust the server together.
    pub max_receive_memory: u64,
}

impl Default for EndpointConfig {
    fn default() -> Self {
        Self {
            connection: Config::default(),
            accept: false,
            max_peers: 1024,
            max_half_open: 64,
            retry_above: 16,
            max_receive_memory: 256 << 20,
        }
    }
}

/// Why [`ChannelEndpoint::connect`] refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnectError {
    /// [`EndpointConfig::max_peers`] connections exist already.
    TooManyPeers,
}

/// Counters of an endpoint.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EndpointStats {
    /// Connections accepted from initials.
    pub accepted: u64,
    /// Initials refused: a cap was reached.
    pub refused: u64,
    /// Datagrams dropped: unknown id, too short an initial, malformed header, wrong source.
    pub dropped: u64,
    /// Connections closed because all peers' messages together held
    /// [`EndpointConfig::max_receive_memory`].
    pub memory_closed: u64,
    /// Retries sent in answer to initials without a token.
    pub retries: u64,
    /// Connections made from initials whose token proved their address.
    pub validated_by_token: u64,
    /// Initials dropped for a token that was forged, for another address or expired.
    pub bad_tokens: u64,
}

/// Retries waiting to be sent, at most; past it an initial is dropped (and counted as
/// refused), so answering costs bounded memory whatever the rate of initials.
const RETRIES_QUEUED: usize = 256;

/// A retry to send: where, the ids to echo and the token.
struct PendingRetry<A> {
    addr: A,
    /// The initial's source id (the retry's destination).
    client_cid: u64,
    /// The id the initial was sent to (the retry's source).
    initial_dcid: u64,
    token: [u8; TOKEN_LEN],
}

struct Peer<A> {
    connection: Connection,
    addr: A,
    /// The id the client's initial named (a server's second key for it).
    initial_dcid: Option<u64>,
    /// Its receive memory as last added to the endpoint's sum.
    counted: u64,
}

/// Connections over one socket. `A` is the driver's address type.
pub struct ChannelEndpoint<A> {
    config: EndpointConfig,
    rng: u64,
    peers: BTreeMap<ConnectionHandle, Peer<A>>,
    by_cid: BTreeMap<u64, ConnectionHandle>,
    next_handle: u64,
    /// Where the next [`ChannelEndpoint::poll_transmit`] starts looking, for fairness.
    turn: u64,
    events: VecDeque<(ConnectionHandle, Event)>,
    /// Connections whose next event is a message.
    readable: BTreeSet<ConnectionHandle>,
    /// Where the next message poll starts looking, for fairness.
    read_turn: u64,
    /// Every connection's receive memory, summed.
    held: u64,
    tokens: Tokens,
    retries: VecDeque<PendingRetry<A>>,
    stats: EndpointStats,
}

impl<A: Copy + Eq + Hash> ChannelEndpoint<A> {
    /// An endpoint; `seed` feeds the generator of connection ids (give it real
    /// randomness: ids are what keeps strangers from speaking for a peer). Fails if the
    /// connection settings fail [`Config::check`].
    pub fn new(config: EndpointConfig, seed: u64) -> Result<Self, ConfigError> {
        config.connection.check()?;
        Ok(Self {
            config,
            rng: seed,
            peers: BTreeMap::new(),
            by_cid: BTreeMap::new(),
            next_handle: 0,
            turn: 0,
            events: VecDeque::new(),
            readable: BTreeSet::new(),
            read_turn: 0,
            held: 0,
            tokens: Tokens::default(),
            retries: VecDeque::new(),
            stats: EndpointStats::default(),
        })
    }

    /// A fresh id, never 0 and not in use (SplitMix64).
    fn random_cid(&mut self) -> u64 {
        loop {
            self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.rng;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            if z != 0 && !self.by_cid.contains_key(&z) {
                return z;
            }
        }
    }

    fn add(
        &mut self,
        connection: Connection,
        addr: A,
        initial_dcid: Option<u64>,
    ) -> ConnectionHandle {
        let handle = ConnectionHandle(self.next_handle);
        self.next_handle += 1;
        self.by_cid.insert(connection.local_cid(), handle);
        if let Some(id) = initial_dcid {
            self.by_cid.insert(id, handle);
        }
        self.peers.insert(
            handle,
            Peer {
                connection,
                addr,
                initial_dcid,
                counted: 0,
            },
        );
        handle
    }

    /// Opens a connection to `addr`; its first datagram comes from
    /// [`ChannelEndpoint::poll_transmit`].
    pub fn connect(&mut self, addr: A) -> Result<ConnectionHandle, ConnectError> {
        if self.peers.len() >= self.config.max_peers {
            return Err(ConnectError::TooManyPeers);
        }
        let local = self.random_cid();
        let initial = self.random_cid();
        let connection = Connection::checked_client(self.config.connection, local, initial);
        Ok(self.add(connection, addr, None))
    }

    /// Takes a datagram that came from `addr`. Call this for every datagram the socket
    /// receives, then [`ChannelEndpoint::poll_transmit`] and [`ChannelEndpoint::poll_event`] until
    /// each gives nothing, and re-arm the timer from [`ChannelEndpoint::poll_timeout`].
    pub fn handle_datagram(&mut self, now: Instant, addr: A, datagram: &[u8]) {
        let Ok((header, _)) = wire::parse(datagram) else {
            self.stats.dropped += 1;
            return;
        };
        if let Some(&handle) = self.by_cid.get(&header.dcid) {
            let Some(peer) = self.peers.get_mut(&handle) else {
                return;
            };
            if peer.addr != addr {
                // Another source using a peer's id: not that peer.
                self.stats.dropped += 1;
                return;
            }
            peer.connection.handle_datagram(now, datagram);
            self.drain(handle);
            return;
        }
        if header.ty != PacketType::INITIAL || !self.config.accept {
            self.stats.dropped += 1;
            return;
        }
        if datagram.len() < MIN_DATAGRAM {
            // An unpadded initial: the answer could amplify a spoofed source.
            self.stats.dropped += 1;
            return;
        }
        let proven = match initial_token(datagram) {
            Some(token) if self.tokens.check(now, &addr, token) => true,
            Some(_) => {
                self.stats.bad_tokens += 1;
                return;
            }
            None => false,
        };
        if self.peers.len() >= self.config.max_peers {
            self.stats.refused += 1;
            return;
        }
        if !proven {
            let half_open = self.half_open();
            let retry_above = self.config.retry_above.min(self.config.max_half_open);
            if self.tokens.keyed() && half_open >= retry_above {
                self.queue_retry(now, addr, &header);
                return;
            }
            if half_open >= self.config.max_half_open {
                self.stats.refused += 1;
                return;
            }
        }
        let local = self.random_cid();
        let mut connection = Connection::new(self.config.connection, false, local);
        // A token is the proof a data packet would otherwise give: no amplification limit.
        connection.validated = proven;
        connection.handle_datagram(now, datagram);
        let handle = self.add(connection, addr, Some(header.dcid));
        self.stats.accepted += 1;
        self.stats.validated_by_token += u64::from(proven);
        self.drain(handle);
    }

    fn queue_retry(&mut self, now: Instant, addr: A, header: &wire::PacketHeader) {
        let (Some(client_cid), Some(token)) = (header.scid, self.tokens.mint(now, &addr)) else {
            return;
        };
        if self.retries.len() >= RETRIES_QUEUED {
            self.stats.refused += 1;
            return;
        }
        self.retries.push_back(PendingRetry {
            addr,
            client_cid,
            initial_dcid: header.dcid,
            token,
        });
    }

    /// Makes `key` the one new tokens are minted with; tokens minted with the key before
    /// it are still accepted. Give a key from a real random source at start (until then
    /// no retries are sent) and a new one every [`TOKEN_KEY_PERIOD`] or so, so that one
    /// key never checks tokens for long.
    pub fn rotate_token_key(&mut self, key: TokenKey) {
        self.tokens.rotate(key);
    }

    fn transmit_retry(&mut self, buf: &mut [u8]) -> Option<(A, usize)> {
        let retry = self.retries.pop_front()?;
        let header = wire::PacketHeader {
            ty: PacketType::RETRY,
            dcid: retry.client_cid,
            scid: Some(retry.initial_dcid),
            pn: 0,
        };
        let mut n = wire::emit_header(&header, buf).ok()?;
        n += wire::emit_frame(&wire::PacketFrame::Token(&retry.token), &mut buf[n..]).ok()?;
        self.stats.retries += 1;
        Some((retry.addr, n))
    }

    /// Moves a connection's leading events other than messages to the endpoint's queue;
    /// notes it as readable if a message is next (messages stay in the connection until
    /// the application takes them, so they keep counting against its window); forgets a
    /// connection that has ended once everything it holds has been taken.
    fn drain(&mut self, handle: ConnectionHandle) {
        let Some(peer) = self.peers.get_mut(&handle) else {
            return;
        };
        let now_held = peer.connection.receive_memory();
        let grew = now_held > peer.counted;
        self.held = self.held - peer.counted + now_held;
        peer.counted = now_held;
        if grew && self.held > self.config.max_receive_memory {
            peer.connection.close(
                super::CLOSE_PROTOCOL,
                b"the server's receive memory is exhausted",
            );
            self.stats.memory_closed += 1;
        }
        loop {
            match peer.connection.peek_event() {
                Some(Event::Message(_)) => {
                    self.readable.insert(handle);
                    return;
                }
                Some(_) => {
                    let event = peer.connection.poll_event().expect("peeked");
                    self.events.push_back((handle, event));
                }
                None => break,
            }
        }
        self.readable.remove(&handle);
        if peer.connection.is_closed() {
            let peer = self.peers.remove(&handle).expect("present");
            self.held -= peer.counted;
            self.by_cid.remove(&peer.connection.local_cid());
            if let Some(id) = peer.initial_dcid {
                self.by_cid.remove(&id);
            }
        }
    }

    /// The next datagram to send: its destination and length in `buf`. Connections take
    /// turns, so one busy peer does not starve the others. Call this until it gives
    /// `None` after anything that may have made data to send (a datagram in, a timeout, a
    /// message queued).
    #[must_use = "a datagram written to `buf` is sent only if the caller sends it"]
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<(A, usize)> {
        if let Some(sent) = self.transmit_retry(buf) {
            return Some(sent);
        }
        // From the one after the last to send, round to the one before it; no allocation.
        let start = self.turn;
        let mut next = self
            .peers
            .range(ConnectionHandle(start)..)
            .next()
            .or_else(|| self.peers.iter().next())
            .map(|(h, _)| *h);
        let mut visited = 0;
        let total = self.peers.len();
        while let Some(handle) = next {
            if visited == total {
                break;
            }
            visited += 1;
            next = self
                .peers
                .range(ConnectionHandle(handle.0 + 1)..)
                .next()
                .or_else(|| self.peers.iter().next())
                .map(|(h, _)| *h);
            let Some(peer) = self.peers.get_mut(&handle) else {
                continue;
            };
            let addr = peer.addr;
            let sent = peer.connection.poll_transmit(now, buf);
            // A close frame ends the connection as it goes.
            if peer.connection.is_closed() {
                self.drain(handle);
            }
            if let Some(n) = sent {
                self.turn = handle.0 + 1;
                return Some((addr, n));
            }
        }
        None
    }

    /// The next instant [`ChannelEndpoint::handle_timeout`] must be called. Ask again after
    /// every other call: any of them may move it.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.peers
            .values()
            .filter_map(|p| p.connection.poll_timeout())
            .min()
    }

    /// Acts on time passing for every connection whose time has come. Call this when
    /// the instant [`ChannelEndpoint::poll_timeout`] gave has come, then poll for datagrams and
    /// events.
    pub fn handle_timeout(&mut self, now: Instant) {
        let mut from = 0;
        while let Some(handle) = self
            .peers
            .range(ConnectionHandle(from)..)
            .find(|(_, p)| p.connection.poll_timeout().is_some_and(|t| t <= now))
            .map(|(h, _)| *h)
        {
            from = handle.0 + 1;
            if let Some(peer) = self.peers.get_mut(&handle) {
                peer.connection.handle_timeout(now);
            }
            self.drain(handle);
        }
    }

    /// The next event of any connection: connected and closed events first, then
    /// messages, connections taking turns. Taking a message opens its connection's window.
    #[must_use = "an event taken here is gone"]
    pub fn poll_event(&mut self) -> Option<(ConnectionHandle, Event)> {
        if let Some(event) = self.events.pop_front() {
            return Some(event);
        }
        let handle = *self
            .readable
            .range(ConnectionHandle(self.read_turn)..)
            .next()
            .or_else(|| self.readable.iter().next())?;
        self.read_turn = handle.0 + 1;
        self.poll_message(handle)
            .map(|m| (handle, Event::Message(m)))
    }

    /// The next connected or closed event, leaving messages where they are (for a driver
    /// that takes each connection's messages with [`ChannelEndpoint::poll_message`]).
    #[must_use = "an event taken here is gone"]
    pub fn poll_status(&mut self) -> Option<(ConnectionHandle, Event)> {
        self.events.pop_front()
    }

    /// The next message of one connection, if one is ready (for a driver that hands each
    /// connection's messages on only as its application takes them).
    #[must_use = "a message taken here is gone"]
    pub fn poll_message(&mut self, handle: ConnectionHandle) -> Option<alloc::vec::Vec<u8>> {
        let peer = self.peers.get_mut(&handle)?;
        let Some(Event::Message(_)) = peer.connection.peek_event() else {
            return None;
        };
        let Some(Event::Message(message)) = peer.connection.poll_event() else {
            unreachable!("peeked a message");
        };
        self.drain(handle);
        Some(message)
    }

    /// Bytes of memory every connection's messages hold, summed (see
    /// [`EndpointConfig::max_receive_memory`]).
    pub fn receive_memory(&self) -> u64 {
        self.held
    }

    /// Connections with a message ready.
    pub fn readable(&self) -> impl Iterator<Item = ConnectionHandle> + '_ {
        self.readable.iter().copied()
    }

    /// Queues a message on a connection (see [`Connection::send`]).
    pub fn send(
        &mut self,
        handle: ConnectionHandle,
        message: impl Into<Payload>,
    ) -> Result<(), SendError> {
        let peer = self.peers.get_mut(&handle).ok_or(SendError::Closed)?;
        peer.connection.send(message)
    }

    /// Closes a connection (see [`Connection::close`]).
    pub fn close(&mut self, handle: ConnectionHandle, code: u32, reason: &[u8]) {
        if let Some(peer) = self.peers.get_mut(&handle) {
            peer.connection.close(code, reason);
        }
    }

    /// The address a connection's peer sends from (as it was last validated).
    pub fn peer_addr(&self, handle: ConnectionHandle) -> Option<A> {
        self.peers.get(&handle).map(|p| p.addr)
    }

    /// A connection, to read its state and counters.
    pub fn connection(&self, handle: ConnectionHandle) -> Option<&Connection> {
        self.peers.get(&handle).map(|p| &p.connection)
    }

    /// Connections open now.
    pub fn len(&self) -> usize {
        self.peers.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.peers.is_empty()
    }

    /// Connections whose peer has not proven its address.
    pub fn half_open(&self) -> usize {
        self.peers
            .values()
            .filter(|p| !p.connection.is_validated())
            .count()
    }

    /// Counters so far.
    pub fn stats(&self) -> EndpointStats {
        self.stats
    }
}

/// How often a driver should give [`ChannelEndpoint::rotate_token_key`] a new key: longer than
/// a token lives, so the key before the current one covers every live token.
pub const TOKEN_KEY_PERIOD: crate::time::Duration = crate::time::Duration::from_secs(30);

/// The token an initial carries, if any (frames past a malformed one are not looked at:
/// the connection drops such a datagram whole).
fn initial_token(datagram: &[u8]) -> Option<&[u8]> {
    let (_, frames) = wire::parse(datagram).ok()?;
    frames.map_while(Result::ok).find_map(|f| match f {
        wire::PacketFrame::Token(t) => Some(t),
        _ => None,
    })
}

impl<A> core::fmt::Debug for ChannelEndpoint<A> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ChannelEndpoint")
            .field("peers", &self.peers.len())
            .field("stats", &self.stats)
            .finish()
    }
}
