//! [`serve`]: runs an [`Endpoint`] on every connection an [`Incoming`] yields (a
//! transport-tcp `Listener` with feature `tcp`, the UDP channel's endpoint with `udp`, or
//! any stream of links through [`Links`]), with graceful shutdown.

use core::net::SocketAddr;
use core::pin::Pin;
use core::sync::atomic::{AtomicU64, Ordering};
use std::io;
use std::sync::Arc;

#[cfg(feature = "tcp")]
use bytes::Bytes;
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};
#[cfg(feature = "tcp")]
use volley_proto::rpc::{ErrorCode, Kind};
#[cfg(feature = "tcp")]
use volley_transport_tcp::{Admission, Role, ServerConfig};

use crate::codec::Codec;
use crate::error::{ConnectError, Ended};
#[cfg(feature = "tcp")]
use crate::link::framed::{self, FramedLink};
use crate::link::{LinkError, MessageLink};
#[cfg(feature = "tcp")]
use crate::link::{LinkSender, Message};
use crate::peer::Endpoint;
use crate::service::Service;

#[cfg(feature = "tcp")]
/// transport-tcp's listener (TCP or Unix), re-exported so a server needs no other crate:
/// `Listener::bind_tcp(addr, listener_config(..))`.
pub use volley_transport_tcp::Listener;

#[cfg(feature = "tcp")]
/// Listener settings for RPC: framed connections (their largest message set by the
/// serving endpoint's `Config::max_message`), no idle timeout (an RPC connection may
/// rightly sit idle), at most `max_connections` at once.
pub fn listener_config(max_connections: usize) -> ServerConfig {
    ServerConfig {
        connection: framed::config(Role::Acceptor),
        max_connections,
        ..ServerConfig::default()
    }
}

/// Where a server's connections come from: each is a link and a name for the log.
pub trait Incoming: Send + 'static {
    /// The links it yields.
    type Link: MessageLink;

    /// The next connection and who it is from (for rate-limited warnings: a host, not a
    /// port), `None` once no more will come; an error ends the server with it.
    fn next(&mut self) -> impl Future<Output = Option<io::Result<(Self::Link, String)>>> + Send;

    /// The address it takes connections on, if it has one.
    fn local_addr(&self) -> Option<SocketAddr> {
        None
    }
}

/// Any stream of links as an [`Incoming`]: `serve(endpoint, Links::new(stream))`.
pub struct Links<St> {
    stream: Pin<Box<St>>,
    n: u64,
}

impl<St> Links<St> {
    /// Serves the links `stream` yields.
    pub fn new(stream: St) -> Self {
        Self {
            stream: Box::pin(stream),
            n: 0,
        }
    }
}

impl<St, L> Incoming for Links<St>
where
    St: futures::Stream<Item = io::Result<L>> + Send + 'static,
    L: MessageLink,
{
    type Link = L;

    async fn next(&mut self) -> Option<io::Result<(L, String)>> {
        let link = futures::StreamExt::next(&mut self.stream).await?;
        self.n += 1;
        Some(link.map(|link| (link, format!("link {}", self.n))))
    }
}

#[cfg(feature = "tcp")]
impl Incoming for Listener {
    type Link = FramedLink;

    fn next(&mut self) -> impl Future<Output = Option<io::Result<(FramedLink, String)>>> + Send {
        accept_framed(self)
    }

    fn local_addr(&self) -> Option<SocketAddr> {
        Self::local_addr(self).ok()
    }
}

#[cfg(feature = "tcp")]
/// Shared with the caller, who can read the listener's stats meanwhile.
impl Incoming for Arc<Listener> {
    type Link = FramedLink;

    fn next(&mut self) -> impl Future<Output = Option<io::Result<(FramedLink, String)>>> + Send {
        accept_framed(self)
    }

    fn local_addr(&self) -> Option<SocketAddr> {
        Listener::local_addr(self).ok()
    }
}

#[cfg(feature = "tcp")]
/// The next connection a listener admits; one past `max_connections` is told why and
/// closed from a task of its own.
async fn accept_framed(listener: &Listener) -> Option<io::Result<(FramedLink, String)>> {
    loop {
        let accepted = match listener.accept_or_refuse().await {
            Ok(Admission::Accepted(accepted)) => accepted,
            Ok(Admission::Full(refused)) => {
                crate::log::warn_limited(
                    "rpc connection refused: no free connection slot",
                    &PeerHost(refused.peer.clone()),
                );
                tokio::spawn(refuse(FramedLink::new(refused.framed, refused.incoming)));
                continue;
            }
            Err(e) => return Some(Err(e)),
        };
        let mut link = FramedLink::new(accepted.framed, accepted.incoming);
        if let volley_transport_tcp::Peer::Tcp(addr) = accepted.peer {
            link = link.with_peer_addr(addr);
        }
        return Some(Ok((link, PeerHost(accepted.peer).to_string())));
    }
}

#[cfg(feature = "udp")]
impl Incoming for volley_transport_udp::channel::ChannelEndpoint {
    type Link = crate::link::udp::UdpLink;

    async fn next(&mut self) -> Option<io::Result<(Self::Link, String)>> {
        Some(match self.accept().await {
            Ok(connection) => {
                let link = crate::link::udp::UdpLink::new(connection);
                let who = MessageLink::connection(&link)
                    .peer_addr
                    .map_or_else(|| "a udp peer".to_owned(), |a| a.ip().to_string());
                Ok((link, who))
            }
            Err(e) => Err(io::Error::other(e)),
        })
    }

    fn local_addr(&self) -> Option<SocketAddr> {
        Some(Self::local_addr(self))
    }
}

#[cfg(feature = "tls")]
/// Connections whose handshakes (TLS, QUIC) run in tasks of their own, so a slow one
/// holds up no other; a task yields its link, or `None` once it has logged why not.
pub(crate) struct Handshakes<L> {
    set: JoinSet<Option<(L, String)>>,
}

#[cfg(feature = "tls")]
impl<L: Send + 'static> Handshakes<L> {
    pub(crate) fn new() -> Self {
        Self {
            set: JoinSet::new(),
        }
    }

    /// Handshakes running now.
    pub(crate) fn len(&self) -> usize {
        self.set.len()
    }

    pub(crate) fn spawn(
        &mut self,
        handshake: impl Future<Output = Option<(L, String)>> + Send + 'static,
    ) {
        self.set.spawn(handshake);
    }

    /// Accepts connections (`accept` gives the next, `None` once there are no more) and
    /// hands each to `start` until a handshake yields a link.
    pub(crate) async fn next<T, A>(
        &mut self,
        mut accept: impl FnMut() -> A,
        mut start: impl FnMut(&mut Self, T),
    ) -> Option<io::Result<(L, String)>>
    where
        A: Future<Output = Option<io::Result<T>>>,
    {
        loop {
            tokio::select! {
                accepted = accept() => match accepted? {
                    Ok(accepted) => start(self, accepted),
                    Err(e) => return Some(Err(e)),
                },
                Some(done) = self.set.join_next() => match done {
                    Ok(Some(link)) => return Some(Ok(link)),
                    Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                    Ok(None) | Err(_) => {}
                },
            }
        }
    }
}

/// A running server; see [`serve`].
#[derive(Debug)]
pub struct ServerHandle {
    stop: watch::Sender<bool>,
    task: JoinHandle<io::Result<()>>,
    local_addr: Option<SocketAddr>,
    counters: Arc<Counters>,
}

/// What a server has seen of its connections, for programs that do not read its log:
/// see [`ServerHandle::stats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerStats {
    /// Connections whose hello passed.
    pub connected: u64,
    /// Connections refused at the hello, for any reason (those below among them).
    pub refused: u64,
    /// Of those, peers whose token or address the check refused.
    pub unauthenticated: u64,
    /// Of those, TLS clients on a plain port.
    pub tls_on_plain: u64,
    /// Connections closed because nothing was in flight for the idle timeout.
    pub idle_closed: u64,
    /// Connections dropped for a peer that stopped answering pings or flooded.
    pub dropped: u64,
}

#[derive(Debug, Default)]
struct Counters {
    connected: AtomicU64,
    refused: AtomicU64,
    unauthenticated: AtomicU64,
    tls_on_plain: AtomicU64,
    idle_closed: AtomicU64,
    dropped: AtomicU64,
}

impl Counters {
    fn add(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// Serves `endpoint` on every connection `incoming` yields (a TCP or Unix `Listener`,
/// an `Arc` of one, the UDP channel's endpoint, or [`Links`] over any stream of links,
/// your own included), each in a task of its own, until [`ServerHandle::shutdown`]; an
/// error from `incoming` ends the server with it. A connection whose hello fails is
/// logged and closed; the others go on.
pub fn serve<S, C, I>(endpoint: Endpoint<S, C>, mut incoming: I) -> ServerHandle
where
    S: Service,
    C: Codec,
    I: Incoming,
{
    let (stop, mut stopped) = watch::channel(false);
    let local_addr = incoming.local_addr();
    let counters = Arc::new(Counters::default());
    let counted = counters.clone();
    let task = tokio::spawn(async move {
        let mut connections = JoinSet::new();
        loop {
            while connections.try_join_next().is_some() {}
            tokio::select! {
                _ = stopped.changed() => break,
                next = incoming.next() => {
                    let Some(next) = next else { break };
                    let (link, who) = next?;
                    let run = run_connection(endpoint.clone(), link, who, stopped.clone(), counted.clone());
                    connections.spawn(run);
                }
            }
        }
        // Shutting down: the listener closes first (so clients find the address free for
        // the next server, not a backlog nobody accepts from), then each connection
        // drains its running calls and closes.
        drop(incoming);
        while connections.join_next().await.is_some() {}
        Ok(())
    });
    ServerHandle {
        stop,
        task,
        local_addr,
        counters,
    }
}

#[cfg(feature = "tcp")]
/// What a peer past `max_connections` is told before its connection is closed.
pub(crate) const NO_SLOT: &str = "no free connection slot";

#[cfg(feature = "tcp")]
/// A peer's host, without its port: what rate-limited warnings count by, since each
/// connection of one attacker comes from a port of its own.
pub(crate) struct PeerHost(pub(crate) volley_transport_tcp::Peer);

#[cfg(feature = "tcp")]
impl core::fmt::Display for PeerHost {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match &self.0 {
            volley_transport_tcp::Peer::Tcp(addr) => write!(f, "{}", addr.ip()),
            volley_transport_tcp::Peer::Unix => f.write_str("a unix socket peer"),
        }
    }
}

#[cfg(feature = "tcp")]
/// Tells a peer past `max_connections` why (an error reply in place of the hello, which
/// the client reports as "the server refused: no free connection slot"), then closes its
/// connection both ways; the listener's linger bounds how long that takes.
pub(crate) async fn refuse(link: FramedLink) {
    let (sender, _receiver) = link.split();
    let why = Message::new(
        Kind::ERROR,
        0,
        ErrorCode::BUSY.0,
        Bytes::from_static(NO_SLOT.as_bytes()),
    );
    let _ = sender.send(why).await;
    sender.close();
}

/// Runs one connection: the hello, then the peer until it closes or the server stops
/// (then it drains its running calls). `who` names it in the logs; a refused hello is
/// logged once per peer and reason at most so often.
async fn run_connection<S: Service, C: Codec, L: MessageLink>(
    endpoint: Endpoint<S, C>,
    link: L,
    who: String,
    mut stopped: watch::Receiver<bool>,
    counters: Arc<Counters>,
) {
    let peer = match endpoint.connect(link).await {
        Ok(peer) => {
            Counters::add(&counters.connected);
            peer
        }
        Err(e) => {
            Counters::add(&counters.refused);
            match &e {
                ConnectError::Link(LinkError::PeerSpeaksTls) => {
                    Counters::add(&counters.tls_on_plain)
                }
                ConnectError::Unauthenticated => Counters::add(&counters.unauthenticated),
                _ => {}
            }
            return refused(e, &who);
        }
    };
    tokio::select! {
        cause = peer.closed() => {
            match cause {
                Ended::Idle(_) => Counters::add(&counters.idle_closed),
                Ended::Silent(_) | Ended::Flooded(_) => Counters::add(&counters.dropped),
                _ => {}
            }
            tracing::debug!(peer = %who, "rpc connection ended: {cause}");
        }
        _ = stopped.changed() => peer.shutdown().await,
    }
}

/// Logs a connection refused at the hello, at most so often per peer and reason.
fn refused(e: ConnectError, who: &str) {
    match e {
        ConnectError::Link(LinkError::PeerSpeaksTls) => {
            crate::log::warn_limited("a TLS client on a plain port", &who);
        }
        e => {
            tracing::debug!(peer = %who, "rpc connection refused at the hello: {e}");
            crate::log::warn_limited(
                "rpc connection refused at the hello (run with RUST_LOG=debug for each reason)",
                &who,
            );
        }
    }
}

impl ServerHandle {
    /// The address it takes connections on, if its [`Incoming`] has one.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.local_addr
    }

    /// Stops accepting, lets every connection finish the calls it is running (new ones
    /// are answered "shutting down"), closes them, and returns once all are done.
    pub async fn shutdown(self) -> io::Result<()> {
        let _ = self.stop.send(true);
        self.join().await
    }

    /// Stops at once, as a crash would: the listener and every connection are dropped
    /// without waiting for running calls (each peer sees its connection close, its calls
    /// in flight lost). For tests of clients, and for a process that must go now.
    pub async fn abort(self) {
        self.task.abort();
        let _ = self.task.await;
    }

    /// What the server has seen of its connections so far: connections made and
    /// refused (and why), idle closes, dropped peers. The same events are logged
    /// (rate-limited) through `tracing`; these counters are there for a program without
    /// a subscriber, or one that exports metrics.
    pub fn stats(&self) -> ServerStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ServerStats {
            connected: get(&c.connected),
            refused: get(&c.refused),
            unauthenticated: get(&c.unauthenticated),
            tls_on_plain: get(&c.tls_on_plain),
            idle_closed: get(&c.idle_closed),
            dropped: get(&c.dropped),
        }
    }

    /// Waits for the server to end: after [`ServerHandle::shutdown`], or when accepting
    /// fails (an error a server cannot go on from, returned here).
    pub async fn join(self) -> io::Result<()> {
        match self.task.await {
            Ok(result) => result,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => Err(io::Error::other(e)),
        }
    }

    /// Whether the accept loop has ended.
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }
}
