//! `channel`: volley's reliable UDP channel beside TCP (volley's framed connection) and
//! quinn (QUIC: one bidirectional stream carrying length-prefixed messages, a self-signed
//! certificate made in process, windows opened for 16 MiB messages), on loopback and
//! through the link simulator (UDP with 1% loss; TCP through its relay, delay only).
//! Each runs in more than one setup: the channel with 64 KiB datagrams and with 1,472-byte
//! ones (an Ethernet MTU's), quinn with its own MTU discovery and GSO and with 65,000-byte
//! packets; quinn's messages go out and come in as chunks it holds (`write_all_chunks`,
//! `read_chunk`), never copied by the suite.
//!
//! Bulk: the client sends K messages of 1 MiB or 16 MiB one way; the server compares every
//! byte with what was sent, counts them and answers once with a short message; MiB/s from
//! the first byte sent to that answer. Small: 64-byte messages echoed one at a time,
//! compared; microseconds per round trip. Beside each rate, the CPU it cost the client's
//! and the servers' threads (the link simulator's are neither).

use core::time::Duration;
use std::time::Instant;

use bytes::Bytes;
use serde_json::json;
use volley_netsim::tcp::{TcpLinkConfig, TcpLinkSim};
use volley_netsim::{LinkConfig, LinkSim};

use crate::harness::cpu_split;
use crate::harness::{Mode, Report, median};

mod setups;

use setups::{Client, SYSTEMS, System, connect, start_servers};

const MIB: usize = 1 << 20;

/// What one measurement gave: a rate (MiB/s, or microseconds per round trip for small
/// messages), the CPU seconds the client's and the servers' threads spent on it, and
/// whether every byte came back as sent.
#[derive(Clone, Copy, Debug)]
struct Measured {
    figure: f64,
    client_cpu: f64,
    server_cpu: f64,
    ok: bool,
}

/// Runs `work` on `runtime`, with the CPU it cost.
fn measured(
    runtime: &tokio::runtime::Runtime,
    work: impl Future<Output = (f64, bool)>,
) -> Measured {
    let before = cpu_split();
    let (figure, ok) = runtime.block_on(work);
    let after = cpu_split();
    Measured {
        figure,
        client_cpu: after.0 - before.0,
        server_cpu: after.1 - before.1,
        ok,
    }
}

/// MiB/s sending `count` messages of `size` bytes and waiting for the server's answer,
/// and whether the server found every byte as sent.
async fn bulk(client: &mut Client, size: usize, count: usize, body: &Bytes) -> (f64, bool) {
    let start = Instant::now();
    client
        .send(Bytes::copy_from_slice(
            &((size * count) as u64).to_le_bytes(),
        ))
        .await;
    for _ in 0..count {
        client.send(body.slice(..size)).await;
    }
    let ok = client.recv().await == b"done";
    let rate = (size * count) as f64 / MIB as f64 / start.elapsed().as_secs_f64();
    (rate, ok)
}

/// Microseconds per 64-byte echo, one at a time, and whether every echo came back as sent.
async fn small(client: &mut Client, count: usize, body: &Bytes) -> (f64, bool) {
    let mut ok = true;
    let start = Instant::now();
    for i in 0..count {
        let message = body.slice(i % 1024..i % 1024 + 64);
        client.send(message.clone()).await;
        ok &= client.recv().await == message;
    }
    (start.elapsed().as_secs_f64() * 1e6 / count as f64, ok)
}

/// Starts the relay a system's client goes through on the lossy link: UDP with 1% loss,
/// TCP with delay only. Returned to be stopped when the link's rows are done.
enum Relay {
    Udp(LinkSim),
    Tcp(TcpLinkSim),
}

fn relay(system: System, upstream: core::net::SocketAddr) -> Relay {
    let any = "127.0.0.1:0".parse().expect("an address");
    let delay = Duration::from_micros(500);
    match system {
        System::Tcp => Relay::Tcp(
            TcpLinkSim::start(
                any,
                upstream,
                TcpLinkConfig {
                    delay,
                    ..TcpLinkConfig::default()
                },
            )
            .expect("the TCP relay"),
        ),
        _ => Relay::Udp(
            LinkSim::start(
                any,
                upstream,
                LinkConfig {
                    delay,
                    loss: 0.01,
                    seed: 5,
                    ..LinkConfig::default()
                },
            )
            .expect("the link simulator"),
        ),
    }
}

impl Relay {
    fn addr(&self) -> core::net::SocketAddr {
        match self {
            Self::Udp(sim) => sim.local_addr(),
            Self::Tcp(sim) => sim.local_addr(),
        }
    }
}

/// Medians of one system's rounds on one link: MiB/s and CPU seconds a GiB (client,
/// server) for each bulk size, and the round trip with its CPU microseconds.
struct Row {
    mib_1: f64,
    mib_16: f64,
    gib_cpu: (f64, f64),
    rtt: f64,
    rtt_cpu: (f64, f64),
}

impl Row {
    fn of(figures: &[Vec<Measured>; 3], count_1m: usize, smalls: usize) -> Self {
        let gib = count_1m as f64 * MIB as f64 / f64::from(1u32 << 30);
        let med = |v: &[Measured], f: &dyn Fn(&Measured) -> f64| {
            median(&v.iter().map(f).collect::<Vec<_>>())
        };
        Self {
            mib_1: med(&figures[0], &|m| m.figure),
            mib_16: med(&figures[1], &|m| m.figure),
            gib_cpu: (
                med(&figures[0], &|m| m.client_cpu / gib),
                med(&figures[0], &|m| m.server_cpu / gib),
            ),
            rtt: med(&figures[2], &|m| m.figure),
            rtt_cpu: (
                med(&figures[2], &|m| m.client_cpu * 1e6 / smalls as f64),
                med(&figures[2], &|m| m.server_cpu * 1e6 / smalls as f64),
            ),
        }
    }

    fn gib_cpu_total(&self) -> f64 {
        self.gib_cpu.0 + self.gib_cpu.1
    }
}

pub(crate) fn run(mode: Mode) -> Report {
    // Pseudo-random bytes (the rpc suite's pattern), so that a byte out of place shows.
    let body = volley_rpc_bench::pattern(16 * MIB);
    let servers = start_servers(body.clone());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let rounds = mode.rounds();
    let mut report = Report::new(
        "channel",
        "The UDP channel beside TCP and quinn: bulk MiB/s and small-message round trips, with CPU",
        mode,
    );
    report.columns = vec![
        "link",
        "system",
        "1 MiB msgs MiB/s",
        "16 MiB msgs MiB/s",
        "CPU s/GiB client + server",
        "64 B round trip us",
        "CPU us/round trip client + server",
        "1 MiB / quinn best",
        "CPU/GiB / quinn best's",
    ];
    for (link, lossy) in [
        ("loopback", false),
        ("1 ms RTT, 1% loss (TCP: no loss)", true),
    ] {
        let mut relays = Vec::new();
        let mut clients = Vec::new();
        for system in SYSTEMS {
            let mut addr = servers.addr(system);
            if lossy {
                let r = relay(system, addr);
                addr = r.addr();
                relays.push(r);
            }
            let connected = runtime.block_on(async {
                tokio::time::timeout(Duration::from_secs(10), connect(system, addr, &servers)).await
            });
            let name = system.name();
            clients.push(connected.unwrap_or_else(|_| panic!("{name}: no connection in 10 s")));
        }
        let (count_1m, count_16m, smalls) = match (mode, lossy) {
            (Mode::Quick, false) => (64, 4, 2000),
            (Mode::Quick, true) => (16, 2, 100),
            (Mode::Full, false) => (256, 16, 10_000),
            (Mode::Full, true) => (64, 4, 500),
        };
        let mut figures: Vec<[Vec<Measured>; 3]> = vec![Default::default(); SYSTEMS.len()];
        for round in 0..rounds {
            for k in 0..SYSTEMS.len() {
                let i = (k + round) % SYSTEMS.len();
                let c = &mut clients[i];
                let f = &mut figures[i];
                f[0].push(measured(&runtime, bulk(c, MIB, count_1m, &body)));
                f[1].push(measured(&runtime, bulk(c, 16 * MIB, count_16m, &body)));
                f[2].push(measured(&runtime, small(c, smalls, &body)));
            }
            eprintln!("channel: {link}: round {}/{rounds} done", round + 1);
        }
        let rows: Vec<Row> = figures
            .iter()
            .map(|f| Row::of(f, count_1m, smalls))
            .collect();
        // quinn at its best: the setup with the higher 1 MiB rate.
        let best = SYSTEMS
            .iter()
            .zip(&rows)
            .filter(|(s, _)| s.is_quinn())
            .map(|(_, r)| r)
            .max_by(|a, b| a.mib_1.total_cmp(&b.mib_1))
            .expect("quinn rows");
        let (best_rate, best_cpu) = (best.mib_1, best.gib_cpu_total());
        for ((system, row), f) in SYSTEMS.iter().zip(&rows).zip(&figures) {
            let failed = f.iter().flatten().filter(|m| !m.ok).count();
            report.failures += failed;
            report.rows.push(vec![
                link.into(),
                system.name(),
                format!("{:.0}", row.mib_1),
                format!("{:.0}", row.mib_16),
                format!("{:.2} + {:.2}", row.gib_cpu.0, row.gib_cpu.1),
                if failed == 0 {
                    format!("{:.1}", row.rtt)
                } else {
                    format!("{:.1} ({failed} runs WRONG BYTES)", row.rtt)
                },
                format!("{:.1} + {:.1}", row.rtt_cpu.0, row.rtt_cpu.1),
                format!("{:.2}x", row.mib_1 / best_rate),
                format!("{:.2}x", row.gib_cpu_total() / best_cpu),
            ]);
            report.data.push(json!({
                "link": link, "system": system.name(),
                "mib_per_sec_1mib": row.mib_1, "mib_per_sec_16mib": row.mib_16,
                "client_cpu_s_per_gib": row.gib_cpu.0, "server_cpu_s_per_gib": row.gib_cpu.1,
                "round_trip_us": row.rtt,
                "client_cpu_us_per_round_trip": row.rtt_cpu.0,
                "server_cpu_us_per_round_trip": row.rtt_cpu.1,
                "failed_runs": failed,
            }));
        }
        let mtus: Vec<String> = SYSTEMS
            .iter()
            .zip(&clients)
            .filter_map(|(s, c)| Some(format!("{} {} B", s.name(), c.quic_mtu()?)))
            .collect();
        report.notes.push(format!(
            "{link}: quinn's path MTU after the runs: {}",
            mtus.join(", ")
        ));
        drop(clients);
        for r in relays {
            match r {
                Relay::Udp(sim) => sim.stop(),
                Relay::Tcp(sim) => drop(sim),
            }
        }
    }
    report.notes.push(
        "bulk: K messages one way, then the server's answer; MiB/s from the first byte to the answer; \
         every byte compared by the server, every echo by the client. quinn 0.11 with rustls \
         (TLS 1.3, ring: it encrypts, volley does not), windows opened to 64/128 MiB, in its two \
         setups, the better on 1 MiB taken as its best; TCP through the relay has no loss and its \
         reader does not spin (framed defaults). CPU: thread clocks of the client (this thread) \
         and the servers (their thread), the relays' not counted; a ratio under 1.00x is less CPU"
            .into(),
    );
    report.notes.push(
        "under 1% loss a datagram, the loss-limited rate of every system grows with its datagram size"
            .into(),
    );
    report
}
