//! `scp`: the seed's measure (rig PR #117): a block written then read back through SCP,
//! in Mbit/s (2^20 bits/s, as rig's scripts print), for volley at windows 1/2/4/8/16 and
//! rig 2.4.1 at windows 1 and 8, against the same emulator, directly (RTT 0) and through
//! the link simulator at 1 ms RTT and at 1 ms RTT with 1% loss each way; then the same
//! rows again against a board with SC&MP's costs modelled (a request served every
//! 63.8 us at the Ethernet chip, the one these transfers use), whose figures mean
//! something for hardware. The raw UDP
//! request/response ceiling of this machine (a bare echo of the same datagram sizes, one
//! datagram per system call and 16 per GSO/GRO call) is the limit.
//!
//! The emulator (and the echo server) run on a thread of their own, as a board is a
//! separate device; volley's client runs on the bench's thread, rig in its own process.

use core::net::SocketAddr;
use core::time::Duration;
use std::sync::mpsc;
use std::thread;
use std::time::Instant;

use serde_json::{Value, json};
use tokio::sync::oneshot;
use volley_emulator::{Board, BoardConfig, ScampCosts};
use volley_netsim::{LinkConfig, LinkSim};

use volley_proto::scp::sdp::Address;
use volley_transport_udp::{ScpClient, ScpConfig};

use super::script::{python_round, secs};
use crate::harness::{Mode, Report, median};

mod ceiling;

use ceiling::raw_ceiling;

const BASE: u32 = 0x6000_0000;
const MIB: usize = 1 << 20;
/// The clients, in table order: (name, is rig, window).
const CLIENTS: [(&str, bool, usize); 8] = [
    ("volley w1", false, 1),
    ("volley w2", false, 2),
    ("volley w4", false, 4),
    ("volley w8", false, 8),
    ("volley w16", false, 16),
    ("rig w1", true, 1),
    ("rig w8", true, 8),
    ("rig w16", true, 16),
];

/// One link condition: a target RTT and a loss rate each way, to a board that answers as
/// fast as the host allows or with SC&MP's costs modelled.
#[derive(Clone, Copy, Debug)]
struct Link {
    name: &'static str,
    rtt: Duration,
    loss: f64,
    costs: bool,
}

const fn link(name: &'static str, rtt_ms: u64, loss: f64, costs: bool) -> Link {
    Link {
        name,
        rtt: Duration::from_millis(rtt_ms),
        loss,
        costs,
    }
}

/// The first three to the plain board, the same three to a board with SC&MP's costs.
const LINKS: [Link; 6] = [
    link("RTT 0", 0, 0.0, false),
    link("RTT 1 ms", 1, 0.0, false),
    link("RTT 1 ms + 1% loss", 1, 0.01, false),
    link("SC&MP costs, RTT 0", 0, 0.0, true),
    link("SC&MP costs, RTT 1 ms", 1, 0.0, true),
    link("SC&MP costs, RTT 1 ms + 1% loss", 1, 0.01, true),
];

/// Figures of one cell in one round.
#[derive(Clone, Copy, Debug, Default)]
struct Sample {
    write_mbit: f64,
    read_mbit: f64,
    srtt_us: f64,
    retransmits: f64,
    /// The client's CPU seconds per MiB written and read: rig's Python process's, volley's
    /// client threads' in the bench (the board's and the link simulator's are neither's).
    write_cpu: f64,
    read_cpu: f64,
}

/// A server running on its own thread and runtime until dropped.
struct Server {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<thread::JoinHandle<()>>,
}

fn mbit(bytes: usize, elapsed: Duration) -> f64 {
    bytes as f64 * 8.0 / f64::from(1u32 << 20) / elapsed.as_secs_f64().max(1e-9)
}

pub(crate) fn run(mode: Mode, python: Option<&str>) -> Report {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(run_async(mode, python))
}

async fn run_async(mode: Mode, python: Option<&str>) -> Report {
    let rounds = match mode {
        Mode::Quick => 1,
        Mode::Full => 5,
    };
    // Quick mode moves 10 MiB where the link is fast (2 MiB for rig, which is slower),
    // 512 KiB through the 1 ms link (window 1 needs ~6 s per MiB there) and less for rig
    // on the lossy link (each loss costs it a fixed 0.5 s); full mode moves the seed's
    // 10 MiB everywhere.
    let size_for = |link: &Link, rig: bool| match (mode, link.rtt.is_zero(), link.loss > 0.0, rig) {
        (Mode::Full, ..) => 10 * MIB,
        (Mode::Quick, true, _, false) => 10 * MIB,
        (Mode::Quick, true, _, true) => 2 * MIB,
        (Mode::Quick, false, _, false) => MIB / 2,
        (Mode::Quick, false, false, true) => MIB / 4,
        (Mode::Quick, false, true, true) => MIB / 8,
    };
    let board = Server::board(None);
    let costly = Server::board(Some(ScampCosts::default()));
    let ceiling = raw_ceiling(mode).await;
    // The relay itself adds latency; take it off the configured delay so the link's RTT
    // is the target's. The table shows the RTT volley measured.
    let relay_rtt = relay_overhead(board.addr).await;
    let mut samples: Vec<Vec<Vec<Sample>>> = vec![vec![Vec::new(); CLIENTS.len()]; LINKS.len()];
    let mut rig_error = None;

    for round in 0..rounds {
        for (li, link) in LINKS.iter().enumerate() {
            let board_addr = if link.costs { costly.addr } else { board.addr };
            let relay = (!link.rtt.is_zero() || link.loss > 0.0).then(|| {
                LinkSim::start(
                    "127.0.0.1:0".parse().expect("addr"),
                    board_addr,
                    LinkConfig {
                        delay: link.rtt.saturating_sub(relay_rtt) / 2,
                        loss: link.loss,
                        seed: round as u64,
                        ..LinkConfig::default()
                    },
                )
                .expect("the link simulator starts")
            });
            let target = relay.as_ref().map_or(board_addr, LinkSim::local_addr);
            for (ci, &(_, rig, window)) in CLIENTS.iter().enumerate() {
                let size = size_for(link, rig);
                let sample = if rig {
                    rig_round(python, target.port(), window, size)
                } else {
                    Ok(volley_round(target, window, size).await)
                };
                match sample {
                    Ok(sample) => samples[li][ci].push(sample),
                    Err(e) => rig_error = Some(e),
                }
            }
            eprintln!("scp: round {}/{rounds}: {} done", round + 1, link.name);
        }
    }

    let mut report = Report::new(
        "scp",
        "SCP: write then read back (Mbit/s = 2^20 bits/s), emulator on loopback",
        mode,
    );
    report.rounds = rounds;
    report.columns = vec![
        "link",
        "client",
        "size",
        "write Mbit/s",
        "read Mbit/s",
        "RTT us",
        "retx/round",
        "client CPU s/MiB w/r",
    ];
    // medians[link][client] = (write, read), and the same of CPU per MiB
    let mut medians = vec![vec![(f64::NAN, f64::NAN); CLIENTS.len()]; LINKS.len()];
    let mut cpus = vec![vec![(f64::NAN, f64::NAN); CLIENTS.len()]; LINKS.len()];
    for (li, link) in LINKS.iter().enumerate() {
        for (ci, &(name, rig, _)) in CLIENTS.iter().enumerate() {
            let cell = &samples[li][ci];
            if cell.is_empty() {
                continue;
            }
            let pick = |f: fn(&Sample) -> f64| median(&cell.iter().map(f).collect::<Vec<_>>());
            let (w, r) = (pick(|s| s.write_mbit), pick(|s| s.read_mbit));
            medians[li][ci] = (w, r);
            let cpu = (pick(|s| s.write_cpu), pick(|s| s.read_cpu));
            cpus[li][ci] = cpu;
            let rtt = pick(|s| s.srtt_us);
            let size = size_for(link, rig);
            report.rows.push(vec![
                link.name.to_owned(),
                name.to_owned(),
                format!("{} KiB", size / 1024),
                format!("{w:.2}"),
                format!("{r:.2}"),
                if rtt.is_nan() {
                    "-".into()
                } else {
                    format!("{rtt:.0}")
                },
                if rig {
                    "-".into()
                } else {
                    format!("{:.0}", pick(|s| s.retransmits))
                },
                format!("{:.3}/{:.3}", cpu.0, cpu.1),
            ]);
            report.data.push(json!({
                "link": link.name,
                "client": name,
                "bytes": size,
                "write_mbit_s": w,
                "read_mbit_s": r,
                "write_rounds": cell.iter().map(|s| s.write_mbit).collect::<Vec<_>>(),
                "read_rounds": cell.iter().map(|s| s.read_mbit).collect::<Vec<_>>(),
                "srtt_us": if rtt.is_nan() { Value::Null } else { json!(rtt) },
                "write_cpu_s_per_mib": cpu.0,
                "read_cpu_s_per_mib": cpu.1,
            }));
        }
    }
    for (name, value) in [
        ("raw UDP echo, 16 per GSO/GRO call", ceiling.mbit_16_gso),
        ("raw UDP echo, 16 in flight", ceiling.mbit_16),
        ("raw UDP echo, 1 in flight", ceiling.mbit_1),
    ] {
        report.rows.push(vec![
            "RTT 0".into(),
            name.into(),
            "-".into(),
            format!("{value:.2}"),
            format!("{value:.2}"),
            "-".into(),
            "-".into(),
            "-".into(),
        ]);
    }

    let client = |name: &str| CLIENTS.iter().position(|c| c.0 == name).expect("a client");
    let mut ratios: Vec<Value> = Vec::new();
    let mut notes = Vec::new();
    let mut say = |name: String, a: (f64, f64), b: (f64, f64)| {
        let (w, r) = (a.0 / b.0, a.1 / b.1);
        if w.is_finite() && r.is_finite() {
            notes.push(format!("{name}: write {w:.2}x, read {r:.2}x"));
            ratios.push(json!({ "ratio": name, "write": w, "read": r }));
        }
    };
    for li in [1, 2] {
        say(
            format!("{}: volley window 8 / window 1", LINKS[li].name),
            medians[li][client("volley w8")],
            medians[li][client("volley w1")],
        );
    }
    for w in [1, 8] {
        for (li, link) in LINKS.iter().enumerate() {
            let (v, r) = (
                client(&format!("volley w{w}")),
                client(&format!("rig w{w}")),
            );
            say(
                format!("{}: volley / rig at window {w}", link.name),
                medians[li][v],
                medians[li][r],
            );
            // Bytes per client CPU-second: the inverse ratio of CPU per MiB.
            say(
                format!(
                    "{}: volley / rig at window {w}, per client CPU-second",
                    link.name
                ),
                cpus[li][r],
                cpus[li][v],
            );
        }
    }
    // On the lossless 1 ms link the bound at window W is W x 256 B per round trip, the
    // round trip being the link's (the relay's own delay is taken out of it) plus the
    // plain board's modelled service time, which is none: a bound no client's own run
    // sets.
    let lossless = 1;
    let trip = LINKS[lossless].rtt.as_secs_f64();
    let per_window = 256.0 * 8.0 / f64::from(1 << 20) / trip;
    let mut shares = Vec::new();
    for (ci, (name, _, window)) in CLIENTS.iter().enumerate() {
        let (w, r) = medians[lossless][ci];
        let bound = (per_window * *window as f64, per_window * *window as f64);
        let share = (w / bound.0, r / bound.1);
        if share.0.is_finite() && share.1.is_finite() {
            shares.push(format!(
                "{name} {:.0}%/{:.0}%",
                100.0 * share.0,
                100.0 * share.1
            ));
            ratios.push(json!({
                "ratio": format!("{}: {name} / window bound", LINKS[lossless].name),
                "write": share.0,
                "read": share.1,
            }));
        }
    }
    notes.push(
        "client CPU s/MiB: rig's Python process's (every thread) per MiB, volley's client \
         threads' in the bench; the board's thread and the link simulator's are neither's"
            .into(),
    );
    notes.push(format!(
        "{}: share of the window bound (W x 256 B per round trip of the link, {:.2} Mbit/s a \
         request in flight), write/read: {}",
        LINKS[lossless].name,
        per_window,
        shares.join(", ")
    ));
    let best = CLIENTS
        .iter()
        .enumerate()
        .filter(|(_, c)| !c.1)
        .map(|(ci, _)| medians[0][ci].0.min(medians[0][ci].1))
        .fold(0.0, f64::max);
    notes.push(format!(
        "volley's best RTT-0 figure (the slower of write and read) is {:.0}% of the raw UDP \
         echo with 16 datagrams per GSO/GRO call ({:.2} Mbit/s), {:.0}% of the echo with 16 \
         in flight one per call ({:.2} Mbit/s)",
        100.0 * best / ceiling.mbit_16_gso,
        ceiling.mbit_16_gso,
        100.0 * best / ceiling.mbit_16,
        ceiling.mbit_16
    ));
    notes.push(format!(
        "the relay's own RTT ({} us) was taken off the configured 1 ms",
        relay_rtt.as_micros()
    ));
    if let Some(e) = rig_error {
        // A peer that did not run is a failed suite, not a footnote.
        notes.push(format!("FAILED: rig did not run in every round: {e}"));
        report.failures += 1;
    }
    ratios.push(json!({ "ratio": "volley best / raw ceiling (GSO/GRO echo)", "value": best / ceiling.mbit_16_gso }));
    ratios.push(json!({ "ratio": "volley best / raw ceiling (one per call)", "value": best / ceiling.mbit_16 }));
    report.data.push(json!({
        "ratios": ratios,
        "ceiling_mbit_s_16": ceiling.mbit_16,
        "ceiling_mbit_s_16_gso": ceiling.mbit_16_gso,
        "ceiling_mbit_s_1": ceiling.mbit_1,
        "relay_rtt_us": relay_rtt.as_micros() as u64,
    }));
    report.notes = notes;
    drop(board);
    drop(costly);
    report
}

impl Server {
    /// Runs `serve` on a new thread with its own runtime; it sends its address, then
    /// serves until the stop signal.
    fn start<F, Fut>(serve: F) -> Self
    where
        F: FnOnce(mpsc::Sender<SocketAddr>, oneshot::Receiver<()>) -> Fut + Send + 'static,
        Fut: Future<Output = ()>,
    {
        let (addr_tx, addr_rx) = mpsc::channel();
        let (stop_tx, stop_rx) = oneshot::channel();
        let thread = thread::spawn(move || {
            // The board stands for hardware: its CPU is not the client's.
            crate::harness::register_server_thread();
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a tokio runtime")
                .block_on(serve(addr_tx, stop_rx));
        });
        let addr = addr_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the server started");
        Self {
            addr,
            stop: Some(stop_tx),
            thread: Some(thread),
        }
    }

    /// The emulator with its default settings, and SC&MP's costs if given.
    fn board(scamp: Option<ScampCosts>) -> Self {
        Self::start(move |addr, stop| async move {
            let board = Board::bind(
                "127.0.0.1:0".parse().expect("addr"),
                None,
                BoardConfig {
                    scamp,
                    ..BoardConfig::default()
                },
            )
            .await
            .expect("the emulator binds");
            let _ = addr.send(board.udp_addr());
            let _ = stop.await;
            board.shutdown().await;
        })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn volley_round(target: SocketAddr, window: usize, size: usize) -> Sample {
    let config = ScpConfig {
        max_tries: 20,
        ..ScpConfig::default().with_window(window)
    };
    let mut client = ScpClient::connect(target, config).await.expect("socket");
    let chip = Address::core(0, 0, 0);
    let data: Vec<u8> = (0..size).map(|i| (i * 31 + 7) as u8).collect();
    let cpu = || crate::harness::cpu_split().0;
    let (start, cpu0) = (Instant::now(), cpu());
    client.write(chip, BASE, &data).await.expect("volley write");
    let (wrote, write_cpu) = (start.elapsed(), cpu() - cpu0);
    let (start, cpu0) = (Instant::now(), cpu());
    let back = client
        .read_bytes(chip, BASE, size)
        .await
        .expect("volley read");
    let (read, read_cpu) = (start.elapsed(), cpu() - cpu0);
    let mib = size as f64 / MIB as f64;
    assert!(back == data, "volley read back differs from what it wrote");
    let stats = client.stats();
    Sample {
        write_mbit: mbit(size, wrote),
        read_mbit: mbit(size, read),
        srtt_us: stats.srtt.map_or(f64::NAN, |d| d.as_micros() as f64),
        retransmits: stats.retransmits as f64,
        write_cpu: write_cpu / mib,
        read_cpu: read_cpu / mib,
    }
}

/// The RTT the relay adds by itself (no delay configured), from volley's estimator.
async fn relay_overhead(board: SocketAddr) -> Duration {
    let relay = LinkSim::start(
        "127.0.0.1:0".parse().expect("addr"),
        board,
        LinkConfig::default(),
    )
    .expect("the link simulator starts");
    let sample = volley_round(relay.local_addr(), 1, 256 * 1024).await;
    Duration::from_micros(if sample.srtt_us.is_finite() {
        sample.srtt_us as u64
    } else {
        0
    })
}

fn rig_round(
    python: Option<&str>,
    port: u16,
    window: usize,
    size: usize,
) -> Result<Sample, String> {
    let args = [
        "board".to_string(),
        "rig".into(),
        format!("127.0.0.1:{port}"),
        size.to_string(),
        "1".into(),
        window.to_string(),
    ];
    let line = python_round(python, "rig", &args)?;
    let mib = size as f64 / MIB as f64;
    Ok(Sample {
        write_cpu: secs(&line, "rig", "write_cpu_s")? / mib,
        read_cpu: secs(&line, "rig", "read_cpu_s")? / mib,
        write_mbit: mbit(
            size,
            Duration::from_secs_f64(secs(&line, "rig", "write_s")?),
        ),
        read_mbit: mbit(size, Duration::from_secs_f64(secs(&line, "rig", "read_s")?)),
        srtt_us: f64::NAN,
        retransmits: f64::NAN,
    })
}
