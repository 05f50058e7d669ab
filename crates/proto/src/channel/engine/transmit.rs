//! Sending: what goes in the next datagram (the close, the handshake's params, acks,
//! fragments of queued messages, probes and keep-alives), under the congestion window,
//! the pacer and the anti-amplification limit.

use alloc::vec::Vec;

use super::{ACK_RANGES_KEPT, Closed, Connection, Fragment, MIN_DATAGRAM, SentPacket, State, span};
use crate::channel::packet::{
    self as wire, DATA_OVERHEAD, PARAMS_LEN, PacketFrame, PacketHeader, PacketType, Params,
};
use crate::time::Instant;
use crate::wire::Error as WireError;

impl Connection {
    /// Writes the next datagram to send into `buf` and returns its length, or `None` when
    /// there is nothing to send now (or the congestion window, the pacer or the
    /// anti-amplification limit holds it back: see [`Connection::poll_timeout`]).
    #[must_use = "a datagram written to `buf` is sent only if the caller sends it"]
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        self.receive.last_heard.get_or_insert(now);
        if buf.len() < MIN_DATAGRAM {
            return None;
        }
        if let Some((code, reason)) = self.send.close_frame.take() {
            return self.write_close(buf, code, &reason);
        }
        if self.state == State::Closed {
            return None;
        }
        let limit = self.datagram_limit(buf.len());
        if limit < wire::LONG_HEADER + PARAMS_LEN + wire::ack_len(1) {
            return None;
        }
        let buf = &mut buf[..limit];
        let ty = self.packet_type();
        let plan = self.plan(now, limit)?;
        let pn = self.send.next_pn;
        if pn == u32::MAX {
            // Packet numbers are never reused: a connection that has used them all ends.
            self.fail(Closed::Protocol(WireError::TooLarge {
                what: "channel packet numbers used",
                len: u64::from(u32::MAX),
                max: u64::from(u32::MAX) - 1,
            }));
            return None;
        }
        let header = PacketHeader {
            ty,
            dcid: self.remote_cid,
            scid: (ty != PacketType::DATA).then_some(self.local_cid),
            pn,
        };
        let mut n = wire::emit_header(&header, buf).ok()?;
        let mut eliciting = false;
        if ty != PacketType::DATA {
            n += self.write_handshake_frames(ty, &mut buf[n..])?;
            eliciting = true;
        }
        n += self.write_ack_frame(&mut buf[n..]);
        let mut fragments = Vec::new();
        if plan.data {
            n += self.write_fragments(&mut buf[n..], &mut fragments);
            eliciting |= !fragments.is_empty();
        }
        if (plan.probe || plan.keep_alive) && !eliciting {
            n += wire::emit_frame(&PacketFrame::Ping, &mut buf[n..]).ok()?;
            eliciting = true;
        }
        self.recovery.probe_due = false;
        if ty == PacketType::INITIAL {
            // Padded, so the server may answer before our address is proven.
            while n < MIN_DATAGRAM.min(buf.len()) {
                buf[n] = 0;
                n += 1;
            }
        }
        self.on_sent(now, pn, n, ty, eliciting, fragments);
        Some(n)
    }

    /// The close frame, in a packet of the type the state calls for; the connection ends.
    /// A close goes out even from a connection that has just ended over an error.
    fn write_close(&mut self, buf: &mut [u8], code: u32, reason: &[u8]) -> Option<usize> {
        let ty = self.packet_type();
        let header = PacketHeader {
            ty,
            dcid: self.remote_cid,
            scid: (ty != PacketType::DATA).then_some(self.local_cid),
            pn: self.send.next_pn,
        };
        let mut n = wire::emit_header(&header, buf).ok()?;
        n += wire::emit_frame(&PacketFrame::Close { code, reason }, &mut buf[n..]).ok()?;
        self.send.next_pn += 1;
        self.send.bytes_sent += n as u64;
        self.stats.sent += 1;
        self.fail(Closed::Local);
        Some(n)
    }

    /// The packet type the connection's state calls for.
    fn packet_type(&self) -> PacketType {
        match self.state {
            State::Handshake if self.is_client => PacketType::INITIAL,
            State::Handshake => PacketType::ACCEPT,
            _ => PacketType::DATA,
        }
    }

    /// The largest datagram that may go now: the buffer, both ends' limits, and for an
    /// unproven peer the anti-amplification budget (at most 3x what it sent).
    fn datagram_limit(&self, buf_len: usize) -> usize {
        let budget = if self.validated {
            usize::MAX
        } else {
            (3 * self.receive.bytes_received).saturating_sub(self.send.bytes_sent) as usize
        };
        buf_len
            .min(usize::from(self.config.max_datagram))
            .min(usize::from(self.peer.max_datagram.max(MIN_DATAGRAM as u16)))
            .min(budget)
    }

    /// What the next datagram carries, or `None` if nothing needs to go. Data waits for
    /// the congestion window and the pacer (which this arms); acks, closes, the handshake
    /// and pings do not, and a probe goes past both (RFC 9002 §7.5).
    fn plan(&mut self, now: Instant, limit: usize) -> Option<Plan> {
        let handshake = self.send.handshake_due && self.state == State::Handshake;
        let has_data = self.has_data_to_send();
        let keep_alive =
            self.state == State::Established && now >= self.send.last_sent + self.config.keep_alive;
        let wants_ack = self.receive.ack_due && self.receive.received_pns.len() > 0;
        let probing = self.recovery.probe_due && has_data && self.state == State::Established;
        let mut data = has_data
            && self.state == State::Established
            && self.recovery.in_flight + limit as u64 <= self.recovery.cc.window.max(limit as u64);
        if data && !probing {
            if let Some(at) = self.recovery.pacer.delay(
                now,
                limit as u64,
                self.recovery.cc.window,
                self.recovery.rtt.srtt_or_rto(),
            ) {
                self.send.pace_until = Some(at);
                data = false;
            }
        }
        data |= probing;
        let probe = self.recovery.probe_due && self.state == State::Established && !data;
        (handshake || data || keep_alive || wants_ack || probe).then_some(Plan {
            data,
            keep_alive,
            probe,
        })
    }

    /// The handshake's frames: this end's parameters, and a client's retry token.
    fn write_handshake_frames(&mut self, ty: PacketType, buf: &mut [u8]) -> Option<usize> {
        let params = Params {
            max_message: self.config.max_message,
            window: self.window(),
            max_datagram: self.config.max_datagram,
        };
        let mut n = wire::emit_frame(&PacketFrame::Params(params), buf).ok()?;
        let token = self.send.retry_token.as_deref();
        if let Some(token) = token.filter(|_| ty == PacketType::INITIAL) {
            n += wire::emit_frame(&PacketFrame::Token(token), &mut buf[n..]).ok()?;
        }
        self.send.handshake_due = false;
        Some(n)
    }

    /// An ack of what has been received, with the window, if anything has; 0 bytes if
    /// not (or if it does not fit).
    fn write_ack_frame(&mut self, buf: &mut [u8]) -> usize {
        if self.receive.received_pns.len() == 0 {
            return 0;
        }
        // At most ACK_RANGES_KEPT ranges: on the stack, no allocation per datagram.
        let mut ranges = [(0u32, 0u32); ACK_RANGES_KEPT];
        let mut count = 0;
        for (slot, (lo, hi)) in ranges
            .iter_mut()
            .zip(self.receive.received_pns.iter().rev())
        {
            *slot = (lo as u32, (hi - 1) as u32);
            count += 1;
        }
        let Ok(n) = wire::emit_ack(&ranges[..count], 0, self.window(), buf) else {
            return 0;
        };
        self.receive.advertised = self.window();
        self.receive.ack_due = false;
        self.receive.eliciting_unacked = 0;
        self.receive.ack_timer = None;
        n
    }

    /// Counts a datagram of `n` bytes sent; one that asks for an ack is tracked for
    /// recovery (packets with only acks are not acknowledged in turn, so they are not).
    fn on_sent(
        &mut self,
        now: Instant,
        pn: u32,
        n: usize,
        ty: PacketType,
        eliciting: bool,
        fragments: Vec<Fragment>,
    ) {
        self.send.next_pn += 1;
        self.send.bytes_sent += n as u64;
        self.send.last_sent = now;
        self.stats.sent += 1;
        if !eliciting {
            return;
        }
        self.recovery.last_eliciting_sent = Some(now);
        self.recovery.in_flight += n as u64;
        if !fragments.is_empty() {
            self.recovery.pacer.take(n as u64);
        }
        self.recovery.sent.push_back(SentPacket {
            pn,
            time: now,
            size: n as u64,
            in_flight: true,
            fragments,
            handshake: ty != PacketType::DATA,
        });
    }

    /// Whether anything of a message is ready to go: a fragment to resend, or new bytes
    /// the peer's window takes.
    pub(super) fn has_data_to_send(&self) -> bool {
        !self.send.retransmit.is_empty()
            || self
                .send
                .out
                .get(self.send.cursor)
                .is_some_and(|m| m.start + span(m.data.len() as u64) <= self.send.peer_window)
    }

    /// Packs fragments (retransmissions first, then new bytes) into `buf`; returns bytes
    /// written.
    pub(super) fn write_fragments(&mut self, buf: &mut [u8], sent: &mut Vec<Fragment>) -> usize {
        let mut n = 0;
        while buf.len() - n > DATA_OVERHEAD {
            let room = (buf.len() - n - DATA_OVERHEAD).min(usize::from(u16::MAX)) as u32;
            let Some(f) = self.next_fragment(room) else {
                break;
            };
            let i = self.send.out.partition_point(|m| m.start < f.start);
            let Some(m) = self.send.out.get(i).filter(|m| m.start == f.start) else {
                continue;
            };
            // `next_fragment` keeps every fragment inside one piece.
            let Some(data) = m.data.chunk(f.offset as usize).get(..f.len as usize) else {
                continue;
            };
            let frame = PacketFrame::Data {
                start: f.start,
                total: m.data.len() as u32,
                offset: f.offset,
                data,
            };
            match wire::emit_frame(&frame, &mut buf[n..]) {
                Ok(k) => n += k,
                Err(_) => break,
            }
            sent.push(f);
        }
        n
    }

    /// The next fragment to send, at most `room` bytes: a lost one still unacknowledged,
    /// else new bytes below the peer's window.
    pub(super) fn next_fragment(&mut self, room: u32) -> Option<Fragment> {
        while let Some(f) = self.send.retransmit.pop_front() {
            let i = self.send.out.partition_point(|m| m.start < f.start);
            let Some(m) = self.send.out.get(i).filter(|m| m.start == f.start) else {
                continue;
            };
            let (lo, hi) = (u64::from(f.offset), u64::from(f.offset + f.len));
            if m.whole || m.acked.contains_all(lo, hi.max(lo + 1)) {
                continue;
            }
            // Too big for what is left of this datagram, or running past its piece:
            // split it.
            let piece = u32::try_from(m.data.chunk(f.offset as usize).len()).unwrap_or(u32::MAX);
            let fits = room.min(piece.max(1));
            if f.len > fits {
                self.send.retransmit.push_front(Fragment {
                    start: f.start,
                    offset: f.offset + fits,
                    len: f.len - fits,
                });
                return Some(Fragment { len: fits, ..f });
            }
            return Some(f);
        }
        let m = self.send.out.get_mut(self.send.cursor)?;
        let len = m.data.len() as u32;
        // The receiver places a message whole (it allocates its buffer at the first
        // fragment), so no byte of it goes before all of it fits the peer's window.
        if m.start + span(u64::from(len)) > self.send.peer_window {
            return None;
        }
        if len == 0 {
            self.send.cursor += 1;
            return Some(Fragment {
                start: m.start,
                offset: 0,
                len: 0,
            });
        }
        // One piece per fragment: a fragment is copied from one contiguous chunk.
        let piece = u32::try_from(m.data.chunk(m.sent as usize).len()).unwrap_or(u32::MAX);
        let take = (len - m.sent).min(room).min(piece);
        if take == 0 {
            return None;
        }
        let f = Fragment {
            start: m.start,
            offset: m.sent,
            len: take,
        };
        m.sent += take;
        if m.sent == len {
            self.send.cursor += 1;
        }
        Some(f)
    }
}

/// What [`Connection::plan`] decided the next datagram carries beyond its header and ack.
struct Plan {
    /// Fragments of messages.
    data: bool,
    /// A ping, because nothing has gone to the peer for the keep-alive interval.
    keep_alive: bool,
    /// A ping to provoke an ack (a probe with no data to resend).
    probe: bool,
}
