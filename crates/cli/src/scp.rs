//! `volley scp read|write`: bulk transfers through the windowed client, reported in the
//! seed's form: `Finished write after N ms. Throughput = X Mbit/s`, where Mbit is 2^20
//! bits as in rig's scripts.

use core::net::SocketAddr;
use core::str::FromStr;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use volley_proto::time::Duration;
use volley_proto::window::Rto;
use volley_proto::wire::sdp::Address;
use volley_transport_udp::{ScpClient, ScpConfig, WindowSize};

/// `volley scp` subcommands.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// Write a file into a board's memory.
    Write {
        #[command(flatten)]
        target: Target,
        /// The file to write.
        file: PathBuf,
    },
    /// Read a board's memory into a file.
    Read {
        #[command(flatten)]
        target: Target,
        /// Bytes to read.
        #[arg(long)]
        len: usize,
        /// Where the bytes go.
        #[arg(short, long)]
        output: PathBuf,
    },
}

/// Where and how to transfer.
#[derive(Debug, clap::Args)]
pub(crate) struct Target {
    /// The board (or link simulator) address.
    #[arg(long)]
    target: SocketAddr,
    /// Chip and core: X,Y or X,Y,P.
    #[arg(long, default_value = "0,0,0")]
    chip: Chip,
    /// Start address, hexadecimal (0x60000000).
    #[arg(long, value_parser = hex)]
    addr: u32,
    /// Requests in flight: a number, or `auto` to size it from the board's tag pool.
    #[arg(long, default_value = "8")]
    window: Window,
    /// `udp`, or `tcp` for volley's emulator's framed TCP port.
    #[arg(long, default_value = "udp")]
    transport: Transport,
    /// A fixed retransmit timeout in milliseconds (default: estimated from the RTT).
    #[arg(long)]
    timeout_ms: Option<u64>,
    /// Sends per request before giving up.
    #[arg(long, default_value_t = 8)]
    tries: u32,
}

#[derive(Clone, Copy, Debug)]
struct Chip(Address);

#[derive(Clone, Copy, Debug)]
struct Window(WindowSize);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Transport {
    Udp,
    Tcp,
}

impl FromStr for Chip {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let parts: Vec<&str> = s.split(',').map(str::trim).collect();
        let num = |p: &str| {
            p.parse::<u8>()
                .map_err(|e| format!("`{p}` in --chip {s}: {e}"))
        };
        let (x, y, p) = match parts.as_slice() {
            [x, y] => (num(x)?, num(y)?, 0),
            [x, y, p] => (num(x)?, num(y)?, num(p)?),
            _ => return Err(format!("--chip takes X,Y or X,Y,P, not `{s}`")),
        };
        if p > 31 {
            return Err(format!("core {p} is out of range (0..=31)"));
        }
        Ok(Self(Address::core(x, y, p)))
    }
}

impl FromStr for Window {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s == "auto" {
            return Ok(Self(WindowSize::Auto));
        }
        match s.parse::<usize>() {
            Ok(n) if n >= 1 => Ok(Self(WindowSize::Fixed(n))),
            _ => Err(format!(
                "--window takes a number of at least 1 or `auto`, not `{s}`"
            )),
        }
    }
}

impl FromStr for Transport {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "udp" => Ok(Self::Udp),
            "tcp" => Ok(Self::Tcp),
            _ => Err(format!("--transport takes udp or tcp, not `{s}`")),
        }
    }
}

fn hex(s: &str) -> Result<u32, String> {
    let digits = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .unwrap_or(s);
    u32::from_str_radix(digits, 16).map_err(|e| format!("`{s}` is not a 32-bit hex address: {e}"))
}

/// Bytes per progress step when a bar is shown (the window drains between steps).
const STEP: usize = 256 * 1024;

pub(crate) async fn run(command: Command) -> Result<(), String> {
    match command {
        Command::Write { target, file } => {
            let data = tokio::fs::read(&file)
                .await
                .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
            let mut client = connect(&target).await?;
            let bar = progress(data.len());
            let start = Instant::now();
            for (i, step) in data.chunks(step_len(&bar, data.len())).enumerate() {
                let address = target
                    .addr
                    .wrapping_add((i * step_len(&bar, data.len())) as u32);
                client
                    .write(target.chip.0, address, step)
                    .await
                    .map_err(|e| e.to_string())?;
                bar.inc(step.len() as u64);
            }
            bar.finish_and_clear();
            report("write", data.len(), start);
            Ok(())
        }
        Command::Read {
            target,
            len,
            output,
        } => {
            let mut client = connect(&target).await?;
            let mut data = vec![0u8; len];
            let bar = progress(len);
            let start = Instant::now();
            let step = step_len(&bar, len);
            for (i, chunk) in data.chunks_mut(step).enumerate() {
                let address = target.addr.wrapping_add((i * step) as u32);
                let n = chunk.len();
                client
                    .read(target.chip.0, address, chunk)
                    .await
                    .map_err(|e| e.to_string())?;
                bar.inc(n as u64);
            }
            bar.finish_and_clear();
            report("read", len, start);
            tokio::fs::write(&output, &data)
                .await
                .map_err(|e| format!("cannot write {}: {e}", output.display()))
        }
    }
}

async fn connect(target: &Target) -> Result<ScpClient, String> {
    let mut config = ScpConfig {
        window: target.window.0,
        max_tries: target.tries.max(1),
        ..ScpConfig::default()
    };
    if let Some(ms) = target.timeout_ms {
        config.rto = Rto::Fixed(Duration::from_millis(ms.max(1)));
    }
    let client = match target.transport {
        Transport::Udp => ScpClient::connect(target.target, config).await,
        Transport::Tcp => ScpClient::connect_tcp(target.target, config).await,
    };
    client.map_err(|e| format!("cannot reach {}: {e}", target.target))
}

/// A progress bar on a terminal, a hidden one otherwise.
fn progress(len: usize) -> ProgressBar {
    if !std::io::stderr().is_terminal() || len < STEP {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len as u64);
    if let Ok(style) =
        ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}")
    {
        bar.set_style(style);
    }
    bar
}

/// With no bar to update, the whole transfer goes through the window at once.
fn step_len(bar: &ProgressBar, len: usize) -> usize {
    if bar.is_hidden() { len.max(1) } else { STEP }
}

fn report(what: &str, bytes: usize, start: Instant) {
    let elapsed = start.elapsed();
    let mbit = bytes as f64 * 8.0 / f64::from(1u32 << 20);
    eprintln!(
        "Finished {what} after {} ms. Throughput = {:.2} Mbit/s",
        elapsed.as_millis(),
        mbit / elapsed.as_secs_f64().max(1e-9)
    );
}
