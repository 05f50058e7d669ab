//! SC&MP's costs, modelled so that figures measured against the emulator mean something
//! for hardware: the Ethernet chip's monitor core serves one request at a time, a request
//! for another chip is forwarded over P2P and holds one of that chip's streams while it
//! crosses the hops and back, and a board holds only so many messages at once. The
//! defaults, and where each comes from:
//!
//! - [`ScampCosts::service`], 63.8 us a request: the best measured SCP rate to a SpiNN-5
//!   board's Ethernet chip, rig_c_scp's 32.1 Mbit/s writing 256-byte requests to chip
//!   (0, 0) with many in flight (its README), is 256 x 8 bits every 63.8 us; the monitor
//!   core, not the 100 Mbit/s link (which would carry about 74 Mbit/s of SCP payload), is
//!   what stops it there.
//! - [`ScampCosts::p2p_hop`], 1.24 ms a hop: calibrated, not measured. SpiNNFrontEndCommon
//!   #295 found its fast data-in protocol beat SCP by at least 2x on Ethernet chips and
//!   by up to 22x on other chips, so SCP to a chip without Ethernet runs about 11 times
//!   slower. With 8 requests in flight (SpiNNMan's window, and the board's 8 transient
//!   tags), 11 times slower than one request per 63.8 us means each request holds its tag
//!   for 8 x 11 x 63.8 us = 5.6 ms; the chips of a SpiNN-5 board are on average 4.47 hops
//!   from its Ethernet chip, so a hop costs 5.55 ms / 4.47 = 1.24 ms.
//! - [`ScampCosts::streams`], 8 per chip: SC&MP's `P2P_NUM_STR` (`scamp-p2p.c`); a request
//!   that finds all of its target's streams taken is answered `RC_P2P_BUSY`, as SC&MP's
//!   P2P open is refused when no stream is free.
//! - [`ScampCosts::buffers`], 32 per board: SC&MP allocates 32 SDP message buffers
//!   (`sark_vec->num_msgs = 32`, `scamp-3.c`); a request that arrives with every one held
//!   (from its arrival to its reply) is dropped without a word, as SC&MP drops it
//!   (spinnaker_tools #92).
//!
//! A second model of P2P, [`ScampCosts::monitors`], charges what hardware mostly spends on
//! SCP to a chip without Ethernet: the software of the monitor cores at both ends, which
//! pass the request and its reply on packet by packet. Such a request holds the Ethernet
//! chip's monitor and its target chip's monitor together for
//! [`ScampCosts::p2p_monitor`], 638 us, plus [`ScampCosts::p2p_hop`] of 1 us a hop (a
//! router forwards a packet in well under that; it is kept small on purpose). The same
//! ratio calibrates it: a board's Ethernet monitor that serves a request for one of its
//! other chips in 63.8 + 638 us serves them 11 times slower than its own. Under this model
//! a board's chips are reached no faster through many requests in flight; only more
//! Ethernet monitors (more boards, each reached directly) serve more at once.
//!
//! The transient tags (8 a board, held until the reply leaves or, for a lost reply, the
//! tag timeout) are modelled whether or not the costs are on ([`BoardConfig::pool_size`]).
//! Not modelled: the P2P packets themselves (a request's hops are one delay), links that
//! fail, the Ethernet link's own rate, SC&MP's other work.
//!
//! [`BoardConfig::pool_size`]: crate::BoardConfig::pool_size

use core::cmp::Reverse;
use core::time::Duration;
use std::collections::{BinaryHeap, HashMap};

use crate::checks::{ConfigError, check_delay};
use std::time::Instant;

/// SC&MP's costs (see the module's documentation for the defaults' sources).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScampCosts {
    /// The Ethernet chip's monitor time per request, one request at a time.
    pub service: Duration,
    /// The time a request for a chip without Ethernet holds one of its P2P streams, per
    /// hop from the Ethernet chip it came in by.
    pub p2p_hop: Duration,
    /// The time a request for a chip without Ethernet holds both the Ethernet chip's
    /// monitor and its target chip's monitor (zero in the default, per-hop model; see
    /// [`ScampCosts::monitors`]).
    pub p2p_monitor: Duration,
    /// P2P streams per chip.
    pub streams: u8,
    /// Messages a board holds at once, from a request's arrival to its reply.
    pub buffers: u16,
}

impl Default for ScampCosts {
    fn default() -> Self {
        Self {
            service: Duration::from_nanos(63_800),
            p2p_hop: Duration::from_micros(1_240),
            p2p_monitor: Duration::ZERO,
            streams: 8,
            buffers: 32,
        }
    }
}

impl ScampCosts {
    /// The second P2P model (see the module's documentation): a request for a chip
    /// without Ethernet holds the monitors at both ends for 638 us and adds 1 us a hop.
    pub fn monitors() -> Self {
        Self {
            p2p_hop: Duration::from_micros(1),
            p2p_monitor: Duration::from_micros(638),
            ..Self::default()
        }
    }

    /// Checks every number: times of at most an hour, at least one stream and one
    /// buffer.
    pub fn check(&self) -> Result<(), ConfigError> {
        check_delay("SC&MP service time", self.service)?;
        check_delay("P2P time per hop", self.p2p_hop)?;
        check_delay("P2P time at the monitors", self.p2p_monitor)?;
        if self.streams == 0 {
            return Err(ConfigError::NoStreams);
        }
        if self.buffers == 0 {
            return Err(ConfigError::NoBuffers);
        }
        Ok(())
    }
}

/// A board's monitor core and its message buffers.
#[derive(Debug, Default)]
pub(crate) struct Monitor {
    /// When the monitor is free for the next request.
    free_at: Option<Instant>,
    /// When each held buffer is released.
    held: BinaryHeap<Reverse<Instant>>,
}

impl Monitor {
    /// Takes a buffer and the monitor's next slot for a request that arrived at `now`:
    /// when its service ends, or `None` if every buffer is held (the request is dropped).
    pub(crate) fn admit(&mut self, costs: &ScampCosts, now: Instant) -> Option<Instant> {
        while self.held.peek().is_some_and(|Reverse(at)| *at <= now) {
            self.held.pop();
        }
        if self.held.len() >= usize::from(costs.buffers) {
            return None;
        }
        let start = self.free_at.map_or(now, |free| free.max(now));
        let done = start + costs.service;
        self.free_at = Some(done);
        Some(done)
    }

    /// Holds a buffer until `until` (the reply leaves).
    pub(crate) fn hold(&mut self, until: Instant) {
        self.held.push(Reverse(until));
    }

    /// Keeps the monitor busy until `until` (a P2P request it passes on, in the
    /// monitors model).
    pub(crate) fn busy_until(&mut self, until: Instant) {
        self.free_at = Some(self.free_at.map_or(until, |free| free.max(until)));
    }
}

/// The P2P streams of a board's chips that are taken, and until when; and, in the
/// monitors model, when each chip's monitor is next free.
#[derive(Debug, Default)]
pub(crate) struct Streams {
    taken: HashMap<(u8, u8), Vec<Instant>>,
    monitor_free: HashMap<(u8, u8), Instant>,
}

impl Streams {
    /// Forwards a request for chip `chip`, `hops` away, that is ready at `ready`: takes one
    /// of the chip's streams until the request is done and says when that is, or `None`
    /// if all `costs.streams` are taken then. Done: in the per-hop model after its hops;
    /// in the monitors model once the chip's monitor is free, after its time there and its
    /// hops (the monitor is held until then).
    pub(crate) fn forward(
        &mut self,
        costs: &ScampCosts,
        chip: (u8, u8),
        ready: Instant,
        hops: u32,
    ) -> Option<Instant> {
        let taken = self.taken.entry(chip).or_default();
        taken.retain(|&end| end > ready);
        if taken.len() >= usize::from(costs.streams) {
            return None;
        }
        let done = if costs.p2p_monitor.is_zero() {
            ready + costs.p2p_hop * hops
        } else {
            let free = self.monitor_free.get(&chip).copied().unwrap_or(ready);
            let done = free.max(ready) + costs.p2p_monitor + costs.p2p_hop * hops;
            self.monitor_free.insert(chip, done);
            done
        };
        taken.push(done);
        Some(done)
    }
}
