//! A QUIC link (feature `quic`): quinn 0.11 on the ring provider, TLS 1.3 from the same
//! settings as [`tls`](crate::link::tls), ALPN `volley-rpc/1`. A connection carries one
//! bidirectional stream, opened by the client, and RPC messages run over it framed as
//! over TCP; QUIC's transport settings follow the endpoint's [`Config`] (see
//! [`transport_config`]).
//!
//! ```no_run
//! use std::path::Path;
//! use volley_rpc::link::framed::DEFAULT_MAX_MESSAGE;
//! use volley_rpc::link::quic::{self, QuicListener};
//! use volley_rpc::link::tls::{self, Roots};
//! use volley_rpc::{Config, Context, Endpoint, HandlerError, serve};
//!
//! volley_rpc::service! {
//!     /// Nothing much.
//!     pub service Quiet {
//!         /// Pings.
//!         1 => fn ping();
//!     }
//! }
//!
//! struct Here;
//!
//! impl QuietServer for Here {
//!     async fn ping(&self, _cx: Context<Quiet>) -> Result<(), HandlerError> {
//!         Ok(())
//!     }
//! }
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let config = Config::default();
//! let tls = tls::server_config(Path::new("server.pem"), Path::new("server.key"), None)?;
//! let listener = QuicListener::bind("0.0.0.0:7000".parse()?, tls, &config, 1024)?;
//! let server = serve(
//!     Endpoint::<Quiet>::new(config)?.serve(Here.into_router()),
//!     listener,
//! );
//!
//! let tls = tls::client_config(Roots::File(Path::new("ca.pem")), None)?;
//! let name = tls::server_name("rpc.example")?;
//! let link = quic::connect("192.0.2.7:7000".parse()?, name, tls, &config).await?;
//! let peer = Endpoint::<Quiet>::new(config)?.connect(link).await?;
//! # let _ = (server, peer);
//! # Ok(())
//! # }
//! ```

use core::net::SocketAddr;
use core::pin::Pin;
use core::task::{Context, Poll};
use core::time::Duration;
use std::io;
use std::sync::Arc;

use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn::{IdleTimeout, TransportConfig, VarInt};
use tokio::io::AsyncWrite;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use volley_transport_tcp::{Framed, Role};

use crate::config::Config;
use crate::link::framed::{self, FramedLink};
use crate::link::tls::{DEFAULT_HANDSHAKE_TIMEOUT, ServerName, rustls, within};
use crate::link::{ConnectionInfo, TlsIdentity};
use crate::server::{Handshakes, Incoming};

pub use quinn;

/// How long a closing connection waits for the peer to acknowledge what was last sent
/// before it closes anyway.
const LINGER: Duration = Duration::from_secs(1);

/// The most a peer may send on a connection before this end reads it: the receive
/// window of its stream and of the connection (one stream each way). It bounds what a
/// peer that sends without reading costs, as the framed layer's buffers do over TCP.
pub const RECEIVE_WINDOW: u32 = 8 << 20;

/// QUIC's transport settings for RPC with `config`: one bidirectional stream a
/// connection, none unidirectional; each receive window [`RECEIVE_WINDOW`], or
/// `max_message` if that is smaller; QUIC's own keep-alive at the RPC keep-alive, and its
/// idle timeout at three of them (or at the RPC idle timeout without pings), so QUIC
/// never ends a connection RPC would keep.
pub fn transport_config(config: &Config) -> TransportConfig {
    let window =
        VarInt::from_u32(RECEIVE_WINDOW.min(u32::try_from(config.max_message).unwrap_or(u32::MAX)));
    let idle = match (config.keepalive, config.idle_timeout) {
        (Some(keepalive), _) => Some(keepalive * 3),
        (None, idle) => idle,
    };
    let mut transport = TransportConfig::default();
    transport
        .max_concurrent_bidi_streams(VarInt::from_u32(1))
        .max_concurrent_uni_streams(VarInt::from_u32(0))
        .stream_receive_window(window)
        .receive_window(window)
        .send_window(u64::from(RECEIVE_WINDOW))
        .keep_alive_interval(config.keepalive)
        .max_idle_timeout(idle.and_then(|idle| IdleTimeout::try_from(idle).ok()));
    transport
}

/// Connects to `addr` over QUIC from a fresh UDP port, checking `name` in the server's
/// certificate, all within [`DEFAULT_HANDSHAKE_TIMEOUT`]; opens the connection's stream
/// and frames RPC messages over it. `tls` is a client configuration from
/// [`tls::client_config`](crate::link::tls::client_config) (TLS 1.3, ALPN `volley-rpc/1`);
/// `config` the RPC settings the link's transport follows.
pub async fn connect(
    addr: SocketAddr,
    name: ServerName<'static>,
    tls: Arc<rustls::ClientConfig>,
    config: &Config,
) -> io::Result<FramedLink> {
    let crypto = QuicClientConfig::try_from(tls).map_err(io::Error::other)?;
    let mut client = quinn::ClientConfig::new(Arc::new(crypto));
    client.transport_config(Arc::new(transport_config(config)));
    let local: SocketAddr = if addr.is_ipv4() {
        (core::net::Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (core::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let endpoint = quinn::Endpoint::client(local)?;
    let name = name.to_str();
    let handshake = async {
        let connection = endpoint
            .connect_with(client, addr, &name)
            .map_err(io::Error::other)?
            .await
            .map_err(io::Error::other)?;
        let (send, recv) = connection.open_bi().await.map_err(io::Error::other)?;
        io::Result::Ok((connection, send, recv))
    };
    let (connection, send, recv) = within(
        DEFAULT_HANDSHAKE_TIMEOUT,
        format!("the QUIC handshake with {addr}"),
        handshake,
    )
    .await?;
    Ok(link(connection, send, recv, Role::Initiator, None))
}

/// The framed link over a connection's stream; the connection closes once the link's
/// sending side has finished (and `slot`, if any, is freed then).
fn link(
    connection: quinn::Connection,
    send: quinn::SendStream,
    recv: quinn::RecvStream,
    role: Role,
    slot: Option<OwnedSemaphorePermit>,
) -> FramedLink {
    let info = ConnectionInfo::new()
        .with_peer_addr(connection.remote_address())
        .with_tls(identity(&connection));
    let send = QuicSend {
        stream: Some(send),
        connection,
        slot,
    };
    let (framed, incoming) = Framed::new(recv, send, framed::config(role));
    FramedLink::new(framed, incoming).with_connection(info)
}

/// What the handshake established about the peer.
fn identity(connection: &quinn::Connection) -> TlsIdentity {
    let chain = connection.peer_identity().and_then(|any| {
        any.downcast::<Vec<rustls::pki_types::CertificateDer<'static>>>()
            .ok()
    });
    crate::link::tls::identity_of(
        chain.as_deref().and_then(|chain| chain.first()),
        "TLSv1_3".into(),
    )
}

/// The sending half of the link's stream. When the framed layer is done with it (it
/// finished the stream, or gave up), the connection is closed once the peer has
/// acknowledged the stream's end, or after [`LINGER`]: dropping a stream alone would
/// leave the connection open until QUIC's idle timeout.
struct QuicSend {
    stream: Option<quinn::SendStream>,
    connection: quinn::Connection,
    slot: Option<OwnedSemaphorePermit>,
}

impl QuicSend {
    fn stream(&mut self) -> Pin<&mut quinn::SendStream> {
        Pin::new(self.stream.as_mut().expect("present until dropped"))
    }
}

impl AsyncWrite for QuicSend {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        AsyncWrite::poll_write(self.stream(), cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        AsyncWrite::poll_flush(self.stream(), cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        AsyncWrite::poll_shutdown(self.stream(), cx)
    }
}

impl Drop for QuicSend {
    fn drop(&mut self) {
        let Some(stream) = self.stream.take() else {
            return;
        };
        let connection = self.connection.clone();
        let slot = self.slot.take();
        let close = async move {
            let _ = tokio::time::timeout(LINGER, stream.stopped()).await;
            connection.close(VarInt::from_u32(0), b"closed");
            drop(slot);
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn(close)),
            // No runtime to wait in (it is shutting down): close at once.
            Err(_) => self.connection.close(VarInt::from_u32(0), b"closed"),
        }
    }
}

/// A QUIC endpoint taking RPC connections: each handshake (and the client's opening of
/// its stream) runs in a task of its own within the handshake timeout; at most
/// `max_connections` are open at once, and one past it is refused (QUIC's
/// CONNECTION_REFUSED). Serve it with [`serve`](crate::serve).
pub struct QuicListener {
    endpoint: quinn::Endpoint,
    slots: Arc<Semaphore>,
    max_connections: usize,
    handshake_timeout: Duration,
    handshakes: Handshakes<FramedLink>,
}

impl QuicListener {
    /// Binds a UDP address (port 0 picks one) for QUIC with `tls` (see
    /// [`tls::server_config`](crate::link::tls::server_config): TLS 1.3, ALPN `volley-rpc/1`),
    /// the transport following `config`, the handshake timed by its `hello_timeout`.
    pub fn bind(
        addr: SocketAddr,
        tls: Arc<rustls::ServerConfig>,
        config: &Config,
        max_connections: usize,
    ) -> io::Result<Self> {
        let crypto = QuicServerConfig::try_from(tls).map_err(io::Error::other)?;
        let mut server = quinn::ServerConfig::with_crypto(Arc::new(crypto));
        server.transport_config(Arc::new(transport_config(config)));
        let max_connections = max_connections.clamp(1, Semaphore::MAX_PERMITS);
        Ok(Self {
            endpoint: quinn::Endpoint::server(server, addr)?,
            slots: Arc::new(Semaphore::new(max_connections)),
            max_connections,
            handshake_timeout: config.hello_timeout,
            handshakes: Handshakes::new(),
        })
    }

    /// The QUIC endpoint underneath (for its statistics).
    pub fn endpoint(&self) -> &quinn::Endpoint {
        &self.endpoint
    }

    /// A handle on its connection count, to read after the listener is given to
    /// [`serve`](crate::serve).
    pub fn connections(&self) -> Connections {
        Connections {
            slots: self.slots.clone(),
            max: self.max_connections,
        }
    }
}

/// The connections a [`QuicListener`] holds open (handshakes under way included).
#[derive(Clone, Debug)]
pub struct Connections {
    slots: Arc<Semaphore>,
    max: usize,
}

impl Connections {
    /// Connections open now.
    pub fn open(&self) -> usize {
        self.max - self.slots.available_permits()
    }

    /// Resolves once no connection is open (the moment it is so; another may open
    /// after).
    pub async fn all_closed(&self) {
        // Fits: max is at most Semaphore::MAX_PERMITS, below u32::MAX.
        if let Ok(all) = self.slots.acquire_many(self.max as u32).await {
            drop(all);
        }
    }
}

impl core::fmt::Debug for QuicListener {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("QuicListener")
            .field("local_addr", &self.endpoint.local_addr().ok())
            .field("free_slots", &self.slots.available_permits())
            .field("handshakes", &self.handshakes.len())
            .finish_non_exhaustive()
    }
}

impl Incoming for QuicListener {
    type Link = FramedLink;

    async fn next(&mut self) -> Option<io::Result<(FramedLink, String)>> {
        let (endpoint, slots) = (&self.endpoint, &self.slots);
        let timeout = self.handshake_timeout;
        self.handshakes
            .next(
                || async { endpoint.accept().await.map(Ok) },
                |handshakes, incoming: quinn::Incoming| {
                    let who = incoming.remote_address().ip().to_string();
                    let Ok(slot) = slots.clone().try_acquire_owned() else {
                        crate::log::warn_limited(
                            "rpc connection refused: no free connection slot",
                            &who,
                        );
                        incoming.refuse();
                        return;
                    };
                    handshakes.spawn(async move {
                        match handshake(incoming, timeout, slot).await {
                            Ok(link) => Some((link, who)),
                            Err(e) => {
                                tracing::debug!(peer = %who, "QUIC handshake failed: {e}");
                                crate::log::warn_limited(
                                    "QUIC handshake failed (run with RUST_LOG=debug for each reason)",
                                    &who,
                                );
                                None
                            }
                        }
                    });
                },
            )
            .await
    }

    fn local_addr(&self) -> Option<SocketAddr> {
        self.endpoint.local_addr().ok()
    }
}

/// The server's handshake, then the client's stream, within `timeout`.
async fn handshake(
    incoming: quinn::Incoming,
    timeout: Duration,
    slot: OwnedSemaphorePermit,
) -> io::Result<FramedLink> {
    let accept = async {
        let connection = incoming.await.map_err(io::Error::other)?;
        let stream = connection.accept_bi().await;
        match stream {
            Ok((send, recv)) => io::Result::Ok((connection, send, recv)),
            Err(e) => Err(io::Error::other(e)),
        }
    };
    let (connection, send, recv) = within(timeout, "the QUIC handshake".to_owned(), accept).await?;
    Ok(link(connection, send, recv, Role::Acceptor, Some(slot)))
}
