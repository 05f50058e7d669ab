//! `matrix`: the SuperCollider study's grid. N small calls (8 bytes there, the same back,
//! checked) in batches of B (a caller issues B, then waits for their replies; inf issues
//! all at once) over UDP (volley's channel) and TCP, for N in {50, 500, 2000, 10000} and
//! B in {1, 2, 5, 10, 15, 50, inf}: whether every reply came, how long it took, and the
//! process's peak RSS. On plain loopback, and at 1 ms RTT through the link simulator
//! (its UDP relay, and its TCP relay), without loss and with 1% loss each way: UDP's
//! datagrams dropped by the simulator, TCP's packets by the kernel (nftables, in a
//! network namespace the suite makes for a child process; this needs root, and without
//! it TCP's lossy rows are absent, with the reason in the notes). Printed in the study's
//! form (`YIPPEE!` / `OH NO!`) and as a table with the speed-up of batch inf over batch 1
//! and the UDP/TCP ratio per cell.
//! Both transports are connected at once and each cell's rounds alternate between them,
//! so a ratio compares rounds taken side by side, not minutes apart.

use core::net::SocketAddr;
use core::time::Duration;
use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::json;
use volley_netsim::tcp::{TcpLinkConfig, TcpLinkSim};
use volley_netsim::{LinkConfig, LinkSim};
use volley_rpc::link::framed::FramedLink;
use volley_rpc::link::udp::UdpLink;
use volley_rpc::{Config, Endpoint, Peer};
use volley_rpc_bench::{self as service, Bench, BenchState, Spec, Workload};
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
        let tcp = super::rpc::bench_tcp_server().await;
        let endpoint = Endpoint::<Bench>::new(Config::default())
            .expect("settings")
            .serve(service::router(Arc::new(BenchState::default())));
        let channel = ChannelEndpoint::bind(
            "127.0.0.1:0".parse().expect("an address"),
            ChannelConfig::server(),
        )
        .await
        .expect("bind");
        let udp = volley_rpc::serve(endpoint, channel);
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

async fn connect(transport: &str, addr: SocketAddr) -> Peer<Bench> {
    let endpoint = Endpoint::<Bench>::new(Config::default()).expect("settings");
    match transport {
        "tcp" => endpoint
            .connect(FramedLink::connect_tcp(addr).await.expect("connect"))
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
    /// CPU seconds the client's and the servers' threads spent on the cell (the link
    /// simulator's are neither).
    cpu: f64,
}

/// Links: name, RTT in ms, loss per packet each way.
const LINKS: [(&str, f64, f64); 3] = [
    ("loopback", 0.0, 0.0),
    ("1 ms RTT", 1.0, 0.0),
    ("1 ms RTT, 1% loss", 1.0, 0.01),
];
/// The lossy link's place in `LINKS`.
const LOSSY: usize = 2;

/// Rounds per cell: loopback cells are short (several rounds, medians), 1 ms cells long.
fn rounds_for(mode: Mode, rtt_ms: f64) -> usize {
    match (mode, rtt_ms > 0.0) {
        (Mode::Quick, false) => 3,
        (Mode::Quick, true) => 1,
        (Mode::Full, false) => 5,
        (Mode::Full, true) => 3,
    }
}

/// One link's cells: (transport, N, the batch's place in `BATCHES`, result), in the
/// order they ran.
type Measured = Vec<(&'static str, u64, usize, Cell)>;

/// Runs every cell of link `l` for `transports`, connected at once, each cell's rounds
/// alternating between them, so drift on a shared host falls on both sides of a ratio
/// alike. UDP's loss comes from the link simulator; TCP's relay only delays (on the
/// lossy link, the kernel drops its packets: see [`lossy_link_child`]).
fn run_link(
    runtime: &tokio::runtime::Runtime,
    servers: &Servers,
    l: usize,
    transports: &[&'static str],
    mode: Mode,
) -> Measured {
    let (_, rtt_ms, loss) = LINKS[l];
    let mut sims = Vec::new();
    let mut peers = Vec::new();
    for &transport in transports {
        let upstream = if transport == "tcp" {
            servers.tcp
        } else {
            servers.udp
        };
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
            duration: None,
            rate: None,
        };
        runtime.block_on(service::run(peer.clone(), warm));
        peers.push((transport, peer));
    }
    let rounds = rounds_for(mode, rtt_ms);
    let mut measured = Vec::new();
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
                duration: None,
                rate: None,
            };
            let mut runs: Vec<Vec<Cell>> = vec![Vec::new(); peers.len()];
            for _ in 0..rounds {
                for ((_, peer), runs) in peers.iter().zip(&mut runs) {
                    reset_peak();
                    let before = crate::harness::cpu_split();
                    let outcome = runtime.block_on(service::run(peer.clone(), spec));
                    let after = crate::harness::cpu_split();
                    runs.push(Cell {
                        ok: outcome.failed == 0,
                        secs: outcome.secs,
                        peak_mib: peak_mib(),
                        cpu: (after.0 - before.0) + (after.1 - before.1),
                    });
                }
            }
            for (&(transport, _), runs) in peers.iter().zip(&runs) {
                let cell = Cell {
                    ok: runs.iter().all(|c| c.ok),
                    secs: median(&runs.iter().map(|c| c.secs).collect::<Vec<_>>()),
                    peak_mib: runs.iter().map(|c| c.peak_mib).fold(0.0, f64::max),
                    cpu: median(&runs.iter().map(|c| c.cpu).collect::<Vec<_>>()),
                };
                measured.push((transport, n, b, cell));
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
    measured
}

/// What the lossy link's child process reports: its cells, and the TCP packets the
/// kernel saw and dropped between the relay and the server.
struct LossyRun {
    measured: Measured,
    tcp_packets: u64,
    tcp_dropped: u64,
}

/// Runs the lossy link in a child process in a network namespace of its own, where
/// nftables drops TCP packets (so TCP meets real loss, with its own retransmissions),
/// or says why it could not (not root, no `unshare`, no `nft`).
fn lossy_link_in_namespace(mode: Mode, transports: &[&'static str]) -> Result<LossyRun, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this binary: {e}"))?;
    // Not root: through `sudo -n` where it is there (a CI runner), else unshare says no.
    let root = std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().nth(1))
            == Some("0")
    });
    let mut command = if !root && std::path::Path::new("/usr/bin/sudo").exists() {
        let mut sudo = std::process::Command::new("sudo");
        sudo.args(["-n", "unshare"]);
        sudo
    } else {
        std::process::Command::new("unshare")
    };
    let out = command
        .args(["--net", "--"])
        .arg(exe)
        .arg(LOSSY_CHILD)
        .arg(if mode == Mode::Full {
            "--full"
        } else {
            "--quick"
        })
        .arg(transports.join(","))
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("cannot run unshare: {e}"))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        let last = stderr
            .lines()
            .last()
            .unwrap_or("no message")
            .trim()
            .to_string();
        return Err(format!(
            "the child in a network namespace failed ({}): {last}",
            out.status
        ));
    }
    eprint!("{stderr}");
    let mut run = LossyRun {
        measured: Vec::new(),
        tcp_packets: 0,
        tcp_dropped: 0,
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let bad = || format!("the namespaced child printed `{line}`");
        match fields.as_slice() {
            ["cell", transport, n, b, ok, secs, peak, cpu] => {
                let transport = match *transport {
                    "udp" => "udp",
                    "tcp" => "tcp",
                    _ => return Err(bad()),
                };
                let cell = Cell {
                    ok: *ok == "ok",
                    secs: secs.parse().map_err(|_| bad())?,
                    peak_mib: peak.parse().map_err(|_| bad())?,
                    cpu: cpu.parse().map_err(|_| bad())?,
                };
                let n = n.parse().map_err(|_| bad())?;
                let b = b.parse().map_err(|_| bad())?;
                run.measured.push((transport, n, b, cell));
            }
            ["tcp-packets", seen, dropped] => {
                run.tcp_packets = seen.parse().map_err(|_| bad())?;
                run.tcp_dropped = dropped.parse().map_err(|_| bad())?;
            }
            _ => return Err(bad()),
        }
    }
    Ok(run)
}

/// The hidden first argument that makes the benchmark binary the lossy link's child.
pub(crate) const LOSSY_CHILD: &str = "matrix-lossy-link";

/// The lossy link's child, in a fresh network namespace (from `unshare --net`): brings
/// its loopback up, starts the servers, has nftables drop TCP packets to and from the
/// TCP server's port at the link's loss rate each way, runs the link's cells, and prints
/// them (and nftables' counters) for the parent.
pub(crate) fn lossy_link_child(args: &[String]) -> Result<(), String> {
    let [mode, transports] = args else {
        return Err(format!("usage: {LOSSY_CHILD} --quick|--full udp,tcp"));
    };
    let mode = if mode == "--full" {
        Mode::Full
    } else {
        Mode::Quick
    };
    let transports: Vec<&'static str> = transports
        .split(',')
        .map(|t| match t {
            "udp" => Ok("udp"),
            "tcp" => Ok("tcp"),
            other => Err(format!("unknown transport `{other}`")),
        })
        .collect::<Result<_, _>>()?;
    let run = |cmd: &str, args: &[&str], stdin: Option<&str>| -> Result<String, String> {
        let mut child = std::process::Command::new(cmd)
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run {cmd}: {e}"))?;
        if let Some(text) = stdin {
            use std::io::Write as _;
            child
                .stdin
                .take()
                .expect("piped")
                .write_all(text.as_bytes())
                .map_err(|e| format!("cannot feed {cmd}: {e}"))?;
        }
        let out = child
            .wait_with_output()
            .map_err(|e| format!("{cmd} failed: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "`{cmd} {}` failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    run("ip", &["link", "set", "lo", "up"], None)?;
    let servers = start_servers();
    let port = servers.tcp.port();
    // Drop one packet in 1/loss, each way, between the TCP relay and the server; count
    // every packet first.
    let per_10k = (LINKS[LOSSY].2 * 10_000.0).round() as u32;
    let rules = format!(
        "table inet volley_loss {{
  chain out {{
    type filter hook output priority 0; policy accept;
    tcp dport {port} counter
    tcp sport {port} counter
    tcp dport {port} numgen random mod 10000 < {per_10k} counter drop
    tcp sport {port} numgen random mod 10000 < {per_10k} counter drop
  }}
}}
"
    );
    run("nft", &["-f", "-"], Some(&rules))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let measured = run_link(&runtime, &servers, LOSSY, &transports, mode);
    for (transport, n, b, cell) in measured {
        println!(
            "cell {transport} {n} {b} {} {} {} {}",
            if cell.ok { "ok" } else { "failed" },
            cell.secs,
            cell.peak_mib,
            cell.cpu
        );
    }
    let listing = run("nft", &["list", "table", "inet", "volley_loss"], None)?;
    let counts: Vec<u64> = listing
        .split("packets ")
        .skip(1)
        .filter_map(|rest| rest.split_whitespace().next()?.parse().ok())
        .collect();
    let [seen_up, seen_down, dropped_up, dropped_down] = counts[..] else {
        return Err(format!("cannot read nftables' counters from:\n{listing}"));
    };
    println!(
        "tcp-packets {} {}",
        seen_up + seen_down,
        dropped_up + dropped_down
    );
    Ok(())
}

pub(crate) fn run(mode: Mode, transports: Transports) -> Report {
    let servers = start_servers();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let mut report = Report::new(
        "matrix",
        "UDP vs TCP: N small calls in batches of B (the SuperCollider grid)",
        mode,
    );
    report.rounds = rounds_for(mode, 0.0);
    report.notes.push(format!(
        "medians of {} rounds per loopback cell and {} per 1 ms cell; each cell's rounds alternate between the transports",
        rounds_for(mode, 0.0),
        rounds_for(mode, 1.0)
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
        "CPU us/call",
        "inf / 1",
        "UDP / TCP",
        "UDP / TCP CPU",
    ];
    let on: Vec<&'static str> = ["udp", "tcp"]
        .into_iter()
        .filter(|t| transports.has(t))
        .collect();
    let mut links: Vec<(usize, Measured)> = Vec::new();
    for l in 0..LOSSY {
        links.push((l, run_link(&runtime, &servers, l, &on, mode)));
    }
    // The lossy link: in a network namespace where the kernel drops TCP's packets, or
    // UDP alone (the simulator drops its datagrams) with the reason TCP is absent.
    match lossy_link_in_namespace(mode, &on) {
        Ok(run) => {
            if on.contains(&"tcp") {
                report.notes.push(format!(
                    "1% loss: UDP's datagrams are dropped by the link simulator; TCP runs in a network namespace of its own, where nftables dropped {} of the {} TCP packets between the relay and the server ({:.2}%); TCP recovers those over that leg's loopback round trip, not the 1 ms one (the relay ends its connections), which favours it when many packets are in flight",
                    run.tcp_dropped,
                    run.tcp_packets,
                    100.0 * run.tcp_dropped as f64 / run.tcp_packets.max(1) as f64
                ));
            }
            links.push((LOSSY, run.measured));
        }
        Err(why) => {
            let udp: Vec<&'static str> = on.iter().copied().filter(|t| *t == "udp").collect();
            if on.contains(&"tcp") {
                report.notes.push(format!(
                    "TCP's lossy rows are absent: {why} (it needs root, unshare and nft: the relay in user space cannot lose TCP's packets)"
                ));
            }
            if !udp.is_empty() {
                links.push((LOSSY, run_link(&runtime, &servers, LOSSY, &udp, mode)));
            }
        }
    }
    // Keyed by link, transport, N and the batch's place in BATCHES (inf last).
    let mut cells: BTreeMap<(usize, &str, u64, usize), Cell> = BTreeMap::new();
    let mut seed_form = Vec::new();
    for (l, measured) in links {
        for (transport, n, b, cell) in measured {
            seed_form.push(format!(
                "{} protocol: {transport}, link: {}, calls: {n}, batch size: {}, duration: {:.6}",
                if cell.ok { "YIPPEE!" } else { "OH NO!" },
                LINKS[l].0,
                batch_name(BATCHES[b]),
                cell.secs
            ));
            cells.insert((l, transport, n, b), cell);
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
        let cpu_us = cell.cpu * 1e6 / n as f64;
        let udp_over_tcp_cpu = (transport == "udp")
            .then(|| cells.get(&(l, "tcp", n, b)))
            .flatten()
            .map_or("-".into(), |tcp| format!("{:.2}x", cell.cpu / tcp.cpu));
        report.rows.push(vec![
            LINKS[l].0.into(),
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
            format!("{cpu_us:.1}"),
            inf_over_1,
            udp_over_tcp,
            udp_over_tcp_cpu,
        ]);
        report.data.push(json!({
            "link": LINKS[l].0, "transport": transport, "n": n, "batch": batch_name(batch),
            "ok": cell.ok, "secs": cell.secs, "calls_per_sec": n as f64 / cell.secs,
            "peak_rss_mib": cell.peak_mib, "cpu_us_per_call": cpu_us,
        }));
    }
    let failed = cells.values().filter(|c| !c.ok).count();
    report.failures = failed;
    report.notes.push(format!(
        "{} cells, {failed} failed; every reply checked; peak RSS is the whole process's (client and servers), reset before each cell; CPU is the client's and the servers' threads' (the link simulator's not counted), per call; UDP / TCP is a speed ratio (above 1.00x UDP is faster), UDP / TCP CPU a cost ratio (below 1.00x UDP costs less)",
        cells.len()
    ));
    report.notes.push(
        "at 1 ms RTT TCP runs through the link simulator's TCP relay (it delays; the relay in user space cannot lose packets, so TCP's loss comes from the kernel, as noted)"
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
