//! `volley scp read|write`: bulk transfers through the windowed client, reported in the
//! seed's form: `Finished write after N ms. Throughput = X Mbit/s`, where Mbit is 2^20
//! bits as in rig's scripts.

use core::str::FromStr;
use std::fs::File;
use std::io::{BufReader, IsTerminal, Seek, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, anyhow, bail};
use indicatif::{ProgressBar, ProgressStyle};
use volley_proto::scp::sdp::Address;
use volley_proto::scp::window::{MAX_TIMEOUT, MAX_WINDOW, Rto};
use volley_proto::time::Duration;
use volley_transport_udp::{Machine, Op, ScpClient, ScpConfig, Source, WindowSize, check_range};

use crate::args::hex;

/// `volley scp` subcommands.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// Write a file into a board's memory, streamed (never read whole into memory).
    Write {
        #[command(flatten)]
        target: Target,
        /// Bytes to write: at most the file's size (default: all of it). Needed when the
        /// file is a pipe or a device, whose size is not known up front.
        #[arg(long)]
        len: Option<u64>,
        /// The file to write.
        file: PathBuf,
    },
    /// Read a board's memory into a file.
    Read {
        #[command(flatten)]
        target: Target,
        /// Bytes to read.
        #[arg(long)]
        len: u64,
        /// Where the bytes go (opened before anything is read).
        #[arg(short, long)]
        output: PathBuf,
    },
}

/// Where and how to transfer.
#[derive(Debug, clap::Args)]
#[command(group = clap::ArgGroup::new("to").required(true).args(["target", "machine"]))]
pub(crate) struct Target {
    /// The board (or link simulator): HOST or HOST:PORT (port 17893 by default;
    /// `[V6]:PORT` for IPv6), a name or an address; each address a name resolves to is
    /// tried in turn.
    #[arg(long)]
    target: Option<String>,
    /// A machine of many boards, by its root board: HOST or HOST:PORT (port 17893 by
    /// default). The machine is discovered and the request goes through the board the
    /// chip is on.
    #[arg(long)]
    machine: Option<String>,
    /// Chip and core: X,Y or X,Y,P.
    #[arg(long, default_value = "0,0,0")]
    chip: Chip,
    /// Start address, hexadecimal (0x60000000).
    #[arg(long, value_parser = hex)]
    addr: u32,
    /// `udp`, or `tcp` for volley's emulator's framed TCP port (not with --machine).
    #[arg(long, default_value = "udp")]
    transport: Transport,
    #[command(flatten)]
    tuning: Tuning,
}

/// How the client drives a board.
#[derive(Debug, clap::Args)]
pub(crate) struct Tuning {
    /// Requests in flight, 1 to 1024 (SCP boards take 8), or `auto` to size it from the
    /// board's tag pool.
    #[arg(long, default_value = "8")]
    window: Window,
    /// A fixed retransmit timeout in milliseconds, 1 to 3600000 (default: estimated from
    /// the RTT, 100 ms before the first sample, doubling on each resend up to 2 s).
    #[arg(long, value_parser = timeout_ms)]
    timeout_ms: Option<u64>,
    /// Sends per request before giving up, at least 1. A board that never answers fails
    /// a request after the sum of its timeouts: with the defaults 100 + 200 + 400 + 800 +
    /// 1600 + 3 x 2000 ms = 9.1 s; with --timeout-ms T, tries x T.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..))]
    tries: u32,
}

#[derive(Clone, Copy, Debug)]
struct Chip(Address);

#[derive(Clone, Copy, Debug)]
pub(crate) struct Window(pub(crate) WindowSize);

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
            Ok(n) if (1..=MAX_WINDOW).contains(&n) => Ok(Self(WindowSize::Fixed(n))),
            _ => Err(format!(
                "--window takes a number from 1 to {MAX_WINDOW} (SCP boards take 8) or `auto`, not `{s}`"
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

fn timeout_ms(s: &str) -> Result<u64, String> {
    let max = MAX_TIMEOUT.as_millis();
    match s.parse::<u64>() {
        Ok(ms) if (1..=max).contains(&ms) => Ok(ms),
        _ => Err(format!(
            "--timeout-ms takes 1 to {max} milliseconds, not `{s}`"
        )),
    }
}

/// Bytes of file read ahead of the window.
const READ_AHEAD: usize = 64 * 1024;

pub(crate) async fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Write { target, len, file } => {
            let (mut source, len) = open_source(&file, len)?;
            check_range(target.addr, len as usize)?;
            let mut connection = connect(&target).await?;
            let client = connection.client(&target)?;
            let bar = progress(len);
            let start = Instant::now();
            let mut reader = BufReader::with_capacity(READ_AHEAD, &mut source);
            client
                .execute_with_progress(
                    &mut [Op::WriteFrom {
                        chip: target.chip.0,
                        address: target.addr,
                        len,
                        source: Source(&mut reader),
                    }],
                    progress_feed(&bar),
                )
                .await
                .with_context(|| file.display().to_string())?;
            bar.finish_and_clear();
            report("write", len, start.elapsed());
            Ok(())
        }
        Command::Read {
            target,
            len,
            output,
        } => {
            let len = usize::try_from(len).map_err(|_| anyhow!("--len {len} is too large"))?;
            check_range(target.addr, len)?;
            let out = Output::open(&output)?;
            let result = async {
                let mut connection = connect(&target).await?;
                let client = connection.client(&target)?;
                let mut data = vec![0u8; len];
                let bar = progress(len as u32);
                let start = Instant::now();
                let read = client
                    .execute_with_progress(
                        &mut [Op::Read {
                            chip: target.chip.0,
                            address: target.addr,
                            buf: &mut data,
                        }],
                        progress_feed(&bar),
                    )
                    .await;
                bar.finish_and_clear();
                read?;
                anyhow::Ok((data, start.elapsed()))
            }
            .await;
            match result {
                Ok((data, elapsed)) => {
                    out.commit(&data)?;
                    report("read", len as u32, elapsed);
                    Ok(())
                }
                Err(e) => {
                    out.abandon();
                    Err(e)
                }
            }
        }
    }
}

/// The file to write and how many bytes of it: its size for a regular file (checked
/// against `--len`), `--len` itself for anything else (a pipe, a device).
fn open_source(path: &Path, len: Option<u64>) -> anyhow::Result<(File, u32)> {
    let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let meta = file
        .metadata()
        .with_context(|| format!("cannot stat {}", path.display()))?;
    if meta.is_dir() {
        bail!("{} is a directory", path.display());
    }
    let len = match (meta.is_file(), len) {
        (true, Some(n)) if n > meta.len() => {
            bail!(
                "--len {n} is more than the {} bytes of {}",
                meta.len(),
                path.display()
            );
        }
        (true, n) => n.unwrap_or(meta.len()),
        (false, Some(n)) => n,
        (false, None) => {
            bail!(
                "{} is not a regular file, so its size is unknown: say how many bytes to write with --len",
                path.display()
            );
        }
    };
    let len = u32::try_from(len).map_err(|_| {
        anyhow!(
            "{} is {len} bytes: more than the 4 GiB address space",
            path.display()
        )
    })?;
    Ok((file, len))
}

/// `scp read`'s output, opened before anything is read. An existing file is left as it
/// is until the read succeeds; a file created here is removed if it fails.
struct Output {
    file: File,
    path: PathBuf,
    created: bool,
}

impl Output {
    fn open(path: &Path) -> anyhow::Result<Self> {
        let existed = path.exists();
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .with_context(|| format!("cannot open {} for writing", path.display()))?;
        Ok(Self {
            file,
            path: path.to_owned(),
            created: !existed,
        })
    }

    fn commit(mut self, data: &[u8]) -> anyhow::Result<()> {
        let regular = self.file.metadata().is_ok_and(|m| m.is_file());
        let result = (|| {
            if regular {
                self.file.set_len(0)?;
                self.file.rewind()?;
            }
            self.file.write_all(data)?;
            self.file.flush()
        })();
        result.with_context(|| format!("cannot write {}", self.path.display()))
    }

    fn abandon(self) {
        if self.created {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

impl Tuning {
    /// The client's settings.
    pub(crate) fn config(&self) -> ScpConfig {
        let mut config = ScpConfig {
            window: self.window.0,
            max_tries: self.tries,
            ..ScpConfig::default()
        };
        if let Some(ms) = self.timeout_ms {
            config.rto = Rto::Fixed(Duration::from_millis(ms));
        }
        config
    }
}

/// A board, or a discovered machine.
enum Connection {
    Board(Box<ScpClient>),
    Machine(Machine),
}

impl Connection {
    /// The client that reaches the target's chip.
    fn client(&mut self, target: &Target) -> anyhow::Result<&mut ScpClient> {
        match self {
            Self::Board(client) => Ok(client),
            Self::Machine(machine) => {
                let Address { x, y, .. } = target.chip.0;
                Ok(machine.client_for(x, y)?)
            }
        }
    }
}

/// Discovers the machine at ROOT (HOST or HOST:PORT, 17893 by default): for `volley scp
/// --machine` and for `volley machine`, which builds on this module.
pub(crate) async fn discover(root: &str, config: ScpConfig) -> anyhow::Result<Machine> {
    Machine::discover_host(root, config)
        .await
        .with_context(|| format!("cannot discover the machine at {root}"))
}

async fn connect(target: &Target) -> anyhow::Result<Connection> {
    let config = target.tuning.config();
    if let Some(root) = &target.machine {
        if target.transport == Transport::Tcp {
            bail!("--transport tcp conflicts with --machine: a machine's boards speak UDP");
        }
        let machine = discover(root, config).await?;
        return Ok(Connection::Machine(machine));
    }
    let Some(board) = &target.target else {
        bail!("say which board with --target, or which machine with --machine");
    };
    ScpClient::connect_host(board, target.transport == Transport::Tcp, config)
        .await
        .map(|client| Connection::Board(Box::new(client)))
        .with_context(|| format!("cannot reach {board}"))
}

/// A progress bar on a terminal, a hidden one otherwise.
fn progress(len: u32) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(u64::from(len));
    if let Ok(style) =
        ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}")
    {
        bar.set_style(style);
    }
    bar
}

/// What the client calls with its progress: the bar moves every 256 KiB (the client
/// reports every batch of replies, and a bar's update costs more than a batch's worth of
/// bookkeeping); a hidden bar costs nothing.
fn progress_feed(bar: &ProgressBar) -> impl FnMut(u64) + '_ {
    const EVERY: u64 = 256 * 1024;
    let hidden = bar.is_hidden();
    let mut shown = 0;
    move |done| {
        if !hidden && done - shown >= EVERY {
            shown = done;
            bar.set_position(done);
        }
    }
}

fn report(what: &str, bytes: u32, elapsed: core::time::Duration) {
    let mbit = mbit(u64::from(bytes));
    eprintln!(
        "Finished {what} after {} ms. Throughput = {:.2} Mbit/s",
        elapsed.as_millis(),
        mbit / elapsed.as_secs_f64().max(1e-9)
    );
}

/// Mbit as the seed's scripts count it: 2^20 bits.
pub(crate) fn mbit(bytes: u64) -> f64 {
    bytes as f64 * 8.0 / f64::from(1u32 << 20)
}
