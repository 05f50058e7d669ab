//! [`Endpoint`] makes connections; [`Peer`] is one: calls to the other end, and the
//! handlers this end serves to it, over one link in both directions.
//!
//! One task per connection reads the link. It never waits on anything the peer controls:
//! replies go to their callers through one-shot channels, sync calls start their handler
//! in a task of their own, one-way calls queue for one task that runs them in the order
//! sent, and error replies it makes itself (Busy, unknown method) are sent from a task.
//! So replies and callbacks keep flowing whatever the handlers do, and nothing deadlocks.

use core::marker::PhantomData;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use tokio::sync::{Notify, Semaphore};
use tokio::task::AbortHandle;
use volley_proto::rpc::Hello;

use crate::codec::{Bincode, Codec};
use crate::config::Config;
use crate::error::Ended;
use any::AnySender;

mod any;
mod call;
mod deadlines;
mod dispatch;
mod endpoint;
mod keepalive;
pub(crate) mod routes;
mod serve;

use crate::pool::{BufferPool, PoolStats};
use crate::service::Service;
pub(crate) use call::{Pending, deadline_exceeded, encode_failed};
pub(crate) use deadlines::own_timer;
use deadlines::{Sweep, Waiter};
pub use endpoint::Endpoint;
use routes::Routes;

/// Answers (error replies, pongs) this end may have queued at once before it gives up on
/// a peer that keeps asking without reading them.
const MAX_PENDING_ANSWERS: usize = 1024;

/// One connection: call the peer, serve it, shut down. Cheap to clone; the connection
/// closes when the last clone made from [`Endpoint::connect`] is dropped (handlers'
/// copies, from [`Context::peer`](crate::Context::peer), do not hold it open).
pub struct Peer<S, C = Bincode> {
    inner: Arc<Inner<S, C>>,
    _owner: Option<Arc<Owner<S, C>>>,
}

impl<S, C> Clone for Peer<S, C> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            _owner: self._owner.clone(),
        }
    }
}

/// Closes the link when the last user-held handle goes.
struct Owner<S, C> {
    inner: Arc<Inner<S, C>>,
}

impl<S, C> Drop for Owner<S, C> {
    fn drop(&mut self) {
        self.inner.sender.close();
    }
}

/// Counters of what a connection has seen; see [`Peer::stats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PeerStats {
    /// Calls this end made (sync and one-way).
    pub calls_sent: u64,
    /// Calls the peer made that this end started a handler for.
    pub calls_served: u64,
    /// Calls answered Busy because the peer went past this end's credit.
    pub busy: u64,
    /// One-way calls whose handler failed, panicked, or whose method is unknown.
    pub oneway_failed: u64,
    /// One-way calls dropped unrun (past credit, or while shutting down).
    pub oneway_dropped: u64,
    /// Cancels the peer sent for calls still running here.
    pub cancelled: u64,
    /// Replies that came for calls no longer waiting (cancelled or timed out).
    pub late_replies: u64,
}

#[derive(Default)]
struct Counters {
    calls_sent: AtomicU64,
    calls_served: AtomicU64,
    busy: AtomicU64,
    oneway_failed: AtomicU64,
    oneway_dropped: AtomicU64,
    cancelled: AtomicU64,
    late_replies: AtomicU64,
}

/// One connection's state, shared by its handles and its tasks, by job: what every job
/// reads (the link, the hellos, the pool), the calls this end has out ([`Calls`]), the
/// peer's calls it serves ([`Served`]), and whether the connection lives ([`Liveness`]).
struct Inner<S, C> {
    sender: AnySender,
    /// What the link knew of the connection.
    connection: crate::link::ConnectionInfo,
    /// Names the connection in rate-limited warnings.
    who: ConnectionName,
    /// The largest message the link carries.
    link_max: usize,
    config: Config,
    ours: Hello,
    theirs: Hello,
    /// The peer's methods by id, from its method table; `None` for a peer that sends
    /// none (its service's fingerprint matched ours at the hello instead).
    their_methods: Option<Box<[crate::service::MethodEntry]>>,
    pool: BufferPool,
    calls: Calls,
    served: Served<S, C>,
    life: Liveness,
    counters: Counters,
    _s: PhantomData<fn() -> (S, C)>,
}

/// The calls this end has made to the peer and awaits.
struct Calls {
    next_id: AtomicU32,
    waiters: Mutex<HashMap<u32, Waiter>>,
    /// Keeps the long deadlines of calls in `waiters`.
    sweep: Sweep,
    /// The peer's credit: one permit per call in flight to it.
    credit: Arc<Semaphore>,
    /// One-way calls sent whose credit has not come back.
    oneway_out: AtomicU32,
}

impl Calls {
    /// None yet, with the peer's `credit`.
    fn new(credit: u32) -> Self {
        Self {
            next_id: AtomicU32::new(1),
            waiters: Mutex::new(HashMap::new()),
            sweep: Sweep::default(),
            credit: Arc::new(Semaphore::new(credit as usize)),
            oneway_out: AtomicU32::new(0),
        }
    }
}

/// The peer's calls this end serves.
struct Served<S, C> {
    router: Option<Arc<Routes<S, C>>>,
    /// Sync calls running, by the peer's call id; `None` until the task is spawned.
    running: Mutex<HashMap<u32, Option<AbortHandle>>>,
    /// Calls of the peer's taking credit here: sync running plus one-way queued.
    in_flight: AtomicUsize,
    /// Answers (error replies, pongs) this end is sending from tasks of their own.
    pending_answers: AtomicUsize,
    shutting_down: AtomicBool,
    /// Set while the keepalive task closes an idle connection: calls arriving then are
    /// refused unrun, so the peer may send again every call the close cut off.
    idle_closing: AtomicBool,
    /// Told when `in_flight` falls to zero.
    idle: Notify,
}

impl<S, C> Served<S, C> {
    /// None yet, served by `router` (none: the peer's calls are refused).
    fn new(router: Option<Arc<Routes<S, C>>>) -> Self {
        Self {
            router,
            running: Mutex::new(HashMap::new()),
            in_flight: AtomicUsize::new(0),
            pending_answers: AtomicUsize::new(0),
            shutting_down: AtomicBool::new(false),
            idle_closing: AtomicBool::new(false),
            idle: Notify::new(),
        }
    }
}

/// Whether the connection lives, and the signs of life and use the keep-alive reads.
#[derive(Default)]
struct Liveness {
    /// Messages received (any kind): the keep-alive's sign of life.
    heard: AtomicU64,
    /// Calls, replies and credit sent or received (not pings): the idle timeout's sign
    /// of use.
    activity: AtomicU64,
    /// Why the connection ended, once it has.
    failure: OnceLock<Ended>,
    /// Told when `failure` is set.
    ended: Notify,
    /// Set once the peer answered a call `ShuttingDown`: a reconnecting client takes
    /// its next calls elsewhere.
    draining: AtomicBool,
}

/// A connection's number in this process, for the log.
struct ConnectionName(u64);

impl ConnectionName {
    fn next() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Self(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

impl core::fmt::Display for ConnectionName {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "rpc connection {}", self.0)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<S: Service, C: Codec> Peer<S, C> {
    /// Stops taking new calls (they are answered "shutting down"), waits for the calls
    /// already running here to finish and their replies to be queued, then closes the
    /// link.
    pub async fn shutdown(&self) {
        let inner = &self.inner;
        inner.served.shutting_down.store(true, Ordering::SeqCst);
        loop {
            let idle = inner.served.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if inner.served.in_flight.load(Ordering::SeqCst) == 0
                || inner.life.failure.get().is_some()
            {
                break;
            }
            idle.await;
        }
        inner.sender.close();
    }

    /// Closes the link now: queued messages go out, then the peer sees the end.
    pub fn close(&self) {
        self.inner.sender.close();
    }

    /// Waits until the connection has ended, and says why.
    pub async fn closed(&self) -> Ended {
        loop {
            let ended = self.inner.life.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if let Some(cause) = self.inner.life.failure.get() {
                return cause.clone();
            }
            ended.await;
        }
    }

    /// Why the connection ended, if it has.
    pub fn failure(&self) -> Option<Ended> {
        self.inner.life.failure.get().cloned()
    }

    /// Whether the peer has answered a call [`CallError::ShuttingDown`](crate::CallError::ShuttingDown): it takes no new
    /// calls on this connection (a [`Reconnecting`](crate::Reconnecting) client then
    /// makes its next calls on a new one).
    pub fn draining(&self) -> bool {
        self.inner.life.draining.load(Ordering::Relaxed)
    }

    /// The peer's hello: its limits and credit.
    pub fn peer_hello(&self) -> Hello {
        self.inner.theirs
    }

    /// This end's hello.
    pub fn hello(&self) -> Hello {
        self.inner.ours
    }

    /// How the pool that arguments and results are encoded into has been used.
    pub fn pool_stats(&self) -> PoolStats {
        self.pool().stats()
    }

    /// The pool arguments and results are encoded into.
    pub(crate) fn pool(&self) -> &BufferPool {
        &self.inner.pool
    }

    /// What the link knew of the connection (the peer's address).
    pub fn connection(&self) -> &crate::link::ConnectionInfo {
        &self.inner.connection
    }

    /// Counters so far.
    pub fn stats(&self) -> PeerStats {
        let c = &self.inner.counters;
        PeerStats {
            calls_sent: c.calls_sent.load(Ordering::Relaxed),
            calls_served: c.calls_served.load(Ordering::Relaxed),
            busy: c.busy.load(Ordering::Relaxed),
            oneway_failed: c.oneway_failed.load(Ordering::Relaxed),
            oneway_dropped: c.oneway_dropped.load(Ordering::Relaxed),
            cancelled: c.cancelled.load(Ordering::Relaxed),
            late_replies: c.late_replies.load(Ordering::Relaxed),
        }
    }

    /// A handle for handlers: calls back on this connection without holding it open.
    fn handle(inner: &Arc<Inner<S, C>>) -> Self {
        Self {
            inner: inner.clone(),
            _owner: None,
        }
    }
}

impl<S, C> core::fmt::Debug for Peer<S, C> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Peer")
            .field("theirs", &self.inner.theirs)
            .field("failure", &self.inner.life.failure.get())
            .finish()
    }
}
