//! The channel's state machine: a [`Connection`] per peer and the [`ChannelEndpoint`] that holds
//! many (needs the `alloc` feature; [`packet`](super::packet) does not).

use alloc::collections::{BTreeMap, VecDeque};
use alloc::vec::Vec;

use crate::channel::packet::{self as wire, PacketFrame, PacketHeader, PacketType, Params};
use crate::recovery::{Rto, RttEstimator};
use crate::time::{Duration, Instant};
use crate::wire::Error as WireError;

mod cc;
mod config;
mod endpoint;
#[cfg(test)]
mod hostile_tests;
mod loss;
mod payload;
mod ranges;
mod receive;
mod retry;
#[cfg(test)]
mod tests;
mod transmit;

pub use config::{Config, ConfigError};
pub use endpoint::{
    ChannelEndpoint, ConnectError, ConnectionHandle, EndpointConfig, EndpointStats,
    TOKEN_KEY_PERIOD,
};
pub use payload::{Payload, Pieces, chunk_in};
use receive::InMessage;
pub use receive::{MESSAGE_COST, RANGE_COST};
pub use retry::{TOKEN_LEN, TOKEN_LIFETIME, TokenKey};

use cc::{NewReno, Pacer};
use ranges::RangeSet;

/// The close code of a connection ended because the peer broke the protocol (or went
/// past a limit); the reason says how.
pub const CLOSE_PROTOCOL: u32 = 1;

/// The smallest datagram a peer must take, and what the client's initial is padded to.
pub const MIN_DATAGRAM: usize = 1200;

/// Why a connection ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Closed {
    /// This end closed it.
    Local,
    /// The peer closed it, with its code and reason.
    Peer {
        /// The peer's code.
        code: u32,
        /// The peer's reason, as sent.
        reason: Vec<u8>,
    },
    /// Nothing came from the peer for [`Config::idle_timeout`].
    TimedOut,
    /// The peer broke the protocol.
    Protocol(WireError),
}

/// What happened, for the application.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// The handshake is done; messages may flow both ways.
    Connected,
    /// A whole message, in order.
    Message(Vec<u8>),
    /// The connection ended; nothing more will come.
    Closed(Closed),
}

/// Why [`Connection::send`] refused a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendError {
    /// Larger than the peer takes (or than this end's limit).
    TooLarge {
        /// The message's length.
        len: usize,
        /// The largest allowed.
        max: u32,
    },
    /// The send buffer is full: try again once acknowledgements have come.
    Full,
    /// The connection has ended.
    Closed,
    /// [`Pieces`] that leave a gap: an empty chunk below the message's length.
    Gap {
        /// Where.
        offset: usize,
    },
}

/// Counters, for tests and tuning.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Datagrams sent.
    pub sent: u64,
    /// Datagrams received and accepted.
    pub received: u64,
    /// Packets declared lost.
    pub lost: u64,
    /// Retransmission timeouts.
    pub timeouts: u64,
    /// Tail-loss probes sent (a probe timeout before the retransmission timeout).
    pub probes: u64,
    /// Duplicate packets dropped.
    pub duplicates: u64,
    /// Bytes of message fragments that arrived again after they had been received.
    pub duplicate_bytes: u64,
    /// Retries answered (a client's: 0 or 1; see [`ChannelEndpoint`]).
    pub retries: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Client: initial sent, no accept yet. Server: accept sent, address unproven.
    Handshake,
    Established,
    Closed,
}

/// A fragment of a message: where it lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Fragment {
    start: u64,
    offset: u32,
    len: u32,
}

#[derive(Debug)]
struct SentPacket {
    pn: u32,
    time: Instant,
    size: u64,
    /// Counted in bytes in flight (carries something other than acks).
    in_flight: bool,
    fragments: Vec<Fragment>,
    /// A handshake packet (initial or accept), resent until answered.
    handshake: bool,
}

#[derive(Debug)]
struct OutMessage {
    start: u64,
    data: Payload,
    /// Bytes sent at least once, from the front.
    sent: u32,
    acked: RangeSet,
    /// Acknowledged whole in one fragment (the common case for small messages, kept
    /// without touching `acked`).
    whole: bool,
}

/// One end of a channel to one peer.
#[derive(Debug)]
pub struct Connection {
    config: Config,
    is_client: bool,
    state: State,
    local_cid: u64,
    remote_cid: u64,
    peer: Params,
    validated: bool,
    send: SendState,
    recovery: RecoveryState,
    receive: ReceiveState,
    events: VecDeque<Event>,
    stats: Stats,
}

/// What a connection keeps to send: messages queued and where each stands, fragments to
/// resend, what the handshake and close still owe, and the peer's window.
#[derive(Debug)]
struct SendState {
    next_pn: u32,
    out: VecDeque<OutMessage>,
    out_bytes: u64,
    next_start: u64,
    /// Index in `out` of the first message not yet sent whole.
    cursor: usize,
    retransmit: VecDeque<Fragment>,
    peer_window: u64,
    pace_until: Option<Instant>,
    last_sent: Instant,
    handshake_due: bool,
    /// The token a server's retry gave (a client answers at most one retry).
    retry_token: Option<Vec<u8>>,
    close_frame: Option<(u32, Vec<u8>)>,
    bytes_sent: u64,
}

/// What a connection keeps to find and repair losses: packets in flight, the RTT and its
/// timeouts, congestion control and pacing, probes.
#[derive(Debug)]
struct RecoveryState {
    sent: VecDeque<SentPacket>,
    in_flight: u64,
    largest_acked: Option<u32>,
    rtt: RttEstimator,
    backoff: u32,
    cc: NewReno,
    pacer: Pacer,
    last_eliciting_sent: Option<Instant>,
    probe_due: bool,
    /// A tail-loss probe went out since the last new acknowledgement.
    probed: bool,
    /// Reused for the packets one ack range covers.
    scratch: Vec<SentPacket>,
}

/// What a connection keeps of what it receives: packet numbers to acknowledge, messages
/// being reassembled, and the window it gives the peer.
#[derive(Debug)]
struct ReceiveState {
    received_pns: RangeSet,
    ack_due: bool,
    eliciting_unacked: u32,
    ack_timer: Option<Instant>,
    incoming: BTreeMap<u64, InMessage>,
    /// Memory held for receiving (see [`Connection::receive_memory`]).
    held: u64,
    deliver_next: u64,
    taken: u64,
    /// When the peer was last heard from (the connection's start until then).
    last_heard: Option<Instant>,
    /// The window last sent to the peer.
    advertised: u64,
    bytes_received: u64,
}

/// The stream positions a message of `len` bytes takes: an empty message takes one, so
/// that every message has a start of its own.
fn span(len: u64) -> u64 {
    len.max(1)
}

/// How long a receiver may hold an acknowledgement for a lone packet.
const ACK_DELAY: Duration = Duration::from_micros(500);
/// Packets acknowledged after a packet that reveal its loss.
const PACKET_THRESHOLD: u32 = 3;
/// Ranges of received packet numbers remembered for acknowledgements.
const ACK_RANGES_KEPT: usize = 32;

impl Connection {
    /// A client's end: `local_cid` names this end, `initial_dcid` is a random id for the
    /// server to see in the first packet (both chosen at random by the caller). Fails if
    /// `config` fails [`Config::check`].
    pub fn client(config: Config, local_cid: u64, initial_dcid: u64) -> Result<Self, ConfigError> {
        config.check()?;
        Ok(Self::checked_client(config, local_cid, initial_dcid))
    }

    /// A server's end, made when a client's initial arrives (feed that initial to
    /// [`Connection::handle_datagram`] next); `local_cid` chosen at random by the caller.
    /// Fails if `config` fails [`Config::check`].
    pub fn server(config: Config, local_cid: u64) -> Result<Self, ConfigError> {
        config.check()?;
        Ok(Self::new(config, false, local_cid))
    }

    /// [`Connection::client`] for settings already checked (the endpoint's).
    fn checked_client(config: Config, local_cid: u64, initial_dcid: u64) -> Self {
        let mut c = Self::new(config, true, local_cid);
        c.remote_cid = initial_dcid;
        c.send.handshake_due = true;
        // The client's own address needs no proof.
        c.validated = true;
        c
    }

    /// A connection of checked settings.
    fn new(config: Config, is_client: bool, local_cid: u64) -> Self {
        let datagram = u64::from(config.max_datagram);
        Self {
            config,
            is_client,
            state: State::Handshake,
            local_cid,
            remote_cid: 0,
            peer: Params {
                max_message: 0,
                window: 0,
                max_datagram: MIN_DATAGRAM as u16,
            },
            validated: false,
            send: SendState {
                next_pn: 0,
                out: VecDeque::new(),
                out_bytes: 0,
                next_start: 0,
                cursor: 0,
                retransmit: VecDeque::new(),
                peer_window: 0,
                pace_until: None,
                last_sent: Instant::ZERO,
                handshake_due: false,
                retry_token: None,
                close_frame: None,
                bytes_sent: 0,
            },
            recovery: RecoveryState {
                sent: VecDeque::new(),
                in_flight: 0,
                largest_acked: None,
                rtt: RttEstimator::new(Rto::Adaptive(config.rto)),
                backoff: 0,
                cc: NewReno::new(datagram, u64::from(config.initial_window)),
                pacer: Pacer::new(datagram),
                last_eliciting_sent: None,
                probe_due: false,
                probed: false,
                scratch: Vec::new(),
            },
            receive: ReceiveState {
                received_pns: RangeSet::default(),
                ack_due: false,
                eliciting_unacked: 0,
                ack_timer: None,
                incoming: BTreeMap::new(),
                held: 0,
                deliver_next: 0,
                taken: 0,
                last_heard: None,
                advertised: config.window,
                bytes_received: 0,
            },
            events: VecDeque::new(),
            stats: Stats::default(),
        }
    }

    /// This end's connection id (what the peer puts in its packets' destination).
    pub fn local_cid(&self) -> u64 {
        self.local_cid
    }

    /// Whether the connection has ended.
    pub fn is_closed(&self) -> bool {
        self.state == State::Closed
    }

    /// Whether the handshake is done.
    pub fn is_established(&self) -> bool {
        self.state == State::Established
    }

    /// Whether the peer's address is proven (always, for a client).
    pub fn is_validated(&self) -> bool {
        self.validated
    }

    /// Counters so far.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Message bytes queued and not yet acknowledged.
    pub fn queued(&self) -> u64 {
        self.send.out_bytes
    }

    /// Bytes held for messages being reassembled or waiting to be taken (bounded by
    /// [`Config::window`]).
    pub fn receive_buffered(&self) -> u64 {
        self.receive
            .incoming
            .values()
            .map(|m| m.buf.len() as u64)
            .sum::<u64>()
            + self
                .events
                .iter()
                .map(|e| match e {
                    Event::Message(m) => m.len() as u64,
                    _ => 0,
                })
                .sum::<u64>()
    }

    /// The smoothed RTT, once measured.
    pub fn rtt(&self) -> Option<Duration> {
        self.recovery.rtt.srtt()
    }

    /// The congestion window, in bytes.
    pub fn congestion_window(&self) -> u64 {
        self.recovery.cc.window
    }

    /// Queues a message. Refuses one larger than either end's limit, or past
    /// [`Config::send_buffer`] (try again after acknowledgements), or on a closed
    /// connection. The bytes are kept until the peer acknowledges them. A `Vec<u8>` is
    /// one buffer; [`Payload::Pieces`] are sent as they are, never joined.
    pub fn send(&mut self, message: impl Into<Payload>) -> Result<(), SendError> {
        let message = message.into();
        if self.state == State::Closed || self.send.close_frame.is_some() {
            return Err(SendError::Closed);
        }
        let max = match self.state {
            State::Established => self.config.max_message.min(self.peer.max_message),
            _ => self.config.max_message,
        };
        if message.len() as u64 > u64::from(max) {
            return Err(SendError::TooLarge {
                len: message.len(),
                max,
            });
        }
        if self.send.out_bytes + message.len() as u64 > self.config.send_buffer {
            return Err(SendError::Full);
        }
        if let Some(offset) = message.gap() {
            return Err(SendError::Gap { offset });
        }
        let len = message.len() as u64;
        self.send.out.push_back(OutMessage {
            start: self.send.next_start,
            data: message,
            sent: 0,
            acked: RangeSet::default(),
            whole: false,
        });
        self.send.next_start += span(len);
        self.send.out_bytes += len;
        Ok(())
    }

    /// Closes the connection: a close frame goes to the peer with the next datagram, then
    /// the connection ends with [`Closed::Local`].
    pub fn close(&mut self, code: u32, reason: &[u8]) {
        if self.state != State::Closed && self.send.close_frame.is_none() {
            let reason = reason[..reason.len().min(wire::MAX_REASON)].to_vec();
            self.send.close_frame = Some((code, reason));
        }
    }

    /// The next event without taking it (a message left here still counts against the
    /// window: the peer is held back until it is taken).
    pub fn peek_event(&self) -> Option<&Event> {
        self.events.front()
    }

    /// The next event, if any. Taking a message opens the window by its size. Call this
    /// until it gives `None` after every datagram and timeout handled.
    #[must_use = "an event taken here is gone"]
    pub fn poll_event(&mut self) -> Option<Event> {
        let event = self.events.pop_front()?;
        if let Event::Message(m) = &event {
            self.message_taken(m.len());
            // The application took it: the window moves on. Tell the peer at once only
            // once it has moved by a quarter since last said (as QUIC's MAX_DATA): every
            // ack carries it anyway, and a datagram per message taken would double the
            // traffic of small calls.
            self.receive.taken += span(m.len() as u64);
            if self.window() - self.receive.advertised >= self.config.window / 4 {
                self.receive.ack_due = true;
            }
        }
        Some(event)
    }

    fn fail(&mut self, why: Closed) {
        if self.state != State::Closed {
            self.state = State::Closed;
            self.send.out.clear();
            self.send.out_bytes = 0;
            self.send.retransmit.clear();
            self.recovery.sent.clear();
            self.recovery.in_flight = 0;
            self.drop_incoming();
            self.events.push_back(Event::Closed(why));
        }
    }

    /// Takes a datagram from the peer (one whose destination id is ours, or, for a
    /// server, the client's initial). Call this for every such datagram, then
    /// [`Connection::poll_transmit`] and [`Connection::poll_event`] until each gives
    /// nothing, and re-arm the timer from [`Connection::poll_timeout`].
    pub fn handle_datagram(&mut self, now: Instant, datagram: &[u8]) {
        if self.state == State::Closed {
            return;
        }
        let Ok((header, frames)) = wire::parse(datagram) else {
            return;
        };
        if !self.header_fits(&header) {
            return;
        }
        if header.ty == PacketType::RETRY {
            self.on_retry(now, frames);
            return;
        }
        // Check every frame before acting on any: a datagram is taken whole or not at all.
        let mut eliciting = false;
        for frame in frames.clone() {
            match frame {
                Ok(PacketFrame::Ack(_) | PacketFrame::Padding | PacketFrame::Token(_)) => {}
                // Messages travel only in data packets, which need the id only our
                // accept told: a handshake packet carrying one is forged or broken, and
                // an unproven address gets no state for it.
                Ok(PacketFrame::Data { .. }) if header.ty != PacketType::DATA => return,
                Ok(_) => eliciting = true,
                Err(_) => return,
            }
        }
        self.receive.bytes_received += datagram.len() as u64;
        self.receive.last_heard = Some(now);
        if !self.is_client && header.ty == PacketType::DATA && self.state == State::Handshake {
            // Only a client that read our accept knows our id: its address is proven.
            self.validated = true;
            self.established();
        }
        let pn = u64::from(header.pn);
        if self.receive.received_pns.contains(pn) {
            self.stats.duplicates += 1;
            // Acknowledge again: our earlier ack may have been lost.
            if eliciting {
                self.receive.ack_due = true;
            }
            return;
        }
        let in_order = self.receive.received_pns.max().is_none_or(|m| pn == m + 1);
        self.receive.received_pns.insert(pn, pn + 1);
        self.receive.received_pns.keep_highest(ACK_RANGES_KEPT);
        self.stats.received += 1;
        if eliciting {
            self.receive.eliciting_unacked += 1;
            if !in_order || self.receive.eliciting_unacked >= 2 || header.ty != PacketType::DATA {
                self.receive.ack_due = true;
            } else if self.receive.ack_timer.is_none() {
                self.receive.ack_timer = Some(now + ACK_DELAY);
            }
        }
        match header.ty {
            PacketType::ACCEPT if self.is_client => {
                if let Some(scid) = header.scid {
                    self.remote_cid = scid;
                }
                if self.state == State::Handshake {
                    self.established();
                }
            }
            PacketType::INITIAL if !self.is_client => {
                if let Some(scid) = header.scid {
                    self.remote_cid = scid;
                }
                self.send.handshake_due = true;
            }
            _ => {}
        }
        let (_, frames) = wire::parse(datagram).expect("parsed above");
        for frame in frames.flatten() {
            if self.state == State::Closed {
                return;
            }
            match frame {
                PacketFrame::Padding | PacketFrame::Ping | PacketFrame::Token(_) => {}
                PacketFrame::Params(p) => {
                    self.peer = p;
                    self.send.peer_window = self.send.peer_window.max(p.window);
                }
                PacketFrame::Ack(ack) => self.on_ack(now, &ack),
                PacketFrame::Data {
                    start,
                    total,
                    offset,
                    data,
                } => {
                    if let Err(e) = self.on_data(start, total, offset, data) {
                        // The peer is told why, as far as a close frame's reason holds.
                        let mut reason = alloc::format!("protocol violation: {e}").into_bytes();
                        reason.truncate(wire::MAX_REASON);
                        self.send.close_frame = Some((CLOSE_PROTOCOL, reason));
                        self.fail(Closed::Protocol(e));
                    }
                }
                PacketFrame::Close { code, reason } => {
                    self.fail(Closed::Peer {
                        code,
                        reason: reason.to_vec(),
                    });
                }
            }
        }
        self.deliver();
    }

    /// Whether a packet with this header belongs here.
    fn header_fits(&self, header: &PacketHeader) -> bool {
        match header.ty {
            PacketType::INITIAL => !self.is_client,
            PacketType::ACCEPT => self.is_client && header.dcid == self.local_cid,
            // Only the answer to our own initial, and only one.
            PacketType::RETRY => {
                self.is_client
                    && self.state == State::Handshake
                    && self.send.retry_token.is_none()
                    && header.dcid == self.local_cid
                    && header.scid == Some(self.remote_cid)
            }
            _ => header.dcid == self.local_cid,
        }
    }

    /// A server's retry: the initials sent so far will not be answered; the next one goes
    /// at once, with the token.
    fn on_retry(&mut self, now: Instant, frames: wire::Frames<'_>) {
        let mut token = None;
        for frame in frames {
            match frame {
                Ok(PacketFrame::Token(t)) if token.is_none() && !t.is_empty() => token = Some(t),
                Ok(PacketFrame::Padding) => {}
                _ => return,
            }
        }
        let Some(token) = token else {
            return;
        };
        self.send.retry_token = Some(token.to_vec());
        self.receive.last_heard = Some(now);
        self.stats.retries += 1;
        for p in self.recovery.sent.drain(..) {
            if p.in_flight {
                self.recovery.in_flight -= p.size;
            }
        }
        self.send.handshake_due = true;
    }

    fn established(&mut self) {
        if self.state == State::Handshake {
            self.state = State::Established;
            self.events.push_back(Event::Connected);
            // The handshake packets are answered: stop resending them.
            for p in self.recovery.sent.iter_mut() {
                p.handshake = false;
            }
        }
    }
}
