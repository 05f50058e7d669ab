//! `python`: volley from Python beside SpiNNaker's own Python tools, every system timed
//! from Python in a process of its own (`benches/python_suite.py`).
//!
//! On emulated machines of 1, 3 and 24 boards with SC&MP's costs modelled (each under both of
//! the emulator's P2P models, per-hop and monitors, as the `machine` suite), every chip is
//! loaded and read back, verified, by (a) SpiNNMan 7.4.1 chip by chip with the machine in
//! its data view (as SpiNNFrontEndCommon runs it), (b) the same loop after
//! `volley.spinnman.accelerate`, (c) `volley.Machine.write_many`/`read_many`, and, beside
//! them, the Rust `Machine` and the machine's bound (as the `machine` suite measures them).
//! On one board, 10 MiB is written and read back on chip (0, 0) by SpiNNMan, rig 2.4.1 at
//! windows 1, 8 and 16 and `volley.Board`, with the cost model (every client held to one
//! board's modelled rate) and without it (host speed). Rounds interleave every system of a
//! setup (the order rotates each round); figures are medians.

use core::net::{Ipv4Addr, SocketAddr};
use std::time::Instant;

use serde_json::json;
use volley_emulator::ScampCosts;
use volley_proto::scp::MAX_DATA_LEN;
use volley_proto::scp::machine::Geometry;

use super::machine::{
    Sample, ceiling_round, cpu_cell, cpu_per_mib, emulate, mbit, model_mbit, p2p_models,
    volley_round,
};
use super::script::{python_round, secs};
use crate::harness::{Mode, Report, Table, median};

/// The machines, each on loopback addresses of its own (SpiNNMan always uses port
/// 17893): boards, first board's address under each P2P model (per-hop, monitors).
const MACHINES: [(usize, [Ipv4Addr; 2]); 3] = [
    (
        1,
        [Ipv4Addr::new(127, 0, 26, 0), Ipv4Addr::new(127, 0, 27, 0)],
    ),
    (
        3,
        [Ipv4Addr::new(127, 0, 21, 0), Ipv4Addr::new(127, 0, 28, 0)],
    ),
    (
        24,
        [Ipv4Addr::new(127, 0, 20, 0), Ipv4Addr::new(127, 0, 24, 0)],
    ),
];
/// One board with the cost model, and one answering at host speed.
const BOARD_COSTS: Ipv4Addr = Ipv4Addr::new(127, 0, 22, 0);
const BOARD_HOST: Ipv4Addr = Ipv4Addr::new(127, 0, 23, 0);
const BOARD_BYTES: usize = 10 << 20;
/// A board's transient tags (`accelerate` holds them all by default).
const TAGS: usize = 8;

/// The machine rows, in table order.
const MACHINE_SYSTEMS: [&str; 4] = [
    "(a) SpiNNMan 7.4.1, chip by chip",
    "(b) SpiNNMan + accelerate, chip by chip",
    "(c) volley.Machine write_many/read_many",
    "Rust Machine write_many/read_many",
];
/// The one-board rows, in table order: name, script system, rig window, and whether it
/// runs against the cost model too. rig at window 16 does not: past the board's 8
/// transient tags SC&MP drops requests, and rig gives up after 5 tries of 0.5 s.
const BOARD_SYSTEMS: [(&str, &str, usize, bool); 5] = [
    ("SpiNNMan 7.4.1", "spinnman", 0, true),
    ("rig w1", "rig", 1, true),
    ("rig w8", "rig", 8, true),
    ("rig w16", "rig", 16, false),
    ("volley.Board", "volley", 0, true),
];

/// Two figures: write and read, or a phase's wall and CPU seconds.
type Pair = (f64, f64);

/// "1 board, per-hop", "3 boards, monitors".
fn label(m: &MachineRun) -> String {
    match m.boards {
        1 => format!("1 board, {}", m.model),
        n => format!("{n} boards, {}", m.model),
    }
}

/// One machine's samples under one P2P model: the four systems', and the host ceiling's.
struct MachineRun {
    boards: usize,
    model: &'static str,
    costs: ScampCosts,
    addrs: Vec<SocketAddr>,
    samples: [Vec<Sample>; 4],
    ceiling: Vec<f64>,
}

pub(crate) fn run(mode: Mode, python: Option<&str>) -> Report {
    let started = Instant::now();
    let (per_chip, rounds) = match mode {
        Mode::Quick => (4 * 1024, 1),
        Mode::Full => (64 * 1024, 3),
    };
    let costs = ScampCosts::default();
    let mut machines: Vec<MachineRun> = MACHINES
        .iter()
        .flat_map(|&(boards, bases)| {
            p2p_models()
                .into_iter()
                .zip(bases)
                .map(move |((model, costs), base)| MachineRun {
                    boards,
                    model,
                    costs,
                    addrs: emulate(boards, base, Some(costs)),
                    samples: Default::default(),
                    ceiling: Vec::new(),
                })
        })
        .collect();
    let board_hosts = [BOARD_COSTS, BOARD_HOST];
    emulate(1, BOARD_COSTS, Some(costs));
    emulate(1, BOARD_HOST, None);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let mut errors: Vec<String> = Vec::new();
    // Each one-board setup's systems' write and read: (wall, CPU) seconds.
    let mut board_samples = vec![vec![Vec::<[Pair; 2]>::new(); BOARD_SYSTEMS.len()]; 2];

    for round in 0..rounds {
        for m in &mut machines {
            let geometry = Geometry::for_boards(m.boards).expect("a machine's board count");
            for k in 0..5 {
                let system = (k + round) % 5;
                let root = m.addrs[0].ip().to_string();
                let py = |name: &str| {
                    let args = [
                        "machine".to_string(),
                        name.into(),
                        root.clone(),
                        per_chip.to_string(),
                        round.to_string(),
                    ];
                    python_round(python, name, &args)
                        .and_then(|line| Sample::from_line(&line, name))
                };
                let sample = match system {
                    0 => py("spinnman"),
                    1 => py("accelerate"),
                    2 => py("volley"),
                    3 => Ok(runtime.block_on(volley_round(m.addrs[0], per_chip, round))),
                    _ => {
                        m.ceiling.push(ceiling_round(&m.addrs, geometry, mode));
                        continue;
                    }
                };
                match sample {
                    Ok(s) => m.samples[system].push(s),
                    Err(e) => {
                        errors.push(format!("{}, {}: {e}", label(m), MACHINE_SYSTEMS[system]))
                    }
                }
            }
            eprintln!("python: round {}/{rounds}: {} done", round + 1, label(m));
        }
        for (setup, host) in board_hosts.iter().enumerate() {
            for k in 0..BOARD_SYSTEMS.len() {
                let i = (k + round) % BOARD_SYSTEMS.len();
                let (name, system, window, with_costs) = BOARD_SYSTEMS[i];
                if setup == 0 && !with_costs {
                    continue;
                }
                let args = [
                    "board".to_string(),
                    system.into(),
                    host.to_string(),
                    BOARD_BYTES.to_string(),
                    round.to_string(),
                    window.to_string(),
                ];
                let sample = python_round(python, name, &args).and_then(|line| {
                    let phase = |p: &str| -> Result<(f64, f64), String> {
                        Ok((
                            secs(&line, name, &format!("{p}_s"))?,
                            secs(&line, name, &format!("{p}_cpu_s"))?,
                        ))
                    };
                    Ok([phase("write")?, phase("read")?])
                });
                match sample {
                    Ok(s) => board_samples[setup][i].push(s),
                    Err(e) => errors.push(format!("one board, {name}: {e}")),
                }
            }
        }
        eprintln!("python: round {}/{rounds}: one board done", round + 1);
    }

    let mut report = Report::new(
        "python",
        format!(
            "python: from Python, {} KiB written to and read back from every chip of \
             emulated machines with SC&MP's costs (Mbit/s = 2^20 bits/s)",
            per_chip / 1024
        ),
        mode,
    );
    report.rounds = rounds;
    report.columns = vec![
        "machine",
        "system",
        "write Mbit/s",
        "read Mbit/s",
        "of a board's rate w/r",
        "of the bound w/r",
        "client CPU s/MiB w/r",
    ];
    let share = |w: f64, r: f64, of: f64| format!("{:.0}%/{:.0}%", 100.0 * w / of, 100.0 * r / of);
    let mut notes = Vec::new();
    let mut data = Vec::new();
    for m in &machines {
        let geometry = Geometry::for_boards(m.boards).expect("a machine's board count");
        let bytes = geometry.chips() * per_chip;
        let model = model_mbit(&m.costs, geometry, TAGS);
        let host = median(&m.ceiling);
        let bound = model.min(host);
        let board_rate = model / m.boards as f64;
        // A system that never ran has no rate (not the huge one of zero seconds).
        let rate = |s: &[Sample], f: fn(&Sample) -> f64| {
            if s.is_empty() {
                return f64::NAN;
            }
            mbit(bytes, median(&s.iter().map(f).collect::<Vec<_>>()))
        };
        let mut cpus = Vec::new();
        let figures: Vec<(f64, f64)> = m
            .samples
            .iter()
            .map(|s| (rate(s, |s| s.write), rate(s, |s| s.read)))
            .collect();
        for (i, name) in MACHINE_SYSTEMS.iter().enumerate() {
            let (w, r) = figures[i];
            let (of_board, of_bound) = if i < 2 {
                (share(w, r, board_rate), "-".into())
            } else {
                ("-".into(), share(w, r, bound))
            };
            let cpu = if m.samples[i].is_empty() {
                (f64::NAN, f64::NAN)
            } else {
                cpu_per_mib(&m.samples[i], bytes)
            };
            cpus.push(cpu);
            report.rows.push(vec![
                label(m),
                (*name).into(),
                format!("{w:.2}"),
                format!("{r:.2}"),
                of_board,
                of_bound,
                cpu_cell(cpu),
            ]);
            data.push(json!({
                "boards": m.boards,
                "model": m.model,
                "system": name,
                "write_cpu_s_per_mib": cpu.0,
                "read_cpu_s_per_mib": cpu.1,
                "write_mbit_s": w,
                "read_mbit_s": r,
                "write_rounds_s": m.samples[i].iter().map(|s| s.write).collect::<Vec<_>>(),
                "read_rounds_s": m.samples[i].iter().map(|s| s.read).collect::<Vec<_>>(),
            }));
        }
        for (name, value) in [
            ("bound: one board (8 tags)", board_rate),
            ("bound: cost model", model),
            ("bound: this host's ceiling", host),
        ] {
            report.rows.push(vec![
                label(m),
                name.into(),
                format!("{value:.2}"),
                format!("{value:.2}"),
                "-".into(),
                "-".into(),
                "-".into(),
            ]);
        }
        let [a, b, c, rust] = [figures[0], figures[1], figures[2], figures[3]];
        notes.push(format!(
            "{}: (b) accelerate {:.2}x/{:.2}x (write/read) SpiNNMan's own loop (a) \
            , {:.0}%/{:.0}% of one board's modelled rate \
             {board_rate:.2} Mbit/s; (a) SpiNNMan {:.0}%/{:.0}%",
            label(m),
            b.0 / a.0,
            b.1 / a.1,
            100.0 * b.0 / board_rate,
            100.0 * b.1 / board_rate,
            100.0 * a.0 / board_rate,
            100.0 * a.1 / board_rate,
        ));
        notes.push(format!(
            "{}: (c) volley.Machine {:.1}x/{:.1}x (a) ({:.1}x/{:.1}x per client CPU-second), \
             {:.0}%/{:.0}% of the machine's bound {bound:.2} Mbit/s, {:+.1}%/{:+.1}% beside \
             the Rust Machine",
            label(m),
            c.0 / a.0,
            c.1 / a.1,
            cpus[0].0 / cpus[2].0,
            cpus[0].1 / cpus[2].1,
            100.0 * c.0 / bound,
            100.0 * c.1 / bound,
            100.0 * (c.0 / rust.0 - 1.0),
            100.0 * (c.1 / rust.1 - 1.0),
        ));
        data.push(json!({
            "boards": m.boards,
            "model": m.model,
            "bytes_per_chip": per_chip,
            "chips": geometry.chips(),
            "model_bound_mbit_s": model,
            "host_ceiling_mbit_s": host,
            "host_ceiling_rounds": m.ceiling,
            "board_rate_mbit_s": board_rate,
        }));
    }

    // One board: chip (0, 0) is the Ethernet chip, so the model holds each request for
    // the monitor's service time alone.
    let board_rate =
        (MAX_DATA_LEN * 8) as f64 / costs.service.as_secs_f64() / f64::from(1u32 << 20);
    let mut table = Table {
        title: format!(
            "one board, {} MiB written and read back on chip (0, 0), from Python (Mbit/s)",
            BOARD_BYTES >> 20
        ),
        columns: vec![
            "system",
            "costs: write",
            "costs: read",
            "of the board's rate w/r",
            "host speed: write",
            "host speed: read",
            "host speed: CPU s/MiB w/r",
        ],
        rows: Vec::new(),
    };
    let mib = BOARD_BYTES as f64 / f64::from(1u32 << 20);
    // Per setup and system: (write Mbit/s, read Mbit/s), (write, read) CPU s/MiB.
    let board_figures: Vec<Vec<(Pair, Pair)>> = board_samples
        .iter()
        .map(|setup| {
            setup
                .iter()
                .map(|s| {
                    if s.is_empty() {
                        return ((f64::NAN, f64::NAN), (f64::NAN, f64::NAN));
                    }
                    let of = |f: &dyn Fn(&[Pair; 2]) -> f64| {
                        median(&s.iter().map(f).collect::<Vec<_>>())
                    };
                    (
                        (
                            mbit(BOARD_BYTES, of(&|s| s[0].0)),
                            mbit(BOARD_BYTES, of(&|s| s[1].0)),
                        ),
                        (of(&|s| s[0].1) / mib, of(&|s| s[1].1) / mib),
                    )
                })
                .collect()
        })
        .collect();
    let cell = |v: f64| {
        if v.is_nan() {
            "-".to_string()
        } else {
            format!("{v:.2}")
        }
    };
    for (i, (name, _, _, _)) in BOARD_SYSTEMS.iter().enumerate() {
        let (cw, cr) = board_figures[0][i].0;
        let ((hw, hr), host_cpu) = board_figures[1][i];
        table.rows.push(vec![
            (*name).into(),
            cell(cw),
            cell(cr),
            if cw.is_nan() {
                "-".into()
            } else {
                share(cw, cr, board_rate)
            },
            cell(hw),
            cell(hr),
            cpu_cell(host_cpu),
        ]);
        data.push(json!({
            "board": name,
            "costs_write_mbit_s": cw,
            "costs_read_mbit_s": cr,
            "host_write_mbit_s": hw,
            "host_read_mbit_s": hr,
            "host_write_cpu_s_per_mib": host_cpu.0,
            "host_read_cpu_s_per_mib": host_cpu.1,
        }));
    }
    table.rows.push(vec![
        "bound: the board's modelled rate".into(),
        format!("{board_rate:.2}"),
        format!("{board_rate:.2}"),
        "-".into(),
        "-".into(),
        "-".into(),
        "-".into(),
    ]);
    report.tables.push(table);
    let volley = board_figures[0][4].0;
    let (spin_host, volley_host) = (board_figures[1][0], board_figures[1][4]);
    notes.push(format!(
        "one board, costs: volley.Board {:.0}%/{:.0}% of the board's modelled rate \
         {board_rate:.2} Mbit/s; host speed: volley.Board / SpiNNMan {:.1}x/{:.1}x \
         ({:.1}x/{:.1}x per client CPU-second)",
        100.0 * volley.0 / board_rate,
        100.0 * volley.1 / board_rate,
        volley_host.0.0 / spin_host.0.0,
        volley_host.0.1 / spin_host.0.1,
        spin_host.1.0 / volley_host.1.0,
        spin_host.1.1 / volley_host.1.1,
    ));
    notes.push(format!(
        "cost models: {:.1} us a request at the Ethernet chip, {TAGS} tags a board; per-hop: a \
         request for another chip holds a P2P stream {:.2} ms a hop; monitors: it holds both \
         ends' monitors {:.0} us plus {:.0} us a hop; a board's rate takes each of its chips \
         equally often; client CPU: the Python process's (every thread), the bench's client \
         threads' for the Rust Machine",
        costs.service.as_secs_f64() * 1e6,
        costs.p2p_hop.as_secs_f64() * 1e3,
        ScampCosts::monitors().p2p_monitor.as_secs_f64() * 1e6,
        ScampCosts::monitors().p2p_hop.as_secs_f64() * 1e6,
    ));
    if !errors.is_empty() {
        report.failures += errors.len();
        notes.extend(errors.iter().map(|e| format!("FAILED: {e}")));
    }
    notes.push(format!(
        "the suite took {:.0} s",
        started.elapsed().as_secs_f64()
    ));
    report.notes = notes;
    data.push(json!({ "suite_s": started.elapsed().as_secs_f64() }));
    report.data = data;
    report
}
