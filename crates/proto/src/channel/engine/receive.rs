//! The receiving side of a [`Connection`]: message fragments placed into their messages,
//! whole messages handed over in order, and what all of that holds in memory, counted
//! against [`Config::receive_memory`].
//!
//! The window bounds stream positions, not memory: an empty message takes one position
//! but a map entry and a range list, so a peer sending empty messages out of order could
//! make 19 wire bytes cost a few hundred bytes of memory. So each held message is counted
//! at its bytes plus [`MESSAGE_COST`], each range of received bytes at [`RANGE_COST`],
//! and a peer that takes the count past the budget is closed with a reason.

use alloc::vec;
use alloc::vec::Vec;

use super::ranges::RangeSet;
use super::{Connection, Event, span};
use crate::wire::Error as WireError;

/// What one message held for the application costs beyond its bytes: a map entry or a
/// queue slot, and the list of its received ranges (rounded up from what they take on a
/// 64-bit target, allocator overhead included).
pub const MESSAGE_COST: u64 = 128;
/// What one range of a message's received bytes costs.
pub const RANGE_COST: u64 = 16;

/// A message being reassembled.
#[derive(Debug)]
pub(super) struct InMessage {
    pub(super) buf: Vec<u8>,
    pub(super) received: RangeSet,
}

impl InMessage {
    fn cost(&self) -> u64 {
        self.buf.len() as u64 + MESSAGE_COST + RANGE_COST * self.received.len() as u64
    }
}

impl Connection {
    /// Bytes of memory held for receiving: messages being reassembled and whole ones not
    /// yet taken, each at its length plus [`MESSAGE_COST`], and their received ranges.
    /// Never more than [`Config::receive_memory`](super::Config::receive_memory).
    pub fn receive_memory(&self) -> u64 {
        self.receive.held
    }

    /// The application took a message of `len` bytes.
    pub(super) fn message_taken(&mut self, len: usize) {
        self.receive.held = self.receive.held.saturating_sub(len as u64 + MESSAGE_COST);
    }

    /// Counts `more` bytes of memory against the budget; an error past it.
    fn charge(&mut self, more: u64) -> Result<(), WireError> {
        let after = self.receive.held.saturating_add(more);
        if after > self.config.receive_memory {
            return Err(WireError::TooLarge {
                what: "memory held for the peer's messages",
                len: after,
                max: self.config.receive_memory,
            });
        }
        self.receive.held = after;
        Ok(())
    }

    /// Forgets every message being reassembled (the connection ended).
    pub(super) fn drop_incoming(&mut self) {
        let freed: u64 = self.receive.incoming.values().map(InMessage::cost).sum();
        self.receive.held = self.receive.held.saturating_sub(freed);
        self.receive.incoming.clear();
    }

    pub(super) fn on_data(
        &mut self,
        start: u64,
        total: u32,
        offset: u32,
        data: &[u8],
    ) -> Result<(), WireError> {
        if total > self.config.max_message {
            return Err(WireError::TooLarge {
                what: "channel message",
                len: u64::from(total),
                max: u64::from(self.config.max_message),
            });
        }
        let end = start
            .checked_add(span(u64::from(total)))
            .ok_or(WireError::InvalidValue {
                what: "channel message start",
                value: start,
            })?;
        if end > self.window() {
            return Err(WireError::TooLarge {
                what: "channel message past the receive window",
                len: end,
                max: self.window(),
            });
        }
        if start < self.receive.deliver_next {
            // A message already delivered: a duplicate.
            self.stats.duplicate_bytes += data.len() as u64;
            return Ok(());
        }
        if start == self.receive.deliver_next
            && offset == 0
            && data.len() == total as usize
            && !self.receive.incoming.contains_key(&start)
        {
            // The next message, whole in one fragment: straight to the application (the
            // common case for small messages, with no reassembly to do).
            self.charge(u64::from(total) + MESSAGE_COST)?;
            self.receive.deliver_next += span(u64::from(total));
            self.events.push_back(Event::Message(data.to_vec()));
            return Ok(());
        }
        if !self.receive.incoming.contains_key(&start) {
            // A new message must not overlap its neighbours.
            let before = self.receive.incoming.range(..start).next_back();
            if before.is_some_and(|(s, m)| s + span(m.buf.len() as u64) > start) {
                return Err(WireError::InvalidValue {
                    what: "channel messages overlapping",
                    value: start,
                });
            }
            let after = self.receive.incoming.range(start + 1..).next();
            if after.is_some_and(|(s, _)| *s < end) {
                return Err(WireError::InvalidValue {
                    what: "channel messages overlapping",
                    value: start,
                });
            }
            // Counted before anything is allocated for it.
            self.charge(u64::from(total) + MESSAGE_COST)?;
            self.receive.incoming.insert(
                start,
                InMessage {
                    buf: vec![0; total as usize],
                    received: RangeSet::default(),
                },
            );
        }
        let Some(m) = self.receive.incoming.get(&start) else {
            unreachable!("inserted above");
        };
        if m.buf.len() != total as usize {
            return Err(WireError::InvalidValue {
                what: "channel message length changed",
                value: u64::from(total),
            });
        }
        if data.is_empty() && total > 0 {
            // Only an empty message has an empty fragment.
            return Ok(());
        }
        // A fragment may add a range (a gap left on each side); count it before it is
        // kept, as the one message's received list can grow with every fragment.
        self.charge(RANGE_COST)?;
        let Some(m) = self.receive.incoming.get_mut(&start) else {
            unreachable!("inserted above");
        };
        let ranges_before = m.received.len();
        let (lo, hi) = (u64::from(offset), u64::from(offset) + data.len() as u64);
        let new = m.received.insert(lo, hi.max(lo + 1));
        let ranges_after = m.received.len();
        // Give back what the fragment did not add (merges may even remove ranges).
        let refund = RANGE_COST * (1 + ranges_before as u64).saturating_sub(ranges_after as u64);
        self.receive.held = self.receive.held.saturating_sub(refund);
        if new == 0 && !data.is_empty() {
            self.stats.duplicate_bytes += data.len() as u64;
            return Ok(());
        }
        // The one copy: from the datagram into the message, where it belongs.
        m.buf[offset as usize..offset as usize + data.len()].copy_from_slice(data);
        Ok(())
    }

    /// Hands over whole messages in order.
    pub(super) fn deliver(&mut self) {
        while let Some(m) = self.receive.incoming.get(&self.receive.deliver_next) {
            let len = m.buf.len() as u64;
            let whole = m.received.contains_all(0, len.max(1));
            if !whole {
                break;
            }
            let Some(m) = self.receive.incoming.remove(&self.receive.deliver_next) else {
                unreachable!("present");
            };
            // Whole, it is held as a queued message: its bytes and one message's cost.
            self.receive.held = self.receive.held.saturating_sub(m.cost()) + len + MESSAGE_COST;
            self.receive.deliver_next += span(len);
            self.events.push_back(Event::Message(m.buf));
        }
    }
}
