//! [`serve`]: runs an [`Endpoint`] on every connection an [`Incoming`] yields (a
//! transport-tcp `Listener` with feature `tcp`, the UDP channel's endpoint with `udp`, or
//! any stream of links through [`Links`]), with graceful shutdown.

use core::net::SocketAddr;
use core::sync::atomic::{AtomicU64, Ordering};
use std::io;
use std::sync::Arc;

use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

use crate::codec::Codec;
use crate::error::{ConnectError, Ended};
use crate::link::{LinkError, MessageLink};
use crate::peer::Endpoint;
use crate::service::Service;

#[cfg(feature = "tcp")]
mod admit;
#[cfg(feature = "tls")]
mod handshakes;
mod incoming;

#[cfg(feature = "tcp")]
pub use admit::{Listener, listener_config};
#[cfg(feature = "tls")]
pub(crate) use admit::{PeerHost, refuse};
#[cfg(feature = "tls")]
pub(crate) use handshakes::Handshakes;
pub use incoming::{Incoming, Links};

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
