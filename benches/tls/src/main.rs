//! `volley-bench-tls [--quick|--full]`: the rpc suite's rows over TLS and QUIC. volley
//! over TLS beside tarpc over tokio-rustls and tonic over rustls (and plain), with a raw
//! tokio-rustls anchor (length-delimited frames over the same TLS configuration, read with
//! and without a 64 KiB buffer, compared at its better); volley over QUIC beside a raw quinn stream. The same
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
use volley_rpc_bench::{self as service, Bench, BenchClient};
use volley_rpc::link::framed::FramedLink;
use volley_rpc::link::tls::{self, Roots};
use volley_rpc::{Config, Endpoint, Peer};

mod grpc;
mod servers;

use grpc::BenchGrpc;
use servers::{Addrs, H2_WINDOW};
use volley_benches::harness;
use volley_benches::suites::rpc::TLS_COLUMNS;
use volley_benches::suites::rpc::light::{LIGHT_COLUMNS, OpenLoopRound, light_load, open_loop};
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
/// current-thread one). Plain names run both ends on tokio's default multi-thread runtime
/// (the server a worker per core, the client two); `current-thread` (`tuned` for volley,
/// whose readers spin there) both ends on current-thread runtimes; `mt client` the server
/// so and the client on the 2-worker runtime. Every system is compared at its best setup
/// per workload as well as on the default runtimes.
const SYSTEMS: [(&str, bool); 25] = [
    ("raw tokio-rustls", true),
    ("raw tokio-rustls, current-thread", false),
    ("raw tokio-rustls, mt client", true),
    ("raw tokio-rustls, 64 KiB read buffer", true),
    (
        "raw tokio-rustls, 64 KiB read buffer, current-thread",
        false,
    ),
    ("raw tokio-rustls, 64 KiB read buffer, mt client", true),
    ("tarpc tls", true),
    ("tarpc tls, current-thread", false),
    ("tarpc tls, mt client", true),
    ("tonic tls", true),
    ("tonic tls, current-thread", false),
    ("tonic tls, mt client", true),
    ("tonic plain", true),
    ("tonic plain, current-thread", false),
    ("tonic plain, mt client", true),
    ("volley tls", true),
    ("volley tls, tuned", false),
    ("volley tls, mt client", true),
    ("volley tcp", true),
    ("volley tcp, tuned", false),
    ("volley tcp, mt client", true),
    ("volley quic", true),
    ("volley quic, tuned", false),
    ("raw quinn", true),
    ("raw quinn, current-thread", false),
];

/// The setups a system's name carries after a comma.
const SETUPS: [&str; 3] = [", current-thread", ", tuned", ", mt client"];

/// The system a row measures and whether its servers are the default-runtime ones.
fn base(system: &str) -> (&str, bool) {
    SETUPS
        .iter()
        .find_map(|setup| system.strip_suffix(setup))
        .map_or((system, true), |name| (name, false))
}

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

async fn connect(system: &str, servers: &[Addrs; 2], tls: &Tls) -> Client {
    let (system, default) = base(system);
    let addrs = &servers[usize::from(default)];
    match system {
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
            let link = volley_rpc::link::quic::connect(
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
            config.transport_config(Arc::new(volley_rpc::link::quic::transport_config(
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

/// The indices of a system's setups.
fn setups(name: &str) -> Vec<usize> {
    (0..SYSTEMS.len())
        .filter(|&i| base(SYSTEMS[i].0).0 == name)
        .collect()
}

fn main() {
    let full = std::env::args().any(|a| a == "--full");
    let (rounds, scale) = if full { (15, 3) } else { (5, 1) };
    let dir = std::env::temp_dir().join(format!("volley-bench-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    certificates(&dir);
    let pattern = service::pattern(PATTERN);
    let servers = [
        servers::start(&dir, pattern.clone(), false),
        servers::start(&dir, pattern.clone(), true),
    ];
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
        .map(|i| runtime_of(i).block_on(connect(SYSTEMS[i].0, &servers, &tls)))
        .collect();
    let mut rows = Vec::new();
    let mut data = Vec::new();
    let mut notes = Vec::new();
    for w in workloads {
        peers::expect_puts(w, &pattern);
        let rounds = harness::interleaved(SYSTEMS.len(), rounds, w.calls, |i, warm| {
            let w = if warm { w.warm_up() } else { w };
            runtime_of(i)
                .block_on(measure(&clients[i], w, &pattern))
                .unwrap_or_else(|e| panic!("{} {}: {e}", SYSTEMS[i].0, w.name))
        });
        let m: Vec<f64> = rounds.rates.iter().map(|r| harness::median(r)).collect();
        let cpu: Vec<(f64, f64)> = (0..SYSTEMS.len())
            .map(|i| {
                (
                    harness::median(&rounds.client_us[i]),
                    harness::median(&rounds.server_us[i]),
                )
            })
            .collect();
        let per_cpu = |i: usize| peers::per_cpu(cpu[i]);
        let best = |name: &str, of: &dyn Fn(usize) -> f64| {
            setups(name).into_iter().map(of).fold(0.0, f64::max)
        };
        let rate = |i: usize| m[i];
        // The tokio-rustls anchor at its best: with or without the read buffer.
        let raw = best("raw tokio-rustls", &rate)
            .max(best("raw tokio-rustls, 64 KiB read buffer", &rate));
        let (tarpc, tonic) = (best("tarpc tls", &rate), best("tonic tls", &rate));
        let tarpc_per_cpu = best("tarpc tls", &per_cpu);
        for (i, (system, _)) in SYSTEMS.iter().enumerate() {
            let anchor = if system.contains("quic") || system.contains("quinn") {
                best("raw quinn", &rate)
            } else {
                raw
            };
            let (mut row, mut point) =
                w.row(system, m[i], &rounds.rates[i], &[tarpc, tonic, anchor]);
            peers::cpu_columns(&mut row, &mut point, cpu[i], tarpc_per_cpu);
            rows.push(row);
            data.push(point);
        }
        let volley = best("volley tls", &rate);
        let (v, t) = (at("volley tls"), at("tarpc tls"));
        notes.push(format!(
            "{}: volley tls at its best {:.2}x tarpc tls at its best, {:.2}x tonic tls at its \
             best, {:.0}% of raw tokio-rustls at its best; on the default runtimes volley tls / \
             tarpc tls = {:.2}x calls/s, {:.2}x calls per CPU-second; TLS costs volley {:.0}% of \
             its plain rate on the default runtimes",
            w.name,
            volley / tarpc,
            volley / tonic,
            volley / raw * 100.0,
            m[v] / m[t],
            per_cpu(v) / per_cpu(t),
            (1.0 - m[v] / m[at("volley tcp")]) * 100.0
        ));
    }
    notes.push(
        "TLS 1.3 on the ring provider for every peer, a certificate made in process; raw \
         tokio-rustls, tarpc and volley share one rustls configuration, tonic builds its own \
         from the same files; tonic with 8 MiB HTTP/2 windows both ends; plain names run both \
         ends on tokio's default multi-thread runtime (the servers a worker per core, the client \
         two), current-thread and tuned both ends on current-thread runtimes (volley's readers \
         spin there up to 250 µs before they sleep), mt client the server so and the client on \
         two workers; / tarpc tls, / tonic tls and / anchor divide by each peer's best setup \
         (the QUIC rows' anchor is raw quinn, one stream with the same frames); CPU: each \
         thread's time on a CPU over the round per call, the servers' threads apart"
            .to_owned(),
    );
    // tonic beside volley in the rpc suite's light-load table: plain TCP, default runtimes.
    let light_systems: Vec<(&str, OpenLoopRound<'_>)> = [
        ("tonic plain (default runtimes)", at("tonic plain")),
        (
            "volley tcp (default runtimes, beside tonic)",
            at("volley tcp"),
        ),
    ]
    .into_iter()
    .map(|(name, i)| {
        let (client, pattern) = (&clients[i], &pattern);
        let round: OpenLoopRound<'_> = Box::new(move |w, rate, calls| {
            runtime_of(i).block_on(async move {
                match client {
                    Client::Tonic(c) => {
                        let caller = TonicCaller(Each::new(c.clone(), pattern));
                        open_loop(caller, w, rate, calls).await
                    }
                    Client::Volley(p) => {
                        let caller = Each::new(BenchClient::new(p.clone()), pattern);
                        open_loop(caller, w, rate, calls).await
                    }
                    _ => Err("only tonic and volley clients here".into()),
                }
            })
        });
        (name, round)
    })
    .collect();
    let light = light_load(rounds.min(3), if full { 5.0 } else { 2.0 }, &light_systems);
    drop(light_systems);
    for (row, mut point) in light.rows.into_iter().zip(light.data) {
        point["row"] = LIGHT_COLUMNS.iter().copied().zip(row).collect();
        data.push(point);
    }
    for failure in light.failures {
        data.push(json!({"table": "failure", "what": failure}));
    }
    let out = json!({
        "title": "RPC over TLS and QUIC on one loopback connection: volley-rpc, tarpc 0.38 over tokio-rustls, tonic 0.14, raw tokio-rustls and raw quinn",
        "columns": TLS_COLUMNS,
        "rows": rows,
        "data": data,
        "notes": notes,
        "rounds": rounds,
    });
    println!("{out}");
    drop(clients);
    let _ = std::fs::remove_dir_all(&dir);
}
