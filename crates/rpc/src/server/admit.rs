//! Admission on a TCP or Unix listener: a connection past `max_connections` is told why
//! and closed, from a task of its own, while the server goes on accepting.

use core::net::SocketAddr;
use std::io;
use std::sync::Arc;

use bytes::Bytes;
use volley_proto::rpc::{ErrorCode, Kind};
use volley_transport_tcp::{Admission, Role, ServerConfig};

use super::Incoming;
use crate::link::framed::{self, FramedLink};
use crate::link::{LinkSender, Message, MessageLink};

/// transport-tcp's listener (TCP or Unix), re-exported so a server needs no other crate:
/// `Listener::bind_tcp(addr, listener_config(..))`.
pub use volley_transport_tcp::Listener;

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

impl Incoming for Listener {
    type Link = FramedLink;

    fn next(&mut self) -> impl Future<Output = Option<io::Result<(FramedLink, String)>>> + Send {
        accept_framed(self)
    }

    fn local_addr(&self) -> Option<SocketAddr> {
        Self::local_addr(self).ok()
    }
}

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
        if let volley_transport_tcp::PeerAddr::Tcp(addr) = accepted.peer {
            link = link.with_peer_addr(addr);
        }
        return Some(Ok((link, PeerHost(accepted.peer).to_string())));
    }
}

/// What a peer past `max_connections` is told before its connection is closed.
pub(crate) const NO_SLOT: &str = "no free connection slot";

/// A peer's host, without its port: what rate-limited warnings count by, since each
/// connection of one attacker comes from a port of its own.
pub(crate) struct PeerHost(pub(crate) volley_transport_tcp::PeerAddr);

impl core::fmt::Display for PeerHost {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match &self.0 {
            volley_transport_tcp::PeerAddr::Tcp(addr) => write!(f, "{}", addr.ip()),
            volley_transport_tcp::PeerAddr::Unix => f.write_str("a unix socket peer"),
        }
    }
}

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
