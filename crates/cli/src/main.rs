//! `volley`: run a SpiNNaker board emulator, a link simulator, SCP and SFTP transfers,
//! and the RPC bench service.
//!
//! ```text
//! volley emulate --udp 127.0.0.1:17893 --tcp 127.0.0.1:17894
//! volley netsim --listen 127.0.0.1:17900 --upstream 127.0.0.1:17893 --delay-ms 0.5 --loss 0.01
//! volley scp write --target 127.0.0.1:17900 --addr 0x60000000 --window auto data.bin
//! volley scp read --target 127.0.0.1:17900 --addr 0x60000000 --len 10485760 -o back.bin
//! volley sftp put big.bin /dev/shm/big.bin
//! volley rpc serve --listen 127.0.0.1:17910
//! volley rpc bench --connect 127.0.0.1:17910 --call put --payload 1048576 --concurrency 4
//! ```

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod args;
mod emulate;
mod log;
mod machine;
mod netsim;
mod rpc;
mod scp;
mod sftp;
mod sftp_command;
mod sftp_remote;
mod sftp_tree;

/// volley: fast request/response transports, and the tools to measure them.
#[derive(Debug, Parser)]
#[command(name = "volley", version, about)]
struct Cli {
    /// Log more: -v for what the libraries report as info, -vv debug, -vvv trace
    /// (RUST_LOG, if set, says exactly what, as tracing-subscriber's EnvFilter reads it).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run an emulated SpiNNaker board until SIGINT or SIGTERM.
    Emulate(emulate::Args),
    /// Run the link simulator (a UDP relay) until SIGINT or SIGTERM.
    Netsim(netsim::Args),
    /// Read or write a board's memory over SCP.
    #[command(subcommand)]
    Scp(scp::Command),
    /// Discover a machine of many boards, or load and read back every chip of it.
    #[command(subcommand)]
    Machine(machine::Command),
    /// Copy files over SFTP with many requests in flight.
    #[command(subcommand)]
    Sftp(sftp::SftpCommand),
    /// Serve or drive the RPC bench service.
    #[command(subcommand)]
    Rpc(rpc::Command),
    /// Serve SFTP on standard input and output, for sshd's `Subsystem sftp` line
    /// (OpenSSH sftp-server's options; `volley sftp-server -h` lists them).
    #[command(name = "sftp-server", disable_help_flag = true)]
    SftpServer(SftpServerArgs),
}

/// `volley sftp-server`'s arguments, passed as they are to volley-sftp-server's own
/// parser (OpenSSH's single-letter options).
#[derive(clap::Args, Debug)]
struct SftpServerArgs {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<String>,
}

/// The tokio runtime a command runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Runtime {
    /// One thread: every task on the thread that started it (volley's readers spin there
    /// for a moment before they sleep, which pays when it has a core to itself).
    Current,
    /// tokio's default multi-thread runtime, a worker per core (what `#[tokio::main]`
    /// gives).
    Multi,
}

impl Runtime {
    fn build(self) -> std::io::Result<tokio::runtime::Runtime> {
        match self {
            Self::Current => tokio::runtime::Builder::new_current_thread(),
            Self::Multi => tokio::runtime::Builder::new_multi_thread(),
        }
        .enable_all()
        .build()
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::SftpServer(server) = cli.command {
        // Threads of its own, no runtime: what sshd spawns per session starts at once.
        return volley_sftp_server::main_with(server.args.into_iter());
    }
    let lines = logging(cli.verbose);
    let kind = match &cli.command {
        Command::Rpc(command) => command.runtime(),
        _ => Runtime::Current,
    };
    let runtime = match kind.build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("volley: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Emulate(args) => emulate::run(args).await,
            Command::Netsim(args) => netsim::run(args).await,
            Command::Scp(command) => scp::run(command).await,
            Command::Machine(command) => machine::run(command).await,
            Command::Sftp(command) => sftp_command::run(command).await,
            Command::Rpc(command) => rpc::run(command, cli.verbose > 0).await,
            Command::SftpServer(_) => unreachable!("served before the runtime starts"),
        }
    });
    if let Some(lines) = lines {
        lines.flush(core::time::Duration::from_secs(1));
    }
    // A blocking task still running (an open(2) of a FIFO no writer opened) must not
    // keep the process from ending: dropping the runtime would wait for it.
    runtime.shutdown_background();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("volley: {}", chain(&e));
            match e.downcast_ref::<Interrupted>() {
                // As a shell reports a command SIGINT ended: 128 + 2.
                Some(_) => ExitCode::from(130),
                None => ExitCode::FAILURE,
            }
        }
    }
}

/// A command ended by Ctrl-C, and what it left behind.
#[derive(Debug)]
pub(crate) struct Interrupted(pub(crate) String);

impl core::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(&self.0)
    }
}

impl core::error::Error for Interrupted {}

/// An error and its causes on one line, `what: why: deeper why`. A cause whose text the
/// line already holds is left out: the libraries' messages often end with their cause.
fn chain(e: &anyhow::Error) -> String {
    let mut line = e.to_string();
    for cause in e.chain().skip(1) {
        let text = cause.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
    }
    line
}

/// Sends the libraries' `tracing` events to stderr through a bounded queue ([`log`]):
/// warnings and errors by default, more with each -v, or whatever RUST_LOG asks for.
fn logging(verbose: u8) -> Option<log::Lines> {
    use tracing_subscriber::EnvFilter;
    let level = match verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level));
    // Only fails if a subscriber is already set, which nothing else here does.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let Ok(lines) = log::Lines::start() else {
        // No thread for the log: write in place, as before.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(ansi)
            .with_writer(std::io::stderr)
            .try_init();
        return None;
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(lines.clone())
        .try_init();
    Some(lines)
}

/// Waits for SIGINT or SIGTERM.
async fn shutdown_signal() -> anyhow::Result<()> {
    use anyhow::Context;
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("cannot watch SIGTERM")?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("cannot watch SIGINT"),
        _ = term.recv() => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::chain;

    /// An error whose message ends with its cause's, as the libraries' errors do.
    #[derive(Debug)]
    struct Repeats(std::io::Error);

    impl core::fmt::Display for Repeats {
        fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
            write!(f, "socket error: {}", self.0)
        }
    }

    impl core::error::Error for Repeats {
        fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn chain_names_every_cause_once() {
        let io = || std::io::Error::new(std::io::ErrorKind::NotFound, "no such board");
        let bare = anyhow::Error::new(io()).context("cannot reach 10.0.0.1:17893");
        assert_eq!(chain(&bare), "cannot reach 10.0.0.1:17893: no such board");
        let repeated = anyhow::Error::new(Repeats(io())).context("cannot reach 10.0.0.1:17893");
        assert_eq!(
            chain(&repeated),
            "cannot reach 10.0.0.1:17893: socket error: no such board"
        );
    }
}
