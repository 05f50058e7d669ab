//! `volley emulate`: an emulated board on UDP (and framed TCP).

use core::net::SocketAddr;
use std::io::Write;

use anyhow::Context;
use volley_emulator::{Board, BoardConfig};

use crate::{fraction, millis, shutdown_signal};

/// Options of `volley emulate`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// UDP address to serve SCP on (port 0 picks one).
    #[arg(long, default_value = "127.0.0.1:17893")]
    udp: SocketAddr,
    /// Also serve framed SCP over TCP on this address.
    #[arg(long)]
    tcp: Option<SocketAddr>,
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
    /// Seed for the loss decisions.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Most MiB of written memory the board holds over all chips (fills hold none);
    /// a write past it is answered RC_BUF.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(0..=65536))]
    memory_mib: u32,
    /// TCP connections open at once; further hosts wait in the kernel's backlog until one
    /// closes.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=65536))]
    max_tcp_connections: u32,
}

pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
    let config = BoardConfig {
        processing_delay: args.delay_ms,
        hop_latency: args.hop_ms,
        reply_loss: args.loss,
        seed: args.seed,
        memory_budget: (args.memory_mib as usize) << 20,
        max_tcp_connections: args.max_tcp_connections as usize,
        ..BoardConfig::default()
    };
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
