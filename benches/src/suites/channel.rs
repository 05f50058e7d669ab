//! `channel`: volley's reliable UDP channel beside TCP (volley's framed connection) and
//! quinn (QUIC: one bidirectional stream carrying length-prefixed messages, a self-signed
//! certificate made in process, windows opened for 16 MiB messages), on loopback and
//! through the link simulator (UDP with 1% loss; TCP through its relay, delay only).
//!
//! Bulk: the client sends K messages of 1 MiB or 16 MiB one way; the server counts the
//! bytes and answers once with a short message; MiB/s from the first byte sent to that
//! answer. Small: 64-byte messages echoed one at a time; microseconds per round trip.

use core::net::SocketAddr;
use core::time::Duration;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use serde_json::json;
use volley_netsim::tcp::{TcpLinkConfig, TcpLinkSim};
use volley_netsim::{LinkConfig, LinkSim};
use volley_transport_tcp::{Config as TcpConfig, Framed, Role};
use volley_transport_udp::channel::{ChannelConfig, ChannelEndpoint};

use crate::harness::{Mode, Report, median};

const MIB: usize = 1 << 20;

/// The three servers' addresses: channel, TCP, quinn.
struct Servers {
    channel: SocketAddr,
    tcp: SocketAddr,
    quinn: SocketAddr,
    cert: rustls_pki_types::CertificateDer<'static>,
}

/// What a server does with each connection: a message of 64 bytes is echoed; a longer
/// one is counted, and the 8-byte message carrying a count N answers "done" once N
/// bytes of bulk have arrived.
#[derive(Default)]
struct Tally {
    bulk: u64,
    want: Option<u64>,
}

impl Tally {
    /// The reply to send for `message`, if any.
    fn take(&mut self, message: &[u8]) -> Option<Vec<u8>> {
        match message.len() {
            64 => Some(message.to_vec()),
            8 => {
                self.want = Some(u64::from_le_bytes(message.try_into().expect("8 bytes")));
                self.done()
            }
            n => {
                self.bulk += n as u64;
                self.done()
            }
        }
    }

    fn done(&mut self) -> Option<Vec<u8>> {
        if self.want.is_some_and(|w| self.bulk >= w) {
            self.want = None;
            self.bulk = 0;
            Some(b"done".to_vec())
        } else {
            None
        }
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

fn quinn_transport() -> quinn::TransportConfig {
    let mut t = quinn::TransportConfig::default();
    t.stream_receive_window(quinn::VarInt::from_u32(64 << 20));
    t.receive_window(quinn::VarInt::from_u32(128 << 20));
    t.send_window(128 << 20);
    t
}

fn start_servers() -> Servers {
    crate::harness::serve_on_thread(move || async move {
        let any: SocketAddr = "127.0.0.1:0".parse().expect("an address");
        // volley's channel.
        let channel = ChannelEndpoint::bind(any, ChannelConfig::server())
            .await
            .expect("bind");
        let channel_addr = channel.local_addr();
        tokio::spawn(async move {
            while let Ok(conn) = channel.accept().await {
                tokio::spawn(async move {
                    let (tx, mut rx) = conn.split();
                    let mut tally = Tally::default();
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
        // TCP, framed.
        let tcp = tokio::net::TcpListener::bind(any).await.expect("bind");
        let tcp_addr = tcp.local_addr().expect("address");
        tokio::spawn(async move {
            while let Ok((stream, _)) = tcp.accept().await {
                let Ok((framed, mut incoming)) =
                    Framed::from_tcp(stream, tcp_config(Role::Acceptor))
                else {
                    continue;
                };
                tokio::spawn(async move {
                    let mut tally = Tally::default();
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
        // quinn.
        let cert =
            rcgen::generate_simple_self_signed(vec!["localhost".into()]).expect("a certificate");
        let cert_der = rustls_pki_types::CertificateDer::from(cert.cert.der().to_vec());
        let key = rustls_pki_types::PrivatePkcs8KeyDer::from(cert.key_pair.serialize_der());
        let mut server_config =
            quinn::ServerConfig::with_single_cert(vec![cert_der.clone()], key.into())
                .expect("a TLS config");
        server_config.transport_config(Arc::new(quinn_transport()));
        let quinn = quinn::Endpoint::server(server_config, any).expect("bind");
        let quinn_addr = quinn.local_addr().expect("address");
        tokio::spawn(async move {
            while let Some(incoming) = quinn.accept().await {
                tokio::spawn(async move {
                    let Ok(conn) = incoming.await else { return };
                    let Ok((mut send, mut recv)) = conn.accept_bi().await else {
                        return;
                    };
                    let mut tally = Tally::default();
                    loop {
                        let mut len = [0u8; 4];
                        if recv.read_exact(&mut len).await.is_err() {
                            return;
                        }
                        let mut m = vec![0u8; u32::from_le_bytes(len) as usize];
                        if recv.read_exact(&mut m).await.is_err() {
                            return;
                        }
                        if let Some(reply) = tally.take(&m) {
                            let mut out = (reply.len() as u32).to_le_bytes().to_vec();
                            out.extend_from_slice(&reply);
                            if send.write_all(&out).await.is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        (
            Servers {
                channel: channel_addr,
                tcp: tcp_addr,
                quinn: quinn_addr,
                cert: cert_der,
            },
            (),
        )
    })
}

/// A client of one system: send a message, receive one. The endpoints and the QUIC
/// connection are held only to keep them open.
#[allow(dead_code)]
enum Client {
    Channel(
        volley_transport_udp::channel::ChannelConnection,
        ChannelEndpoint,
    ),
    Tcp(Framed, volley_transport_tcp::Incoming),
    Quinn(
        quinn::SendStream,
        quinn::RecvStream,
        quinn::Connection,
        quinn::Endpoint,
    ),
}

impl Client {
    async fn send(&mut self, message: Bytes) {
        match self {
            Self::Channel(c, _) => c.send(&[], &[message]).await.expect("send"),
            Self::Tcp(f, _) => f.send(1, 0, &[], message).await.expect("send"),
            Self::Quinn(s, ..) => {
                s.write_all(&(message.len() as u32).to_le_bytes())
                    .await
                    .expect("send");
                s.write_all(&message).await.expect("send");
            }
        }
    }

    async fn recv(&mut self) -> Vec<u8> {
        let wait = Duration::from_secs(60);
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
        tokio::time::timeout(wait, got)
            .await
            .expect("a reply within 60 s")
    }
}

async fn connect(system: &str, addr: SocketAddr, servers: &Servers) -> Client {
    match system {
        "volley channel" => {
            let ep = ChannelEndpoint::bind(
                "127.0.0.1:0".parse().expect("an address"),
                ChannelConfig::client(),
            )
            .await
            .expect("bind");
            let c = ep.connect(addr).await.expect("connect");
            Client::Channel(c, ep)
        }
        "volley tcp" => {
            let (f, i) = Framed::connect_tcp(addr, tcp_config(Role::Initiator))
                .await
                .expect("connect");
            Client::Tcp(f, i)
        }
        _ => {
            let mut roots = rustls::RootCertStore::empty();
            roots.add(servers.cert.clone()).expect("the certificate");
            let mut config =
                quinn::ClientConfig::with_root_certificates(Arc::new(roots)).expect("a TLS config");
            config.transport_config(Arc::new(quinn_transport()));
            let mut ep =
                quinn::Endpoint::client("127.0.0.1:0".parse().expect("an address")).expect("bind");
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

/// MiB/s sending `count` messages of `size` bytes and waiting for the server's "done".
async fn bulk(client: &mut Client, size: usize, count: usize, body: &Bytes) -> f64 {
    let start = Instant::now();
    client
        .send(Bytes::copy_from_slice(
            &((size * count) as u64).to_le_bytes(),
        ))
        .await;
    for _ in 0..count {
        client.send(body.slice(..size)).await;
    }
    assert_eq!(client.recv().await, b"done");
    (size * count) as f64 / MIB as f64 / start.elapsed().as_secs_f64()
}

/// Microseconds per 64-byte echo, one at a time.
async fn small(client: &mut Client, count: usize) -> f64 {
    let message = Bytes::from(vec![9u8; 64]);
    let start = Instant::now();
    for _ in 0..count {
        client.send(message.clone()).await;
        assert_eq!(client.recv().await.len(), 64);
    }
    start.elapsed().as_secs_f64() * 1e6 / count as f64
}

pub(crate) fn run(mode: Mode) -> Report {
    let servers = start_servers();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let rounds = mode.rounds();
    let body = Bytes::from(vec![0x5a; 16 * MIB]);
    let mut report = Report::new(
        "channel",
        "The UDP channel beside TCP and quinn: bulk MiB/s and small-message round trips",
        mode,
    );
    report.columns = vec![
        "link",
        "system",
        "1 MiB msgs MiB/s",
        "16 MiB msgs MiB/s",
        "64 B round trip us",
        "bulk / quinn",
    ];
    let systems = ["volley channel", "volley tcp", "quinn"];
    for (link, lossy) in [
        ("loopback", false),
        ("1 ms RTT, 1% loss (TCP: no loss)", true),
    ] {
        let mut sims_udp = Vec::new();
        let mut sims_tcp = Vec::new();
        let mut clients = Vec::new();
        for system in systems {
            let upstream = match system {
                "volley channel" => servers.channel,
                "volley tcp" => servers.tcp,
                _ => servers.quinn,
            };
            let addr = if !lossy {
                upstream
            } else if system == "volley tcp" {
                let sim = TcpLinkSim::start(
                    "127.0.0.1:0".parse().expect("an address"),
                    upstream,
                    TcpLinkConfig {
                        delay: Duration::from_micros(500),
                        ..TcpLinkConfig::default()
                    },
                )
                .expect("the TCP relay");
                let a = sim.local_addr();
                sims_tcp.push(sim);
                a
            } else {
                let sim = LinkSim::start(
                    "127.0.0.1:0".parse().expect("an address"),
                    upstream,
                    LinkConfig {
                        delay: Duration::from_micros(500),
                        loss: 0.01,
                        seed: 5,
                        ..LinkConfig::default()
                    },
                )
                .expect("the link simulator");
                let a = sim.local_addr();
                sims_udp.push(sim);
                a
            };
            clients.push(runtime.block_on(connect(system, addr, &servers)));
        }
        let (count_1m, count_16m, smalls) = match (mode, lossy) {
            (Mode::Quick, false) => (64, 4, 2000),
            (Mode::Quick, true) => (16, 2, 100),
            (Mode::Full, false) => (256, 16, 10_000),
            (Mode::Full, true) => (64, 4, 500),
        };
        let mut figures: Vec<[Vec<f64>; 3]> = vec![Default::default(); systems.len()];
        for round in 0..rounds {
            for k in 0..systems.len() {
                let i = (k + round) % systems.len();
                let c = &mut clients[i];
                let f = &mut figures[i];
                f[0].push(runtime.block_on(bulk(c, MIB, count_1m, &body)));
                f[1].push(runtime.block_on(bulk(c, 16 * MIB, count_16m, &body)));
                f[2].push(runtime.block_on(small(c, smalls)));
            }
        }
        let quinn_bulk = median(&figures[2][0]);
        for (i, system) in systems.iter().enumerate() {
            let (one, sixteen, rtt) = (
                median(&figures[i][0]),
                median(&figures[i][1]),
                median(&figures[i][2]),
            );
            report.rows.push(vec![
                link.into(),
                (*system).into(),
                format!("{one:.0}"),
                format!("{sixteen:.0}"),
                format!("{rtt:.1}"),
                format!("{:.2}x", one / quinn_bulk),
            ]);
            report.data.push(json!({
                "link": link, "system": system, "mib_per_sec_1mib": one,
                "mib_per_sec_16mib": sixteen, "round_trip_us": rtt,
            }));
        }
        drop(clients);
        for s in sims_udp {
            s.stop();
        }
        drop(sims_tcp);
    }
    report.notes.push(
        "bulk: K messages one way, then the server's answer; MiB/s from the first byte to the answer. \
         quinn 0.11 with rustls (TLS 1.3, ring; it encrypts, volley does not), windows opened to 64/128 MiB; \
         TCP through the relay has no loss and its reader does not spin (framed defaults)"
            .into(),
    );
    report.notes.push(
        "volley's channel sends 64 KiB datagrams on loopback (ChannelConfig::client), quinn about 1.4 KiB: \
         under 1% loss per datagram, the loss-limited rate of both grows with the datagram size"
            .into(),
    );
    report
}
