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
//! The transient tags (8 a board, held until the reply leaves or, for a lost reply, the
//! tag timeout) are modelled whether or not the costs are on ([`BoardConfig::pool_size`]).
//! Not modelled: the P2P packets themselves (a request's hops are one delay), links that
//! fail, the Ethernet link's own rate, SC&MP's other work.
//!
//! [`BoardConfig::pool_size`]: crate::BoardConfig::pool_size

use core::cmp::Reverse;
use core::time::Duration;
use std::collections::{BinaryHeap, HashMap};

use std::time::Instant;
use volley_netsim::checks::check_delay;

use crate::ConfigError;

/// SC&MP's costs (see the module's documentation for the defaults' sources).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScampCosts {
    /// The Ethernet chip's monitor time per request, one request at a time.
    pub service: Duration,
    /// The time a request for a chip without Ethernet holds one of its P2P streams, per
    /// hop from the Ethernet chip it came in by.
    pub p2p_hop: Duration,
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
            streams: 8,
            buffers: 32,
        }
    }
}

impl ScampCosts {
    /// Checks every number: times of at most an hour, at least one stream and one
    /// buffer.
    pub fn check(&self) -> Result<(), ConfigError> {
        check_delay("SC&MP service time", self.service)?;
        check_delay("P2P time per hop", self.p2p_hop)?;
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
}

/// The P2P streams of a board's chips that are taken, and until when.
#[derive(Debug, Default)]
pub(crate) struct Streams {
    taken: HashMap<(u8, u8), Vec<Instant>>,
}

impl Streams {
    /// Takes one of chip (`x`, `y`)'s streams from `at` until `until`; `false` if all
    /// `costs.streams` are taken then.
    pub(crate) fn open(
        &mut self,
        costs: &ScampCosts,
        chip: (u8, u8),
        at: Instant,
        until: Instant,
    ) -> bool {
        let taken = self.taken.entry(chip).or_default();
        taken.retain(|&end| end > at);
        if taken.len() >= usize::from(costs.streams) {
            return false;
        }
        taken.push(until);
        true
    }
}
