//! Accept loops that run an [`Endpoint`] on every connection a transport accepts, with
//! graceful shutdown: `serve` for a transport-tcp `Listener` (feature `tcp`),
//! `serve_udp` for the UDP channel (feature `udp`).

use core::net::SocketAddr;
use std::io;
#[cfg(feature = "tcp")]
use std::sync::Arc;

#[cfg(feature = "tcp")]
use bytes::Bytes;
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};
#[cfg(feature = "tcp")]
use volley_proto::wire::rpc::{ErrorCode, Kind};
#[cfg(feature = "tcp")]
use volley_transport_tcp::{Accepted, Admission, Listener, ListenerStats, Role, ServerConfig};

use crate::codec::Codec;
use crate::link::MessageLink;
#[cfg(feature = "tcp")]
use crate::link::framed::{self, FramedLink};
#[cfg(feature = "tcp")]
use crate::link::{LinkSender, Message};
use crate::peer::Endpoint;
use crate::service::Service;

#[cfg(feature = "tcp")]
/// Listener settings for RPC: framed connections sized for `max_message`, no idle
/// timeout (an RPC connection may rightly sit idle), at most `max_connections` at once.
pub fn listener_config(max_message: usize, max_connections: usize) -> ServerConfig {
    ServerConfig {
        connection: framed::config(Role::Acceptor, max_message),
        max_connections,
        ..ServerConfig::default()
    }
}

/// A running server; see [`serve`].
#[derive(Debug)]
pub struct ServerHandle {
    stop: watch::Sender<bool>,
    task: JoinHandle<io::Result<()>>,
    local_addr: Option<SocketAddr>,
    #[cfg(feature = "tcp")]
    listener: Option<Arc<Listener>>,
}

#[cfg(feature = "tcp")]
/// Serves `endpoint` on every connection `listener` accepts, each in a task of its own,
/// until [`ServerHandle::shutdown`]. A connection whose hello fails is logged and closed;
/// the others go on.
pub fn serve<S: Service, C: Codec>(endpoint: Endpoint<S, C>, listener: Listener) -> ServerHandle {
    let (stop, stopped) = watch::channel(false);
    let local_addr = listener.local_addr().ok();
    let listener = Arc::new(listener);
    let task = tokio::spawn(accept_loop(endpoint, listener.clone(), stopped));
    ServerHandle {
        stop,
        task,
        local_addr,
        listener: Some(listener),
    }
}

#[cfg(feature = "tcp")]
/// What a peer past `max_connections` is told before its connection is closed.
pub const NO_SLOT: &str = "no free connection slot";

#[cfg(feature = "tcp")]
async fn accept_loop<S: Service, C: Codec>(
    endpoint: Endpoint<S, C>,
    listener: Arc<Listener>,
    mut stopped: watch::Receiver<bool>,
) -> io::Result<()> {
    let mut connections = JoinSet::new();
    loop {
        while connections.try_join_next().is_some() {}
        tokio::select! {
            _ = stopped.changed() => break,
            admitted = listener.accept_or_refuse() => {
                let accepted = match admitted? {
                    Admission::Accepted(accepted) => accepted,
                    Admission::Full(refused) => {
                        crate::log::warn_limited(
                            "rpc connection refused: no free connection slot",
                            &PeerHost(refused.peer.clone()),
                        );
                        connections.spawn(refuse(refused));
                        continue;
                    }
                };
                let mut link = FramedLink::new(accepted.framed, accepted.incoming);
                if let volley_transport_tcp::Peer::Tcp(addr) = accepted.peer {
                    link = link.with_peer_addr(addr);
                }
                let who = PeerHost(accepted.peer).to_string();
                connections.spawn(run_connection(endpoint.clone(), link, who, stopped.clone()));
            }
        }
    }
    // Shutting down: each connection drains its running calls, then closes.
    while connections.join_next().await.is_some() {}
    Ok(())
}

#[cfg(feature = "tcp")]
/// A peer's host, without its port: what rate-limited warnings count by, since each
/// connection of one attacker comes from a port of its own.
struct PeerHost(volley_transport_tcp::Peer);

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
async fn refuse(refused: Accepted) {
    let (sender, _receiver) = FramedLink::new(refused.framed, refused.incoming).split();
    let why = Message::new(
        Kind::ERROR,
        0,
        ErrorCode::BUSY.0,
        Bytes::from_static(NO_SLOT.as_bytes()),
    );
    let _ = sender.send(why).await;
    sender.close();
}

/// Serves `endpoint` on every connection a UDP channel endpoint accepts, as `serve`
/// does for a stream listener.
#[cfg(feature = "udp")]
pub fn serve_udp<S: Service, C: Codec>(
    endpoint: Endpoint<S, C>,
    channel: volley_transport_udp::channel::ChannelEndpoint,
) -> ServerHandle {
    let local_addr = Some(channel.local_addr());
    let incoming = futures::stream::unfold(channel, |channel| async move {
        let accepted = channel.accept().await;
        let link = accepted.map(crate::link::udp::UdpLink::new);
        Some((link.map_err(io::Error::other), channel))
    });
    let mut handle = serve_links(endpoint, incoming);
    handle.local_addr = local_addr;
    handle
}

/// Serves `endpoint` on every link `incoming` yields (any [`MessageLink`]: the built-in
/// ones, or one of your own), each in a task of its own, until
/// [`ServerHandle::shutdown`]; an error from `incoming` ends the server with it. A link
/// whose hello fails is logged and closed; the others go on.
pub fn serve_links<S, C, L, I>(endpoint: Endpoint<S, C>, incoming: I) -> ServerHandle
where
    S: Service,
    C: Codec,
    L: MessageLink,
    I: futures::Stream<Item = io::Result<L>> + Send + 'static,
{
    let (stop, mut stopped) = watch::channel(false);
    let task = tokio::spawn(async move {
        let mut incoming = core::pin::pin!(incoming);
        let mut connections = JoinSet::new();
        let mut n = 0u64;
        loop {
            while connections.try_join_next().is_some() {}
            tokio::select! {
                _ = stopped.changed() => break,
                next = futures::StreamExt::next(&mut incoming) => {
                    let Some(link) = next else { break };
                    n += 1;
                    let who = format!("link {n}");
                    connections.spawn(run_connection(endpoint.clone(), link?, who, stopped.clone()));
                }
            }
        }
        // Shutting down: each connection drains its running calls, then closes.
        while connections.join_next().await.is_some() {}
        Ok(())
    });
    ServerHandle {
        stop,
        task,
        local_addr: None,
        #[cfg(feature = "tcp")]
        listener: None,
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
) {
    let peer = match endpoint.connect(link).await {
        Ok(peer) => peer,
        Err(e) => {
            tracing::debug!(peer = %who, "rpc connection refused at the hello: {e}");
            crate::log::warn_limited(
                "rpc connection refused at the hello (run with RUST_LOG=debug for each reason)",
                &who,
            );
            return;
        }
    };
    tokio::select! {
        cause = peer.closed() => tracing::debug!(peer = %who, "rpc connection ended: {cause}"),
        _ = stopped.changed() => peer.shutdown().await,
    }
}

impl ServerHandle {
    /// The stream listener's counts (connections open, accepted, refused for want of a
    /// slot); `None` for a UDP server.
    #[cfg(feature = "tcp")]
    pub fn listener_stats(&self) -> Option<ListenerStats> {
        self.listener.as_ref().map(|l| l.stats())
    }

    /// The address it listens on (TCP).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.local_addr
    }

    /// Stops accepting, lets every connection finish the calls it is running (new ones
    /// are answered "shutting down"), closes them, and returns once all are done.
    pub async fn shutdown(self) -> io::Result<()> {
        let _ = self.stop.send(true);
        self.join().await
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
