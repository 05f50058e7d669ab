//! `volley rpc serve` and `volley rpc bench`: the built-in bench service, and a driver
//! that checks every reply and ends with one machine-readable line.

use core::net::SocketAddr;
use core::time::Duration;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::{Args, Subcommand, ValueEnum};
use volley_rpc::link::LinkError;
use volley_rpc::link::framed::FramedLink;
use volley_rpc::link::quic::{self, QuicListener};
use volley_rpc::link::tls::rustls::ClientConfig;
use volley_rpc::link::tls::{self, Roots, ServerName, TlsListener};
use volley_rpc::link::udp::UdpLink;
use volley_rpc::{Config, ConnectError, Endpoint, Reconnecting, serve};
use volley_rpc_bench::{self as service, Bench, BenchState, Spec, Workload};
use volley_transport_tcp::Listener;
use volley_transport_udp::channel::{ChannelConfig, ChannelEndpoint};
use volley_transport_udp::target;

use crate::args::{duration_secs, host_port, rate_per_sec, seconds, seconds_or_off};

/// The largest message either end takes (the default of the library).
const MAX_MESSAGE: usize = 16 << 20;
/// Room for the head and arguments beside a payload.
const HEAD_ROOM: usize = 4096;

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Serve the built-in bench service (echo, put, get, send) until SIGINT or SIGTERM.
    /// Prints `listening tcp=ADDR` (or `udp=ADDR`, `quic=ADDR`) once it accepts. Encrypted
    /// with --tls-cert and --tls-key (TCP), authenticated with --auth-token-file or
    /// --client-ca; without them, keep it on loopback unless the network is yours.
    Serve(ServeArgs),
    /// Drive a bench server, check every reply, and end with the line `calls=N ok=K
    /// failed=F secs=S calls/s=R MiB/s=M reconnects=C cpu_us_per_call=U p50_us=A
    /// p99_us=B p999_us=C` (this process's CPU per call made; latency of the calls that
    /// succeeded, from each one's sending).
    Bench(BenchArgs),
}

impl Command {
    /// The runtime the command asks for.
    pub(crate) fn runtime(&self) -> crate::Runtime {
        match self {
            Self::Serve(args) => args.runtime,
            Self::Bench(args) => args.runtime,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Transport {
    /// TCP (or any stream) through the framed layer.
    Tcp,
    /// volley's reliable UDP channel.
    Udp,
    /// QUIC (quinn), always with TLS: the server needs --tls-cert and --tls-key, the
    /// client --tls-ca or --tls.
    Quic,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum CallKind {
    /// 8 bytes there and back.
    Echo,
    /// PAYLOAD bytes up as a bulk segment; its length and xxh3 hash back.
    Put,
    /// PAYLOAD bytes back as a bulk segment, a slice of a fixed pattern.
    Get,
    /// PAYLOAD bytes one way, then "have N arrived intact?".
    Send,
}

#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// The tokio runtime to serve on.
    #[arg(long, value_enum, default_value_t = crate::Runtime::Current)]
    runtime: crate::Runtime,
    /// Address to listen on (port 0 picks one).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Transport.
    #[arg(long, value_enum, default_value_t = Transport::Tcp)]
    transport: Transport,
    /// Calls in flight each connection may have here; more are answered busy.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=65536))]
    credit: u32,
    /// Connections served at once; past it a new one is told "no free connection slot"
    /// and closed (at most 100 such refusals a second; beyond that they wait).
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..=65536))]
    max_connections: u64,
    /// Admit only clients whose hello carries the token in this file's first line
    /// (without its line ending; compared in constant time); others are refused at once
    /// as unauthenticated.
    #[arg(long, value_name = "FILE")]
    auth_token_file: Option<PathBuf>,
    /// Speak TLS 1.3 with this certificate chain (PEM, the server's own first); needs
    /// --tls-key. TCP only.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Mutual TLS: admit only clients presenting a certificate signed by a CA in this PEM
    /// file. Needs --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    client_ca: Option<PathBuf>,
    #[command(flatten)]
    timeouts: Timeouts,
}

/// The connection's timers, the same on `serve` and `bench`, for TCP and UDP.
#[derive(Clone, Copy, Debug, Args)]
pub(crate) struct Timeouts {
    /// Seconds the handshake (the peer's hello) may take before the connection is
    /// closed; 0.1 to 3600.
    #[arg(long, default_value = "10", value_parser = seconds)]
    handshake_timeout_s: f64,
    /// Seconds of silence from the peer before it is pinged; a peer silent for three of
    /// them is dropped and its calls fail saying so. 0 turns pings off; else 0.1 to 3600,
    /// and shorter than --idle-timeout-s. Over UDP it is the channel's keep-alive, and
    /// three of it the channel's timeout for a silent peer.
    #[arg(long, default_value = "15", value_parser = seconds_or_off)]
    keepalive_s: f64,
    /// Seconds with nothing in flight either way after which the connection is closed;
    /// 0.1 to 3600.
    #[arg(long, default_value = "120", value_parser = seconds)]
    idle_timeout_s: f64,
}

impl Timeouts {
    /// The RPC settings with these timers; refuses a keep-alive not shorter than the
    /// idle timeout.
    fn apply(&self, config: Config) -> anyhow::Result<Config> {
        let keepalive = (self.keepalive_s > 0.0).then(|| Duration::from_secs_f64(self.keepalive_s));
        let idle = Duration::from_secs_f64(self.idle_timeout_s);
        if keepalive.is_some_and(|k| k >= idle) {
            bail!(
                "--keepalive-s {} must be shorter than --idle-timeout-s {}",
                self.keepalive_s,
                self.idle_timeout_s
            );
        }
        Ok(Config {
            hello_timeout: Duration::from_secs_f64(self.handshake_timeout_s),
            keepalive,
            idle_timeout: Some(idle),
            ..config
        })
    }

    /// The UDP channel's settings with these timers: its keep-alive is ours, and a peer
    /// silent for three of them is gone; without pings, the channel pings at half the
    /// idle timeout and gives up at it.
    fn channel(&self, mut channel: ChannelConfig) -> ChannelConfig {
        let us = |s: f64| volley_proto::time::Duration::from_micros((s * 1e6) as u64);
        let connection = &mut channel.endpoint.connection;
        if self.keepalive_s > 0.0 {
            connection.keep_alive = us(self.keepalive_s);
            connection.idle_timeout = us(3.0 * self.keepalive_s);
        } else {
            connection.keep_alive = us(self.idle_timeout_s / 2.0);
            connection.idle_timeout = us(self.idle_timeout_s);
        }
        channel.connect_timeout = Duration::from_secs_f64(self.handshake_timeout_s);
        channel
    }
}

#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    /// The tokio runtime to drive from.
    #[arg(long, value_enum, default_value_t = crate::Runtime::Current)]
    runtime: crate::Runtime,
    /// The server: HOST:PORT, a name or an address (`[V6]:PORT` for IPv6); a name is
    /// resolved once, and checked as the TLS server name unless --server-name says
    /// otherwise.
    #[arg(long, value_parser = host_port)]
    connect: String,
    /// Transport.
    #[arg(long, value_enum, default_value_t = Transport::Tcp)]
    transport: Transport,
    /// Which call to make.
    #[arg(long, value_enum, default_value_t = CallKind::Echo)]
    call: CallKind,
    /// Calls in all [default: 10000, or no limit with --duration].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    calls: Option<u64>,
    /// Call until this many seconds have passed (instead of a count of calls).
    #[arg(long, value_name = "SECS", value_parser = duration_secs)]
    duration: Option<f64>,
    /// Open loop: N calls a second, each sent at its time whatever is still in flight
    /// (fractions too: 0.2 is a call every 5 s). --concurrency does not apply.
    #[arg(long, value_name = "N", value_parser = rate_per_sec, conflicts_with = "concurrency")]
    rate: Option<f64>,
    /// Callers sharing the one connection; they split the calls.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=4096))]
    concurrency: u64,
    /// Payload bytes for put, get and send (echo always moves 8).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(0..=(MAX_MESSAGE - HEAD_ROOM) as u64))]
    payload: u64,
    /// Calls each caller issues before awaiting their replies; 0 issues all at once.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(0..=100_000_000))]
    batch: u64,
    /// Deadline of each call, in seconds.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    deadline_secs: u64,
    /// Send the token in this file's first line (without its line ending) in the hello.
    #[arg(long, value_name = "FILE")]
    auth_token_file: Option<PathBuf>,
    /// Speak TLS 1.3, trusting only the certificates in this PEM file (a private CA, or
    /// the server's own self-signed certificate). TCP only.
    #[arg(long, value_name = "FILE", conflicts_with = "tls")]
    tls_ca: Option<PathBuf>,
    /// Speak TLS 1.3, trusting the system's root certificates.
    #[arg(long)]
    tls: bool,
    /// The name to check in the server's certificate; by default the IP of --connect,
    /// which the certificate must then list as an IP address (as curl does).
    #[arg(long, value_name = "NAME")]
    server_name: Option<String>,
    /// A client certificate chain (PEM) for mutual TLS; needs --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    #[command(flatten)]
    timeouts: Timeouts,
}

impl BenchArgs {
    /// The client's TLS settings and the name to check, if it speaks TLS; TLS options
    /// without TLS, or with UDP, are refused with the reason.
    fn tls(&self) -> anyhow::Result<Option<(Arc<ClientConfig>, ServerName<'static>)>> {
        let roots = match (&self.tls_ca, self.tls) {
            (Some(path), _) => Roots::File(path),
            (None, true) => Roots::System,
            (None, false) => {
                if self.transport == Transport::Quic {
                    bail!("--transport quic is always encrypted: add --tls-ca FILE or --tls");
                }
                if self.server_name.is_some() || self.tls_cert.is_some() {
                    bail!("--server-name and --tls-cert need TLS: add --tls-ca FILE or --tls");
                }
                return Ok(None);
            }
        };
        if self.transport == Transport::Udp {
            bail!("TLS (--tls-ca, --tls) runs over TCP or QUIC: --transport udp has no TLS");
        }
        let identity = self.tls_cert.as_deref().zip(self.tls_key.as_deref());
        let config = tls::client_config(roots, identity).context("TLS settings")?;
        let name = match &self.server_name {
            Some(name) => tls::server_name(name).context("--server-name")?,
            None => {
                let (host, _) = target::split(&self.connect, 0).map_err(anyhow::Error::msg)?;
                match host.parse::<core::net::IpAddr>() {
                    Ok(ip) => ServerName::IpAddress(ip.into()),
                    Err(_) => tls::server_name(host).context("--connect")?,
                }
            }
        };
        Ok(Some((config, name)))
    }
}

/// The token in `path`'s first line, without its line ending; an empty one is refused,
/// and so is a file that others than its owner may read (as ssh refuses such a key).
fn read_token(path: &Path) -> anyhow::Result<String> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path)
        .with_context(|| format!("cannot read the token file {}", path.display()))?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        bail!(
            "the token file {} may be read by others (mode {:o}): a token is a secret; \
             chmod 600 it",
            path.display(),
            mode & 0o777
        );
    }
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the token file {}", path.display()))?;
    let token = text.lines().next().unwrap_or_default();
    if token.is_empty() {
        bail!(
            "the token file {} has an empty first line: a token is 1 to 512 bytes",
            path.display()
        );
    }
    Ok(token.to_owned())
}

/// Runs an rpc command; `verbose` (-v) has `bench` say why each failed call failed.
pub(crate) async fn run(command: Command, verbose: bool) -> anyhow::Result<()> {
    match command {
        Command::Serve(args) => serve_bench(args).await,
        Command::Bench(args) => drive(args, verbose).await,
    }
}

async fn serve_bench(args: ServeArgs) -> anyhow::Result<()> {
    let config = args.timeouts.apply(Config {
        credit: args.credit,
        ..Config::default()
    })?;
    let token = args
        .auth_token_file
        .as_deref()
        .map(read_token)
        .transpose()?;
    let handshake_timeout = config.hello_timeout;
    let state = Arc::new(BenchState::default());
    let mut endpoint = Endpoint::<Bench>::new(config)
        .context("rpc settings")?
        .serve(service::router(state.clone()));
    if let Some(token) = token {
        endpoint = endpoint.require_token(token).context("--auth-token-file")?;
    }
    let tls_config = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => {
            if args.transport == Transport::Udp {
                bail!("TLS (--tls-cert) runs over TCP or QUIC: --transport udp has no TLS");
            }
            Some(tls::server_config(cert, key, args.client_ca.as_deref()).context("TLS settings")?)
        }
        _ if args.transport == Transport::Quic => {
            bail!("--transport quic is always encrypted: give --tls-cert FILE and --tls-key FILE")
        }
        _ => None,
    };
    let (server, name) = match args.transport {
        Transport::Tcp => {
            // Fits: range-checked to 65536.
            let listener_config = volley_rpc::listener_config(args.max_connections as usize);
            let listener = Listener::bind_tcp(args.listen, listener_config)
                .await
                .with_context(|| format!("cannot listen on {}", args.listen))?;
            let server = match tls_config {
                Some(config) => serve(
                    endpoint,
                    TlsListener::new(listener, config).handshake_timeout(handshake_timeout),
                ),
                None => serve(endpoint, listener),
            };
            (server, "tcp")
        }
        Transport::Quic => {
            let tls = tls_config.expect("checked above: QUIC has TLS settings");
            // Fits: range-checked to 65536.
            let listener = QuicListener::bind(
                args.listen,
                tls,
                &endpoint.config(),
                args.max_connections as usize,
            )
            .with_context(|| format!("cannot listen on {}", args.listen))?;
            (serve(endpoint, listener), "quic")
        }
        Transport::Udp => {
            let mut channel_config = args.timeouts.channel(ChannelConfig::server());
            // Fits: range-checked to 65536.
            channel_config.endpoint.max_peers = args.max_connections as usize;
            let channel = ChannelEndpoint::bind(args.listen, channel_config)
                .await
                .with_context(|| format!("cannot listen on {}", args.listen))?;
            (serve(endpoint, channel), "udp")
        }
    };
    let addr = server
        .local_addr()
        .context("cannot read the address listened on")?;
    println!("listening {name}={addr}");
    std::io::stdout()
        .flush()
        .context("cannot write to stdout")?;
    tokio::select! {
        signal = crate::shutdown_signal() => {
            signal?;
            server.shutdown().await.context("rpc server")?;
        }
        // Only ends by itself on an error a server cannot go on from.
        ended = wait(&server) => ended?,
    }
    if state.bad() > 0 {
        eprintln!(
            "volley: {} one-way payloads failed their check",
            state.bad()
        );
    }
    Ok(())
}

/// Resolves when the server's accept loop has ended by itself.
async fn wait(server: &volley_rpc::ServerHandle) -> anyhow::Result<()> {
    while !server.is_finished() {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    bail!("the rpc server stopped accepting connections")
}

/// A failed hello over TCP, saying so when the server looks like a TLS one and this end
/// spoke plain: it answered with a TLS record, or closed without a word.
fn plain_meets_tls(e: ConnectError, tls: bool, addr: SocketAddr) -> anyhow::Error {
    match e {
        ConnectError::Link(LinkError::PeerSpeaksTls) if !tls => {
            anyhow::anyhow!("rpc hello with {addr}: the server speaks TLS (use --tls-ca)")
        }
        ConnectError::Link(LinkError::Closed) if !tls => anyhow::anyhow!(
            "rpc hello with {addr}: the server closed the connection during the hello; \
             perhaps the server speaks TLS (use --tls-ca)"
        ),
        e => anyhow::Error::new(e).context(format!("rpc hello with {addr}")),
    }
}

async fn drive(args: BenchArgs, verbose: bool) -> anyhow::Result<()> {
    let payload = args.payload as usize;
    let config = args.timeouts.apply(Config::default())?;
    let mut endpoint = Endpoint::<Bench>::new(config).context("rpc settings")?;
    if let Some(path) = &args.auth_token_file {
        endpoint = endpoint
            .token(read_token(path)?)
            .context("--auth-token-file")?;
    }
    let tls = args.tls()?;
    let addr = target::lookup(&args.connect, 0)
        .await
        .with_context(|| format!("cannot resolve --connect {}", args.connect))?[0];
    let client = match args.transport {
        Transport::Tcp => match tls.clone() {
            Some((config, name)) => Reconnecting::new(endpoint, move || {
                tls::connect(addr, name.clone(), config.clone())
            }),
            None => Reconnecting::new(endpoint, move || FramedLink::connect_tcp(addr)),
        },
        Transport::Quic => {
            let (tls, name) = tls
                .clone()
                .expect("checked by BenchArgs::tls: QUIC has TLS settings");
            let config = endpoint.config();
            Reconnecting::new(endpoint, move || {
                let (name, tls) = (name.clone(), tls.clone());
                async move { quic::connect(addr, name, tls, &config).await }
            })
        }
        Transport::Udp => {
            let any: SocketAddr = if addr.is_ipv4() {
                "0.0.0.0:0".parse().expect("an address")
            } else {
                "[::]:0".parse().expect("an address")
            };
            let channel =
                ChannelEndpoint::bind(any, args.timeouts.channel(ChannelConfig::client()))
                    .await
                    .context("cannot open a UDP socket")?;
            Reconnecting::new(endpoint, move || {
                let channel = channel.clone();
                async move {
                    let connection = channel.connect(addr).await.map_err(std::io::Error::other)?;
                    Ok(UdpLink::new(connection))
                }
            })
        }
    };
    // The first connection now, so that a server that is not there is an error at once;
    // later losses are made good by connecting again.
    let peer = client.connect().await.map_err(|e| match e {
        ConnectError::Timeout(after) => {
            anyhow::anyhow!(
                "cannot connect to {addr}: no answer within {} s",
                after.as_secs()
            )
        }
        ConnectError::Io(e) => anyhow::Error::new(e).context(format!("cannot connect to {addr}")),
        e => plain_meets_tls(e, tls.is_some(), addr),
    })?;
    let limit = peer.peer_hello().max_message as usize;
    if payload + HEAD_ROOM > limit {
        bail!(
            "--payload {payload}: the server takes messages of at most {limit} bytes, \
             {HEAD_ROOM} of them kept for the call's head"
        );
    }
    let spec = Spec {
        workload: match args.call {
            CallKind::Echo => Workload::Echo,
            CallKind::Put => Workload::Put,
            CallKind::Get => Workload::Get,
            CallKind::Send => Workload::Send,
        },
        calls: args.calls.unwrap_or(if args.duration.is_some() {
            u64::MAX
        } else {
            10_000
        }),
        // Fits: range-checked to 4096.
        concurrency: args.concurrency as usize,
        payload,
        batch: args.batch,
        deadline: Duration::from_secs(args.deadline_secs),
        duration: args.duration.map(Duration::from_secs_f64),
        rate: args.rate,
    };
    let outcome = service::run(client.clone(), spec).await;
    if verbose {
        for (index, why) in &outcome.failures {
            eprintln!("call {index} failed: {why}");
        }
        if outcome.failed > outcome.failures.len() as u64 {
            eprintln!("(the first {} failures shown)", outcome.failures.len());
        }
    }
    client.shutdown().await;
    println!("{}", outcome.line());
    if outcome.failed > 0 {
        bail!(
            "{} of {} calls failed; the first: {}",
            outcome.failed,
            outcome.calls,
            outcome.first_error.as_deref().unwrap_or("(no message)")
        );
    }
    Ok(())
}
