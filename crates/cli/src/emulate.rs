//! `volley emulate`: an emulated board on UDP (and framed TCP), or a machine of SpiNN-5
//! boards, each on its own address.

use core::net::{Ipv4Addr, SocketAddr};
use std::io::Write;

use anyhow::Context;
use volley_emulator::{Board, BoardConfig, EmulatedMachine, MachineConfig, ScampCosts};

use crate::args::{fraction, micros, millis};
use crate::shutdown_signal;

/// Options of `volley emulate`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// UDP address to serve SCP on (port 0 picks one).
    #[arg(long, default_value = "127.0.0.1:17893")]
    udp: SocketAddr,
    /// Also serve framed SCP over TCP on this address.
    #[arg(long)]
    tcp: Option<SocketAddr>,
    /// Emulate a machine of this many SpiNN-5 boards (48 chips each) instead of one
    /// 8 x 8 board: 1, or 3 per triad in a rectangle of triads (3, 6, 9, 12, 18, 24,
    /// ...). Board i listens on --base-ip + i, port 17893, and answers for every chip of
    /// the machine.
    #[arg(long, conflicts_with_all = ["udp", "tcp"])]
    boards: Option<usize>,
    /// The first board's address; board i takes this plus i.
    #[arg(long, default_value = "127.0.1.0", requires = "boards")]
    base_ip: Ipv4Addr,
    /// Report base + i as board i's Ethernet IP to the host's discovery instead of the
    /// board's own address, so the host reaches each board through a relay there
    /// (`volley netsim --boards`).
    #[arg(long, requires = "boards")]
    report_base: Option<Ipv4Addr>,
    /// Chance a reply is lost inside the board; its transient tag stays taken until the
    /// tag timeout expires, as on hardware.
    #[arg(long, default_value = "0", value_parser = fraction)]
    loss: f64,
    /// Processing delay before each reply, in milliseconds (fractions allowed).
    #[arg(long, default_value = "0", value_parser = millis)]
    delay_ms: core::time::Duration,
    /// Extra latency per P2P hop to chip (x, y): (x + y) times this, in milliseconds.
    #[arg(long, default_value = "0", value_parser = millis)]
    hop_ms: core::time::Duration,
    /// Model SC&MP's costs, so that figures mean something for hardware: the Ethernet
    /// chip serves one request at a time (63.8 us each), a request for another chip
    /// holds one of its 8 P2P streams for 1.24 ms a hop (RC_P2P_BUSY when all are taken),
    /// a board holds 32 messages at once (more are dropped). --delay-ms and --hop-ms add
    /// on top. Each default and its source is in volley-emulator's `ScampCosts`.
    #[arg(long)]
    scamp_costs: bool,
    /// With --scamp-costs: the Ethernet chip's time per request, in microseconds.
    #[arg(long, requires = "scamp_costs", value_parser = micros)]
    scamp_service_us: Option<core::time::Duration>,
    /// With --scamp-costs: how a request for a chip without Ethernet is charged. `hops`
    /// (the default): it holds a P2P stream 1.24 ms a hop. `monitors`: it holds the
    /// monitors at both ends 638 us, plus 1 us a hop (the monitors' software, not the
    /// hops, is what costs on hardware). Both are calibrated from the same ratio.
    #[arg(long, requires = "scamp_costs", value_enum, default_value = "hops")]
    scamp_p2p_model: P2pModel,
    /// With --scamp-costs: the time a forwarded request holds a P2P stream, per hop, in
    /// microseconds.
    #[arg(long, requires = "scamp_costs", value_parser = micros)]
    scamp_p2p_hop_us: Option<core::time::Duration>,
    /// With --scamp-costs: the time a forwarded request holds the monitors at both ends,
    /// in microseconds (0 in the `hops` model).
    #[arg(long, requires = "scamp_costs", value_parser = micros)]
    scamp_p2p_monitor_us: Option<core::time::Duration>,
    /// With --scamp-costs: P2P streams per chip, 1 to 255.
    #[arg(long, requires = "scamp_costs", value_parser = clap::value_parser!(u8).range(1..))]
    scamp_streams: Option<u8>,
    /// With --scamp-costs: messages a board holds at once, 1 to 65535.
    #[arg(long, requires = "scamp_costs", value_parser = clap::value_parser!(u16).range(1..))]
    scamp_buffers: Option<u16>,
    /// Seed for the loss decisions.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Most MiB of written memory the board (each board of a machine) holds over all
    /// its chips (fills hold none); a write past it is answered RC_BUF.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(0..=65536))]
    memory_mib: u32,
    /// TCP connections open at once; further hosts wait in the kernel's backlog until one
    /// closes.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=65536))]
    max_tcp_connections: u32,
}

/// The two models of SCP over P2P (`--scamp-p2p-model`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum P2pModel {
    /// A P2P stream held per hop.
    Hops,
    /// The monitors at both ends held, plus a little per hop.
    Monitors,
}

pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
    let config = BoardConfig {
        processing_delay: args.delay_ms,
        hop_latency: args.hop_ms,
        reply_loss: args.loss,
        seed: args.seed,
        memory_budget: (args.memory_mib as usize) << 20,
        max_tcp_connections: args.max_tcp_connections as usize,
        scamp: args.scamp_costs.then(|| {
            let defaults = match args.scamp_p2p_model {
                P2pModel::Hops => ScampCosts::default(),
                P2pModel::Monitors => ScampCosts::monitors(),
            };
            ScampCosts {
                service: args.scamp_service_us.unwrap_or(defaults.service),
                p2p_hop: args.scamp_p2p_hop_us.unwrap_or(defaults.p2p_hop),
                p2p_monitor: args.scamp_p2p_monitor_us.unwrap_or(defaults.p2p_monitor),
                streams: args.scamp_streams.unwrap_or(defaults.streams),
                buffers: args.scamp_buffers.unwrap_or(defaults.buffers),
            }
        }),
        ..BoardConfig::default()
    };
    if let Some(boards) = args.boards {
        return run_machine(boards, &args, config).await;
    }
    let mut board = Board::bind(args.udp, args.tcp, config)
        .await
        .context("cannot start the emulator")?;
    let tcp = board
        .tcp_addr()
        .map_or_else(|| "-".to_owned(), |a| a.to_string());
    println!("listening udp={} tcp={tcp}", board.udp_addr());
    let _ = std::io::stdout().flush();
    tokio::select! {
        signal = shutdown_signal() => signal?,
        e = board.stopped() => return Err(e).context("the emulator stopped"),
    }
    let stats = board.stats();
    eprintln!(
        "emulator stopped: {} requests, {} replies, {} dropped for want of a tag, {} KiB of memory held",
        stats.requests,
        stats.replies,
        stats.dropped_no_tag,
        stats.memory_bytes >> 10
    );
    board.shutdown().await;
    Ok(())
}

/// `volley emulate --boards N`: serves until a signal, or until a board's task fails.
async fn run_machine(boards: usize, args: &Args, board: BoardConfig) -> anyhow::Result<()> {
    let config = MachineConfig {
        boards,
        base: args.base_ip,
        report_base: args.report_base,
        board: BoardConfig {
            // Every board's socket is a task on this one thread: none may spin.
            spin: core::time::Duration::ZERO,
            ..board
        },
        ..MachineConfig::default()
    };
    let mut machine = EmulatedMachine::bind(config)
        .await
        .context("cannot start the emulated machine")?;
    println!(
        "listening root={} boards={boards} chips={}",
        machine.root(),
        machine.geometry().chips()
    );
    let _ = std::io::stdout().flush();
    tokio::select! {
        signal = shutdown_signal() => signal?,
        e = machine.stopped() => return Err(e).context("the emulated machine stopped"),
    }
    let (mut requests, mut replies, mut dropped) = (0, 0, 0);
    for stats in (0..boards).filter_map(|i| machine.stats(i)) {
        requests += stats.requests;
        replies += stats.replies;
        dropped += stats.dropped_no_tag;
    }
    eprintln!(
        "emulator stopped: {boards} boards, {requests} requests, {replies} replies, \
         {dropped} dropped for want of a tag"
    );
    machine.shutdown().await;
    Ok(())
}
