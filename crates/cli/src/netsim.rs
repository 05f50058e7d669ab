//! `volley netsim`: the link simulator as a standalone relay.

use core::net::{Ipv4Addr, SocketAddr};
use std::io::Write;

use anyhow::{Context, bail};
use volley_netsim::tcp::{TcpLinkConfig, TcpLinkSim};
use volley_netsim::{LinkConfig, LinkSim};

use crate::args::{fraction, millis};
use crate::shutdown_signal;

/// Options of `volley netsim`. Delay and jitter apply in each direction, so the RTT
/// grows by twice the delay; probabilities are per datagram per direction.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Address clients send to (port 0 picks one).
    #[arg(long, required_unless_present = "boards", conflicts_with = "boards")]
    listen: Option<SocketAddr>,
    /// Address datagrams are relayed to.
    #[arg(long, required_unless_present = "boards", conflicts_with = "boards")]
    upstream: Option<SocketAddr>,
    /// Relay a machine of this many boards, one relay each: board i's relay listens on
    /// --listen-base + i and relays to --upstream-base + i, both on port 17893 (run the
    /// machine with `volley emulate --boards N --report-base <listen base>`, so that
    /// discovery leads the host to the relays).
    #[arg(long, requires_all = ["listen_base", "upstream_base"], conflicts_with = "tcp",
          value_parser = clap::value_parser!(u32).range(1..=1323))]
    boards: Option<u32>,
    /// The first board's relay address.
    #[arg(long, requires = "boards")]
    listen_base: Option<Ipv4Addr>,
    /// The first board's own address.
    #[arg(long, requires = "boards")]
    upstream_base: Option<Ipv4Addr>,
    /// One-way delay in milliseconds (fractions allowed: 0.5).
    #[arg(long, default_value = "0", value_parser = millis)]
    delay_ms: core::time::Duration,
    /// Extra one-way delay drawn from 0..=J milliseconds.
    #[arg(long, default_value = "0", value_parser = millis)]
    jitter_ms: core::time::Duration,
    /// Chance of dropping a datagram (0.05 = 5%).
    #[arg(long, default_value = "0", value_parser = fraction)]
    loss: f64,
    /// Chance of duplicating a datagram.
    #[arg(long, default_value = "0", value_parser = fraction)]
    dup: f64,
    /// Chance of holding a datagram back so later ones overtake it.
    #[arg(long, default_value = "0", value_parser = fraction)]
    reorder: f64,
    /// Rate cap per direction in Mbit/s (10^6 bits/s).
    #[arg(long)]
    rate_mbit: Option<f64>,
    /// Seed for every random choice.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Close a client's flow after this many milliseconds without traffic.
    #[arg(long, default_value = "60000", value_parser = millis)]
    flow_idle_ms: core::time::Duration,
    /// Flows open at once (each a socket); past it the least recently used is closed.
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    max_flows: u32,
    /// Relay TCP connections instead of UDP datagrams: delay, jitter and rate apply;
    /// loss, duplication and reordering do not (bytes relayed in user space cannot be
    /// lost as packets are), and are refused.
    #[arg(long)]
    tcp: bool,
}

pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
    let rate_bps = match args.rate_mbit {
        Some(r) if r.is_finite() && r > 0.0 => Some(
            core::num::NonZeroU64::new((r * 1e6) as u64)
                .with_context(|| format!("--rate-mbit {r} is under 1 bit/s"))?,
        ),
        Some(r) => bail!("--rate-mbit {r} must be a positive number"),
        None => None,
    };
    if args.tcp {
        return run_tcp(&args, rate_bps).await;
    }
    let config = LinkConfig {
        delay: args.delay_ms,
        jitter: args.jitter_ms,
        loss: args.loss,
        dup: args.dup,
        reorder: args.reorder,
        rate_bps,
        seed: args.seed,
        idle_timeout: args.flow_idle_ms,
        max_flows: args.max_flows as usize,
    };
    if let (Some(boards), Some(listen), Some(upstream)) =
        (args.boards, args.listen_base, args.upstream_base)
    {
        return run_boards(boards, listen, upstream, config).await;
    }
    let (Some(listen), Some(upstream)) = (args.listen, args.upstream) else {
        bail!("say where to listen and where to relay to: --listen and --upstream");
    };
    let mut link =
        LinkSim::start(listen, upstream, config).context("cannot start the link simulator")?;
    println!("listening {}", link.local_addr());
    let _ = std::io::stdout().flush();
    tokio::select! {
        signal = shutdown_signal() => signal?,
        e = link.stopped() => return Err(e).context("the link simulator stopped"),
    }
    let s = link.stats();
    eprintln!(
        "netsim stopped: {} up, {} down, {} dropped, {} duplicated, {} reordered, {} flows expired, {} evicted",
        s.delivered_up,
        s.delivered_down,
        s.dropped,
        s.duplicated,
        s.reordered,
        s.expired,
        s.evicted
    );
    link.stop();
    Ok(())
}

/// `volley netsim --tcp`: the TCP relay.
async fn run_tcp(args: &Args, rate_bps: Option<core::num::NonZeroU64>) -> anyhow::Result<()> {
    for (name, value) in [
        ("--loss", args.loss),
        ("--dup", args.dup),
        ("--reorder", args.reorder),
    ] {
        if value != 0.0 {
            bail!(
                "{name} does not apply with --tcp: bytes relayed in user space cannot be lost, duplicated or reordered as packets are"
            );
        }
    }
    let config = TcpLinkConfig {
        delay: args.delay_ms,
        jitter: args.jitter_ms,
        rate_bps,
        seed: args.seed,
        // Each connection is four threads: keep the default cap modest.
        max_connections: (args.max_flows as usize).min(1024),
    };
    let (Some(listen), Some(upstream)) = (args.listen, args.upstream) else {
        bail!("say where to listen and where to relay to: --listen and --upstream");
    };
    let link = TcpLinkSim::start(listen, upstream, config).context("cannot start the TCP relay")?;
    println!("listening tcp={}", link.local_addr());
    let _ = std::io::stdout().flush();
    shutdown_signal().await?;
    let s = link.stats();
    eprintln!(
        "netsim stopped: {} connections, {} bytes up, {} bytes down",
        s.connections, s.bytes_up, s.bytes_down
    );
    link.stop();
    Ok(())
}

/// `volley netsim --boards N`: a relay per board, each with its own seed (the given
/// seed plus the board's number), until a signal or until one of them fails.
async fn run_boards(
    boards: u32,
    listen: Ipv4Addr,
    upstream: Ipv4Addr,
    config: LinkConfig,
) -> anyhow::Result<()> {
    let nth = |base: Ipv4Addr, i: u32| {
        u32::from(base)
            .checked_add(i)
            .map(|ip| SocketAddr::from((Ipv4Addr::from(ip), volley_proto::scp::PORT)))
            .with_context(|| format!("{boards} boards from {base} run past 255.255.255.255"))
    };
    nth(listen, boards - 1)?;
    nth(upstream, boards - 1)?;
    let mut links = Vec::with_capacity(boards as usize);
    for i in 0..boards {
        let board = LinkConfig {
            seed: config.seed.wrapping_add(u64::from(i)),
            ..config.clone()
        };
        let link = LinkSim::start(nth(listen, i)?, nth(upstream, i)?, board)
            .with_context(|| format!("cannot start board {i}'s relay"))?;
        links.push(link);
    }
    println!("listening boards={boards} first={}", links[0].local_addr());
    let _ = std::io::stdout().flush();
    let stopped =
        futures::future::select_all(links.iter_mut().map(|link| Box::pin(link.stopped())));
    tokio::select! {
        signal = shutdown_signal() => signal?,
        (e, i, _) = stopped => return Err(e).with_context(|| format!("board {i}'s relay stopped")),
    }
    let dropped: u64 = links.iter().map(|link| link.stats().dropped).sum();
    eprintln!("netsim stopped: {boards} relays, {dropped} datagrams dropped");
    for link in links {
        link.stop();
    }
    Ok(())
}
