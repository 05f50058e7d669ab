//! `volley-bench-tls [--quick|--full]`: the rpc suite's rows over TLS and QUIC. volley
//! over TLS beside tarpc over tokio-rustls and tonic over rustls (and plain), with a raw
//! tokio-rustls anchor (length-delimited frames over the same TLS configuration:
//! encryption's own ceiling); volley over QUIC beside a raw quinn stream. The same
//! workloads, checks and rotation as the rpc suite; prints one JSON object (columns,
//! rows, data, notes) for `cargo xtask bench --suite rpc` to fold into its report.
//!
//! Built only by `cargo xtask bench` (this crate is outside the workspace), never by the
//! tests: tonic and its HTTP/2 stack are benchmark-only peers.

use core::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use serde_json::json;
use tokio::io::BufReader;
use tokio::net::TcpStream;
use tokio::sync::Mutex;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_util::codec::{Framed, LengthDelimitedCodec};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint as TonicEndpoint};
use volley_rpc::bench::{self as service, Bench, BenchClient};
use volley_rpc::link::framed::FramedLink;
use volley_rpc::tls::{self, Roots};
use volley_rpc::{Config, Endpoint, Peer};

mod grpc;
mod servers;

use grpc::BenchGrpc;
use servers::{Addrs, H2_WINDOW};
use volley_benches::harness;
use volley_benches::suites::rpc::peers::{
    self, Caller, Each, MIB, TarpcBenchClient, Work, Workload, callers, check, length_delimited,
    raw_run, tcp,
};

/// Pattern bytes: the largest payload plus room for every offset.
const PATTERN: usize = MIB + 4096;

/// A raw quinn stream, both halves as one.
type QuicStream = tokio::io::Join<quinn::RecvStream, quinn::SendStream>;

/// A connected client of one system.
enum Client {
    RawTls(Box<Mutex<Framed<TlsStream<TcpStream>, LengthDelimitedCodec>>>),
    RawTlsBuffered(Box<Mutex<Framed<TlsStream<BufReader<TcpStream>>, LengthDelimitedCodec>>>),
    RawQuic(Mutex<Framed<QuicStream, LengthDelimitedCodec>>),
    Tarpc(TarpcBenchClient),
    Tonic(BenchGrpc),
    Volley(Peer<Bench>),
}

/// Each system, and whether its client runs on the 2-worker runtime (else the
/// current-thread one). The peers run both ways and are compared at their best per
/// workload, volley over TLS too.
const SYSTEMS: [(&str, bool); 15] = [
    ("raw tokio-rustls", false),
    ("raw tokio-rustls, mt client", true),
    ("raw tokio-rustls, 64 KiB read buffer", false),
    ("raw tokio-rustls, 64 KiB read buffer, mt client", true),
    ("tarpc tls", false),
    ("tarpc tls, mt client", true),
    ("tonic tls", false),
    ("tonic tls, mt client", true),
    ("tonic plain", false),
    ("tonic plain, mt client", true),
    ("volley tls", false),
    ("volley tls, mt client", true),
    ("volley tcp", false),
    ("volley quic", false),
    ("raw quinn", false),
];

/// The client's TLS settings: volley's (ring, TLS 1.3, trusting only the test CA).
struct Tls {
    config: Arc<rustls::ClientConfig>,
    ca_pem: Vec<u8>,
}

async fn tls_stream(addr: SocketAddr, tls: &Tls) -> TlsStream<TcpStream> {
    let stream = tcp(addr).await;
    TlsConnector::from(tls.config.clone())
        .connect(tls::server_name("localhost").expect("a name"), stream)
        .await
        .expect("a TLS handshake")
}

/// The same through a read buffer of volley's TLS link's size at this end too.
async fn tls_stream_buffered(addr: SocketAddr, tls: &Tls) -> TlsStream<BufReader<TcpStream>> {
    let stream = BufReader::with_capacity(servers::READ_BUFFER, tcp(addr).await);
    TlsConnector::from(tls.config.clone())
        .connect(tls::server_name("localhost").expect("a name"), stream)
        .await
        .expect("a TLS handshake")
}

async fn tonic_channel(addr: SocketAddr, tls: Option<&Tls>) -> Channel {
    let scheme = if tls.is_some() { "https" } else { "http" };
    let mut endpoint = TonicEndpoint::from_shared(format!("{scheme}://{addr}"))
        .expect("a URI")
        .tcp_nodelay(true)
        .initial_stream_window_size(H2_WINDOW)
        .initial_connection_window_size(H2_WINDOW);
    if let Some(tls) = tls {
        endpoint = endpoint
            .tls_config(
                ClientTlsConfig::new()
                    .ca_certificate(Certificate::from_pem(&tls.ca_pem))
                    .domain_name("localhost"),
            )
            .expect("tonic TLS settings");
    }
    // On a socket made and tuned here, as every peer's is (tonic adds TLS on top).
    let connector = tower::service_fn(move |_: http::Uri| async move {
        let stream = tcp(addr).await;
        Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
    });
    endpoint
        .connect_with_connector(connector)
        .await
        .expect("a tonic connection")
}

async fn volley(link: FramedLink) -> Peer<Bench> {
    Endpoint::<Bench>::new(Config::default())
        .expect("settings")
        .connect(link)
        .await
        .expect("hello")
}

async fn connect(system: &str, addrs: &Addrs, tls: &Tls) -> Client {
    match system.trim_end_matches(", mt client") {
        "raw tokio-rustls" => Client::RawTls(Box::new(Mutex::new(length_delimited(
            tls_stream(addrs.raw_tls, tls).await,
        )))),
        "raw tokio-rustls, 64 KiB read buffer" => Client::RawTlsBuffered(Box::new(Mutex::new(
            length_delimited(tls_stream_buffered(addrs.raw_tls_buffered, tls).await),
        ))),
        "tarpc tls" => Client::Tarpc(peers::tarpc_client(length_delimited(
            tls_stream(addrs.tarpc_tls, tls).await,
        ))),
        "tonic tls" => Client::Tonic(BenchGrpc::new(
            tonic_channel(addrs.tonic_tls, Some(tls)).await,
        )),
        "tonic plain" => {
            Client::Tonic(BenchGrpc::new(tonic_channel(addrs.tonic_plain, None).await))
        }
        "volley tls" => {
            let name = tls::server_name("localhost").expect("a name");
            let link = tls::connect(addrs.volley_tls, name, tls.config.clone())
                .await
                .expect("connect");
            Client::Volley(volley(link).await)
        }
        "volley tcp" => Client::Volley(
            volley(
                FramedLink::connect_tcp(addrs.volley_tcp)
                    .await
                    .expect("connect"),
            )
            .await,
        ),
        "volley quic" => {
            let name = tls::server_name("localhost").expect("a name");
            let link = volley_rpc::quic::connect(
                addrs.volley_quic,
                name,
                tls.config.clone(),
                &Config::default(),
            )
            .await
            .expect("connect");
            Client::Volley(volley(link).await)
        }
        _ => {
            let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls.config.clone())
                .expect("a QUIC TLS config");
            let mut config = quinn::ClientConfig::new(Arc::new(crypto));
            config.transport_config(Arc::new(volley_rpc::quic::transport_config(
                &Config::default(),
            )));
            let endpoint =
                quinn::Endpoint::client("127.0.0.1:0".parse().expect("an address")).expect("bind");
            let connection = endpoint
                .connect_with(config, addrs.raw_quic, "localhost")
                .expect("connect")
                .await
                .expect("a QUIC handshake");
            let (send, recv) = connection.open_bi().await.expect("a stream");
            Client::RawQuic(Mutex::new(length_delimited(tokio::io::join(recv, send))))
        }
    }
}

/// A tonic caller (a type of this crate's: `Caller` and `Each` are the library's).
#[derive(Clone)]
struct TonicCaller(Each<BenchGrpc>);

impl Caller for TonicCaller {
    fn call(&mut self, w: Workload, index: u64) -> impl Future<Output = Result<(), String>> + Send {
        tonic_call(&mut self.0.client, w, index, &self.0.pattern)
    }
}

async fn tonic_call(
    c: &mut BenchGrpc,
    w: Workload,
    index: u64,
    pattern: &Bytes,
) -> Result<(), String> {
    let start = service::offset(index);
    match w.work {
        Work::Echo => check(c.echo(index).await? == index, "echo"),
        Work::Put => {
            let body = pattern.slice(start..start + w.payload);
            let want = (w.payload as u64, peers::put_hash(pattern, start, w.payload));
            check(c.put(body).await? == want, "put")
        }
        Work::Get => {
            let r = c.get(index, w.payload as u64).await?;
            check(r == pattern[start..start + w.payload], "get")
        }
    }
}

/// Runs one workload on one client: seconds taken, or an error if a reply was wrong.
async fn measure(client: &Client, w: Workload, pattern: &Bytes) -> Result<f64, String> {
    let start = Instant::now();
    match client {
        Client::RawTls(framed) => raw_run(framed, w, pattern).await?,
        Client::RawTlsBuffered(framed) => raw_run(framed, w, pattern).await?,
        Client::RawQuic(framed) => raw_run(framed, w, pattern).await?,
        Client::Tarpc(c) => callers(w, Each::new(c.clone(), pattern)).await?,
        Client::Tonic(c) => callers(w, TonicCaller(Each::new(c.clone(), pattern))).await?,
        Client::Volley(peer) => {
            callers(w, Each::new(BenchClient::new(peer.clone()), pattern)).await?;
        }
    }
    Ok(start.elapsed().as_secs_f64())
}

/// A CA and a server certificate for `localhost` and 127.0.0.1, as PEM files in `dir`.
fn certificates(dir: &Path) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let ca_key = KeyPair::generate().expect("a key");
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("parameters");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = params.self_signed(&ca_key).expect("a CA");
    let key = KeyPair::generate().expect("a key");
    let cert = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
        .expect("parameters")
        .signed_by(&key, &ca, &ca_key)
        .expect("a certificate");
    std::fs::write(dir.join("ca.pem"), ca.pem()).expect("write");
    std::fs::write(dir.join("server.pem"), cert.pem()).expect("write");
    std::fs::write(dir.join("server.key"), key.serialize_pem()).expect("write");
}

/// The index of a system.
fn at(name: &str) -> usize {
    SYSTEMS
        .iter()
        .position(|(s, _)| *s == name)
        .unwrap_or_else(|| panic!("no system {name}"))
}

fn main() {
    let full = std::env::args().any(|a| a == "--full");
    let (rounds, scale) = if full { (15, 3) } else { (5, 1) };
    let dir = std::env::temp_dir().join(format!("volley-bench-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    certificates(&dir);
    let pattern = service::pattern(PATTERN);
    let addrs = servers::start(&dir, pattern.clone());
    let tls = Tls {
        config: tls::client_config(Roots::File(&dir.join("ca.pem")), None).expect("TLS settings"),
        ca_pem: std::fs::read(dir.join("ca.pem")).expect("the CA"),
    };
    let (current, multi) = harness::client_runtimes();
    let runtime_of = |i: usize| if SYSTEMS[i].1 { &multi } else { &current };
    let workloads = [
        ("8 B sequential", Work::Echo, 8, 1, 4000 * scale),
        ("8 B, 64 callers", Work::Echo, 8, 64, 40_000 * scale),
        ("1 MiB put", Work::Put, MIB, 1, 150 * scale),
        ("1 MiB get", Work::Get, MIB, 1, 150 * scale),
    ]
    .map(|(name, work, payload, callers, calls)| Workload {
        name,
        work,
        payload,
        callers,
        calls,
    });
    let clients: Vec<Client> = (0..SYSTEMS.len())
        .map(|i| runtime_of(i).block_on(connect(SYSTEMS[i].0, &addrs, &tls)))
        .collect();
    let mut rows = Vec::new();
    let mut data = Vec::new();
    let mut notes = Vec::new();
    for w in workloads {
        peers::expect_puts(w, &pattern);
        let rates = harness::interleaved(SYSTEMS.len(), rounds, w.calls, |i, warm| {
            let w = if warm { w.warm_up() } else { w };
            runtime_of(i)
                .block_on(measure(&clients[i], w, &pattern))
                .unwrap_or_else(|e| panic!("{} {}: {e}", SYSTEMS[i].0, w.name))
        })
        .rates;
        let m: Vec<f64> = rates.iter().map(|r| harness::median(r)).collect();
        let best = |name: &str| m[at(name)].max(m[at(&format!("{name}, mt client"))]);
        // The tokio-rustls anchor at its best: with or without the read buffer.
        let (raw, tarpc, tonic) = (
            best("raw tokio-rustls").max(best("raw tokio-rustls, 64 KiB read buffer")),
            best("tarpc tls"),
            best("tonic tls"),
        );
        let volley = best("volley tls");
        for (i, (system, _)) in SYSTEMS.iter().enumerate() {
            let rate = m[i];
            let anchor = if system.contains("quic") || system.contains("quinn") {
                m[at("raw quinn")]
            } else {
                raw
            };
            let (row, point) = w.row(system, rate, &rates[i], &[tarpc, tonic, anchor]);
            rows.push(row);
            data.push(point);
        }
        let (vs_tarpc, vs_tonic, vs_raw) = (volley / tarpc, volley / tonic, volley / raw);
        let cost = 1.0 - volley / m[at("volley tcp")];
        notes.push(format!(
            "{}: volley tls (best setup) {vs_tarpc:.2}x tarpc tls, {vs_tonic:.2}x tonic tls, \
             {:.0}% of raw tokio-rustls at its best; TLS costs volley {:.0}% of its plain rate",
            w.name,
            vs_raw * 100.0,
            cost * 100.0
        ));
    }
    notes.push(
        "TLS 1.3 on the ring provider for every peer, a certificate made in process; raw \
         tokio-rustls, tarpc and volley share one rustls configuration, tonic builds its own \
         from the same files; tonic with 8 MiB HTTP/2 windows both ends; / tarpc tls, / tonic tls \
         and / anchor divide by each peer's better setup (the QUIC rows' anchor is raw quinn, \
         one stream with the same frames)"
            .to_owned(),
    );
    let out = json!({
        "title": "RPC over TLS and QUIC on one loopback connection: volley-rpc, tarpc 0.38 over tokio-rustls, tonic 0.14, raw tokio-rustls and raw quinn",
        "columns": ["workload", "system", "calls/s", "MiB/s", "min..max calls/s", "/ tarpc tls", "/ tonic tls", "/ anchor"],
        "rows": rows,
        "data": data,
        "notes": notes,
        "rounds": rounds,
    });
    println!("{out}");
    drop(clients);
    let _ = std::fs::remove_dir_all(&dir);
}
