//! `machine`: a 24-board emulated machine with SC&MP's costs on, discovered and then
//! loaded and read back on every chip of every board, verified, by SpiNNMan 7.4.1 (as
//! SpiNNFrontEndCommon runs it: after discovery the machine is in SpiNNMan's data view,
//! so each chip's requests go through its own board, chip by chip) and by volley's
//! `Machine` (every board's window at once). Beside them, the machine's bound: the lesser
//! of what the cost model lets the boards answer (each board's 8 transient tags, each
//! held for the monitor's service time and the P2P hops to its chip) and this host's own
//! ceiling for the emulated machine (its reply rate with the same costs when a minimal
//! load generator keeps every board's 8 tags busy), measured in the same run.
//!
//! All of it twice, under the emulator's two models of SCP over P2P (one machine each):
//! per-hop (a request for a chip without Ethernet holds a P2P stream 1.24 ms a hop) and
//! monitors (it holds the monitors at both ends 638 us, plus 1 us a hop); both are
//! calibrated from the same measured ratio, and the lower of the two ratios is the one to
//! quote.
//!
//! The machine runs on a thread of its own, as hardware is separate; volley's client on
//! the bench's thread, SpiNNMan in its own process. Rounds are interleaved (the order
//! rotates each round) and figures are medians.

use core::net::{Ipv4Addr, SocketAddr};
use core::time::Duration;
use std::time::Instant;

use rand::{Rng, SeedableRng};
use serde_json::json;
use volley_emulator::{BoardConfig, EmulatedMachine as Emulated, MachineConfig, ScampCosts};
use volley_proto::scp::machine::Geometry;
use volley_proto::scp::sdp::Address;
use volley_proto::scp::{self, MAX_DATA_LEN};
use volley_transport_udp::{Machine, ScpConfig, WindowSize};

use super::script::{python_round, secs};
use crate::harness::serve_on_thread;
use crate::harness::{Mode, Report, median};

const BOARDS: usize = 24;
const BASE: u32 = 0x6000_0000;
/// The machine's first board; SpiNNMan always uses port 17893, so the machine takes a
/// range of loopback addresses of its own.
const FIRST: Ipv4Addr = Ipv4Addr::new(127, 0, 20, 0);
/// The first board of the machine under the second P2P model.
const SECOND: Ipv4Addr = Ipv4Addr::new(127, 0, 24, 0);
/// Requests a board holds at once: its transient tags.
const TAGS: usize = 8;

/// One system's figures in one round, in seconds.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sample {
    pub(crate) discovery: f64,
    pub(crate) write: f64,
    pub(crate) read: f64,
    /// The client's CPU seconds in discovery, the write and the read: its process's (every
    /// thread) for a Python peer, the bench's client threads' for the Rust `Machine` (the
    /// emulated machine's thread is neither's: it stands for the hardware).
    pub(crate) cpu: [f64; 3],
}

impl Sample {
    /// A Python peer's round from its JSON line (`python_suite.py`'s `discovery_s`,
    /// `discovery_cpu_s`, `write_s`, ...).
    pub(crate) fn from_line(line: &serde_json::Value, what: &str) -> Result<Self, String> {
        Ok(Self {
            discovery: secs(line, what, "discovery_s")?,
            write: secs(line, what, "write_s")?,
            read: secs(line, what, "read_s")?,
            cpu: [
                secs(line, what, "discovery_cpu_s")?,
                secs(line, what, "write_cpu_s")?,
                secs(line, what, "read_cpu_s")?,
            ],
        })
    }
}

/// CPU seconds per MiB moved, written as "write/read" from the medians of `samples`.
pub(crate) fn cpu_per_mib(samples: &[Sample], bytes: usize) -> (f64, f64) {
    let mib = bytes as f64 / f64::from(1u32 << 20);
    let of = |i: usize| median(&samples.iter().map(|s| s.cpu[i]).collect::<Vec<_>>()) / mib;
    (of(1), of(2))
}

/// Two CPU figures as a "write/read" cell, "-" when not measured.
pub(crate) fn cpu_cell((write, read): (f64, f64)) -> String {
    if write.is_nan() {
        "-".into()
    } else {
        format!("{write:.3}/{read:.3}")
    }
}

pub(crate) fn mbit(bytes: usize, secs: f64) -> f64 {
    bytes as f64 * 8.0 / f64::from(1u32 << 20) / secs.max(1e-9)
}

/// An emulated machine (or single board) serving on a thread of its own; its boards'
/// addresses.
pub(crate) fn emulate(boards: usize, base: Ipv4Addr, scamp: Option<ScampCosts>) -> Vec<SocketAddr> {
    serve_on_thread(move || async move {
        let spin = if boards == 1 {
            BoardConfig::default().spin
        } else {
            // Many boards share the thread: none may spin.
            Duration::ZERO
        };
        let machine = Emulated::bind(MachineConfig {
            boards,
            base,
            board: BoardConfig {
                spin,
                scamp,
                ..BoardConfig::default()
            },
            ..MachineConfig::default()
        })
        .await
        .unwrap_or_else(|e| panic!("the emulated machine binds {base} onwards: {e}"));
        (machine.board_addrs().to_vec(), machine)
    })
}

/// The two models of SCP over P2P the suite runs under, each on a machine of its own:
/// name, costs, the machine's first board.
fn models() -> [(&'static str, ScampCosts, Ipv4Addr); 2] {
    let [(hop, hop_costs), (monitors, monitor_costs)] = p2p_models();
    [(hop, hop_costs, FIRST), (monitors, monitor_costs, SECOND)]
}

/// The emulator's two models of SCP over P2P: name, costs.
pub(crate) fn p2p_models() -> [(&'static str, ScampCosts); 2] {
    [
        ("per-hop", ScampCosts::default()),
        ("monitors", ScampCosts::monitors()),
    ]
}

/// One model's medians: (discovery s, write Mbit/s, read Mbit/s) per system, the bound.
struct ModelRun {
    name: &'static str,
    costs: ScampCosts,
    spinnman: Vec<Sample>,
    volley: Vec<Sample>,
    ceiling: Vec<f64>,
}

pub(crate) fn run(mode: Mode, python: Option<&str>) -> Report {
    let started = Instant::now();
    let (per_chip, rounds) = match mode {
        Mode::Quick => (4 * 1024, 1),
        Mode::Full => (256 * 1024, 3),
    };
    let geometry = Geometry::for_boards(BOARDS).expect("24 boards is a machine");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let chips = geometry.chips();
    let bytes = chips * per_chip;
    let mut spinnman_error = None;
    let mut runs = Vec::new();
    for (name, costs, first) in models() {
        let addrs: Vec<SocketAddr> = emulate(BOARDS, first, Some(costs));
        let mut run = ModelRun {
            name,
            costs,
            spinnman: Vec::new(),
            volley: Vec::new(),
            ceiling: Vec::new(),
        };
        for round in 0..rounds {
            for k in 0..3 {
                match (k + round) % 3 {
                    0 => match spinnman_round(python, first, per_chip, round) {
                        Ok(sample) => run.spinnman.push(sample),
                        Err(e) => spinnman_error = Some(e),
                    },
                    1 => run
                        .volley
                        .push(runtime.block_on(volley_round(addrs[0], per_chip, round))),
                    _ => run.ceiling.push(ceiling_round(&addrs, geometry, mode)),
                }
                eprintln!(
                    "machine: {name} model: round {}/{rounds}: system {} done",
                    round + 1,
                    (k + round) % 3
                );
            }
        }
        runs.push(run);
    }

    let mut report = Report::new(
        "machine",
        format!(
            "machine: discovery, then {} KiB written to and read back from each of {chips} \
             chips of a {BOARDS}-board emulated machine with SC&MP's costs, under two models of \
             P2P (Mbit/s = 2^20 bits/s)",
            per_chip / 1024
        ),
        mode,
    );
    report.rounds = rounds;
    report.columns = vec![
        "P2P model",
        "system",
        "discovery s",
        "write Mbit/s",
        "read Mbit/s",
        "of bound w/r",
        "client CPU s/MiB w/r",
        "discovery CPU s",
    ];
    let mut ratios = Vec::new();
    for run in &runs {
        let model = model_mbit(&run.costs, geometry, TAGS);
        let host = median(&run.ceiling);
        let bound = model.min(host);
        let pick = |samples: &[Sample], f: fn(&Sample) -> f64| {
            median(&samples.iter().map(f).collect::<Vec<_>>())
        };
        let figures = |samples: &[Sample]| {
            (
                pick(samples, |s| s.discovery),
                mbit(bytes, pick(samples, |s| s.write)),
                mbit(bytes, pick(samples, |s| s.read)),
            )
        };
        let (s_disc, s_write, s_read) = figures(&run.spinnman);
        let (v_disc, v_write, v_read) = figures(&run.volley);
        let (s_cpu, v_cpu) = (
            cpu_per_mib(&run.spinnman, bytes),
            cpu_per_mib(&run.volley, bytes),
        );
        let disc_cpu =
            |samples: &[Sample]| median(&samples.iter().map(|s| s.cpu[0]).collect::<Vec<_>>());
        let share = |w: f64, r: f64| format!("{:.0}%/{:.0}%", 100.0 * w / bound, 100.0 * r / bound);
        let secs = |s: f64| {
            if s.is_nan() {
                "-".into()
            } else {
                format!("{s:.3}")
            }
        };
        // JavaSpiNNaker loads PARALLEL_DEFAULT = 4 boards at once, each with SpiNNMan's
        // kind of SCP loop: modelled as 4 times SpiNNMan's rate here, within the bound.
        let (j_write, j_read) = ((4.0 * s_write).min(bound), (4.0 * s_read).min(bound));
        for (system, disc, write, read, cpu, cpu_disc) in [
            (
                "SpiNNMan 7.4.1 (its SCP path: FEC without fast data in)",
                s_disc,
                s_write,
                s_read,
                cpu_cell(s_cpu),
                secs(disc_cpu(&run.spinnman)),
            ),
            (
                "JavaSpiNNaker (modelled: 4 boards at once at SpiNNMan's rate)",
                f64::NAN,
                j_write,
                j_read,
                "-".into(),
                "-".into(),
            ),
            (
                "volley Machine",
                v_disc,
                v_write,
                v_read,
                cpu_cell(v_cpu),
                secs(disc_cpu(&run.volley)),
            ),
        ] {
            report.rows.push(vec![
                run.name.into(),
                system.into(),
                secs(disc),
                format!("{write:.2}"),
                format!("{read:.2}"),
                share(write, read),
                cpu,
                cpu_disc,
            ]);
        }
        for (name, value) in [
            ("bound: cost model (24 boards)", model),
            ("bound: this host's ceiling", host),
        ] {
            report.rows.push(vec![
                run.name.into(),
                name.into(),
                "-".into(),
                format!("{value:.2}"),
                format!("{value:.2}"),
                "-".into(),
                "-".into(),
                "-".into(),
            ]);
        }
        report.notes.push(format!(
            "{} model: volley / SpiNNMan: discovery {:.1}x faster, write {:.1}x, read {:.1}x; \
             per client CPU-second: write {:.1}x, read {:.1}x; volley / JavaSpiNNaker \
             (modelled): write {:.1}x, read {:.1}x; volley / the machine's bound ({bound:.2} \
             Mbit/s, the lesser of the two): write {:.0}%, read {:.0}%",
            run.name,
            s_disc / v_disc,
            v_write / s_write,
            v_read / s_read,
            s_cpu.0 / v_cpu.0,
            s_cpu.1 / v_cpu.1,
            v_write / j_write,
            v_read / j_read,
            100.0 * v_write / bound,
            100.0 * v_read / bound
        ));
        ratios.push((
            s_disc / v_disc,
            v_write / s_write,
            v_read / s_read,
            v_write / j_write,
            v_read / j_read,
        ));
        let rounds_of =
            |samples: &[Sample], f: fn(&Sample) -> f64| samples.iter().map(f).collect::<Vec<_>>();
        for (system, samples, disc, write, read) in [
            ("SpiNNMan 7.4.1", &run.spinnman, s_disc, s_write, s_read),
            ("volley Machine", &run.volley, v_disc, v_write, v_read),
        ] {
            report.data.push(json!({
                "model": run.name,
                "system": system,
                "discovery_s": disc,
                "write_mbit_s": write,
                "read_mbit_s": read,
                "discovery_rounds": rounds_of(samples, |s| s.discovery),
                "cpu_rounds_s": samples.iter().map(|s| s.cpu).collect::<Vec<_>>(),
                "write_rounds_s": rounds_of(samples, |s| s.write),
                "read_rounds_s": rounds_of(samples, |s| s.read),
            }));
        }
        report.data.push(json!({
            "model": run.name,
            "bytes_per_chip": per_chip,
            "chips": chips,
            "model_bound_mbit_s": model,
            "host_ceiling_mbit_s": host,
            "host_ceiling_rounds": run.ceiling,
            "ratios": [
                { "ratio": "discovery: SpiNNMan / volley", "value": s_disc / v_disc },
                { "ratio": "write: volley / SpiNNMan", "value": v_write / s_write },
                { "ratio": "read: volley / SpiNNMan", "value": v_read / s_read },
                { "ratio": "write: volley / bound", "value": v_write / bound },
                { "ratio": "read: volley / bound", "value": v_read / bound },
                { "ratio": "write: volley / JavaSpiNNaker (modelled)", "value": v_write / j_write },
                { "ratio": "read: volley / JavaSpiNNaker (modelled)", "value": v_read / j_read },
                { "ratio": "write per client CPU-second: volley / SpiNNMan", "value": s_cpu.0 / v_cpu.0 },
                { "ratio": "read per client CPU-second: volley / SpiNNMan", "value": s_cpu.1 / v_cpu.1 },
            ],
        }));
    }
    let lower = |f: fn(&(f64, f64, f64, f64, f64)) -> f64| {
        ratios.iter().map(f).fold(f64::INFINITY, f64::min)
    };
    report.notes.push(format!(
        "the lower of the two models, volley / SpiNNMan: discovery {:.1}x faster, write {:.1}x, \
         read {:.1}x; volley / JavaSpiNNaker (modelled): write {:.1}x, read {:.1}x",
        lower(|r| r.0),
        lower(|r| r.1),
        lower(|r| r.2),
        lower(|r| r.3),
        lower(|r| r.4)
    ));
    let hops = ScampCosts::default();
    let monitors = ScampCosts::monitors();
    report.notes.push(format!(
        "cost models: {:.1} us a request at the Ethernet chip, {} streams a chip, {} buffers \
         and {TAGS} tags a board; per-hop: a request for another chip holds a P2P stream \
         {:.2} ms a hop; monitors: it holds the Ethernet chip's monitor and its own {:.0} us, \
         plus {:.0} us a hop (both calibrated from SpiNNFrontEndCommon #295's 11x between \
         Ethernet and other chips); the bound takes each chip equally often. SpiNNMan reads \
         each chip through the board SpiNNMan's data view gives it (as FEC runs it without \
         fast data in); JavaSpiNNaker, which FEC can use instead, loads 4 boards at once \
         (its PARALLEL_DEFAULT), modelled as 4 times SpiNNMan's rate within the bound (it does \
         not run here: it needs Java and Maven Central); client CPU: the Python process's \
         for SpiNNMan, the bench's client threads' for volley, the emulated machine's neither's",
        hops.service.as_secs_f64() * 1e6,
        hops.streams,
        hops.buffers,
        hops.p2p_hop.as_secs_f64() * 1e3,
        monitors.p2p_monitor.as_secs_f64() * 1e6,
        monitors.p2p_hop.as_secs_f64() * 1e6,
    ));
    if let Some(e) = spinnman_error {
        // A peer that did not run is a failed suite, not a footnote.
        report
            .notes
            .push(format!("FAILED: SpiNNMan did not run in every round: {e}"));
        report.failures += 1;
    }
    report.notes.push(format!(
        "the suite took {:.0} s",
        started.elapsed().as_secs_f64()
    ));
    report
}

/// What the cost model lets the machine answer, in Mbit/s of 256-byte requests spread
/// evenly over every chip: each board keeps `tags` requests in flight, each holding its
/// tag for the monitor's service and its P2P time (per-hop: the hops to its chip;
/// monitors: the monitors' time and the hops, the Ethernet monitor held throughout), and
/// no board answers faster than its Ethernet monitor is free.
pub(crate) fn model_mbit(costs: &ScampCosts, geometry: Geometry, tags: usize) -> f64 {
    let ethernet = geometry.ethernet(0).expect("a board");
    let on_board: Vec<(u8, u8)> = geometry
        .iter_chips()
        .filter(|&(x, y)| geometry.board_of(x, y) == Some(0))
        .collect();
    let hops: u32 = on_board.iter().map(|&c| geometry.hops(ethernet, c)).sum();
    let mean_hops = f64::from(hops) / on_board.len() as f64;
    let far = on_board.iter().filter(|&&c| c != ethernet).count() as f64 / on_board.len() as f64;
    let service = costs.service.as_secs_f64();
    let p2p = far * costs.p2p_monitor.as_secs_f64() + costs.p2p_hop.as_secs_f64() * mean_hops;
    let hold = service + p2p;
    let monitor = if costs.p2p_monitor.is_zero() {
        service
    } else {
        hold
    };
    let per_board = (tags as f64 / hold).min(1.0 / monitor);
    per_board * geometry.boards() as f64 * (MAX_DATA_LEN * 8) as f64 / f64::from(1u32 << 20)
}

pub(crate) async fn volley_round(root: SocketAddr, per_chip: usize, round: usize) -> Sample {
    let config = ScpConfig {
        window: WindowSize::Auto,
        ..ScpConfig::default()
    };
    let cpu = || crate::harness::cpu_split().0;
    let (start, cpu0) = (Instant::now(), cpu());
    let mut machine = Machine::discover(root, config)
        .await
        .expect("volley discovers the machine");
    let (discovery, discovery_cpu) = (start.elapsed().as_secs_f64(), cpu() - cpu0);
    let chips: Vec<Address> = machine
        .chips()
        .iter()
        .map(|&(x, y)| Address::core(x, y, 0))
        .collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(round as u64);
    let mut data = vec![0u8; chips.len() * per_chip];
    rng.fill(&mut data[..]);
    let writes: Vec<_> = chips
        .iter()
        .zip(data.chunks(per_chip))
        .map(|(&c, d)| (c, BASE, d))
        .collect();
    let (start, cpu0) = (Instant::now(), cpu());
    machine
        .write_many(&writes)
        .await
        .expect("volley writes every chip");
    let (write, write_cpu) = (start.elapsed().as_secs_f64(), cpu() - cpu0);
    let mut back = vec![0u8; data.len()];
    let mut reads: Vec<_> = chips
        .iter()
        .zip(back.chunks_mut(per_chip))
        .map(|(&c, b)| (c, BASE, b))
        .collect();
    let (start, cpu0) = (Instant::now(), cpu());
    machine
        .read_many(&mut reads)
        .await
        .expect("volley reads every chip");
    let (read, read_cpu) = (start.elapsed().as_secs_f64(), cpu() - cpu0);
    drop(reads);
    assert!(back == data, "volley read back differs from what it wrote");
    Sample {
        discovery,
        write,
        read,
        cpu: [discovery_cpu, write_cpu, read_cpu],
    }
}

fn spinnman_round(
    python: Option<&str>,
    root: Ipv4Addr,
    per_chip: usize,
    round: usize,
) -> Result<Sample, String> {
    let args = [
        "machine".to_string(),
        "spinnman".into(),
        root.to_string(),
        per_chip.to_string(),
        round.to_string(),
    ];
    Sample::from_line(&python_round(python, "SpiNNMan", &args)?, "SpiNNMan")
}

/// This host's reply rate for the emulated machine, in Mbit/s of 256-byte writes: a
/// thread keeps every board's 8 tags busy (a new request the moment a reply comes, each
/// board's chips in turn) and counts replies for a fixed time. No client logic: what
/// the emulator and the host can answer, and no more.
pub(crate) fn ceiling_round(boards: &[SocketAddr], geometry: Geometry, mode: Mode) -> f64 {
    use std::net::UdpSocket;
    let run_for = match mode {
        Mode::Quick => Duration::from_secs(2),
        Mode::Full => Duration::from_secs(5),
    };
    let data = [0x5au8; MAX_DATA_LEN];
    let mut links = Vec::new();
    for (board, &addr) in boards.iter().enumerate() {
        let socket = UdpSocket::bind("0.0.0.0:0").expect("bind");
        socket.connect(addr).expect("connect");
        socket.set_nonblocking(true).expect("nonblocking");
        let chips: Vec<(u8, u8)> = geometry
            .iter_chips()
            .filter(|&(x, y)| geometry.board_of(x, y) == Some(board))
            .collect();
        links.push((socket, chips, 0usize));
    }
    let send = |socket: &UdpSocket, chip: (u8, u8), seq: u16| {
        let mut request =
            scp::write_request(Address::core(chip.0, chip.1, 0), BASE, &data).expect("a request");
        request.seq = seq;
        let mut buf = [0u8; scp::MAX_DATAGRAM_LEN];
        let len = request.emit(&mut buf).expect("fits");
        let _ = socket.send(&buf[..len]);
    };
    let mut seq = 0u16;
    for (socket, chips, next) in &mut links {
        for _ in 0..TAGS {
            seq = seq.wrapping_add(1);
            send(socket, chips[*next % chips.len()], seq);
            *next += 1;
        }
    }
    let mut buf = [0u8; 2048];
    let mut replies = 0u64;
    let mut last_reply = vec![Instant::now(); links.len()];
    let start = Instant::now();
    while start.elapsed() < run_for {
        let mut idle = true;
        for (i, (socket, chips, next)) in links.iter_mut().enumerate() {
            while socket.recv(&mut buf).is_ok() {
                idle = false;
                replies += 1;
                last_reply[i] = Instant::now();
                seq = seq.wrapping_add(1);
                send(socket, chips[*next % chips.len()], seq);
                *next += 1;
            }
            // A request that got no answer (a busy board dropped it): put another in
            // flight, so the tags stay busy.
            if last_reply[i].elapsed() > Duration::from_millis(100) {
                last_reply[i] = Instant::now();
                seq = seq.wrapping_add(1);
                send(socket, chips[*next % chips.len()], seq);
                *next += 1;
            }
        }
        if idle {
            std::thread::yield_now();
        }
    }
    let rate = replies as f64 / start.elapsed().as_secs_f64();
    // Take the replies still in flight before the next system runs, so it finds every
    // tag free.
    let mut outstanding = links.len() * TAGS;
    let drain = Instant::now();
    while outstanding > 0 && drain.elapsed() < Duration::from_millis(500) {
        for (socket, _, _) in &links {
            while outstanding > 0 && socket.recv(&mut buf).is_ok() {
                outstanding -= 1;
            }
        }
        std::thread::yield_now();
    }
    rate * (MAX_DATA_LEN * 8) as f64 / f64::from(1u32 << 20)
}
