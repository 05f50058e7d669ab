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
use core::time::Duration;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use bytes::Bytes;
use serde::Serialize;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tokio::task::AbortHandle;
use volley_proto::wire::frame;
use volley_proto::wire::rpc::{
    CAP_ANSWERS_PINGS, ErrorCode, Head, Hello, Kind, MAX_HELLO_FRAME, WIRE_VERSION,
};

use crate::codec::{Bincode, Codec, CodecError};
use crate::config::Config;
use crate::error::{CallError, ConnectError};
use crate::link::{LinkError, LinkReceiver, LinkSender, Message, MessageLink};
use any::AnySender;

mod any;
mod dispatch;
mod keepalive;
mod serve;
use crate::pool::BufferPool;
use crate::router::{Reply, Router};
use crate::service::{Method, Service};

/// Answers (error replies, pongs) this end may have queued at once before it gives up on
/// a peer that keeps asking without reading them.
const MAX_PENDING_ANSWERS: usize = 1024;

/// Makes connections that speak service `S` with codec `C`, serving `S`'s methods that
/// its router handles (if any).
pub struct Endpoint<S, C = Bincode> {
    config: Config,
    router: Option<Arc<Router<S, C>>>,
}

impl<S, C> Clone for Endpoint<S, C> {
    fn clone(&self) -> Self {
        Self {
            config: self.config,
            router: self.router.clone(),
        }
    }
}

impl<S: Service, C: Codec> Endpoint<S, C> {
    /// An endpoint that calls but serves nothing; fails if a setting is out of range.
    pub fn new(config: Config) -> Result<Self, ConnectError> {
        config.check().map_err(ConnectError::Config)?;
        Ok(Self {
            config,
            router: None,
        })
    }

    /// Serves the router's methods on every connection made from now on.
    pub fn serve(mut self, router: Router<S, C>) -> Self {
        self.router = Some(Arc::new(router));
        self
    }

    /// The settings.
    pub fn config(&self) -> Config {
        self.config
    }

    /// Starts a connection over `link`: sends this end's hello, checks the peer's, then
    /// serves. Both ends do the same; neither is special.
    pub async fn connect<L: MessageLink>(&self, link: L) -> Result<Peer<S, C>, ConnectError> {
        let (sender, mut receiver) = link.split();
        let ours = Hello {
            version: WIRE_VERSION,
            codec: C::ID,
            max_message: u32::try_from(self.config.max_message.min(sender.max_message()))
                .unwrap_or(u32::MAX),
            credit: self.config.credit,
            fingerprint: S::FINGERPRINT,
            capabilities: CAP_ANSWERS_PINGS,
        };
        let theirs = match tokio::time::timeout(
            self.config.hello_timeout,
            hello(&sender, &mut receiver, ours),
        )
        .await
        {
            Ok(Ok(theirs)) => theirs,
            Ok(Err(e)) => {
                sender.close();
                return Err(e);
            }
            Err(_) => {
                sender.close();
                return Err(ConnectError::Timeout(self.config.hello_timeout));
            }
        };
        let refused = if theirs.version != WIRE_VERSION {
            Some(ConnectError::Version {
                ours: WIRE_VERSION,
                theirs: theirs.version,
            })
        } else if theirs.codec != C::ID {
            Some(ConnectError::Codec {
                ours: C::ID,
                theirs: theirs.codec,
            })
        } else if theirs.fingerprint != S::FINGERPRINT {
            Some(ConnectError::Service {
                service: S::NAME,
                ours: S::FINGERPRINT,
                theirs: theirs.fingerprint,
            })
        } else {
            None
        };
        if let Some(e) = refused {
            // Tell the peer why (as an error reply to no call), then close both ways.
            let text = Bytes::from(format!("the peer refused the hello: {e}"));
            let why = Message::new(Kind::ERROR, 0, ErrorCode::PROTOCOL.0, text);
            let _ = tokio::time::timeout(self.config.hello_timeout, sender.send(why)).await;
            sender.close();
            return Err(e);
        }
        let (oneway_tx, oneway_rx) = mpsc::unbounded_channel();
        let link_max = sender.max_message();
        let inner = Arc::new(Inner {
            sender: AnySender::new(sender),
            who: ConnectionName::next(),
            link_max,
            heard: AtomicU64::new(0),
            activity: AtomicU64::new(0),
            config: self.config,
            ours,
            theirs,
            pool: BufferPool::new(self.config.pool),
            next_id: AtomicU32::new(1),
            waiters: Mutex::new(HashMap::new()),
            credit: Arc::new(Semaphore::new(theirs.credit as usize)),
            oneway_out: AtomicU32::new(0),
            failure: OnceLock::new(),
            ended: Notify::new(),
            router: self.router.clone(),
            running: Mutex::new(HashMap::new()),
            in_flight: AtomicUsize::new(0),
            pending_answers: AtomicUsize::new(0),
            shutting_down: AtomicBool::new(false),
            idle: Notify::new(),
            counters: Counters::default(),
            _s: PhantomData,
        });
        tokio::spawn(dispatch::read_loop(inner.clone(), receiver, oneway_tx));
        tokio::spawn(serve::oneway_loop(inner.clone(), oneway_rx));
        if let Some(watch) = keepalive::Watch::new(&self.config, &theirs) {
            tokio::spawn(keepalive::run(inner.clone(), watch));
        }
        Ok(Peer {
            inner: inner.clone(),
            _owner: Some(Arc::new(Owner { inner })),
        })
    }
}

/// Sends our hello and takes the peer's.
async fn hello<T: LinkSender, R: LinkReceiver>(
    sender: &T,
    receiver: &mut R,
    ours: Hello,
) -> Result<Hello, ConnectError> {
    sender
        .send(Message::new(
            Kind::HELLO,
            0,
            0,
            Bytes::copy_from_slice(&ours.encode()),
        ))
        .await?;
    let message = receiver.recv().await?;
    // A stream link holds the first frame to this already; a datagram link is checked
    // here.
    let len = message.wire_len() + frame::HEADER_LEN;
    if len > MAX_HELLO_FRAME {
        return Err(ConnectError::Malformed(
            volley_proto::wire::Error::TooLarge {
                what: "rpc hello",
                len: len as u64,
                max: MAX_HELLO_FRAME as u64,
            },
        ));
    }
    match message.head.kind {
        Kind::HELLO => Hello::parse(&message.args).map_err(ConnectError::Malformed),
        Kind::ERROR => Err(ConnectError::Refused(
            String::from_utf8_lossy(&message.args).into_owned(),
        )),
        kind => Err(ConnectError::NotHello(kind)),
    }
}

/// One connection: call the peer, serve it, shut down. Cheap to clone; the connection
/// closes when the last clone made from [`Endpoint::connect`] is dropped (handlers'
/// copies, from [`Call::peer`](crate::Call::peer), do not hold it open).
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

struct Inner<S, C> {
    sender: AnySender,
    /// Names the connection in rate-limited warnings.
    who: ConnectionName,
    /// The largest message the link carries.
    link_max: usize,
    /// Messages received (any kind): the keep-alive's sign of life.
    heard: AtomicU64,
    /// Calls, replies and credit sent or received (not pings): the idle timeout's sign
    /// of use.
    activity: AtomicU64,
    config: Config,
    ours: Hello,
    theirs: Hello,
    pool: BufferPool,
    // Calling.
    next_id: AtomicU32,
    waiters: Mutex<HashMap<u32, oneshot::Sender<Message>>>,
    /// The peer's credit: one permit per call in flight to it.
    credit: Arc<Semaphore>,
    /// One-way calls sent whose credit has not come back.
    oneway_out: AtomicU32,
    failure: OnceLock<LinkError>,
    ended: Notify,
    // Serving.
    router: Option<Arc<Router<S, C>>>,
    /// Sync calls running, by the peer's call id; `None` until the task is spawned.
    running: Mutex<HashMap<u32, Option<AbortHandle>>>,
    /// Calls of the peer's taking credit here: sync running plus one-way queued.
    in_flight: AtomicUsize,
    /// Answers (error replies, pongs) this end is sending from tasks of their own.
    pending_answers: AtomicUsize,
    shutting_down: AtomicBool,
    idle: Notify,
    counters: Counters,
    _s: PhantomData<fn() -> (S, C)>,
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
    /// Calls `M` and waits for its result.
    pub async fn call<M: Method<Service = S>>(
        &self,
        args: &M::Args,
    ) -> Result<M::Output, CallError> {
        Ok(self.call_with::<M>(args, Vec::new(), None).await?.value)
    }

    /// Calls `M` with bulk segments (sent uncopied) and an optional deadline (sent to the
    /// peer, which gives up at it too; `None` takes [`Config::default_deadline`]); returns the result and the segments that came with
    /// it. Waits first for the peer's credit. Dropping the future before it completes
    /// cancels the call at the peer.
    pub async fn call_with<M: Method<Service = S>>(
        &self,
        args: &M::Args,
        segments: Vec<Bytes>,
        deadline: Option<Duration>,
    ) -> Result<Reply<M::Output>, CallError> {
        let inner = &self.inner;
        let deadline = deadline.or(inner.config.default_deadline);
        let message = self
            .message::<M>(Kind::CALL, args, segments, deadline)
            .await?;
        let permit = inner.acquire(M::NAME).await?;
        let id = message.head.call_id;
        let (tx, rx) = oneshot::channel();
        lock(&inner.waiters).insert(id, tx);
        let mut guard = Pending {
            inner: inner.clone(),
            id,
            permit: Some(permit),
        };
        if let Err(e) = inner.sender.send(message).await {
            guard.disarm();
            return Err(inner.lost(M::NAME, e));
        }
        inner.counters.calls_sent.fetch_add(1, Ordering::Relaxed);
        inner.activity.fetch_add(1, Ordering::Relaxed);
        let reply = match deadline {
            Some(after) => match tokio::time::timeout(after, rx).await {
                Ok(reply) => reply,
                Err(_) => {
                    return Err(CallError::DeadlineExceeded {
                        method: M::NAME,
                        after,
                    });
                }
            },
            None => rx.await,
        };
        guard.disarm();
        let Ok(reply) = reply else {
            return Err(inner.lost(M::NAME, LinkError::Closed));
        };
        match reply.head.kind {
            Kind::REPLY => {
                let value = C::decode(&reply.args).map_err(|source| CallError::DecodeReply {
                    method: M::NAME,
                    source,
                })?;
                Ok(Reply {
                    value,
                    segments: reply.segments,
                })
            }
            _ => {
                let code = ErrorCode(reply.head.method);
                let detail = String::from_utf8_lossy(&reply.args).into_owned();
                Err(match (code, deadline) {
                    (ErrorCode::DEADLINE, Some(after)) => CallError::DeadlineExceeded {
                        method: M::NAME,
                        after,
                    },
                    (ErrorCode::TOO_LARGE, _) => CallError::TooLarge {
                        method: M::NAME,
                        len: 0,
                        max: inner.ours.max_message as usize,
                    },
                    _ => CallError::from_reply(M::NAME, M::ID, code, detail),
                })
            }
        }
    }

    /// Calls `M` one way: no reply. Waits for the peer's credit (given back as the peer
    /// finishes one-way calls), so a fast caller cannot bury a slow peer. The peer starts
    /// one-way handlers in the order sent; their errors are logged and counted there.
    pub async fn send<M: Method<Service = S>>(
        &self,
        args: &M::Args,
        segments: Vec<Bytes>,
    ) -> Result<(), CallError> {
        let inner = &self.inner;
        let message = self
            .message::<M>(Kind::ONE_WAY, args, segments, None)
            .await?;
        let permit = inner.acquire(M::NAME).await?;
        // The credit comes back in a credit message, not with a reply.
        permit.forget();
        inner.oneway_out.fetch_add(1, Ordering::Relaxed);
        inner
            .sender
            .send(message)
            .await
            .map_err(|e| inner.lost(M::NAME, e))?;
        inner.counters.calls_sent.fetch_add(1, Ordering::Relaxed);
        inner.activity.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Encodes a call and checks its size against the peer's largest message.
    async fn message<M: Method<Service = S>>(
        &self,
        kind: Kind,
        args: &M::Args,
        segments: Vec<Bytes>,
        deadline: Option<Duration>,
    ) -> Result<Message, CallError> {
        if let Some(cause) = self.inner.failure.get() {
            return Err(CallError::ConnectionLost {
                method: M::NAME,
                cause: cause.clone(),
            });
        }
        let args = self
            .encode(args)
            .await
            .map_err(|source| CallError::Encode {
                method: M::NAME,
                source,
            })?;
        let message = Message {
            head: Head {
                kind,
                call_id: self.inner.next_id.fetch_add(1, Ordering::Relaxed),
                method: M::ID,
                deadline_us: deadline.map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX)),
            },
            args,
            segments,
        };
        let max = self.inner.theirs.max_message as usize;
        if message.segments.len() > volley_proto::wire::rpc::MAX_SEGMENTS
            || message.wire_len() > max
        {
            return Err(CallError::TooLarge {
                method: M::NAME,
                len: message.wire_len(),
                max,
            });
        }
        Ok(message)
    }

    /// Encodes a value into a buffer from this connection's pool.
    pub(crate) async fn encode<T: Serialize + ?Sized>(
        &self,
        value: &T,
    ) -> Result<Bytes, CodecError> {
        let mut buf = self.inner.pool.get().await;
        C::encode(value, &mut buf)?;
        Ok(buf.freeze())
    }

    /// Stops taking new calls (they are answered "shutting down"), waits for the calls
    /// already running here to finish and their replies to be queued, then closes the
    /// link.
    pub async fn shutdown(&self) {
        let inner = &self.inner;
        inner.shutting_down.store(true, Ordering::SeqCst);
        loop {
            let idle = inner.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if inner.in_flight.load(Ordering::SeqCst) == 0 || inner.failure.get().is_some() {
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
    pub async fn closed(&self) -> LinkError {
        loop {
            let ended = self.inner.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if let Some(cause) = self.inner.failure.get() {
                return cause.clone();
            }
            ended.await;
        }
    }

    /// Why the connection ended, if it has.
    pub fn failure(&self) -> Option<LinkError> {
        self.inner.failure.get().cloned()
    }

    /// The peer's hello: its limits and credit.
    pub fn peer_hello(&self) -> Hello {
        self.inner.theirs
    }

    /// This end's hello.
    pub fn hello(&self) -> Hello {
        self.inner.ours
    }

    /// The pool arguments and results are encoded into.
    pub fn pool(&self) -> &BufferPool {
        &self.inner.pool
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
            .field("failure", &self.inner.failure.get())
            .finish()
    }
}

/// A sync call waiting for its reply: dropped early, it withdraws the waiter and tells
/// the peer to cancel; the credit comes back once the cancel is queued, so the peer has
/// freed the slot before this end uses it again.
struct Pending<S: Service, C: Codec> {
    inner: Arc<Inner<S, C>>,
    id: u32,
    permit: Option<OwnedSemaphorePermit>,
}

impl<S: Service, C: Codec> Pending<S, C> {
    fn disarm(&mut self) {
        lock(&self.inner.waiters).remove(&self.id);
        self.permit = None;
    }
}

impl<S: Service, C: Codec> Drop for Pending<S, C> {
    fn drop(&mut self) {
        let Some(permit) = self.permit.take() else {
            return;
        };
        lock(&self.inner.waiters).remove(&self.id);
        if self.inner.failure.get().is_some() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let sender = self.inner.sender.clone();
        let cancel = Message::new(Kind::CANCEL, self.id, 0, Bytes::new());
        runtime.spawn(async move {
            let _ = sender.send(cancel).await;
            drop(permit);
        });
    }
}
