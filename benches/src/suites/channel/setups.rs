//! The channel suite's systems: servers for volley's channel, volley's framed TCP and quinn
//! on one thread of their own, and a client of each. Every bulk byte a server receives is
//! compared with the bytes the client sent (one shared buffer of pseudo-random bytes);
//! every echo is compared by the client.

use core::net::SocketAddr;
use core::time::Duration;
use std::sync::Arc;

use bytes::Bytes;
use volley_transport_tcp::{Config as TcpConfig, Framed, Role};
use volley_transport_udp::channel::{ChannelConfig, ChannelEndpoint};

use super::MIB;

/// The systems, in the order the table lists them.
pub(super) const SYSTEMS: [System; 5] = [
    System::Channel { datagram: 65_000 },
    System::Channel { datagram: 1_472 },
    System::Tcp,
    System::Quinn { mtu: None },
    System::Quinn { mtu: Some(65_000) },
];

/// One system the suite measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum System {
    /// volley's reliable UDP channel, sending datagrams of at most this many bytes.
    Channel { datagram: u16 },
    /// volley's framed TCP connection.
    Tcp,
    /// quinn: its own MTU discovery (from 1,200 bytes up to 1,452) with GSO batching
    /// (`None`); or discovery's upper bound (and the endpoints' datagram limit) raised to
    /// this, GSO off. Measured here with quinn 0.11: with GSO on, discovery never rose past
    /// 1,200 bytes, and an initial MTU this large stopped the handshake.
    Quinn { mtu: Option<u16> },
}

impl System {
    /// The row's name.
    pub(super) fn name(self) -> String {
        match self {
            Self::Channel { datagram: 65_000 } => "volley channel".into(),
            Self::Channel { datagram } => format!("volley channel, {datagram} B datagrams"),
            Self::Tcp => "volley tcp".into(),
            Self::Quinn { mtu: None } => "quinn (MTU discovery, GSO)".into(),
            Self::Quinn { mtu: Some(mtu) } => format!("quinn, MTU bound {mtu} B"),
        }
    }

    /// Whether this is one of quinn's setups.
    pub(super) fn is_quinn(self) -> bool {
        matches!(self, Self::Quinn { .. })
    }
}

/// The servers' addresses, and the certificate quinn's clients trust.
pub(super) struct Servers {
    channel: SocketAddr,
    tcp: SocketAddr,
    quinn: SocketAddr,
    quinn_large: SocketAddr,
    cert: rustls_pki_types::CertificateDer<'static>,
}

impl Servers {
    /// The address a system's clients connect to.
    pub(super) fn addr(&self, system: System) -> SocketAddr {
        match system {
            System::Channel { .. } => self.channel,
            System::Tcp => self.tcp,
            System::Quinn { mtu: None } => self.quinn,
            System::Quinn { mtu: Some(_) } => self.quinn_large,
        }
    }
}

/// What a server does with each connection: a message of 64 bytes is echoed; a longer
/// one is compared with the shared bytes and counted; the 8-byte message carrying a count
/// N answers once N bytes of bulk have arrived: "done", or "bad!" if any byte differed.
struct Tally {
    body: Bytes,
    bulk: u64,
    want: Option<u64>,
    bad: bool,
}

impl Tally {
    fn new(body: Bytes) -> Self {
        Self {
            body,
            bulk: 0,
            want: None,
            bad: false,
        }
    }

    /// The reply to a whole message, if it needs one.
    fn take(&mut self, message: &[u8]) -> Option<Vec<u8>> {
        match message.len() {
            64 => Some(message.to_vec()),
            8 => {
                self.want = Some(u64::from_le_bytes(message.try_into().expect("8 bytes")));
                self.done()
            }
            n => {
                self.part(0, message);
                self.end(n)
            }
        }
    }

    /// Checks the bytes of a bulk message from `offset` on.
    fn part(&mut self, offset: usize, bytes: &[u8]) {
        if self.body.get(offset..offset + bytes.len()) != Some(bytes) {
            self.bad = true;
        }
    }

    /// Counts a bulk message of `len` bytes, all of whose parts were checked.
    fn end(&mut self, len: usize) -> Option<Vec<u8>> {
        self.bulk += len as u64;
        self.done()
    }

    fn done(&mut self) -> Option<Vec<u8>> {
        if self.want.is_none_or(|w| self.bulk < w) {
            return None;
        }
        let reply = if self.bad { b"bad!" } else { b"done" };
        (self.want, self.bulk, self.bad) = (None, 0, false);
        Some(reply.to_vec())
    }
}

fn tcp_config(role: Role) -> TcpConfig {
    TcpConfig {
        max_frame_len: 17 * MIB,
        write_budget: 64 * MIB,
        role,
        ..TcpConfig::default()
    }
}

/// quinn's transport at its best for one stream of bulk: windows opened for 16 MiB
/// messages, and (with `mtu`) every packet that large from the start.
fn quinn_transport(mtu: Option<u16>) -> quinn::TransportConfig {
    let mut t = quinn::TransportConfig::default();
    t.stream_receive_window(quinn::VarInt::from_u32(64 << 20));
    t.receive_window(quinn::VarInt::from_u32(128 << 20));
    t.send_window(128 << 20);
    t.enable_segmentation_offload(true);
    if let Some(mtu) = mtu {
        let mut discovery = quinn::MtuDiscoveryConfig::default();
        discovery.upper_bound(mtu);
        t.mtu_discovery_config(Some(discovery));
        t.enable_segmentation_offload(false);
    }
    t
}

/// A quinn endpoint on `addr` (a server's with `server`) that takes datagrams of `mtu`
/// bytes where one is given (quinn's own limit is an Ethernet MTU's 1,472 otherwise).
fn quinn_endpoint(
    addr: SocketAddr,
    server: Option<quinn::ServerConfig>,
    mtu: Option<u16>,
) -> quinn::Endpoint {
    let mut config = quinn::EndpointConfig::default();
    if let Some(mtu) = mtu {
        config
            .max_udp_payload_size(mtu)
            .expect("a payload size quinn takes");
    }
    let socket = std::net::UdpSocket::bind(addr).expect("bind");
    quinn::Endpoint::new(config, server, socket, Arc::new(quinn::TokioRuntime)).expect("bind")
}

/// A quinn server endpoint whose connections' first stream is served with `Tally`: the
/// message read in chunks as quinn holds them (no copy), each compared where it lies.
fn quinn_server(
    any: SocketAddr,
    cert: &rustls_pki_types::CertificateDer<'static>,
    key: &rustls_pki_types::PrivatePkcs8KeyDer<'static>,
    mtu: Option<u16>,
    body: &Bytes,
) -> SocketAddr {
    let mut config =
        quinn::ServerConfig::with_single_cert(vec![cert.clone()], key.clone_key().into())
            .expect("a TLS config");
    config.transport_config(Arc::new(quinn_transport(mtu)));
    let endpoint = quinn_endpoint(any, Some(config), mtu);
    let addr = endpoint.local_addr().expect("address");
    let body = body.clone();
    tokio::spawn(async move {
        while let Some(incoming) = endpoint.accept().await {
            let body = body.clone();
            tokio::spawn(async move {
                let Ok(conn) = incoming.await else { return };
                let Ok((mut send, mut recv)) = conn.accept_bi().await else {
                    return;
                };
                let mut tally = Tally::new(body);
                let mut small = [0u8; 64];
                loop {
                    let mut len = [0u8; 4];
                    if recv.read_exact(&mut len).await.is_err() {
                        return;
                    }
                    let len = u32::from_le_bytes(len) as usize;
                    let reply = if len <= small.len() {
                        if recv.read_exact(&mut small[..len]).await.is_err() {
                            return;
                        }
                        tally.take(&small[..len])
                    } else {
                        let mut at = 0;
                        while at < len {
                            match recv.read_chunk(len - at, true).await {
                                Ok(Some(chunk)) => {
                                    tally.part(at, &chunk.bytes);
                                    at += chunk.bytes.len();
                                }
                                _ => return,
                            }
                        }
                        tally.end(len)
                    };
                    if let Some(reply) = reply {
                        let head = Bytes::copy_from_slice(&(reply.len() as u32).to_le_bytes());
                        if send
                            .write_all_chunks(&mut [head, reply.into()])
                            .await
                            .is_err()
                        {
                            return;
                        }
                    }
                }
            });
        }
    });
    addr
}

/// Starts every system's server on a thread of its own.
pub(super) fn start_servers(body: Bytes) -> Servers {
    crate::harness::serve_on_thread(move || async move {
        let any: SocketAddr = "127.0.0.1:0".parse().expect("an address");
        let channel = ChannelEndpoint::bind(any, ChannelConfig::server())
            .await
            .expect("bind");
        let channel_addr = channel.local_addr();
        let channel_body = body.clone();
        tokio::spawn(async move {
            while let Ok(conn) = channel.accept().await {
                let body = channel_body.clone();
                tokio::spawn(async move {
                    let (tx, mut rx) = conn.split();
                    let mut tally = Tally::new(body);
                    while let Ok(m) = rx.recv().await {
                        if let Some(reply) = tally.take(&m) {
                            if tx.send(&reply, &[]).await.is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        let tcp = tokio::net::TcpListener::bind(any).await.expect("bind");
        let tcp_addr = tcp.local_addr().expect("address");
        let tcp_body = body.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = tcp.accept().await {
                let Ok((framed, mut incoming)) =
                    Framed::from_tcp(stream, tcp_config(Role::Acceptor))
                else {
                    continue;
                };
                let body = tcp_body.clone();
                tokio::spawn(async move {
                    let mut tally = Tally::new(body);
                    while let Ok(frame) = incoming.recv().await {
                        if let Some(reply) = tally.take(&frame.body) {
                            if framed.send(1, 0, &[], reply.into()).await.is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        let made =
            rcgen::generate_simple_self_signed(vec!["localhost".into()]).expect("a certificate");
        let cert = rustls_pki_types::CertificateDer::from(made.cert.der().to_vec());
        let key = rustls_pki_types::PrivatePkcs8KeyDer::from(made.key_pair.serialize_der());
        let quinn = quinn_server(any, &cert, &key, None, &body);
        let quinn_large = quinn_server(any, &cert, &key, Some(65_000), &body);
        let servers = Servers {
            channel: channel_addr,
            tcp: tcp_addr,
            quinn,
            quinn_large,
            cert,
        };
        (servers, ())
    })
}

/// A client of one system: send a message, receive one. The endpoints and the QUIC
/// connection are held only to keep them open.
#[allow(dead_code)]
pub(super) enum Client {
    Channel(
        volley_transport_udp::channel::ChannelConnection,
        ChannelEndpoint,
    ),
    Tcp(Framed, volley_transport_tcp::Unsolicited),
    Quinn(
        quinn::SendStream,
        quinn::RecvStream,
        quinn::Connection,
        quinn::Endpoint,
    ),
}

impl Client {
    /// Sends one message: the payload handed over uncopied (quinn's `write_all_chunks`).
    pub(super) async fn send(&mut self, message: Bytes) {
        match self {
            Self::Channel(c, _) => c.send(&[], &[message]).await.expect("send"),
            Self::Tcp(f, _) => f.send(1, 0, &[], message).await.expect("send"),
            Self::Quinn(s, ..) => {
                let head = Bytes::copy_from_slice(&(message.len() as u32).to_le_bytes());
                s.write_all_chunks(&mut [head, message])
                    .await
                    .expect("send");
            }
        }
    }

    /// The datagram size a QUIC connection reached (its path MTU), for quinn's clients.
    pub(super) fn quic_mtu(&self) -> Option<u16> {
        match self {
            Self::Quinn(_, _, conn, _) => Some(conn.stats().path.current_mtu),
            _ => None,
        }
    }

    /// Receives one (short) message, within 60 s.
    pub(super) async fn recv(&mut self) -> Vec<u8> {
        let got = async {
            match self {
                Self::Channel(c, _) => c.recv().await.expect("recv"),
                Self::Tcp(_, i) => i.recv().await.expect("recv").body.to_vec(),
                Self::Quinn(_, r, ..) => {
                    let mut len = [0u8; 4];
                    r.read_exact(&mut len).await.expect("recv");
                    let mut m = vec![0u8; u32::from_le_bytes(len) as usize];
                    r.read_exact(&mut m).await.expect("recv");
                    m
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(60), got)
            .await
            .expect("a reply within 60 s")
    }
}

/// Connects a client of `system` to `addr` (its server, or a relay in front of it).
pub(super) async fn connect(system: System, addr: SocketAddr, servers: &Servers) -> Client {
    let any: SocketAddr = "127.0.0.1:0".parse().expect("an address");
    match system {
        System::Channel { datagram } => {
            let mut config = ChannelConfig::client();
            config.endpoint.connection.max_datagram = datagram;
            let ep = ChannelEndpoint::bind(any, config).await.expect("bind");
            let c = ep.connect(addr).await.expect("connect");
            Client::Channel(c, ep)
        }
        System::Tcp => {
            let (f, i) = Framed::connect_tcp(addr, tcp_config(Role::Initiator))
                .await
                .expect("connect");
            Client::Tcp(f, i)
        }
        System::Quinn { mtu } => {
            let mut roots = rustls::RootCertStore::empty();
            roots.add(servers.cert.clone()).expect("the certificate");
            let mut config =
                quinn::ClientConfig::with_root_certificates(Arc::new(roots)).expect("a TLS config");
            config.transport_config(Arc::new(quinn_transport(mtu)));
            let mut ep = quinn_endpoint(any, None, mtu);
            ep.set_default_client_config(config);
            let conn = ep
                .connect(addr, "localhost")
                .expect("connect")
                .await
                .expect("handshake");
            let (send, recv) = conn.open_bi().await.expect("a stream");
            Client::Quinn(send, recv, conn, ep)
        }
    }
}
