//! A connection's settings, [`Config`], and the typed error a setting out of range gives.

use super::MIN_DATAGRAM;
use crate::recovery::RtoBounds;
use crate::time::Duration;

/// Settings of one end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// The largest message this end sends or takes.
    pub max_message: u32,
    /// The largest datagram this end sends or takes (at least [`MIN_DATAGRAM`]).
    pub max_datagram: u16,
    /// Message bytes the peer may send beyond what the application has taken; at least
    /// `max_message`, or a largest message could never arrive. A message is sent only
    /// once all of it fits the window, since the receiver sets aside its whole buffer at
    /// its first fragment.
    pub window: u64,
    /// Message bytes queued to send (not yet acknowledged) past which
    /// [`Connection::send`](super::Connection::send) refuses.
    pub send_buffer: u64,
    /// The retransmission timeout before any RTT sample, and its bounds.
    pub rto: RtoBounds,
    /// A peer silent this long is gone: [`Closed::TimedOut`](super::Closed::TimedOut).
    pub idle_timeout: Duration,
    /// Send a ping when nothing has gone to the peer for this long.
    pub keep_alive: Duration,
    /// The congestion window at the start, in datagrams.
    pub initial_window: u32,
    /// Bytes of memory the peer's messages may hold here, being reassembled or waiting
    /// for the application, each counted at its length plus [`MESSAGE_COST`](super::MESSAGE_COST) (see
    /// [`Connection::receive_memory`](super::Connection::receive_memory)); a peer that goes past it is closed with a
    /// protocol error. At least `window` plus an eighth.
    pub receive_memory: u64,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            max_message: 16 << 20,
            max_datagram: 1452,
            window: 32 << 20,
            send_buffer: 32 << 20,
            rto: RtoBounds::new(
                Duration::from_millis(200),
                Duration::from_millis(5),
                Duration::from_secs(10),
            ),
            idle_timeout: Duration::from_secs(10),
            keep_alive: Duration::from_secs(2),
            initial_window: 10,
            receive_memory: 48 << 20,
        }
    }
}

impl Config {
    /// Checks every setting's range.
    pub fn check(&self) -> Result<(), ConfigError> {
        if usize::from(self.max_datagram) < MIN_DATAGRAM {
            return Err(ConfigError::MaxDatagram(self.max_datagram));
        }
        if self.window < u64::from(self.max_message) {
            return Err(ConfigError::Window {
                window: self.window,
                max_message: self.max_message,
            });
        }
        if self.send_buffer < u64::from(self.max_message) {
            return Err(ConfigError::SendBuffer {
                send_buffer: self.send_buffer,
                max_message: self.max_message,
            });
        }
        if self.rto.min.as_micros() == 0 || self.rto.min > self.rto.max {
            return Err(ConfigError::Rto {
                min: self.rto.min,
                max: self.rto.max,
            });
        }
        if self.keep_alive >= self.idle_timeout {
            return Err(ConfigError::KeepAlive {
                keep_alive: self.keep_alive,
                idle_timeout: self.idle_timeout,
            });
        }
        if self.initial_window == 0 {
            return Err(ConfigError::InitialWindow);
        }
        if self.receive_memory < self.window + self.window / 8 {
            return Err(ConfigError::ReceiveMemory {
                receive_memory: self.receive_memory,
                window: self.window,
            });
        }
        Ok(())
    }
}

/// A [`Config`] a connection cannot honour, from [`Config::check`]: which setting, its
/// value, and the range it must be in.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigError {
    /// `max_datagram` is under [`MIN_DATAGRAM`].
    MaxDatagram(u16),
    /// `window` is under `max_message`.
    Window {
        /// The window.
        window: u64,
        /// The largest message.
        max_message: u32,
    },
    /// `send_buffer` is under `max_message`.
    SendBuffer {
        /// The send buffer.
        send_buffer: u64,
        /// The largest message.
        max_message: u32,
    },
    /// `rto.min` is zero or over `rto.max`.
    Rto {
        /// The smallest timeout.
        min: Duration,
        /// The largest.
        max: Duration,
    },
    /// `keep_alive` is not shorter than `idle_timeout`.
    KeepAlive {
        /// The keep-alive interval.
        keep_alive: Duration,
        /// The idle timeout.
        idle_timeout: Duration,
    },
    /// `initial_window` is zero.
    InitialWindow,
    /// `receive_memory` is under `window` plus an eighth.
    ReceiveMemory {
        /// The receive memory.
        receive_memory: u64,
        /// The window.
        window: u64,
    },
}

impl core::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            Self::MaxDatagram(n) => write!(
                f,
                "max_datagram must be at least {MIN_DATAGRAM} (it is {n})"
            ),
            Self::Window {
                window,
                max_message,
            } => write!(
                f,
                "window must be at least max_message (window {window}, max_message {max_message})"
            ),
            Self::SendBuffer {
                send_buffer,
                max_message,
            } => write!(
                f,
                "send_buffer must be at least max_message (send_buffer {send_buffer}, \
                 max_message {max_message})"
            ),
            Self::Rto { min, max } => write!(
                f,
                "rto.min must be above zero and at most rto.max (min {min:?}, max {max:?})"
            ),
            Self::KeepAlive {
                keep_alive,
                idle_timeout,
            } => write!(
                f,
                "keep_alive must be shorter than idle_timeout (keep_alive {keep_alive:?}, \
                 idle_timeout {idle_timeout:?})"
            ),
            Self::InitialWindow => {
                f.write_str("initial_window must be at least one datagram (it is 0)")
            }
            Self::ReceiveMemory {
                receive_memory,
                window,
            } => write!(
                f,
                "receive_memory must be at least window plus an eighth (receive_memory \
                 {receive_memory}, at least {})",
                window + window / 8
            ),
        }
    }
}

impl core::error::Error for ConfigError {}
