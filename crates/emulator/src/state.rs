//! One board's mutable state: its memory, its transient-tag pool and the costs SC&MP's
//! monitor and P2P streams add, held under the board's lock.

use core::time::Duration;
use std::time::Instant;

use rand::SeedableRng;
use rand::rngs::StdRng;
use volley_proto::scp;

use crate::config::BoardConfig;
use crate::costs::{Monitor, Streams};
use crate::memory::Memory;

/// One board's state, locked by whichever task carries out a request on it.
#[derive(Debug)]
pub(crate) struct State {
    pub(crate) memory: Memory,
    pub(crate) tto: u8,
    /// When each transient tag frees; `None` = free.
    pub(crate) tags: Vec<Option<Instant>>,
    pub(crate) rng: StdRng,
    /// The monitor's queue and buffers (with SC&MP's costs on).
    pub(crate) monitor: Monitor,
    /// The P2P streams of this board's chips (with SC&MP's costs on).
    pub(crate) streams: Streams,
}

impl State {
    /// A fresh board's state under `config`, its loss drawn from `seed`.
    pub(crate) fn new(config: &BoardConfig, seed: u64) -> Self {
        Self {
            memory: Memory::new(config.memory_budget),
            tto: config.tto,
            tags: vec![None; usize::from(config.pool_size)],
            rng: StdRng::seed_from_u64(seed),
            monitor: Monitor::default(),
            streams: Streams::default(),
        }
    }

    pub(crate) fn has_free_tag(&self, now: Instant) -> bool {
        self.tags.iter().any(|t| t.is_none_or(|busy| busy <= now))
    }

    /// Takes a free transient tag until `until` (the caller has checked there is one).
    pub(crate) fn take_tag(&mut self, now: Instant, until: Instant) {
        if let Some(tag) = self
            .tags
            .iter_mut()
            .find(|t| t.is_none_or(|busy| busy <= now))
        {
            *tag = Some(until);
        }
    }

    pub(crate) fn tto_duration(&self) -> Option<Duration> {
        scp::tto_millis(self.tto).map(Duration::from_millis)
    }
}
