//! The emulator's settings and counters, [`BoardConfig`] and [`BoardStats`], and where
//! SDRAM lies: a leaf that the socket-free logic and the socket-owning board both read.

use core::time::Duration;

use crate::checks::{ConfigError, check_delay, check_fraction};
use crate::costs::ScampCosts;

/// Where SDRAM starts on every chip.
pub const SDRAM_BASE: u32 = 0x6000_0000;
/// Where the same SDRAM is reached again without the write buffer (SC&MP reads and
/// writes both).
pub const SDRAM_UNBUFFERED: u32 = 0x7000_0000;
/// SDRAM per chip: 128 MiB.
pub const SDRAM_SIZE: u32 = 128 << 20;

/// Emulator settings.
#[derive(Clone, Debug, PartialEq)]
pub struct BoardConfig {
    /// Chips across; chip addresses outside `width` x `height` answer `RC_ROUTE`.
    pub width: u8,
    /// Chips up.
    pub height: u8,
    /// Time to process each request before replying.
    pub processing_delay: Duration,
    /// Extra latency per P2P hop: a request to chip (x, y) waits `(x + y)` times this.
    pub hop_latency: Duration,
    /// Chance that a reply is lost inside the board; its tag stays taken until the
    /// transient-tag timeout expires, as when a P2P reply never comes back.
    pub reply_loss: f64,
    /// Seed for the loss decisions.
    pub seed: u64,
    /// Transient IPTags: requests waiting for a reply at once over UDP.
    pub pool_size: u8,
    /// Transient-tag timeout code at start (9 = 2.56 s, SC&MP's default).
    pub tto: u8,
    /// After answering, keep polling the socket this long before parking the task, as a
    /// board's dedicated core answers without a wake-up; zero parks at once. Each empty
    /// poll yields the CPU, so on a machine with no core to spare the spin costs the
    /// client nothing.
    pub spin: Duration,
    /// SC&MP's costs (its monitor's time per request, P2P forwarding, its buffers), or
    /// `None` to answer as fast as the host allows.
    pub scamp: Option<ScampCosts>,
    /// The most bytes of written memory the board holds, over all chips (a FILL holds
    /// none: a filled page is one word). A WRITE or FILL that would pass it is answered
    /// `RC_BUF` and changes nothing.
    pub memory_budget: usize,
    /// TCP connections open at once; further peers wait in the kernel's backlog until
    /// one closes.
    pub max_tcp_connections: usize,
}

/// Counters of what the board has seen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BoardStats {
    /// Requests received (UDP and TCP).
    pub requests: u64,
    /// Replies sent.
    pub replies: u64,
    /// Replies with a return code other than `RC_OK`.
    pub error_replies: u64,
    /// Requests dropped because every transient tag was taken.
    pub dropped_no_tag: u64,
    /// Requests dropped because every message buffer was held (SC&MP's costs on).
    pub dropped_no_buffer: u64,
    /// Datagrams over 282 bytes, dropped unread.
    pub dropped_oversize: u64,
    /// Datagrams too short to carry a sequence number, dropped.
    pub dropped_malformed: u64,
    /// Replies lost inside the board (fault injection).
    pub replies_lost: u64,
    /// Bytes of written memory held (filled pages hold none).
    pub memory_bytes: u64,
}

impl BoardConfig {
    /// Checks every number before anything is bound: delays of at most
    /// [`MAX_DELAY`](crate::MAX_DELAY), a reply-loss fraction in 0..=1, a spin of at most
    /// a second, a tag pool of at least one, a TTO code of 0..=15, at least one TCP
    /// connection.
    pub fn check(&self) -> Result<(), ConfigError> {
        check_delay("processing delay", self.processing_delay)?;
        check_delay("hop latency", self.hop_latency)?;
        check_fraction("reply loss", self.reply_loss)?;
        if self.spin > Duration::from_secs(1) {
            return Err(ConfigError::Spin(self.spin));
        }
        if self.max_tcp_connections == 0 {
            return Err(ConfigError::NoTcpConnections);
        }
        if self.pool_size == 0 {
            return Err(ConfigError::NoTags);
        }
        if let Some(costs) = &self.scamp {
            costs.check()?;
        }
        if self.tto > 15 {
            return Err(ConfigError::Tto(self.tto));
        }
        Ok(())
    }
}

impl Default for BoardConfig {
    /// An 8 x 8 board, no delay, no loss, 8 transient tags, TTO 9, 50 us of polling,
    /// 256 MiB of written memory at most, 256 TCP connections.
    fn default() -> Self {
        Self {
            width: 8,
            height: 8,
            processing_delay: Duration::ZERO,
            hop_latency: Duration::ZERO,
            reply_loss: 0.0,
            seed: 0,
            pool_size: 8,
            tto: 9,
            spin: Duration::from_micros(50),
            memory_budget: 256 << 20,
            max_tcp_connections: 256,
            scamp: None,
        }
    }
}
