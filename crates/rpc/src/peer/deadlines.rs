//! Long deadlines of calls waiting for replies, kept by one task per connection instead
//! of a timer per call.
//!
//! A timer per call is a timer-wheel entry made and removed per call, on the caller's
//! thread, a large share of a small call's time when many are in flight. Most
//! deadlines are long (the default is a minute) and need no millisecond precision, so a
//! call whose deadline is at least [`SWEPT_FROM`] records the sweep tick it expires at,
//! and the connection's sweep looks at the waiting calls every [`TICK`]: an expired call
//! is cancelled at the peer and its caller gets `DeadlineExceeded`, at most one tick
//! late, never early. The sweep sleeps while no such call waits. Shorter deadlines keep
//! a timer of their own.

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use core::time::Duration;
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::{Notify, oneshot};
use tokio::time::{Instant, MissedTickBehavior};
use volley_proto::rpc::{ErrorCode, Kind};

use super::{Calls, Inner, lock};
use crate::codec::Codec;
use crate::link::Message;
use crate::service::Service;

/// Deadlines at least this long are kept by the sweep; shorter ones by a timer each.
pub(crate) const SWEPT_FROM: Duration = Duration::from_secs(1);

/// How often the sweep looks: a swept deadline fires at most this late.
const TICK: Duration = Duration::from_millis(10);

/// A call waiting for its reply.
pub(super) struct Waiter {
    pub(super) tx: oneshot::Sender<Message>,
    /// The sweep tick it has expired at; `u64::MAX` if the sweep does not keep it.
    expires: u64,
}

/// The sweep's clock and its sleep.
#[derive(Default)]
pub(super) struct Sweep {
    /// Ticks the sweep has made (it counts only while it is awake).
    now: AtomicU64,
    /// Whether the sweep sleeps, for want of calls to watch.
    asleep: AtomicBool,
    wake: Notify,
}

/// The deadline the caller must time itself: a short one (the sweep keeps the rest).
pub(crate) fn own_timer(deadline: Option<Duration>) -> Option<Duration> {
    deadline.filter(|d| *d < SWEPT_FROM)
}

impl Calls {
    /// Registers call `id`'s waiter, its deadline kept by the sweep if it is long.
    pub(super) fn add_waiter(
        &self,
        id: u32,
        tx: oneshot::Sender<Message>,
        deadline: Option<Duration>,
    ) {
        let expires = match deadline.filter(|d| *d >= SWEPT_FROM) {
            // A tick after the last whole one: the tick under way may be nearly over.
            Some(after) => {
                let ticks = after.as_nanos().div_ceil(TICK.as_nanos());
                let ticks = u64::try_from(ticks).unwrap_or(u64::MAX);
                self.sweep
                    .now
                    .load(Ordering::Relaxed)
                    .saturating_add(ticks)
                    .saturating_add(1)
            }
            None => u64::MAX,
        };
        lock(&self.waiters).insert(id, Waiter { tx, expires });
        // The sweep marks itself asleep before its last look at the table, under the
        // table's lock, so this look (after ours) sees the mark if that look missed us.
        if expires != u64::MAX
            && self.sweep.asleep.load(Ordering::Relaxed)
            && self.sweep.asleep.swap(false, Ordering::SeqCst)
        {
            self.sweep.wake.notify_one();
        }
    }

    /// Takes the waiters expired at tick `now`; and whether any swept one is left.
    fn expired(&self, now: u64) -> (Vec<(u32, oneshot::Sender<Message>)>, bool) {
        let mut waiters = lock(&self.waiters);
        let mut ids = Vec::new();
        let mut left = false;
        for (&id, waiter) in waiters.iter() {
            if waiter.expires <= now {
                ids.push(id);
            } else if waiter.expires != u64::MAX {
                left = true;
            }
        }
        let taken = ids
            .into_iter()
            .filter_map(|id| waiters.remove(&id).map(|w| (id, w.tx)))
            .collect();
        (taken, left)
    }
}

impl<S: Service, C: Codec> Inner<S, C> {
    /// Cancels expired calls at the peer, then tells their callers; the cancel is queued
    /// before the caller frees the call's credit, as when a call is dropped.
    async fn expire(&self, expired: Vec<(u32, oneshot::Sender<Message>)>) {
        for (id, tx) in expired {
            let _ = self
                .sender
                .send(Message::new(Kind::CANCEL, id, 0, Bytes::new()))
                .await;
            let _ = tx.send(Message::new(
                Kind::ERROR,
                id,
                ErrorCode::DEADLINE.0,
                Bytes::new(),
            ));
        }
    }
}

/// The sweep of one connection; ends with it.
pub(super) async fn run<S: Service, C: Codec>(inner: Arc<Inner<S, C>>) {
    let mut ticks = tokio::time::interval_at(Instant::now() + TICK, TICK);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        let ended = inner.life.ended.notified();
        tokio::pin!(ended);
        ended.as_mut().enable();
        if inner.life.failure.get().is_some() {
            return;
        }
        let now = inner.calls.sweep.now.load(Ordering::Relaxed);
        let (expired, left) = inner.calls.expired(now);
        inner.expire(expired).await;
        if !left {
            inner.calls.sweep.asleep.store(true, Ordering::SeqCst);
            let (expired, left) = inner.calls.expired(now);
            inner.expire(expired).await;
            if !left {
                tokio::select! {
                    () = inner.calls.sweep.wake.notified() => {}
                    () = &mut ended => return,
                }
            }
            inner.calls.sweep.asleep.store(false, Ordering::SeqCst);
            ticks.reset();
        }
        tokio::select! {
            _ = ticks.tick() => {}
            () = &mut ended => return,
        }
        inner.calls.sweep.now.fetch_add(1, Ordering::Relaxed);
    }
}
