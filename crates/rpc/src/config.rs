//! [`Config`]: the settings of an RPC endpoint.

use core::time::Duration;

use crate::pool::PoolConfig;

/// Settings for both ends of a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Calls in flight this end accepts from the peer (sync and one-way together), told
    /// to the peer in the hello; calls past it are answered Busy. 1..=65536.
    pub credit: u32,
    /// The largest message this end takes (head, arguments and segments), told to the
    /// peer in the hello; the link's own limit applies if lower. 4 KiB..=1 GiB.
    pub max_message: usize,
    /// How long the handshake may take: the peer's hello must have come by then, or the
    /// connection is closed.
    pub hello_timeout: Duration,
    /// Send the peer a ping when nothing has come from it for this long, and drop it
    /// once three such intervals pass unanswered (its pending calls fail saying so).
    /// Only to a peer whose hello says it answers pings. `None`: no pings.
    pub keepalive: Option<Duration>,
    /// Close the connection once nothing has been in flight either way, and no call or
    /// reply has passed, for this long (with any peer, whatever its version). `None`:
    /// never.
    pub idle_timeout: Option<Duration>,
    /// The deadline of calls made without one (sent to the peer, which gives up at it
    /// too), so that a peer that dies silently gives a timeout, not a hang; `None` waits
    /// for ever.
    pub default_deadline: Option<Duration>,
    /// The buffers arguments and results are encoded into.
    pub pool: PoolConfig,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            credit: 256,
            max_message: 16 << 20,
            hello_timeout: Duration::from_secs(10),
            keepalive: Some(Duration::from_secs(15)),
            idle_timeout: Some(Duration::from_secs(120)),
            default_deadline: Some(Duration::from_secs(60)),
            pool: PoolConfig::default(),
        }
    }
}

impl Config {
    /// Checks every setting's range.
    pub fn check(&self) -> Result<(), String> {
        if !(1..=65536).contains(&self.credit) {
            return Err(format!("credit must be 1..=65536, not {}", self.credit));
        }
        if !(4096..=1 << 30).contains(&self.max_message) {
            return Err(format!(
                "max_message must be 4096..=1073741824 bytes, not {}",
                self.max_message
            ));
        }
        if self.default_deadline.is_some_and(|d| d.is_zero()) {
            return Err("default_deadline must be more than zero".into());
        }
        if self.hello_timeout.is_zero() {
            return Err("hello_timeout must be more than zero".into());
        }
        if self.keepalive.is_some_and(|k| k.is_zero()) {
            return Err("keepalive must be more than zero (None turns pings off)".into());
        }
        if self.idle_timeout.is_some_and(|i| i.is_zero()) {
            return Err("idle_timeout must be more than zero (None turns it off)".into());
        }
        if let (Some(k), Some(i)) = (self.keepalive, self.idle_timeout) {
            if k >= i {
                return Err(format!(
                    "keepalive ({k:?}) must be shorter than idle_timeout ({i:?})"
                ));
            }
        }
        self.pool.check()
    }
}
