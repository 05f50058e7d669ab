//! `matrix`: the SuperCollider study's grid. N small calls (8 bytes there, the same back,
//! checked) in batches of B (a caller issues B, then waits for their replies; inf issues
//! all at once) over UDP (volley's channel) and TCP, for N in {50, 500, 2000, 10000} and
//! B in {1, 2, 5, 10, 15, 50, inf}: whether every reply came, how long it took, and the
//! process's peak RSS. On plain loopback, and at 1 ms RTT through the link simulator
//! (its UDP relay, and its TCP relay; UDP also with 1% loss). Printed in the study's form (`YIPPEE!` / `OH NO!`) and as a
//! table with the speed-up of batch inf over batch 1 and the UDP/TCP ratio per cell.
//! Both transports are connected at once and each cell's rounds alternate between them,
//! so a ratio compares rounds taken side by side, not minutes apart.

use core::net::SocketAddr;
use core::time::Duration;
use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::json;
use volley_netsim::tcp::{TcpLinkConfig, TcpLinkSim};
use volley_netsim::{LinkConfig, LinkSim};
use volley_rpc::bench::{self as service, BenchService, BenchState, Spec, Workload};
use volley_rpc::link::framed::FramedLink;
use volley_rpc::link::udp::UdpLink;
use volley_rpc::{Config, Endpoint, Peer};
use volley_transport_tcp::Listener;
use volley_transport_udp::channel::{ChannelConfig, ChannelEndpoint};

use crate::harness::{Mode, Report, median};

const NS: [u64; 4] = [50, 500, 2000, 10_000];
/// 0 stands for inf.
const BATCHES: [u64; 7] = [1, 2, 5, 10, 15, 50, 0];

/// Which transports to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Transports {
    Both,
    Udp,
    Tcp,
}

impl Transports {
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        match text {
            "udp" => Ok(Self::Udp),
            "tcp" => Ok(Self::Tcp),
            "both" => Ok(Self::Both),
            other => Err(format!("--transport {other}: udp, tcp or both")),
        }
    }

    fn has(self, name: &str) -> bool {
        match self {
            Self::Both => true,
            Self::Udp => name == "udp",
            Self::Tcp => name == "tcp",
        }
    }
}

/// The servers, on a thread of their own.
struct Servers {
    tcp: SocketAddr,
    udp: SocketAddr,
}

fn start_servers() -> Servers {
    crate::harness::serve_on_thread(move || async move {
        let state = Arc::new(BenchState::default());
        let endpoint = Endpoint::<BenchService>::new(Config::default())
            .expect("settings")
            .serve(service::router(state));
        let listener = Listener::bind_tcp(
            "127.0.0.1:0".parse().expect("an address"),
            volley_rpc::server::listener_config(16 << 20, 64),
        )
        .await
        .expect("bind");
        let tcp = volley_rpc::serve(endpoint.clone(), listener);
        let channel = ChannelEndpoint::bind(
            "127.0.0.1:0".parse().expect("an address"),
            ChannelConfig::server(),
        )
        .await
        .expect("bind");
        let udp = volley_rpc::serve_udp(endpoint, channel);
        (
            Servers {
                tcp: tcp.local_addr().expect("address"),
                udp: udp.local_addr().expect("address"),
            },
            (tcp, udp),
        )
    })
}

/// Resets the process's peak RSS, so each cell's is its own.
fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// The process's peak RSS since the last reset, in MiB.
fn peak_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

async fn connect(transport: &str, addr: SocketAddr) -> Peer<BenchService> {
    let endpoint = Endpoint::<BenchService>::new(Config::default()).expect("settings");
    match transport {
        "tcp" => endpoint
            .connect(
                FramedLink::connect_tcp(addr, 16 << 20)
                    .await
                    .expect("connect"),
            )
            .await
            .expect("hello"),
        _ => {
            let channel = ChannelEndpoint::bind(
                "127.0.0.1:0".parse().expect("an address"),
                ChannelConfig::client(),
            )
            .await
            .expect("bind");
            let connection = channel.connect(addr).await.expect("connect");
            endpoint
                .connect(UdpLink::new(connection))
                .await
                .expect("hello")
        }
    }
}

/// A link simulator in front of one transport's server.
enum Sim {
    Udp(LinkSim),
    Tcp(TcpLinkSim),
}

/// One cell's result.
#[derive(Clone, Copy, Debug)]
struct Cell {
    ok: bool,
    secs: f64,
    peak_mib: f64,
}

pub(crate) fn run(mode: Mode, transports: Transports) -> Report {
    let servers = start_servers();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    // Loopback cells are short: several rounds, medians. The 1 ms cells are long.
    let rounds_for = |rtt_ms: f64| match (mode, rtt_ms > 0.0) {
        (Mode::Quick, false) => 3,
        (Mode::Quick, true) => 1,
        (Mode::Full, false) => 5,
        (Mode::Full, true) => 3,
    };
    // Links: (name, RTT in ms, UDP loss, transports it runs).
    let links: [(&str, f64, f64, &[&str]); 3] = [
        ("loopback", 0.0, 0.0, &["udp", "tcp"]),
        ("1 ms RTT", 1.0, 0.0, &["udp", "tcp"]),
        ("1 ms RTT, 1% loss", 1.0, 0.01, &["udp"]),
    ];
    let mut report = Report::new(
        "matrix",
        "UDP vs TCP: N small calls in batches of B (the SuperCollider grid)",
        mode,
    );
    report.rounds = rounds_for(0.0);
    report.notes.push(format!(
        "medians of {} rounds per loopback cell and {} per 1 ms cell",
        rounds_for(0.0),
        rounds_for(1.0)
    ));
    report.columns = vec![
        "link",
        "transport",
        "N",
        "batch",
        "result",
        "secs",
        "calls/s",
        "peak RSS MiB",
        "inf / 1",
        "UDP / TCP",
    ];
    // Keyed by link, transport, N and the batch's place in BATCHES (inf last).
    let mut cells: BTreeMap<(usize, &str, u64, usize), Cell> = BTreeMap::new();
    let mut seed_form = Vec::new();
    for (l, &(link, rtt_ms, loss, on)) in links.iter().enumerate() {
        // Every transport of a link is connected at once, and a cell's rounds alternate
        // between them, so drift on a shared host falls on both sides of a ratio alike.
        let mut sims = Vec::new();
        let mut peers = Vec::new();
        for &transport in on.iter().filter(|t| transports.has(t)) {
            let upstream = if transport == "tcp" {
                servers.tcp
            } else {
                servers.udp
            };
            // The link simulator: its UDP relay, or its TCP relay (delay only: bytes
            // relayed in user space cannot be lost as packets are).
            let delay = Duration::from_micros((rtt_ms * 500.0) as u64);
            let target = match (rtt_ms > 0.0, transport) {
                (false, _) => upstream,
                (true, "tcp") => {
                    let sim = TcpLinkSim::start(
                        "127.0.0.1:0".parse().expect("an address"),
                        upstream,
                        TcpLinkConfig {
                            delay,
                            ..TcpLinkConfig::default()
                        },
                    )
                    .expect("the TCP relay starts");
                    let addr = sim.local_addr();
                    sims.push(Sim::Tcp(sim));
                    addr
                }
                (true, _) => {
                    let sim = LinkSim::start(
                        "127.0.0.1:0".parse().expect("an address"),
                        upstream,
                        LinkConfig {
                            delay,
                            loss,
                            seed: 17,
                            ..LinkConfig::default()
                        },
                    )
                    .expect("the link simulator starts");
                    let addr = sim.local_addr();
                    sims.push(Sim::Udp(sim));
                    addr
                }
            };
            let peer = runtime.block_on(connect(transport, target));
            // Warm up the connection (windows open, buffers allocated) before measuring.
            let warm = Spec {
                workload: Workload::Echo,
                calls: 2000,
                concurrency: 1,
                payload: 8,
                batch: 10,
                deadline: Duration::from_secs(30),
            };
            runtime.block_on(service::run(&peer, warm));
            peers.push((transport, peer));
        }
        let rounds = rounds_for(rtt_ms);
        for n in NS {
            for (b, batch) in BATCHES.into_iter().enumerate() {
                // Quick mode leaves out cells that would take long at 1 ms RTT.
                let rtts = if batch == 0 { 1 } else { n.div_ceil(batch) };
                if mode == Mode::Quick && rtt_ms * rtts as f64 > 2500.0 {
                    continue;
                }
                let spec = Spec {
                    workload: Workload::Echo,
                    calls: n,
                    concurrency: 1,
                    payload: 8,
                    batch,
                    deadline: Duration::from_secs(30),
                };
                let mut runs: Vec<Vec<Cell>> = vec![Vec::new(); peers.len()];
                for _ in 0..rounds {
                    for ((_, peer), runs) in peers.iter().zip(&mut runs) {
                        reset_peak();
                        let outcome = runtime.block_on(service::run(peer, spec));
                        runs.push(Cell {
                            ok: outcome.failed == 0,
                            secs: outcome.secs,
                            peak_mib: peak_mib(),
                        });
                    }
                }
                for (&(transport, _), runs) in peers.iter().zip(&runs) {
                    let cell = Cell {
                        ok: runs.iter().all(|c| c.ok),
                        secs: median(&runs.iter().map(|c| c.secs).collect::<Vec<_>>()),
                        peak_mib: runs.iter().map(|c| c.peak_mib).fold(0.0, f64::max),
                    };
                    seed_form.push(format!(
                        "{} protocol: {transport}, link: {link}, calls: {n}, batch size: {}, duration: {:.6}",
                        if cell.ok { "YIPPEE!" } else { "OH NO!" },
                        batch_name(batch),
                        cell.secs
                    ));
                    cells.insert((l, transport, n, b), cell);
                }
            }
        }
        drop(peers);
        for sim in sims {
            match sim {
                Sim::Udp(sim) => sim.stop(),
                Sim::Tcp(sim) => drop(sim),
            }
        }
    }
    println!("\nIn the study's form:");
    for line in &seed_form {
        println!("{line}");
    }
    for (&(l, transport, n, b), cell) in &cells {
        let batch = BATCHES[b];
        let inf_over_1 = (batch == 0)
            .then(|| cells.get(&(l, transport, n, 0)))
            .flatten()
            .map_or("-".into(), |one| format!("{:.1}x", one.secs / cell.secs));
        let udp_over_tcp = (transport == "udp")
            .then(|| cells.get(&(l, "tcp", n, b)))
            .flatten()
            .map_or("-".into(), |tcp| format!("{:.2}x", tcp.secs / cell.secs));
        report.rows.push(vec![
            links[l].0.into(),
            transport.into(),
            n.to_string(),
            batch_name(batch),
            if cell.ok {
                "ok".into()
            } else {
                "FAILED".into()
            },
            format!("{:.4}", cell.secs),
            format!("{:.0}", n as f64 / cell.secs),
            format!("{:.1}", cell.peak_mib),
            inf_over_1,
            udp_over_tcp,
        ]);
        report.data.push(json!({
            "link": links[l].0, "transport": transport, "n": n, "batch": batch_name(batch),
            "ok": cell.ok, "secs": cell.secs, "calls_per_sec": n as f64 / cell.secs,
            "peak_rss_mib": cell.peak_mib,
        }));
    }
    let failed = cells.values().filter(|c| !c.ok).count();
    report.failures = failed;
    report.notes.push(format!(
        "{} cells, {failed} failed; every reply checked; peak RSS is the whole process's (client and servers), reset before each cell",
        cells.len()
    ));
    report.notes.push(
        "TCP runs at 1 ms RTT through the link simulator's TCP relay; its lossy rows are absent: \
         loss does not apply to bytes relayed in user space (TCP under real packet loss would need \
         a network namespace with packets dropped in the kernel)"
            .into(),
    );
    if mode == Mode::Quick {
        report.notes.push(
            "quick mode leaves out the 1 ms cells that would take over 2.5 s (N / batch round trips); --full runs them"
                .into(),
        );
    }
    report
}

fn batch_name(batch: u64) -> String {
    if batch == 0 {
        "inf".into()
    } else {
        batch.to_string()
    }
}
