//! Sending: what goes in the next datagram (the close, the handshake's params, acks,
//! fragments of queued messages, probes and keep-alives), under the congestion window,
//! the pacer and the anti-amplification limit.

use alloc::vec::Vec;

use super::*;

impl Connection {
    /// Writes the next datagram to send into `buf` and returns its length, or `None` when
    /// there is nothing to send now (or the congestion window, the pacer or the
    /// anti-amplification limit holds it back: see [`Connection::poll_timeout`]).
    #[must_use = "a datagram written to `buf` is sent only if the caller sends it"]
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        self.last_heard.get_or_insert(now);
        if buf.len() < MIN_DATAGRAM {
            return None;
        }
        if let Some((code, reason)) = self.close_frame.take() {
            // A close goes out even from a connection that has just ended over an error.
            let ty = if self.state == State::Handshake && self.is_client {
                PacketType::INITIAL
            } else if self.state == State::Handshake {
                PacketType::ACCEPT
            } else {
                PacketType::DATA
            };
            let header = Header {
                ty,
                dcid: self.remote_cid,
                scid: (ty != PacketType::DATA).then_some(self.local_cid),
                pn: self.next_pn,
            };
            let mut n = wire::write_header(&header, buf).ok()?;
            n += wire::write_frame(
                &Frame::Close {
                    code,
                    reason: &reason,
                },
                &mut buf[n..],
            )
            .ok()?;
            self.next_pn += 1;
            self.bytes_sent += n as u64;
            self.stats.sent += 1;
            self.fail(Closed::Local);
            return Some(n);
        }
        if self.state == State::Closed {
            return None;
        }
        // Anti-amplification: an unproven peer gets at most 3x what it sent.
        let budget = if self.validated {
            usize::MAX
        } else {
            (3 * self.bytes_received).saturating_sub(self.bytes_sent) as usize
        };
        let limit = buf
            .len()
            .min(usize::from(self.config.max_datagram))
            .min(usize::from(self.peer.max_datagram.max(MIN_DATAGRAM as u16)))
            .min(budget);
        if limit < wire::LONG_HEADER + PARAMS_LEN + wire::ack_len(1) {
            return None;
        }
        let buf = &mut buf[..limit];
        let ty = match self.state {
            State::Handshake if self.is_client => PacketType::INITIAL,
            State::Handshake => PacketType::ACCEPT,
            _ => PacketType::DATA,
        };
        let handshake = self.handshake_due && self.state == State::Handshake;
        let has_data = self.has_data_to_send();
        let keep_alive =
            self.state == State::Established && now >= self.last_sent + self.config.keep_alive;
        let wants_ack = self.ack_due && self.received_pns.len() > 0;
        // Data waits for the congestion window and the pacer; acks and closes do not.
        let probing = self.probe_due && has_data && self.state == State::Established;
        let mut may_send_data = has_data
            && self.state == State::Established
            && self.in_flight + limit as u64 <= self.cc.window.max(limit as u64);
        if may_send_data && !probing {
            if let Some(at) =
                self.pacer
                    .delay(now, limit as u64, self.cc.window, self.rtt.srtt_or_rto())
            {
                self.pace_until = Some(at);
                may_send_data = false;
            }
        }
        // A probe goes past the congestion window and the pacer (RFC 9002 §7.5).
        may_send_data |= probing;
        let probe = self.probe_due && self.state == State::Established && !may_send_data;
        if !(handshake || may_send_data || keep_alive || wants_ack || probe) {
            return None;
        }
        let pn = self.next_pn;
        if pn == u32::MAX {
            // Packet numbers are never reused: a connection that has used them all ends.
            self.fail(Closed::Protocol(WireError::TooLarge {
                what: "channel packet numbers used",
                len: u64::from(u32::MAX),
                max: u64::from(u32::MAX) - 1,
            }));
            return None;
        }
        let header = Header {
            ty,
            dcid: self.remote_cid,
            scid: (ty != PacketType::DATA).then_some(self.local_cid),
            pn,
        };
        let mut n = wire::write_header(&header, buf).ok()?;
        let mut eliciting = false;
        if ty != PacketType::DATA {
            let params = Params {
                max_message: self.config.max_message,
                window: self.window(),
                max_datagram: self.config.max_datagram,
            };
            n += wire::write_frame(&Frame::Params(params), &mut buf[n..]).ok()?;
            if let Some(token) = self
                .retry_token
                .as_deref()
                .filter(|_| ty == PacketType::INITIAL)
            {
                n += wire::write_frame(&Frame::Token(token), &mut buf[n..]).ok()?;
            }
            eliciting = true;
            self.handshake_due = false;
        }
        if self.received_pns.len() > 0 {
            // At most ACK_RANGES_KEPT ranges: on the stack, no allocation per datagram.
            let mut ranges = [(0u32, 0u32); ACK_RANGES_KEPT];
            let mut count = 0;
            for (slot, (lo, hi)) in ranges.iter_mut().zip(self.received_pns.iter().rev()) {
                *slot = (lo as u32, (hi - 1) as u32);
                count += 1;
            }
            let ranges = &ranges[..count];
            if let Ok(k) = wire::write_ack(ranges, 0, self.window(), &mut buf[n..]) {
                self.advertised = self.window();
                n += k;
                self.ack_due = false;
                self.eliciting_unacked = 0;
                self.ack_timer = None;
            }
        }
        let mut fragments = Vec::new();
        if may_send_data {
            n += self.write_fragments(&mut buf[n..], &mut fragments);
            eliciting |= !fragments.is_empty();
        }
        if (probe || keep_alive) && !eliciting {
            n += wire::write_frame(&Frame::Ping, &mut buf[n..]).ok()?;
            eliciting = true;
        }
        self.probe_due = false;
        if ty == PacketType::INITIAL {
            // Padded, so the server may answer before our address is proven.
            while n < MIN_DATAGRAM.min(buf.len()) {
                buf[n] = 0;
                n += 1;
            }
        }
        self.next_pn += 1;
        self.bytes_sent += n as u64;
        self.last_sent = now;
        self.stats.sent += 1;
        if eliciting {
            self.last_eliciting_sent = Some(now);
            self.in_flight += n as u64;
            if !fragments.is_empty() {
                self.pacer.take(n as u64);
            }
        }
        // Packets with only acks are not acknowledged in turn, so they are not tracked.
        if eliciting {
            self.sent.push_back(SentPacket {
                pn,
                time: now,
                size: n as u64,
                in_flight: true,
                fragments,
                handshake: ty != PacketType::DATA,
            });
        }
        Some(n)
    }

    pub(super) fn has_data_to_send(&self) -> bool {
        !self.retransmit.is_empty()
            || self
                .out
                .get(self.cursor)
                .is_some_and(|m| m.start + span(m.data.len() as u64) <= self.peer_window)
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
            let i = self.out.partition_point(|m| m.start < f.start);
            let Some(m) = self.out.get(i).filter(|m| m.start == f.start) else {
                continue;
            };
            // `next_fragment` keeps every fragment inside one piece.
            let Some(data) = m.data.chunk(f.offset as usize).get(..f.len as usize) else {
                continue;
            };
            let frame = Frame::Data {
                start: f.start,
                total: m.data.len() as u32,
                offset: f.offset,
                data,
            };
            match wire::write_frame(&frame, &mut buf[n..]) {
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
        while let Some(f) = self.retransmit.pop_front() {
            let i = self.out.partition_point(|m| m.start < f.start);
            let Some(m) = self.out.get(i).filter(|m| m.start == f.start) else {
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
                self.retransmit.push_front(Fragment {
                    start: f.start,
                    offset: f.offset + fits,
                    len: f.len - fits,
                });
                return Some(Fragment { len: fits, ..f });
            }
            return Some(f);
        }
        let m = self.out.get_mut(self.cursor)?;
        let len = m.data.len() as u32;
        // The receiver places a message whole (it allocates its buffer at the first
        // fragment), so no byte of it goes before all of it fits the peer's window.
        if m.start + span(u64::from(len)) > self.peer_window {
            return None;
        }
        if len == 0 {
            self.cursor += 1;
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
            self.cursor += 1;
        }
        Some(f)
    }
}
