//! [`Config`]: the settings of an RPC endpoint, and [`PoolConfig`], its buffer pool's.

use core::time::Duration;

/// Settings for both ends of a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Calls in flight this end accepts from the peer (sync and one-way together), told
    /// to the peer in the hello; calls past it are answered Busy. 1..=65536.
    pub credit: u32,
    /// The largest message this end takes (head, arguments and segments), told to the
    /// peer in the hello, and the one place it is set: the endpoint sets its links' frame
    /// limit to it when a connection starts (a link with a fixed limit of its own, such as
    /// the UDP channel's datagram, keeps it if lower). 4 KiB..=1 GiB.
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
    /// The buffers arguments and results are encoded into when they are too long to
    /// travel inline in their message.
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
    pub fn check(&self) -> Result<(), ConfigError> {
        if !(1..=65536).contains(&self.credit) {
            return Err(ConfigError::Credit(self.credit));
        }
        if !(4096..=1 << 30).contains(&self.max_message) {
            return Err(ConfigError::MaxMessage(self.max_message));
        }
        let zero = |what: &'static str| Err(ConfigError::Zero(what));
        if self.default_deadline.is_some_and(|d| d.is_zero()) {
            return zero("default_deadline");
        }
        if self.hello_timeout.is_zero() {
            return zero("hello_timeout");
        }
        if self.keepalive.is_some_and(|k| k.is_zero()) {
            return zero("keepalive");
        }
        if self.idle_timeout.is_some_and(|i| i.is_zero()) {
            return zero("idle_timeout");
        }
        if let (Some(keepalive), Some(idle_timeout)) = (self.keepalive, self.idle_timeout) {
            if keepalive >= idle_timeout {
                return Err(ConfigError::Keepalive {
                    keepalive,
                    idle_timeout,
                });
            }
        }
        self.pool.check()
    }
}

/// A setting out of its range, from [`Config::check`] or
/// [`PoolConfig::check`](crate::PoolConfig::check): which one, its value, and the range it
/// must be in.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// `credit` is outside 1..=65536.
    #[error("credit must be 1..=65536, not {0}")]
    Credit(u32),
    /// `max_message` is outside 4096..=1073741824 bytes.
    #[error("max_message must be 4096..=1073741824 bytes, not {0}")]
    MaxMessage(usize),
    /// A duration that must be more than zero is zero (for the optional ones, `None`
    /// turns the feature off instead).
    #[error("{0} must be more than zero")]
    Zero(&'static str),
    /// `keepalive` is not shorter than `idle_timeout`.
    #[error("keepalive ({keepalive:?}) must be shorter than idle_timeout ({idle_timeout:?})")]
    Keepalive {
        /// The keepalive interval.
        keepalive: Duration,
        /// The idle timeout.
        idle_timeout: Duration,
    },
    /// The pool's `buffers` is outside 1..=65536.
    #[error("pool buffers must be 1..=65536, not {0}")]
    PoolBuffers(usize),
    /// The pool's `initial` buffer size is over its `max_keep`.
    #[error("pool initial size {initial} is over max_keep {max_keep}")]
    PoolInitial {
        /// The initial size.
        initial: usize,
        /// The largest size a returned buffer keeps.
        max_keep: usize,
    },
    /// An authentication token is empty or longer than
    /// [`MAX_TOKEN`](volley_proto::rpc::MAX_TOKEN) bytes.
    #[error("an authentication token is 1 to {max} bytes, not {0}", max = volley_proto::rpc::MAX_TOKEN)]
    Token(usize),
}

/// How a pool is sized and how hard it tries before waiting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolConfig {
    /// Buffers in the pool (1..=65536).
    pub buffers: usize,
    /// Bytes of room a buffer has when taken: its memory is that size at least, and
    /// messages are written into it one after another until it is full.
    pub initial: usize,
    /// A buffer that grew beyond this (for one large message) is replaced with a fresh one
    /// when it comes back, so the pool does not pin its memory.
    pub max_keep: usize,
    /// Times to look for a free buffer without yielding before awaiting one (ARTIQ's
    /// figure: 100); 0 awaits at once.
    pub spin: u32,
}

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            buffers: 256,
            initial: 4096,
            max_keep: 64 * 1024,
            spin: 100,
        }
    }
}

impl PoolConfig {
    /// Checks the settings' ranges.
    pub fn check(&self) -> Result<(), ConfigError> {
        if !(1..=65536).contains(&self.buffers) {
            return Err(ConfigError::PoolBuffers(self.buffers));
        }
        if self.initial > self.max_keep {
            return Err(ConfigError::PoolInitial {
                initial: self.initial,
                max_keep: self.max_keep,
            });
        }
        Ok(())
    }
}
