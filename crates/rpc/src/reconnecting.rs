//! [`Reconnecting`]: a client's connection that connects when first used and again
//! whenever it is lost, and [`Caller`]: what a generated client calls through.

use core::future::Future;
use core::hash::{BuildHasher, Hasher};
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use core::time::Duration;
use std::collections::hash_map::RandomState;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use futures::future::BoxFuture;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::codec::{Bincode, Codec};
use crate::error::{CallError, ConnectError};
use crate::link::{MessageLink, Payload};
use crate::metadata::Pairs;
use crate::peer::{Endpoint, Peer, deadline_exceeded, encode_failed};
use crate::reply::{ReplyFuture, SendFuture};
use crate::service::{Method, Service};

/// The first pause after a failed try; each next one doubles, up to [`MAX_RETRY`].
const FIRST_RETRY: Duration = Duration::from_millis(10);

/// The longest pause between tries while calls wait for a connection.
pub(crate) const MAX_RETRY: Duration = Duration::from_millis(500);

/// How long one try to connect (the transport's connection and the hello) may take.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a call without a deadline waits for a connection.
pub(crate) const WAIT_WITHOUT_DEADLINE: Duration = Duration::from_secs(60);

/// A connection to a server that makes itself again: cheap to clone (clones share it),
/// connected at the first call rather than up front, and connected again after the
/// connection is lost (the server restarted, closed it after its idle timeout, went
/// silent), with a jittered pause after each failed try that doubles up to
/// half a second. A generated client takes it in place of a [`Peer`]:
///
/// ```no_run
/// use core::net::SocketAddr;
/// use volley_rpc::link::framed::FramedLink;
/// use volley_rpc::{Config, Endpoint, Reconnecting};
///
/// volley_rpc::service! {
///     /// A counter.
///     pub service Counter {
///         /// Adds to it; gives the new value.
///         1 => fn add(by: u64) -> u64;
///     }
/// }
///
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// let addr: SocketAddr = "127.0.0.1:7000".parse()?;
/// let endpoint = Endpoint::<Counter>::new(Config::default())?;
/// let counter = CounterClient::new(Reconnecting::new(endpoint, move || {
///     FramedLink::connect_tcp(addr)
/// }));
/// // Connects now; after a restart of the server, the next call connects again.
/// let total = counter.add(1).await?;
/// # Ok(())
/// # }
/// ```
///
/// Which calls fail, and how:
/// - A call made while there is no connection waits for one up to its deadline (the
///   configured default if it sets none; 60 s without either), then
///   fails with [`CallError::Unavailable`], saying why the last try failed.
/// - Calls in flight when the connection is lost fail with
///   [`CallError::ConnectionLost`], whose `sent` says that they may have run; the next
///   calls go over a new connection. A call that may have run is never sent again:
///   whether it may run twice is the caller's to decide.
/// - Calls the server promises it never ran go again on the next connection: those it
///   answered [`CallError::ShuttingDown`] (the connection is then [`Peer::draining`] and
///   takes no more), and those that crossed its idle close.
/// - A connection the server closed for being idle (it says so before it closes) is no
///   failure: the next call connects again.
///
/// Tries are made only while calls wait: a client nobody calls makes no connection.
/// [`Peer`] stays the one connection that never reconnects, for those who want that.
pub struct Reconnecting<S, C = Bincode> {
    shared: Arc<Shared<S, C>>,
}

impl<S, C> Clone for Reconnecting<S, C> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl<S, C> core::fmt::Debug for Reconnecting<S, C> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let state = lock(&self.shared.state);
        f.debug_struct("Reconnecting")
            .field("connected", &state.peer.is_some())
            .field("connecting", &state.connecting)
            .field(
                "reconnects",
                &self.shared.reconnects.load(Ordering::Relaxed),
            )
            .finish()
    }
}

type Connect<S, C> = dyn Fn() -> BoxFuture<'static, Result<Peer<S, C>, ConnectError>> + Send + Sync;

struct Shared<S, C> {
    connect: Box<Connect<S, C>>,
    state: Mutex<State<S, C>>,
    /// Told when a try ends.
    changed: Notify,
    /// Calls waiting for a connection.
    waiting: AtomicUsize,
    reconnects: AtomicU64,
    closed: AtomicBool,
    default_deadline: Option<Duration>,
}

struct State<S, C> {
    peer: Option<Peer<S, C>>,
    connecting: bool,
    /// Why the last try failed.
    last_error: Option<String>,
    /// A connection was made before: the next one is a reconnect.
    connected_once: bool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<S: Service, C: Codec> Reconnecting<S, C> {
    /// A client that connects with `endpoint` over the links `connect` makes (a TCP, TLS,
    /// Unix, QUIC or UDP link, or one of another crate), each try bounded by
    /// 10 s. Nothing is connected until the first call.
    pub fn new<F, Fut, L>(endpoint: Endpoint<S, C>, connect: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::io::Result<L>> + Send + 'static,
        L: MessageLink,
    {
        let default_deadline = endpoint.config().default_deadline;
        let connect = move || -> BoxFuture<'static, Result<Peer<S, C>, ConnectError>> {
            let link = connect();
            let endpoint = endpoint.clone();
            Box::pin(async move {
                let attempt = async { endpoint.connect(link.await?).await };
                match tokio::time::timeout(CONNECT_TIMEOUT, attempt).await {
                    Ok(result) => result,
                    Err(_) => Err(ConnectError::Timeout(CONNECT_TIMEOUT)),
                }
            })
        };
        Self {
            shared: Arc::new(Shared {
                connect: Box::new(connect),
                state: Mutex::new(State {
                    peer: None,
                    connecting: false,
                    last_error: None,
                    connected_once: false,
                }),
                changed: Notify::new(),
                waiting: AtomicUsize::new(0),
                reconnects: AtomicU64::new(0),
                closed: AtomicBool::new(false),
                default_deadline,
            }),
        }
    }

    /// Connects now, once, unless connected already: for a program that should stop at
    /// its start, with the connection's own error, when the server is not there. Later
    /// losses are made good as usual.
    pub async fn connect(&self) -> Result<Peer<S, C>, ConnectError> {
        if let Some(peer) = self.current() {
            return Ok(peer);
        }
        let peer = (self.shared.connect)().await?;
        let mut state = lock(&self.shared.state);
        if state.connected_once {
            self.shared.reconnects.fetch_add(1, Ordering::Relaxed);
        }
        state.connected_once = true;
        state.peer = Some(peer.clone());
        drop(state);
        self.shared.changed.notify_waiters();
        Ok(peer)
    }

    /// The connection now, if it is up; never waits, never connects.
    pub fn current(&self) -> Option<Peer<S, C>> {
        let state = lock(&self.shared.state);
        state
            .peer
            .as_ref()
            .filter(|p| p.failure().is_none() && !p.draining())
            .cloned()
    }

    /// A connection that is up: the current one, else a new one, waiting at most `wait`
    /// for it. The error says why the last try failed.
    pub async fn connected(&self, wait: Duration) -> Result<Peer<S, C>, String> {
        let shared = &self.shared;
        let until = Instant::now() + wait;
        shared.waiting.fetch_add(1, Ordering::SeqCst);
        let _waiting = Waiting(&shared.waiting);
        loop {
            let changed = shared.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            {
                let mut state = lock(&shared.state);
                if shared.closed.load(Ordering::SeqCst) {
                    return Err("the client was shut down".to_owned());
                }
                if let Some(peer) = state
                    .peer
                    .as_ref()
                    .filter(|p| p.failure().is_none() && !p.draining())
                {
                    return Ok(peer.clone());
                }
                if !state.connecting {
                    state.connecting = true;
                    tokio::spawn(connect_loop(shared.clone()));
                }
            }
            if tokio::time::timeout_at(until, changed).await.is_err() {
                let state = lock(&shared.state);
                return Err(match &state.last_error {
                    Some(last) => format!("the last try failed: {last}"),
                    None => "still connecting".to_owned(),
                });
            }
        }
    }

    /// Connections made after the first (each one a reconnect).
    pub fn reconnects(&self) -> u64 {
        self.shared.reconnects.load(Ordering::Relaxed)
    }

    /// Stops connecting (calls waiting for a connection fail, later calls fail at once)
    /// and shuts the current connection down as [`Peer::shutdown`] does.
    pub async fn shutdown(&self) {
        self.shared.closed.store(true, Ordering::SeqCst);
        self.shared.changed.notify_waiters();
        let peer = lock(&self.shared.state).peer.take();
        if let Some(peer) = peer {
            peer.shutdown().await;
        }
    }

    /// How long a call with `deadline` waits for a connection.
    fn wait_for(&self, deadline: Option<Duration>) -> Duration {
        deadline
            .or(self.shared.default_deadline)
            .unwrap_or(WAIT_WITHOUT_DEADLINE)
    }

    /// A connection for a call of `M`, waited for up to `wait`.
    async fn for_call<M: Method>(&self, wait: Duration) -> Result<Peer<S, C>, CallError> {
        self.connected(wait)
            .await
            .map_err(|why| CallError::Unavailable {
                method: M::NAME,
                after: wait,
                why,
            })
    }

    /// What is left of a call's `budget` (its deadline) `start` ago; an error once none is.
    fn left<M: Method>(
        budget: Option<Duration>,
        start: Instant,
    ) -> Result<Option<Duration>, CallError> {
        match budget {
            Some(d) => match d.checked_sub(start.elapsed()).filter(|l| !l.is_zero()) {
                Some(left) => Ok(Some(left)),
                None => Err(deadline_exceeded::<M>(d)),
            },
            None => Ok(None),
        }
    }

    /// Runs `call` with `args` (encoded once) on a connection, and again on the next one
    /// whenever the call did not run there: the connection ended before the call went out
    /// or was closed as idle as it did (`ConnectionLost` with `sent: false`), or the peer
    /// was shutting down (`ShuttingDown`); until the call's wait for a connection runs
    /// out. A call that may have run is never sent again.
    async fn on_a_connection<M, T, F, Fut>(
        &self,
        args: &M::Args,
        pairs: &Pairs,
        deadline: Option<Duration>,
        call: F,
    ) -> Result<T, CallError>
    where
        M: Method<Service = S>,
        F: Fn(Peer<S, C>, Payload, Option<Duration>) -> Fut,
        Fut: Future<Output = Result<T, CallError>>,
    {
        let start = Instant::now();
        let budget = deadline.or(self.shared.default_deadline);
        let wait = self.wait_for(deadline);
        let mut peer = match self.current() {
            Some(peer) => peer,
            None => self.for_call::<M>(wait).await?,
        };
        let args = match pairs.is_empty() {
            true => peer.encode(args).await.map_err(encode_failed::<M>)?,
            false => with_metadata::<C, M>(pairs, args)?,
        };
        loop {
            let left = Self::left::<M>(budget, start)?;
            match call(peer, args.clone(), left).await {
                Err(
                    CallError::ConnectionLost { sent: false, .. } | CallError::ShuttingDown { .. },
                ) => {
                    // Not run: the connection ended first, or the peer refused it as it
                    // shut down. Let the loss be seen, then go on the next connection.
                    tokio::task::yield_now().await;
                    peer = self
                        .for_call::<M>(wait.saturating_sub(start.elapsed()))
                        .await?;
                }
                other => return other,
            }
        }
    }

    /// Starts a sync call, sent on the connection that is up, else on the next one, and
    /// again on the next one if its connection ends before it goes out.
    pub(crate) fn start_call<M: Method<Service = S>>(
        &self,
        args: M::Args,
        segments: Vec<Bytes>,
        deadline: Option<Duration>,
        pairs: Pairs,
    ) -> ReplyFuture<M, C> {
        let this = self.clone();
        ReplyFuture::slow(Box::pin(async move {
            let metadata = !pairs.is_empty();
            let call = |peer: Peer<S, C>, args, left| {
                let segments = segments.clone();
                async move { peer.call_encoded::<M>(args, segments, left, metadata).await }
            };
            this.on_a_connection::<M, _, _, _>(&args, &pairs, deadline, call)
                .await
        }))
    }

    /// Starts a one-way call as [`start_call`](Self::start_call) does.
    pub(crate) fn start_send<M: Method<Service = S>>(
        &self,
        args: M::Args,
        segments: Vec<Bytes>,
        pairs: Pairs,
    ) -> SendFuture {
        let this = self.clone();
        SendFuture::slow(Box::pin(async move {
            let metadata = !pairs.is_empty();
            let send = |peer: Peer<S, C>, args, _| {
                let segments = segments.clone();
                async move { peer.send_encoded::<M>(args, segments, metadata).await }
            };
            this.on_a_connection::<M, _, _, _>(&args, &pairs, None, send)
                .await
        }))
    }
}

/// Counts a caller out of `waiting` when it stops waiting, however it stops.
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Tries to connect until a try succeeds, the client is shut down, or no call waits any
/// more (the next call starts it again).
async fn connect_loop<S: Service, C: Codec>(shared: Arc<Shared<S, C>>) {
    let mut pause = FIRST_RETRY;
    loop {
        let result = (shared.connect)().await;
        {
            let mut state = lock(&shared.state);
            match result {
                Ok(peer) if !shared.closed.load(Ordering::SeqCst) => {
                    if state.connected_once {
                        shared.reconnects.fetch_add(1, Ordering::Relaxed);
                    }
                    state.connected_once = true;
                    state.peer = Some(peer);
                    state.last_error = None;
                    state.connecting = false;
                    drop(state);
                    shared.changed.notify_waiters();
                    return;
                }
                Ok(peer) => peer.close(),
                Err(e) => state.last_error = Some(e.to_string()),
            }
            if shared.closed.load(Ordering::SeqCst) || shared.waiting.load(Ordering::SeqCst) == 0 {
                state.connecting = false;
                drop(state);
                shared.changed.notify_waiters();
                return;
            }
        }
        tokio::time::sleep(jittered(pause)).await;
        pause = (pause * 2).min(MAX_RETRY);
    }
}

/// `pause` spread over its second half, so that clients cut off together do not all try
/// again at the same instant.
fn jittered(pause: Duration) -> Duration {
    let random = RandomState::new().build_hasher().finish();
    let half = pause / 2;
    half + half.mul_f64((random >> 11) as f64 / (1u64 << 53) as f64)
}

/// What a generated client calls through: one connection ([`Peer`]), or a connection that
/// makes itself again when lost ([`Reconnecting`]).
pub enum Caller<S, C = Bincode> {
    /// One connection; a lost one stays lost.
    Peer(Peer<S, C>),
    /// A connection made again whenever it is lost.
    Reconnecting(Reconnecting<S, C>),
}

impl<S: Service, C: Codec> Caller<S, C> {
    /// The connection calls go over now: the peer, or the reconnecting client's current
    /// connection if it is up.
    pub fn current(&self) -> Option<Peer<S, C>> {
        match self {
            Self::Peer(peer) => Some(peer.clone()),
            Self::Reconnecting(client) => client.current(),
        }
    }

    /// Shuts the connection down ([`Peer::shutdown`], [`Reconnecting::shutdown`]).
    pub async fn shutdown(&self) {
        match self {
            Self::Peer(peer) => peer.shutdown().await,
            Self::Reconnecting(client) => client.shutdown().await,
        }
    }

    pub(crate) fn start_call<M: Method<Service = S>>(
        &self,
        args: M::Args,
        segments: Vec<Bytes>,
        deadline: Option<Duration>,
        pairs: Pairs,
    ) -> ReplyFuture<M, C> {
        match self {
            Self::Peer(peer) if pairs.is_empty() => peer.start_call::<M>(args, segments, deadline),
            Self::Peer(peer) => {
                let peer = peer.clone();
                ReplyFuture::slow(Box::pin(async move {
                    let args = with_metadata::<C, M>(&pairs, &args)?;
                    peer.call_encoded::<M>(args, segments, deadline, true).await
                }))
            }
            Self::Reconnecting(client) => client.start_call::<M>(args, segments, deadline, pairs),
        }
    }

    pub(crate) fn start_send<M: Method<Service = S>>(
        &self,
        args: M::Args,
        segments: Vec<Bytes>,
        pairs: Pairs,
    ) -> SendFuture {
        match self {
            Self::Peer(peer) if pairs.is_empty() => peer.start_send::<M>(args, segments),
            Self::Peer(peer) => {
                let peer = peer.clone();
                SendFuture::slow(Box::pin(async move {
                    let args = with_metadata::<C, M>(&pairs, &args)?;
                    peer.send_encoded::<M>(args, segments, true).await
                }))
            }
            Self::Reconnecting(client) => client.start_send::<M>(args, segments, pairs),
        }
    }
}

impl<S, C> Clone for Caller<S, C> {
    fn clone(&self) -> Self {
        match self {
            Self::Peer(peer) => Self::Peer(peer.clone()),
            Self::Reconnecting(client) => Self::Reconnecting(client.clone()),
        }
    }
}

impl<S, C> core::fmt::Debug for Caller<S, C> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Peer(peer) => f.debug_tuple("Peer").field(peer).finish(),
            Self::Reconnecting(client) => f.debug_tuple("Reconnecting").field(client).finish(),
        }
    }
}

impl<S, C> From<Peer<S, C>> for Caller<S, C> {
    fn from(peer: Peer<S, C>) -> Self {
        Self::Peer(peer)
    }
}

impl<S, C> From<Reconnecting<S, C>> for Caller<S, C> {
    fn from(client: Reconnecting<S, C>) -> Self {
        Self::Reconnecting(client)
    }
}

/// `args` encoded after `pairs`' metadata block, or the error a call of `M` gets.
fn with_metadata<C: Codec, M: Method>(pairs: &Pairs, args: &M::Args) -> Result<Payload, CallError> {
    crate::metadata::encode_with::<C, _>(pairs, args).map_err(|problem| CallError::Metadata {
        method: M::NAME,
        problem,
    })
}
