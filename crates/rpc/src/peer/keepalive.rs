//! The connection's watch: pings to a quiet peer that answers them, dropping one silent
//! for three intervals, and closing a connection idle with nothing in flight.
//!
//! It looks at counters the reader and callers bump (messages heard, calls and replies
//! passed), a few times per interval, so the hot path pays an atomic add per message and
//! no clock reading.

use core::sync::atomic::Ordering;
use core::time::Duration;
use std::sync::Arc;

use bytes::Bytes;
use tokio::time::Instant;
use volley_proto::rpc::{CAP_ANSWERS_PINGS, CAP_HEARS_CLOSING, CloseReason, Hello, Kind};

use super::{Inner, lock};
use crate::codec::Codec;
use crate::config::Config;
use crate::error::Ended;
use crate::link::Message;
use crate::service::Service;

/// Intervals of silence after which a pinged peer is dropped.
const SILENT_INTERVALS: u32 = 3;

/// What the watch does on one connection.
pub(super) struct Watch {
    /// Ping after this long without a message; `None` if the peer does not answer pings
    /// or pings are off.
    keepalive: Option<Duration>,
    idle: Option<Duration>,
    tick: Duration,
}

impl Watch {
    /// The watch for a connection to a peer that sent `theirs`; `None` if there is
    /// nothing to watch for.
    pub(super) fn new(config: &Config, theirs: &Hello) -> Option<Self> {
        let keepalive = config
            .keepalive
            .filter(|_| theirs.capabilities & CAP_ANSWERS_PINGS != 0);
        let idle = config.idle_timeout;
        let shortest = match (keepalive, idle) {
            (Some(k), Some(i)) => k.min(i),
            (Some(d), None) | (None, Some(d)) => d,
            (None, None) => return None,
        };
        Some(Self {
            keepalive,
            idle,
            // A few looks per interval: a silent peer is dropped within a quarter
            // interval of its third.
            tick: (shortest / 4).max(Duration::from_millis(5)),
        })
    }
}

pub(super) async fn run<S: Service, C: Codec>(inner: Arc<Inner<S, C>>, watch: Watch) {
    let start = Instant::now();
    let (mut heard, mut heard_at) = (inner.life.heard.load(Ordering::Relaxed), start);
    let (mut active, mut active_at) = (inner.life.activity.load(Ordering::Relaxed), start);
    let mut pinged_at: Option<Instant> = None;
    let mut ping = 0u32;
    let mut ticks = tokio::time::interval(watch.tick);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            () = inner.life.ended.notified() => return,
        }
        if inner.life.failure.get().is_some() {
            return;
        }
        let now = Instant::now();
        let h = inner.life.heard.load(Ordering::Relaxed);
        if h != heard {
            (heard, heard_at) = (h, now);
            pinged_at = None;
        }
        let a = inner.life.activity.load(Ordering::Relaxed);
        if a != active || inner.busy() {
            (active, active_at) = (a, now);
        }
        if let Some(interval) = watch.keepalive {
            let silent = now - heard_at;
            if silent >= interval * SILENT_INTERVALS {
                return inner.fail(Ended::Silent(silent));
            }
            if silent >= interval && pinged_at.is_none_or(|at| now - at >= interval) {
                ping = ping.wrapping_add(1);
                pinged_at = Some(now);
                inner.answer(Message::new(Kind::PING, 0, ping, Bytes::new()));
            }
        }
        if let Some(idle) = watch.idle {
            if now - active_at >= idle {
                // Close the door, then look again: a call admitted meanwhile keeps the
                // connection open (its admission comes before its look at the door), and
                // one that looks after is refused unrun; either way no call the peer sent
                // runs after the close, so the peer may send them all again.
                inner.served.idle_closing.store(true, Ordering::SeqCst);
                let busy = inner.busy();
                let a = inner.life.activity.load(Ordering::Relaxed);
                if busy || a != active {
                    inner.served.idle_closing.store(false, Ordering::SeqCst);
                    (active, active_at) = (a, now);
                    continue;
                }
                if inner.theirs.capabilities & CAP_HEARS_CLOSING != 0 {
                    // Said first, so the peer reports an idle close as one (a reconnecting
                    // client just connects again); what is queued goes out before the
                    // link closes.
                    let ms = u64::try_from((now - active_at).as_millis()).unwrap_or(u64::MAX);
                    let reason = CloseReason::IDLE.0;
                    let closing = Message::new(Kind::CLOSING, 0, reason, ms.to_le_bytes().to_vec());
                    let _ = tokio::time::timeout(idle, inner.sender.send(closing)).await;
                }
                return inner.fail(Ended::Idle(idle));
            }
        }
    }
}

impl<S, C> Inner<S, C> {
    /// Whether anything is in flight either way: calls of ours awaiting replies, one-way
    /// calls whose credit has not come back, or calls of the peer's running here.
    fn busy(&self) -> bool {
        self.served.in_flight.load(Ordering::SeqCst) > 0
            || self.calls.oneway_out.load(Ordering::Relaxed) > 0
            || !lock(&self.calls.waiters).is_empty()
    }
}
